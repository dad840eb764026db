// simulate_plan's steady-state extension against the whole simulation: the same figures, to the
// nanosecond of the step (and a millionth), on plans of many micro-batches across schedules,
// ZeRO stages, offload, MoE, context parallelism and a plan out of memory, its critical path too.
#include <catch2/catch.hpp>

#include <cmath>

#include "strata/hwdb/hwdb.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/planner/search.hpp"
#include "support/dgx.hpp"
#include "support/gpt.hpp"

using namespace strata;
using namespace strata::sim;

TEST_CASE("steady state: the extended figures are the whole simulation's", "[planner][steady]") {
    ModelSpec gpt = test::gpt_shape("gpt-ss", 16, 2048, 16, 32000, 2048);
    gpt.max_position = 2048;
    ModelSpec moe = gpt;
    moe.moe = test::moe_spec(8, 2);
    struct Case {
        const char* what;
        ModelSpec m;
        int tp, pp, dp, mb, gb;
        Schedule sched;
        int vpp, zero;
        bool offload, cp2;
        bool lock_free = false;
        bool extends = true;  ///< whether the probes may stand for the plan
    };
    const std::vector<Case> cases = {
        {"1f1b pp4 dp4", gpt, 2, 4, 4, 1, 256, Schedule::one_f_one_b, 1, 1, false, false},
        {"1f1b pp8 dp2", gpt, 1, 8, 4, 1, 512, Schedule::one_f_one_b, 1, 0, false, false},
        {"interleaved pp4 vpp2", gpt, 2, 4, 4, 1, 256, Schedule::interleaved_1f1b, 2, 1, false, false},
        {"no pipeline, zero2", gpt, 2, 1, 16, 1, 256, Schedule::one_f_one_b, 1, 2, false, false},
        {"no pipeline, zero3", gpt, 1, 1, 32, 1, 512, Schedule::one_f_one_b, 1, 3, false, false},
        {"pp2, optimizer on cpu", gpt, 4, 2, 4, 1, 128, Schedule::one_f_one_b, 1, 1, true, false},
        {"moe ep", moe, 1, 2, 16, 1, 512, Schedule::one_f_one_b, 1, 1, false, false},
        {"cp2 pp2", gpt, 2, 2, 8, 1, 256, Schedule::one_f_one_b, 1, 1, false, true},
        {"out of memory: tp1 pp2 mb48", gpt, 1, 2, 16, 48, 18432, Schedule::one_f_one_b, 1, 0, false, false},
        // GPipe's peak grows with the micro-batches and the allocator replay's segments do not
        // grow on a line: simulated whole.
        {"gpipe pp2", gpt, 4, 2, 4, 1, 128, Schedule::gpipe, 1, 1, false, false, false, false},
        // The host's lock-free update outlasts 2-4 micro-batches' compute but not 64: the probes'
        // steps are equal while the compute grows, a bend the line would miss. Simulated whole.
        {"lock-free update beside few micro-batches", gpt, 1, 1, 32, 1, 2048, Schedule::one_f_one_b, 1, 0, true, false, true, false},
    };
    const ClusterSpec c = test::dgx_cluster("H100-SXM5-80GB", 4);
    auto db = hwdb::Database::open(hwdb::default_db_path());
    const auto hw = db.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu);
    int extended = 0, oom = 0;
    for (const Case& k : cases) {
        PlanSpec p;
        p.tp = k.tp;
        p.pp = k.pp;
        p.dp = k.dp;
        p.micro_batch = k.mb;
        p.global_batch = k.gb;
        p.schedule = k.sched;
        p.vpp = k.vpp;
        p.zero_stage = k.zero;
        p.sequence_parallel = k.tp > 1;
        if (k.m.moe) p.ep = 8;
        if (k.cp2) {
            p.cp = 2;
            p.dp /= 2;
        }
        if (k.offload) p.offload.optimizer = TierSplit{0, 1, 0};
        p.lock_free_update = k.lock_free;
        validate_plan(k.m, c, p, "test");
        INFO(k.what << ": " << p.micro_batches() << " micro-batches");
        REQUIRE(planner::steady_state_applies(p));
        const planner::SimSummary whole = planner::simulate_plan(k.m, c, p, hw, {}, true, false);
        const planner::SimSummary ext = planner::simulate_plan(k.m, c, p, hw, {}, true, true);
        INFO("step " << whole.step_time_s << " / " << ext.step_time_s << ", oom " << whole.oom << " / " << ext.oom << ", extended "
                     << ext.steady_state << ", hbm " << whole.peak_hbm_bytes << " / " << ext.peak_hbm_bytes);
        CHECK(ext.oom == whole.oom);
        CHECK(ext.critical_path == whole.critical_path);
        CHECK(ext.steady_state == k.extends);
        extended += ext.steady_state;
        oom += whole.oom;
        CHECK(ext.step_time_s == Approx(whole.step_time_s).epsilon(1e-6));
        CHECK(ext.tokens_per_s == Approx(whole.tokens_per_s).epsilon(1e-6));
        CHECK(ext.mfu == Approx(whole.mfu).epsilon(1e-6));
        CHECK(ext.bubble_fraction == Approx(whole.bubble_fraction).epsilon(1e-6).margin(1e-9));
        CHECK(ext.exposed_comm_s == Approx(whole.exposed_comm_s).epsilon(1e-6).margin(1e-9));
        CHECK(ext.peak_hbm_bytes == Approx(whole.peak_hbm_bytes).epsilon(1e-9));
        CHECK(ext.peak_cpu_bytes == Approx(whole.peak_cpu_bytes).epsilon(1e-9));
        CHECK(ext.gpu_compute_s == Approx(whole.gpu_compute_s).epsilon(1e-6));
        CHECK(ext.gpu_comm_s == Approx(whole.gpu_comm_s).epsilon(1e-6).margin(1e-9));
        CHECK(ext.gpu_idle_s == Approx(whole.gpu_idle_s).epsilon(1e-6).margin(1e-9));
    }
    CHECK(extended == static_cast<int>(cases.size()) - 2);
    CHECK(oom == 1);
}

TEST_CASE("steady state: a plan too large to simulate whole is simulated by its probes", "[planner][steady]") {
    // A memory budget that a plan's largest probe fits and its whole simulation does not
    // (sim::simulation_size under that budget, as the search sizes them): the steady state
    // simulates the plan; a plan whose probes do not extend (GPipe) would need the whole
    // simulation, and is left to its estimate, both in simulate_plan and in the search.
    ModelSpec gpt = test::gpt_shape("gpt-big-batch", 16, 2048, 16, 32000, 2048);
    gpt.max_position = 2048;
    const ClusterSpec c = test::dgx_cluster("H100-SXM5-80GB", 4);
    auto db = hwdb::Database::open(hwdb::default_db_path());
    const auto hw = db.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu);
    // The first budget on a 2 % grid between the two sizes, for every plan given.
    auto budget_between = [&](const std::vector<PlanSpec>& plans) {
        for (double b = 1e8; b < 1e11; b *= 1.02) {
            bool ok = true;
            for (const PlanSpec& q : plans)
                ok = ok && planner::plan_simulation_size(gpt, c, q, true, b).bytes <= b && simulation_size(gpt, c, q, {}, b).bytes > b;
            if (ok) return b;
        }
        return 0.0;
    };
    PlanSpec p;
    p.tp = 4;
    p.pp = 2;
    p.dp = 4;
    p.micro_batch = 1;
    p.global_batch = 4096;  // 1024 micro-batches a pipeline
    p.sequence_parallel = true;
    p.zero_stage = 1;
    validate_plan(gpt, c, p, "test");
    const double budget = budget_between({p});
    REQUIRE(budget > 0);
    const planner::SimSummary ext = planner::simulate_plan(gpt, c, p, hw, {}, false, true, budget);
    CHECK_FALSE(ext.too_large);
    CHECK(ext.steady_state);
    CHECK(ext.step_time_s > 0);
    CHECK(planner::simulate_plan(gpt, c, p, hw, {}, false, false, budget).too_large);
    PlanSpec g = p;
    g.schedule = Schedule::gpipe;
    g.global_batch = 512;  // GPipe keeps every micro-batch's activations: fewer, to stay small
    validate_plan(gpt, c, g, "test");
    const double g_budget = budget_between({g});
    REQUIRE(g_budget > 0);
    const planner::SimSummary gs = planner::simulate_plan(gpt, c, g, hw, {}, false, true, g_budget);
    CHECK(gs.too_large);
    CHECK(gs.step_time_s == 0);

    // The search over a small space under a budget every plan's probes fit and no plan's whole
    // simulation does: with the steady state the shortlist is simulated; without it, none of it.
    planner::SearchOptions o;
    o.space.global_batch = p.global_batch;
    o.space.max_tp = 4;
    o.space.max_pp = 2;
    o.space.max_vpp = 1;
    o.space.max_micro_batch = 1;
    o.space.zero_stages = {1};
    o.space.recomputes = {Recompute::none};
    o.space.search_gpipe = false;
    o.space.search_sequence_parallel = false;
    std::vector<PlanSpec> space;
    planner::enumerate_plans(gpt, c, o.space, [&](const PlanSpec& q) {
        space.push_back(q);
        return true;
    });
    REQUIRE(space.size() >= 3);
    o.memory_budget_bytes = budget_between(space);
    REQUIRE(o.memory_budget_bytes > 0);
    o.threads = 1;
    o.top_k = 3;
    o.shortlist = 3;
    o.max_simulated = 3;
    const planner::SearchResult with = planner::search_plans(gpt, c, hw, o);
    REQUIRE(!with.ranked.empty());
    CHECK(with.ranked[0].simulated);
    CHECK(with.too_large_to_simulate == 0);
    o.steady_state = false;
    const planner::SearchResult without = planner::search_plans(gpt, c, hw, o);
    REQUIRE(!without.ranked.empty());
    CHECK_FALSE(without.ranked[0].simulated);
    CHECK(without.too_large_to_simulate > 0);
}
