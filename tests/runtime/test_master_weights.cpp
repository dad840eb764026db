// Pure 16-bit training (plan.master_weights = false: a bf16 model under FSDP2 with torch's Adam):
// AdamW updates the bf16 weights themselves, so an update smaller than half of bf16's spacing is
// lost (worked out by hand below), the state holds no fp32 copy (4 bytes a parameter less), and
// every parallel split follows one rank's curve.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/lowering/model.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

namespace {

PlanSpec pure_bf16(PlanSpec p) {
    p.precision = Precision::bf16;
    p.master_weights = false;
    p.exp_avg_dtype = p.exp_avg_sq_dtype = Precision::bf16;  // torch's Adam keeps them in the parameters' type
    return p;
}

// The RMSNorm weights of layer 0 after `steps` AdamW steps at `lr` on a fixed batch: how many
// moved off their initial 1.0, and whether every one is a bf16 value.
std::pair<int, bool> norm_weights_moved(const PlanSpec& p, double lr, int steps) {
    runtime::RunOptions o;
    o.lr = lr;
    o.data.fixed_batch = true;
    runtime::Session s(tiny_llama(2), cpu_cluster(1), p, o);
    for (int i = 0; i < steps; ++i) s.step();
    int moved = 0;
    bool all_bf16 = true;
    for (std::int64_t i = 0; i < s.param_elements(0, "ln1.weight", 0); ++i) {
        const float w = s.param(0, "ln1.weight", 0, i);
        std::uint32_t b;
        std::memcpy(&b, &w, 4);
        all_bf16 = all_bf16 && (b & 0xFFFFu) == 0u;
        moved += w != 1.0f;
    }
    return {moved, all_bf16};
}

}  // namespace

TEST_CASE("pure bf16: AdamW on the bf16 weights loses the updates below half a spacing", "[runtime][bf16]") {
    // An RMSNorm weight starts at 1.0, where bf16's spacing is 2^-8 = 0.0039 below and 2^-7 above.
    // AdamW's step is about lr: at lr = 1e-3 the new value rounds back to 1.0 (|step| < 2^-9 below,
    // < 2^-8 above), every step; at lr = 1e-2 it lands on another bf16 value. With an fp32 master
    // the 1e-3 steps add up there and the weights move (test_runtime.cpp, "bf16: 2-byte values").
    const auto [stuck, bf16_a] = norm_weights_moved(pure_bf16(cpu_plan()), 1e-3, 8);
    CHECK(stuck == 0);
    CHECK(bf16_a);
    const auto [moving, bf16_b] = norm_weights_moved(pure_bf16(cpu_plan()), 1e-2, 2);
    CHECK(moving > 0);
    CHECK(bf16_b);
    PlanSpec master = pure_bf16(cpu_plan());
    master.master_weights = true;
    CHECK(norm_weights_moved(master, 1e-3, 8).first > 0);
}

TEST_CASE("pure bf16: it learns, every split on one rank's curve, and no fp32 copy is held", "[runtime][bf16]") {
    const ModelSpec m = tiny_llama(2);
    const std::vector<double> one = losses(m, pure_bf16(cpu_plan()), 4);
    CHECK(one.back() < one.front());
    // Splits sum in another order; bf16 rounds each write: 1e-3 relative, as the mixed-precision
    // bf16 variants (test_parallel.cpp).
    PlanSpec z1 = cpu_plan(1, 1, 2), z3 = cpu_plan(1, 1, 2), sp = cpu_plan(2);
    z1.zero_stage = 1;
    z3.zero_stage = 3;
    sp.sequence_parallel = true;
    for (const auto& [name, p] : {std::pair{"dp 2, ZeRO-1", z1}, std::pair{"dp 2, ZeRO-3", z3}, std::pair{"tp 2 + SP", sp},
                                  std::pair{"pp 2", cpu_plan(1, 2)}}) {
        INFO(name);
        const std::vector<double> got = losses(m, pure_bf16(p), 4);
        for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(one[i]).epsilon(1e-3));
    }
    // The gpu tier's peak holds the fp32 master with it and not without: 4 bytes a parameter, on
    // the second step (the master is made at the first update).
    auto peak = [&](bool with_master) {
        PlanSpec p = pure_bf16(cpu_plan());
        p.master_weights = with_master;
        runtime::RunOptions o;
        runtime::Session s(m, cpu_cluster(1), p, o);
        s.step();
        return s.step().peak_bytes[0];
    };
    const double params = static_cast<double>(param_counts(m).total);
    CHECK(peak(true) - peak(false) == Approx(4.0 * params).epsilon(0.01));
}
