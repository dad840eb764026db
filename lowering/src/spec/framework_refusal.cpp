// What each framework cannot run (plan.framework): the rules validate_plan and the planner's
// search both call, each naming the framework and the plan field (docs/frameworks.md).
#include <optional>
#include <string>

#include "strata/lowering/frameworks.hpp"

namespace strata::sim {
namespace {
std::string q(const std::string& s) { return "\"" + s + "\""; }
}  // namespace

std::optional<FrameworkRefusal> framework_refusal(const PlanSpec& p) {
    const std::string fw = canonical_framework(p.framework);
    if (fw.empty()) return std::nullopt;
    const std::string who = "plan.framework = " + q(fw);
    auto refuse = [&](const std::string& field, const std::string& why) {
        return std::optional<FrameworkRefusal>(FrameworkRefusal{field, why + " (" + who + ")"});
    };
    const bool megatron_like = fw == "megatron-core" || fw == "megatron-bridge" || fw == "nemo";
    const bool deepspeed_like = fw == "deepspeed" || fw == "deepspeed-2021" || fw == "megatron-deepspeed-2022";
    const bool data_parallel_only = fw == "llm.c" || fw == "hf-trainer";
    if (p.cp > 1 && deepspeed_like && (fw != "deepspeed" || p.cp_comm_type != CpCommType::a2a))
        return refuse(fw == "deepspeed" ? "plan.cp_comm_type" : "plan.cp",
                      fw == "deepspeed" ? "must be \"a2a\": DeepSpeed splits sequences with Ulysses' all-to-alls, not a ring"
                                        : "must be 1: DeepSpeed's sequence parallelism (Ulysses) came in 2023 (plan.framework = "
                                          "\"deepspeed\")");
    if (p.cp > 1 && p.cp_comm_type == CpCommType::a2a && !megatron_like && !deepspeed_like)
        return refuse("plan.cp_comm_type", "must be \"allgather\" or \"p2p\": PyTorch's context-parallel SDPA all-gathers or "
                                           "rotates the K/V shards, it has no head split");
    const bool fsdp2 = fw == "torchtitan" || fw == "torchtitan-compile" || fw == "nemo-automodel";
    if ((fw == "torchtitan" || fw == "torchtitan-compile") && p.tp > 1 && !p.sequence_parallel)
        return refuse("plan.sequence_parallel", "must be true with plan.tp > 1: torchtitan's TP plan shards the norms over the sequence "
                                                "(SequenceParallel in parallelize_llama.py apply_tp)");
    if (p.cp > 1 && !megatron_like && !fsdp2 && !deepspeed_like)
        return refuse("plan.cp", "must be 1: context parallelism is Megatron-Core's, torchtitan's and NeMo AutoModel's, not this "
                                 "framework's");
    if (p.pp > 1 && (data_parallel_only || fw == "llm-foundry"))
        return refuse("plan.pp", "must be 1: this framework has no pipeline parallelism");
    if (p.tp > 1 && data_parallel_only)
        return refuse("plan.tp", "must be 1: this framework has no tensor parallelism");
    // Megatron-DeepSpeed did: DeepSpeed-MoE (arXiv:2201.05596) trained its MoE models with it
    // (examples_deepspeed/MoE: --moe-expert-parallel-size), on DeepSpeed's MoE layer since v0.5.
    if (p.ep > 1 && (fw == "megatron-lm-2021" || fw == "llm.c"))
        return refuse("plan.ep", "must be 1: this framework has no expert parallelism");
    if (p.zero_stage > 1 && (fw == "megatron-lm-2021" || fw == "llm.c"))
        return refuse("plan.zero_stage", "must be 0 or 1: this framework shards at most the optimizer states (ZeRO-1)");
    if (p.zero_stage == 1 && (fsdp2 || fw == "llm-foundry"))
        return refuse("plan.zero_stage", "must be 0, 2 or 3: FSDP shards gradients with the optimizer states (ZeRO-2 as "
                                         "reshard_after_forward = False, ZeRO-3 by default), there is no ZeRO-1");
    if (fw == "deepspeed-2021" && p.precision == Precision::bf16 && p.zero_stage >= 2)
        return refuse("plan.precision", "must be fp16 or fp32 with ZeRO-2/3: bf16 came to them with DeepSpeed v0.6 (PR #1453, "
                                        "January 2022; use plan.framework = \"deepspeed\")");
    if (deepspeed_like && p.pp > 1 && p.zero_stage >= 2)
        return refuse("plan.zero_stage", "must be 0 or 1 with pp > 1: DeepSpeed's PipelineEngine asserts that ZeRO-2 "
                                         "and ZeRO-3 are incompatible with pipeline parallelism");
    if (deepspeed_like && (p.schedule == Schedule::interleaved_1f1b || p.schedule == Schedule::dualpipe_v))
        return refuse("plan.schedule", "must be gpipe or 1f1b: DeepSpeed's PipelineEngine has no interleaved schedule");
    // PyTorch's ScheduleDualPipeV (torch.distributed.pipelining, DeepSeek's dualpipev.py steps with
    // the same zero-bubble split and overlapped pairs) is torchtitan's pipeline_parallel_schedule
    // "DualPipeV"; it raises for stages holding torch.compile'd modules.
    if (p.schedule == Schedule::dualpipe_v && fw == "torchtitan-compile")
        return refuse("plan.schedule", "must not be dualpipev under torch.compile: PyTorch's ScheduleDualPipeV raises for stage "
                                       "modules compiled with torch.compile (_check_torch_compile_compatibility; use plan.framework = "
                                       "\"torchtitan\")");
    if (p.schedule == Schedule::dualpipe_v && !megatron_like && fw != "torchtitan")
        return refuse("plan.schedule", "must not be dualpipev: DualPipeV runs in DeepSeek's own code, Megatron-Core and torchtitan "
                                       "(PyTorch's ScheduleDualPipeV)");
    // torchtitan's async TP (compile.enable_async_tensor_parallel: Inductor's pass pipelines the
    // TP all-gathers and reduce-scatters with their matmuls) needs torch.compile on the model.
    if (p.tp_comm_overlap && fw == "torchtitan")
        return refuse("plan.tp_comm_overlap", "needs plan.framework = \"torchtitan-compile\": torchtitan's async TP is an "
                                              "Inductor pass and requires torch.compile on the model");
    if (p.tp_comm_overlap && !megatron_like && fw != "torchtitan-compile")
        return refuse("plan.tp_comm_overlap", "must be false: TP communication overlap is Transformer Engine's userbuffers under "
                                              "Megatron-Core and torchtitan's async TP");
    // Megatron-Core 0.14's combined 1F1B (--overlap-moe-expert-parallel-comm, 2025): Megatron-Bridge's
    // recipes, not NeMo 1.x's launcher of 2024.
    // torchtitan overlaps EP with DualPipeV's pairs only, and not beside activation checkpointing
    // (dual_pipe_v.py's get_dual_pipe_v_flag raises NotImplementedError).
    const bool titan_pairs = fw == "torchtitan" && p.schedule == Schedule::dualpipe_v;
    if (p.moe_a2a_overlap && titan_pairs && p.ep > 1 && p.recompute != Recompute::none)
        return refuse("plan.recompute", "must be \"none\" with the EP overlap of torchtitan's DualPipeV: torchtitan raises "
                                        "NotImplementedError for expert parallel with DualPipeV and activation checkpointing (set "
                                        "plan.moe_a2a_overlap false to checkpoint)");
    if (p.moe_a2a_overlap && fw != "megatron-core" && fw != "megatron-bridge" && !titan_pairs)
        return refuse("plan.moe_a2a_overlap", "must be false: the EP all-to-all overlap is Megatron-Core's combined 1F1B "
                                              "(--overlap-moe-expert-parallel-comm), DeepSeek's DualPipe and torchtitan's "
                                              "DualPipeV");
    if (p.moe_dispatcher == MoeDispatcher::deepep && !megatron_like && fw != "nemo-automodel")
        return refuse("plan.moe_dispatcher", "must be \"alltoall\": the DeepEP dispatcher is Megatron-Core's and NeMo AutoModel's here");
    if (p.lock_free_update)
        return refuse("plan.lock_free_update", "must be false: the lock-free update is Angel-PTM's own");
    const OffloadSpec& o = p.offload;
    const bool any_ssd = o.optimizer.ssd > 0 || o.params.ssd > 0 || o.grads.ssd > 0 || o.activations.ssd > 0;
    if (any_ssd && !deepspeed_like)
        return refuse("plan.offload", "must keep everything off the SSD: NVMe offload is DeepSpeed's ZeRO-Infinity");
    // DeepSpeed's ZeRO-1/2 optimizer (stage_1_and_2.py) sets cpu_offload for any offload_optimizer
    // device but none: an "nvme" device runs as CPU offload there. Only ZeRO-3's optimizer swaps
    // its state to NVMe (stage3.py: swap_optimizer = device == nvme).
    if (o.optimizer.ssd > 0 && p.zero_stage < 3)
        return refuse("plan.offload.optimizer", "must not be on the SSD below ZeRO-3: DeepSpeed's ZeRO-1/2 optimizer runs an "
                                                "\"nvme\" offload_optimizer device as CPU offload (stage_1_and_2.py), its state in "
                                                "host memory; set \"cpu\", or plan.zero_stage 3 (ZeRO-Infinity swaps to NVMe)");
    const bool states_off = !o.params.all_gpu() || !o.grads.all_gpu();
    if (!o.optimizer.all_gpu() && (fw == "llm.c" || fw == "megatron-lm-2021"))
        return refuse("plan.offload.optimizer", "must be \"gpu\": this framework has no optimizer offload");
    // DeepSpeed offloads a part of the optimizer (offload_optimizer.ratio, ZeRO-Offload++'s
    // Twin-Flow of 2023) under ZeRO-3 only: stage3.py takes offload_ratio, stage_1_and_2.py moves
    // all of it.
    const bool split_optimizer = o.optimizer.gpu > 0 && o.optimizer.gpu < 1;
    if (split_optimizer && deepspeed_like && (fw != "deepspeed" || p.zero_stage != 3))
        return refuse("plan.offload.optimizer", fw == "deepspeed" ? "must be offloaded whole below ZeRO-3: DeepSpeed reads "
                                                                    "offload_optimizer.ratio in ZeRO-3 only (stage3.py)"
                                                                  : "must be offloaded whole: a partial optimizer offload "
                                                                    "(offload_optimizer.ratio) came with DeepSpeed's ZeRO-Offload++ "
                                                                    "in 2023, for ZeRO-3");
    // torchtitan's training.enable_cpu_offload is FSDP2's CPUOffloadPolicy, Composer's cpu_offload
    // FSDP's CPUOffload(offload_params=True): the sharded parameters, their gradients and the
    // optimizer's states all live on the host and the optimizer steps there, never a part of them.
    const auto on_host = [](const TierSplit& t) { return t.cpu == 1.0; };
    if ((fw == "torchtitan" || fw == "torchtitan-compile" || fw == "llm-foundry") && (!o.optimizer.all_gpu() || states_off) &&
        (p.zero_stage != 3 || !on_host(o.optimizer) || !on_host(o.params)))
        return refuse("plan.offload", "must move the optimizer and the parameters to \"cpu\" together under ZeRO-3, or nothing: "
                                      "FSDP's CPU offload (torchtitan's training.enable_cpu_offload, FSDP2's CPUOffloadPolicy; "
                                      "Composer's cpu_offload) keeps the sharded parameters, gradients and optimizer states on the "
                                      "host and steps there");
    if ((!o.optimizer.all_gpu() || states_off) && fw == "nemo-automodel")
        return refuse("plan.offload", "must keep everything on the GPU: NeMo AutoModel offloads with FSDP2's CPUOffloadPolicy "
                                      "(parameters, gradients and the optimizer's bf16 states together), which is not modelled");
    if (states_off && (megatron_like || fw == "llm.c" || fw == "megatron-lm-2021"))
        return refuse("plan.offload", "may move only the optimizer (Megatron-Core's --optimizer-cpu-offload): this "
                                      "framework keeps parameters and gradients on the GPU");
    if (!o.activations.all_gpu() && !deepspeed_like && !megatron_like)
        return refuse("plan.offload.activations", "must be \"gpu\": this framework does not offload activations");
    return std::nullopt;
}

}  // namespace strata::sim
