// One plan through the engine (the same sim::simulate as `strata simulate`), summarised for ranking.
#include <algorithm>
#include "strata/planner/search.hpp"
#include "strata/sim/simulate.hpp"

namespace strata::planner {

SimSummary simulate_plan(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& p, const hwdb::HardwareView& hw,
                         const sim::Calibration& calibration, bool critical_path) {
    sim::SimOptions so;
    so.calibration = calibration;
    so.critical_path = critical_path;
    sim::SimOutput out = sim::simulate(m, c, p, hw, so);
    const sim::SimResult& r = out.result;
    SimSummary s;
    s.step_time_s = out.step_time_s;
    s.tokens_per_s = out.job.tokens_per_s;
    s.tflops_per_gpu = out.job.tflops_per_gpu;
    s.mfu = out.job.mfu;
    s.bubble_fraction = r.bubble_fraction;
    s.exposed_comm_s = static_cast<double>(r.exposed_comm_ns) * 1e-9 / std::max(1, out.steps);
    s.peak_hbm_bytes = r.peak_bytes_max[0];
    s.peak_cpu_bytes = r.peak_bytes_max[1];
    s.peak_ssd_bytes = r.peak_bytes_max[2];
    s.oom = r.oom || r.deadlock;
    s.critical_path = r.critical_path.summary;
    // Each rank program stands for `multiplicity` GPUs; its compute stream's idle time splits
    // exactly into exposed comm + exposed copy + host wait + bubble (docs/engine.md).
    const double steps = std::max(1, out.steps);
    for (const sim::RankStats& k : r.ranks) {
        const double n = static_cast<double>(k.multiplicity) * 1e-9 / steps;
        s.gpu_compute_s += n * static_cast<double>(r.step_time_ns - k.compute_idle_ns);
        s.gpu_comm_s += n * static_cast<double>(k.exposed_comm_ns + k.exposed_copy_ns);
        s.gpu_idle_s += n * static_cast<double>(k.host_wait_ns + k.bubble_ns);
    }
    return s;
}

}  // namespace strata::planner
