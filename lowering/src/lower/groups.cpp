// Parallel groups: rank lists and where they sit (groups.hpp).
#include "strata/lowering/groups.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace strata::sim {

// Megatron's rank order: global = tp_i + tp*(cp_i + cp*(dp_i + dp*pp_i)). Group::dp
// is the dp x cp group (lower.hpp: gradients reduce over both); expert groups tile the stage's
// tp x cp x dp ranks as etp (fastest, stride 1) x ep (stride etp) x edp (stride etp*ep), which with
// the default etp = tp is ep inside dp x cp.
// A group is an arithmetic progression of ranks (start 0, stride s, size g); nodes hold G ranks.
namespace {

struct Progression {
    std::int64_t stride = 1;
    std::int64_t size = 1;
};

Progression progression(Group g, const PlanSpec& p) {
    const std::int64_t tp = p.tp, cp = p.cp, dp = p.dp, pp = p.pp, ep = std::max(1, p.ep);
    switch (g) {
        case Group::tp: return {1, tp};
        case Group::cp: return {tp, cp};
        case Group::dp: return {tp, dp * cp};  // lower's dp collectives span Megatron's dp x cp group
        case Group::ep: return {p.etp(), ep};
        case Group::edp: return {p.etp() * ep, p.edp()};
        case Group::etp: return {1, p.etp()};
        case Group::pp: return {tp * cp * dp, pp};
        case Group::embedding: return {tp * cp * dp * std::max<std::int64_t>(1, pp - 1), pp > 1 ? 2 : 1};
        case Group::world: return {1, tp * cp * dp * pp};
        case Group::count: break;
    }
    return {1, 1};
}

}  // namespace

std::vector<int> group_ranks(Group g, const PlanSpec& p, int rank) {
    const Progression pr = progression(g, p);
    if (g == Group::embedding) {
        // First stage and head stage, same coordinate inside the stage.
        const int per_stage = p.tp * p.cp * p.dp, stage = rank / per_stage, head = head_stage(p);
        if (p.pp <= 1 || (stage != 0 && stage != head) || head == 0) return {};
        const int inner = rank % per_stage;
        return {inner, inner + head * per_stage};
    }
    // The instance is the progression through `rank`: step back to its first member.
    const std::int64_t base = rank - ((rank / pr.stride) % pr.size) * pr.stride;
    std::vector<int> out(static_cast<std::size_t>(pr.size));
    for (std::int64_t i = 0; i < pr.size; ++i) out[static_cast<std::size_t>(i)] = static_cast<int>(base + i * pr.stride);
    return out;
}

int group_rank_of(Group g, const PlanSpec& p, int rank) {
    const std::vector<int> members = group_ranks(g, p, rank);
    for (std::size_t i = 0; i < members.size(); ++i)
        if (members[i] == rank) return static_cast<int>(i);
    return -1;
}

GroupLayout group_layout(Group g, const ClusterSpec& c, const PlanSpec& p) {
    const Progression pr = progression(g, p);
    const std::int64_t G = std::max(1, c.gpus_per_node);
    GroupLayout L;
    L.size = static_cast<int>(pr.size);
    if (pr.size <= 1) return L;
    if (pr.stride >= G) {
        // Consecutive members are >= G ranks apart: one per node.
        L.per_node = 1;
        L.nodes = L.size;
    } else if (G % pr.stride == 0) {
        L.per_node = static_cast<int>(std::min(pr.size, G / pr.stride));
        L.nodes = static_cast<int>((pr.size + L.per_node - 1) / L.per_node);
    } else {
        // Irregular node size: count members per node of the first group exactly.
        std::int64_t last_node = -1, run = 0, best = 0, nodes = 0;
        for (std::int64_t i = 0; i < pr.size; ++i) {
            const std::int64_t node = (i * pr.stride) / G;
            if (node != last_node) ++nodes, run = 0, last_node = node;
            best = std::max(best, ++run);
        }
        L.per_node = static_cast<int>(best);
        L.nodes = static_cast<int>(nodes);
    }
    const std::int64_t span_nodes = ((pr.size - 1) * pr.stride) / G + 1;  // first to last node
    L.crosses_leaf = span_nodes > std::max(1, c.nodes_per_leaf);
    return L;
}

int moe_token_node_limit(const MoeSpec& moe, const GroupLayout& ep) {
    const int N = ep.nodes, G = moe.router_groups, M = moe.router_group_topk;
    // Only a regular layout (q EP ranks on each of N nodes) puts E/N consecutive experts per node.
    if (N <= 1 || G <= 0 || M <= 0 || ep.per_node * N != ep.size) return 0;
    std::int64_t limit = 0;
    if (G % N == 0) limit = M;                                        // every group inside one node
    else if (N % G == 0) limit = static_cast<std::int64_t>(M) * (N / G);  // every group over N/G whole nodes
    return limit > 0 && limit < N ? static_cast<int>(limit) : 0;
}

double moe_dispatch_nodes(int nodes, int top_k, int node_limit) {
    if (nodes <= 0 || top_k <= 0) return 0.0;
    if (nodes == 1) return 1.0;
    const double N = nodes;
    const double uniform = N * (1.0 - std::pow(1.0 - 1.0 / N, top_k));
    // A limit is taken as reached: DeepSeek-V3 ranks the groups by their best experts' scores, so
    // each chosen node almost always receives one of the token's experts (docs/costs.md).
    return node_limit > 0 ? std::min(uniform, static_cast<double>(node_limit)) : uniform;
}

MoeSpread moe_dispatch_spread(const MoeSpec& moe, const GroupLayout& ep) {
    MoeSpread s;
    const int n = std::max(1, ep.size), N = std::max(1, ep.nodes), k = moe.top_k;
    if (n <= 1 || k <= 0) return s;
    const int q = std::max(1, n / N);  // EP ranks per node (a regular layout)
    if (moe.routing == MoeSpec::Routing::round_robin && moe.experts % n == 0) {
        // Token t takes experts (k t + j) mod E, j < k; EP rank r holds [r E/n, (r+1) E/n) and
        // node j its q consecutive ranks. The pattern repeats every E / gcd(k, E) tokens.
        const int E = moe.experts, per = E / n;
        const int period = E / std::gcd(k, E);
        double ranks = 0, nodes = 0;
        std::vector<int> seen_rank(static_cast<std::size_t>(n), -1), seen_node(static_cast<std::size_t>(N), -1);
        for (int t = 0; t < period; ++t)
            for (int j = 0; j < k; ++j) {
                const int r = static_cast<int>(((static_cast<std::int64_t>(k) * t + j) % E) / per);
                const int nd = std::min(N - 1, r / q);
                if (seen_rank[static_cast<std::size_t>(r)] != t) seen_rank[static_cast<std::size_t>(r)] = t, ++ranks;
                if (seen_node[static_cast<std::size_t>(nd)] != t) seen_node[static_cast<std::size_t>(nd)] = t, ++nodes;
            }
        s.ranks = ranks / period;
        s.nodes = nodes / period;
        return s;
    }
    // A learned router, taken as uniform: each GPU (node) misses all k copies with (1 - 1/n)^k.
    // Node-limited routing puts the k copies on M nodes, k / M to each, spread over its q GPUs.
    const int limit = moe_token_node_limit(moe, ep);
    s.nodes = moe_dispatch_nodes(N, k, limit);
    const double uniform_nodes = moe_dispatch_nodes(N, k, 0);
    if (limit > 0 && s.nodes < uniform_nodes)
        s.ranks = s.nodes * q * (1.0 - std::pow(1.0 - 1.0 / q, k / s.nodes));
    else
        s.ranks = n * (1.0 - std::pow(1.0 - 1.0 / n, k));
    return s;
}

}  // namespace strata::sim
