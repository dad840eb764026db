// What `strata run` and `strata validate` share: the runtime's options from the command line and
// the hardware database, the measured timeline in the simulator's trace format, and Ctrl-C.
#pragma once
#include <atomic>
#include <string>

#include "cli.hpp"
#include "strata/runtime/runtime.hpp"
#include "strata/sim/result.hpp"

namespace strata::cli {

struct RuntimeArgs {
    std::string backend = "cpu", data, save, resume, ssd_dir;
    int steps = 10;
    double lr = 1e-3;
    int warmup = 0;
    unsigned long long seed = 42;
    double initial_loss_scale = 4294967296.0;  ///< fp16 plans (Megatron's --initial-loss-scale)
    double mtp_loss_scale = 0.1;               ///< MTP models (Megatron's --mtp-loss-scaling-factor)
};
void add_runtime_options(CLI::App* cmd, RuntimeArgs& a, int default_steps);

/// RunOptions for `s` on this machine: capacities (device memory, or RAM per rank on the cpu
/// backend), the data, the peak FLOP/s for MFU from hwdb.
runtime::RunOptions runtime_options(const RuntimeArgs& a, const sim::Scenario& s, const hwdb::HardwareView& hw);

/// The runtime's spans and memory samples of its last step as a SimResult, so the simulator's
/// trace writer (and the comparison) read them like the engine's. Collectives and transfers start
/// when the last of their peers posted them, as the engine times them.
sim::SimResult measured_result(const sim::Program& prog, const std::vector<runtime::RankTrace>& traces);

/// Set by SIGINT while a run is in progress (install_sigint / restore_sigint).
extern std::atomic<bool> g_run_interrupted;
void install_sigint();
void restore_sigint();


}  // namespace strata::cli
