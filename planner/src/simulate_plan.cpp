// One plan through the engine (the same sim::simulate as `strata simulate`), summarised for ranking.
//
// A plan of many micro-batches is simulated at three smaller counts in its steady state and
// extended along the line they lie on, when they do lie on one (steady_state below): the lowering
// and the engine cost time and memory per micro-batch, and a 1F1B pipeline's steady state adds the
// same work per micro-batch whatever comes before it.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "strata/common/error.hpp"
#include "strata/planner/search.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/sim/simulate.hpp"

namespace strata::planner {

namespace {

SimSummary summarise(const sim::SimOutput& out) {
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

// The figures of a result that grow (or stay) linearly with the micro-batch count in a steady
// state: the step, its mean exposed communication, the peaks per tier, and per rank the split of
// its compute stream's idle time. Written back by set_figures in the same order.
std::vector<double> figures(const sim::SimResult& r) {
    std::vector<double> v{static_cast<double>(r.step_time_ns), static_cast<double>(r.exposed_comm_ns), r.peak_bytes_max[0],
                          r.peak_bytes_max[1], r.peak_bytes_max[2]};
    for (const sim::RankStats& k : r.ranks)
        for (std::int64_t x : {k.compute_idle_ns, k.exposed_comm_ns, k.exposed_copy_ns, k.host_wait_ns, k.bubble_ns})
            v.push_back(static_cast<double>(x));
    return v;
}

void set_figures(sim::SimResult& r, const std::vector<double>& v) {
    auto ns = [](double x) { return static_cast<std::int64_t>(std::llround(x)); };
    std::size_t i = 0;
    r.step_time_ns = ns(v[i++]);
    r.exposed_comm_ns = ns(v[i++]);
    for (int t = 0; t < 3; ++t) r.peak_bytes_max[static_cast<std::size_t>(t)] = v[i++];
    // The means over ranks with compute work, as the engine takes them (engine_run.cpp).
    double bubble = 0, comm = 0, copy = 0, host = 0;
    int working = 0;
    for (sim::RankStats& k : r.ranks) {
        for (std::int64_t* x : {&k.compute_idle_ns, &k.exposed_comm_ns, &k.exposed_copy_ns, &k.host_wait_ns, &k.bubble_ns}) *x = ns(v[i++]);
        if (k.compute_idle_ns < r.step_time_ns && r.step_time_ns > 0) {
            bubble += static_cast<double>(k.bubble_ns) / static_cast<double>(r.step_time_ns);
            comm += static_cast<double>(k.exposed_comm_ns);
            copy += static_cast<double>(k.exposed_copy_ns);
            host += static_cast<double>(k.host_wait_ns);
            ++working;
        }
    }
    if (working > 0) {
        r.bubble_fraction = bubble / working;
        r.exposed_comm_ns = ns(comm / working);
        r.exposed_copy_ns = ns(copy / working);
        r.host_wait_ns = ns(host / working);
    }
}

// Micro-batches the schedule adds in whole: an interleaved group, DualPipeV's 2 x pp, a 1F1B
// pipeline's pp (as sim_size.cpp's measurement).
std::int64_t schedule_unit(const sim::PlanSpec& p) {
    if (p.schedule == sim::Schedule::interleaved_1f1b) return p.microbatch_group > 0 ? p.microbatch_group : p.pp;
    if (p.schedule == sim::Schedule::dualpipe_v) return 2 * static_cast<std::int64_t>(p.pp);
    return std::max(1, p.pp);
}

}  // namespace

bool steady_state_applies(const sim::PlanSpec& p) {
    const std::int64_t u = schedule_unit(p), m = p.micro_batches();
    return m >= kSteadyStateMinUnits * u;
}

// Three counts a unit apart, from two units on, congruent to the plan's own count.
static std::int64_t first_probe(const sim::PlanSpec& p) {
    const std::int64_t u = schedule_unit(p);
    return 2 * u + p.micro_batches() % u;
}

sim::SimulationSize plan_simulation_size(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& p, bool steady_state,
                                         double budget_bytes) {
    if (!steady_state || !steady_state_applies(p)) return sim::simulation_size(m, c, p, {}, budget_bytes);
    sim::PlanSpec q = p;
    q.global_batch = static_cast<int>((first_probe(p) + 2 * schedule_unit(p)) * q.micro_batch * q.dp);
    return sim::simulation_size(m, c, q, {}, budget_bytes);
}

SimSummary simulate_plan(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& p, const hwdb::HardwareView& hw,
                         const sim::Calibration& calibration, bool critical_path, bool steady_state, double whole_budget_bytes) {
    sim::SimOptions so;
    so.calibration = calibration;
    so.critical_path = critical_path;
    auto whole = [&] {  // the plan simulated whole, if that fits
        if (whole_budget_bytes > 0 && sim::simulation_size(m, c, p, {}, whole_budget_bytes).bytes > whole_budget_bytes) {
            SimSummary s;
            s.too_large = true;
            return s;
        }
        return summarise(sim::simulate(m, c, p, hw, so));
    };
    if (!steady_state || !steady_state_applies(p)) return whole();

    const std::int64_t u = schedule_unit(p), mb = p.micro_batches();
    const std::int64_t first = first_probe(p);
    std::vector<sim::SimOutput> probes;
    try {
        for (int k = 0; k < 3; ++k) {
            sim::PlanSpec q = p;
            q.global_batch = static_cast<int>((first + k * u) * q.micro_batch * q.dp);
            sim::validate_plan(m, c, q, "");
            probes.push_back(sim::simulate(m, c, q, hw, so));
            probes.back().program = sim::Program{};  // only the figures are kept: free the instructions
            if (probes.back().result.deadlock) return whole();
        }
    } catch (const InputError&) {
        return whole();  // a reduced plan the rules refuse
    }
    std::vector<double> a = figures(probes[0].result), b = figures(probes[1].result), z = figures(probes[2].result);
    const std::size_t groups_at = z.size();  // where the critical path's groups start in the figures
    // The critical path's groups, matched by (rank, stream, label, link) over the probes (a group
    // one probe lacks counts 0 there, and then lies on no line), and its length.
    struct Group {
        sim::CriticalSegment seg;
        std::array<double, 3> ns{};
    };
    std::map<std::tuple<int, int, std::string, std::string>, Group> groups;
    if (critical_path) {
        for (std::size_t k = 0; k < 3; ++k)
            for (const sim::CriticalSegment& s : probes[k].result.critical_path.segments) {
                Group& g = groups[std::make_tuple(s.rank, static_cast<int>(s.stream), s.label, s.link)];
                g.seg = s;
                g.ns[k] = static_cast<double>(s.duration_ns);
            }
        for (const auto& [key, g] : groups) {
            a.push_back(g.ns[0]);
            b.push_back(g.ns[1]);
            z.push_back(g.ns[2]);
        }
        a.push_back(static_cast<double>(probes[0].result.critical_path.length_ns));
        b.push_back(static_cast<double>(probes[1].result.critical_path.length_ns));
        z.push_back(static_cast<double>(probes[2].result.critical_path.length_ns));
    }
    // On a line: equal steps, to the nanosecond or byte (and a millionth of the value, for the
    // rounding of shared-link rates).
    for (std::size_t i = 0; i < z.size(); ++i)
        if (std::fabs((z[i] - b[i]) - (b[i] - a[i])) > 2.0 + 1e-6 * std::fabs(z[i])) return whole();
    // A step is the max of its dependency chains, so it is convex in the micro-batches: a chain
    // that does not run through them (a host update beside them, a lock-free one) can bound the
    // probes' steps and then fall behind those of the plan, and the line through the probes would
    // be too low. Every stream's busy time lies on a line too (checked above through the step
    // only), and no stream may grow faster than the step: else there is a bend ahead.
    const double step_slope = z[0] - b[0];
    for (std::size_t r = 0; r < probes[2].result.ranks.size(); ++r)
        for (std::size_t st = 0; st < sim::kStreamCount; ++st) {
            const double busy_b = static_cast<double>(probes[1].result.ranks[r].busy_ns[st]);
            const double busy_z = static_cast<double>(probes[2].result.ranks[r].busy_ns[st]);
            if (busy_z - busy_b > step_slope + 2.0 + 1e-6 * std::fabs(z[0])) return whole();
        }
    const double units = static_cast<double>(mb - (first + 2 * u)) / static_cast<double>(u);
    std::vector<double> v(z.size());
    for (std::size_t i = 0; i < z.size(); ++i) v[i] = z[i] + units * (z[i] - b[i]);

    // More micro-batches never hold less: a probe out of memory is the plan out of memory.
    const bool probe_oom = std::any_of(probes.begin(), probes.end(), [](const sim::SimOutput& q) { return q.result.oom; });
    sim::SimOutput out = std::move(probes[2]);
    set_figures(out.result, v);
    if (critical_path) {
        // The extended groups, largest first (ties in the map's key order, as the engine's).
        sim::CriticalPath& cp = out.result.critical_path;
        auto ns = [](double x) { return static_cast<std::int64_t>(std::llround(x)); };
        std::size_t i = groups_at;
        cp.segments.clear();
        for (auto& [key, g] : groups) {
            sim::CriticalSegment s = g.seg;
            s.duration_ns = ns(v[i++]);
            s.share = static_cast<double>(s.duration_ns) / static_cast<double>(std::max<std::int64_t>(1, out.result.step_time_ns));
            if (s.duration_ns > 0) cp.segments.push_back(std::move(s));
        }
        cp.length_ns = ns(v[i]);
        std::stable_sort(cp.segments.begin(), cp.segments.end(),
                         [](const sim::CriticalSegment& x, const sim::CriticalSegment& y) { return x.duration_ns > y.duration_ns; });
        cp.steps.clear();  // the instructions are the probe's, not the plan's
        cp.summary = sim::critical_path_summary(cp.segments, out.result.step_time_ns, cp.length_ns);
    }
    out.step_time_s = out.result.step_time_s() / std::max(1, out.steps);
    out.model_flops_per_step = sim::model_flops_per_step(m, p);
    const double tokens = static_cast<double>(p.global_batch) * static_cast<double>(m.seq_len);
    out.job.tokens_per_s = out.step_time_s > 0 ? tokens / out.step_time_s : 0;
    out.job.tflops_per_gpu = out.step_time_s > 0 ? out.model_flops_per_step / out.step_time_s / p.gpus() / 1e12 : 0;
    out.job.mfu = out.peak_flops_per_gpu > 0 ? out.job.tflops_per_gpu * 1e12 / out.peak_flops_per_gpu : 0;
    SimSummary s = summarise(out);
    s.oom = s.oom || probe_oom;
    // A peak that grows with the micro-batches (GPipe holds them all) may pass its tier's capacity.
    const std::array<double, 3> caps{out.capacities.gpu_bytes, out.capacities.cpu_bytes, out.capacities.ssd_bytes};
    for (std::size_t t = 0; t < 3; ++t)
        if (caps[t] > 0 && out.result.peak_bytes_max[t] > caps[t]) s.oom = true;
    s.steady_state = true;
    return s;
}

}  // namespace strata::planner
