// Parallel groups as rank lists, against Megatron's rank order worked out by hand:
// rank = t + tp (c + cp (d + dp s)).
#include <catch2/catch.hpp>

#include "strata/lowering/groups.hpp"

using namespace strata::sim;

TEST_CASE("group rank lists follow Megatron's order", "[groups]") {
    PlanSpec p;
    p.tp = 2;
    p.cp = 2;
    p.dp = 2;
    p.pp = 2;  // 16 ranks, 8 per stage
    // Rank 13 = t 1, c 0, d 1, s 1: 1 + 2 (0 + 2 (1 + 2)) = 13.
    CHECK(group_ranks(Group::tp, p, 13) == std::vector<int>{12, 13});
    CHECK(group_ranks(Group::cp, p, 13) == std::vector<int>{13, 15});
    CHECK(group_ranks(Group::dp, p, 13) == std::vector<int>{9, 11, 13, 15});  // dp x cp, stride tp
    CHECK(group_ranks(Group::pp, p, 13) == std::vector<int>{5, 13});
    CHECK(group_ranks(Group::embedding, p, 13) == std::vector<int>{5, 13});
    CHECK(group_ranks(Group::world, p, 13).size() == 16);
    CHECK(group_rank_of(Group::dp, p, 13) == 2);
    CHECK(group_rank_of(Group::pp, p, 13) == 1);
}

TEST_CASE("expert groups tile a stage as etp x ep x edp", "[groups]") {
    PlanSpec p;
    p.tp = 2;
    p.dp = 4;
    p.ep = 2;
    p.expert_tp = 1;  // etp 1: ep stride 1, edp stride 2, edp = 2*4/2 = 4
    CHECK(group_ranks(Group::ep, p, 5) == std::vector<int>{4, 5});
    CHECK(group_ranks(Group::edp, p, 5) == std::vector<int>{1, 3, 5, 7});
    CHECK(group_ranks(Group::etp, p, 5) == std::vector<int>{5});
}

TEST_CASE("the embedding group needs a first and a head stage", "[groups]") {
    PlanSpec p;
    p.pp = 4;
    CHECK(group_ranks(Group::embedding, p, 0) == std::vector<int>{0, 3});
    CHECK(group_ranks(Group::embedding, p, 2).empty());
    p.pp = 1;
    CHECK(group_ranks(Group::embedding, p, 0).empty());
}
