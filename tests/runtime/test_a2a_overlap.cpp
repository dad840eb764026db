// MoE all-to-all overlap executed (plan.moe_a2a_overlap, Megatron-Core's combined 1F1B): the
// lowering merges each steady forward with the next backward of another micro-batch and
// interleaves their layers, so the runtime runs two micro-batches' kernels and all-to-alls in one
// order. The arithmetic is the unmerged plan's, value for value (the same sums in the same order),
// so the losses must agree exactly, and with the single rank's to rounding.
#include <catch2/catch.hpp>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

TEST_CASE("MoE all-to-all overlap: the merged steps give the unmerged plan's losses, on the single-rank curve",
          "[runtime][parallel][moe][a2a_overlap]") {
    struct Case {
        const char* name;
        ModelSpec model;
        PlanSpec plan;
    };
    std::vector<Case> cases;
    PlanSpec p = cpu_plan(1, 1, 2);
    p.ep = 2;
    p.global_batch = 16;  // 4 micro-batches a rank: F0, three merged steps, B3
    cases.push_back({"dp 2 ep 2 (the dense first layer paired with a MoE one)", tiny_moe(), p});
    p = cpu_plan(2, 1, 2);
    p.sequence_parallel = true;
    p.ep = 2;
    p.global_batch = 16;
    cases.push_back({"tp 2 SP x dp 2, ep 2", tiny_moe(), p});
    p = cpu_plan(1, 2, 2);
    p.schedule = Schedule::interleaved_1f1b;
    p.vpp = 2;
    p.ep = 2;
    p.zero_stage = 1;
    p.global_batch = 16;
    cases.push_back({"pp 2 interleaved (vpp 2) x dp 2, ep 2, ZeRO-1", tiny_moe(4), p});
    // m = pp: rank 0's warm-up takes every forward, rank 1 has one steady pair (the losses sweep's
    // deadlock of seed 72, when the warm-up's last forward was merged with the first backward).
    p.global_batch = 8;
    cases.push_back({"pp 2 interleaved (vpp 2) x dp 2, ep 2, 2 micro-batches a rank", tiny_moe(4), p});
    {
        ModelSpec shared = tiny_moe();
        shared.moe->shared_experts = 1;
        shared.dropout = 0.3;  // a mask drawn per micro-batch: the merged order must not swap them
        PlanSpec q = cpu_plan(1, 1, 2);
        q.ep = 2;
        q.global_batch = 16;
        cases.push_back({"dp 2 ep 2, a shared expert, dropout", shared, q});
    }
    for (const Case& c : cases) {
        INFO(c.name);
        PlanSpec over = c.plan;
        over.moe_a2a_overlap = true;
        const std::vector<double> plain = losses(c.model, c.plan, kSteps), merged = losses(c.model, over, kSteps);
        for (int i = 0; i < kSteps; ++i) {
            INFO("step " << i + 1 << ": " << merged[static_cast<std::size_t>(i)] << " merged, " << plain[static_cast<std::size_t>(i)] << " not");
            CHECK(merged[static_cast<std::size_t>(i)] == plain[static_cast<std::size_t>(i)]);
        }
        PlanSpec one = cpu_plan();
        one.global_batch = c.plan.global_batch;
        check_against(c.model, one, {{c.name, over}});
    }
}
