// Energy of a step and of a run (energy.hpp).
#include "strata/planner/energy.hpp"


namespace strata::planner {

PowerModel power_model(const sim::ClusterSpec& c, const hwdb::HardwareView& hw) {
    const sim::ClusterOperations& o = c.ops;
    PowerModel pm;
    pm.gpu_compute_w = o.gpu_power_w.value_or(hw.gpu.tdp_w);
    pm.known = pm.gpu_compute_w > 0;
    pm.gpu_comm_w = kGpuCommPowerFraction * pm.gpu_compute_w;
    pm.gpu_idle_w = kGpuIdlePowerFraction * pm.gpu_compute_w;
    const int nics = c.nics_per_node > 0 ? c.nics_per_node : hw.node.nic_count;
    pm.node_w = o.host_power_w.value_or(kDefaultHostPowerPerGpuW * c.gpus_per_node) +
                o.network_power_w.value_or(kDefaultNetworkPowerPerNicW * nics);
    pm.nodes = c.nodes;
    pm.pue = o.pue.value_or(kDefaultPue);
    pm.usd_per_kwh = o.usd_per_kwh.value_or(kDefaultUsdPerKwh);
    return pm;
}

StepEnergy step_energy(const PowerModel& pm, const GpuStateSeconds& s, double step_time_s, double tokens_per_step) {
    StepEnergy e;
    e.gpu_j = pm.gpu_compute_w * s.compute_s + pm.gpu_comm_w * s.comm_s + pm.gpu_idle_w * s.idle_s;
    e.node_j = pm.node_w * pm.nodes * step_time_s;
    e.facility_j = (e.gpu_j + e.node_j) * pm.pue;
    e.per_token_j = tokens_per_step > 0 ? e.facility_j / tokens_per_step : 0;
    e.mean_power_w = step_time_s > 0 ? e.facility_j / step_time_s : 0;
    return e;
}

RunEnergy run_energy(const PowerModel& pm, const StepEnergy& e, double wall_s) {
    RunEnergy r;
    r.kwh = e.mean_power_w * wall_s / 3.6e6;
    r.usd = r.kwh * pm.usd_per_kwh;
    return r;
}

}  // namespace strata::planner
