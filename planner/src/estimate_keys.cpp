// The estimator's probe and cache keys: the one-layer plan whose engine run gives the per-layer
// times, and which plan knobs its key and the stage-parameter key leave out.
#include "estimate_keys.hpp"

#include "strata/planner/estimate.hpp"

namespace strata::planner {

using namespace strata::sim;

// The one-layer, one-micro-batch plan the probe lowers: one layer period, no pipeline; ZeRO-3 kept
// (its per-layer gathers are part of a layer's time), other DP work and offload are closed forms
// in estimate().
PlanSpec probe_plan(const PlanSpec& p) {
    PlanSpec p1 = p;
    p1.pp = 1;
    p1.vpp = 1;
    p1.microbatch_group = 0;
    p1.schedule = Schedule::one_f_one_b;
    // Combined 1F1B (plan.moe_a2a_overlap) merges a forward with the next micro-batch's backward:
    // two micro-batches give the probe one merged step (F0, then F1 beside B0, then B1).
    p1.global_batch = p.micro_batch * p.dp * (p.moe_a2a_overlap ? 2 : 1);
    p1.layer_split.clear();
    p1.virtual_layer_split.clear();
    // Pipelined FSDP gathers and reduces once a step: a closed form in estimate(), not a per-layer bound.
    p1.zero_stage = p.zero_stage == 3 && !p.pipelined_fsdp() ? 3 : 0;
    p1.offload = OffloadSpec{};
    p1.lock_free_update = false;
    p1.recompute_layers = -1;  // the probe's layer is recomputed; estimate() scales to the stage's share
    p1.recompute_every = 0;
    p1.grad_accum_fusion = true;  // a closed form in estimate()
    // The DP reduction (ZeRO 0-2) is a closed form in estimate(), its interference included: overlapped in
    // this one-micro-batch probe it would slow every micro-batch's backward, not only the last.
    if (p1.zero_stage != 3) p1.overlap_grad_reduce = false;
    return p1;
}

namespace {
// What the probe's windows cannot see, left out of its cache key: the labels and the framework
// (its preset set the knobs already), the optimizer's moment types and the allocator (no memory
// is emitted), pipeline send/recv (one stage). The loss's implementation is seen: it sets the
// loss kernels' traffic. Without ZeRO-3 the DP degree, the gradients' type and the buckets feed
// only the closed forms as well.
const PlanKnobSet& probe_unseen(bool zero3) {
    static const PlanKnobSet with_zero3{"framework", "exp_avg_dtype", "exp_avg_sq_dtype", "expandable_segments", "p2p_blocking",
                                        "p2p_scatter_gather"};
    static const PlanKnobSet without{"framework", "exp_avg_dtype", "exp_avg_sq_dtype", "expandable_segments", "p2p_blocking",
                                     "p2p_scatter_gather", "dp", "global_batch", "fp32_grads", "dp_bucket_mb"};
    return zero3 ? with_zero3 : without;
}
}  // namespace

// A stage's parameter counts depend on its layers (the pipeline, its schedule and splits) and on
// how TP and EP cut them; the key is the plan less every other knob.
const PlanKnobSet& stage_params_unread() {
    static const PlanKnobSet unread{
        "framework", "dp", "cp", "microbatch_group", "micro_batch", "global_batch", "sequence_parallel", "flash_attention",
        "attention_kernel", "zero_stage", "recompute", "recompute_layers", "recompute_every", "recompute_policy", "recompute_modules",
        "precision", "exp_avg_dtype", "exp_avg_sq_dtype", "fp32_grads", "grad_accum_fusion", "loss_upcast", "eager_cross_entropy",
        "loss_parallel", "torch_pipelining", "offload", "cpu_grad_accumulation", "lock_free_update", "overlap_grad_reduce", "bucket_reduce_barrier", "overlap_param_gather", "tp_comm_overlap", "p2p_blocking",
        "p2p_scatter_gather", "expandable_segments", "moe_act_fp8_cache", "moe_a2a_overlap", "moe_dispatcher", "moe_probs_at",
        "eager_elementwise", "dp_bucket_mb"};
    return unread;
}

void probe_key(const PlanSpec& p1, bool dense_first, std::vector<std::int64_t>& key) {
    key.clear();
    key.push_back(dense_first ? 1 : 0);
    encode_plan(p1, key, &probe_unseen(p1.zero_stage == 3));
}

std::vector<std::int64_t> layer_times_key(const PlanSpec& p, bool dense_first) {
    std::vector<std::int64_t> key;
    probe_key(probe_plan(p), dense_first, key);
    return key;
}

}  // namespace strata::planner
