// What a plan means for a whole run: its step time and throughput with a prediction interval,
// goodput (checkpoints, failures, restarts), energy, time to train and cost (docs/planner.md).
// `plan` shows it per ranked plan, `capacity` per cluster size.
#pragma once
#include <nlohmann/json.hpp>

#include "strata/planner/energy.hpp"
#include "strata/planner/goodput.hpp"
#include "strata/planner/interval.hpp"
#include "strata/planner/search.hpp"

namespace strata::planner {

/// A figure and its interval (lo <= mid <= hi for times and costs; for rates lo is the
/// pessimistic end too). Without an interval lo = mid = hi.
struct Range {
    double lo = 0, mid = 0, hi = 0;
};

struct RunOutlook {
    StepInterval interval;          ///< multipliers of the step time (available = false: no residuals)
    Range step_time_s, tokens_per_s;
    GoodputInputs goodput_in;
    Goodput goodput;
    PowerModel power;
    StepEnergy energy;              ///< at the predicted step
    double peak_hbm_bytes = 0, hbm_capacity_bytes = 0, memory_error = 0;
    const char* memory = "fits";    ///< memory_verdict
    // The whole run (tokens > 0):
    double tokens = 0;
    Range wall_s;                   ///< time to train, goodput included
    RunEnergy run_energy;           ///< at the predicted time
    Range rental_usd;               ///< GPUs x hours x price
    Range cost_usd;                 ///< rental, plus the energy when the hardware is owned
    bool owned = false;
};

/// `residuals` may be null (no interval). tokens = 0: per-step figures only.
RunOutlook run_outlook(const sim::ModelSpec& m, const sim::ClusterSpec& c, const hwdb::HardwareView& hw, const RankedPlan& rp,
                       double tokens, const ResidualTable* residuals, bool owned);

/// GPU-seconds of one step by state: the engine's for a simulated plan; from the estimate's
/// terms otherwise (busiest stage's compute, exposed comm/optimizer/offload, the rest idle).
GpuStateSeconds gpu_state_seconds(const RankedPlan& rp, int gpus);

nlohmann::ordered_json outlook_json(const RunOutlook& o);

}  // namespace strata::planner
