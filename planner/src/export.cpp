// Megatron-LM and DeepSpeed exports. Flag names follow megatron/training/arguments.py; DeepSpeed
// keys follow the DeepSpeed config documentation (zero_optimization, offload_optimizer, ...).
#include "strata/planner/export.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "strata/common/error.hpp"

namespace strata::planner {

using namespace strata::sim;

namespace {

constexpr const char* kExpandableNote =
    "expandable allocator segments, an environment setting: launch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";

std::string tier_device(const TierSplit& t) {
    if (t.ssd > 0) return "nvme";
    if (t.cpu > 0) return "cpu";
    return "none";
}

bool is_split(const TierSplit& t) {
    int n = (t.gpu > 0) + (t.cpu > 0) + (t.ssd > 0);
    return n > 1;
}

/// Megatron-Core's --pipeline-model-parallel-layout for a hand-laid interleaved pipeline: one
/// '|'-separated stage per virtual stage, E = embedding, t = decoder layer, m = MTP module,
/// L = loss (e.g. DeepSeek-V3's "Et|tt|...|tt|mL").
std::string megatron_layout(const ModelSpec& m, const PlanSpec& p) {
    std::string out;
    const std::size_t n = p.virtual_layer_split.size();
    for (std::size_t i = 0; i < n; ++i) {
        if (i) out += '|';
        if (i == 0) out += 'E';
        out += std::string(static_cast<std::size_t>(p.virtual_layer_split[i]), 't');
        if (i + 1 == n) out += std::string(static_cast<std::size_t>(m.mtp_depth), 'm') + "L";
    }
    return out;
}

/// Decoder layers per virtual stage of a layout string; "(X)*N" repeats X N times (not nested).
std::vector<int> parse_layout(std::string s, const std::string& file, const std::string& flag) {
    s.erase(std::remove(s.begin(), s.end(), '"'), s.end());
    std::string flat;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '(') {
            flat += s[i];
            continue;
        }
        const std::size_t close = s.find(')', i);
        if (close == std::string::npos || close + 2 >= s.size() || s[close + 1] != '*' || !std::isdigit(static_cast<unsigned char>(s[close + 2])))
            throw InputError(file, flag, "has a repetition that is not \"(...)*N\" (got \"" + s + "\")");
        std::size_t end = close + 2;
        long times = 0;
        while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])) && times < 100000) times = times * 10 + (s[end++] - '0');
        const std::string body = s.substr(i + 1, close - i - 1);
        if (body.find('(') != std::string::npos || static_cast<double>(body.size()) * static_cast<double>(times) > 1e6)
            throw InputError(file, flag, "has a nested or oversized repetition (got \"" + s + "\")");
        for (long k = 0; k < times; ++k) flat += body;
        i = end - 1;
    }
    std::vector<int> stages(1, 0);
    for (char c : flat) {
        if (c == '|') stages.push_back(0);
        else if (c == 't') ++stages.back();
        else if (c != 'E' && c != 'm' && c != 'L')
            throw InputError(file, flag, "may hold only E, t, m, L, '|' and (...)*N (got '" + std::string(1, c) + "')");
    }
    return stages;
}

}  // namespace

ExportResult export_megatron(const ModelSpec& m, const PlanSpec& p) {
    ExportResult r;
    std::ostringstream o;
    auto arg = [&](const std::string& k, auto v) { o << "--" << k << " " << v << "\n"; };
    auto flag = [&](const std::string& k) { o << "--" << k << "\n"; };
    arg("num-layers", m.layers);
    arg("hidden-size", m.hidden);
    arg("num-attention-heads", m.heads);
    if (m.kv_heads != m.heads) {
        flag("group-query-attention");
        arg("num-query-groups", m.kv_heads);
    }
    if (m.heads > 0 && m.head_dim > 0 && m.head_dim * m.heads != m.hidden) arg("kv-channels", m.head_dim);
    if (m.mla) {
        flag("multi-latent-attention");
        if (m.mla->q_lora_rank > 0) arg("q-lora-rank", m.mla->q_lora_rank);
        arg("kv-lora-rank", m.mla->kv_lora_rank);
        arg("qk-head-dim", m.mla->qk_nope_head_dim);
        arg("qk-pos-emb-head-dim", m.mla->qk_rope_head_dim);
        arg("v-head-dim", m.mla->v_head_dim);
    }
    arg("ffn-hidden-size", m.ffn_hidden);
    arg("seq-length", m.seq_len);
    arg("max-position-embeddings", m.max_position > 0 ? m.max_position : m.seq_len);
    if (m.ffn == FfnKind::swiglu) flag("swiglu");
    if (m.ffn == FfnKind::relu2) flag("squared-relu");
    if (m.norm == NormKind::rmsnorm) arg("normalization", "RMSNorm");
    if (m.position == PositionKind::rope) arg("position-embedding-type", "rope");
    if (!m.tied_embeddings) flag("untie-embeddings-and-output-weights");
    if (!m.linear_bias) flag("disable-bias-linear");
    if (!m.linear_bias && m.qkv_bias) flag("add-qkv-bias");  // Qwen2: biases on Q, K, V only
    if (m.qk_norm) flag("qk-layernorm");                        // with --normalization, RMSNorm for Qwen3
    if (m.is_moe()) {
        arg("num-experts", m.moe->experts);
        arg("moe-router-topk", m.moe->top_k);
        if (m.moe->expert_ffn_hidden > 0 && m.moe->expert_ffn_hidden != m.ffn_hidden)
            arg("moe-ffn-hidden-size", m.moe->expert_ffn_hidden);
        if (m.moe->first_k_dense > 0) {
            // Megatron takes a per-layer pattern: 0 = dense, 1 = MoE.
            std::string pattern = "[";
            for (int l = 0; l < m.layers; ++l) pattern += std::string(l ? "," : "") + (m.layer_is_moe(l) ? "1" : "0");
            arg("moe-layer-freq", "\"" + pattern + "]\"");
        } else if (m.moe->moe_every > 1) {
            arg("moe-layer-freq", m.moe->moe_every);
        }
        if (m.moe->shared_experts > 0)
            arg("moe-shared-expert-intermediate-size", m.moe->shared_experts * (m.moe->expert_ffn_hidden > 0 ? m.moe->expert_ffn_hidden : m.ffn_hidden));
        if (m.moe->capacity_factor > 0) arg("moe-expert-capacity-factor", m.moe->capacity_factor);
        if (m.moe->router_groups > 0) {
            arg("moe-router-num-groups", m.moe->router_groups);
            arg("moe-router-group-topk", m.moe->router_group_topk);
        }
    }
    if (m.mtp_depth > 0) arg("mtp-num-layers", m.mtp_depth);
    arg("tensor-model-parallel-size", p.tp);
    arg("pipeline-model-parallel-size", p.pp);
    if (!p.virtual_layer_split.empty() && p.schedule != Schedule::dualpipe_v) {
        // Quoted by appending (GCC 12's -Wrestrict misreads const char* + std::string).
        std::string quoted = "\"";
        quoted += megatron_layout(m, p);
        quoted += '"';
        arg("pipeline-model-parallel-layout", quoted);
    } else if (p.schedule == Schedule::interleaved_1f1b && p.vpp > 1) {
        const int per_stage = m.layers / p.pp;
        // Megatron's flag gives every virtual stage the same layer count; an uneven split needs a
        // hand-written --pipeline-model-parallel-layout, which the export does not write.
        if (!p.layer_split.empty() || m.layers % p.pp != 0 || per_stage % p.vpp != 0)
            throw InputError("plan", "plan.vpp", "= " + std::to_string(p.vpp) +
                                                     " splits the stages unevenly; the Megatron export needs vpp to divide every stage's layers");
        arg("num-layers-per-virtual-pipeline-stage", per_stage / p.vpp);
    }
    if (p.schedule == Schedule::interleaved_1f1b && p.microbatch_group > 0 && p.microbatch_group != p.pp)
        arg("microbatch-group-size-per-virtual-pipeline-stage", p.microbatch_group);
    if (p.cp > 1) arg("context-parallel-size", p.cp);
    if (p.ep > 1) arg("expert-model-parallel-size", p.ep);
    if (p.expert_tp > 0 && p.expert_tp != p.tp) arg("expert-tensor-parallel-size", p.expert_tp);
    if (p.sequence_parallel && p.tp > 1) flag("sequence-parallel");
    arg("micro-batch-size", p.micro_batch);
    arg("global-batch-size", p.global_batch);
    if (p.zero_stage >= 1) flag("use-distributed-optimizer");
    if (p.recompute == Recompute::selective) {
        arg("recompute-granularity", "selective");
        if (p.recompute_modules != recompute_bit(RecomputeModule::core_attn)) {
            std::string names;
            for (const std::string& n : recompute_module_names(p)) names += (names.empty() ? "" : " ") + n;
            arg("recompute-modules", names);
        }
    }
    if (p.recompute == Recompute::full) {
        arg("recompute-granularity", "full");
        arg("recompute-method", p.recompute_layers >= 0 ? "block" : "uniform");
        arg("recompute-num-layers", p.recompute_layers >= 0 ? p.recompute_layers : 1);
    }
    if (p.precision == Precision::bf16) flag("bf16");
    if (p.precision == Precision::fp16) flag("fp16");
    if (p.precision == Precision::fp8) {
        flag("bf16");
        arg("fp8-format", "hybrid");
    }
    // Megatron accumulates and reduces bf16 gradients in fp32 unless told otherwise; say which
    // the plan was simulated with, so the run keeps the same memory and DP traffic.
    const bool bf16_weights = p.precision == Precision::bf16 || p.precision == Precision::fp8;
    if (bf16_weights && !p.fp32_grads) flag("grad-reduce-in-bf16");
    if (p.precision == Precision::fp16 && p.fp32_grads) flag("accumulate-allreduce-grads-in-fp32");
    if (!p.grad_accum_fusion) flag("no-gradient-accumulation-fusion");
    if (p.exp_avg_dtype != Precision::fp32 || p.exp_avg_sq_dtype != Precision::fp32) {
        flag("use-precision-aware-optimizer");
        arg("exp-avg-dtype", to_string(p.exp_avg_dtype));
        arg("exp-avg-sq-dtype", to_string(p.exp_avg_sq_dtype));
    }
    if (p.flash_attention) flag("use-flash-attn");
    if (p.overlap_grad_reduce && p.dp > 1) flag("overlap-grad-reduce");
    if (p.overlap_param_gather && p.zero_stage >= 1) flag("overlap-param-gather");
    if (p.tp_comm_overlap) flag("tp-comm-overlap");
    if (p.moe_a2a_overlap) {
        flag("overlap-moe-expert-parallel-comm");
        flag("delay-wgrad-compute");
    }
    if (p.moe_dispatcher == MoeDispatcher::deepep) {
        // Megatron-Core's flex dispatcher with the DeepEP backend (older releases: --moe-enable-deepep).
        arg("moe-token-dispatcher-type", "flex");
        arg("moe-flex-dispatcher-backend", "deepep");
    }
    if (!p.layer_split.empty()) {
        // Megatron expresses uneven splits only for the first and last stage.
        bool middle_even = true;
        for (std::size_t i = 1; i + 1 < p.layer_split.size(); ++i)
            if (p.layer_split[i] != p.layer_split[1]) middle_even = false;
        if (middle_even && p.layer_split.size() >= 2) {
            arg("decoder-first-pipeline-num-layers", p.layer_split.front());
            arg("decoder-last-pipeline-num-layers", p.layer_split.back());
        } else {
            r.unsupported.push_back("uneven pipeline split other than first/last stage");
        }
    }
    if (p.schedule == Schedule::gpipe) r.unsupported.push_back("GPipe schedule (Megatron-LM runs 1F1B)");
    if (p.schedule == Schedule::dualpipe_v) r.unsupported.push_back("DualPipeV schedule (deepseek-ai/DualPipe; Megatron-LM runs 1F1B)");
    if (p.p2p_blocking) r.unsupported.push_back("blocking pipeline p2p (DeepSpeed's pipeline engine; Megatron overlaps send/recv)");
    if (p.p2p_scatter_gather)
        r.unsupported.push_back("pipeline scatter/gather without sequence parallelism (Megatron-LM before Megatron-Core; "
                                "Megatron-Core sends whole tensors: enable --sequence-parallel instead)");
    if (p.eager_elementwise) r.unsupported.push_back("unfused eager elementwise ops (Megatron-LM fuses its norms and activations)");
    if (p.expandable_segments) r.unsupported.push_back(kExpandableNote);
    if (!p.loss_upcast)
        r.unsupported.push_back("a loss that keeps the logits in their dtype (Megatron's vocab-parallel cross-entropy keeps an fp32 softmax)");
    if (p.moe_act_fp8_cache) r.unsupported.push_back("FP8 cache of the MoE SwiGLU inputs (DeepSeek-V3's own framework; Megatron keeps them in BF16)");
    if (p.moe_probs_at == MoeProbsAt::fc2_output)
        r.unsupported.push_back("router weights applied to the expert outputs (Megatron-Core applies them before fc2, in its weighted SwiGLU)");
    if (p.zero_stage >= 2) r.unsupported.push_back("ZeRO stage " + std::to_string(p.zero_stage) + " (Megatron's distributed optimizer shards only optimizer states and, with overlap, gradients; use DeepSpeed)");
    if (!p.offload.optimizer.all_gpu() || !p.offload.params.all_gpu() || !p.offload.grads.all_gpu())
        r.unsupported.push_back("offload of model states (Megatron-LM has only --optimizer-cpu-offload in recent versions; use DeepSpeed)");
    if (!p.offload.activations.all_gpu()) r.unsupported.push_back("activation offload");
    if (p.lock_free_update) r.unsupported.push_back("lock-free (delayed) optimizer update (Angel-PTM)");
    r.text = o.str();
    return r;
}

ExportResult export_deepspeed(const ModelSpec& m, const PlanSpec& p) {
    ExportResult r;
    nlohmann::ordered_json j;
    const int gas = p.micro_batches();
    j["train_batch_size"] = p.global_batch;
    j["train_micro_batch_size_per_gpu"] = p.micro_batch;
    j["gradient_accumulation_steps"] = gas;
    nlohmann::ordered_json z;
    z["stage"] = p.zero_stage;
    z["overlap_comm"] = p.overlap_grad_reduce;
    z["contiguous_gradients"] = true;
    z["reduce_bucket_size"] = p.dp_bucket_bytes / 2;  // elements of bf16
    if (p.zero_stage == 3) {
        z["stage3_prefetch_bucket_size"] = p.dp_bucket_bytes / 2;
        z["stage3_param_persistence_threshold"] = 100000;
    }
    std::string od = tier_device(p.offload.optimizer);
    if (od != "none") {
        nlohmann::ordered_json o;
        o["device"] = od;
        o["pin_memory"] = true;
        if (od == "nvme") o["nvme_path"] = "/local_nvme";
        if (is_split(p.offload.optimizer)) o["ratio"] = 1.0 - p.offload.optimizer.gpu;
        z["offload_optimizer"] = o;
    }
    std::string pd = tier_device(p.offload.params);
    if (pd != "none") {
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
        j["activation_checkpointing"] = {{"partition_activations", p.sequence_parallel},
                                         {"contiguous_memory_optimization", false},
                                         {"cpu_checkpointing", !p.offload.activations.all_gpu()}};
    }
    if (p.pp > 1) j["pipeline"] = {{"stages", p.pp}, {"partition", "parameters"}};
    if (m.mtp_depth > 0) r.unsupported.push_back("multi-token prediction modules (configured in the model code)");
    if (p.tp > 1) r.unsupported.push_back("tensor parallelism tp=" + std::to_string(p.tp) + " (configure in the model code, e.g. Megatron-DeepSpeed --tensor-model-parallel-size)");
    if (p.cp > 1) r.unsupported.push_back("context parallelism (DeepSpeed-Ulysses is configured in the model code)");
    if (p.ep > 1) r.unsupported.push_back("expert parallelism (set ep_size on the MoE layers)");
    if (p.moe_dispatcher == MoeDispatcher::deepep) r.unsupported.push_back("DeepEP token dispatcher (Megatron-Core's flex dispatcher)");
    if (m.is_moe() && p.moe_probs_at == MoeProbsAt::fc2_input)
        r.unsupported.push_back("router weights applied before fc2 (DeepSpeed-MoE weights the expert outputs at its combine and keeps them)");
    if (p.sequence_parallel && p.tp > 1) r.unsupported.push_back("Megatron sequence parallelism");
    if (p.schedule == Schedule::interleaved_1f1b) r.unsupported.push_back("interleaved 1F1B (virtual stages)");
    if (p.schedule == Schedule::dualpipe_v) r.unsupported.push_back("DualPipeV schedule (deepseek-ai/DualPipe)");
    if (p.recompute == Recompute::selective) r.unsupported.push_back("selective recomputation (DeepSpeed checkpoints whole layers)");
    if (p.grad_accum_fusion && p.zero_stage <= 1 && p.micro_batches() > 1)
        r.unsupported.push_back("fused gradient accumulation (DeepSpeed's engine adds each micro-batch's gradients with a separate kernel: "
                                "simulate with plan.grad_accum_fusion false)");
    if (p.precision == Precision::fp8) r.unsupported.push_back("fp8 (needs Transformer Engine)");
    if (p.exp_avg_dtype != Precision::fp32 || p.exp_avg_sq_dtype != Precision::fp32)
        r.unsupported.push_back("Adam moments below fp32 (Megatron's precision-aware optimizer)");
    if (p.expandable_segments) r.unsupported.push_back(kExpandableNote);
    if (p.lock_free_update) r.unsupported.push_back("lock-free optimizer update (Angel-PTM; DeepSpeed's ZeRO-Offload has a similar one-step delayed update)");
    if (!p.offload.activations.all_gpu() && p.recompute == Recompute::none) r.unsupported.push_back("activation offload without checkpointing");
    if (is_split(p.offload.params)) r.unsupported.push_back("fractional parameter offload");
    if (is_split(p.offload.optimizer) && od == "nvme") r.unsupported.push_back("fractional NVMe optimizer offload");
    r.text = j.dump(2) + "\n";
    return r;
}

PlanSpec plan_from_megatron_args(const std::string& args, int gpus, const std::string& file) {
    std::istringstream in(args);
    std::vector<std::string> tok;
    for (std::string t; in >> t;) tok.push_back(t);
    PlanSpec p;
    p.recompute = Recompute::none;
    p.precision = Precision::fp32;
    p.flash_attention = false;
    p.overlap_grad_reduce = false;
    p.overlap_param_gather = false;
    int layers_per_virtual = 0;
    int num_layers = 0;
    bool grad_reduce_bf16 = false, accumulate_fp32 = false;
    auto value = [&](std::size_t& i) -> int {
        if (i + 1 >= tok.size()) throw InputError(file, tok[i], "needs a value");
        try {
            std::size_t pos = 0;
            int v = std::stoi(tok[i + 1], &pos);
            if (pos != tok[i + 1].size() || v <= 0) throw std::invalid_argument("x");
            ++i;
            return v;
        } catch (const std::exception&) {
            throw InputError(file, tok[i], "must be a positive integer (got \"" + tok[i + 1] + "\")");
        }
    };
    for (std::size_t i = 0; i < tok.size(); ++i) {
        const std::string& t = tok[i];
        if (t == "--tensor-model-parallel-size") p.tp = value(i);
        else if (t == "--pipeline-model-parallel-size") p.pp = value(i);
        else if (t == "--context-parallel-size") p.cp = value(i);
        else if (t == "--expert-model-parallel-size") p.ep = value(i);
        else if (t == "--expert-tensor-parallel-size") p.expert_tp = value(i);
        else if (t == "--micro-batch-size") p.micro_batch = value(i);
        else if (t == "--global-batch-size") p.global_batch = value(i);
        else if (t == "--num-layers-per-virtual-pipeline-stage") layers_per_virtual = value(i);
        else if (t == "--microbatch-group-size-per-virtual-pipeline-stage") p.microbatch_group = value(i);
        else if (t == "--num-layers") num_layers = value(i);
        else if (t == "--sequence-parallel") p.sequence_parallel = true;
        else if (t == "--use-distributed-optimizer") p.zero_stage = 1;
        else if (t == "--bf16") p.precision = Precision::bf16;
        else if (t == "--grad-reduce-in-bf16") grad_reduce_bf16 = true;
        else if (t == "--accumulate-allreduce-grads-in-fp32") accumulate_fp32 = true;
        else if (t == "--no-gradient-accumulation-fusion") p.grad_accum_fusion = false;
        else if (t == "--fp16") p.precision = Precision::fp16;
        else if (t == "--use-flash-attn") p.flash_attention = true;
        else if (t == "--overlap-grad-reduce") p.overlap_grad_reduce = true;
        else if (t == "--overlap-param-gather") p.overlap_param_gather = true;
        else if (t == "--tp-comm-overlap") p.tp_comm_overlap = true;
        else if (t == "--overlap-moe-expert-parallel-comm") p.moe_a2a_overlap = true;
        else if (t == "--moe-enable-deepep") p.moe_dispatcher = MoeDispatcher::deepep;
        else if (t == "--moe-flex-dispatcher-backend") {
            if (i + 1 >= tok.size()) throw InputError(file, t, "needs a value");
            if (tok[++i] == "deepep") p.moe_dispatcher = MoeDispatcher::deepep;
        }
        else if (t == "--recompute-num-layers") p.recompute_layers = value(i);
        else if (t == "--pipeline-model-parallel-layout") {
            if (i + 1 >= tok.size()) throw InputError(file, t, "needs a value");
            p.virtual_layer_split = parse_layout(tok[++i], file, t);
        }
        else if (t == "--exp-avg-dtype" || t == "--exp-avg-sq-dtype") {
            if (i + 1 >= tok.size()) throw InputError(file, t, "needs a value");
            const std::string v = tok[++i];
            if (!precision_from(v, t == "--exp-avg-dtype" ? p.exp_avg_dtype : p.exp_avg_sq_dtype))
                throw InputError(file, t, "must be fp32, bf16, fp16 or fp8 (got \"" + v + "\")");
        }
        else if (t == "--recompute-modules") {
            p.recompute_modules = 0;
            while (i + 1 < tok.size() && tok[i + 1].rfind("--", 0) != 0) {
                const std::string v = tok[++i];
                RecomputeModule mod{};
                if (!recompute_module_from(v, mod))
                    throw InputError(file, t, "names an unknown module \"" + v + "\" (one of " + recompute_module_choices() + ")");
                p.recompute_modules |= recompute_bit(mod);
            }
            if (p.recompute_modules == 0) throw InputError(file, t, "needs at least one module name");
        }
        else if (t == "--recompute-granularity") {
            if (i + 1 >= tok.size()) throw InputError(file, t, "needs a value");
            std::string v = tok[++i];
            if (v == "selective") p.recompute = Recompute::selective;
            else if (v == "full") p.recompute = Recompute::full;
            else throw InputError(file, t, "must be selective or full (got \"" + v + "\")");
        } else if (t == "--fp8-format") {
            if (i + 1 < tok.size()) ++i;
            p.precision = Precision::fp8;
        }
    }
    if (p.recompute == Recompute::full && p.recompute_layers == 1 && args.find("uniform") != std::string::npos) p.recompute_layers = -1;
    // Megatron's defaults: bf16 weights get fp32 gradient accumulation and reduction unless
    // --grad-reduce-in-bf16; fp16 weights only with --accumulate-allreduce-grads-in-fp32.
    if (p.precision == Precision::bf16 || p.precision == Precision::fp8) p.fp32_grads = !grad_reduce_bf16;
    else if (p.precision == Precision::fp16) p.fp32_grads = accumulate_fp32;
    if (layers_per_virtual > 0) {
        if (num_layers == 0) throw InputError(file, "--num-layers-per-virtual-pipeline-stage", "needs --num-layers");
        int per_stage = num_layers / p.pp;
        if (per_stage % layers_per_virtual != 0)
            throw InputError(file, "--num-layers-per-virtual-pipeline-stage", "must divide the layers per stage (" + std::to_string(per_stage) + ")");
        p.vpp = per_stage / layers_per_virtual;
        p.schedule = p.vpp > 1 ? Schedule::interleaved_1f1b : Schedule::one_f_one_b;
    }
    if (!p.virtual_layer_split.empty()) {
        // The layout fixes the virtual stages: pp x vpp of them.
        const int n = static_cast<int>(p.virtual_layer_split.size());
        if (n % p.pp != 0)
            throw InputError(file, "--pipeline-model-parallel-layout", "has " + std::to_string(n) + " stages, not a multiple of --pipeline-model-parallel-size " + std::to_string(p.pp));
        p.vpp = n / p.pp;
        p.schedule = p.vpp > 1 ? Schedule::interleaved_1f1b : Schedule::one_f_one_b;
    }
    // Megatron reads the group only under interleaving.
    if (p.schedule != Schedule::interleaved_1f1b) p.microbatch_group = 0;
    int denom = p.tp * p.pp * p.cp;
    if (gpus % denom != 0) throw InputError(file, "--tensor-model-parallel-size", "tp x pp x cp = " + std::to_string(denom) + " does not divide the GPU count " + std::to_string(gpus));
    p.dp = gpus / denom;
    return p;
}

}  // namespace strata::planner
