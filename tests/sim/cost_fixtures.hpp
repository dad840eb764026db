// Hand-built HardwareViews and ClusterSpecs for the cost tests (no database): an H100 DGX node and
// an A100 one, with the datasheet figures of hwdb-seed.json.
#pragma once
#include "strata/hwdb/view.hpp"
#include "strata/sim/cost.hpp"

namespace strata::sim::test {

inline hwdb::HardwareView h100_view() {
    hwdb::HardwareView v;
    v.gpu.id = "H100-SXM5-80GB";
    v.gpu.compute_capability = "9.0";  // persistent GEMM kernels (compute.cpp)
    v.gpu.sm_count = 132;
    v.gpu.hbm_bytes = 80e9;
    v.gpu.hbm_Bps = 3.35e12;
    v.gpu.peak_flops = {67e12, 494.5e12, 989e12, 989e12, 1979e12};
    v.gpu.scale_up_per_dir_Bps = 450e9;
    v.scale_up.id = "nvlink4";
    v.scale_up.achievable_fraction = 0.82;
    v.scale_up.latency_ns = 1500;
    v.host.id = "pcie5-x16";
    v.host.per_dir_Bps = 63e9;
    v.host.achievable_Bps = 53e9;
    v.nic.id = "ib-ndr";
    v.nic.per_dir_Bps = 50e9;
    v.nic.achievable_Bps = 47e9;
    v.nic.latency_ns = 1000;
    v.node.id = "DGX-H100";
    v.node.gpus_per_node = 8;
    v.node.nic_count = 8;
    v.node.h2d_per_gpu_Bps = 50e9;
    v.node.cpu_dram_bytes = 2048e9;
    v.node.ssd_count = 8;
    v.node.ssd_aggregate_read_Bps = 40e9;
    v.ssd.seq_read_Bps = 7e9;
    v.ssd.seq_write_Bps = 3.8e9;
    v.cpu.cores = 112;
    v.cpu.dram_Bps = 400e9;
    return v;
}

inline hwdb::HardwareView a100_view() {
    hwdb::HardwareView v = h100_view();
    v.gpu.id = "A100-SXM4-80GB";
    v.gpu.compute_capability = "8.0";
    v.gpu.sm_count = 108;
    v.gpu.hbm_Bps = 2.039e12;
    v.gpu.peak_flops = {19.5e12, 156e12, 312e12, 312e12, 0};
    v.gpu.scale_up_per_dir_Bps = 300e9;
    v.scale_up.achievable_fraction = 0.8;
    return v;
}

inline ClusterSpec dgx_cluster(int nodes) {
    ClusterSpec c;
    c.gpu = "H100-SXM5-80GB";
    c.nodes = nodes;
    c.gpus_per_node = 8;
    c.nics_per_node = 8;
    return c;
}

inline Instr gemm(std::int64_t m, std::int64_t n, std::int64_t k, DType d = DType::bf16) {
    Instr in;
    in.kind = InstrKind::compute;
    in.op = Op::gemm;
    in.m = m, in.n = n, in.k = k;
    in.dtype = d;
    in.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
    return in;
}

inline Instr collective(CollKind k, Group g, int n, double bytes) {
    Instr in;
    in.kind = InstrKind::collective;
    in.coll = k;
    in.group = g;
    in.group_size = n;
    in.bytes = bytes;
    return in;
}

inline double busy(const Demand& d, LinkClass c) { return d.busy_s[static_cast<std::size_t>(c)]; }

}  // namespace strata::sim::test
