// Energy and power of a training run: GPU power by busy state (computing, communicating, idle)
// from the simulator's per-rank timeline, host and network power per node, the facility's PUE,
// and a price per kWh (docs/planner.md, "Energy"). Closed forms over the step's state times.
#pragma once
#include "strata/hwdb/view.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::planner {

/// Power usage effectiveness: the Uptime Institute Global Data Center Survey 2023 average, 1.58
/// (flat since about 2019; hyperscale AI halls reach 1.1-1.2: set the cluster's `pue`).
inline constexpr double kDefaultPue = 1.58;
/// US average retail price of electricity to industrial customers in 2023, 8.06 cents/kWh (EIA,
/// Electric Power Annual 2023).
inline constexpr double kDefaultUsdPerKwh = 0.0806;
/// A DGX H100's rated maximum input, 10.2 kW, less its eight GPUs' 700 W TDP: 4.6 kW for CPUs,
/// DRAM, NVSwitches, NICs, drives and fans, i.e. 575 W per GPU slot (an upper bound: a rating).
inline constexpr double kDefaultHostPowerPerGpuW = (10200.0 - 8 * 700.0) / 8;
/// The node's share of the scale-out switches: assumed 50 W per NIC port (a 64-port 400G switch
/// draws on the order of 1.5-2 kW, and a two-tier fat tree has about two switch ports per NIC
/// beyond the leaf's; a round assumption, not a measurement). Per node: nics x this.
inline constexpr double kDefaultNetworkPowerPerNicW = 50;
/// GPU power while it only communicates (NCCL kernels on a few SMs, HBM and links busy) and while
/// it idles, as fractions of its compute power. Assumptions: an idle H100 SXM draws 70-100 W of
/// its 700 W (0.15 taken); communication kernels are memory-bound and use few SMs (0.5 taken).
inline constexpr double kGpuCommPowerFraction = 0.5;
inline constexpr double kGpuIdlePowerFraction = 0.15;

/// GPU-seconds of one step, summed over every GPU of the job, in each state.
struct GpuStateSeconds {
    double compute_s = 0;  ///< the compute stream running kernels
    double comm_s = 0;     ///< the compute stream waiting on collectives, p2p or copies in flight
    double idle_s = 0;     ///< pipeline bubble and host launch waits
};

/// Power figures of one cluster, resolved from its overrides or the defaults above.
struct PowerModel {
    double gpu_compute_w = 0, gpu_comm_w = 0, gpu_idle_w = 0;
    double node_w = 0;     ///< host + network of one node
    int nodes = 1;
    double pue = kDefaultPue;
    double usd_per_kwh = kDefaultUsdPerKwh;
    bool known = true;     ///< false: no GPU power figure (energy figures then leave the GPUs out)
};
/// GPU compute power: the cluster's `gpu_power_w` (a measured figure), else hwdb's TDP; the
/// profiler records no power today. Neither known: gpu_compute_w = 0 and `known` false.
PowerModel power_model(const sim::ClusterSpec& c, const hwdb::HardwareView& hw);

struct StepEnergy {
    double gpu_j = 0, node_j = 0;  ///< IT energy of one step
    double facility_j = 0;         ///< (gpu + node) x PUE
    double per_token_j = 0;        ///< facility_j / tokens per step
    double mean_power_w = 0;       ///< facility_j / step time
};
/// E = sum_state P_state x GPU-seconds in it + nodes x node power x step time, times the PUE.
StepEnergy step_energy(const PowerModel& pm, const GpuStateSeconds& s, double step_time_s, double tokens_per_step);

struct RunEnergy {
    double kwh = 0, usd = 0;
};
/// A whole run: the mean facility power over `wall_s` (restarts and lost work drawn at the same
/// power as training, a slight overestimate for the restarts).
RunEnergy run_energy(const PowerModel& pm, const StepEnergy& e, double wall_s);

}  // namespace strata::planner
