// The cluster graph and its routes: vertex counts derived from the layout, which GPUs share which
// resource, and the engine slowing exactly the flows that cross a shared resource.
#include <catch2/catch.hpp>

#include <algorithm>

#include "strata/sim/engine.hpp"
#include "strata/sim/topology.hpp"

using namespace strata::sim;

namespace {

strata::hwdb::HardwareView hw() {
    strata::hwdb::HardwareView h;
    h.gpu.scale_up_per_dir_Bps = 450e9;
    h.host.per_dir_Bps = 64e9;
    h.nic.per_dir_Bps = 50e9;
    return h;
}

ClusterSpec cluster(int nodes, int nics, NetTopology t) {
    ClusterSpec c;
    c.nodes = nodes;
    c.gpus_per_node = 8;
    c.nics_per_node = nics;
    c.gpus_per_pcie_switch = 2;
    c.topology = t;
    c.nodes_per_leaf = 32;
    return c;
}

RankProgram prog(int id, int g0, int mult, std::vector<Instr> instrs = {}) {
    RankProgram r;
    r.id = id;
    r.global_rank = g0;
    r.multiplicity = mult;
    r.node = g0 / 8;
    r.instrs = std::move(instrs);
    return r;
}

// Fake costs: a copy loads pcie_h2d for `bytes` ns; a collective loads the class in `k` for `bytes` ns.
struct ClassCost : CostModel {
    Estimate compute(const Instr& in, const RankProgram&) const override { return Estimate{static_cast<std::int64_t>(in.flops)}; }
    Demand transfer(const Instr& in, const RankProgram&) const override {
        Demand d;
        d.busy_s[static_cast<std::size_t>(in.k)] = in.bytes * 1e-9;
        return d;
    }
};
Instr flow(LinkClass c, double ns, Stream s = Stream::h2d) {
    Instr in;
    in.kind = InstrKind::copy;
    in.stream = s;
    in.k = static_cast<std::int64_t>(c);
    in.bytes = ns;
    return in;
}
double mult_of(const std::vector<ResourceUse>& v, const Topology& t, const std::string& needle) {
    for (const auto& u : v)
        if (t.resource_name(u.resource).find(needle) != std::string::npos) return u.multiplicity;
    return -1;
}

}  // namespace

TEST_CASE("topology: vertices of a 2-node rail-optimised cluster", "[topology]") {
    Topology t(cluster(2, 8, NetTopology::rail_optimized), hw());
    // Per node: 8 GPUs + 1 NVSwitch + 1 host + 1 SSD + 8/2 = 4 PCIe switches + 8 NICs = 23.
    // Both nodes fit one leaf group (32 nodes per leaf): one leaf per rail = 8 leaves, + 1 spine.
    CHECK(boost::num_vertices(t.graph()) == 2 * 23 + 8 + 1);
    // Edges per node: host-ssd 1, switch-host 4, GPU-NVSwitch 8, GPU-switch 8, NIC-switch 8 = 29;
    // NIC-leaf 16, leaf-spine 8.
    CHECK(boost::num_edges(t.graph()) == 2 * 29 + 16 + 8);
}

TEST_CASE("topology: routes share exactly what the hardware shares", "[topology]") {
    Topology t(cluster(2, 8, NetTopology::rail_optimized), hw());
    auto a = t.gpu_route(0, LinkClass::pcie_h2d), b = t.gpu_route(1, LinkClass::pcie_h2d), c = t.gpu_route(2, LinkClass::pcie_h2d);
    // GPU -> switch edge (own) and switch -> host uplink (shared by GPUs 0 and 1, not by GPU 2).
    REQUIRE(a.size() == 2);
    REQUIRE(b.size() == 2);
    std::vector<int> ab, ac;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::sort(c.begin(), c.end());
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(ab));
    std::set_intersection(a.begin(), a.end(), c.begin(), c.end(), std::back_inserter(ac));
    CHECK(ab.size() == 1);
    CHECK(ac.empty());
    CHECK(t.gpu_route(0, LinkClass::host_mem) == t.gpu_route(7, LinkClass::host_mem));
    CHECK(t.gpu_route(0, LinkClass::host_mem) != t.gpu_route(8, LinkClass::host_mem));  // other node
    CHECK(t.gpu_route(0, LinkClass::nic) != t.gpu_route(1, LinkClass::nic));           // a NIC per rail
    CHECK(t.gpu_route(0, LinkClass::spine).size() == 1);
    // Single node: no spine to cross.
    Topology one(cluster(1, 8, NetTopology::fat_tree), hw());
    CHECK(one.gpu_route(0, LinkClass::spine).empty());
}

TEST_CASE("topology: multiplicity counts the program's GPUs under each resource", "[topology]") {
    Topology t(cluster(2, 2, NetTopology::fat_tree), hw());
    auto p = prog(0, 0, 8);
    // 8 GPUs of one node: the host's DRAM is loaded by all 8; a PCIe uplink by its 2 GPUs; each of
    // the 2 NICs by 8 * 2 / 2 ... GPU l uses NIC l*2/8: GPUs 0-3 -> NIC 0, so 4 per NIC.
    auto hm = t.route(p, LinkClass::host_mem);
    REQUIRE(hm.size() == 1);
    CHECK(hm[0].multiplicity == 8);
    auto h2d = t.route(p, LinkClass::pcie_h2d);
    CHECK(mult_of(h2d, t, "pcie_switch0->node0/gpu0") == 1);
    CHECK(mult_of(h2d, t, "host->node0/pcie_switch0") == 2);
    CHECK(t.route(p, LinkClass::nic)[0].multiplicity == 4);
    // 16 GPUs over 2 nodes under one fat-tree leaf: all 16 cross the leaf uplink.
    CHECK(t.route(prog(1, 0, 16), LinkClass::spine)[0].multiplicity == 16);
    // A program of 4 GPUs (half a node): host DRAM multiplicity 4; gpus_on_node 4.
    CHECK(t.route(prog(2, 4, 4), LinkClass::host_mem)[0].multiplicity == 4);
    CHECK(t.gpus_on_node(prog(2, 4, 4)) == 4);
}

TEST_CASE("topology: the engine slows exactly the flows that cross a shared resource", "[topology][engine]") {
    ClassCost cost;
    {
        // One program of 4 GPUs (0-3) copying 1000 ns worth over PCIe: each switch uplink carries 2
        // of its GPUs -> weight 2 x 1000 ns -> 2000 ns. A second program on GPUs 4-7 uses other
        // switches: no interaction, also 2000.
        Topology t(cluster(1, 8, NetTopology::fat_tree), hw());
        Program p;
        p.ranks = {prog(0, 0, 4, {flow(LinkClass::pcie_h2d, 1000)}), prog(1, 4, 4, {flow(LinkClass::pcie_h2d, 1000)})};
        auto r = simulate_program(p, cost, &t);
        CHECK(r.step_time_ns == 2000);
    }
    {
        // Host DRAM: program A (4 GPUs) alone needs 4 x 1000 = 4000 ns of the node's DRAM; with
        // program B (the other 4 GPUs of the node) doing the same, the DRAM carries 8000 busy-ns:
        // both end at 8000 (two stages on one node share it for real).
        Topology t(cluster(1, 8, NetTopology::fat_tree), hw());
        Program alone;
        alone.ranks = {prog(0, 0, 4, {flow(LinkClass::host_mem, 1000)})};
        CHECK(simulate_program(alone, cost, &t).step_time_ns == 4000);
        Topology t2(cluster(1, 8, NetTopology::fat_tree), hw());
        Program both;
        both.ranks = {prog(0, 0, 4, {flow(LinkClass::host_mem, 1000)}), prog(1, 4, 4, {flow(LinkClass::host_mem, 1000)})};
        CHECK(simulate_program(both, cost, &t2).step_time_ns == 8000);
        // Programs on different nodes do not share DRAM.
        ClusterSpec c2 = cluster(2, 8, NetTopology::fat_tree);
        Topology t3(c2, hw());
        Program apart;
        apart.ranks = {prog(0, 0, 8, {flow(LinkClass::host_mem, 1000)}), prog(1, 8, 8, {flow(LinkClass::host_mem, 1000)})};
        CHECK(simulate_program(apart, cost, &t3).step_time_ns == 8000);  // 8 GPUs each, own node: 8 x 1000
    }
    {
        // Spine of a fat tree: two single-GPU programs on two nodes of one leaf both cross the leaf
        // uplink: 1000 each alone -> 2000 together. Their NICs are separate.
        Topology t(cluster(2, 1, NetTopology::fat_tree), hw());
        Program p;
        p.ranks = {prog(0, 0, 1, {flow(LinkClass::spine, 1000)}), prog(1, 8, 1, {flow(LinkClass::spine, 1000)})};
        CHECK(simulate_program(p, cost, &t).step_time_ns == 2000);
        Topology t2(cluster(2, 1, NetTopology::fat_tree), hw());
        Program q;
        q.ranks = {prog(0, 0, 1, {flow(LinkClass::nic, 1000)}), prog(1, 8, 1, {flow(LinkClass::nic, 1000)})};
        CHECK(simulate_program(q, cost, &t2).step_time_ns == 1000);
    }
}
