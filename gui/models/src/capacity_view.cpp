#include "strata/gui/models/capacity_view.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "strata/common/text.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::gui {

std::vector<planner::ClusterOption> capacity_clusters(const Hardware& hw, const std::string& scenarios_dir,
                                                      const std::vector<std::string>& gpus) {
    std::vector<sim::ClusterSpec> bundled;
    for (const auto& name : bundled_names(scenarios_dir, "clusters"))
        bundled.push_back(sim::load_cluster(bundled_file(scenarios_dir, "clusters", name)));
    std::vector<planner::ClusterOption> out;
    for (const auto& g : gpus) {
        const sim::ClusterSpec c = planner::capacity_template(bundled, g);
        const hwdb::HardwareView view = hw.view(c, "--gpu");
        out.push_back({c, view, hw.calibration(view)});
    }
    return out;
}

planner::CapacityOptions capacity_options(const CapacityRequest& r) {
    planner::CapacityOptions o;
    o.tokens = r.tokens;
    o.deadline_s = r.deadline_s;
    o.budget_usd = r.budget_usd;
    o.min_gpus = r.min_gpus;
    o.max_gpus = r.max_gpus;
    o.search = planner::capacity_sweep_search(r.global_batch);
    return o;
}

CapacityLayout capacity_layout(const planner::CapacityResult& r) {
    CapacityLayout l;
    std::map<std::string, std::size_t> series_of;
    bool any = false;
    for (std::size_t i = 0; i < r.points.size(); ++i) {
        const auto& p = r.points[i];
        auto [it, added] = series_of.try_emplace(p.cluster.gpu, l.series.size());
        if (added) l.series.push_back({p.cluster.gpu, {}});
        l.series[it->second].points.push_back(static_cast<int>(i));
        if (!p.feasible) continue;
        const double g = p.cluster.gpu_count();
        l.min_gpus = any ? std::min(l.min_gpus, g) : g;
        l.max_gpus = any ? std::max(l.max_gpus, g) : g;
        l.max_days = std::max(l.max_days, p.time_s / 86400.0);
        l.max_cost_usd = std::max(l.max_cost_usd, p.cost_usd);
        any = true;
        if (p.pareto) l.pareto.push_back(static_cast<int>(i));
    }
    for (auto& s : l.series)
        std::stable_sort(s.points.begin(), s.points.end(), [&](int a, int b) {
            return r.points[static_cast<std::size_t>(a)].cluster.gpu_count() < r.points[static_cast<std::size_t>(b)].cluster.gpu_count();
        });
    std::stable_sort(l.pareto.begin(), l.pareto.end(),
                     [&](int a, int b) { return r.points[static_cast<std::size_t>(a)].time_s < r.points[static_cast<std::size_t>(b)].time_s; });
    return l;
}

std::string describe_point(const planner::CapacityPoint& p) {
    char buf[512];
    if (!p.feasible) {
        std::snprintf(buf, sizeof buf, "%d x %s: %s", p.cluster.gpu_count(), p.cluster.gpu.c_str(),
                      p.valid_plans == 0 ? "no valid plan (batch, layers or heads do not divide)" : "no plan fits in memory");
        return buf;
    }
    const auto& q = p.best.plan;
    std::snprintf(buf, sizeof buf, "%d x %s (%d nodes): %.1f days, $%s, %.0f tokens/s%s%s; plan tp %d pp %d dp %d cp %d vpp %d mb %d, recompute %s",
                  p.cluster.gpu_count(), p.cluster.gpu.c_str(), p.cluster.nodes, p.time_s / 86400, fmt_fixed(p.cost_usd, 0).c_str(),
                  p.tokens_per_s, p.meets ? ", meets the target" : "", p.pareto ? ", on the Pareto front" : "", q.tp, q.pp, q.dp, q.cp, q.vpp,
                  q.micro_batch, sim::to_string(q.recompute));
    return buf;
}

}  // namespace strata::gui
