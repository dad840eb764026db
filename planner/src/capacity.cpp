// Capacity planning and the largest trainable model (docs/planner.md).
#include "strata/planner/capacity.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "strata/common/system.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::planner {

using namespace strata::sim;

std::vector<int> node_counts(int gpus_per_node, int min_gpus, int max_gpus) {
    std::set<int> n;
    const int lo = std::max(1, (min_gpus + gpus_per_node - 1) / gpus_per_node);
    const int hi = std::max(lo, max_gpus / gpus_per_node);
    for (int p = 1; p <= hi; p *= 2) {
        if (p >= lo) n.insert(p);
        int mid = p + p / 2;  // the x1.5 step between powers of two
        if (p >= 2 && mid >= lo && mid <= hi) n.insert(mid);
    }
    if (n.empty()) n.insert(lo);
    return {n.begin(), n.end()};
}

CapacityResult plan_capacity(const ModelSpec& m, const std::vector<ClusterOption>& options, const CapacityOptions& o) {
    CapacityResult r;
    // Sizes by node count, the GPU types interleaved: the small (slow: hundreds of micro-batches
    // per simulated plan) sizes start first.
    std::vector<std::pair<const ClusterOption*, int>> work;
    std::vector<std::vector<int>> counts;
    std::size_t most = 0;
    for (const auto& opt : options) {
        counts.push_back(node_counts(opt.cluster.gpus_per_node, o.min_gpus, o.max_gpus));
        most = std::max(most, counts.back().size());
    }
    for (std::size_t i = 0; i < most; ++i)
        for (std::size_t k = 0; k < options.size(); ++k)
            if (i < counts[k].size()) work.emplace_back(&options[k], counts[k][i]);
    auto cancelled = [&] { return o.search.cancel && o.search.cancel->load(); };
    // The sizes run on the search's threads, one search each: a size's three simulations on two
    // threads left one idle for a third of the time. Each simulation keeps the memory share it
    // had (memory_budget_bytes / threads), so the same plans are simulated; the points come out
    // in the old order whatever finishes first.
    const int threads = std::max(1, o.search.threads > 0 ? o.search.threads : static_cast<int>(std::thread::hardware_concurrency()));
    SearchOptions so_base = o.search;
    so_base.threads = 1;
    so_base.memory_budget_bytes = (o.search.memory_budget_bytes > 0 ? o.search.memory_budget_bytes : static_cast<double>(memory_limit_bytes())) / threads;
    so_base.critical_path = false;  // a sweep prints no `why`
    so_base.progress = nullptr;     // sizes run side by side: the sweep reports sizes done (o.progress)
    std::vector<CapacityPoint> points(work.size());
    std::vector<char> finished(work.size(), 0);
    std::atomic<std::size_t> next{0};
    std::mutex progress_mutex;
    int done = 0;
    auto size_point = [&](const ClusterOption* opt, int nodes) {
        CapacityPoint pt;
        pt.cluster = opt->cluster;
        pt.cluster.nodes = nodes;
        pt.cluster.name = opt->cluster.gpu + " x" + std::to_string(nodes * opt->cluster.gpus_per_node);
        SearchOptions so = so_base;
        so.calibration = opt->calibration;
        SearchResult s = search_plans(m, pt.cluster, opt->hw, so);
        pt.valid_plans = s.space.valid;
        for (const auto& rp : s.ranked) {
            const bool ok = rp.simulated ? !rp.sim.oom : rp.estimate.fits;
            if (!ok) continue;
            pt.best = rp;
            pt.feasible = true;
            pt.tokens_per_s = rp.simulated ? rp.sim.tokens_per_s : rp.estimate.tokens_per_s;
            break;
        }
        if (pt.feasible && pt.tokens_per_s > 0) {
            pt.outlook = run_outlook(m, pt.cluster, opt->hw, pt.best, o.tokens, o.residuals, o.owned);
            if (pt.outlook.goodput.converges) {
                pt.time_s = pt.outlook.wall_s.mid;
                pt.time_hi_s = pt.outlook.wall_s.hi;
                pt.cost_usd = pt.outlook.cost_usd.mid;
                pt.cost_hi_usd = pt.outlook.cost_usd.hi;
                auto meets = [&](double t, double usd) {
                    return (o.deadline_s <= 0 || t <= o.deadline_s) && (o.budget_usd <= 0 || usd <= o.budget_usd);
                };
                pt.meets = meets(pt.time_hi_s, pt.cost_hi_usd);
                pt.meets_predicted = meets(pt.time_s, pt.cost_usd);
            } else {  // failures come faster than restarts: it never finishes
                pt.time_s = pt.time_hi_s = pt.cost_usd = pt.cost_hi_usd = std::numeric_limits<double>::infinity();
            }
        }
        return pt;
    };
    auto worker = [&] {
        for (;;) {
            const std::size_t i = next.fetch_add(1);
            if (i >= work.size() || cancelled()) return;
            points[i] = size_point(work[i].first, work[i].second);
            // A search stopped part-way is not a point (as before: the sweep ended at the cancel).
            if (cancelled()) return;
            finished[i] = 1;
            std::lock_guard<std::mutex> lock(progress_mutex);
            ++done;
            if (o.progress) o.progress(done, static_cast<int>(work.size()));
        }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < std::min<int>(threads, static_cast<int>(work.size())); ++t) pool.emplace_back(worker);
    worker();
    for (auto& th : pool) th.join();
    // The points in option order, each option's sizes ascending, as the JSON and table list them.
    for (std::size_t k = 0; k < options.size(); ++k)
        for (std::size_t i = 0; i < work.size(); ++i)
            if (work[i].first == &options[k] && finished[i]) r.points.push_back(std::move(points[i]));
    // Pareto front over (time, cost): no other feasible point is at least as good in both and
    // better in one.
    for (std::size_t i = 0; i < r.points.size(); ++i) {
        auto& a = r.points[i];
        if (!a.feasible) continue;
        bool dominated = false;
        for (const auto& b : r.points) {
            if (!b.feasible || &a == &b) continue;
            if (b.time_s <= a.time_s && b.cost_usd <= a.cost_usd && (b.time_s < a.time_s || b.cost_usd < a.cost_usd)) dominated = true;
        }
        a.pareto = !dominated;
    }
    for (std::size_t i = 0; i < r.points.size(); ++i) {
        const auto& p = r.points[i];
        if (!p.feasible) continue;
        const int ii = static_cast<int>(i);
        if (r.fastest < 0 || p.time_s < r.points[static_cast<std::size_t>(r.fastest)].time_s) r.fastest = ii;
        if (p.meets_predicted && (r.fewest_gpus_predicted < 0 ||
                                  p.cluster.gpu_count() < r.points[static_cast<std::size_t>(r.fewest_gpus_predicted)].cluster.gpu_count()))
            r.fewest_gpus_predicted = ii;
        if (!p.meets) continue;
        if (r.fewest_gpus < 0 || p.cluster.gpu_count() < r.points[static_cast<std::size_t>(r.fewest_gpus)].cluster.gpu_count() ||
            (p.cluster.gpu_count() == r.points[static_cast<std::size_t>(r.fewest_gpus)].cluster.gpu_count() &&
             p.cost_usd < r.points[static_cast<std::size_t>(r.fewest_gpus)].cost_usd))
            r.fewest_gpus = ii;
        if (r.cheapest < 0 || p.cost_usd < r.points[static_cast<std::size_t>(r.cheapest)].cost_usd) r.cheapest = ii;
    }
    return r;
}

SearchOptions capacity_sweep_search(int global_batch) {
    SearchOptions s;
    s.space.global_batch = global_batch;
    s.space.search_gpipe = false;
    s.space.search_offload = false;
    s.space.zero_stages = {1};
    s.shortlist = 3;
    s.max_simulated = 3;
    s.shortlist_margin = 0.0;
    return s;
}

ClusterSpec capacity_template(const std::vector<ClusterSpec>& clusters, const std::string& gpu) {
    const ClusterSpec* best = nullptr;
    for (const auto& c : clusters)
        if (c.gpu == gpu && c.gpus_per_node >= 8 && (!best || c.nodes < best->nodes)) best = &c;
    if (best) return *best;
    ClusterSpec generic;
    generic.gpu = gpu;
    generic.nodes = 1;
    generic.gpus_per_node = 8;
    generic.name = gpu;
    return generic;
}

ModelSpec gpt_family_member(const ModelSpec& base, std::int64_t hidden) {
    // (hidden, layers) of Narayanan et al., SC21, Table 1 (1.7B ... 1T).
    static const double pts[][2] = {{2304, 24}, {3072, 30}, {4096, 36}, {6144, 40}, {8192, 48},
                                    {10240, 60}, {12288, 80}, {16384, 96}, {20480, 105}, {25600, 128}};
    const int n = sizeof(pts) / sizeof(pts[0]);
    const double h = static_cast<double>(hidden);
    double layers = pts[0][1];
    if (h >= pts[n - 1][0]) {
        layers = pts[n - 1][1] * h / pts[n - 1][0];
    } else if (h > pts[0][0]) {
        for (int i = 0; i + 1 < n; ++i)
            if (h <= pts[i + 1][0]) {
                double t = std::log(h / pts[i][0]) / std::log(pts[i + 1][0] / pts[i][0]);
                layers = pts[i][1] + t * (pts[i + 1][1] - pts[i][1]);
                break;
            }
    } else {
        layers = pts[0][1] * h / pts[0][0];
    }
    ModelSpec m = base;
    m.hidden = hidden;
    m.heads = static_cast<int>(hidden / 128);
    m.kv_heads = m.heads;
    m.head_dim = 128;
    m.ffn_hidden = m.ffn == FfnKind::swiglu ? (8 * hidden / 3 + 255) / 256 * 256 : 4 * hidden;
    m.layers = std::max(2, static_cast<int>(std::lround(layers / 2.0)) * 2);
    m.moe.reset();
    const double params = static_cast<double>(param_counts(m).total);
    m.name = base.name + "-family-" + std::to_string(static_cast<long long>(std::llround(params / 1e9))) + "b";
    return m;
}

MaxModelResult max_trainable_model(const ModelSpec& base, const ClusterOption& option, OffloadTiers tiers, int global_batch,
                                   const std::atomic<bool>* cancel, bool expandable_segments, int threads, const std::string& framework) {
    MaxModelResult best;
    SearchOptions so;
    so.threads = threads;
    so.space.framework = framework;
    so.space.global_batch = global_batch;
    so.space.expandable_segments = expandable_segments;
    so.space.search_offload = tiers != OffloadTiers::none;
    so.space.offload_to_ssd = tiers == OffloadTiers::cpu_and_ssd;
    so.space.search_gpipe = false;
    // Only plans the analytical model says fit (no near-misses): the question is "does anything
    // train", so the shortlist must not be spent on plans that are likely to run out of memory.
    so.memory_margin = 1.0;
    so.shortlist = 8;
    so.max_simulated = 12;
    so.shortlist_margin = 0.0;
    so.cancel = cancel;
    so.calibration = option.calibration;
    auto trains = [&](std::int64_t hidden, RankedPlan* out) {
        ModelSpec m = gpt_family_member(base, hidden);
        SearchResult s = search_plans(m, option.cluster, option.hw, so);
        for (const auto& rp : s.ranked)
            if (rp.simulated && !rp.sim.oom) {
                if (out) *out = rp;
                return true;
            }
        return false;
    };
    // Feasibility falls with size: binary search over hidden = 512 k.
    std::int64_t lo = 0, hi = 128;  // k: hidden = 512 k, up to 65536
    while (lo < hi) {
        if (cancel && cancel->load()) break;
        std::int64_t mid = (lo + hi + 1) / 2;
        if (trains(512 * mid, nullptr)) lo = mid;
        else hi = mid - 1;
    }
    if (lo > 0) {
        best.found = trains(512 * lo, &best.plan);
        best.model = gpt_family_member(base, 512 * lo);
        best.params = static_cast<double>(param_counts(best.model).total);
    }
    return best;
}

std::string capacity_to_json(const ModelSpec& m, const CapacityOptions& o, const CapacityResult& r) {
    nlohmann::ordered_json j;
    j["model"] = nlohmann::ordered_json::parse(to_json_text(m));
    j["tokens"] = o.tokens;
    j["deadline_s"] = o.deadline_s;
    j["budget_usd"] = o.budget_usd;
    auto point = [&](int i) -> nlohmann::ordered_json {
        if (i < 0) return nullptr;
        const auto& p = r.points[static_cast<std::size_t>(i)];
        nlohmann::ordered_json q;
        q["gpu"] = p.cluster.gpu;
        q["nodes"] = p.cluster.nodes;
        q["gpus"] = p.cluster.gpu_count();
        q["feasible"] = p.feasible;
        q["valid_plans"] = p.valid_plans;
        if (p.feasible) {
            q["tokens_per_s"] = std::round(p.tokens_per_s);
            q["days"] = std::isfinite(p.time_s) ? std::round(p.time_s / 86400.0 * 1000) / 1000 : -1;
            q["cost_usd"] = std::isfinite(p.cost_usd) ? std::round(p.cost_usd) : -1;
            q["meets"] = p.meets;
            q["meets_predicted"] = p.meets_predicted;
            q["outlook"] = outlook_json(p.outlook);
            q["pareto"] = p.pareto;
            q["plan"] = nlohmann::ordered_json::parse(to_json_text(p.best.plan));
            q["simulated"] = p.best.simulated;
        }
        return q;
    };
    j["owned"] = o.owned;
    j["meets_judged_at"] = o.residuals ? "the pessimistic end of the 80 % prediction interval" : "the prediction";
    j["fewest_gpus"] = point(r.fewest_gpus);
    j["fewest_gpus_predicted"] = point(r.fewest_gpus_predicted);
    j["cheapest"] = point(r.cheapest);
    nlohmann::ordered_json pts = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < r.points.size(); ++i) pts.push_back(point(static_cast<int>(i)));
    j["points"] = pts;
    return j.dump(2) + "\n";
}

}  // namespace strata::planner
