// A plan's run: interval, goodput, energy, time and cost (outlook.hpp).
#include "strata/planner/outlook.hpp"

#include <algorithm>
#include <cmath>

#include "strata/sim/simulate.hpp"

namespace strata::planner {

GpuStateSeconds gpu_state_seconds(const RankedPlan& rp, int gpus) {
    GpuStateSeconds s;
    if (rp.simulated) {
        s.compute_s = rp.sim.gpu_compute_s;
        s.comm_s = rp.sim.gpu_comm_s;
        s.idle_s = rp.sim.gpu_idle_s;
        return s;
    }
    const FastEstimate& e = rp.estimate;
    const double step = e.step_time_s;
    const double compute = std::min(step, e.compute_s);
    const double comm = std::min(step - compute, e.exposed_comm_s + e.optimizer_s + e.offload_s);
    s.compute_s = compute * gpus;
    s.comm_s = comm * gpus;
    s.idle_s = std::max(0.0, step - compute - comm) * gpus;
    return s;
}

RunOutlook run_outlook(const sim::ModelSpec& m, const sim::ClusterSpec& c, const hwdb::HardwareView& hw, const RankedPlan& rp,
                       double tokens, const ResidualTable* residuals, bool owned) {
    RunOutlook o;
    const bool sim = rp.simulated;
    const double step = sim ? rp.sim.step_time_s : rp.estimate.step_time_s;
    const double tps = sim ? rp.sim.tokens_per_s : rp.estimate.tokens_per_s;
    if (residuals) {
        o.interval = step_interval(*residuals, sim::arch_family(hw.gpu.arch), m.moe.has_value(), c.gpu_count(), rp.plan.framework);
        o.memory_error = memory_error(*residuals);
    }
    const double lo = o.interval.available ? o.interval.lo : 1.0, hi = o.interval.available ? o.interval.hi : 1.0;
    o.step_time_s = {step * lo, step, step * hi};
    o.tokens_per_s = {tps / hi, tps, tps / lo};  // a longer step is fewer tokens: lo is the pessimistic end
    o.peak_hbm_bytes = sim ? rp.sim.peak_hbm_bytes : rp.estimate.hbm_bytes;
    o.hbm_capacity_bytes = sim::tier_capacities(c, hw).gpu_bytes;
    o.memory = sim && rp.sim.oom ? "does not fit" : memory_verdict(o.peak_hbm_bytes, o.hbm_capacity_bytes, o.memory_error);

    // Goodput does not depend on the run's length (wall is linear in work), so a nominal hour of
    // work gives the fraction when no token count is given.
    const double work_s = tokens > 0 && tps > 0 ? tokens / tps : 3600.0;
    o.goodput_in = goodput_inputs(m, c, rp.plan, hw, work_s);
    o.goodput = goodput(o.goodput_in);
    o.power = power_model(c, hw);
    const double tokens_per_step = static_cast<double>(rp.plan.global_batch) * static_cast<double>(m.seq_len);
    o.energy = step_energy(o.power, gpu_state_seconds(rp, c.gpu_count()), step, tokens_per_step);
    o.owned = owned;
    if (tokens > 0 && tps > 0 && o.goodput.converges) {
        o.tokens = tokens;
        const double wall = o.goodput.wall_s;
        o.wall_s = {wall * lo, wall, wall * hi};
        o.run_energy = run_energy(o.power, o.energy, wall);
        const double usd_per_s = c.gpu_count() * c.price_per_gpu_hour / 3600.0;
        o.rental_usd = {o.wall_s.lo * usd_per_s, wall * usd_per_s, o.wall_s.hi * usd_per_s};
        o.cost_usd = o.rental_usd;
        if (owned) {
            // The energy bill follows the time at the same mean power.
            const double usd_per_wall_s = o.run_energy.usd / wall;
            o.cost_usd.lo += o.wall_s.lo * usd_per_wall_s;
            o.cost_usd.mid += o.run_energy.usd;
            o.cost_usd.hi += o.wall_s.hi * usd_per_wall_s;
        }
    }
    return o;
}

namespace {
double r6(double v) {
    if (!std::isfinite(v)) return 0;
    const double mag = std::pow(10.0, 5 - static_cast<int>(std::floor(std::log10(std::max(std::fabs(v), 1e-300)))));
    return std::round(v * mag) / mag;
}
nlohmann::ordered_json range(const Range& r) { return {{"lo", r6(r.lo)}, {"mid", r6(r.mid)}, {"hi", r6(r.hi)}}; }
}  // namespace

nlohmann::ordered_json outlook_json(const RunOutlook& o) {
    nlohmann::ordered_json j;
    nlohmann::ordered_json iv;
    iv["available"] = o.interval.available;
    iv["level"] = kIntervalLevel;
    iv["class"] = o.interval.cls;
    iv["residuals"] = o.interval.n;
    iv["step_time_factor_lo"] = r6(o.interval.lo);
    iv["step_time_factor_hi"] = r6(o.interval.hi);
    j["interval"] = iv;
    j["step_time_s"] = range(o.step_time_s);
    j["tokens_per_s"] = range(o.tokens_per_s);
    nlohmann::ordered_json mem;
    mem["verdict"] = o.memory;
    mem["peak_hbm_bytes"] = std::llround(o.peak_hbm_bytes);
    mem["capacity_bytes"] = std::llround(o.hbm_capacity_bytes);
    mem["suite_error"] = r6(o.memory_error);
    j["memory"] = mem;
    nlohmann::ordered_json g;
    g["goodput"] = r6(o.goodput.goodput);
    g["effective_tokens_per_s"] = r6(o.tokens_per_s.mid * o.goodput.goodput);
    g["interruptions_per_gpu_hour"] = r6(o.goodput_in.interruptions_per_gpu_hour);
    g["mtbf_s"] = r6(o.goodput.mtbf_s);
    g["checkpoint_storage"] = o.goodput_in.storage;
    g["checkpoint_write_s"] = r6(o.goodput_in.checkpoint_write_s);
    g["checkpoint_stall_s"] = r6(o.goodput_in.checkpoint_stall_s);
    g["checkpoint_async"] = o.goodput_in.async;
    g["checkpoint_interval_s"] = r6(o.goodput.interval_s);
    g["restart_s"] = r6(o.goodput_in.restart_s);
    g["lost_work_per_failure_s"] = r6(o.goodput.lost_per_failure_s);
    g["converges"] = o.goodput.converges;
    j["goodput"] = g;
    nlohmann::ordered_json e;
    e["gpu_power_known"] = o.power.known;
    e["step_j"] = r6(o.energy.facility_j);
    e["gpu_j"] = r6(o.energy.gpu_j);
    e["node_j"] = r6(o.energy.node_j);
    e["per_token_j"] = r6(o.energy.per_token_j);
    e["mean_power_w"] = r6(o.energy.mean_power_w);
    e["pue"] = r6(o.power.pue);
    e["usd_per_kwh"] = r6(o.power.usd_per_kwh);
    j["energy"] = e;
    if (o.tokens > 0) {
        nlohmann::ordered_json run;
        run["tokens"] = o.tokens;
        run["expected_failures"] = r6(o.goodput.failures);
        run["checkpoints"] = r6(o.goodput.checkpoints);
        run["days"] = {{"lo", r6(o.wall_s.lo / 86400)}, {"mid", r6(o.wall_s.mid / 86400)}, {"hi", r6(o.wall_s.hi / 86400)}};
        run["energy_kwh"] = r6(o.run_energy.kwh);
        run["energy_usd"] = r6(o.run_energy.usd);
        run["rental_usd"] = range(o.rental_usd);
        run["owned"] = o.owned;
        run["cost_usd"] = range(o.cost_usd);
        j["run"] = run;
    }
    return j;
}

}  // namespace strata::planner
