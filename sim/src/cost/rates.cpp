// Achieved bandwidths of each link class, chosen in one place: a measured/fitted figure from the
// view when the database has one, else a datasheet figure times an achievable fraction (each cited
// where it is defined). No I/O; these only read the HardwareView and the ClusterSpec.
#include <algorithm>
#include <cmath>

#include "cost_detail.hpp"

namespace strata::sim::cost_detail {

namespace {
/// A link's achievable one-direction bandwidth: the stored achievable figure, else line rate x
/// the stored fraction (0.8 when unknown: app-level NVLink/PCIe reach ~80% of peak, NVIDIA/nccl #1054).
double link_achievable(const hwdb::Link& l) {
    if (l.achievable_Bps > 0) return l.achievable_Bps;
    const double f = l.achievable_fraction > 0 ? l.achievable_fraction : 0.8;
    return l.per_dir_Bps * f;
}
Rate from_fit(const hwdb::BandwidthFit& f) { return Rate{f.Bps, f.latency_ns, f.provenance}; }
}  // namespace

Rate hbm_rate(const hwdb::HardwareView& hw) {
    if (hw.hbm && hw.hbm->Bps > 0) return from_fit(*hw.hbm);
    const double b = hw.gpu.hbm_Bps > 0 ? hw.gpu.hbm_Bps : 1e12;
    return Rate{b * kHbmFraction, 0, hwdb::Provenance::datasheet};
}

Rate scale_up_rate(const hwdb::HardwareView& hw) {
    Rate r;
    if (hw.gpu.scale_up_per_dir_Bps > 0) {
        // Per-GPU line rate x the link's app-level fraction: nvlink4 450 GB/s x 0.82 = 369 GB/s,
        // the ~370 GB/s NCCL ring busbw of 8x H100 (NVIDIA/nccl-tests #212).
        const double f = hw.scale_up.achievable_fraction > 0 ? hw.scale_up.achievable_fraction : 0.8;
        r.Bps = hw.gpu.scale_up_per_dir_Bps * f;
    } else {
        r.Bps = link_achievable(hw.scale_up);
        if (r.Bps <= 0) r.Bps = link_achievable(hw.host);
    }
    if (r.Bps <= 0) r.Bps = 12e9;  // PCIe Gen3 x16 as NCCL models it (nccl src/graph/topo.h)
    r.latency_ns = hw.scale_up.latency_ns > 0 ? hw.scale_up.latency_ns : 1500.0;
    return r;
}

Rate nic_rate(const hwdb::HardwareView& hw, const ClusterSpec& c) {
    Rate r;
    const double line = c.nic_Bps > 0 ? c.nic_Bps : hw.nic.per_dir_Bps;
    if (c.nic_Bps <= 0 && hw.nic.achievable_Bps > 0) {
        r.Bps = hw.nic.achievable_Bps;
    } else if (hw.nic.achievable_Bps > 0 && hw.nic.per_dir_Bps > 0) {
        r.Bps = line * (hw.nic.achievable_Bps / hw.nic.per_dir_Bps);
    } else {
        // NDR CX-7 reaches 46-49 of 50 GB/s (NVIDIA/nccl-tests #290): ~0.94 of line rate.
        r.Bps = line * (hw.nic.achievable_fraction > 0 ? hw.nic.achievable_fraction : 0.94);
    }
    if (r.Bps <= 0) r.Bps = 11.5e9;  // EDR achievable, the slowest NIC in the seed
    r.latency_ns = hw.nic.latency_ns > 0 ? hw.nic.latency_ns : 1000.0;
    return r;
}

int nics_per_node(const hwdb::HardwareView& hw, const ClusterSpec& c) {
    if (c.nics_per_node > 0) return c.nics_per_node;
    if (hw.node.nic_count > 0) return hw.node.nic_count;
    return std::max(1, c.gpus_per_node);
}

namespace {
Rate host_link_datasheet(const hwdb::HardwareView& hw) {
    Rate r;
    r.Bps = hw.node.h2d_per_gpu_Bps > 0 ? hw.node.h2d_per_gpu_Bps : link_achievable(hw.host);
    if (r.Bps <= 0) r.Bps = 12e9;
    r.latency_ns = hw.host.latency_ns > 0 ? hw.host.latency_ns : 1500.0;
    return r;
}
}  // namespace

Rate h2d_rate(const hwdb::HardwareView& hw) {
    if (hw.h2d && hw.h2d->Bps > 0) return from_fit(*hw.h2d);
    return host_link_datasheet(hw);
}

Rate d2h_rate(const hwdb::HardwareView& hw) {
    if (hw.d2h && hw.d2h->Bps > 0) return from_fit(*hw.d2h);
    return host_link_datasheet(hw);  // the same datasheet link both ways
}

Rate dram_rate(const hwdb::HardwareView& hw) {
    if (hw.host_dram && hw.host_dram->Bps > 0) return from_fit(*hw.host_dram);  // the profiler's STREAM copy
    Rate r;
    r.Bps = hw.cpu.dram_Bps > 0 ? hw.cpu.dram_Bps : 200e9;  // ~8-channel DDR4 socket pair, estimate
    // A host whose CPU Adam was measured sustained that benchmark's traffic: a datasheet figure
    // below it (a cluster that names no CPU gets a desktop's) is wrong for this host, and the
    // measurement is a lower bound.
    if (hw.cpu_adam_params_per_s && *hw.cpu_adam_params_per_s > 0)
        r.Bps = std::max(r.Bps, *hw.cpu_adam_params_per_s * kCpuAdamBenchBytesPerParam);
    return r;
}

Rate ssd_read_rate(const hwdb::HardwareView& hw, const ClusterSpec& c) {
    if (hw.ssd_read && hw.ssd_read->Bps > 0) return from_fit(*hw.ssd_read);
    Rate r;
    if (c.ssds_per_node <= 0 && hw.node.ssd_aggregate_read_Bps > 0) r.Bps = hw.node.ssd_aggregate_read_Bps;
    else r.Bps = hw.ssd.seq_read_Bps * ssd_drives_per_node(c, hw);
    if (r.Bps <= 0) r.Bps = 3.5e9;
    r.latency_ns = 100e3;  // NVMe queue round trip ~100 us at depth (estimate, docs/costs.md)
    return r;
}

Rate ssd_write_rate(const hwdb::HardwareView& hw, const ClusterSpec& c) {
    if (hw.ssd_write && hw.ssd_write->Bps > 0) return from_fit(*hw.ssd_write);
    Rate r;
    r.Bps = hw.ssd.seq_write_Bps * ssd_drives_per_node(c, hw);
    if (r.Bps <= 0) {
        // Only an aggregate read figure: writes of datacenter NVMe run at ~0.55 of reads (seed:
        // PM1733 3.8 of 7.0, PM1743 6.6 of 13).
        r.Bps = hw.node.ssd_aggregate_read_Bps > 0 ? hw.node.ssd_aggregate_read_Bps * 0.55 : 2.3e9;
    }
    r.latency_ns = 100e3;
    return r;
}

}  // namespace strata::sim::cost_detail

namespace strata::sim {

namespace {
// A generic node's figures are for hw.node.gpus_per_node GPUs; the cluster may put more or fewer on a node.
double generic_share(const ClusterSpec& c, const hwdb::HardwareView& hw) {
    if (!hw.node.id.empty() || hw.node.gpus_per_node <= 0) return 1.0;
    return static_cast<double>(std::max(1, c.gpus_per_node)) / hw.node.gpus_per_node;
}
}  // namespace

double host_dram_bytes_per_node(const ClusterSpec& c, const hwdb::HardwareView& hw) {
    if (c.host_dram_bytes > 0) return c.host_dram_bytes;
    return hw.node.cpu_dram_bytes * generic_share(c, hw);
}

int ssd_drives_per_node(const ClusterSpec& c, const hwdb::HardwareView& hw) {
    if (c.ssds_per_node > 0) return c.ssds_per_node;
    if (hw.node.ssd_count <= 0) return 1;
    return std::max(1, static_cast<int>(std::lround(hw.node.ssd_count * generic_share(c, hw))));
}

}  // namespace strata::sim
