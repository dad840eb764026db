// DeepEP's hierarchical MoE dispatch (plan.moe_dispatcher "deepep") with node-limited routing
// (model.moe.router_groups / router_group_topk): the expected nodes per token, what the lowering
// marks on the EP all-to-alls, and the NIC / NVLink bytes the cost model derives from them.
// Numbers are derived by hand in the comments (docs/lowering.md, docs/costs.md).
#include <catch2/catch.hpp>

#include <cmath>

#include "cost_fixtures.hpp"
#include "strata/lowering/lower.hpp"
#include "support/gpt.hpp"

using namespace strata::sim;
using namespace strata::sim::test;

namespace {

// L = 2, h = 64, 4 heads, s = 32; 8 experts of width 128, top-4, every layer MoE.
ModelSpec moe_model(int groups, int group_topk) {
    ModelSpec m = strata::test::gpt_shape("tiny-moe", 2, 64, 4, 128, 32);
    m.max_position = 32;
    m.moe = strata::test::moe_spec(8, 4, 128);
    m.moe->router_groups = groups;
    m.moe->router_group_topk = group_topk;
    return m;
}

ClusterSpec nodes_of(int nodes, int gpus_per_node) {
    ClusterSpec c = dgx_cluster(nodes);
    c.gpus_per_node = gpus_per_node;
    return c;
}

PlanSpec ep_plan(int dp, int ep, MoeDispatcher d) {
    PlanSpec p;
    p.dp = dp;
    p.ep = ep;
    p.micro_batch = 1;
    p.global_batch = dp;
    p.moe_dispatcher = d;
    return p;
}

struct A2a {
    int count = 0, hierarchical = 0;
    double bytes = 0;
    int copies = -1, node_limit = -1;
};

// The EP all-to-alls of layer 0 (forward dispatch and combine, backward mirror) of rank 0.
A2a layer0_a2a(const Program& prog) {
    A2a a;
    for (const Instr& in : prog.ranks[0].instrs) {
        if (in.kind != InstrKind::collective || in.group != Group::ep || in.coll != CollKind::all_to_all || in.layer != 0) continue;
        ++a.count;
        a.bytes = in.bytes;
        a.copies = in.a2a_copies;
        a.node_limit = in.a2a_node_limit;
        if (in.a2a_copies > 0) ++a.hierarchical;
    }
    return a;
}

Instr a2a(int n, double bytes, int copies, int node_limit) {
    Instr in = collective(CollKind::all_to_all, Group::ep, n, bytes);
    in.a2a_copies = copies;
    in.a2a_node_limit = node_limit;
    return in;
}

}  // namespace

TEST_CASE("expected nodes per token: uniform routing and the node limit", "[cost][moe][deepep]") {
    // N = 8 nodes, top-8 uniform: each node is missed by all 8 copies with (7/8)^8 = 0.343609,
    // so D = 8 (1 - 0.343609) = 5.25113 nodes; node-limited to 4 nodes (DeepSeek-V3): 4.
    CHECK(moe_dispatch_nodes(8, 8, 0) == Approx(8.0 * (1.0 - 5764801.0 / 16777216.0)));
    CHECK(moe_dispatch_nodes(8, 8, 0) == Approx(5.25113).epsilon(1e-5));
    CHECK(moe_dispatch_nodes(8, 8, 4) == Approx(4.0));
    // A limit above the uniform expectation does not raise it: N 8, top-2 gives 8 (1 - 49/64) = 1.875.
    CHECK(moe_dispatch_nodes(8, 2, 4) == Approx(1.875));
    CHECK(moe_dispatch_nodes(2, 8, 0) == Approx(2.0 * 255.0 / 256.0));  // 1.9921875
    CHECK(moe_dispatch_nodes(1, 8, 0) == Approx(1.0));

    // DeepSeek-V3: 256 experts in 8 groups, 4 per token. EP 64 over 8 nodes of 8: a group per
    // node, so a token reaches at most 4 nodes.
    MoeSpec v3;
    v3.experts = 256;
    v3.top_k = 8;
    v3.router_groups = 8;
    v3.router_group_topk = 4;
    CHECK(moe_token_node_limit(v3, GroupLayout{64, 8, 8}) == 4);
    // EP 128 over 16 nodes: each group spans 2 nodes, 4 groups reach at most 8 of 16.
    CHECK(moe_token_node_limit(v3, GroupLayout{128, 8, 16}) == 8);
    // EP 32 over 4 nodes: 2 groups per node, the limit of 4 nodes is no limit.
    CHECK(moe_token_node_limit(v3, GroupLayout{32, 8, 4}) == 0);
    // Groups straddling nodes (3 nodes, 8 groups) or one node: no limit.
    CHECK(moe_token_node_limit(v3, GroupLayout{24, 8, 3}) == 0);
    CHECK(moe_token_node_limit(v3, GroupLayout{8, 8, 1}) == 0);
    v3.router_groups = 0;
    v3.router_group_topk = 0;
    CHECK(moe_token_node_limit(v3, GroupLayout{64, 8, 8}) == 0);
}

TEST_CASE("lowering marks the EP all-to-alls as DeepEP's only when the EP group spans nodes", "[lower][moe][deepep]") {
    // 2 groups of 4 experts, one per token; ep 8 over 2 nodes of 4 GPUs: a group per node, so a
    // token reaches 1 node (limit 1 < 2).
    const ModelSpec m = moe_model(2, 1);
    const ClusterSpec two = nodes_of(2, 4);
    // Every all-to-all moves a rank's 32 tokens x top-4 x h 64 x 2 bytes = 16384 bytes, whichever
    // dispatcher: the dedup is the cost model's (it depends on where the ranks sit).
    const A2a deep = layer0_a2a(lower(m, two, ep_plan(8, 8, MoeDispatcher::deepep)));
    CHECK(deep.count == 4);  // forward dispatch and combine, their backward mirror
    CHECK(deep.hierarchical == 4);
    CHECK(deep.bytes == Approx(32.0 * 4 * 64 * 2));
    CHECK(deep.copies == 4);
    CHECK(deep.node_limit == 1);
    // Unrestricted routing: copies marked, no node limit.
    CHECK(layer0_a2a(lower(moe_model(0, 0), two, ep_plan(8, 8, MoeDispatcher::deepep))).node_limit == 0);
    // Megatron's flat all-to-all: the same bytes, nothing marked.
    const A2a flat = layer0_a2a(lower(m, two, ep_plan(8, 8, MoeDispatcher::alltoall)));
    CHECK(flat.count == 4);
    CHECK(flat.hierarchical == 0);
    CHECK(flat.bytes == Approx(deep.bytes));
    // ep 4 inside one node of the same cluster (EP carved from dp 8 with stride 1: ranks 0-3):
    // DeepEP is the flat all-to-all there.
    const A2a inside = layer0_a2a(lower(m, two, ep_plan(8, 4, MoeDispatcher::deepep)));
    CHECK(inside.count == 4);
    CHECK(inside.hierarchical == 0);
    CHECK(inside.bytes == Approx(32.0 * 4 * 64 * 2));
    // Full mode marks every rank's all-to-alls alike (the matched collectives stay one kind).
    LowerOptions full;
    full.full_mode = true;
    const Program fp = lower(m, two, ep_plan(8, 8, MoeDispatcher::deepep), full);
    int marked = 0, total = 0;
    for (const RankProgram& rp : fp.ranks)
        for (const Instr& in : rp.instrs)
            if (in.kind == InstrKind::collective && in.coll == CollKind::all_to_all) ++total, marked += in.a2a_copies == 4 && in.a2a_node_limit == 1;
    CHECK(total == 8 * 2 * 4);  // 8 ranks x 2 layers x 4
    CHECK(marked == total);
}

TEST_CASE("DeepEP across nodes: one RDMA copy per node reached, NVLink fan-out, both stages at once", "[cost][moe][deepep]") {
    const auto hw = h100_view();
    const ClusterSpec c = dgx_cluster(2);  // 2 nodes x 8 GPUs, 8 NICs each
    PlanSpec p;
    p.dp = 16;
    p.ep = 16;  // q = 8 per node, N = 2
    CostContext ctx{&hw, &c, &p};
    const double S = 1e9, nic = 47e9, nvl = 369e9;
    // Latency (all three alike): 15 ring steps, 1 across nodes; Simple 8.4 + 14 x 3.4 + 14 = 70 us.
    // Flat all-to-all (rail-optimised): NIC (n-q)/n S = 0.5 GB; NVLink (q-1)/n S + PXN 0.5 GB x 7/8 = 0.875 GB.
    const Demand flat = transfer_demand(a2a(16, S, 0, 0), ctx);
    CHECK(busy(flat, LinkClass::nic) == Approx(0.5e9 / nic));
    CHECK(busy(flat, LinkClass::nvlink) == Approx(0.875e9 / nvl));
    CHECK(flat.latency_ns == 70000);
    // DeepEP, top-8 uniform over 2 nodes: D = 2 (1 - 1/256) = 1.9921875 nodes, of which half
    // remote; a copy is S / 8, so NIC = 0.9960938 x 125 MB = 124.51 MB (a quarter of the flat
    // all-to-all's). NVLink: each of the 8 copies is forwarded on its node, 7/8 S.
    const Demand uni = transfer_demand(a2a(16, S, 8, 0), ctx);
    CHECK(busy(uni, LinkClass::nic) == Approx(1.9921875 / 2 * S / 8 / nic));
    CHECK(busy(uni, LinkClass::nvlink) == Approx(0.875e9 / nvl));
    CHECK(uni.latency_ns == 70000);
    // Node-limited to 1 node: D = 1, NIC = 1/2 x 125 MB = 62.5 MB = 1.33 ms, now below NVLink's
    // 0.875 GB / 369 GB/s = 2.37 ms: the pipelined stages take the longer one, not the sum.
    const Demand lim = transfer_demand(a2a(16, S, 8, 1), ctx);
    CHECK(busy(lim, LinkClass::nic) == Approx(62.5e6 / nic));
    CHECK(lim.alone_ns() == Approx(70000 + 0.875e9 / nvl * 1e9).margin(2));
    CHECK(flat.alone_ns() == Approx(70000 + 0.5e9 / nic * 1e9).margin(2));

    // On a fat tree the flat all-to-all has no PXN hop ((q-1)/n S = 0.4375 GB on NVLink); DeepEP
    // still forwards over NVLink.
    ClusterSpec ft = c;
    ft.topology = NetTopology::fat_tree;
    CostContext ctx_ft{&hw, &ft, &p};
    CHECK(busy(transfer_demand(a2a(16, S, 0, 0), ctx_ft), LinkClass::nvlink) == Approx(0.4375e9 / nvl));
    CHECK(busy(transfer_demand(a2a(16, S, 8, 0), ctx_ft), LinkClass::nvlink) == Approx(0.875e9 / nvl));

    // A measured inter-node all-to-all fit: busbw 40 GB/s on S (n-1)/n; DeepEP sends 1/8 of it
    // with the node limit (D / k = 1/8).
    auto fitted = hw;
    fitted.collectives.push_back({"all_to_all", "inter", 16, 30000, 40e9, strata::hwdb::Provenance::fitted});
    CostContext ctx_fit{&fitted, &c, &p};
    CHECK(busy(transfer_demand(a2a(16, S, 0, 0), ctx_fit), LinkClass::nic) == Approx(S * 15 / 16 / 40e9));
    CHECK(busy(transfer_demand(a2a(16, S, 8, 1), ctx_fit), LinkClass::nic) == Approx(S * 15 / 16 / 40e9 / 8));
}

TEST_CASE("DeepEP inside one node is the flat all-to-all", "[cost][moe][deepep]") {
    const auto hw = h100_view();
    const ClusterSpec c = dgx_cluster(1);
    PlanSpec p;
    p.dp = 8;
    p.ep = 8;
    CostContext ctx{&hw, &c, &p};
    // One node: NVLink S (n-1)/n = 0.875 GB either way, no NIC.
    const Demand flat = transfer_demand(a2a(8, 1e9, 0, 0), ctx);
    const Demand deep = transfer_demand(a2a(8, 1e9, 8, 0), ctx);
    CHECK(busy(deep, LinkClass::nvlink) == Approx(0.875e9 / 369e9));
    CHECK(busy(deep, LinkClass::nic) == 0.0);
    CHECK(deep.alone_ns() == flat.alone_ns());
}
