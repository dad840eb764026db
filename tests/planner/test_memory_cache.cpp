// The planner's memory cache must not change a single byte: compare cached and uncached
// estimates over a whole enumerated plan space (dense and MoE).
#include <catch2/catch.hpp>

#include "strata/planner/space.hpp"
#include "strata/lowering/memory.hpp"
#include "support/gpt.hpp"

using namespace strata;
using namespace strata::sim;

static void compare_space(const ModelSpec& m, const ClusterSpec& c, int global_batch) {
    Capacities caps;
    caps.hbm_bytes = 80e9;
    caps.cpu_bytes_per_node = 2e12;
    caps.ssd_bytes_per_node = 30e12;
    caps.gpus_per_node = c.gpus_per_node;
    MemoryCache cache;
    planner::SearchSpace s;
    s.global_batch = global_batch;
    int n = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        const MemoryReport a = memory_estimate(m, p, caps);
        const MemoryReport b = memory_estimate(m, p, caps, &cache);
        REQUIRE(a.stages.size() == b.stages.size());
        for (std::size_t i = 0; i < a.stages.size(); ++i)
            for (int t = 0; t < kTierCount; ++t) REQUIRE(a.stages[i].tier_bytes[t] == b.stages[i].tier_bytes[t]);
        REQUIRE(a.hbm_bytes == b.hbm_bytes);
        REQUIRE(a.cpu_bytes == b.cpu_bytes);
        REQUIRE(a.ssd_bytes == b.ssd_bytes);
        REQUIRE(a.fits() == b.fits());
        return ++n < 20000;
    });
    CHECK(n > 1000);
}

TEST_CASE("cached memory estimates equal uncached ones (dense)", "[planner][memory]") {
    ModelSpec m = test::gpt_shape("gpt", 24, 2048, 16, 50304, 2048);
    m.dropout = 0.1;
    ClusterSpec c;
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 4;
    c.gpus_per_node = 8;
    compare_space(m, c, 128);
}

TEST_CASE("cached memory estimates equal uncached ones (MoE)", "[planner][memory]") {
    ModelSpec m = strata::test::gpt_shape("moe", 8, 1024, 8, 32000, 4096);  // 8 heads of 128
    m.kv_heads = 2;
    m.ffn_hidden = 3584;
    m.ffn = FfnKind::swiglu;
    m.position = PositionKind::rope;
    m.norm = NormKind::rmsnorm;
    m.moe = strata::test::moe_spec(8, 2, 3584);
    m.moe->moe_every = 2;
    ClusterSpec c;
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 2;
    c.gpus_per_node = 8;
    compare_space(m, c, 64);
}

TEST_CASE("the cache tells apart plans that differ only in what a selective recompute keeps", "[planner][memory]") {
    ModelSpec m = test::gpt_shape("moe", 4, 1024, 8, 32000, 4096);
    m.ffn = FfnKind::swiglu;
    m.moe = test::moe_spec(8, 2, 1024);
    Capacities caps;
    caps.hbm_bytes = 80e9;
    caps.gpus_per_node = 8;
    PlanSpec p;
    p.global_batch = 8;
    p.precision = Precision::fp8;
    p.recompute = Recompute::selective;
    MemoryCache cache;
    const auto with = [&](unsigned modules, bool fp8_cache) {
        PlanSpec q = p;
        q.recompute_modules = modules;
        q.moe_act_fp8_cache = fp8_cache;
        const double cached = memory_estimate(m, q, caps, &cache).stages[0].activations_bytes;
        CHECK(cached == memory_estimate(m, q, caps).stages[0].activations_bytes);
        return cached;
    };
    const unsigned core = 1u << static_cast<unsigned>(RecomputeModule::core_attn);
    const unsigned act = core | (1u << static_cast<unsigned>(RecomputeModule::moe_act));
    const double a = with(core, false), b = with(act, false), c = with(act, true);
    CHECK(b < a);
    CHECK(c < b);
}
