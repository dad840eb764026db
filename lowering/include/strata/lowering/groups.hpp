// Parallel groups as explicit rank lists. Megatron's rank order: global rank = tp_i + tp * (cp_i +
// cp * (dp_i + dp * pp_i)); every group is an arithmetic progression of ranks inside that order
// (Group::dp spans dp x cp, expert groups tile a stage's ranks as etp x ep x edp). The lowering
// stamps each collective with a Group; the runtime resolves it to the ranks here, and the cost
// model asks where those ranks sit (group_layout). One rule for all three.
#pragma once
#include <cstdint>
#include <vector>

#include "strata/lowering/program.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::sim {

/// The members of the instance of group `g` that global rank `rank` belongs to, in group-rank
/// order (position i = group rank i). Group::embedding pairs a first-stage rank with the
/// head-stage rank of the same tp/cp/dp coordinate (empty for a rank on neither, or pp = 1).
std::vector<int> group_ranks(Group g, const PlanSpec& p, int rank);

/// Where rank `rank` stands in its instance of `g` (0-based; -1 if it is not a member).
int group_rank_of(Group g, const PlanSpec& p, int rank);

/// How the GPUs of a collective's group are laid out: ranks per node and nodes spanned.
struct GroupLayout {
    int size = 1;            ///< ranks in the group
    int per_node = 1;        ///< ranks of the group inside one node
    int nodes = 1;           ///< nodes the group spans
    bool crosses_leaf = false;  ///< fat tree: spans more than one leaf switch
};

/// Where the ranks of a parallel group sit on the cluster's nodes (gpus_per_node ranks each).
GroupLayout group_layout(Group g, const ClusterSpec& c, const PlanSpec& p);

/// Node-limited routing: the most nodes one token's experts can lie on when the EP group has the
/// layout `ep` (Megatron places EP rank r's experts at [r E/ep, (r+1) E/ep) and the EP ranks of a
/// node are consecutive, so node j holds experts [j E/N, (j+1) E/N)). Groups inside nodes
/// (router_groups a multiple of N): router_group_topk nodes; nodes inside groups (N a multiple of
/// router_groups): router_group_topk x N / router_groups. 0 = no limit (no group-limited routing,
/// groups straddling node boundaries, a limit of N or more, or a group on one node).
int moe_token_node_limit(const MoeSpec& moe, const GroupLayout& ep);

/// Expected nodes a token's top_k experts lie on, spread uniformly over `nodes` nodes and capped
/// by a node limit (0 = none): N (1 - (1 - 1/N)^k), at most the limit (docs/costs.md).
double moe_dispatch_nodes(int nodes, int top_k, int node_limit);

/// Where one token's top_k copies go, on average: distinct EP ranks (GPUs) and nodes, under the
/// model's routing (MoeSpec::routing, the node limit) on the EP layout `ep`. DeepEP sends a token
/// once to each GPU and, across nodes, once to each node (docs/costs.md).
struct MoeSpread {
    double ranks = 1, nodes = 1;
};
MoeSpread moe_dispatch_spread(const MoeSpec& moe, const GroupLayout& ep);

}  // namespace strata::sim
