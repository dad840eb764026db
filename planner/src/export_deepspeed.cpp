// DeepSpeed export and import. The config holds only keys DeepSpeed's engine reads
// (deepspeed/runtime/config.py, zero/config.py, zero/offload_config.py, precision_config.py,
// activation_checkpointing/config.py; the commit and the key list are data in
// tests/planner/data/deepspeed_config.json). What DeepSpeed takes from the model code instead, the
// pipeline's stage count (PipelineModule(num_stages=...)) and which layers are checkpointed, is
// returned as `model_code`, never as config keys DeepSpeed would ignore.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/lowering/frameworks.hpp"
#include "strata/planner/export.hpp"

namespace strata::planner {

using namespace strata::sim;

namespace {

std::string tier_device(const TierSplit& t) {
    if (t.ssd > 0) return "nvme";
    if (t.cpu > 0) return "cpu";
    return "none";
}

bool is_split(const TierSplit& t) {
    int n = (t.gpu > 0) + (t.cpu > 0) + (t.ssd > 0);
    return n > 1;
}

}  // namespace

ExportResult export_deepspeed(const ModelSpec& m, const PlanSpec& p) {
    ExportResult r;
    nlohmann::ordered_json j;
    const int gas = p.micro_batches();
    // DeepSpeed asserts train_batch_size = micro x gas x its data-parallel world size.
    j["train_batch_size"] = p.global_batch;
    j["train_micro_batch_size_per_gpu"] = p.micro_batch;
    j["gradient_accumulation_steps"] = gas;
    nlohmann::ordered_json z;
    // DeepSpeed's PipelineEngine asserts a stage below 2 ("ZeRO-2 and ZeRO-3 are incompatible with
    // pipeline parallelism", pipe/engine.py): a pipelined plan with ZeRO-2/3 gets stage 1 and a note.
    const int stage = p.pp > 1 ? std::min(p.zero_stage, 1) : p.zero_stage;
    if (stage != p.zero_stage)
        r.unsupported.push_back("ZeRO stage " + std::to_string(p.zero_stage) + " with " + std::to_string(p.pp) +
                                " pipeline stages (DeepSpeed's pipeline engine allows stages 0 and 1): written as stage 1");
    z["stage"] = stage;
    z["overlap_comm"] = p.overlap_grad_reduce;
    z["contiguous_gradients"] = true;
    const auto bucket_elements = static_cast<std::int64_t>(static_cast<double>(p.dp_bucket_bytes) / p.grad_bytes());  // DeepSpeed counts elements
    z["reduce_bucket_size"] = bucket_elements;
    if (stage == 3) {
        // A prefetch bucket of 0 turns ZeRO-3's parameter prefetch off (stage3_prefetch_bucket_size).
        z["stage3_prefetch_bucket_size"] = p.overlap_param_gather ? bucket_elements : 0;
        z["stage3_param_persistence_threshold"] = 100000;
    }
    const std::string od = tier_device(p.offload.optimizer);
    if (od != "none") {
        nlohmann::ordered_json o;
        o["device"] = od;
        o["pin_memory"] = true;
        if (od == "nvme") o["nvme_path"] = "/local_nvme";
        // DeepSpeed offloads part of the optimizer (ratio < 1) only under ZeRO-3.
        if (is_split(p.offload.optimizer)) {
            if (stage == 3) o["ratio"] = 1.0 - p.offload.optimizer.gpu;
            else r.unsupported.push_back("a partial optimizer offload below ZeRO-3 (DeepSpeed's ratio needs stage 3): the whole optimizer goes to " + od);
        }
        z["offload_optimizer"] = o;
    }
    const std::string pd = tier_device(p.offload.params);
    // DeepSpeed hands offload_param to the ZeRO-3 optimizer only.
    if (pd != "none" && stage != 3) r.unsupported.push_back("parameter offload below ZeRO-3 (DeepSpeed offloads parameters only under stage 3)");
    if (pd != "none" && stage == 3) {
        nlohmann::ordered_json o;
        o["device"] = pd;
        o["pin_memory"] = true;
        if (pd == "nvme") o["nvme_path"] = "/local_nvme";
        z["offload_param"] = o;
    }
    j["zero_optimization"] = z;
    if (p.precision == Precision::bf16 || p.precision == Precision::fp8) j["bf16"] = {{"enabled", true}};
    if (p.fp32_grads) {
        j["data_types"] = {{"grad_accum_dtype", "fp32"}};
        j["communication_data_type"] = "fp32";
    }
    if (p.precision == Precision::fp16) j["fp16"] = {{"enabled", true}, {"loss_scale", 0}};
    if (p.recompute != Recompute::none) {
        // Read by deepspeed.checkpointing.configure(); the recompute itself is the model code's
        // checkpoint() calls.
        j["activation_checkpointing"] = {{"partition_activations", p.sequence_parallel},
                                         {"contiguous_memory_optimization", false},
                                         {"cpu_checkpointing", !p.offload.activations.all_gpu()}};
        const int layers = p.recompute == Recompute::full && p.recompute_layers >= 0 ? p.recompute_layers : -1;
        if (p.recompute == Recompute::full && p.recompute_every > 0)
            r.model_code.push_back("checkpoint every " + std::to_string(p.recompute_every) + "-th layer of each stage (its " +
                                   std::to_string(p.recompute_every) + "th, " + std::to_string(2 * p.recompute_every) +
                                   "th, ...) with deepspeed.checkpointing.checkpoint");
        else if (layers >= 0)
            r.model_code.push_back("checkpoint the first " + std::to_string(layers) + " layers of each stage with deepspeed.checkpointing.checkpoint");
        else if (p.pp == 1)
            r.model_code.push_back("checkpoint every layer with deepspeed.checkpointing.checkpoint, after deepspeed.checkpointing.configure(mpu, deepspeed_config=...)");
    }
    if (p.pp > 1 && p.recompute != Recompute::none && p.recompute_layers < 0 && p.recompute_every == 0) {
        // Read by the PipelineEngine: it checkpoints every `interval` layers of the PipelineModule.
        j["pipeline"] = {{"activation_checkpoint_interval", 1}};
    }
    if (p.pp > 1) {
        std::string split;
        for (int n : stage_layers(m, p)) {
            if (!split.empty()) split += ',';
            split += std::to_string(n);
        }
        r.model_code.push_back("PipelineModule(num_stages=" + std::to_string(p.pp) + ", partition_method='uniform') over the " +
                               std::to_string(m.layers) + " layers; the plan's layers per stage: " + split);
    }
    if (p.tp > 1) r.model_code.push_back("tensor parallelism " + std::to_string(p.tp) + " (Megatron-DeepSpeed: --tensor-model-parallel-size " + std::to_string(p.tp) + ")");
    if (p.ep > 1) r.model_code.push_back("expert parallelism: deepspeed.moe.layer.MoE(..., ep_size=" + std::to_string(p.ep) + ")");
    if (p.vocab_divisible_by > 1)
        r.model_code.push_back("the embedding and output tables padded to a multiple of " + std::to_string(p.vocab_divisible_by) +
                               " x tp rows (Megatron-DeepSpeed: --make-vocab-size-divisible-by " + std::to_string(p.vocab_divisible_by) + ")");
    if (m.mtp_depth > 0) r.unsupported.push_back("multi-token prediction modules (configured in the model code)");
    // Only ZeRO-2 under overlap_comm has the wait to leave out (stop 66's knob).
    if (!p.bucket_reduce_barrier && p.zero_stage == 2 && p.overlap_grad_reduce)
        r.unsupported.push_back("reductions without a wait between buckets (DeepSpeed's ZeRO-2 under overlap_comm waits for the earlier "
                                "buckets' reductions before each one: average_tensor)");
    if (p.cpu_grad_accumulation)
        r.unsupported.push_back("gradients summed over micro-batches on the host (FSDP's CPU offload; DeepSpeed brings the host's sum up "
                                "and adds it on the GPU, async_accumulate_grad_in_cpu_via_gpu)");
    const bool drops = m.is_moe() && m.moe->capacity_factor > 0;
    if (!p.moe_pad_to_capacity && (drops || p.framework == "deepspeed" || p.framework == "megatron-deepspeed-2022"))
        r.unsupported.push_back("token dropping without padding to the capacity (DeepSpeed-MoE's gating pads every expert to its "
                                "capacity; Megatron-Core's --moe-pad-expert-input-to-capacity off)");
    if (p.cp > 1) r.unsupported.push_back("context parallelism (DeepSpeed-Ulysses is configured in the model code)");
    if (p.moe_dispatcher == MoeDispatcher::deepep) r.unsupported.push_back("DeepEP token dispatcher (Megatron-Core's flex dispatcher)");
    if (m.is_moe() && p.moe_probs_at == MoeProbsAt::fc2_input)
        r.unsupported.push_back("router weights applied before fc2 (DeepSpeed-MoE weights the expert outputs at its combine and keeps them)");
    if (p.sequence_parallel && p.tp > 1) r.unsupported.push_back("Megatron sequence parallelism");
    if (p.schedule == Schedule::interleaved_1f1b) r.unsupported.push_back("interleaved 1F1B (virtual stages)");
    if (p.torch_pipelining)
        r.unsupported.push_back("torch.distributed.pipelining's buffers (DeepSpeed's PipelineEngine keeps its own pipe buffers)");
    if (p.schedule == Schedule::dualpipe_v) r.unsupported.push_back("DualPipeV schedule (deepseek-ai/DualPipe)");
    if (p.recompute == Recompute::selective) r.unsupported.push_back("selective recomputation (DeepSpeed checkpoints whole layers)");
    // Fused or not matters where a sum is kept: several micro-batches, or fp32 sums (also under
    // ZeRO-2/3, whose unfused adds go into the shard).
    if (p.grad_accum_fusion && (p.micro_batches() > 1 || p.grad_bytes() > 2))
        r.unsupported.push_back("fused gradient accumulation (DeepSpeed's engine adds each micro-batch's gradients with a separate kernel: "
                                "simulate with plan.grad_accum_fusion false)");
    if (p.precision == Precision::fp8) r.unsupported.push_back("fp8 (needs Transformer Engine)");
    if (p.pp > 1 && !p.p2p_blocking)
        r.unsupported.push_back("pipeline send/recv beside the compute (DeepSpeed's PipelineEngine sends and receives on the compute stream)");
    if (p.pp > 1 && p.tp > 1 && !p.sequence_parallel && !p.p2p_scatter_gather)
        r.unsupported.push_back("whole pipeline tensors on every TP rank (DeepSpeed's PipelineEngine partitions them over the TP group)");
    if (p.pp > 1 && p.schedule == Schedule::gpipe)
        r.unsupported.push_back("the GPipe schedule (DeepSpeed's PipelineEngine runs its own 1F1B TrainSchedule)");
    if (stage >= 1 && stage < 3 && p.overlap_param_gather && p.dp * p.cp > 1)
        r.unsupported.push_back("an overlapped parameter all-gather below ZeRO-3 (DeepSpeed gathers the updated parameters inside the optimizer step)");
    const std::string fw = p.framework.empty() ? "" : canonical_framework(p.framework);
    if (fw == "megatron-deepspeed-2022")
        r.model_code.push_back("Megatron-DeepSpeed's model code (2022): its kernels, and the knobs of plan.framework = \"megatron-deepspeed-2022\"");
    else if (!fw.empty() && fw != "deepspeed")
        r.unsupported.push_back("plan.framework = \"" + fw + "\" (the simulation assumed its engine; this config runs DeepSpeed's)");
    // The kernels the plan was simulated with live in the model code, not in the config.
    r.model_code.push_back(!p.flash_attention ? std::string("attention without a fused kernel (the s x s scores materialised)")
                                              : std::string("fused attention: FlashAttention ") + (p.attention_kernel == AttentionKernel::fa1 ? "1" : p.attention_kernel == AttentionKernel::fa2 ? "2" : "3"));
    r.model_code.push_back(p.eager_elementwise ? "norms, activations and residual adds as eager PyTorch ops" : "fused norm, activation and residual kernels");
    r.model_code.push_back(p.eager_cross_entropy ? "the loss as F.cross_entropy(logits.float(), labels)"
                           : p.loss_upcast       ? "a fused cross-entropy on fp32 logits"
                                                 : "a fused cross-entropy on the logits in their own type");
    if (p.exp_avg_dtype != Precision::fp32 || p.exp_avg_sq_dtype != Precision::fp32)
        r.unsupported.push_back("Adam moments below fp32 (Megatron's precision-aware optimizer)");
    if (!p.tp_overlap_rs_fp8) r.unsupported.push_back("TP overlap's reduce-scatter in bf16 under FP8 (torchtitan's async TP)");
    if (p.cp_comm_type == CpCommType::allgather)
        r.unsupported.push_back("context parallelism by K/V all-gather (DeepSpeed's sequence parallelism is Ulysses)");
    if (p.cp_comm_type == CpCommType::a2a)
        r.model_code.push_back("Ulysses over the " + std::to_string(p.cp) + " context-parallel ranks: deepspeed.sequence.layer."
                               "DistributedAttention around the attention core (Megatron-DeepSpeed --ds-sequence-parallel-size)");
    if (!p.master_weights) r.unsupported.push_back("pure 16-bit weights without an fp32 master (DeepSpeed's optimizers keep one)");
    if (p.fsdp_fp32_shards())
        r.unsupported.push_back("PyTorch FSDP's fp32 parameter shards (ZeRO-3 keeps 16-bit partitions beside fp32 ones)");
    // Tensor parallelism in the model code (Megatron-DeepSpeed's layers) orders its collectives on
    // one hardware queue, as Megatron does.
    if (p.tp > 1) r.env.emplace_back("CUDA_DEVICE_MAX_CONNECTIONS", "1");
    if (p.expandable_segments) r.env.emplace_back("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True");
    if (p.lock_free_update) r.unsupported.push_back("lock-free optimizer update (Angel-PTM; DeepSpeed's ZeRO-Offload has a similar one-step delayed update)");
    if (!p.offload.activations.all_gpu() && p.recompute == Recompute::none) r.unsupported.push_back("activation offload without checkpointing");
    if (is_split(p.offload.params)) r.unsupported.push_back("fractional parameter offload");
    // DeepSpeed homes the reduced gradients where its optimizer runs.
    const TierSplit ds_grads = deepspeed_gradient_tiers(stage, p.offload.optimizer);
    const TierSplit& g = p.offload.grads;
    if (std::abs(g.gpu - ds_grads.gpu) > 1e-9 || std::abs(g.ssd - ds_grads.ssd) > 1e-9)
        r.unsupported.push_back(std::string("gradients homed as the plan has them: DeepSpeed keeps the reduced gradient partition where "
                                            "its optimizer runs (") + (ds_grads.all_gpu() ? "here on the GPU" : "here in host memory") + ")");
    if (is_split(p.offload.optimizer) && od == "nvme") r.unsupported.push_back("fractional NVMe optimizer offload");
    if (od == "nvme" && stage < 3)
        r.unsupported.push_back("NVMe optimizer offload below ZeRO-3 (DeepSpeed's ZeRO-1/2 optimizer runs an nvme device as CPU "
                                "offload: the state stays in host memory)");
    r.text = j.dump(2) + "\n";
    return r;
}

namespace {

PlanSpec read_deepspeed(const nlohmann::json& j, int gpus, const DeepSpeedModelCode& code, const std::string& file) {
    if (!j.is_object()) throw InputError(file, "", "is not a DeepSpeed config (a JSON object)");
    auto positive = [&](const char* key, bool required) -> int {
        if (!j.contains(key)) {
            if (required) throw InputError(file, key, "is required");
            return 0;
        }
        const auto& v = j.at(key);
        if (!v.is_number_integer() || v.get<long long>() <= 0 || v.get<long long>() > (1LL << 30))
            throw InputError(file, key, "must be a positive integer (got " + v.dump() + ")");
        return v.get<int>();
    };
    PlanSpec p;
    p.tp = code.tp;
    p.pp = code.pp;
    p.ep = code.ep;
    const int model_ranks = p.tp * p.pp;
    if (gpus % model_ranks != 0)
        throw InputError(file, "--tp x --pp", std::to_string(model_ranks) + " does not divide the GPU count " + std::to_string(gpus));
    p.dp = gpus / model_ranks;
    const int train = positive("train_batch_size", false), micro = positive("train_micro_batch_size_per_gpu", true);
    int gas = positive("gradient_accumulation_steps", false);
    // DeepSpeed fills in one of the three from the other two and the data-parallel size.
    if (gas == 0) gas = train > 0 ? train / std::max(1, micro * p.dp) : 1;
    const long long expect = static_cast<long long>(micro) * gas * p.dp;
    if (train > 0 && train != expect)
        throw InputError(file, "train_batch_size",
                         "= " + std::to_string(train) + " is not train_micro_batch_size_per_gpu x gradient_accumulation_steps x the " +
                             std::to_string(p.dp) + " data-parallel ranks (" + std::to_string(expect) + "), as DeepSpeed requires");
    if (expect > (1LL << 20)) throw InputError(file, "train_batch_size", "exceeds 2^20 sequences");
    p.micro_batch = micro;
    p.global_batch = static_cast<int>(expect);
    p.precision = Precision::fp32;
    auto enabled = [&](const char* key) { return j.contains(key) && j.at(key).is_object() && j.at(key).value("enabled", false); };
    if (enabled("bf16") && enabled("fp16")) throw InputError(file, "bf16.enabled", "and fp16.enabled cannot both be true (DeepSpeed asserts it)");
    if (enabled("bf16")) p.precision = Precision::bf16;
    if (enabled("fp16")) p.precision = Precision::fp16;
    if (j.contains("data_types") && j.at("data_types").is_object())
        p.fp32_grads = j.at("data_types").value("grad_accum_dtype", "") == "fp32" && p.precision != Precision::fp32;
    // What the config does not say is DeepSpeed's (its preset, with the stated fields above and
    // the ZeRO stage below); the config's own keys override it.
    p.framework = "deepspeed";
    p.overlap_grad_reduce = false;
    if (j.contains("zero_optimization")) {
        const auto& z = j.at("zero_optimization");
        if (!z.is_object()) throw InputError(file, "zero_optimization", "must be an object");
        const auto stage = z.value("stage", 0);
        if (stage < 0 || stage > 3) throw InputError(file, "zero_optimization.stage", "must be 0..3 (got " + std::to_string(stage) + ")");
        p.zero_stage = stage;
        // DeepSpeed's default: overlap_comm on for ZeRO-3 only.
        p.overlap_grad_reduce = z.contains("overlap_comm") && z.at("overlap_comm").is_boolean() ? z.at("overlap_comm").get<bool>() : stage == 3;
        if (z.contains("reduce_bucket_size") && z.at("reduce_bucket_size").is_number() && z.at("reduce_bucket_size").get<double>() > 0)
            p.dp_bucket_bytes = static_cast<std::int64_t>(z.at("reduce_bucket_size").get<double>() * p.grad_bytes());
        auto tier = [&](const char* key, TierSplit& t) {
            if (!z.contains(key) || !z.at(key).is_object()) return;
            const std::string dev = z.at(key).value("device", "none");
            const double ratio = z.at(key).value("ratio", 1.0);
            if (ratio < 0 || ratio > 1) throw InputError(file, std::string("zero_optimization.") + key + ".ratio", "must be in [0, 1]");
            if (dev == "cpu") t = {1.0 - ratio, ratio, 0.0};
            else if (dev == "nvme") t = {1.0 - ratio, 0.0, ratio};
            else if (dev != "none") throw InputError(file, std::string("zero_optimization.") + key + ".device", "must be none, cpu or nvme (got \"" + dev + "\")");
        };
        tier("offload_optimizer", p.offload.optimizer);
        // Below ZeRO-3 DeepSpeed's optimizer (stage_1_and_2.py) takes any device but none as CPU
        // offload, wholly (no swapper, no ratio).
        if (stage < 3 && !p.offload.optimizer.all_gpu()) p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
        // With the optimizer offloaded, ZeRO-2 and 3 keep the reduced gradient partition in host
        // memory (the preset completes a whole offload the same way; a ZeRO-3 ratio needs it here).
        p.offload.grads = deepspeed_gradient_tiers(stage, p.offload.optimizer);
        tier("offload_param", p.offload.params);
    }
    const bool overlap_comm_stated = j.contains("zero_optimization") && j.at("zero_optimization").contains("overlap_comm");
    const bool overlap_comm = p.overlap_grad_reduce;
    apply_framework(p);
    if (overlap_comm_stated) p.overlap_grad_reduce = overlap_comm;
    // Below ZeRO-3 DeepSpeed gathers the updated parameters inside the optimizer step; ZeRO-3
    // prefetches them unless its prefetch bucket is 0.
    const bool prefetch = !j.contains("zero_optimization") || j.at("zero_optimization").value("stage3_prefetch_bucket_size", 1.0) != 0.0;
    p.overlap_param_gather = p.zero_stage == 3 && prefetch;
    // Recomputation is on when the model code checkpoints its layers, or the PipelineEngine does.
    const bool pipe_checkpoints = j.contains("pipeline") && j.at("pipeline").is_object() && j.at("pipeline").value("activation_checkpoint_interval", 0) > 0;
    if (code.checkpoint_layers || (pipe_checkpoints && p.pp > 1)) p.recompute = Recompute::full;
    // deepspeed.checkpointing's cpu_checkpointing keeps the checkpointed layer inputs in host memory.
    const auto& ac = j.contains("activation_checkpointing") && j.at("activation_checkpointing").is_object() ? j.at("activation_checkpointing") : nlohmann::json::object();
    if (p.recompute != Recompute::none && ac.value("cpu_checkpointing", false)) p.offload.activations = TierSplit{0.0, 1.0, 0.0};
    if (p.zero_stage >= 2 && p.pp > 1)
        throw InputError(file, "zero_optimization.stage", "= " + std::to_string(p.zero_stage) + " does not run with pipeline stages "
                                                         "(DeepSpeed's pipeline engine: ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism)");
    return p;
}

}  // namespace

PlanSpec plan_from_deepspeed_config(const std::string& json_text, int gpus, const DeepSpeedModelCode& code, const std::string& file) {
    const nlohmann::json j = parse_json_text(json_text, file);
    try {
        return read_deepspeed(j, gpus, code, file);
    } catch (const nlohmann::json::exception& e) {
        // a key of the wrong JSON type (e.g. "stage": "3")
        throw InputError(file, "", std::string("has a value of the wrong type for DeepSpeed: ") + e.what());
    }
}

}  // namespace strata::planner
