// simulation_size / check_simulation_size: how much memory a simulation of a plan would take,
// checked before it starts. The lowering writes every instruction of every micro-batch and the
// engine keeps state per instruction, so a plan with a huge global batch (2^18 micro-batches) used
// to grow to tens of GB and die of std::bad_alloc, or of the OOM killer, minutes in. Here the
// program is lowered with a few micro-batches instead, and the count extrapolated.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "strata/common/error.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::sim {

namespace {

// Bytes of memory per instruction of a simulation: 64 for the Instr itself, the rest the engine's
// per-instruction timings, events and critical-path graph. Measured on GPT-3 175B over 1024 GPUs
// (2.09M instructions: 471 MB peak RSS against 219 MB at start, 120 B each) and GPT-2 124M with
// 5.5M instructions (130 B each); with a trace, spans and the trace text add ~160 B + ~145 B. The
// figures below carry a 1.5x margin.
constexpr double kBytesPerInstr = 192;
constexpr double kBytesPerInstrTrace = 192 + 448;
constexpr double kBaseBytes = 256e6;  // the process before the program (libraries, hwdb, costs)

// No bundled scenario lowers more than 247 instructions per layer and micro-batch (a 1T MoE with
// offload); the bound for skipping the measurement keeps a margin over that.
constexpr double kBoundInstrPerLayer = 400;

std::string gb(double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, bytes < 10e9 ? "%.1f GB" : "%.0f GB", bytes / 1e9);
    return buf;
}

// Micro-batch counts the plan's schedule accepts, in the regime where the program grows linearly:
// whole groups of the interleaved schedule, DualPipeV's 2 x pp, a full 1F1B pipeline.
std::int64_t schedule_unit(const PlanSpec& p) {
    if (p.schedule == Schedule::interleaved_1f1b) return p.microbatch_group > 0 ? p.microbatch_group : p.pp;
    if (p.schedule == Schedule::dualpipe_v) return 2 * static_cast<std::int64_t>(p.pp);
    return std::max(1, p.pp);
}

}  // namespace

SimulationSize simulation_size(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const SimulationShape& shape,
                               double budget_bytes) {
    SimulationSize out;
    out.micro_batches = p.micro_batches();
    const double per_instr = shape.trace ? kBytesPerInstrTrace : kBytesPerInstr;
    const double steps = std::max(1, shape.steps);
    // Full mode lowers every GPU; its peers run the same instructions as their stage's program.
    const double peers = shape.full ? static_cast<double>(p.tp) * p.cp * p.dp : 1.0;
    const double layers = static_cast<double>(m.layers) + m.mtp_depth;
    const double bound = steps * peers * (static_cast<double>(out.micro_batches) + 2) * layers * kBoundInstrPerLayer;
    out.instructions = bound;
    out.bytes = kBaseBytes + bound * per_instr;
    // Far inside the budget even at the bound: nothing to measure.
    if (budget_bytes > 0 && out.bytes <= budget_bytes / 2) return out;

    // Lower the plan with u and 2u micro-batches (u: the schedule's unit) and extend the line to
    // the plan's count. The two lowerings must not be what exhausts memory: beyond a quarter of the
    // budget at the bound, keep the bound.
    const std::int64_t u = schedule_unit(p), m0 = u, m1 = 2 * u;
    const double probe = kBaseBytes + (static_cast<double>(m1) + 2) * layers * kBoundInstrPerLayer * 64.0;
    if (budget_bytes > 0 && probe > budget_bytes / 4) return out;
    try {
        auto count = [&](std::int64_t mbs) {
            PlanSpec q = p;
            q.global_batch = static_cast<int>(mbs * q.micro_batch * q.dp);
            if (q.global_batch <= 0 || mbs * q.micro_batch * q.dp > INT32_MAX) throw InputError("", "", "too large to probe");
            validate_plan(m, c, q, "");
            LowerOptions o;
            o.steps = 1;
            const Program prog = lower(m, c, q, o);
            double n = 0;
            for (const RankProgram& r : prog.ranks) n += static_cast<double>(r.instrs.size());
            return n;
        };
        const double n0 = count(m0), n1 = count(m1);
        const double slope = (n1 - n0) / static_cast<double>(m1 - m0);
        const double per_step = std::max(n0, n0 + slope * static_cast<double>(out.micro_batches - m0));
        out.instructions = steps * peers * per_step;
        out.bytes = kBaseBytes + out.instructions * per_instr;
    } catch (const InputError&) {
        // The reduced plan is not one the rules accept: keep the bound.
    }
    return out;
}

void check_simulation_size(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const SimulationShape& shape,
                           double budget_bytes, const std::string& file) {
    const SimulationSize z = simulation_size(m, c, p, shape, budget_bytes);
    if (z.bytes <= budget_bytes) return;
    char count[64];
    std::snprintf(count, sizeof count, "%.3g", z.instructions);
    throw InputError(file, "plan.global_batch",
                     "= " + std::to_string(p.global_batch) + " gives " + std::to_string(z.micro_batches) +
                         " micro-batches per step; simulating them needs about " + gb(z.bytes) + " of memory (" + count +
                         " instructions" + (shape.full ? ", every GPU in full mode" : "") + (shape.trace ? ", with a trace" : "") +
                         "), more than the " + gb(budget_bytes) +
                         " this process may use: lower it (time per step grows linearly with the micro-batches)" +
                         (shape.trace ? ", or drop the trace" : "") + (shape.full ? ", or drop full mode" : ""));
}

}  // namespace strata::sim
