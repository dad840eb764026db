// simulate(): lower -> engine (cost models of cost.hpp behind a CostModel adapter) -> job figures,
// plus the analytical memory estimate of the same plan. The summary text lives here too so every
// face (cli, gui) prints the same numbers. No I/O.
#include "strata/sim/simulate.hpp"

#include <algorithm>
#include <sstream>

#include "strata/common/error.hpp"
#include "strata/common/text.hpp"
#include "strata/sim/cost.hpp"
#include "strata/sim/engine.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/model.hpp"
#include "strata/sim/topology.hpp"
#include "strata/sim/trace.hpp"

namespace strata::sim {

namespace {

/// The engine's CostModel over cost.hpp, telling the cost models which RankProgram issues each
/// instruction (p2p needs to know whether its peer shares the node) and its straggler factor.
class ProgramCostModel : public CostModel {
public:
    ProgramCostModel(CostContext base, const Program& prog) : base_(base), prog_(prog) { base_.program = &prog_; }
    Estimate compute(const Instr& in, const RankProgram& rank) const override { return compute_cost(in, context_for(rank)); }
    Demand transfer(const Instr& in, const RankProgram& rank) const override { return transfer_demand(in, context_for(rank)); }

private:
    CostContext context_for(const RankProgram& rank) const {
        CostContext c = base_;
        c.rank = rank.id;
        if (c.cluster)
            for (const auto& [gpu, factor] : c.cluster->slow_gpus)
                if (gpu == rank.global_rank) c.gpu_slowdown = factor;
        return c;
    }
    CostContext base_;
    const Program& prog_;
};

}  // namespace

TierCapacities tier_capacities(const ClusterSpec& c, const hwdb::HardwareView& hw) {
    TierCapacities t;
    t.gpu_bytes = hw.gpu.hbm_bytes;
    t.cpu_bytes = host_dram_bytes_per_node(c, hw);
    t.ssd_bytes = ssd_drives_per_node(c, hw) * kDefaultSsdDriveBytes;  // hwdb has no drive capacity: memory.hpp's default
    return t;
}

double model_flops_per_step(const ModelSpec& m, const PlanSpec& p) {
    return model_flops_per_token(m, false) * static_cast<double>(p.global_batch) * static_cast<double>(m.seq_len);
}

double peak_flops_for(const hwdb::HardwareView& hw, Precision p) {
    switch (p) {
        case Precision::fp8: return hw.gpu.peak(hwdb::Dtype::fp8);
        case Precision::fp16: return hw.gpu.peak(hwdb::Dtype::fp16);
        case Precision::fp32: return hw.gpu.peak(hwdb::Dtype::fp32);
        case Precision::bf16: return hw.gpu.peak(hwdb::Dtype::bf16);
    }
    return 0;
}

SimOutput simulate(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const hwdb::HardwareView& hw,
                   const SimOptions& o) {
    SimOutput out;
    LowerOptions lo;
    lo.full_mode = o.full;
    lo.steps = std::max(1, o.steps);
    lo.zero_bubble = o.zero_bubble;
    out.steps = lo.steps;
    out.program = lower(m, c, p, lo);

    CostContext ctx;
    ctx.hw = &hw;
    ctx.cluster = &c;
    ctx.plan = &p;
    ctx.calibration = o.calibration;
    ctx.runtime_kernels = o.runtime_kernels;
    ProgramCostModel costs(ctx, out.program);

    out.capacities = tier_capacities(c, hw);
    EngineOptions eo;
    eo.record_trace = o.trace;
    eo.critical_path = o.critical_path;
    eo.overlap_slowdown = o.calibration.overlap;
    eo.host_launch_ns = o.calibration.host_launch_us * 1e3;
    eo.memory.gpu_capacity_bytes = out.capacities.gpu_bytes;
    eo.memory.cpu_capacity_bytes = out.capacities.cpu_bytes;
    eo.memory.ssd_capacity_bytes = out.capacities.ssd_bytes;
    if (!o.allocator_model) {
        eo.memory.caching_allocator = false;
        eo.memory.fragmentation = 0;
    } else {
        // Fragmentation comes out of the replay, not a fixed allowance.
        eo.memory.replay_caching_allocator = true;
        eo.memory.expandable_segments = p.expandable_segments;
        out.expandable_segments = p.expandable_segments;
        eo.memory.fragmentation = 0;
    }
    // Flows share the cluster's concrete links (NVLink ports, rail NICs, PCIe switches, DRAM,
    // leaf uplinks) as the topology routes them.
    Topology topology(c, hw);
    out.result = simulate_program(out.program, costs, &topology, eo);

    Capacities caps;
    caps.hbm_bytes = out.capacities.gpu_bytes;
    caps.cpu_bytes_per_node = out.capacities.cpu_bytes;
    caps.ssd_bytes_per_node = out.capacities.ssd_bytes;
    caps.gpus_per_node = c.gpus_per_node;
    out.memory = memory_estimate(m, p, caps);

    out.gpu = hw.gpu.id;
    out.step_time_s = out.result.step_time_s() / out.steps;
    out.model_flops_per_step = model_flops_per_step(m, p);
    out.peak_flops_per_gpu = peak_flops_for(hw, p.precision);
    const double tokens = static_cast<double>(p.global_batch) * static_cast<double>(m.seq_len);
    if (out.step_time_s > 0) {
        out.job.tokens_per_s = tokens / out.step_time_s;
        out.job.tflops_per_gpu = out.model_flops_per_step / out.step_time_s / p.gpus() / 1e12;
        out.job.mfu = out.peak_flops_per_gpu > 0 ? out.job.tflops_per_gpu * 1e12 / out.peak_flops_per_gpu : 0;
    }
    out.job.model = m.name;
    out.job.calibration = o.calibration;
    out.job.cluster = c.name;
    out.job.plan = "tp" + std::to_string(p.tp) + " pp" + std::to_string(p.pp) + " dp" + std::to_string(p.dp) +
                   (p.cp > 1 ? " cp" + std::to_string(p.cp) : "") + (p.ep > 1 ? " ep" + std::to_string(p.ep) : "") +
                   (p.expert_tp > 0 && p.expert_tp != p.tp ? " etp" + std::to_string(p.expert_tp) : "") +
                   (p.vpp > 1 ? " vpp" + std::to_string(p.vpp) : "") + " mb" + std::to_string(p.micro_batch) + " gbs" +
                   std::to_string(p.global_batch);
    return out;
}

std::string trace_text(const SimOutput& out) { return to_chrome_trace(out.program, out.result); }

namespace {
std::string pct(double f) { return fmt_fixed(100.0 * f, 1) + "%"; }
std::string secs_ns(std::int64_t ns) { return human_seconds(static_cast<double>(ns) * 1e-9); }
}  // namespace

std::string summary_text(const SimOutput& out) {
    const SimResult& r = out.result;
    std::ostringstream s;
    s << "model    " << out.job.model << "\n";
    s << "cluster  " << out.job.cluster << " (" << out.gpu << ")\n";
    s << "plan     " << out.job.plan << "\n";
    if (r.deadlock) s << "DEADLOCK " << r.deadlock_detail << "\n";
    s << "\n";
    s << "step time          " << human_seconds(out.step_time_s) << (out.steps > 1 ? " (mean of " + std::to_string(out.steps) + " steps)" : "") << "\n";
    s << "tokens/s           " << fmt_fixed(out.job.tokens_per_s, 0) << "\n";
    s << "TFLOP/s per GPU    " << fmt_fixed(out.job.tflops_per_gpu, 1) << "  (model FLOPs " << fmt_sci(out.model_flops_per_step, 3) << " per step)\n";
    s << "MFU                " << pct(out.job.mfu) << "  (of " << fmt_fixed(out.peak_flops_per_gpu / 1e12, 1) << " TFLOP/s)\n";
    s << "bubble             " << pct(r.bubble_fraction) << "\n";
    s << "exposed comm       " << secs_ns(r.exposed_comm_ns) << "\n";
    s << "exposed copies     " << secs_ns(r.exposed_copy_ns) << "\n";
    if (r.host_wait_ns * 1000 >= r.step_time_ns && r.host_wait_ns > 0) s << "host-bound         " << secs_ns(r.host_wait_ns) << "  (GPU idle until the host issues the next kernel)\n";
    s << "\n";
    s << "memory tier   peak (simulated)   analytical   capacity     status\n";
    const double cap[3] = {out.capacities.gpu_bytes, out.capacities.cpu_bytes, out.capacities.ssd_bytes};
    const double ana[3] = {out.memory.hbm_bytes, out.memory.cpu_bytes, out.memory.ssd_bytes};
    const char* tier_names[3] = {"gpu (HBM)", "cpu (DRAM)", "ssd"};
    for (int t = 0; t < kTierCount; ++t) {
        bool oom_here = false;
        for (const auto& e : r.ooms) oom_here = oom_here || static_cast<int>(e.tier) == t;
        std::string line = tier_names[t];
        line.resize(14, ' ');
        std::string peak = human_bytes(r.peak_bytes_max[static_cast<std::size_t>(t)]);
        peak.resize(19, ' ');
        std::string an = human_bytes(ana[t]);
        an.resize(13, ' ');
        std::string ca = cap[t] > 0 ? human_bytes(cap[t]) : "-";
        ca.resize(13, ' ');
        s << line << peak << an << ca << (oom_here ? "OOM" : "ok") << "\n";
    }
    double allocated = 0;
    std::int64_t flushes = 0;
    for (const RankStats& rs : r.ranks) {
        allocated = std::max(allocated, rs.gpu_peak_allocated_bytes);
        flushes = std::max(flushes, rs.gpu_cache_flushes);
    }
    if (allocated < r.peak_bytes_max[0])
        s << "  of which allocated " << human_bytes(allocated) << " at most; the rest is "
          << (out.expandable_segments ? "free space in the allocator's mapped pages (expandable segments)" : "the caching allocator's split segments")
          << (flushes > 0 ? " (cache emptied " + std::to_string(flushes) + " times to make room)" : std::string()) << "\n";
    if (r.oom) {
        s << "\nOOM: " << r.oom_count << " allocation(s) past capacity; first:\n";
        const auto& e = r.ooms.front();
        s << "  t=" << secs_ns(e.time_ns) << " tier " << to_string(e.tier) << " rank " << e.rank << " node " << e.node
          << " '" << e.name << "' request " << human_bytes(e.request_bytes) << ", in use " << human_bytes(e.in_use_bytes)
          << " of " << human_bytes(e.capacity_bytes) << "\n";
    }
    s << "\ncritical path      " << (r.critical_path.summary.empty() ? "-" : r.critical_path.summary) << "\n";
    s << "cost provenance    measured " << r.provenance_counts[0] << ", fitted " << r.provenance_counts[1]
      << ", datasheet " << r.provenance_counts[2] << "\n";
    s << "instructions       " << r.instructions << " (" << out.program.ranks.size() << " rank programs, " << r.flows << " flows)\n";
    return s.str();
}

}  // namespace strata::sim
