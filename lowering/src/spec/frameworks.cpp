// Framework presets: one table of what each framework fixes, with sources (docs/frameworks.md).
// Upstream revisions read: Megatron-LM d98e8a64, Megatron-Bridge 067f987d, DeepSpeed edaa7221.
#include "strata/lowering/frameworks.hpp"

#include <algorithm>
#include <map>
#include <string_view>

#include <nlohmann/json.hpp>

#include "strata/common/error.hpp"
#include "strata/common/text.hpp"
#include "strata/lowering/plan_knobs.hpp"

namespace strata::sim {

namespace {

/// When a knob applies, in terms of the plan's stated fields.
enum class When {
    always, fused_attention, mixed16, tp_sp, zero3, fsdp_shards, below_zero3, pipelined, pipelined_tp, context_parallel, dualpipev_ep,
    offloaded_optimizer, fsdp_cpu_offload, fsdp_offloaded, op_selective, tensor_parallel
};

struct Knob {
    const char* key;
    const char* value_json;
    When when;
    const char* source;
};

struct Preset {
    const char* name;
    const char* summary;
    std::vector<Knob> knobs;
};

bool applies(When w, const PlanSpec& p) {
    switch (w) {
    case When::always: return true;
    // A preset names its fused kernel's family; a plan that states unfused attention keeps it.
    case When::fused_attention: return p.flash_attention;
    case When::mixed16: return p.precision == Precision::bf16 || p.precision == Precision::fp8;
    case When::tp_sp: return p.tp > 1 && p.sequence_parallel;
    case When::zero3: return p.zero_stage == 3;
    // FSDP under mixed precision with an fp32 master, nothing offloaded (plan.fp32_param_shards).
    case When::fsdp_shards:
        return p.zero_stage == 3 && p.has_master() && p.offload.optimizer.all_gpu() && p.offload.params.all_gpu() && p.offload.grads.all_gpu();
    case When::below_zero3: return p.zero_stage < 3;
    case When::pipelined: return p.pp > 1;
    case When::pipelined_tp: return p.pp > 1 && p.tp > 1 && !p.sequence_parallel;  // with SP the tensors are split already
    case When::context_parallel: return p.cp > 1;
    case When::dualpipev_ep: return p.schedule == Schedule::dualpipe_v && p.pp > 1 && p.ep > 1;
    // ZeRO-2/3 with the whole optimizer off the GPU and the gradients not placed by the plan.
    case When::offloaded_optimizer: return p.zero_stage >= 2 && p.offload.optimizer.gpu == 0.0 && p.offload.grads.all_gpu();
    // FSDP's CPU offload (ZeRO-3, the parameters and the optimizer on the host), the gradients not placed by the plan.
    case When::fsdp_cpu_offload: return applies(When::fsdp_offloaded, p) && p.offload.grads.all_gpu();
    case When::fsdp_offloaded: return p.zero_stage == 3 && p.offload.optimizer.cpu == 1.0 && p.offload.params.cpu == 1.0;
    case When::tensor_parallel: return p.tp > 1;
    // "selective" as torchtitan means it (per-op SAC), where the plan names no Megatron module list
    // and op-level SAC is modelled for its plan (spec_io_validate.cpp): one CP rank, fused
    // attention, TP only with sequence parallelism.
    case When::op_selective:
        return p.recompute == Recompute::selective &&
               p.recompute_modules == recompute_bit(RecomputeModule::core_attn) &&
               !p.in_file("recompute_modules") && p.cp == 1 && p.flash_attention &&
               (p.tp == 1 || p.sequence_parallel || !p.in_file("sequence_parallel"));
    }
    return false;
}

// Sources quoted once, used by several presets.
constexpr const char* kNoFlash2021 =
    "the run predates fused attention in its framework: FlashAttention appeared in May 2022 (arXiv:2205.14135) and "
    "Megatron-LM gained --use-flash-attn in 2023; before, the s x s scores are batched GEMMs with a fused scale-mask-softmax";
constexpr const char* kMegatronBf16Grads =
    "Megatron-LM megatron/training/arguments.py: under --bf16, gradients are accumulated and all-reduced in fp32 "
    "(accumulate_allreduce_grads_in_fp32 forced on) unless --grad-reduce-in-bf16";
constexpr const char* kAutogradAccum =
    "autograd adds each micro-batch's weight gradients into param.grad with a separate kernel (no "
    "gradient-accumulation fusion into the GEMM)";
constexpr const char* kPipelineEngineP2p =
    "DeepSpeed runtime/pipe/engine.py: blocking NCCL send/recv on the compute stream, activations and gradients "
    "partitioned over the model-parallel group (pipe_partitioned / grad_partitioned)";
constexpr const char* kZeroStepGather =
    "DeepSpeed runtime/zero/stage_1_and_2.py step() and runtime/bf16_optimizer.py step(): the updated 16-bit "
    "partitions are all-gathered (all_gather_dp_groups) inside the optimizer step, \"ready for next round forward\", "
    "not overlapped with it; ZeRO-3 fetches per module instead";
constexpr const char* kPipelineEngineReduce =
    "DeepSpeed runtime/pipe/schedule.py TrainSchedule: ReduceGrads runs after the last backward of the step, "
    "not overlapped with it";

// Knobs several presets share, spelled once.
const Knob kNoFlash{"flash_attention", "false", When::always, kNoFlash2021};
const Knob kPipeBlocking{"p2p_blocking", "true", When::pipelined, kPipelineEngineP2p};
const Knob kPipeScatter{"p2p_scatter_gather", "true", When::pipelined_tp, kPipelineEngineP2p};
const Knob kZeroStepGatherKnob{"overlap_param_gather", "false", When::below_zero3, kZeroStepGather};
const Knob kTeFlash{"flash_attention", "true", When::always,
                    "Transformer Engine's fused attention (cuDNN flash kernels), Megatron-Core's default attention backend"};
const Knob kTeFa3{"attention_kernel", "\"fa3\"", When::always,
                  "Transformer Engine's cuDNN fused attention is FlashAttention-3-class on Hopper (docs/costs.md)"};
const Knob kAutogradAccumKnob{"grad_accum_fusion", "false", When::always, kAutogradAccum};
// An object value completes the plan's object: only the parts it leaves out (read_plan).
const Knob kDeepSpeedHostGrads{"offload", R"({"grads": "cpu"})", When::offloaded_optimizer,
                               "DeepSpeed runtime/zero/stage_1_and_2.py (cpu_offload: copy_grads_in_partition moves each reduced "
                               "bucket's partition to the CPU fp32 buffer the optimizer reads, accumulating there, and frees the GPU "
                               "gradients) and stage3.py (offload_optimizer: the partitioned gradients go to host memory); ZeRO-1 "
                               "accumulates on the GPU"};
const Knob kFsdpHostGrads{"offload", R"({"grads": "cpu"})", When::fsdp_cpu_offload,
                           "PyTorch FSDP2's CPUOffloadPolicy (torch distributed/fsdp/_fully_shard/_fsdp_api.py: \"Sharded "
                           "gradients are copied device-to-host in backward, and the optimizer step runs on CPU\"; "
                           "_fsdp_collectives.py foreach_reduce copies each reduce-scatter's output to the CPU), as FSDP1's "
                           "CPUOffload(offload_params=True) does (_runtime_utils.py _offload_grad)"};
const Knob kFsdpCpuGradSum{"cpu_grad_accumulation", "true", When::fsdp_offloaded,
                            "FSDP2 _fsdp_collectives.py foreach_reduce under CPU offload: a micro-batch whose gradient "
                            "accumulates copies it down blocking (\"Only overlap the D2H copy ... if not accumulating "
                            "gradients since the CPU add kernel depends on the copy result\") and adds it into the CPU "
                            "sharded gradient (sharded_param.grad._local_tensor += new_sharded_grad)"};
const Knob kDeepSpeedBucketBarrier{"bucket_reduce_barrier", "true", When::always,
                                   "DeepSpeed runtime/zero/stage_1_and_2.py average_tensor under overlap_comm: "
                                   "torch.cuda.synchronize() before each bucket's reduction (v0.3 stage2.py through 2023), "
                                   "current_stream().wait_stream(reduction_stream) since PR #5606 (June 2024)"};
const Knob kDeepSpeedMoePad{"moe_pad_to_capacity", "true", When::always,
                            "DeepSpeed moe/sharded_moe.py: top1gating/top2gating build [tokens, experts, capacity] masks and "
                            "MOELayer dispatches einsum('sec,sm->ecm'): every expert gets its whole capacity (drop_tokens)"};
const Knob kFsdpShards{"fp32_param_shards", "true", When::fsdp_shards,
                       "PyTorch FSDP keeps each shard in the parameters' own fp32 and casts it to MixedPrecision(Policy)."
                       "param_dtype in the all-gather's copy-in; the optimizer updates the shard, whose gradient is cast back to "
                       "fp32 (torch distributed/fsdp/_fully_shard/_fsdp_param.py; FSDP1 _flat_param.py _mp_shard, freed after "
                       "the gather): 4 + 4 + 8 bytes a parameter, sharded"};
const Knob kTpOverlapWithSp{"tp_comm_overlap", "true", When::tp_sp,
                            "NeMo / Megatron-Bridge performance recipes turn on TP communication overlap (userbuffers) "
                            "with sequence parallelism (NeMo 1.x ub_tp_comm_overlap, MegatronCommOverlapCallback / CommOverlapConfig)"};
const Knob kMegatronVocabPad{"vocab_divisible_by", "128", When::always,
                              "Megatron-LM megatron/training/tokenizer (_vocab_size_with_padding): the vocabulary is padded to a "
                              "multiple of --make-vocab-size-divisible-by (default 128) x tensor-parallel size"};
// PyTorch's context parallelism for SDPA, as torchtitan and NeMo AutoModel run it.
const Knob kTorchCpAllGather{"cp_comm_type", "\"allgather\"", When::context_parallel,
                             "torchtitan job_config.py: parallelism.context_parallel_rotate_method defaults to \"allgather\", "
                             "'to all-gather all kv shards on ranks after the first sub-SDPA computation' (PyTorch's "
                             "context-parallel SDPA)"};
// torchtitan with or without torch.compile: the same knobs but the elementwise ops.
std::vector<Knob> torchtitan_knobs(bool compiled) {
    return {{"attention_kernel", "\"fa2\"", When::fused_attention,
             "torchtitan's default attention is F.scaled_dot_product_attention, whose flash backend is FlashAttention-2"},
            kAutogradAccumKnob,
            compiled ? Knob{"eager_elementwise", "false", When::always, "torch.compile (Inductor) fuses the elementwise ops of each block"}
                     : Knob{"eager_elementwise", "true", When::always,
                            "without torch.compile, RMSNorm, SiLU, the gating product, RoPE and residual adds run as separate eager kernels"},
            {"loss_upcast", "true", When::always, "torchtitan's cross_entropy_loss upcasts the logits: pred.flatten(0, 1).float()"},
            {"eager_cross_entropy", "true", When::always,
             "torchtitan's loss is F.cross_entropy(pred.float()) in eager PyTorch: log_softmax keeps an fp32 output and "
             "its backward allocates two more fp32 logits-sized tensors (docs/lowering.md)"},
            {"torch_pipelining", "true", When::pipelined,
             "torchtitan builds its pipeline with torch.distributed.pipelining (PipelineStage and its schedules): stage.py "
             "allocates a gradient receive buffer per micro-batch (_prepare_backward_infra) and keeps every micro-batch's "
             "output in fwd_cache until its backward_one_chunk"},
            {"sequence_parallel", "true", When::tensor_parallel,
             "torchtitan parallelize_llama.py apply_tp: the norms are SequenceParallel() and the row-parallel outputs "
             "Shard(1) wherever TP is on (a layout field, filled only where the plan leaves it out)"},
            {"loss_parallel", "true", When::tensor_parallel,
             "torchtitan parallelize_llama.py: under TP the output projection keeps its vocabulary shard (Shard(-1)) and "
             "train.py computes the loss inside torch.distributed.tensor.parallel.loss_parallel() unless "
             "training.disable_loss_parallel"},
            {"fp32_grads", "true", When::mixed16,
             "torchtitan's FSDP2 MixedPrecisionPolicy reduces gradients in fp32 (training.mixed_precision_reduce = \"float32\")"},
            {"fp32_param_shards", "true", When::fsdp_shards,
             "torchtitan distributed/fsdp.py: fully_shard(mp_policy = MixedPrecisionPolicy(param_dtype = bf16, reduce_dtype = "
             "fp32)) over the fp32 model (training.mixed_precision_param), so FSDP2's shards are fp32 and cast at the gather"},
            kTorchCpAllGather,
            {"moe_a2a_overlap", "true", When::dualpipev_ep,
             "torchtitan job_config.py: parallelism.pipeline_parallel_expert_parallel_overlap defaults to True; under DualPipeV "
             "with EP each overlapped forward/backward pair (PyTorch's OVERLAP_F_B) runs the two passes in two threads that "
             "trade compute for the other's dispatch and combine (torchtitan distributed/dual_pipe_v.py)"},
            {"tp_overlap_rs_fp8", "false", When::always,
             "torchtitan's async TP under Float8: torch's fused_scaled_matmul_reduce_scatter reduce-scatters the scaled "
             "matmul's bf16 output (fused_all_gather_scaled_matmul gathers the FP8 input)"},
            kFsdpHostGrads,
            kFsdpCpuGradSum,
            {"recompute_policy", "\"op\"", When::op_selective,
             "torchtitan's selective activation checkpointing is per-op (distributed/activation_checkpoint.py: save the "
             "outputs of matmuls, SDPA and reduce-scatters, recompute every second matmul and the rest): SelectiveAC in "
             "every Llama 3 and DeepSeek-V3 config since 2025, selective_ac_option = 'op' in train_configs/llama3_8b.toml "
             "at the 2024-12 benchmark commit 9dec370 (the command-line default there, '2', is every second layer: "
             "recompute full with recompute_every 2)"}};
}

const std::vector<Preset>& presets() {
    static const std::vector<Preset> table = {
        {"megatron-lm-2021",
         "Megatron-LM before Megatron-Core (SC21, arXiv:2104.04473; Korthikanti et al., arXiv:2205.05198)",
         {kNoFlash,
          kMegatronVocabPad,
          {"p2p_scatter_gather", "true", When::pipelined_tp,
           "SC21 Sec. 4.1: pipeline tensors cross stages in 1/tp pieces and are all-gathered over NVLink"},
          {"fp32_grads", "true", When::mixed16, kMegatronBf16Grads},
          {"overlap_grad_reduce", "false", When::always,
           "Megatron-LM 2021 (--DDP-impl local, the default): model.allreduce_gradients() after forward_backward in "
           "train_step; overlapped reduction came with Megatron-Core's DDP (--overlap-grad-reduce, 2023)"}}},
        {"megatron-deepspeed-2022",
         "Megatron-DeepSpeed as BLOOM and MT-NLG ran it (2021-22): DeepSpeed's PipelineEngine and ZeRO-1 around Megatron layers",
         {kNoFlash,
          kMegatronVocabPad,
          kPipeBlocking,
          kPipeScatter,
          kAutogradAccumKnob,
          {"fp32_grads", "true", When::mixed16,
           "DeepSpeed runtime/bf16_optimizer.py (BF16_Optimizer, which bf16 pipelines use): fp32 gradient accumulation buffers"},
          {"overlap_grad_reduce", "false", When::always, kPipelineEngineReduce},
          kZeroStepGatherKnob,
          kDeepSpeedHostGrads,
          kDeepSpeedBucketBarrier,
          kDeepSpeedMoePad}},
        {"deepspeed-2021",
         "DeepSpeed v0.3-v0.5 (2021: ZeRO-Offload, ZeRO-3 Offload, ZeRO-Infinity) around Megatron or Hugging Face models",
         {kNoFlash,
          kPipeBlocking,
          kPipeScatter,
          kAutogradAccumKnob,
          {"overlap_grad_reduce", "false", When::below_zero3,
           "DeepSpeed v0.4 runtime/zero/constants.py: ZERO_OPTIMIZATION_OVERLAP_COMM_DEFAULT = False below stage 3"},
          kZeroStepGatherKnob,
          {"zero3_param_sync", "true", When::zero3,
           "DeepSpeed v0.3-v0.5 runtime/zero/partition_parameters.py _allgather_param: one all_gather per parameter, "
           "each after torch.cuda.synchronize(); per-parameter reduce-scatters (batched and overlapped only since PR #1453, "
           "January 2022, released in v0.6)"},
          kDeepSpeedHostGrads,
          kDeepSpeedBucketBarrier,
          kDeepSpeedMoePad}},
        {"deepspeed",
         "DeepSpeed's engine with ZeRO (and PipelineEngine when pp > 1), 2023 or later: FlashAttention-2 from the model code",
         {{"attention_kernel", "\"fa2\"", When::fused_attention,
           "DeepSpeed ships no fused attention for training; Megatron-DeepSpeed (--use-flash-attn-v2) and Hugging Face "
           "models call FlashAttention-2"},
          kPipeBlocking,
          kPipeScatter,
          kAutogradAccumKnob,
          {"overlap_grad_reduce", "false", When::below_zero3,
           "DeepSpeed runtime/zero/config.py: zero_optimization.overlap_comm defaults to false below stage 3 "
           "(and PipelineEngine reduces after the schedule)"},
          {"overlap_grad_reduce", "true", When::zero3,
           "DeepSpeed runtime/zero/config.py: overlap_comm defaults to true for ZeRO stage 3"},
          {"cp_comm_type", "\"a2a\"", When::context_parallel,
           "DeepSpeed's sequence parallelism is Ulysses (deepspeed/sequence/layer.py DistributedAttention: all-to-alls "
           "of Q, K, V before the attention and of its output after, arXiv:2309.14509)"},
          kZeroStepGatherKnob,
          kDeepSpeedHostGrads,
          kDeepSpeedBucketBarrier,
          kDeepSpeedMoePad}},
        {"megatron-core",
         "Megatron-LM with Megatron-Core and Transformer Engine (2023 or later), its command-line defaults",
         {kTeFlash,
          kTeFa3,
          kMegatronVocabPad,
          {"fp32_grads", "true", When::mixed16, kMegatronBf16Grads},
          {"overlap_grad_reduce", "false", When::always,
           "Megatron-LM megatron/training/arguments.py: --overlap-grad-reduce is off unless given"},
          {"overlap_param_gather", "false", When::always,
           "Megatron-LM megatron/training/arguments.py: --overlap-param-gather is off unless given"}}},
        {"megatron-bridge",
         "NVIDIA's NeMo 2 / Megatron-Bridge performance recipes on Megatron-Core (2025 or later)",
         {kTeFlash,
          kTeFa3,
          {"fp32_grads", "true", When::mixed16,
           "Megatron-Bridge src/megatron/bridge/training/mixed_precision.py: bf16_mixed (and the FP8 recipes built on "
           "it) set grad_reduce_in_fp32=True"},
          {"overlap_grad_reduce", "true", When::always,
           "Megatron-Bridge src/megatron/bridge/recipes/common.py: DistributedDataParallelConfig(overlap_grad_reduce=True)"},
          {"overlap_param_gather", "true", When::always,
           "Megatron-Bridge src/megatron/bridge/recipes/common.py: DistributedDataParallelConfig(overlap_param_gather=True)"},
          {"vocab_divisible_by", "128", When::always,
           "Megatron-Bridge's performance recipes set model.should_pad_vocab = True (e.g. perf_recipes llama "
           "set_llama3_common_configs), and the provider pads with calculate_padded_vocab_size(vocab_size, "
           "make_vocab_size_divisible_by = 128, tensor_model_parallel_size)"},
          kTpOverlapWithSp}},
        {"nemo",
         "NeMo 1.x through the NeMo Framework Launcher (2023-24): Megatron-Core models, Apex's distributed fused Adam",
         {kTeFlash,
          kTeFa3,
          {"fp32_grads", "false", When::always,
           "NeMo-Framework-Launcher examples/training/*/h100/*.sh pass +training.model.optim.grad_sync_dtype=bf16 "
           "(distributed_fused_adam reduces gradients in bf16)"},
          {"overlap_grad_reduce", "true", When::always,
           "NeMo-Framework-Launcher's distributed_fused_adam optimizer config: overlap_grad_sync: true"},
          {"overlap_param_gather", "true", When::always,
           "NeMo-Framework-Launcher's distributed_fused_adam optimizer config: overlap_param_sync: true"},
          {"vocab_divisible_by", "128", When::always,
           "NeMo 1.x megatron_gpt_config.yaml: make_vocab_size_divisible_by: 128, padded with the tensor-parallel "
           "size as Megatron-LM does"},
          kTpOverlapWithSp}},
        {"torchtitan", "torchtitan: FSDP2 x TP x PP x CP in eager PyTorch (torch.compile off, its default)",
         torchtitan_knobs(false)},
        {"torchtitan-compile", "torchtitan with torch.compile on each block: elementwise ops fused by Inductor",
         torchtitan_knobs(true)},
        {"nemo-automodel",
         "NVIDIA NeMo AutoModel (2025 or later): Hugging Face models on FSDP2 x TP x PP x CP x EP, Transformer Engine kernels, "
         "DeepEP, a bf16 model with torch's Adam",
         {{"attention_kernel", "\"fa3\"", When::fused_attention,
           "Automodel components/models/common/utils.py BackendConfig: attn = \"te\" with Transformer Engine on a GPU "
           "(DotProductAttention, cuDNN's fused flash attention on Hopper)"},
          {"eager_elementwise", "true", When::always,
           "BackendConfig fuses the linears, RoPE (rope_fusion) and, when asked, RMSNorm; the Hugging Face model code's "
           "activation products and residual adds run as eager PyTorch ops (distributed.enable_compile = false by default)"},
          kAutogradAccumKnob,
          {"loss_upcast", "true", When::always,
           "Automodel components/loss/masked_ce.py MaskedCrossEntropy(fp32_upcast=True): logits.float()"},
          {"eager_cross_entropy", "true", When::always, "MaskedCrossEntropy then calls F.cross_entropy in eager PyTorch"},
          {"master_weights", "false", When::mixed16,
           "Automodel _transformers/auto_model.py: torch_dtype \"auto\" loads the model in torch.bfloat16, and FSDP2's "
           "MixedPrecisionPolicy keeps the sharded parameters in it (components/distributed/config.py: \"pair with "
           "model.torch_dtype: float32 for fp32 optimizer state\"; such a run states master_weights true and fp32 moments)"},
          {"exp_avg_dtype", "\"bf16\"", When::mixed16, "torch.optim.Adam keeps exp_avg in the bf16 parameters' type"},
          {"exp_avg_sq_dtype", "\"bf16\"", When::mixed16, "torch.optim.Adam keeps exp_avg_sq in the bf16 parameters' type"},
          {"fp32_grads", "false", When::mixed16,
           "FSDP2 keeps the sharded gradients in the bf16 parameters' type (MixedPrecisionPolicy reduce_dtype = float32 "
           "casts them for the reduce-scatter only)"},
          {"cp_comm_type", "\"allgather\"", When::context_parallel,
           "Automodel runs context parallelism through PyTorch's context-parallel SDPA (attn_implementation sdpa for cp > "
           "1), whose K/V exchange defaults to the all-gather"}}},
        {"llm-foundry",
         "MosaicML llm-foundry on Composer with PyTorch FSDP",
         {{"attention_kernel", "\"fa2\"", When::fused_attention,
           "llm-foundry attn_config.attn_impl: flash (FlashAttention-2 since llm-foundry 0.4)"},
          {"eager_elementwise", "true", When::always,
           "MPT's modeling code runs torch LayerNorm, GELU and residual adds as eager PyTorch ops; only attention and "
           "the loss are fused kernels"},
          {"loss_upcast", "false", When::always,
           "llm-foundry's default loss_fn fused_crossentropy (flash_attn.losses.cross_entropy) reads bf16 logits, no fp32 copy"},
          kAutogradAccumKnob,
          kFsdpShards,
          kFsdpHostGrads,
          kFsdpCpuGradSum}},
        {"llm.c",
         "karpathy/llm.c train_gpt2.cu built with USE_CUDNN=1, as its GPT-2 reproductions ran",
         {{"flash_attention", "true", When::always, "llm.c's cuDNN build calls cuDNN's fused flash attention"},
          {"attention_kernel", "\"fa3\"", When::always, "cuDNN's fused flash attention (FlashAttention-3-class on Hopper)"},
          {"loss_upcast", "false", When::always,
           "llm.c's fused_classifier kernel computes the softmax, loss and dlogits in place over the bf16 logits"},
          {"grad_accum_fusion", "true", When::always,
           "llm.c's matmul_backward accumulates weight gradients in the cuBLASLt GEMM (beta = 1)"},
          {"eager_elementwise", "false", When::always, "llm.c's own fused kernels for LayerNorm, GELU and residuals"},
          {"vocab_divisible_by", "128", When::always,
           "llm.c train_gpt2.cu: the embedding and the classifier hold padded_vocab_size = 50304 rows for GPT-2's 50257 "
           "(\"padded to 128 for efficiency\"; the softmax runs over the first 50257)"}}},
        {"hf-trainer",
         "Hugging Face Transformers Trainer (Accelerate: DDP or FSDP)",
         {{"attention_kernel", "\"fa2\"", When::fused_attention,
           "attn_implementation flash_attention_2 or sdpa (whose flash backend is FlashAttention-2)"},
          {"eager_elementwise", "true", When::always,
           "Transformers' modeling code runs norms, activations and residual adds as eager PyTorch ops"},
          kAutogradAccumKnob,
          {"loss_upcast", "true", When::always,
           "Transformers' ForCausalLMLoss upcasts the logits to fp32 before the cross-entropy"},
          {"eager_cross_entropy", "true", When::always,
           "ForCausalLMLoss calls nn.functional.cross_entropy on the upcast logits (transformers loss/loss_utils.py): "
           "an eager log_softmax and nll_loss"},
          kFsdpShards,
          kFsdpHostGrads,
          kFsdpCpuGradSum}},
    };
    return table;
}

const Preset* find(const std::string& name) {
    const std::string canon = canonical_framework(name);
    for (const Preset& p : presets())
        if (canon == p.name) return &p;
    return nullptr;
}

// A field of the parallel layout, which a user states and the planner searches: a preset fills it
// only where a plan file leaves it out (read_plan), never over a stated or searched value.
bool layout_field(const char* key) { return std::string_view(key) == "sequence_parallel"; }

}  // namespace

const std::vector<std::string>& framework_names() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> out;
        for (const Preset& p : presets()) out.push_back(p.name);
        return out;
    }();
    return names;
}

std::string framework_choices() {
    std::string out;
    for (const std::string& n : framework_names()) out += (out.empty() ? "" : ", ") + n;
    return out + " (nemo2 = megatron-bridge)";
}

std::string canonical_framework(const std::string& written) {
    const std::string name = ascii_lower(written);  // "DeepSpeed", "NeMo": as the projects spell themselves
    if (name == "nemo2" || name == "nemo-2") return "megatron-bridge";
    for (const Preset& p : presets())
        if (name == p.name) return name;
    return "";
}

std::string framework_summary(const std::string& name) {
    const Preset* p = find(name);
    return p ? p->summary : "";
}

std::vector<FrameworkKnob> framework_knobs(const std::string& framework, const PlanSpec& stated) {
    std::vector<FrameworkKnob> out;
    const Preset* p = find(framework);
    if (!p) return out;
    for (const Knob& k : p->knobs)
        if (applies(k.when, stated)) out.push_back({k.key, k.value_json, k.source});
    return out;
}

const std::vector<std::string>& framework_knob_keys() {
    static const std::vector<std::string> keys = [] {
        std::vector<std::string> out;
        // A knob that completes an object (offload) belongs to the plan, which states the object;
        // so does a layout field a preset fills only where the plan leaves it out.
        for (const Preset& p : presets())
            for (const Knob& k : p.knobs)
                if (k.value_json[0] != '{' && !layout_field(k.key) && std::find(out.begin(), out.end(), k.key) == out.end())
                    out.push_back(k.key);
        return out;
    }();
    return keys;
}

TierSplit deepspeed_gradient_tiers(int zero_stage, const TierSplit& optimizer) {
    if (zero_stage < 2 || optimizer.all_gpu()) return TierSplit{1, 0, 0};
    if (zero_stage < 3) return TierSplit{0, 1, 0};
    return TierSplit{optimizer.gpu, optimizer.cpu + optimizer.ssd, 0};
}

std::string framework_knob_source(const std::string& framework, const std::string& key) {
    const Preset* p = find(framework);
    if (p)
        for (const Knob& k : p->knobs)
            if (key == k.key) return k.source;
    return "";
}

void apply_framework(PlanSpec& p) {
    const Preset* preset = find(p.framework);
    if (!preset) return;
    // Each preset's values parsed once, with the knob table's setter for each key (the reader's
    // own assignment, so the planner's plans equal the files it writes).
    struct Setting {
        const char* key;
        PlanKnobAssign assign;
        nlohmann::json value;
    };
    static const std::map<const Preset*, std::vector<Setting>> parsed = [] {
        std::map<const Preset*, std::vector<Setting>> out;
        for (const Preset& pr : presets())
            for (const Knob& k : pr.knobs) {
                const PlanKnobAssign assign = plan_knob_assign(k.key);
                STRATA_ASSERT(assign != nullptr, "every preset key is a plan knob a preset may set");
                out[&pr].push_back({k.key, assign, nlohmann::json::parse(k.value_json)});
            }
        return out;
    }();
    const std::vector<Setting>& settings = parsed.at(preset);
    for (std::size_t i = 0; i < preset->knobs.size(); ++i)
        if (applies(preset->knobs[i].when, p) && !layout_field(preset->knobs[i].key)) {  // the planner states the layout
            const Setting& st = settings[i];
            if (!st.value.is_object()) {
                st.assign(p, st.value);
                continue;
            }
            // An object completes the knob's current value (read_plan's rule for a stated object).
            nlohmann::json value = nlohmann::json::parse(plan_knob_value(p, st.key));
            value.update(st.value);
            st.assign(p, value);
        }
}

}  // namespace strata::sim
