// A capacity sweep runs its sizes side by side (one search per thread): the answer must not
// depend on how many threads there are, and the points come out in option order, sizes ascending.
#include <catch2/catch.hpp>

#include "strata/hwdb/hwdb.hpp"
#include "strata/planner/capacity.hpp"
#include "support/gpt.hpp"

using namespace strata;
using namespace strata::sim;

namespace {

planner::ClusterOption option(const std::string& gpu, const std::string& node) {
    ClusterSpec c;
    c.name = gpu;
    c.gpu = gpu;
    c.node = node;
    c.nodes = 1;
    c.gpus_per_node = 8;
    auto db = hwdb::Database::open(hwdb::default_db_path());
    return {c, db.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu), {}};
}

}  // namespace

TEST_CASE("a capacity sweep gives the same points on one thread and on three", "[capacity]") {
    const ModelSpec m = test::gpt_shape("gpt", 8, 1024, 8, 32000, 1024);
    const std::vector<planner::ClusterOption> options{option("H100-SXM5-80GB", "DGX-H100"), option("A100-SXM4-80GB", "DGX-A100")};
    planner::CapacityOptions o;
    o.tokens = 1e10;
    o.deadline_s = 86400;
    o.max_gpus = 48;
    o.search = planner::capacity_sweep_search(64);
    int calls = 0;
    o.progress = [&](int done, int total) {
        ++calls;
        CHECK(done <= total);
    };
    o.search.threads = 1;
    const planner::CapacityResult one = planner::plan_capacity(m, options, o);
    CHECK(calls == static_cast<int>(one.points.size()));
    o.search.threads = 3;
    const planner::CapacityResult three = planner::plan_capacity(m, options, o);
    REQUIRE(one.points.size() == 10);  // 1, 2, 3, 4, 6 nodes of each GPU
    CHECK(planner::capacity_to_json(m, o, one) == planner::capacity_to_json(m, o, three));
    for (std::size_t i = 0; i < one.points.size(); ++i) {
        CHECK(one.points[i].cluster.gpu == options[i / 5].cluster.gpu);
        if (i % 5 > 0) CHECK(one.points[i].cluster.nodes > one.points[i - 1].cluster.nodes);
    }
}

TEST_CASE("the largest trainable model: offload only adds, a framework only takes away", "[capacity][slow]") {
    const ModelSpec base = test::gpt_shape("gpt", 24, 2048, 16, 32000, 2048);
    const planner::ClusterOption opt = option("H100-SXM5-80GB", "DGX-H100");
    using T = planner::OffloadTiers;
    const planner::MaxModelResult gpu = planner::max_trainable_model(base, opt, T::none, 64);
    REQUIRE(gpu.found);
    CHECK_FALSE(gpu.plan.sim.oom);
    CHECK(gpu.plan.plan.offload.optimizer.all_gpu());
    // The offload tiers widen the space: never a smaller answer.
    const planner::MaxModelResult cpu = planner::max_trainable_model(base, opt, T::cpu, 64);
    REQUIRE(cpu.found);
    CHECK(cpu.params >= gpu.params);
    // Megatron-LM of 2021 shards at most the optimizer (ZeRO-1): its plans are a subset.
    const planner::MaxModelResult old = planner::max_trainable_model(base, opt, T::none, 64, nullptr, false, 0, "megatron-lm-2021");
    REQUIRE(old.found);
    CHECK(old.plan.plan.framework == "megatron-lm-2021");
    CHECK(old.plan.plan.zero_stage <= 1);
    CHECK(old.params <= gpu.params);
}
