// Plan search: enumerate the valid plans, prune by the analytical memory model (with a safety
// margin so near-misses are still simulated), rank all survivors with the fast estimate, simulate
// a shortlist with the discrete-event engine on a thread pool, and rank that by simulated
// throughput. The shortlist is wide enough that the best plan is never cut (tests compare with
// brute force).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/hwdb/view.hpp"
#include "strata/planner/estimate.hpp"
#include "strata/planner/space.hpp"
#include "strata/lowering/spec.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::planner {

/// The engine's verdict on one plan.
struct SimSummary {
    double step_time_s = 0, tokens_per_s = 0, tflops_per_gpu = 0, mfu = 0;
    double bubble_fraction = 0, exposed_comm_s = 0;
    double peak_hbm_bytes = 0, peak_cpu_bytes = 0, peak_ssd_bytes = 0;
    bool oom = false;
    std::string critical_path;
    /// GPU-seconds of one step over every GPU of the job, by state (energy.hpp): the compute
    /// stream running kernels, waiting on communication or copies, or idle (bubble, host waits).
    double gpu_compute_s = 0, gpu_comm_s = 0, gpu_idle_s = 0;
    /// Extended from three simulations of fewer micro-batches in the schedule's steady state
    /// (simulate_plan); the critical path is then the largest of those three's.
    bool steady_state = false;
    /// Not simulated: the steady state's check failed and the whole simulation would not fit the
    /// memory it was given (simulate_plan's whole_budget_bytes). Nothing else is set.
    bool too_large = false;
};

struct RankedPlan {
    sim::PlanSpec plan;
    FastEstimate estimate;
    bool simulated = false;
    SimSummary sim;
    std::string why;  ///< what dominates: bubble, exposed comm, recompute, optimizer, offload
};

/// The family a plan's fast-estimate error depends on most: ZeRO-3 or not, pipelined or not, and
/// whether any model state is offloaded (search.cpp's shortlist quota).
int plan_family(const sim::PlanSpec& p);

struct SearchOptions {
    SearchSpace space;
    int top_k = 10;
    int shortlist = 12;              ///< simulate at least this many of the best estimates
    double shortlist_margin = 0.30;  ///< ... and every plan within this fraction of the best estimate (capped)
    int max_simulated = 24;
    /// Of the plans within the shortlist, the best this many of every plan family (plan_family)
    /// are simulated before the rest in estimate order; 0 = estimate order only.
    int family_quota = 2;
    /// Follow-up: if fewer simulated plans than this fit, simulate further candidates whose
    /// analytical peak, scaled by the worst simulated / analytical ratio seen, fits; up to
    /// follow_up_factor x max_simulated simulations in all. 0: no follow-up.
    int min_fitting = 3;
    int follow_up_factor = 4;
    double memory_margin = 1.10;     ///< keep plans up to 10% over capacity for simulation
    int threads = 0;                 ///< 0 = hardware concurrency
    int shard = 0, shards = 1;
    bool simulate = true;            ///< false: rank by the fast estimate only
    sim::Calibration calibration;    ///< cost multipliers for the estimate and the simulations (identity: none)
    /// Name what bounds each simulated plan (SimSummary::critical_path, its `why`); off where no
    /// one reads it (capacity sweeps): the analysis is about a tenth of a simulation's time.
    bool critical_path = true;
    /// Simulate a plan of many micro-batches at three smaller counts and extend (simulate_plan):
    /// the same figures for a fraction of the time. Off: every plan simulated whole.
    bool steady_state = true;
    /// Memory the simulations may use together (0: memory_limit_bytes()). Each of the `threads`
    /// concurrent simulations gets its share; a plan whose simulation would need more
    /// (sim::simulation_size: a huge global batch) is ranked by its estimate, and says so.
    double memory_budget_bytes = 0;
    std::function<void(double fraction, const char* phase)> progress;  ///< called from the search thread
    const std::atomic<bool>* cancel = nullptr;  ///< set to stop early; the result says cancelled
};

struct SearchResult {
    std::vector<RankedPlan> ranked;  ///< best first (simulated ones by simulated throughput)
    SpaceCounters space;
    std::int64_t pruned_memory = 0;  ///< over capacity beyond the margin
    std::int64_t estimated = 0;
    std::int64_t simulated = 0;
    std::int64_t simulated_oom = 0;
    std::int64_t too_large_to_simulate = 0;  ///< shortlisted, but the simulation would not fit in memory
    int follow_up_rounds = 0;        ///< extra simulation rounds after OOMs (SearchOptions::min_fitting)
    double estimate_seconds = 0, simulate_seconds = 0;  ///< wall time (reported, never asserted)
    bool cancelled = false;
};

/// Simulates one plan with the engine (lower -> costs -> engine), as `strata simulate` does. With
/// `steady_state`, a plan of at least kSteadyStateMinUnits schedule units of micro-batches (a 1F1B
/// pipeline's pp, an interleaved group, DualPipeV's 2 pp) is simulated at 2, 3 and 4 units instead
/// (plus the plan's remainder) and its figures extended along the line those three lie on:
/// exactly the full simulation's, when they do lie on a line to the nanosecond and byte; else, and
/// when a reduced plan is invalid or deadlocks, the plan is simulated whole. A probe out of memory
/// is the plan out of memory (more micro-batches never hold less).
/// Given whole_budget_bytes > 0, a plan whose whole simulation would need more memory than that is
/// not simulated whole (SimSummary::too_large).
inline constexpr int kSteadyStateMinUnits = 12;
bool steady_state_applies(const sim::PlanSpec& p);
SimSummary simulate_plan(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& p,
                         const hwdb::HardwareView& hw, const sim::Calibration& calibration = {}, bool critical_path = true,
                         bool steady_state = true, double whole_budget_bytes = 0);
/// The memory simulate_plan needs for a plan: its largest steady-state probe's where the steady
/// state applies (steady_state on), else the whole plan's (sim::simulation_size).
sim::SimulationSize plan_simulation_size(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& p,
                                         bool steady_state, double budget_bytes);

SearchResult search_plans(const sim::ModelSpec& m, const sim::ClusterSpec& c, const hwdb::HardwareView& hw,
                          const SearchOptions& o);

/// One line: why a plan is where it is ("bubble 12%, exposed comm 3%, recompute 9%").
std::string explain(const FastEstimate& e);
/// The same from the engine's figures, for a simulated plan: compute (the rest), bubble, exposed
/// comm, and what the critical path's first item is.
std::string explain(const SimSummary& s);

/// Planner output as JSON (model, cluster, counters, ranked plans with their figures).
std::string search_to_json(const sim::ModelSpec& m, const sim::ClusterSpec& c, const SearchResult& r);

/// Merge the JSON outputs of several shards (`--shard i/n`) into one ranking.
std::string merge_search_json(const std::vector<std::string>& texts, const std::vector<std::string>& files, int top_k);

}  // namespace strata::planner
