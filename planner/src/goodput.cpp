// Goodput: checkpoints, failures, restarts and lost work over a whole run (goodput.hpp).
#include "strata/planner/goodput.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "strata/lowering/model.hpp"
#include "strata/sim/cost.hpp"

namespace strata::planner {

using namespace strata::sim;

double checkpoint_bytes(const ModelSpec& m, const PlanSpec& p) {
    const bool fp32 = p.precision == Precision::fp32;
    const double per_param = (fp32 ? 4.0 : 2.0) + (p.has_master() ? 4.0 : 0.0) + bytes_per_element(p.exp_avg_dtype) +
                             bytes_per_element(p.exp_avg_sq_dtype);
    return static_cast<double>(param_counts(m).total) * per_param;
}

double young_daly_interval_s(double stall_s, double mtbf_s, double write_s) {
    if (!std::isfinite(mtbf_s)) return std::numeric_limits<double>::infinity();
    return std::max(std::sqrt(2.0 * stall_s * mtbf_s), write_s);
}

double expected_lost_work_s(double interval_s, double stall_s, double write_s, bool async) {
    if (async) return interval_s / 2.0 + write_s;
    return (interval_s + stall_s) / 2.0;
}

Goodput goodput(const GoodputInputs& in) {
    Goodput g;
    const double lambda = in.interruptions_per_gpu_hour * in.gpus / 3600.0;  // per second of wall time
    g.mtbf_s = lambda > 0 ? 1.0 / lambda : std::numeric_limits<double>::infinity();
    g.interval_s = in.interval_s > 0 ? in.interval_s : young_daly_interval_s(in.checkpoint_stall_s, g.mtbf_s, in.async ? in.checkpoint_write_s : 0.0);
    if (!std::isfinite(g.interval_s)) {  // no failures: no checkpoint is worth its stall
        g.wall_s = in.work_s;
        g.goodput = 1;
        return g;
    }
    g.checkpoints = in.work_s / g.interval_s;
    g.checkpoint_s = g.checkpoints * in.checkpoint_stall_s;
    g.lost_per_failure_s = expected_lost_work_s(g.interval_s, in.checkpoint_stall_s, in.checkpoint_write_s, in.async);
    const double per_failure_s = in.restart_s + g.lost_per_failure_s;
    const double busy = lambda * per_failure_s;  // share of wall time spent on failures
    if (busy >= 1.0) {
        g.converges = false;
        g.wall_s = std::numeric_limits<double>::infinity();
        g.goodput = 0;
        return g;
    }
    g.wall_s = (in.work_s + g.checkpoint_s) / (1.0 - busy);
    g.failures = lambda * g.wall_s;
    g.restart_total_s = g.failures * in.restart_s;
    g.lost_total_s = g.failures * g.lost_per_failure_s;
    g.goodput = in.work_s / g.wall_s;
    return g;
}

GoodputInputs goodput_inputs(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const hwdb::HardwareView& hw,
                             double work_s) {
    const ClusterOperations& o = c.ops;
    GoodputInputs in;
    in.work_s = work_s;
    in.gpus = c.gpu_count();
    in.interruptions_per_gpu_hour = o.interruptions_per_gpu_hour.value_or(kDefaultInterruptionsPerGpuHour);
    in.restart_s = o.restart_s.value_or(kDefaultRestartS);
    in.async = o.checkpoint_async;
    in.interval_s = o.checkpoint_interval_s.value_or(0.0);
    const double bytes = checkpoint_bytes(m, p);
    in.checkpoint_bytes = bytes;
    double Bps = 0;
    if (o.checkpoint_Bps) {
        Bps = *o.checkpoint_Bps;
        in.storage = "file system";
    } else {
        // Every node writes its share to its own drives at once (as the engine rates them).
        const double drives = sim::ssd_drives_per_node(c, hw);
        const double node_Bps = hw.ssd_write && hw.ssd_write->Bps > 0 ? hw.ssd_write->Bps : hw.ssd.seq_write_Bps * drives;
        Bps = node_Bps * c.nodes;
        in.storage = "node SSDs";
    }
    if (!(Bps > 0)) {
        Bps = kDefaultCheckpointBpsPerGpu * in.gpus;
        in.storage = "Llama 3 storage share";
    }
    in.checkpoint_write_s = bytes / Bps;
    if (in.async) {
        // A GPU's share of the states goes to pinned host memory; the write continues from there.
        const double d2h_Bps = hw.d2h && hw.d2h->Bps > 0 ? hw.d2h->Bps
                               : hw.host.achievable_Bps > 0 ? hw.host.achievable_Bps
                                                            : hw.host.per_dir_Bps * hw.host.achievable_fraction;
        in.checkpoint_stall_s = d2h_Bps > 0 ? bytes / in.gpus / d2h_Bps : in.checkpoint_write_s;
    } else {
        in.checkpoint_stall_s = in.checkpoint_write_s;
    }
    return in;
}

}  // namespace strata::planner
