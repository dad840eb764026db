// Multi-head latent attention on the runtime (DeepSeek-V2/V3's attention; lowering's mla_ops.cpp,
// runtime's mla_ops.cpp): gradients against finite differences, RoPE's backward as the adjoint of
// its forward, and every parallel variant on the single-rank curve, on the cpu backend and the
// emulated cuda path.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/lowering/model.hpp"
#include "strata/runtime/cpu_kernels.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

namespace {
std::vector<float> randoms(std::size_t n, unsigned seed) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = u(g);
    return v;
}
}  // namespace

TEST_CASE("MLA's RoPE: the backward is the forward's adjoint, the rope parts rotated and nothing else moved", "[runtime][mla]") {
    namespace cpu = strata::runtime::cpu;
    const std::int64_t T = 10, heads = 3, nope = 8, rope = 4, dv = 6, dqk = nope + rope, W = heads * (2 * dqk + dv);
    const cpu::Positions where{5, 1, 0};  // sequences of 5: positions 0..4, twice
    const auto q = randoms(T * heads * dqk, 1), kv = randoms(T * heads * (nope + dv), 2), kr = randoms(T * rope, 3), g = randoms(T * W, 4);
    std::vector<float> qkv(T * W), dq(q.size()), dkv(kv.size()), dkr(kr.size());
    cpu::mla_rope_forward(qkv.data(), q.data(), kv.data(), kr.data(), T, where, heads, nope, rope, dv);
    cpu::mla_rope_backward(dq.data(), dkv.data(), dkr.data(), g.data(), T, where, heads, nope, rope, dv);
    // <g, F(q, kv, kr)> = <F^T g, (q, kv, kr)>: the backward is the transpose of a linear map.
    double lhs = 0, rhs = 0;
    for (std::size_t i = 0; i < qkv.size(); ++i) lhs += static_cast<double>(g[i]) * qkv[i];
    for (std::size_t i = 0; i < q.size(); ++i) rhs += static_cast<double>(dq[i]) * q[i];
    for (std::size_t i = 0; i < kv.size(); ++i) rhs += static_cast<double>(dkv[i]) * kv[i];
    for (std::size_t i = 0; i < kr.size(); ++i) rhs += static_cast<double>(dkr[i]) * kr[i];
    CHECK(lhs == Approx(rhs).epsilon(1e-5));
    // Row 5 is position 0: no rotation, so the rows are the inputs placed; a rotation keeps each
    // rope pair's length; every head's key shares the one rotated rope key.
    const std::int64_t t0 = 5, t3 = 8;
    for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t c = 0; c < dqk; ++c) CHECK(qkv[t0 * W + h * dqk + c] == q[t0 * heads * dqk + h * dqk + c]);
        for (std::int64_t c = 0; c < nope; ++c) CHECK(qkv[t0 * W + heads * dqk + h * dqk + c] == kv[t0 * heads * (nope + dv) + h * (nope + dv) + c]);
        for (std::int64_t c = 0; c < rope; ++c) CHECK(qkv[t0 * W + heads * dqk + h * dqk + nope + c] == kr[t0 * rope + c]);
        for (std::int64_t c = 0; c < dv; ++c)
            CHECK(qkv[t0 * W + 2 * heads * dqk + h * dv + c] == kv[t0 * heads * (nope + dv) + h * (nope + dv) + nope + c]);
        for (std::int64_t c = 0; c < rope / 2; ++c) {
            const float* in = q.data() + t3 * heads * dqk + h * dqk + nope;
            const float* out = qkv.data() + t3 * W + h * dqk + nope;
            CHECK(std::hypot(out[c], out[c + rope / 2]) == Approx(std::hypot(in[c], in[c + rope / 2])).epsilon(1e-6));
            CHECK(out[c] != Approx(in[c]).epsilon(1e-3));  // position 3 turns it
            CHECK(qkv[t3 * W + heads * dqk + h * dqk + nope + c] == qkv[t3 * W + heads * dqk + nope + c]);
        }
    }
}

TEST_CASE("MLA: gradients match finite differences", "[runtime][mla][grad]") {
    SECTION("latents of the query and of the key/value, their norms, the up-projections, the output projection") {
        check_gradients(tiny_mla(true), cpu_plan(), 0,
                        {{"q_down.weight", 0}, {"q_latent_norm.weight", 1}, {"q_up.weight", 0}, {"kv_down.weight", 1},
                         {"kv_latent_norm.weight", 0}, {"kv_up.weight", 1}, {"proj.weight", 0}, {"ln1.weight", 1}});
    }
    SECTION("an uncompressed query projection (DeepSeek-V2-Lite, Moonlight)") {
        check_gradients(tiny_mla(false), cpu_plan(), 0, {{"q.weight", 0}, {"kv_down.weight", 1}, {"kv_up.weight", 0}, {"ln1.weight", 0}});
    }
    SECTION("CP 2: rank 1's chunks of each sequence, by the ring and by Ulysses' all-to-alls") {
        check_gradients(tiny_mla(true), cp2_plan(CpCommType::p2p), 1, {{"kv_up.weight", 0}, {"q_up.weight", 1}, {"kv_latent_norm.weight", 1}});
        check_gradients(tiny_mla(true), cp2_plan(CpCommType::a2a), 1, {{"kv_up.weight", 1}, {"proj.weight", 0}});
    }
    SECTION("TP 2 with sequence parallelism: rank 1's heads, and the replicated down-projections' summed gradients") {
        PlanSpec p = cpu_plan(2);
        p.sequence_parallel = true;
        check_gradients(tiny_mla(true), p, 1, {{"q_up.weight", 0}, {"kv_up.weight", 1}, {"proj.weight", 1}});
        check_gradients(tiny_mla(false), p, 1, {{"q.weight", 1}, {"kv_up.weight", 0}});
    }
}

TEST_CASE("MLA: every parallel variant gives the single-rank curve", "[runtime][mla]") {
    for (const bool q_lora : {true, false}) {
        const ModelSpec m = tiny_mla(q_lora);
        PlanSpec sp = cpu_plan(2);
        sp.sequence_parallel = true;
        PlanSpec zero3 = cpu_plan(1, 1, 2);
        zero3.zero_stage = 3;
        PlanSpec full = cpu_plan(2, 2);
        full.recompute = Recompute::full;
        PlanSpec sel = cpu_plan(2);
        sel.sequence_parallel = true;
        sel.recompute = Recompute::selective;
        sel.recompute_modules = recompute_bit(RecomputeModule::core_attn) | recompute_bit(RecomputeModule::layernorm);
        if (q_lora) sel.recompute_modules |= recompute_bit(RecomputeModule::mla_up_proj);
        PlanSpec unfused = cpu_plan(2);
        unfused.flash_attention = false;
        // torchtitan's op-level SAC (tp 1): the latents (or wq's query) and wkv_b's output kept,
        // the other projections, the latent norms and RoPE rerun.
        PlanSpec sac = cpu_plan(1, 1, 2);
        sac.recompute = Recompute::selective;
        sac.recompute_policy = RecomputePolicy::op;
        runtime::RunOptions emulated;
        emulated.backend = runtime::Backend::emulated;
        // Context parallelism (since stop 64): the ring's and the all-gather's blocks on the padded
        // rows, and Ulysses' all-to-alls moving Q and K heads of qk_head_dim and V heads of
        // v_head_dim.
        const PlanSpec ring = cp2_plan(CpCommType::p2p);
        PlanSpec cp_full = ring;
        cp_full.recompute = Recompute::full;
        check_against_single_rank(m, {{"cp 2, ring", ring},
                                      {"cp 2, K/V all-gather", cp2_plan(CpCommType::allgather)},
                                      {"cp 2, Ulysses", cp2_plan(CpCommType::a2a)},
                                      {"tp 2 x cp 2, sp", cp2_plan(CpCommType::p2p, 2)},
                                      {"cp 2, ring, full recompute", cp_full},
                                      {"cp 2, ring, on the emulated device", ring, emulated},
                                      {"tp 2", cpu_plan(2)},
                                      {"tp 2, sp", sp},
                                      {"pp 2", cpu_plan(1, 2)},
                                      {"dp 2, ZeRO-3", zero3},
                                      {"tp 2 x pp 2, full recompute", full},
                                      {"tp 2, sp, selective recompute", sel},
                                      {"tp 2, unfused attention", unfused},
                                      {"dp 2, op-level SAC", sac},
                                      {"one rank on the emulated device", cpu_plan(), emulated},
                                      {"tp 2, sp on the emulated device", sp, emulated}});
    }
}

TEST_CASE("MLA with routed experts (DeepSeek's layer): EP and TP on the single-rank curve", "[runtime][mla][moe]") {
    const ModelSpec m = tiny_mla_moe();
    PlanSpec ep = cpu_plan(1, 1, 2);
    ep.ep = 2;
    PlanSpec tp = cpu_plan(2);
    tp.sequence_parallel = true;
    PlanSpec sac = ep;
    sac.recompute = Recompute::selective;
    sac.recompute_policy = RecomputePolicy::op;
    check_against_single_rank(m, {{"dp 2 x ep 2", ep}, {"tp 2, sp", tp}, {"dp 2 x ep 2, op-level SAC", sac}});
}

TEST_CASE("MLA: what is not executed is refused with the field named", "[runtime][mla]") {
    CHECK_NOTHROW(runtime::Session(tiny_mla(true), cpu_cluster(1), cpu_plan(), {}));
    PlanSpec up = cpu_plan();
    up.recompute = Recompute::selective;
    up.recompute_modules = recompute_bit(RecomputeModule::mla_up_proj);
    CHECK_NOTHROW(runtime::Session(tiny_mla(true), cpu_cluster(1), up, {}));
    CHECK_THROWS_WITH(runtime::Session(tiny_mla(false), cpu_cluster(1), up, {}), Catch::Contains("mla_up_proj"));
    ModelSpec ln = tiny_mla(true);
    ln.norm = NormKind::layernorm;
    CHECK_THROWS_WITH(runtime::Session(ln, cpu_cluster(1), cpu_plan(), {}), Catch::Contains("model.norm"));
    ModelSpec learned = tiny_mla(true);
    learned.position = PositionKind::learned;
    CHECK_THROWS_WITH(runtime::Session(learned, cpu_cluster(1), cpu_plan(), {}), Catch::Contains("model.position"));
}
