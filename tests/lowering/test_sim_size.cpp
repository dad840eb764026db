// simulation_size / check_simulation_size (issue #32, defect 6): a plan whose simulation would not
// fit in memory is refused up front, naming plan.global_batch and the memory it would need, instead
// of growing to tens of GB and dying of std::bad_alloc. The estimate is checked against real
// lowerings: it extrapolates from a few micro-batches, so it must land on the true count.
#include <catch2/catch.hpp>

#include "strata/common/error.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/spec_io.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata;
using namespace strata::sim;
using strata::test::plan;
using strata::test::small_gpt;
using Catch::Matchers::Contains;

namespace {

// One node holding exactly the plan's GPUs.
ClusterSpec cluster(int gpus) {
    ClusterSpec c;
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 1;
    c.gpus_per_node = gpus;
    return c;
}

double instructions(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, bool full = false) {
    LowerOptions o;
    o.full_mode = full;
    double n = 0;
    for (const RankProgram& r : lower(m, c, p, o).ranks) n += static_cast<double>(r.instrs.size());
    return n;
}

}  // namespace

TEST_CASE("the size estimate matches the lowered program across schedules", "[spec][size]") {
    const ModelSpec m = small_gpt();
    struct Case {
        PlanSpec p;
        const char* what;
    };
    std::vector<Case> cases;
    cases.push_back({plan(1, 1, 1, 96), "one GPU, 96 micro-batches"});
    cases.push_back({plan(1, 2, 2, 128), "1F1B over 2 stages"});
    PlanSpec il = plan(1, 2, 1, 40);
    il.schedule = Schedule::interleaved_1f1b;
    il.vpp = 2;
    cases.push_back({il, "interleaved, vpp 2"});
    PlanSpec gp = plan(2, 2, 1, 24);
    gp.schedule = Schedule::gpipe;
    gp.sequence_parallel = true;
    cases.push_back({gp, "GPipe with TP and SP"});
    PlanSpec z = plan(1, 1, 4, 64);
    z.zero_stage = 3;
    z.recompute = Recompute::full;
    cases.push_back({z, "ZeRO-3, full recompute"});
    for (const Case& k : cases) {
        INFO(k.what);
        const ClusterSpec c = cluster(k.p.gpus());
        validate_plan(m, c, k.p, "p.json");
        const SimulationSize z1 = simulation_size(m, c, k.p);  // no budget: always measured
        CHECK(z1.micro_batches == k.p.micro_batches());
        CHECK(z1.instructions == Approx(instructions(m, c, k.p)).epsilon(0.02));
        CHECK(z1.bytes > z1.instructions * 64);  // the Instr alone is 64 bytes
        // A trace and more steps cost more; full mode counts every GPU.
        CHECK(simulation_size(m, c, k.p, {false, true, 1}).bytes > z1.bytes);
        CHECK(simulation_size(m, c, k.p, {false, false, 3}).instructions == Approx(3 * z1.instructions));
    }
    PlanSpec f = plan(2, 2, 2, 32);
    CHECK(simulation_size(m, cluster(8), f, {true, false, 1}).instructions == Approx(instructions(m, cluster(8), f, true)).epsilon(0.05));
}

TEST_CASE("a plan too large to simulate is an input error naming plan.global_batch and the memory", "[spec][size]") {
    // GPT-3's shape (96 layers) on one GPU with 2^20 micro-batches: ~10^10 instructions, terabytes.
    const ModelSpec m = strata::test::gpt_shape("gpt3", 96, 12288, 96, 51200, 2048);
    PlanSpec p = plan(1, 1, 1, static_cast<int>(kMaxGlobalBatch));
    const ClusterSpec c = cluster(1);
    validate_plan(m, c, p, "p.json");
    const double budget = 64e9;
    try {
        check_simulation_size(m, c, p, {}, budget, "p.json");
        FAIL("no error");
    } catch (const InputError& e) {
        CHECK(e.file() == "p.json");
        CHECK(e.path() == "plan.global_batch");
        CHECK_THAT(e.rule(), Contains("= 1048576 gives 1048576 micro-batches per step") && Contains("GB of memory") &&
                                 Contains("more than the 64 GB"));
    }
    // The same plan with 8 micro-batches fits the same budget; the small model's 2^20 does not fit
    // 1 GB but fits a machine large enough.
    p.global_batch = 8;
    CHECK_NOTHROW(check_simulation_size(m, c, p, {}, budget, "p.json"));
    PlanSpec small = plan(1, 1, 1, 1 << 20);
    const SimulationSize z = simulation_size(small_gpt(), c, small);
    CHECK_THROWS_AS(check_simulation_size(small_gpt(), c, small, {}, 1e9, "p.json"), InputError);
    CHECK_NOTHROW(check_simulation_size(small_gpt(), c, small, {}, z.bytes * 1.01, "p.json"));
}
