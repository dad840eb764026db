// The planner's memory cache must not change a single byte: compare cached and uncached
// estimates over a whole enumerated plan space (dense and MoE).
#include <catch2/catch.hpp>

#include "strata/planner/space.hpp"
#include "strata/sim/memory.hpp"
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
    ModelSpec m;
    m.name = "moe";
    m.layers = 8;
    m.hidden = 1024;
    m.heads = 8;
    m.kv_heads = 2;
    m.head_dim = 128;
    m.ffn_hidden = 3584;
    m.ffn = FfnKind::swiglu;
    m.vocab = 32000;
    m.seq_len = 4096;
    m.position = PositionKind::rope;
    m.norm = NormKind::rmsnorm;
    MoeSpec moe;
    moe.experts = 8;
    moe.top_k = 2;
    moe.expert_ffn_hidden = 3584;
    moe.moe_every = 2;
    m.moe = moe;
    ClusterSpec c;
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 2;
    c.gpus_per_node = 8;
    compare_space(m, c, 64);
}
