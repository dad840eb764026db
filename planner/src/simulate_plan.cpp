// One plan through the engine, summarised for ranking.
#include "strata/planner/search.hpp"
#include "strata/sim/engine.hpp"
#include "strata/sim/lower.hpp"
#include "strata/sim/model.hpp"

namespace strata::planner {

using namespace strata::sim;

SimSummary simulate_plan(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const hwdb::HardwareView& hw) {
    Program prog = lower(m, c, p);
    CostContext ctx;
    ctx.hw = &hw;
    ctx.cluster = &c;
    ctx.plan = &p;
    ctx.program = &prog;
    RealCostModel costs(ctx);
    const Capacities caps = capacities_of(c, hw);
    EngineOptions eo;
    eo.memory.gpu_capacity_bytes = caps.hbm_bytes;
    eo.memory.cpu_capacity_bytes = caps.cpu_bytes_per_node;
    eo.memory.ssd_capacity_bytes = caps.ssd_bytes_per_node;
    SimResult r = simulate_program(prog, costs, nullptr, eo);
    SimSummary s;
    s.step_time_s = r.step_time_s();
    const double tokens = double(p.global_batch) * double(m.seq_len);
    s.tokens_per_s = s.step_time_s > 0 ? tokens / s.step_time_s : 0;
    s.tflops_per_gpu = s.step_time_s > 0 ? model_flops_per_token(m) * tokens / s.step_time_s / p.gpus() / 1e12 : 0;
    hwdb::Dtype d = p.precision == Precision::fp8 ? hwdb::Dtype::fp8 : p.precision == Precision::fp32 ? hwdb::Dtype::fp32
                  : p.precision == Precision::fp16 ? hwdb::Dtype::fp16 : hwdb::Dtype::bf16;
    s.mfu = hw.gpu.peak(d) > 0 ? s.tflops_per_gpu * 1e12 / hw.gpu.peak(d) : 0;
    s.bubble_fraction = r.bubble_fraction;
    s.exposed_comm_s = static_cast<double>(r.exposed_comm_ns) * 1e-9;
    s.peak_hbm_bytes = r.peak_bytes_max[0];
    s.peak_cpu_bytes = r.peak_bytes_max[1];
    s.peak_ssd_bytes = r.peak_bytes_max[2];
    s.oom = r.oom || r.deadlock;
    s.critical_path = r.critical_path.summary;
    return s;
}

}  // namespace strata::planner
