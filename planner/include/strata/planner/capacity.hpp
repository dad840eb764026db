// Capacity planning: sweep GPU types and cluster sizes (node granularity), search plans for each,
// and answer: the fewest GPUs and the cheapest cluster that train `tokens` by a deadline (or within
// a budget), with the Pareto front of time versus cost. Also the largest model of a family that
// trains on a cluster at all (Angel-PTM's question), with and without CPU/SSD offload.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/hwdb/view.hpp"
#include "strata/planner/outlook.hpp"
#include "strata/planner/search.hpp"

namespace strata::planner {

/// One GPU type to try: a cluster template (its `nodes` is ignored) and its hardware view.
struct ClusterOption {
    sim::ClusterSpec cluster;
    hwdb::HardwareView hw;
    sim::Calibration calibration;  ///< for this GPU type (identity: uncalibrated)
};

struct CapacityOptions {
    double tokens = 0;          ///< tokens to train
    double deadline_s = 0;      ///< 0 = no deadline
    double budget_usd = 0;      ///< 0 = no budget
    int max_gpus = 4096;
    int min_gpus = 8;
    SearchOptions search;       ///< per-size search (a reduced space keeps sweeps fast)
    /// Held-out residuals for the prediction intervals (null: none; the point prediction decides).
    const ResidualTable* residuals = nullptr;
    bool owned = false;         ///< owned hardware: cost = the price per GPU-hour (amortised) + energy
    std::function<void(int done, int total)> progress;
};

struct CapacityPoint {
    sim::ClusterSpec cluster;   ///< with its node count set
    RankedPlan best;            ///< best plan on it (simulated when possible)
    bool feasible = false;      ///< some plan fits
    std::int64_t valid_plans = 0;  ///< 0: nothing divides (batch, layers, heads), not a memory verdict
    double tokens_per_s = 0;
    RunOutlook outlook;         ///< interval, goodput, energy of the best plan over the run
    double time_s = 0;          ///< time to train, goodput included (predicted)
    double time_hi_s = 0;       ///< ... at the interval's pessimistic end
    double cost_usd = 0;        ///< GPUs x hours x price (+ energy when owned), predicted
    double cost_hi_usd = 0;     ///< ... at the pessimistic end
    bool meets = false;         ///< meets the deadline and the budget at the pessimistic end
    bool meets_predicted = false;  ///< ... at the predicted time and cost
    bool pareto = false;        ///< on the time/cost Pareto front
};

struct CapacityResult {
    std::vector<CapacityPoint> points;
    int fewest_gpus = -1;       ///< index of the point meeting the target with the fewest GPUs (pessimistic end)
    int fewest_gpus_predicted = -1;  ///< the same judged by the predicted time and cost
    int cheapest = -1;          ///< index of the cheapest point meeting the target
    int fastest = -1;
};

/// Node counts tried: 1, 2, 3, 4, 6, 8, 12, 16, ... (x2 and x1.5 steps) within [min, max] GPUs.
std::vector<int> node_counts(int gpus_per_node, int min_gpus, int max_gpus);

CapacityResult plan_capacity(const sim::ModelSpec& m, const std::vector<ClusterOption>& options, const CapacityOptions& o);

/// The search run for each size of a sweep, as `strata capacity` runs it: a reduced space
/// (no GPipe, ZeRO-1 only, no offload) and a three-plan shortlist, which keeps a sweep of dozens of
/// cluster sizes to seconds per size.
SearchOptions capacity_sweep_search(int global_batch);

/// The cluster a GPU type is swept as: the one of `clusters` with that GPU and at least 8 GPUs per
/// node that has the fewest nodes (its node type, fabric and price; the first such in the order
/// given), else a generic node of 8 such GPUs named after the GPU.
sim::ClusterSpec capacity_template(const std::vector<sim::ClusterSpec>& clusters, const std::string& gpu);

/// A model family scaled by hidden size, shaped like Megatron-LM's GPT ladder (Narayanan et al.,
/// SC21, Table 1: layers interpolated log-linearly in hidden between 1.7B and 1T).
sim::ModelSpec gpt_family_member(const sim::ModelSpec& base, std::int64_t hidden);

struct MaxModelResult {
    sim::ModelSpec model;       ///< largest member that trains
    double params = 0;
    RankedPlan plan;
    bool found = false;
};

enum class OffloadTiers { none, cpu, cpu_and_ssd };

/// Largest member of the family (hidden multiples of 512) that has a plan that fits and simulates
/// without OOM on `option`, using only the given offload tiers; `expandable_segments`: the
/// allocator the runs use (SearchSpace::expandable_segments); `threads`: simulations in parallel
/// (0: all cores); `framework`: only plans that framework runs, with its preset's knobs
/// (SearchSpace::framework; "" = any).
MaxModelResult max_trainable_model(const sim::ModelSpec& base, const ClusterOption& option, OffloadTiers tiers,
                                   int global_batch, const std::atomic<bool>* cancel = nullptr,
                                   bool expandable_segments = false, int threads = 0, const std::string& framework = {});

std::string capacity_to_json(const sim::ModelSpec& m, const CapacityOptions& o, const CapacityResult& r);

}  // namespace strata::planner
