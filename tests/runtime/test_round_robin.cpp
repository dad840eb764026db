// NeMo AutoModel's FakeBalancedGate (model.moe.routing round_robin), executed: the routing from
// the token count alone, no router weights, no gradient for its constant weights.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/lowering/params.hpp"
#include "strata/runtime/cpu_kernels.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

TEST_CASE("MoE: AutoModel's round-robin fake gate, executed", "[runtime][moe]") {
    // NeMo AutoModel's FakeBalancedGate (components/moe/layers.py, noise 0): indices
    // arange(T k).view(T, k) % E, weights ones(T, k) / k, no parameters, no gradient.
    std::vector<float> r(5 * 2 * 2);
    runtime::cpu::moe_route_round_robin(r.data(), 5, 4, 2);
    const std::vector<float> want = {0, 1, 0.5f, 0.5f, 2, 3, 0.5f, 0.5f, 0, 1, 0.5f, 0.5f, 2, 3, 0.5f, 0.5f, 0, 1, 0.5f, 0.5f};
    CHECK(r == want);
    std::vector<float> r3(3 * 2 * 3);  // k 3 over E 4: token 1 wraps from expert 3 to 0 and 1
    runtime::cpu::moe_route_round_robin(r3.data(), 3, 4, 3);
    CHECK(r3[6] == 3.0f);
    CHECK(r3[7] == 0.0f);
    CHECK(r3[8] == 1.0f);
    CHECK(r3[9] == Approx(1.0 / 3));
    // The gate has no weights, so the model has no router parameters, and it learns.
    ModelSpec m = tiny_moe();
    m.moe->routing = MoeSpec::Routing::round_robin;
    REQUIRE(dataflow_unsupported(m, cpu_plan()).empty());
    for (const ParamEntry& e : param_layout(m, cpu_plan(), 0).entries) CHECK(e.name != "router.weight");
    const std::vector<double> one = losses(m, cpu_plan(), kSteps);
    CHECK(one.back() < one.front());
    // The routing differs from the learned router's: another curve.
    ModelSpec learned = tiny_moe();
    CHECK(losses(learned, cpu_plan(), kSteps) != one);
    // Each rank routes its own micro-batches' tokens as one rank does, so data and expert
    // parallelism follow the single-rank curve; both weights placements (inside the experts, or
    // at the un-permute, where the constant weights scale the gradient and get none).
    std::vector<Variant> v;
    v.push_back({"dp 2", cpu_plan(1, 1, 2)});
    PlanSpec p = cpu_plan(1, 1, 2);
    p.ep = 2;
    v.push_back({"dp 2 ep 2", p});
    p.zero_stage = 1;
    p.moe_probs_at = MoeProbsAt::fc2_output;
    v.push_back({"dp 2 ep 2 ZeRO-1, weights at fc2's output", p});
    check_against_single_rank(m, v);
    PlanSpec out = cpu_plan();
    out.moe_probs_at = MoeProbsAt::fc2_output;
    const std::vector<double> at_output = losses(m, out, kSteps);
    for (int i = 0; i < kSteps; ++i) CHECK(at_output[static_cast<std::size_t>(i)] == Approx(one[static_cast<std::size_t>(i)]).epsilon(kTol));
}
