// Data movement as engine Demands: collectives (alpha-beta with nccl-tests' bus factors, NCCL's
// own latency constants, hierarchical across nodes), pipeline p2p, host/SSD copies and the CPU Adam
// step (where a group's ranks sit: groups.hpp). Each busy_s is relative to ONE
// concrete resource of its class (one NVLink port, one NIC, one leaf's uplinks, one node's DRAM);
// sharing between flows is the engine's job.
#include <algorithm>
#include <cmath>

#include "cost_detail.hpp"
#include "strata/common/error.hpp"

namespace strata::sim {

using cost_detail::Rate;
using hwdb::Provenance;

const char* to_string(LinkClass c) {
    static const char* names[] = {"nvlink", "nic", "spine", "pcie_h2d", "pcie_d2h", "host_mem", "ssd_read", "ssd_write", "cpu"};
    const auto i = static_cast<int>(c);
    return i >= 0 && i < kLinkClassCount ? names[i] : "?";
}

std::int64_t Demand::alone_ns() const {
    double worst = 0;
    for (double b : busy_s) worst = std::max(worst, b);
    return latency_ns + static_cast<std::int64_t>(std::ceil(worst * 1e9 - 1e-6));
}

double bus_factor(CollKind k, int n) {
    if (n <= 1) return 0.0;
    const double nn = n;
    switch (k) {
        case CollKind::all_reduce: return 2.0 * (nn - 1) / nn;
        case CollKind::all_gather:
        case CollKind::reduce_scatter:
        case CollKind::all_to_all: return (nn - 1) / nn;
        case CollKind::broadcast: return 1.0;
    }
    return 1.0;
}

namespace {

// ---------------------------------------------------------------------------------------------
// NCCL's alpha model (src/graph/tuning.cc, ncclTunerConstantsDefaults; copied into
// hwdb-seed.json meta.nccl_model_constants): latency = base[proto] + intra_steps * hop_intra[proto]
// + inter_steps * hop_net[proto]; protocols trade latency for bandwidth (LL moves 8-byte lines with
// a 4-byte flag: 1/2 bandwidth; LL128 120 of 128 bytes: NCCL uses 0.92). Ring constants, in us.
// ---------------------------------------------------------------------------------------------
struct Proto {
    double base_us, nvlink_hop_us, pci_hop_us, net_hop_us, bw_eff;
};
constexpr Proto kProtos[] = {
    {6.6, 0.6, 1.0, 2.7, 0.5},    // LL
    {14.0, 1.9, 2.5, 4.0, 0.92},  // LL128
    {8.4, 3.4, 5.7, 14.0, 1.0},   // Simple
};

/// The cheapest protocol for these step counts and busy times; fills latency and scales busy_s.
void choose_protocol(Demand& d, double intra_steps, double inter_steps, bool has_nvlink) {
    double best_t = 0;
    int best = -1;
    double worst = 0;
    for (double b : d.busy_s) worst = std::max(worst, b);
    for (int i = 0; i < 3; ++i) {
        const Proto& p = kProtos[i];
        const double hop = has_nvlink ? p.nvlink_hop_us : p.pci_hop_us;
        const double lat = (p.base_us + intra_steps * hop + inter_steps * p.net_hop_us) * 1e3;
        const double t = lat * 1e-9 + worst / p.bw_eff;
        if (best < 0 || t < best_t) best_t = t, best = i;
    }
    const Proto& p = kProtos[best];
    const double hop = has_nvlink ? p.nvlink_hop_us : p.pci_hop_us;
    d.latency_ns = cost_detail::to_ns((p.base_us + intra_steps * hop + inter_steps * p.net_hop_us) * 1e-6);
    for (double& b : d.busy_s) b /= p.bw_eff;
}

double& busy(Demand& d, LinkClass c) { return d.busy_s[static_cast<std::size_t>(c)]; }

/// Ring steps of a collective over n ranks, and how many of them cross nodes (NCCL's
/// nInterSteps: all-reduce 2(N-1), others N-1).
void ring_steps(CollKind k, int n, int nodes, double& intra, double& inter) {
    const double total = k == CollKind::all_reduce ? 2.0 * (n - 1) : static_cast<double>(n - 1);
    inter = nodes > 1 ? (k == CollKind::all_reduce ? 2.0 * (nodes - 1) : static_cast<double>(nodes - 1)) : 0.0;
    intra = std::max(0.0, total - inter);
}

const hwdb::CollectiveFit* find_fit(const hwdb::HardwareView& hw, const char* coll, const char* scope, int n) {
    const hwdb::CollectiveFit* best = nullptr;
    double best_d = 0;
    for (const auto& f : hw.collectives) {
        if (f.collective != coll || f.scope != scope || f.busbw_Bps <= 0 || f.group <= 1) continue;
        const double d = std::fabs(std::log2(static_cast<double>(f.group)) - std::log2(static_cast<double>(n)));
        if (!best || d < best_d) best = &f, best_d = d;
    }
    return best;
}

/// A send/recv between neighbours: NCCL's Simple base plus one hop (NVLink inside a node, the
/// network across), the bytes at the link's rate; a `send_recv` fit replaces both. Pipeline p2p
/// (p2p_demand) and the steps of a ring exchange (TP overlap's Instr::ring_step; context
/// parallelism's ring attention) move data this way: every member hands one block to its
/// neighbour at once (Transformer Engine's userbuffers, torch's symmetric-memory copies, the CP
/// ring's batched NCCL send and recv).
Demand neighbour_demand(const hwdb::HardwareView& hw, const ClusterSpec& c, double bytes, bool intra) {
    Demand d;
    const Proto& simple = kProtos[2];
    if (intra) {
        busy(d, LinkClass::nvlink) = bytes / cost_detail::scale_up_rate(hw).Bps;
        const double hop = hw.gpu.scale_up_per_dir_Bps > 0 ? simple.nvlink_hop_us : simple.pci_hop_us;
        d.latency_ns = cost_detail::to_ns((simple.base_us + hop) * 1e-6);
    } else {
        busy(d, LinkClass::nic) = bytes / cost_detail::nic_rate(hw, c).Bps;
        d.latency_ns = cost_detail::to_ns((simple.base_us + simple.net_hop_us) * 1e-6);
    }
    if (const auto* f = find_fit(hw, "send_recv", intra ? "intra" : "inter", 2)) {
        busy(d, intra ? LinkClass::nvlink : LinkClass::nic) = bytes / f->busbw_Bps;
        d.latency_ns = cost_detail::to_ns(f->alpha_ns * 1e-9);
        d.provenance = Provenance::fitted;
    }
    return d;
}

Demand collective_demand(const Instr& in, const CostContext& ctx) {
    const auto& hw = *ctx.hw;
    const ClusterSpec& c = *ctx.cluster;
    Demand d;
    const GroupLayout L = ctx.plan ? group_layout(in.group, c, *ctx.plan) : GroupLayout{};
    const int n = in.group_size > 0 ? in.group_size : L.size;
    if (n <= 1 || in.bytes <= 0) return d;
    const int q = std::clamp(L.per_node, 1, n);
    const int N = (n + q - 1) / q;
    const double S = in.bytes;
    const Rate nvl = cost_detail::scale_up_rate(hw);
    const bool has_nvlink = hw.gpu.scale_up_per_dir_Bps > 0;

    // Bytes each GPU pushes over its scale-up port and over its NIC (one direction). `dedup`: the
    // share of a flat all-to-all's bytes on the bottleneck class a DeepEP dispatch sends (1 = all).
    double nvl_bytes = 0, nic_bytes = 0, dedup = 1;
    const bool deepep = in.coll == CollKind::all_to_all && in.a2a_rank_ppm > 0;
    const double rank_share = deepep ? in.a2a_rank_ppm * 1e-6 : 1.0, node_share = deepep ? in.a2a_node_ppm * 1e-6 : 1.0;
    const double qq = q, NN = N, nn = n;
    // A ring-exchange step: the lowering writes it as an all-gather (reduce-scatter) of
    // chunk x n / (n - 1) so its volume reads like the collective's, but it is one neighbour hop,
    // not n - 1 (a group across nodes waits for the block that crosses the network). TP overlap
    // marks its steps; context parallelism's all-gathers and reduce-scatters are steps of its ring
    // attention (Ulysses moves all-to-alls), unless the plan all-gathers K/V at once
    // (cp_comm_type allgather: whole collectives).
    const bool cp_ring = in.group == Group::cp && (in.coll == CollKind::all_gather || in.coll == CollKind::reduce_scatter) &&
                         !(ctx.plan && ctx.plan->cp_comm_type == CpCommType::allgather);
    if (in.ring_step >= 0 || cp_ring) return neighbour_demand(hw, c, S * (nn - 1) / nn, N == 1);
    switch (in.coll) {
        case CollKind::all_reduce:  // intra reduce-scatter + inter all-reduce of S/q + intra all-gather
            nvl_bytes = 2.0 * (qq - 1) / qq * S;
            nic_bytes = N > 1 ? 2.0 * (NN - 1) / NN * S / qq : 0;
            break;
        case CollKind::all_gather:
        case CollKind::reduce_scatter:  // S = whole buffer (nccl-tests)
            nvl_bytes = (qq - 1) / qq * S;
            nic_bytes = N > 1 ? (NN - 1) / NN * S / qq : 0;
            break;
        case CollKind::all_to_all:  // S = this rank's whole send buffer, S/n to each peer
            if (deepep && N > 1) {
                // DeepEP's internode dispatch (docs/costs.md): a token crosses RDMA once per remote
                // node its experts reach (S / k per copy, D_nodes (N-1)/N of them), to the GPU of
                // its rail there, which forwards it once to each other GPU of that node holding one
                // of its experts (D_gpus (q-1)/q over all nodes). Combine mirrors it, each GPU
                // returning the sum of its experts' outputs. Both stages are pipelined: one demand
                // with both classes busy at once.
                dedup = node_share;
                nic_bytes = (NN - 1) / NN * S * node_share;
                nvl_bytes = (qq - 1) / qq * S * rank_share;
                break;
            }
            nvl_bytes = (qq - 1) / nn * S;
            nic_bytes = (nn - qq) / nn * S;
            // Rail-optimised fabrics keep traffic on rails: cross-rail bytes first hop over NVLink (PXN).
            if (c.topology == NetTopology::rail_optimized && q > 1) nvl_bytes += nic_bytes * (qq - 1) / qq;
            break;
        case CollKind::broadcast:
            nvl_bytes = q > 1 ? S : 0;
            nic_bytes = N > 1 ? S : 0;
            break;
    }
    // One node: the flat nccl-tests definition; DeepEP's intranode kernels send a token once to
    // each GPU its experts reach, rank_share of the flat all-to-all's copies.
    if (N == 1) {
        nvl_bytes = S * bus_factor(in.coll, n) * rank_share;
        if (deepep) dedup = rank_share;
    }

    busy(d, LinkClass::nvlink) = nvl_bytes / nvl.Bps;
    if (N > 1) {
        const Rate nic = cost_detail::nic_rate(hw, c);
        busy(d, LinkClass::nic) = nic_bytes / nic.Bps;
        if (L.crosses_leaf) {
            // One leaf's uplinks (topology.hpp): fat tree, a leaf per nodes_per_leaf nodes carrying
            // all their NICs; rail-optimised, a leaf per rail of those nodes. Capacity = the NICs
            // under the leaf / oversubscription. All-to-all sends the share of its peers outside
            // the leaf up; ring/tree collectives pass their whole inter-node volume through the
            // leaf boundary.
            const int npl = std::max(1, c.nodes_per_leaf);
            const int nics_under_leaf = npl * (c.topology == NetTopology::rail_optimized ? 1 : cost_detail::nics_per_node(hw, c));
            const double uplink_Bps = nics_under_leaf * nic.Bps / std::max(1.0, c.oversubscription);
            const double outside = in.coll == CollKind::all_to_all ? std::max(0.0, (NN - std::min(NN, static_cast<double>(npl))) / std::max(1.0, NN - 1)) : 1.0;
            busy(d, LinkClass::spine) = nic_bytes * outside / uplink_Bps;
        }
    }

    double intra_steps = 0, inter_steps = 0;
    ring_steps(in.coll, n, N, intra_steps, inter_steps);
    choose_protocol(d, intra_steps, inter_steps, has_nvlink);
    d.provenance = Provenance::datasheet;

    // A measured alpha-beta fit for (collective, scope, group) replaces the datasheet estimate on
    // the bottleneck class (nearest group size in log2 when there is no exact one).
    const char* scope = N > 1 ? "inter" : "intra";
    if (const auto* f = find_fit(hw, to_string(in.coll), scope, n)) {
        const LinkClass cls = N > 1 ? LinkClass::nic : LinkClass::nvlink;
        busy(d, cls) = S * bus_factor(in.coll, n) / f->busbw_Bps * dedup;  // DeepEP sends `dedup` of it
        d.latency_ns = cost_detail::to_ns(f->alpha_ns * 1e-9);
        d.provenance = f->provenance == Provenance::measured ? Provenance::measured : Provenance::fitted;
    }
    return d;
}

/// Do this rank and its p2p peer share a node? From the Program when the engine gave one, else
/// from the pipeline group's layout (adjacent stages share a node when pp's stride < node size).
bool peer_same_node(const Instr& in, const CostContext& ctx) {
    if (ctx.program && ctx.rank >= 0 && in.peer >= 0 && in.peer < static_cast<int>(ctx.program->ranks.size()) &&
        ctx.rank < static_cast<int>(ctx.program->ranks.size()))
        return ctx.program->ranks[static_cast<std::size_t>(ctx.rank)].node == ctx.program->ranks[static_cast<std::size_t>(in.peer)].node;
    if (!ctx.plan) return true;
    return group_layout(Group::pp, *ctx.cluster, *ctx.plan).per_node > 1;
}

Demand p2p_demand(const Instr& in, const CostContext& ctx) {
    if (in.bytes <= 0) return {};
    return neighbour_demand(*ctx.hw, *ctx.cluster, in.bytes, peer_same_node(in, ctx));
}

/// Host copies cross the GPU's PCIe switch and the node's DRAM; SSD copies move between the NVMe
/// array and host DRAM (a GPU-side leg is its own h2d/d2h Instr: no GPUDirect Storage assumed).
Demand copy_demand(const Instr& in, const CostContext& ctx) {
    const auto& hw = *ctx.hw;
    const ClusterSpec& c = *ctx.cluster;
    Demand d;
    if (in.bytes <= 0) return d;
    const Rate dram = cost_detail::dram_rate(hw);
    Rate r;
    switch (in.copy) {
        case CopyKind::h2d:
            r = cost_detail::h2d_rate(hw);
            busy(d, LinkClass::pcie_h2d) = in.bytes / r.Bps;
            break;
        case CopyKind::d2h:
            r = cost_detail::d2h_rate(hw);
            busy(d, LinkClass::pcie_d2h) = in.bytes / r.Bps;
            break;
        case CopyKind::ssd_read:
            r = cost_detail::ssd_read_rate(hw, c);
            busy(d, LinkClass::ssd_read) = in.bytes / r.Bps;
            break;
        case CopyKind::ssd_write:
            r = cost_detail::ssd_write_rate(hw, c);
            busy(d, LinkClass::ssd_write) = in.bytes / r.Bps;
            break;
    }
    busy(d, LinkClass::host_mem) = in.bytes / dram.Bps;
    d.latency_ns = cost_detail::to_ns(r.latency_ns * 1e-9);
    d.provenance = r.provenance;
    return d;
}

/// CPU Adam over `count` parameters: params/s from the view (measured, else the CPU's datasheet
/// figure), else DRAM-bound at 30 bytes per parameter (cost_detail::kCpuAdamBytesPerParam).
Demand cpu_optimizer_demand(const Instr& in, const CostContext& ctx) {
    const auto& hw = *ctx.hw;
    Demand d;
    const Rate dram = cost_detail::dram_rate(hw);
    if (in.count <= 0) {  // a host copy (the lock-free master published to host-homed weights)
        if (in.bytes > 0) busy(d, LinkClass::host_mem) = in.bytes / dram.Bps;
        return d;
    }
    const double dram_bytes = in.count * cost_detail::kCpuAdamBytesPerParam;
    double rate = 0;
    if (hw.cpu_adam_params_per_s && *hw.cpu_adam_params_per_s > 0) {
        rate = *hw.cpu_adam_params_per_s;
        d.provenance = Provenance::measured;
    } else if (hw.cpu.adam_params_per_s > 0) {
        rate = hw.cpu.adam_params_per_s;
    } else {
        rate = dram.Bps / cost_detail::kCpuAdamBytesPerParam;
    }
    busy(d, LinkClass::cpu) = in.count / rate;
    // The update's DRAM traffic occupies host memory (copies beside it share it). A measured rate
    // already includes that traffic: the machine sustained it, so a datasheet DRAM figure below it
    // (a VM's host, say) may not make the update slower than measured.
    busy(d, LinkClass::host_mem) = d.provenance == Provenance::measured ? std::min(dram_bytes / dram.Bps, in.count / rate) : dram_bytes / dram.Bps;
    d.latency_ns = cost_detail::to_ns(cost_detail::kLaunchOverheadNs * 1e-9);  // thread-pool dispatch
    return d;
}

}  // namespace

Demand transfer_demand(const Instr& in, const CostContext& ctx) {
    STRATA_ASSERT(ctx.hw != nullptr && ctx.cluster != nullptr, "transfer_demand needs a HardwareView and a ClusterSpec");
    Demand d;
    switch (in.kind) {
        case InstrKind::collective: d = collective_demand(in, ctx); break;
        case InstrKind::send:
            // The send carries the data; a recv completes when it arrives (engine), costing nothing.
        case InstrKind::recv: d = in.kind == InstrKind::send ? p2p_demand(in, ctx) : Demand{}; break;
        case InstrKind::copy: d = copy_demand(in, ctx); break;
        case InstrKind::optimizer: d = cpu_optimizer_demand(in, ctx); break;
        default: return d;
    }
    // ctx.gpu_slowdown is not applied: links, not the GPU's SMs, bound data movement.
    // Calibration multipliers scale latency and busy time of collectives and pipeline p2p.
    const double f = in.kind == InstrKind::collective ? ctx.calibration.collective
                   : in.kind == InstrKind::send      ? ctx.calibration.p2p
                                                      : 1.0;
    if (f != 1.0) {
        d.latency_ns = cost_detail::to_ns(static_cast<double>(d.latency_ns) * 1e-9 * f);
        for (double& b : d.busy_s) b *= f;
    }
    return d;
}

}  // namespace strata::sim
