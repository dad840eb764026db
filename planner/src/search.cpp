// The search loop: enumerate -> memory prune -> fast estimate (bounded best-N kept) -> shortlist
// simulated on a thread pool -> final ranking. Deterministic: ties broken by enumeration order.
#include "strata/planner/search.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <cmath>
#include <mutex>
#include <queue>
#include <thread>

#include "strata/common/system.hpp"
#include "strata/common/text.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::planner {

using namespace strata::sim;

std::string explain(const FastEstimate& e) {
    if (e.step_time_s <= 0) return "";
    auto pct = [&](double x) { return fmt_fixed(100.0 * x / e.step_time_s, 0) + "%"; };
    std::string s = "compute " + pct(e.compute_s - e.recompute_s);
    if (e.bubble_s > 0) s += ", bubble " + pct(e.bubble_s);
    if (e.exposed_comm_s > 0) s += ", exposed comm " + pct(e.exposed_comm_s);
    if (e.recompute_s > 0) s += ", recompute " + pct(e.recompute_s);
    if (e.optimizer_s > 0) s += ", optimizer " + pct(e.optimizer_s);
    if (e.offload_s > 0) s += ", offload " + pct(e.offload_s);
    return s;
}

std::string explain(const SimSummary& s) {
    if (s.step_time_s <= 0) return "";
    auto pct = [](double x) { return fmt_fixed(100.0 * x, 0) + "%"; };
    const double comm = s.exposed_comm_s / s.step_time_s;
    std::string out = "compute " + pct(std::max(0.0, 1.0 - s.bubble_fraction - comm));
    if (s.bubble_fraction > 0.005) out += ", bubble " + pct(s.bubble_fraction);
    if (comm > 0.005) out += ", exposed comm " + pct(comm);
    // The critical path's first item names the stream that bounds the step (engine.md).
    const std::string first = s.critical_path.substr(0, s.critical_path.find(", "));
    if (!first.empty()) out += "; critical path: " + first;
    return out;
}

namespace {

struct Candidate {
    double step_s;
    std::int64_t index;  // enumeration order: the deterministic tie-break
    PlanSpec plan;
    FastEstimate est;
};

struct ByTime {
    bool operator()(const Candidate& a, const Candidate& b) const {
        return a.step_s != b.step_s ? a.step_s < b.step_s : a.index < b.index;
    }
};

}  // namespace

int plan_family(const PlanSpec& p) {
    const bool offloaded = !p.offload.optimizer.all_gpu() || !p.offload.params.all_gpu() || !p.offload.grads.all_gpu() ||
                           !p.offload.activations.all_gpu();
    return (p.zero_stage == 3 ? 1 : 0) + (p.pp > 1 ? 2 : 0) + (offloaded ? 4 : 0);
}

SearchResult search_plans(const ModelSpec& m, const ClusterSpec& c, const hwdb::HardwareView& hw, const SearchOptions& o) {
    SearchResult r;
    auto cancelled = [&] { return o.cancel && o.cancel->load(std::memory_order_relaxed); };

    // Pass 1: count, for the progress bar (enumeration alone is cheap).
    std::int64_t total = 0;
    if (o.progress) enumerate_plans(m, c, o.space, [&](const PlanSpec&) { ++total; return true; }, o.shard, o.shards);

    // The estimate phase runs on `threads` workers, each with its own Estimator (its caches are
    // not shared) and its own best-`keep` heap. Plans go out in batches in enumeration order, a
    // worker takes every threads-th plan of a batch, and the heaps merge by (time, enumeration
    // index): a total order, so the result does not depend on the thread count.
    const int pool_threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const std::size_t keep = static_cast<std::size_t>(std::max({o.max_simulated, o.top_k, o.shortlist}) * 4);
    using Heap = std::priority_queue<Candidate, std::vector<Candidate>, ByTime>;  // max-heap: worst kept on top
    struct Worker {
        std::unique_ptr<Estimator> est;
        Heap best;
        std::int64_t estimated = 0, pruned = 0;
    };
    std::vector<Worker> workers(static_cast<std::size_t>(pool_threads));
    for (Worker& w : workers) w.est = std::make_unique<Estimator>(m, c, hw, o.memory_margin, o.calibration);
    const Estimator& est = *workers[0].est;  // capacities for the follow-up rounds
    auto consider = [&](Worker& w, const PlanSpec& p, std::int64_t i) {
        FastEstimate e = w.est->estimate(p);
        ++w.estimated;
        if (!e.fits && !e.near_fit) {
            ++w.pruned;
            return;
        }
        Candidate cand{e.step_time_s, i, p, e};
        if (w.best.size() < keep) {
            w.best.push(std::move(cand));
        } else if (ByTime{}(cand, w.best.top())) {
            w.best.pop();
            w.best.push(std::move(cand));
        }
    };
    constexpr std::size_t kBatch = 4096;
    std::vector<PlanSpec> batch;
    batch.reserve(kBatch);
    std::int64_t index = 0;  // enumeration index of batch[0]
    auto run_batch = [&] {
        const std::size_t n = batch.size(), T = std::min(workers.size(), std::max<std::size_t>(1, n / 64));
        auto part = [&](std::size_t w) {
            for (std::size_t k = w; k < n; k += T) consider(workers[w], batch[k], index + static_cast<std::int64_t>(k));
        };
        std::vector<std::thread> pool;
        for (std::size_t w = 1; w < T; ++w) pool.emplace_back(part, w);
        part(0);
        for (auto& t : pool) t.join();
        index += static_cast<std::int64_t>(n);
        batch.clear();
    };
    const auto t0 = std::chrono::steady_clock::now();
    // Each phase reports its start, so a search smaller than one batch, or whose simulations end
    // before the reporting loop looks, still moves the bar (a GUI test saw none once).
    if (o.progress) o.progress(0.0, "estimating");
    r.space = enumerate_plans(m, c, o.space, [&](const PlanSpec& p) {
        if (cancelled()) return false;
        batch.push_back(p);
        if (batch.size() == kBatch) {
            if (o.progress && total > 0) o.progress(double(index) / double(total), "estimating");
            run_batch();
        }
        return true;
    }, o.shard, o.shards);
    if (!batch.empty() && !cancelled()) run_batch();
    Heap best;
    for (Worker& w : workers) {
        r.estimated += w.estimated;
        r.pruned_memory += w.pruned;
        while (!w.best.empty()) {
            const Candidate& cand = w.best.top();
            if (best.size() < keep) best.push(cand);
            else if (ByTime{}(cand, best.top())) {
                best.pop();
                best.push(cand);
            }
            w.best.pop();
        }
    }
    r.estimate_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.cancelled = cancelled();

    std::vector<Candidate> sorted;
    sorted.reserve(best.size());
    while (!best.empty()) {
        sorted.push_back(best.top());
        best.pop();
    }
    std::reverse(sorted.begin(), sorted.end());

    // Shortlist: the best `shortlist` estimates, plus every plan within the margin of the best, up
    // to max_simulated. The estimate's error differs by plan family (ZeRO-3's per-layer gathers,
    // pipelines' bubbles), so one family can fill the budget while another's best, a few percent
    // behind by estimate, simulates faster (GPT-3 175B on 1024 A100, docs/planner.md): the best
    // `family_quota` of every family present among the eligible go first, then estimate order.
    //
    // Plans whose estimate fits go first; a near fit (over capacity by the estimate, within
    // memory_margin) is shortlisted only where fewer plans fit than the budget. The replay's peak
    // is at or above the analytical one (allocator rounding and transients: 0-4 % on LLaMA-3 70B /
    // 64 H100), so a plan the estimate already puts over capacity almost always runs out of memory
    // in simulation: taking them first spent 17 of that search's 24 simulations on OOMs.
    std::vector<std::size_t> first;
    if (o.simulate && !sorted.empty() && !r.cancelled) {
        std::vector<std::size_t> order(sorted.size());
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::stable_partition(order.begin(), order.end(), [&](std::size_t i) { return sorted[i].est.fits; });
        const double cut = sorted[order.front()].step_s * (1.0 + o.shortlist_margin);
        std::size_t eligible = 0;
        while (eligible < order.size() && (eligible < static_cast<std::size_t>(o.shortlist) || sorted[order[eligible]].step_s <= cut)) ++eligible;
        const std::size_t budget = std::min(eligible, static_cast<std::size_t>(std::max(0, o.max_simulated)));
        // Round q takes every family's q-th best estimate, so a small budget still sees each
        // family's best before any family's second.
        std::vector<char> picked(eligible, 0);
        for (int q = 1; q <= o.family_quota; ++q) {
            std::map<int, int> seen;
            for (std::size_t i = 0; i < eligible && first.size() < budget; ++i)
                if (++seen[plan_family(sorted[order[i]].plan)] == q && !picked[i]) first.push_back(order[i]), picked[i] = 1;
        }
        for (std::size_t i = 0; i < eligible && first.size() < budget; ++i)
            if (!picked[i]) first.push_back(order[i]);
        std::sort(first.begin(), first.end());
    }
    const std::size_t n_sim = first.size();
    std::vector<RankedPlan> out(sorted.size());
    for (std::size_t i = 0; i < sorted.size(); ++i) {
        out[i].plan = sorted[i].plan;
        out[i].estimate = sorted[i].est;
        out[i].why = explain(sorted[i].est);
    }
    const auto t1 = std::chrono::steady_clock::now();
    const double sim_budget = (o.memory_budget_bytes > 0 ? o.memory_budget_bytes : static_cast<double>(memory_limit_bytes())) / pool_threads;
    std::vector<char> too_large(out.size(), 0);
    // Simulate the candidates `which` (indices into out) on a thread pool; those whose simulation
    // would not fit in this thread's share of memory keep their estimate.
    auto simulate_batch = [&](std::vector<std::size_t> which) {
        which.erase(std::remove_if(which.begin(), which.end(), [&](std::size_t k) {
                        const SimulationSize z = plan_simulation_size(m, c, out[k].plan, o.steady_state, sim_budget);
                        if (z.bytes <= sim_budget) return false;
                        too_large[k] = 1;
                        out[k].why = "estimate only: simulating its " + std::to_string(z.micro_batches) + " micro-batches needs about " +
                                     fmt_fixed(z.bytes / 1e9, 1) + " GB; " + explain(out[k].estimate);
                        return true;
                    }),
                    which.end());
        if (which.empty()) return;
        int threads = std::min<int>(pool_threads, static_cast<int>(which.size()));
        std::atomic<std::size_t> next{0};
        std::atomic<std::size_t> done{0};
        std::vector<std::thread> pool;
        for (int t = 0; t < threads; ++t)
            pool.emplace_back([&] {
                for (;;) {
                    if (cancelled()) return;
                    const std::size_t k = next.fetch_add(1);
                    if (k >= which.size()) return;
                    RankedPlan& rp = out[which[k]];
                    rp.sim = simulate_plan(m, c, rp.plan, hw, o.calibration, o.critical_path, o.steady_state, sim_budget);
                    if (rp.sim.too_large) {  // its probes fit, but they did not lie on a line
                        const SimulationSize z = simulation_size(m, c, rp.plan, {}, sim_budget);
                        too_large[which[k]] = 1;
                        rp.sim = SimSummary{};
                        rp.why = "estimate only: its steady state did not extend, and simulating its " + std::to_string(z.micro_batches) +
                                 " micro-batches whole needs about " + fmt_fixed(z.bytes / 1e9, 1) + " GB; " + explain(rp.estimate);
                    } else {
                        rp.simulated = true;
                        rp.why = explain(rp.sim);
                    }
                    done.fetch_add(1);
                }
            });
        // Progress is reported from this thread only.
        if (o.progress) o.progress(0.0, "simulating");
        while (o.progress && done.load() < which.size() && !cancelled()) {
            o.progress(double(done.load()) / double(which.size()), "simulating");
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        for (auto& th : pool) th.join();
        if (cancelled()) r.cancelled = true;
    };
    simulate_batch(first);
    // Follow-up rounds: when fewer than `min_fitting` simulated plans fit, the analytical peak was
    // optimistic for this model (allocator rounding, transients it does not see). Scale it by the
    // worst simulated / analytical ratio seen, skip the candidates that rules out, and simulate the
    // next ones in estimate order, up to `follow_up_factor` x max_simulated simulations in all.
    if (n_sim > 0 && o.min_fitting > 0) {
        const double cap = est.capacities().hbm_bytes;
        const std::size_t budget = static_cast<std::size_t>(std::max(0, o.max_simulated) * std::max(1, o.follow_up_factor));
        std::size_t spent = n_sim, cursor = 0;
        for (;;) {
            int fitting = 0;
            double ratio = 1.0;
            for (const auto& rp : out) {
                if (!rp.simulated) continue;
                if (!rp.sim.oom) ++fitting;
                else if (rp.estimate.hbm_bytes > 0) ratio = std::max(ratio, rp.sim.peak_hbm_bytes / rp.estimate.hbm_bytes);
            }
            if (fitting >= o.min_fitting || r.cancelled || spent >= budget || cursor >= out.size()) break;
            std::vector<std::size_t> next_batch;
            const std::size_t want = std::min(budget - spent, static_cast<std::size_t>(std::max(1, o.max_simulated)));
            for (; cursor < out.size() && next_batch.size() < want; ++cursor)
                if (!out[cursor].simulated && !too_large[cursor] && out[cursor].estimate.hbm_bytes * ratio <= cap) next_batch.push_back(cursor);
            if (next_batch.empty()) break;
            simulate_batch(next_batch);
            spent += next_batch.size();
            ++r.follow_up_rounds;
        }
    }
    r.simulate_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (too_large[i]) ++r.too_large_to_simulate;
        if (out[i].simulated) {
            ++r.simulated;
            if (out[i].sim.oom) ++r.simulated_oom;
        }
    }

    // Final order: simulated plans that fit, by simulated throughput; then the estimated rest;
    // simulated OOMs last. Stable, so ties keep the enumeration order.
    auto rank_key = [](const RankedPlan& p) {
        if (p.simulated && !p.sim.oom) return 0;
        if (!p.simulated && p.estimate.fits) return 1;
        return 2;
    };
    std::stable_sort(out.begin(), out.end(), [&](const RankedPlan& a, const RankedPlan& b) {
        int ka = rank_key(a), kb = rank_key(b);
        if (ka != kb) return ka < kb;
        if (ka == 0) return a.sim.tokens_per_s > b.sim.tokens_per_s;
        return a.estimate.step_time_s < b.estimate.step_time_s;
    });
    r.ranked = std::move(out);
    return r;
}

}  // namespace strata::planner
