// The two helpers a capacity sweep is set up with (strata capacity and strata-gui share them):
// the template cluster of a GPU type and the reduced per-size search.
#include <catch2/catch.hpp>

#include "strata/planner/capacity.hpp"

using namespace strata;
using namespace strata::sim;

namespace {
ClusterSpec cluster(const std::string& name, const std::string& gpu, int nodes, int per_node) {
    ClusterSpec c;
    c.name = name;
    c.gpu = gpu;
    c.nodes = nodes;
    c.gpus_per_node = per_node;
    return c;
}
}  // namespace

TEST_CASE("capacity_template: the fewest-node cluster of that GPU with >= 8 GPUs a node", "[capacity]") {
    const std::vector<ClusterSpec> all{cluster("h100-x64", "H100", 64, 8), cluster("h100-single", "H100", 1, 1),
                                       cluster("h100-x2", "H100", 2, 8), cluster("h100-x2-b", "H100", 2, 8),
                                       cluster("a100-x16", "A100", 16, 8)};
    CHECK(planner::capacity_template(all, "H100").name == "h100-x2");  // 1-GPU node skipped; first of the ties
    CHECK(planner::capacity_template(all, "A100").name == "a100-x16");
    const ClusterSpec generic = planner::capacity_template(all, "B200");
    CHECK(generic.name == "B200");
    CHECK(generic.gpu == "B200");
    CHECK(generic.gpus_per_node == 8);
    CHECK(generic.nodes == 1);
}

TEST_CASE("capacity_sweep_search: reduced space and a three-plan shortlist", "[capacity]") {
    const planner::SearchOptions s = planner::capacity_sweep_search(1024);
    CHECK(s.space.global_batch == 1024);
    CHECK_FALSE(s.space.search_gpipe);
    CHECK_FALSE(s.space.search_offload);
    CHECK(s.space.zero_stages == std::vector<int>{1});
    CHECK(s.shortlist == 3);
    CHECK(s.max_simulated == 3);
    CHECK(s.shortlist_margin == 0.0);
}
