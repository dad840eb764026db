// The space of plans the planner searches, and its enumeration. Every plan the enumerator yields
// is valid for the model and cluster (divisibility, Megatron's constraints); the counters say how
// many raw combinations were considered and why the others were dropped.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/lowering/spec.hpp"

namespace strata::planner {

/// Which dimensions to search. Defaults follow what practitioners try (Megatron-LM, DeepSpeed).
struct SearchSpace {
    int global_batch = 0;                   ///< sequences per step (0 = keep the plan default: 512)
    bool tp_within_node = true;             ///< tp never crosses a node (NVLink only)
    int max_tp = 8;
    int max_cp = 16;
    int max_pp = 128;
    int max_vpp = 8;
    int max_micro_batch = 16;
    std::vector<int> zero_stages{0, 1, 2, 3};
    std::vector<sim::Recompute> recomputes{sim::Recompute::none, sim::Recompute::selective, sim::Recompute::full};
    bool search_gpipe = true;
    /// pp > 1: also DeepSeek's DualPipeV (two chunks a rank in a V, at least 2 x pp micro-batches),
    /// where the framework runs it (no framework: DeepSeek's own code; Megatron-Core; torchtitan).
    bool search_dualpipev = true;
    bool search_sequence_parallel = true;   ///< also try sp off when tp > 1
    bool search_expert_tp = true;           ///< MoE with tp > 1: also try whole experts (expert_tp 1, EP over tp x cp x dp)
    bool search_deepep = true;              ///< MoE with EP: also try DeepEP's dispatch (a copy per GPU and node reached)
    bool search_a2a_overlap = true;         ///< MoE with EP: also try combined 1F1B's all-to-all overlap (moe_a2a_overlap)
    bool search_cp_comm_type = true;        ///< cp > 1: also try Ulysses' all-to-all where the heads split over cp
    bool search_offload = true;             ///< optimizer/params to cpu or ssd, and splits
    bool offload_to_ssd = true;             ///< include the NVMe tier among the offload choices
    bool search_uneven_pipeline = true;     ///< pp that does not divide the layers
    sim::Precision precision = sim::Precision::bf16;
    /// The allocator every plan runs with (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): a
    /// setting of the user's stack, not a dimension searched.
    bool expandable_segments = false;
    /// The framework that will run the plan (a plan.framework preset, "" = none): every plan gets
    /// its knobs, and what it cannot run (framework_refusal) is dropped as invalid.
    std::string framework;
};

struct SpaceCounters {
    std::int64_t considered = 0;      ///< raw combinations looked at
    std::int64_t invalid = 0;         ///< dropped by divisibility / Megatron constraints
    std::int64_t valid = 0;           ///< yielded
};

/// How the plan tables write the CP degree: "4" with the ring, "4u" with Ulysses' all-to-all, "4g"
/// with the K/V all-gather.
std::string cp_label(const sim::PlanSpec& p);

/// The offload variants tried for a plan (index 0 = everything on the GPU).
struct OffloadChoice {
    sim::OffloadSpec offload;
    bool lock_free = false;
    int min_zero_stage = 0;           ///< e.g. params offload needs ZeRO-3 (ZeRO-Infinity)
    const char* label = "gpu";
};
std::vector<OffloadChoice> offload_choices(bool search_offload, bool ssd = true);

/// Enumerate every valid plan; `visit` returns false to stop early. Deterministic order.
/// `shard`/`shards`: only yield plans whose parallel layout index % shards == shard.
SpaceCounters enumerate_plans(const sim::ModelSpec& m, const sim::ClusterSpec& c, const SearchSpace& s,
                              const std::function<bool(const sim::PlanSpec&)>& visit, int shard = 0, int shards = 1);

/// Divisors of n in increasing order (none for n < 1), in O(sqrt(n)).
std::vector<int> divisors(int n);

}  // namespace strata::planner
