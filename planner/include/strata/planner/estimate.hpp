// The planner's fast path: a closed-form step-time estimate for a plan, fast enough to rank the
// whole plan space (target >= 100,000 plans/s on one core). It is not a second simulator: the time
// of one layer's forward and backward (with its TP/CP/EP communication and recomputation) comes
// from running the real lowering and engine on a one-layer, one-micro-batch program, memoised per
// layer shape; only the pipeline, data-parallel, optimizer and offload terms are closed forms.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <array>
#include <tuple>
#include <vector>

#include "strata/hwdb/view.hpp"
#include "strata/sim/cost.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/spec.hpp"
#include "strata/lowering/tensors.hpp"

namespace strata::planner {

struct FastEstimate {
    double step_time_s = 0;
    double tokens_per_s = 0;
    double tflops_per_gpu = 0;
    double mfu = 0;
    double compute_s = 0;        ///< the busiest stage's compute per step (m micro-batches)
    double bubble_s = 0;         ///< pipeline fill/drain and p2p on the critical path
    double exposed_comm_s = 0;   ///< DP/ZeRO communication not hidden under compute
    double recompute_s = 0;      ///< recomputation inside compute_s
    double optimizer_s = 0;      ///< exposed optimizer step (and its offload transfers)
    double offload_s = 0;        ///< exposed parameter fetches from cpu/ssd
    double hbm_bytes = 0;        ///< analytical peak per GPU (worst stage)
    bool fits = true;            ///< analytical memory fits every tier
    bool near_fit = false;       ///< over capacity but within the safety margin
};

/// Per-layer timings measured on the engine for one micro-batch.
struct LayerTimes {
    double fwd_s = 0, bwd_s = 0, recompute_s = 0;  ///< per layer (mean over a dense/MoE period)
    double head_fwd_s = 0, head_bwd_s = 0;          ///< embedding + logits + loss
    /// plan.moe_a2a_overlap: a merged step's window over its forward's and backward's unmerged
    /// ones (1 without merging); estimate() applies it to the schedule's merged share.
    double merged_scale = 1;
};

class Estimator {
public:
    Estimator(const sim::ModelSpec& m, const sim::ClusterSpec& c, const hwdb::HardwareView& hw,
              double memory_margin = 1.10, const sim::Calibration& calibration = {});
    ~Estimator();
    FastEstimate estimate(const sim::PlanSpec& p);
    /// `dense_first`: the times of one of the model's leading dense layers (moe.first_k_dense)
    /// instead of a dense/MoE period.
    LayerTimes layer_times(const sim::PlanSpec& p, bool dense_first = false);
    sim::Capacities capacities() const { return caps_; }
    std::size_t cache_size() const { return cache_.size(); }

private:
    using Key = std::vector<std::int64_t>;  // layer_times_key
    sim::ModelSpec m_;
    sim::ClusterSpec c_;
    hwdb::HardwareView hw_;
    sim::Capacities caps_;
    double margin_;
    sim::Calibration cal_;
    double flops_per_token_ = 0;  ///< model_flops_per_token(m_): a walk over every layer, once
    std::map<Key, LayerTimes> cache_;
    Key key_scratch_, stage_key_scratch_, share_key_scratch_;  // keys being looked up (no allocation on a hit)
    sim::MemoryCache mem_cache_;
    std::map<Key, sim::StageParams> stage_params_;  // the worst stage and the plan's layout
    std::map<Key, double> merged_share_;            // combined 1F1B: passes of a stage's schedule merged
    double merged_share(const sim::PlanSpec& p, int stage);
};

/// What Estimator::layer_times caches on: the knobs of the one-layer probe's plan (plan_knobs.hpp),
/// less those its windows cannot see.
std::vector<std::int64_t> layer_times_key(const sim::PlanSpec& p, bool dense_first = false);

/// HBM/DRAM/SSD capacities of a cluster from its hardware view.
sim::Capacities capacities_of(const sim::ClusterSpec& c, const hwdb::HardwareView& hw);

}  // namespace strata::planner
