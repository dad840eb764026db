// The search never drops the true best plan: on small spaces, simulate EVERY valid plan with the
// engine (brute force) and compare with what search_plans ranks first. Also: the fast estimate
// agrees with the engine on the shortlist within the stated margin.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <set>

#include "strata/hwdb/hwdb.hpp"
#include "strata/planner/estimate.hpp"
#include "strata/planner/search.hpp"
#include "strata/sim/simulate.hpp"
#include "strata/sim/topology.hpp"
#include "strata/lowering/spec_io.hpp"
#include "support/dgx.hpp"
#include "support/gpt.hpp"

using namespace strata;
using namespace strata::sim;

namespace {

ModelSpec gpt(int layers, std::int64_t hidden, std::int64_t seq) {
    ModelSpec m = test::gpt_shape("gpt-test", layers, hidden, static_cast<int>(hidden / 64), 32000, seq);
    m.max_position = seq;
    return m;
}

ClusterSpec node(const std::string& gpu, int nodes) { return test::dgx_cluster(gpu, nodes); }

hwdb::HardwareView view(const ClusterSpec& c) {
    auto db = hwdb::Database::open(hwdb::default_db_path());
    return db.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu);
}

struct Brute {
    double best_tps = 0;
    PlanSpec best;
    int plans = 0, ooms = 0;
};

Brute brute_force(const ModelSpec& m, const ClusterSpec& c, const hwdb::HardwareView& hw, const planner::SearchSpace& s) {
    Brute b;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        auto r = planner::simulate_plan(m, c, p, hw);
        ++b.plans;
        if (r.oom) {
            ++b.ooms;
            return true;
        }
        if (r.tokens_per_s > b.best_tps) {
            b.best_tps = r.tokens_per_s;
            b.best = p;
        }
        return true;
    });
    return b;
}

// ~2.5 B parameters on one A100-40GB node: only sharded / pipelined / recomputed plans fit.
planner::SearchOptions memory_bound_options() {
    planner::SearchOptions o;
    o.space.global_batch = 16;
    o.space.zero_stages = {0, 1, 3};
    o.space.recomputes = {Recompute::none, Recompute::full};
    o.space.search_offload = false;
    o.space.search_gpipe = false;
    o.threads = 2;
    return o;
}

}  // namespace

TEST_CASE("search finds the brute-force best plan (H100 node)", "[planner][search][slow]") {
    const ModelSpec m = gpt(8, 1024, 1024);
    const ClusterSpec c = node("H100-SXM5-80GB", 1);
    const auto hw = view(c);
    planner::SearchOptions o;
    o.space.global_batch = 16;
    o.space.zero_stages = {0, 1};
    o.space.recomputes = {Recompute::none, Recompute::full};
    o.space.search_offload = false;
    o.space.search_gpipe = false;
    o.threads = 2;
    const Brute b = brute_force(m, c, hw, o.space);
    REQUIRE(b.plans > 20);
    REQUIRE(b.best_tps > 0);
    auto r = planner::search_plans(m, c, hw, o);
    REQUIRE_FALSE(r.ranked.empty());
    REQUIRE(r.ranked[0].simulated);
    CHECK(r.ranked[0].sim.tokens_per_s == Approx(b.best_tps).epsilon(1e-12));
}

TEST_CASE("search finds the brute-force best when memory binds (A100-40GB node)", "[planner][search][slow]") {
    // ~2.5 B parameters: 16 B/param of model states (40 GB) do not fit one 40 GB GPU unsharded,
    // so only sharded / pipelined / recomputed plans survive.
    const ModelSpec m = gpt(12, 4096, 1024);
    const ClusterSpec c = node("A100-SXM4-40GB", 1);
    const auto hw = view(c);
    planner::SearchOptions o = memory_bound_options();
    const Brute b = brute_force(m, c, hw, o.space);
    REQUIRE(b.ooms > 0);  // the space really is memory-bound
    REQUIRE(b.best_tps > 0);
    auto r = planner::search_plans(m, c, hw, o);
    REQUIRE_FALSE(r.ranked.empty());
    REQUIRE(r.ranked[0].simulated);
    CHECK_FALSE(r.ranked[0].sim.oom);
    CHECK(r.ranked[0].sim.tokens_per_s == Approx(b.best_tps).epsilon(1e-12));
    CHECK(r.pruned_memory > 0);
}

TEST_CASE("fast estimate agrees with the engine on the shortlist", "[planner][search]") {
    // The stated margin: the fast estimate is within 25% of the engine's step time on every
    // simulated plan that fits; the shortlist margin (30%) is wider, so the best is never cut.
    const ModelSpec m = gpt(16, 2048, 2048);
    const ClusterSpec c = node("H100-SXM5-80GB", 2);
    const auto hw = view(c);
    planner::SearchOptions o;
    o.space.global_batch = 64;
    o.space.search_offload = false;
    o.threads = 2;
    o.max_simulated = 24;
    auto r = planner::search_plans(m, c, hw, o);
    int checked = 0;
    for (const auto& p : r.ranked) {
        if (!p.simulated || p.sim.oom) continue;
        const double rel = std::fabs(p.estimate.step_time_s / p.sim.step_time_s - 1.0);
        INFO("plan tp " << p.plan.tp << " pp " << p.plan.pp << " dp " << p.plan.dp << " mb " << p.plan.micro_batch
                        << " est " << p.estimate.step_time_s << " sim " << p.sim.step_time_s);
        CHECK(rel <= 0.25);
        ++checked;
    }
    CHECK(checked >= 10);
    CHECK(o.shortlist_margin > 0.25);
}

TEST_CASE("the first round simulates the best estimates of every plan family", "[planner][search]") {
    // Two nodes, ZeRO 1 and 3, with and without a pipeline: four families, more eligible plans
    // than the 6 simulations allowed. With the quota, every family present within the margin has
    // its best estimate simulated; without it (quota 0) the first 6 in estimate order are, which
    // is the old rule and the baseline the quota must not lose: the best estimate is simulated.
    const ModelSpec m = gpt(8, 2048, 1024);
    const ClusterSpec c = node("H100-SXM5-80GB", 2);
    const auto hw = view(c);
    planner::SearchOptions o;
    o.space.global_batch = 64;
    o.space.zero_stages = {1, 3};
    o.space.recomputes = {Recompute::none};
    o.space.search_offload = false;
    o.space.search_gpipe = false;
    o.threads = 2;
    o.max_simulated = 6;
    o.shortlist = 6;
    o.shortlist_margin = 1.0;
    o.min_fitting = 0;
    for (const int quota : {2, 0}) {
        o.family_quota = quota;
        const auto r = planner::search_plans(m, c, hw, o);
        CHECK(r.simulated == 6);
        double best_est = 1e300;
        for (const auto& p : r.ranked) best_est = std::min(best_est, p.estimate.step_time_s);
        std::map<int, double> family_best;  // eligible families and their best estimate
        for (const auto& p : r.ranked)
            if (p.estimate.step_time_s <= best_est * (1 + o.shortlist_margin)) {
                auto [it, fresh] = family_best.try_emplace(planner::plan_family(p.plan), p.estimate.step_time_s);
                if (!fresh) it->second = std::min(it->second, p.estimate.step_time_s);
            }
        REQUIRE(family_best.size() >= 2);
        std::set<int> covered;
        bool best_simulated = false;
        for (const auto& p : r.ranked) {
            if (!p.simulated) continue;
            covered.insert(planner::plan_family(p.plan));
            if (p.estimate.step_time_s == best_est) best_simulated = true;
            const auto it = family_best.find(planner::plan_family(p.plan));
            if (it != family_best.end() && p.estimate.step_time_s == it->second) family_best.erase(it);
        }
        INFO("quota " << quota << ": " << covered.size() << " families simulated");
        CHECK(best_simulated);
        // With the quota every family's best estimate was simulated; in estimate order alone the
        // pipelined family's best (about 30 % behind by estimate here) was not: the case the
        // quota is for.
        if (quota > 0) CHECK(family_best.empty());
        else CHECK_FALSE(family_best.empty());
    }
}

TEST_CASE("follow-up rounds simulate more candidates until enough of them fit", "[planner][search]") {
    const ModelSpec m = gpt(12, 4096, 1024);
    const ClusterSpec c = node("A100-SXM4-40GB", 1);
    const auto hw = view(c);
    planner::SearchOptions o = memory_bound_options();
    o.max_simulated = 2;  // a first round of 2 cannot hold 3 fitting plans
    o.shortlist = 2;
    o.shortlist_margin = 0;
    o.min_fitting = 3;
    o.follow_up_factor = 4;
    auto fitting = [](const planner::SearchResult& r) {
        int n = 0;
        for (const auto& p : r.ranked) n += p.simulated && !p.sim.oom ? 1 : 0;
        return n;
    };
    const auto r = planner::search_plans(m, c, hw, o);
    CHECK(r.follow_up_rounds >= 1);
    CHECK(r.simulated <= 8);  // the budget: follow_up_factor x max_simulated
    CHECK(fitting(r) >= 3);
    REQUIRE_FALSE(r.ranked.empty());
    CHECK(r.ranked[0].simulated);
    CHECK_FALSE(r.ranked[0].sim.oom);
    o.min_fitting = 0;  // no follow-up: exactly the first round
    const auto r0 = planner::search_plans(m, c, hw, o);
    CHECK(r0.follow_up_rounds == 0);
    CHECK(r0.simulated == 2);
}

TEST_CASE("the estimate phase gives the same ranking on any number of threads", "[planner][search][threads]") {
    // Workers take interleaved plans of each batch and merge their heaps by (estimate, index):
    // the shortlist, and so every simulated figure, must not depend on how many there were.
    const ModelSpec m = gpt(12, 4096, 1024);
    const ClusterSpec c = node("A100-SXM4-40GB", 1);
    const auto hw = view(c);
    planner::SearchOptions o = memory_bound_options();
    o.simulate = false;
    o.top_k = 50;
    std::vector<std::string> rankings;
    std::vector<std::int64_t> estimated, pruned;
    for (int threads : {1, 2, 3}) {
        o.threads = threads;
        const auto r = planner::search_plans(m, c, hw, o);
        std::string s;
        for (const auto& p : r.ranked) s += to_json_text(p.plan) + std::to_string(p.estimate.step_time_s) + "\n";
        rankings.push_back(s);
        estimated.push_back(r.estimated);
        pruned.push_back(r.pruned_memory);
    }
    REQUIRE(estimated[0] > 64);  // more than one worker's share of a batch
    CHECK(rankings[1] == rankings[0]);
    CHECK(rankings[2] == rankings[0]);
    CHECK(estimated[1] == estimated[0]);
    CHECK(pruned[2] == pruned[0]);
}

TEST_CASE("the shortlist simulates plans whose estimate fits before near fits", "[planner][search]") {
    const ModelSpec m = gpt(12, 4096, 4096);
    const ClusterSpec c = node("A100-SXM4-40GB", 1);
    const auto hw = view(c);
    planner::SearchOptions o = memory_bound_options();
    o.min_fitting = 0;  // the first round only
    o.max_simulated = 4;
    o.shortlist = 4;
    o.shortlist_margin = 0;
    o.memory_margin = 1.5;  // many near fits: plans up to 50 % over HBM by the estimate
    o.space.zero_stages = {0};  // fitting needs recompute or model parallelism, a near fit may skip both
    o.top_k = 1000;
    // Precondition: by estimate alone, some near fit is faster than the 4th fitting plan, so a
    // shortlist in plain estimate order would simulate it.
    planner::SearchOptions est_only = o;
    est_only.simulate = false;
    auto all = planner::search_plans(m, c, hw, est_only).ranked;
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.estimate.step_time_s < b.estimate.step_time_s; });
    int fitting_seen = 0;
    bool near_ahead = false;
    for (const auto& p : all) {
        if (p.estimate.fits && ++fitting_seen == 4) break;
        if (!p.estimate.fits) near_ahead = true;
    }
    REQUIRE(near_ahead);
    const auto r = planner::search_plans(m, c, hw, o);
    int fits = 0, near = 0;
    for (const auto& p : r.ranked) (p.estimate.fits ? fits : near) += 1;
    REQUIRE(fits >= 4);  // enough plans fit for the whole first round
    REQUIRE(near > 0);
    for (const auto& p : r.ranked)
        if (p.simulated) CHECK(p.estimate.fits);
    CHECK(r.simulated == 4);
}

TEST_CASE("fast estimate: ZeRO-3 parameter gathers bound a layer from below", "[planner][search][zero3]") {
    // A MoE model whose experts dwarf its compute, ZeRO-3 over 4 nodes, short sequences: each
    // layer's prefetched all-gathers take longer than its kernels, so the step is gather-bound.
    // The one-layer probe used to time only the kernels (its single gather runs before them):
    // estimate 0.92 s against 17.8 s simulated for DeepSeek-V3 on 16,384 GPUs. Same 25 % margin.
    ModelSpec m = gpt(4, 1024, 256);
    m.moe = strata::test::moe_spec(64, 2, 4096);
    const ClusterSpec c = node("H100-SXM5-80GB", 4);
    const auto hw = view(c);
    PlanSpec p;
    p.dp = 32;
    p.ep = 8;
    p.micro_batch = 1;
    p.global_batch = 32;
    p.zero_stage = 3;
    validate_plan(m, c, p, "test");
    planner::Estimator est(m, c, hw);
    const planner::FastEstimate e = est.estimate(p);
    const planner::SimSummary s = planner::simulate_plan(m, c, p, hw);
    INFO("estimate " << e.step_time_s << " s, engine " << s.step_time_s << " s, critical path " << s.critical_path);
    REQUIRE_FALSE(s.oom);
    CHECK(s.critical_path.find("dp-comm") != std::string::npos);  // the premise: gathers bound the step
    CHECK(std::fabs(e.step_time_s / s.step_time_s - 1.0) <= 0.25);
}

TEST_CASE("fast estimate: ZeRO-2 reduces every micro-batch", "[planner][search][zero]") {
    // DeepSpeed's ZeRO-2 reduce-scatters each micro-batch's gradients (the lowering's rule): with 8
    // micro-batches of 128 tokens on 32 GPUs over 4 nodes its DP traffic is 8 times ZeRO 1's. The
    // estimate follows the engine within the search's 25 % margin, with and without overlap, and
    // with and without interference (overlap 0.4: compute beside a transfer runs 1.4x slower).
    // The engine puts ZeRO-2 behind ZeRO 1 when each reduction blocks, and when the overlapped
    // ones slow the GEMMs beside them; the estimate ranks them the same way. Uncalibrated and
    // overlapped, the extra reductions hide under the compute of the micro-batches after them.
    const ModelSpec m = gpt(8, 2048, 128);
    const ClusterSpec c = node("H100-SXM5-80GB", 4);
    const auto hw = view(c);
    for (const double interference : {0.0, 0.4}) {
        Calibration cal;
        cal.overlap = interference;
        planner::Estimator est(m, c, hw, 1.10, cal);
        for (const bool overlap : {true, false}) {
            double sim_s[3] = {0, 0, 0}, est_s[3] = {0, 0, 0};
            for (const int zero : {1, 2}) {
                PlanSpec p;
                p.dp = 32;
                p.micro_batch = 1;
                p.global_batch = 256;
                p.zero_stage = zero;
                p.overlap_grad_reduce = overlap;
                validate_plan(m, c, p, "test");
                const planner::FastEstimate e = est.estimate(p);
                const planner::SimSummary s = planner::simulate_plan(m, c, p, hw, cal);
                INFO("interference " << interference << " zero " << zero << " overlap " << overlap << ": estimate "
                                     << e.step_time_s << " s, engine " << s.step_time_s << " s");
                REQUIRE_FALSE(s.oom);
                CHECK(std::fabs(e.step_time_s / s.step_time_s - 1.0) <= 0.25);
                sim_s[zero] = s.step_time_s;
                est_s[zero] = e.step_time_s;
            }
            if (!overlap || interference > 0) {
                CHECK(sim_s[2] > sim_s[1]);
                CHECK(est_s[2] > est_s[1]);
            } else {
                CHECK(sim_s[2] >= sim_s[1]);
            }
        }
    }
}

TEST_CASE("fast estimate: a lock-free update hides the host's Adam under the next step, like the engine", "[planner][search][offload]") {
    // ZeRO-Offload on one H100 node: the CPU's AdamW over a ZeRO-1 shard, with few and with many
    // micro-batches (the update longer, then shorter, than a step's compute). Lock-free, only its
    // excess over the compute shows, and the copies (D2H of the gradients, H2D of the update) stay
    // at the step's end. The estimate follows the engine within the search's 25 % margin and
    // saves what the engine saves within a third of the saving.
    const ModelSpec m = gpt(8, 2048, 1024);
    const ClusterSpec c = node("H100-SXM5-80GB", 1);
    const auto hw = view(c);
    planner::Estimator est(m, c, hw, 1.10, {});
    for (const int global_batch : {8, 128}) {
        double sim_s[2] = {0, 0}, est_s[2] = {0, 0};
        for (const bool lock_free : {false, true}) {
            PlanSpec p;
            p.dp = 8;
            p.micro_batch = 1;
            p.global_batch = global_batch;
            p.zero_stage = 1;
            p.offload.optimizer = TierSplit{0, 1, 0};
            p.lock_free_update = lock_free;
            validate_plan(m, c, p, "test");
            const planner::FastEstimate e = est.estimate(p);
            const planner::SimSummary s = planner::simulate_plan(m, c, p, hw);
            INFO("global batch " << global_batch << " lock-free " << lock_free << ": estimate " << e.step_time_s << " s, engine "
                                 << s.step_time_s << " s");
            REQUIRE_FALSE(s.oom);
            CHECK(std::fabs(e.step_time_s / s.step_time_s - 1.0) <= 0.25);
            sim_s[lock_free] = s.step_time_s;
            est_s[lock_free] = e.step_time_s;
        }
        INFO("global batch " << global_batch << ": engine saves " << sim_s[0] - sim_s[1] << " s, estimate " << est_s[0] - est_s[1] << " s");
        CHECK(sim_s[1] < sim_s[0]);
        CHECK(std::fabs((est_s[0] - est_s[1]) / (sim_s[0] - sim_s[1]) - 1.0) <= 1.0 / 3);
    }
}

TEST_CASE("fast estimate: ZeRO-3 under a pipeline gathers once a step, like the engine", "[planner][search][zero3]") {
    // Pipelined FSDP (PlanSpec::pipelined_fsdp): one gather and one reduce-scatter per layer and
    // step. The estimate follows the engine within the search's 25 % margin; both put it within a
    // few percent of ZeRO 1 on the same pipeline (the same bytes on the wire once a step), and far
    // ahead of what per-micro-batch ZeRO-3 gathers would cost on 16 micro-batches.
    const ModelSpec m = gpt(8, 2048, 128);
    const ClusterSpec c = node("H100-SXM5-80GB", 4);
    const auto hw = view(c);
    for (const double interference : {0.0, 0.4}) {
        Calibration cal;
        cal.overlap = interference;
        planner::Estimator est(m, c, hw, 1.10, cal);
        double sim_s[4] = {0, 0, 0, 0}, est_s[4] = {0, 0, 0, 0};
        for (const int zero : {1, 3}) {
            PlanSpec p;
            p.pp = 2;
            p.dp = 16;
            p.micro_batch = 1;
            p.global_batch = 256;
            p.zero_stage = zero;
            validate_plan(m, c, p, "test");
            const planner::FastEstimate e = est.estimate(p);
            const planner::SimSummary s = planner::simulate_plan(m, c, p, hw, cal);
            INFO("interference " << interference << " zero " << zero << ": estimate " << e.step_time_s << " s, engine " << s.step_time_s << " s");
            REQUIRE_FALSE(s.oom);
            CHECK(std::fabs(e.step_time_s / s.step_time_s - 1.0) <= 0.25);
            sim_s[zero] = s.step_time_s;
            est_s[zero] = e.step_time_s;
        }
        INFO("interference " << interference);
        CHECK(sim_s[3] / sim_s[1] == Approx(1.0).margin(0.05));
        CHECK(est_s[3] / est_s[1] == Approx(1.0).margin(0.05));
    }
}

TEST_CASE("fast estimate: ZeRO-3 gathers slow the kernels they hide behind", "[planner][search][zero3]") {
    // Compute-bound ZeRO-3 (a dense GPT, 2k tokens per micro-batch, 4 nodes): each layer's kernels
    // hide the next layer's gather, and with interference (overlap 0.4) run 1.4x slower while it
    // lasts. The one-layer probe's gather ran before its window, so the estimate left that out:
    // 12 % low on GPT-3 175B / 1024 A100 (docs/planner.md). Here the estimate is -8 % without
    // interference and +8 % with it (it charges the slowdown for the whole overlap, the engine
    // for the time a transfer is actually in flight): held to 10 %, tighter than the search's 25 %.
    const ModelSpec m = gpt(8, 4096, 2048);
    const ClusterSpec c = node("H100-SXM5-80GB", 4);
    const auto hw = view(c);
    PlanSpec p;
    p.dp = 32;
    p.micro_batch = 1;
    p.global_batch = 64;
    p.zero_stage = 3;
    validate_plan(m, c, p, "test");
    for (const double interference : {0.0, 0.4}) {
        Calibration cal;
        cal.overlap = interference;
        planner::Estimator est(m, c, hw, 1.10, cal);
        const planner::FastEstimate e = est.estimate(p);
        const planner::SimSummary s = planner::simulate_plan(m, c, p, hw, cal);
        INFO("interference " << interference << ": estimate " << e.step_time_s << " s, engine " << s.step_time_s
                             << " s, critical path " << s.critical_path);
        REQUIRE_FALSE(s.oom);
        CHECK(std::fabs(e.step_time_s / s.step_time_s - 1.0) <= 0.10);
    }
}

TEST_CASE("fast estimate agrees with the engine on MoE plans with dense-first layers", "[planner][search][moe]") {
    // The estimate times a MoE layer period and, apart, a leading dense layer (first_k_dense), so
    // a DeepSeek-style stack is not costed as all-dense; the same 25 % margin as the dense case.
    ModelSpec m = gpt(8, 2048, 2048);
    m.ffn = FfnKind::swiglu;
    m.ffn_hidden = 5632;
    m.moe = strata::test::moe_spec(16, 4, 1024);
    m.moe->first_k_dense = 2;
    const ClusterSpec c = node("H100-SXM5-80GB", 2);
    const auto hw = view(c);
    planner::SearchOptions o;
    o.space.global_batch = 64;
    o.space.search_offload = false;
    o.space.zero_stages = {1};
    o.threads = 2;
    o.max_simulated = 12;
    o.shortlist = 12;
    auto r = planner::search_plans(m, c, hw, o);
    int checked = 0;
    for (const auto& p : r.ranked) {
        if (!p.simulated || p.sim.oom) continue;
        const double rel = std::fabs(p.estimate.step_time_s / p.sim.step_time_s - 1.0);
        INFO("plan tp " << p.plan.tp << " pp " << p.plan.pp << " dp " << p.plan.dp << " ep " << p.plan.ep << " etp "
                        << p.plan.etp() << " est " << p.estimate.step_time_s << " sim " << p.sim.step_time_s);
        CHECK(rel <= 0.25);
        ++checked;
    }
    CHECK(checked >= 6);
}

TEST_CASE("fast estimate agrees with the engine on a model with an MTP module", "[planner][search][mtp]") {
    // The MTP module weighs about a layer and a head on the last stage; the estimate adds it there
    // (its one-layer timing program leaves it out), within the same 25 % margin, and a pipeline
    // whose last stage carries it is estimated slower than without it.
    ModelSpec m = gpt(8, 2048, 2048);
    m.ffn = FfnKind::swiglu;
    m.ffn_hidden = 5632;
    m.moe = strata::test::moe_spec(16, 4, 1024);
    const ClusterSpec c = node("H100-SXM5-80GB", 2);
    const auto hw = view(c);
    for (int pp : {2, 4}) {
        PlanSpec p;
        p.pp = pp;
        p.dp = 16 / pp;
        p.ep = 2;
        p.micro_batch = 1;
        p.global_batch = 64;
        p.zero_stage = 1;
        ModelSpec plain = m, mtp = m;
        mtp.mtp_depth = 1;
        planner::Estimator without(plain, c, hw), with(mtp, c, hw);
        const double est = with.estimate(p).step_time_s;
        SimOptions so;
        so.critical_path = false;
        const double sim = simulate(mtp, c, p, hw, so).step_time_s;
        INFO("pp " << pp << " est " << est << " sim " << sim);
        CHECK(std::fabs(est / sim - 1.0) <= 0.25);
        CHECK(est > without.estimate(p).step_time_s);
    }
}

TEST_CASE("a cluster without a node gets a NIC per GPU, in the engine as in the estimator", "[planner][search][topology]") {
    // A cluster written without a node (a user's four 8-GPU H100 servers) used to get one NIC per
    // node in the engine's topology but one per GPU in the estimator: multi-node runs so written
    // were simulated up to 40 % slow, all of it in pipeline receives (issue #31). One rule now
    // (cost_detail::nics_per_node): the cluster's count, else the node's, else one per GPU.
    ClusterSpec c = node("H100-SXM5-80GB", 4);
    c.node.clear();
    const auto hw = view(c);
    CHECK(Topology(c, hw).nics_per_node() == 8);
    const ModelSpec m = gpt(16, 2048, 2048);
    PlanSpec p;
    p.pp = 4;
    p.dp = 8;
    p.micro_batch = 1;
    p.global_batch = 64;
    validate_plan(m, c, p, "test");
    const planner::SimSummary generic = planner::simulate_plan(m, c, p, hw);
    ClusterSpec explicit_nics = c;
    explicit_nics.nics_per_node = 8;
    const planner::SimSummary given = planner::simulate_plan(m, explicit_nics, p, hw);
    CHECK(generic.step_time_s == given.step_time_s);
    const planner::FastEstimate e = planner::Estimator(m, c, hw).estimate(p);
    INFO("estimate " << e.step_time_s << " s, engine " << generic.step_time_s << " s");
    CHECK(std::fabs(e.step_time_s / generic.step_time_s - 1.0) <= 0.25);
}
