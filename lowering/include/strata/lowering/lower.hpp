// Lowering: (model, cluster, plan) -> Program, the ordered per-rank instruction lists that both
// the simulator's engine and the runtime execute. Pure functions: no hardware costs here (cost.hpp
// prices each instruction later), no I/O, no global state. Design and formulas: docs/lowering.md.
// Not here: validation of the plan (spec_io.hpp's validate_plan runs before), memory sizes (tensors.hpp).
#pragma once
#include <vector>

#include "strata/lowering/program.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::sim {

struct LowerOptions {
    /// false: one RankProgram per pipeline stage standing for its tp*cp*dp identical peers;
    /// true: one RankProgram per global rank (stragglers, MoE load skew per EP rank), with every
    /// collective matched across programs by match_id.
    bool full_mode = false;
    /// Emit Alloc/Free for every tensor of tensors.hpp (the engine's memory pools follow them).
    bool emit_memory = true;
    /// Training steps to emit. One is the steady state, lock-free too: its host update (of the
    /// previous step's gradients) runs under the step's own forward and backward.
    int steps = 1;
    /// DualPipeV's zero-bubble split (PipeSlot::defer_weights): false lowers every backward whole
    /// and skips the weight slots, an ablation for tests; DualPipe itself always splits.
    bool zero_bubble = true;
    /// ZeRO-Infinity: parameters per optimizer sub-group swapped from SSD at a time (DeepSpeed's
    /// sub_group_size default is 1e9).
    double ssd_sub_group_params = 1e9;
    /// Name every instruction's operands (Program::tensors, RankProgram::operands) and each rank's
    /// groups, so the Program can be executed on real numbers (the runtime). Needs full_mode and a
    /// model and plan the dataflow covers (params.hpp, dataflow_unsupported). The instructions are
    /// the same with or without it.
    bool dataflow = false;
    /// Full mode: lower only these global ranks (ascending; empty: all of them). Program::ranks
    /// then holds only their programs, each with its RankProgram::global_rank; a memory walk of a
    /// representative set of ranks needs no others (runtime.hpp, RunOptions::walk_all_ranks).
    std::vector<int> ranks;
};

/// One slot of a pipeline schedule: run the forward or the backward of `microbatch` through the
/// virtual stage (model chunk) `chunk` of this pipeline rank. Zero-bubble split (DualPipe's
/// WeightGradStore): a backward with `defer_weights` computes the input gradients only; its layers'
/// weight gradients run in a later slot with `weights` (forward false) of the same micro-batch and
/// chunk, in the order the deferred backwards ran (a FIFO).
struct PipeSlot {
    int microbatch = 0;
    int chunk = 0;
    bool forward = true;
    bool defer_weights = false;
    bool weights = false;
    /// A 1F1B steady-state forward: under combined 1F1B (plan.moe_a2a_overlap) it runs merged with
    /// the backward after it (merged_pair). The warm-up's last forward and the cool-down's first
    /// backward are not a pair, even where no steady state lies between them.
    bool steady = false;
    bool operator==(const PipeSlot&) const = default;
};

/// The ordered slots pipeline rank `stage` (0..pp-1) runs in one step with `micro_batches`
/// micro-batches and `vpp` chunks per rank. GPipe: all forwards, then all backwards. 1F1B
/// (Megatron, non-interleaved): min(pp-stage-1, m) warm-up forwards, steady 1F+1B, cool-down.
/// Interleaved 1F1B (Megatron-Core): micro-batches pass each chunk in groups of `group` (0 = pp;
/// the last group takes the rest), warm-up (pp-stage-1)*2 + (vpp-1)*group capped at m*vpp (no
/// all-forward case for m == pp); needs valid_microbatch_group(m, pp, group). Each (mb, chunk)
/// appears once forward and once backward, forward first. DualPipeV (dualpipev.py's eight steps)
/// also splits some backwards (PipeSlot::defer_weights) and adds their weight slots. `a2a_overlap` (plan.moe_a2a_overlap,
/// Megatron-Core's combined 1F1B): one more warm-up forward in 1F1B and interleaved 1F1B
/// (schedules.py get_pp_rank_microbatches: "to ensure the forward and backward computations are
/// independent in all 1f1b steps"; with pp 1, combined_1f1b_schedule_for_no_pipelining's F0, then
/// F(i+1) beside B(i)), so that each steady forward and the backward after it run as one merged step.
std::vector<PipeSlot> pipeline_schedule(Schedule s, int pp, int stage, int micro_batches, int vpp, int group = 0,
                                        bool a2a_overlap = false);

/// Under plan.moe_a2a_overlap (with ep >= 2), whether slot `a` and the slot `b` after it run as one
/// merged step: a forward and a backward of another micro-batch (DualPipeV: of the other chunk too,
/// its F0 B1 and F1 B0 pairs).
bool merged_pair(const PlanSpec& p, const PipeSlot& a, const PipeSlot& b);

/// The kernel a compute instruction of `op` is under plan `p` (Instr::kernel): the attention
/// family (flash_attention, attention_kernel), eager or fused memory-bound ops (eager_elementwise).
Kernel kernel_of(Op op, const PlanSpec& p);

/// Lower one training step (or LowerOptions::steps of them). Conventions of the result:
/// - Instr::microbatch = step * micro_batches + mb; Instr::chunk = virtual stage of the rank.
/// - Event ids are per RankProgram, 0..Program::events-1, each recorded exactly once.
/// - Pipeline sends sit on pp_p2p in the order compute produces them, receives on pp_recv in the
///   order compute consumes them; a pair (same match_id; peer = the other RankProgram) moves its
///   data once both sides have reached it (rendezvous). Keeping receives on their own stream makes
///   this deadlock-free for every schedule (a receive never waits behind a blocked send).
/// - A collective with match_id != 0 starts when `participants` (= group_size) programs have
///   reached the instruction with that match_id (full mode: every collective; symmetric mode: only
///   the tied-embedding all-reduce between first and last stage, Group::embedding, group_size 2).
/// - Group::dp collectives run over the data-parallel ranks including context parallelism
///   (Megatron's dp x cp group): group_size = dp * cp. Group::edp: dp * cp / ep.
/// - Alloc/Free pair by Instr::tensor (unique over the Program); persistent model states and
///   buffers are allocated at program start and never freed.
/// - Dataflow (LowerOptions::dataflow), the rules an executor of real numbers relies on:
///   a GEMM's operands are {input, weight[, bias]} -> {output} forward, {output grad, weight} ->
///   {input grad} for dgrad, {input, output grad} -> {weight grad[, bias grad]} for wgrad; a
///   param_grad output is always accumulated into, never overwritten; an all-reduce reads and
///   writes the same tensor; an all-gather concatenates rows (or a flat range's slices) in group
///   order and a reduce-scatter leaves each member its slice (zeroing the rest of a gradient
///   range, as ZeRO keeps only its shard); a flat range is sliced evenly by group rank.
///   Gradient buckets are ranges, and every parameter all-gather uses the ranges its gradients
///   were reduce-scattered over, so ZeRO shards agree.
Program lower(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const LowerOptions& o = {});

}  // namespace strata::sim
