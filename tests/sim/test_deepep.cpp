// DeepEP's MoE dispatch (plan.moe_dispatcher "deepep"), which sends a token once to each GPU and,
// across nodes, once to each node its experts reach (deep_ep/buffer.py: get_dispatch_layout's
// is_token_in_rank; combine returns one reduced row per token and rank), with node-limited
// routing (model.moe.router_groups / router_group_topk) and NeMo AutoModel's round-robin fake
// gate (model.moe.routing): the expected GPUs and nodes per token, what the lowering marks on the
// EP all-to-alls, and the NIC / NVLink bytes the cost model derives from them. Numbers are derived
// by hand in the comments (docs/lowering.md, docs/costs.md).
#include <catch2/catch.hpp>

#include <cmath>

#include "cost_fixtures.hpp"
#include "strata/common/error.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/spec_io.hpp"
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
    int count = 0, marked = 0;
    double bytes = 0;
    int rank_ppm = -1, node_ppm = -1;
};

// The EP all-to-alls of layer 0 (forward dispatch and combine, backward mirror) of rank 0.
A2a layer0_a2a(const Program& prog) {
    A2a a;
    for (const Instr& in : prog.ranks[0].instrs) {
        if (in.kind != InstrKind::collective || in.group != Group::ep || in.coll != CollKind::all_to_all || in.layer != 0) continue;
        ++a.count;
        a.bytes = in.bytes;
        a.rank_ppm = in.a2a_rank_ppm;
        a.node_ppm = in.a2a_node_ppm;
        if (in.a2a_rank_ppm > 0) ++a.marked;
    }
    return a;
}

int ppm(double share) { return static_cast<int>(std::llround(share * 1e6)); }

// A DeepEP all-to-all whose token copies reach `rank_share` x k GPUs and `node_share` x k nodes
// (0, 0: the flat all-to-all).
Instr a2a(int n, double bytes, double rank_share, double node_share) {
    Instr in = collective(CollKind::all_to_all, Group::ep, n, bytes);
    in.a2a_rank_ppm = ppm(rank_share);
    in.a2a_node_ppm = ppm(node_share);
    return in;
}

MoeSpec experts(int e, int k) {
    MoeSpec m;
    m.experts = e;
    m.top_k = k;
    return m;
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

TEST_CASE("GPUs and nodes a token reaches: uniform, node-limited and round-robin routing", "[lower][moe][deepep]") {
    // Uniform over one node of 8 (Qwen3-30B-A3B's 128 experts, top-8, EP 8): each GPU is missed by
    // all 8 copies with (7/8)^8, so 8 (1 - (7/8)^8) = 5.25113 GPUs and one node.
    MoeSpread u = moe_dispatch_spread(experts(128, 8), GroupLayout{8, 8, 1});
    CHECK(u.ranks == Approx(8.0 * (1.0 - 5764801.0 / 16777216.0)));
    CHECK(u.nodes == Approx(1.0));
    // DeepSeek-V3 (256 experts in 8 groups, 4 per token) on EP 64 over 8 nodes of 8: 4 nodes, each
    // taking 8 / 4 = 2 copies over its 8 GPUs: 4 x 8 (1 - (7/8)^2) = 32 x 15/64 = 7.5 GPUs.
    MoeSpec v3 = experts(256, 8);
    v3.router_groups = 8;
    v3.router_group_topk = 4;
    MoeSpread d = moe_dispatch_spread(v3, GroupLayout{64, 8, 8});
    CHECK(d.nodes == Approx(4.0));
    CHECK(d.ranks == Approx(7.5));
    // Without the limit: 64 (1 - (63/64)^8) GPUs, 8 (1 - (7/8)^8) nodes.
    v3.router_groups = v3.router_group_topk = 0;
    d = moe_dispatch_spread(v3, GroupLayout{64, 8, 8});
    CHECK(d.ranks == Approx(64.0 * (1.0 - std::pow(63.0 / 64.0, 8))));
    CHECK(d.nodes == Approx(8.0 * (1.0 - 5764801.0 / 16777216.0)));
    // AutoModel's FakeBalancedGate: token t takes experts 8t .. 8t+7 mod 128; with 16 experts per
    // GPU (8t mod 16 is 0 or 8) all eight sit on one GPU.
    MoeSpec rr = experts(128, 8);
    rr.routing = MoeSpec::Routing::round_robin;
    CHECK(moe_dispatch_spread(rr, GroupLayout{8, 8, 1}).ranks == Approx(1.0));
    CHECK(moe_dispatch_spread(rr, GroupLayout{64, 8, 8}).ranks == Approx(4.0));  // 2 experts a GPU: 4 GPUs, one node
    CHECK(moe_dispatch_spread(rr, GroupLayout{64, 8, 8}).nodes == Approx(1.0));
    // 12 experts, top-8, EP 4 over 2 nodes of 2 (3 experts a GPU): the pattern repeats every 3
    // tokens: experts 0-7 (GPUs 0,1,2), 8-11 and 0-3 (GPUs 2,3,0,1), 4-11 (GPUs 1,2,3): 10/3 GPUs,
    // both nodes every time.
    MoeSpec odd = experts(12, 8);
    odd.routing = MoeSpec::Routing::round_robin;
    const MoeSpread o = moe_dispatch_spread(odd, GroupLayout{4, 2, 2});
    CHECK(o.ranks == Approx(10.0 / 3));
    CHECK(o.nodes == Approx(2.0));
    // No EP: one GPU.
    CHECK(moe_dispatch_spread(experts(8, 2), GroupLayout{1, 1, 1}).ranks == 1.0);
}

TEST_CASE("model.moe.routing: read, written back, and refused where it contradicts the model", "[spec][moe][deepep]") {
    const std::string base = R"({"name": "m", "layers": 2, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 32, "moe": {"experts": 8, "top_k": 2)";
    const ModelSpec m = model_from_json_text(base + R"(, "routing": "round_robin"}})", "m.json");
    CHECK(m.moe->routing == MoeSpec::Routing::round_robin);
    CHECK(model_from_json_text(to_json_text(m), "m2.json").moe->routing == MoeSpec::Routing::round_robin);
    CHECK(model_from_json_text(base + "}}", "m.json").moe->routing == MoeSpec::Routing::learned);
    using Catch::Matchers::Contains;
    CHECK_THROWS_WITH(model_from_json_text(base + R"(, "routing": "random"}})", "m.json"), Contains("moe.routing") && Contains("round_robin"));
    CHECK_THROWS_WITH(model_from_json_text(base + R"(, "routing": "round_robin", "load_skew": 0.5}})", "m.json"), Contains("load_skew"));
}

TEST_CASE("lowering marks the EP all-to-alls with the GPU and node shares DeepEP sends", "[lower][moe][deepep]") {
    // 2 groups of 4 experts, one per token; ep 8 over 2 nodes of 4 GPUs: a group per node, so a
    // token reaches 1 node, and its 4 copies spread over that node's 4 GPUs: 4 (1 - (3/4)^4) =
    // 2.734375 GPUs, 2.734375 / 4 = 683,594 millionths of the copies; nodes 1/4.
    const ModelSpec m = moe_model(2, 1);
    const ClusterSpec two = nodes_of(2, 4);
    // Every all-to-all moves a rank's 32 tokens x top-4 x h 64 x 2 bytes = 16384 bytes, whichever
    // dispatcher: the dedup is the cost model's.
    const A2a deep = layer0_a2a(lower(m, two, ep_plan(8, 8, MoeDispatcher::deepep)));
    CHECK(deep.count == 4);  // forward dispatch and combine, their backward mirror
    CHECK(deep.marked == 4);
    CHECK(deep.bytes == Approx(32.0 * 4 * 64 * 2));
    CHECK(deep.rank_ppm == 683594);
    CHECK(deep.node_ppm == 250000);
    // Unrestricted routing: 8 (1 - (7/8)^4) = 3.3105 GPUs and 2 (1 - 1/16) = 1.875 nodes of 4 copies.
    const A2a free = layer0_a2a(lower(moe_model(0, 0), two, ep_plan(8, 8, MoeDispatcher::deepep)));
    CHECK(free.rank_ppm == ppm(8.0 * (1.0 - 2401.0 / 4096.0) / 4));
    CHECK(free.node_ppm == ppm(1.875 / 4));
    // Megatron's flat all-to-all: the same bytes, nothing marked.
    const A2a flat = layer0_a2a(lower(m, two, ep_plan(8, 8, MoeDispatcher::alltoall)));
    CHECK(flat.count == 4);
    CHECK(flat.marked == 0);
    CHECK(flat.bytes == Approx(deep.bytes));
    // ep 4 inside one node (EP carved from dp 8 with stride 1: ranks 0-3): still DeepEP's, a copy
    // per GPU: 4 (1 - (3/4)^4) = 2.734375 of 4, one node.
    const A2a inside = layer0_a2a(lower(m, two, ep_plan(8, 4, MoeDispatcher::deepep)));
    CHECK(inside.count == 4);
    CHECK(inside.marked == 4);
    CHECK(inside.rank_ppm == 683594);
    CHECK(inside.node_ppm == 250000);
    // Full mode marks every rank's all-to-alls alike (the matched collectives stay one kind).
    LowerOptions full;
    full.full_mode = true;
    const Program fp = lower(m, two, ep_plan(8, 8, MoeDispatcher::deepep), full);
    int marked = 0, total = 0;
    for (const RankProgram& rp : fp.ranks)
        for (const Instr& in : rp.instrs)
            if (in.kind == InstrKind::collective && in.coll == CollKind::all_to_all)
                ++total, marked += in.a2a_rank_ppm == 683594 && in.a2a_node_ppm == 250000;
    CHECK(total == 8 * 2 * 4);  // 8 ranks x 2 layers x 4
    CHECK(marked == total);
}

TEST_CASE("DeepEP across nodes: one RDMA copy per node reached, one NVLink copy per GPU, both stages at once", "[cost][moe][deepep]") {
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
    // all-to-all's). NVLink: a token goes once to each of the 16 (1 - (15/16)^8) = 6.452 GPUs it
    // reaches, 7/8 of them off the GPU that holds it: 7/8 x S x 6.452 / 8.
    const double gpus = 16.0 * (1.0 - std::pow(15.0 / 16.0, 8));
    const Demand uni = transfer_demand(a2a(16, S, gpus / 8, 1.9921875 / 8), ctx);
    CHECK(busy(uni, LinkClass::nic) == Approx(1.9921875 / 2 * S / 8 / nic).epsilon(1e-5));
    CHECK(busy(uni, LinkClass::nvlink) == Approx(0.875 * S * gpus / 8 / nvl).epsilon(1e-5));
    CHECK(uni.latency_ns == 70000);
    // Node-limited to 1 node: D = 1, NIC = 1/2 x 125 MB = 62.5 MB = 1.33 ms; its 8 copies reach
    // 8 (1 - (7/8)^8) = 5.25 GPUs: NVLink 7/8 x 656 MB = 574 MB = 1.56 ms. The pipelined stages
    // take the longer one, not the sum.
    const double lim_gpus = 8.0 * (1.0 - 5764801.0 / 16777216.0);
    const Demand lim = transfer_demand(a2a(16, S, lim_gpus / 8, 1.0 / 8), ctx);
    CHECK(busy(lim, LinkClass::nic) == Approx(62.5e6 / nic));
    CHECK(lim.alone_ns() == Approx(70000 + 0.875 * S * lim_gpus / 8 / nvl * 1e9).margin(5));
    CHECK(flat.alone_ns() == Approx(70000 + 0.5e9 / nic * 1e9).margin(2));

    // On a fat tree the flat all-to-all has no PXN hop ((q-1)/n S = 0.4375 GB on NVLink); DeepEP
    // still forwards over NVLink, once per GPU reached.
    ClusterSpec ft = c;
    ft.topology = NetTopology::fat_tree;
    CostContext ctx_ft{&hw, &ft, &p};
    CHECK(busy(transfer_demand(a2a(16, S, 0, 0), ctx_ft), LinkClass::nvlink) == Approx(0.4375e9 / nvl));
    CHECK(busy(transfer_demand(a2a(16, S, gpus / 8, 1.9921875 / 8), ctx_ft), LinkClass::nvlink) == Approx(0.875 * S * gpus / 8 / nvl).epsilon(1e-5));

    // A measured inter-node all-to-all fit: busbw 40 GB/s on S (n-1)/n; DeepEP sends 1/8 of it
    // with the node limit (D / k = 1/8).
    auto fitted = hw;
    fitted.collectives.push_back({"all_to_all", "inter", 16, 30000, 40e9, strata::hwdb::Provenance::fitted});
    CostContext ctx_fit{&fitted, &c, &p};
    CHECK(busy(transfer_demand(a2a(16, S, 0, 0), ctx_fit), LinkClass::nic) == Approx(S * 15 / 16 / 40e9));
    CHECK(busy(transfer_demand(a2a(16, S, lim_gpus / 8, 1.0 / 8), ctx_fit), LinkClass::nic) == Approx(S * 15 / 16 / 40e9 / 8));
}

TEST_CASE("DeepEP inside one node: a copy per GPU reached, not per expert", "[cost][moe][deepep]") {
    const auto hw = h100_view();
    const ClusterSpec c = dgx_cluster(1);
    PlanSpec p;
    p.dp = 8;
    p.ep = 8;
    CostContext ctx{&hw, &c, &p};
    // Flat: NVLink S (n-1)/n = 0.875 GB, no NIC. DeepEP with uniform top-8 over 8 GPUs: 5.25 of
    // the 8 copies, 0.875 x 0.6564 GB; with AutoModel's round-robin gate one GPU: 1/8 of it.
    const Demand flat = transfer_demand(a2a(8, 1e9, 0, 0), ctx);
    CHECK(busy(flat, LinkClass::nvlink) == Approx(0.875e9 / 369e9));
    const double gpus = 8.0 * (1.0 - 5764801.0 / 16777216.0);
    const Demand deep = transfer_demand(a2a(8, 1e9, gpus / 8, 1.0 / 8), ctx);
    CHECK(busy(deep, LinkClass::nvlink) == Approx(0.875e9 * gpus / 8 / 369e9).epsilon(1e-5));
    CHECK(busy(deep, LinkClass::nic) == 0.0);
    const Demand rr = transfer_demand(a2a(8, 1e9, 1.0 / 8, 1.0 / 8), ctx);
    CHECK(busy(rr, LinkClass::nvlink) == Approx(0.875e9 / 8 / 369e9));
    CHECK(rr.alone_ns() < deep.alone_ns());
    CHECK(deep.alone_ns() < flat.alone_ns());
}

TEST_CASE("round-robin gate: no router weights, no router GEMMs, a routing kernel with no inputs", "[lowering][moe]") {
    // AutoModel's FakeBalancedGate has no parameters and computes no scores: against the learned
    // router, L x h x E fewer parameters (2 x 64 x 8 = 1,024), 2 s h E fewer forward FLOPs a layer
    // and sequence (2 x 32 x 64 x 8 = 32,768; with the 5 a logit of the softmax, 5 s E = 1,280
    // fewer other FLOPs), and in the Program no router GEMM, no router backward, and the forward's
    // routing instruction reading nothing.
    ModelSpec learned = moe_model(0, 0), rr = learned;
    rr.moe->routing = MoeSpec::Routing::round_robin;
    CHECK(param_counts(learned).total - param_counts(rr).total == 1024);
    const ForwardFlops a = forward_flops(learned, 1), b = forward_flops(rr, 1);
    CHECK(a.router == 2 * 32768.0);
    CHECK(b.router == 0.0);
    CHECK(a.other - b.other == 2 * 1280.0);
    CHECK(a.layers_matmul - b.layers_matmul == a.router);  // the layers' matmuls count the router's GEMM
    LowerOptions o;
    o.full_mode = true;
    o.dataflow = true;
    auto count = [&](const ModelSpec& m, int& gemms, int& routers, int& routers_without_inputs) {
        const Program prog = lower(m, nodes_of(1, 1), ep_plan(1, 1, MoeDispatcher::alltoall), o);
        const RankProgram& r = prog.ranks[0];
        gemms = routers = routers_without_inputs = 0;
        for (std::size_t i = 0; i < r.instrs.size(); ++i) {
            const std::string& name = prog.names[static_cast<std::size_t>(r.instrs[i].name)];
            gemms += name.find("router") != std::string::npos && r.instrs[i].op == Op::gemm;
            if (r.instrs[i].op != Op::router) continue;
            ++routers;
            routers_without_inputs += r.operands[i].n_in == 0;
        }
    };
    int g = 0, n = 0, empty = 0;
    count(learned, g, n, empty);
    CHECK(g == 2 * 3);  // per layer: forward, dgrad, wgrad
    CHECK(n == 2 * 2);  // per layer: top-k and softmax, its backward
    CHECK(empty == 0);
    count(rr, g, n, empty);
    CHECK(g == 0);
    CHECK(n == 2);
    CHECK(empty == 2);
}
