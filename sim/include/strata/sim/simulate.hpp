// One call from specs to a simulated training step: lower the plan to a Program, run it through the
// engine with the cost models of cost.hpp, and derive the job figures (tokens/s, TFLOP/s per GPU,
// MFU). Also the analytical memory estimate of the same plan, for comparison. No I/O: callers
// (cli, planner, gui) format and write the results.
#pragma once
#include <string>

#include "strata/hwdb/view.hpp"
#include "strata/sim/cost.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/program.hpp"
#include "strata/sim/result.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::sim {

struct SimOptions {
    bool trace = false;            ///< keep timeline spans and memory samples (for a Chrome trace)
    bool full = false;             ///< full mode: one RankProgram per GPU (stragglers, skew)
    int steps = 1;                 ///< training steps to lower (a lock-free update runs >= 2)
    bool critical_path = true;     ///< name what bounds the step
    bool allocator_model = true;   ///< replay PyTorch's caching allocator on the GPU tier (off: bytes as requested)
    Calibration calibration;       ///< cost multipliers (bench/fidelity); identity = uncalibrated
    bool runtime_kernels = false;  ///< priced as Strata's runtime runs it (CostContext::runtime_kernels)
    bool zero_bubble = true;       ///< DualPipeV's weight-gradient split (LowerOptions::zero_bubble); false: an ablation
};

/// Pool capacities of a cluster: HBM per GPU, host DRAM and SSD per node.
struct TierCapacities {
    double gpu_bytes = 0, cpu_bytes = 0, ssd_bytes = 0;
};
TierCapacities tier_capacities(const ClusterSpec& c, const hwdb::HardwareView& hw);

/// Model FLOPs of one optimizer step as Megatron counts them (forward + backward matmuls,
/// attention's full s^2 square, no recomputation): model_flops_per_token x global_batch x seq_len.
double model_flops_per_step(const ModelSpec& m, const PlanSpec& p);

/// Dense datasheet FLOP/s of one GPU in the plan's precision (fp32: the non-tensor fp32 figure).
double peak_flops_for(const hwdb::HardwareView& hw, Precision p);

struct SimOutput {
    Program program;           ///< what ran (names, instructions) — the trace writer needs it
    SimResult result;          ///< the engine's figures (step_time_ns covers all `steps`)
    JobFigures job;            ///< per optimizer step
    MemoryReport memory;       ///< the analytical model on the same plan
    TierCapacities capacities;
    int steps = 1;             ///< steps actually lowered
    double step_time_s = 0;    ///< result.step_time_s() / steps
    double model_flops_per_step = 0;
    double peak_flops_per_gpu = 0;
    std::string gpu;           ///< hwdb GPU id the costs came from
    bool expandable_segments = false;  ///< the allocator replay mapped pages (plan.expandable_segments)
};

/// lower -> engine -> figures. The plan must already be validated (spec_io.hpp validate_plan).
SimOutput simulate(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const hwdb::HardwareView& hw,
                   const SimOptions& o = {});

/// The summary a person reads (fixed formatting: identical input, identical text).
std::string summary_text(const SimOutput& out);

/// The timeline as Chrome Trace Event JSON (trace.hpp's writer over this output's program and
/// result). Needs SimOptions::trace; deterministic bytes.
std::string trace_text(const SimOutput& out);

}  // namespace strata::sim
