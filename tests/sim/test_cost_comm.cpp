// Data-movement cost models against hand derivations: nccl-tests' bus factors, NCCL's latency
// constants, hierarchical all-reduce across nodes, fits replacing datasheet figures, group layouts
// in Megatron's rank order, p2p, host/SSD copies and the CPU Adam step.
#include <catch2/catch.hpp>

#include "cost_fixtures.hpp"

using namespace strata::sim;
using namespace strata::sim::test;
using strata::hwdb::Provenance;

TEST_CASE("bus factors equal nccl-tests' definitions", "[cost][comm]") {
    // nccl-tests src/*.cu *GetBw: all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n.
    CHECK(bus_factor(CollKind::all_reduce, 8) == Approx(2.0 * 7 / 8));
    CHECK(bus_factor(CollKind::all_gather, 8) == Approx(7.0 / 8));
    CHECK(bus_factor(CollKind::reduce_scatter, 4) == Approx(3.0 / 4));
    CHECK(bus_factor(CollKind::all_to_all, 16) == Approx(15.0 / 16));
    CHECK(bus_factor(CollKind::broadcast, 8) == Approx(1.0));
    CHECK(bus_factor(CollKind::all_reduce, 1) == 0.0);
}

TEST_CASE("group layout follows Megatron's rank order", "[cost][layout]") {
    ClusterSpec c = dgx_cluster(8);
    PlanSpec p;
    p.tp = 8, p.dp = 4, p.pp = 2;
    auto tp = group_layout(Group::tp, c, p);
    CHECK(tp.size == 8);
    CHECK(tp.per_node == 8);
    CHECK(tp.nodes == 1);
    auto dp = group_layout(Group::dp, c, p);  // stride 8: one per node
    CHECK(dp.size == 4);
    CHECK(dp.per_node == 1);
    CHECK(dp.nodes == 4);
    auto pp = group_layout(Group::pp, c, p);  // stride 32
    CHECK(pp.per_node == 1);
    CHECK(pp.nodes == 2);
    p = PlanSpec{};
    p.tp = 2, p.dp = 8, p.pp = 2;
    auto dp2 = group_layout(Group::dp, c, p);  // stride 2 in nodes of 8: 4 per node over 2 nodes
    CHECK(dp2.per_node == 4);
    CHECK(dp2.nodes == 2);
    c.nodes_per_leaf = 1;
    CHECK(group_layout(Group::dp, c, p).crosses_leaf);
    CHECK_FALSE(group_layout(Group::tp, c, p).crosses_leaf);
    p = PlanSpec{};
    p.tp = 2, p.cp = 2, p.dp = 2;
    auto dpcp = group_layout(Group::dp, c, p);  // lower's dp group is dp x cp: stride tp = 2, size 4
    CHECK(dpcp.size == 4);
    CHECK(dpcp.per_node == 4);
    CHECK(group_layout(Group::cp, c, p).size == 2);
    p = PlanSpec{};
    p.tp = 2, p.dp = 4, p.ep = 2;
    auto ep = group_layout(Group::ep, c, p);  // stride tp = 2, size 2
    CHECK(ep.size == 2);
    CHECK(ep.per_node == 2);
    auto edp = group_layout(Group::edp, c, p);  // dp*cp/ep = 2, stride tp*ep = 4
    CHECK(edp.size == 2);
    CHECK(edp.per_node == 2);
}

TEST_CASE("intra-node all-reduce: alpha + S 2(n-1)/n / busbw with NCCL's Simple constants", "[cost][comm]") {
    const auto hw = h100_view();
    const ClusterSpec c = dgx_cluster(1);
    PlanSpec p;
    p.tp = 8;
    CostContext ctx{&hw, &c, &p};
    const Demand d = transfer_demand(collective(CollKind::all_reduce, Group::tp, 8, 1e9), ctx);
    // busbw = 450 GB/s x 0.82 = 369 GB/s; 1 GB: 2*7/8*1e9/369e9 s = 4.7425 ms. Ring all-reduce
    // 2(n-1) = 14 NVLink hops; Simple: 8.4 + 14 x 3.4 = 56 us (LL would be 15 us but at half bandwidth).
    const double busy_expect = 2.0 * 7 / 8 * 1e9 / 369e9;
    CHECK(busy(d, LinkClass::nvlink) == Approx(busy_expect).epsilon(1e-9));
    CHECK(busy(d, LinkClass::nic) == 0.0);
    CHECK(d.latency_ns == 56000);
    CHECK(d.alone_ns() == Approx(56000 + busy_expect * 1e9).margin(2));
    CHECK(d.provenance == Provenance::datasheet);
    // A tiny all-reduce picks LL: 6.6 + 14 x 0.6 = 15 us.
    const Demand small = transfer_demand(collective(CollKind::all_reduce, Group::tp, 8, 1024), ctx);
    CHECK(small.latency_ns == 15000);
}

TEST_CASE("a collective fit replaces the datasheet figure and sets provenance", "[cost][comm]") {
    auto hw = h100_view();
    hw.collectives.push_back({"all_reduce", "intra", 8, 20000, 400e9, Provenance::fitted});
    const ClusterSpec c = dgx_cluster(1);
    PlanSpec p;
    p.tp = 8;
    CostContext ctx{&hw, &c, &p};
    const Demand d = transfer_demand(collective(CollKind::all_reduce, Group::tp, 8, 1e9), ctx);
    CHECK(d.provenance == Provenance::fitted);
    CHECK(d.latency_ns == 20000);
    CHECK(busy(d, LinkClass::nvlink) == Approx(1.75e9 / 400e9));
    // No fit for all-gather: still the datasheet.
    CHECK(transfer_demand(collective(CollKind::all_gather, Group::tp, 8, 1e9), ctx).provenance == Provenance::datasheet);
}

TEST_CASE("hierarchical all-reduce across nodes costs more than inside one", "[cost][comm]") {
    const auto hw = h100_view();
    const ClusterSpec c = dgx_cluster(2);
    PlanSpec p;
    p.tp = 8, p.dp = 2;
    CostContext ctx{&hw, &c, &p};
    // dp group: one GPU per node on 2 nodes. NIC bytes = 2 (N-1)/N x S / q = 1e9; 47 GB/s per NIC.
    // Two inter-node ring steps at 14 us (Simple) + base 8.4 us = 36.4 us.
    const Demand inter = transfer_demand(collective(CollKind::all_reduce, Group::dp, 2, 1e9), ctx);
    CHECK(busy(inter, LinkClass::nic) == Approx(1e9 / 47e9).epsilon(1e-9));
    CHECK(busy(inter, LinkClass::nvlink) == 0.0);
    CHECK(inter.latency_ns == 36400);
    PlanSpec p1;
    p1.tp = 2;
    const ClusterSpec c1 = dgx_cluster(1);
    CostContext ctx1{&hw, &c1, &p1};
    const Demand intra = transfer_demand(collective(CollKind::all_reduce, Group::tp, 2, 1e9), ctx1);
    CHECK(inter.alone_ns() > intra.alone_ns());

    // 16 GPUs as 8 per node x 2 nodes: NVLink carries 2*7/8 S, each NIC 2*(1/2) * S/8.
    PlanSpec p16;
    p16.dp = 16;
    CostContext ctx16{&hw, &c, &p16};
    const Demand d16 = transfer_demand(collective(CollKind::all_reduce, Group::dp, 16, 1e9), ctx16);
    CHECK(busy(d16, LinkClass::nvlink) == Approx(1.75e9 / 369e9).epsilon(1e-9));
    CHECK(busy(d16, LinkClass::nic) == Approx(1e9 / 8 / 47e9).epsilon(1e-9));
    // 30 ring steps, 2 across nodes, Simple: 8.4 + 28 x 3.4 + 2 x 14 = 131.6 us (docs/costs.md).
    CHECK(d16.latency_ns == 131600);
}

TEST_CASE("crossing an oversubscribed leaf loads the spine", "[cost][comm]") {
    const auto hw = h100_view();
    ClusterSpec c = dgx_cluster(4);
    c.topology = NetTopology::fat_tree;
    c.nodes_per_leaf = 2;
    c.oversubscription = 4;
    PlanSpec p;
    p.tp = 8, p.dp = 4;
    CostContext ctx{&hw, &c, &p};
    const Demand d = transfer_demand(collective(CollKind::all_reduce, Group::dp, 4, 1e9), ctx);
    // NIC bytes 2*3/4*1e9 = 1.5e9; a leaf's uplinks: 2 nodes x 8 NICs x 47 GB/s / 4.
    CHECK(busy(d, LinkClass::nic) == Approx(1.5e9 / 47e9));
    CHECK(busy(d, LinkClass::spine) == Approx(1.5e9 / (2 * 8 * 47e9 / 4)));
    // Rail-optimised: a leaf per rail, so one rail's 2 NICs feed its uplink.
    c.topology = NetTopology::rail_optimized;
    CHECK(busy(transfer_demand(collective(CollKind::all_reduce, Group::dp, 4, 1e9), ctx), LinkClass::spine) ==
          Approx(1.5e9 / (2 * 47e9 / 4)));
    c.nodes_per_leaf = 32;
    CHECK(busy(transfer_demand(collective(CollKind::all_reduce, Group::dp, 4, 1e9), ctx), LinkClass::spine) == 0.0);
}

TEST_CASE("p2p uses NVLink inside a node and the NIC across nodes", "[cost][p2p]") {
    const auto hw = h100_view();
    const ClusterSpec c = dgx_cluster(2);
    PlanSpec p;
    p.tp = 8, p.pp = 2;
    Program prog;
    prog.ranks.resize(2);
    prog.ranks[0].node = 0;
    prog.ranks[1].node = 1;
    Instr send;
    send.kind = InstrKind::send;
    send.peer = 1;
    send.bytes = 1e8;
    CostContext ctx{&hw, &c, &p};
    ctx.program = &prog;
    ctx.rank = 0;
    const Demand inter = transfer_demand(send, ctx);
    CHECK(busy(inter, LinkClass::nic) == Approx(1e8 / 47e9));
    CHECK(inter.latency_ns == 22400);  // NCCL Simple base 8.4 + one NET hop 14 us
    prog.ranks[1].node = 0;
    const Demand intra = transfer_demand(send, ctx);
    CHECK(busy(intra, LinkClass::nvlink) == Approx(1e8 / 369e9));
    CHECK(intra.latency_ns == 11800);  // 8.4 + one NVLink hop 3.4 us
    Instr recv = send;
    recv.kind = InstrKind::recv;
    CHECK(transfer_demand(recv, ctx).alone_ns() == 0);
}

TEST_CASE("a ring-exchange step of TP overlap is one neighbour hop, not a ring collective", "[cost][comm][tp_overlap]") {
    const auto hw = h100_view();
    const ClusterSpec c = dgx_cluster(1);
    PlanSpec p;
    p.tp = 8;
    CostContext ctx{&hw, &c, &p};
    // Llama 3.1 405B at tp 8, cp 2 (Megatron-Bridge): a block of 4096 / 8 rows x 16384 columns in
    // FP8 = 8,388,608 bytes; the lowering writes the step as an all-gather of chunk x 8 / 7.
    const double chunk = 512.0 * 16384;
    Instr step = collective(CollKind::all_gather, Group::tp, 8, chunk * 8 / 7);
    step.ring_step = 3;
    const Demand d = transfer_demand(step, ctx);
    // By hand: the chunk once over one NVLink direction at 450 x 0.82 = 369 GB/s (22.7 us), and
    // NCCL's Simple base plus one NVLink hop, 8.4 + 3.4 = 11.8 us: the pipeline p2p's figures.
    CHECK(busy(d, LinkClass::nvlink) == Approx(chunk / 369e9).epsilon(1e-9));
    CHECK(d.latency_ns == 11800);
    // The same bytes as a real all-gather pay seven hops (LL128: 14 + 7 x 1.9 = 27.3 us) at LL128's
    // 0.92 of the rate: the step used to cost that, 52 us against 34.5 us.
    step.ring_step = -1;
    const Demand whole = transfer_demand(step, ctx);
    CHECK(whole.latency_ns == 27300);
    CHECK(whole.alone_ns() > d.alone_ns() + 15000);
    // The reduce-scatter side's steps are priced the same way.
    Instr rs = collective(CollKind::reduce_scatter, Group::tp, 8, chunk * 8 / 7);
    rs.ring_step = 1;
    CHECK(transfer_demand(rs, ctx).alone_ns() == d.alone_ns());
    // A TP group over two nodes (tp 16 on 8-GPU nodes) waits for the block that crosses the NIC.
    const ClusterSpec c2 = dgx_cluster(2);
    PlanSpec p16;
    p16.tp = 16;
    CostContext ctx2{&hw, &c2, &p16};
    Instr wide = collective(CollKind::all_gather, Group::tp, 16, chunk * 16 / 15);
    wide.ring_step = 1;
    const Demand across = transfer_demand(wide, ctx2);
    CHECK(busy(across, LinkClass::nic) == Approx(chunk / 47e9).epsilon(1e-9));
    CHECK(across.latency_ns == 22400);  // 8.4 + one NET hop 14 us
    // Context parallelism's ring attention: its all-gathers and reduce-scatters are steps too
    // (cp 4 x tp 2 inside one node: one NVLink hop, 11.8 us, not 3 hops).
    PlanSpec pc;
    pc.tp = 2, pc.cp = 4;
    CostContext ctxc{&hw, &c, &pc};
    const Demand kv = transfer_demand(collective(CollKind::all_gather, Group::cp, 4, chunk * 4 / 3), ctxc);
    CHECK(kv.latency_ns == 11800);
    CHECK(busy(kv, LinkClass::nvlink) == Approx(chunk / 369e9).epsilon(1e-9));
    // Ulysses' all-to-all over the same group stays a collective.
    CHECK(transfer_demand(collective(CollKind::all_to_all, Group::cp, 4, chunk), ctxc).latency_ns > 11800);
    // With the K/V all-gathered at once (cp_comm_type allgather) the all-gather of every rank's
    // chunk (S = 4 chunks) is a whole collective: three chunks in per rank, several hops.
    pc.cp_comm_type = CpCommType::allgather;
    const Demand all = transfer_demand(collective(CollKind::all_gather, Group::cp, 4, chunk * 4), ctxc);
    CHECK(all.latency_ns > 11800);
    CHECK(busy(all, LinkClass::nvlink) > 2.5 * busy(kv, LinkClass::nvlink));
    CHECK(busy(all, LinkClass::nvlink) < 3.5 * busy(kv, LinkClass::nvlink));
}

TEST_CASE("host and SSD copies load PCIe, SSD and DRAM", "[cost][copy]") {
    auto hw = h100_view();
    const ClusterSpec c = dgx_cluster(1);
    CostContext ctx{&hw, &c};
    Instr in;
    in.kind = InstrKind::copy;
    in.copy = CopyKind::h2d;
    in.bytes = 1e9;
    Demand d = transfer_demand(in, ctx);
    CHECK(busy(d, LinkClass::pcie_h2d) == Approx(1e9 / 50e9));  // DGX-H100 per-GPU H2D estimate
    CHECK(busy(d, LinkClass::host_mem) == Approx(1e9 / 400e9));
    CHECK(d.provenance == Provenance::datasheet);
    hw.d2h = strata::hwdb::BandwidthFit{5000, 52.8e9, Provenance::measured};
    in.copy = CopyKind::d2h;
    d = transfer_demand(in, ctx);
    CHECK(busy(d, LinkClass::pcie_d2h) == Approx(1e9 / 52.8e9));
    CHECK(d.latency_ns == 5000);
    CHECK(d.provenance == Provenance::measured);
    in.copy = CopyKind::ssd_read;
    d = transfer_demand(in, ctx);
    CHECK(busy(d, LinkClass::ssd_read) == Approx(1e9 / 40e9));  // node aggregate read
    CHECK(busy(d, LinkClass::pcie_h2d) == 0.0);
    in.copy = CopyKind::ssd_write;
    d = transfer_demand(in, ctx);
    CHECK(busy(d, LinkClass::ssd_write) == Approx(1e9 / (8 * 3.8e9)));
    // A measured host memory bandwidth (the profiler's STREAM copy) replaces the CPU's datasheet
    // figure: a host of unknown CPU no longer bounds its copies by a desktop's DRAM.
    hw.cpu.dram_Bps = 35.84e9;
    in.copy = CopyKind::h2d;
    CHECK(busy(transfer_demand(in, ctx), LinkClass::host_mem) == Approx(1e9 / 35.84e9));
    // A measured CPU Adam moved 28 bytes a parameter through DRAM: 2.5e9 x 28 = 70 GB/s at least.
    hw.cpu_adam_params_per_s = 2.5e9;
    CHECK(busy(transfer_demand(in, ctx), LinkClass::host_mem) == Approx(1e9 / 70e9));
    hw.host_dram = strata::hwdb::BandwidthFit{0, 150e9, Provenance::fitted};
    CHECK(busy(transfer_demand(in, ctx), LinkClass::host_mem) == Approx(1e9 / 150e9));
}

TEST_CASE("CPU Adam: DRAM-bound at 30 bytes per parameter unless a rate is known", "[cost][cpu]") {
    auto hw = h100_view();
    const ClusterSpec c = dgx_cluster(1);
    CostContext ctx{&hw, &c};
    Instr in;
    in.kind = InstrKind::optimizer;
    in.count = 1e9;
    Demand d = transfer_demand(in, ctx);
    // 400 GB/s / 30 B = 13.3 G params/s: 1e9 params in 75 ms on both cpu and DRAM.
    CHECK(busy(d, LinkClass::cpu) == Approx(1e9 * 30 / 400e9));
    CHECK(busy(d, LinkClass::host_mem) == Approx(30e9 / 400e9));
    hw.cpu.adam_params_per_s = 2e9;
    d = transfer_demand(in, ctx);
    CHECK(busy(d, LinkClass::cpu) == Approx(0.5));
    CHECK(d.provenance == Provenance::datasheet);
    hw.cpu_adam_params_per_s = 4e9;
    d = transfer_demand(in, ctx);
    CHECK(busy(d, LinkClass::cpu) == Approx(0.25));
    CHECK(d.provenance == Provenance::measured);
}

TEST_CASE("Demand::alone_ns is latency plus the slowest class", "[cost]") {
    Demand d;
    d.latency_ns = 1000;
    d.busy_s[static_cast<std::size_t>(LinkClass::nic)] = 2e-3;
    d.busy_s[static_cast<std::size_t>(LinkClass::nvlink)] = 1e-3;
    CHECK(d.alone_ns() == 1000 + 2000000);
    CHECK(std::string(to_string(LinkClass::spine)) == "spine");
}

TEST_CASE("calibration scales collectives and p2p, not copies", "[cost][calibration]") {
    const auto hw = h100_view();
    const ClusterSpec c = dgx_cluster(1);
    PlanSpec p;
    p.tp = 8;
    CostContext ctx{&hw, &c, &p};
    const Instr ar = collective(CollKind::all_reduce, Group::tp, 8, 1e9);
    const Demand d0 = transfer_demand(ar, ctx);
    ctx.calibration.collective = 2.0;
    const Demand d1 = transfer_demand(ar, ctx);
    CHECK(d1.latency_ns == 2 * d0.latency_ns);
    CHECK(busy(d1, LinkClass::nvlink) == Approx(2 * busy(d0, LinkClass::nvlink)));
    Instr h2d;
    h2d.kind = InstrKind::copy;
    h2d.bytes = 1e9;
    CHECK(transfer_demand(h2d, ctx).alone_ns() == transfer_demand(h2d, CostContext{&hw, &c, &p}).alone_ns());
}
