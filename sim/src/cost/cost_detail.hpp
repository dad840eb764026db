// Shared helpers of the cost models (private to sim/src/cost): achieved bandwidths of each link
// class with their provenance, and the small anchor tables. Not a public API: the engine and the
// tests see only cost.hpp.
#pragma once
#include <cstdint>
#include <string>

#include "strata/hwdb/view.hpp"
#include "strata/sim/cost.hpp"

namespace strata::sim::cost_detail {

/// A bandwidth with its fixed latency and where the figure came from.
struct Rate {
    double Bps = 0;
    double latency_ns = 0;
    hwdb::Provenance provenance = hwdb::Provenance::datasheet;
};

/// Per-kernel launch overhead added to memory-bound kernels: between the ~1 us GPU-side gap of
/// back-to-back async kernels and the 4.9 us host launch cost measured from C
/// (JuliaGPU/CUDAdrv.jl PR #15).
constexpr double kLaunchOverheadNs = 3000.0;
/// Fraction of datasheet HBM bandwidth that streaming kernels reach when the view has no
/// measurement: A100-40GB memcopy 1355 of 1555 GB/s = 0.87 (PTsolvers/gpu-workshop-JuliaCon23 #7).
constexpr double kHbmFraction = 0.87;

/// Achieved HBM bandwidth of memory-bound kernels (measured fit, else datasheet x kHbmFraction).
Rate hbm_rate(const hwdb::HardwareView& hw);
/// Per-GPU, per-direction scale-up bandwidth an application reaches (NVLink; PCIe when none).
Rate scale_up_rate(const hwdb::HardwareView& hw);
/// One NIC, one direction, achievable.
Rate nic_rate(const hwdb::HardwareView& hw, const ClusterSpec& c);
int nics_per_node(const hwdb::HardwareView& hw, const ClusterSpec& c);
/// Pinned host<->GPU copies of one GPU.
Rate h2d_rate(const hwdb::HardwareView& hw);
Rate d2h_rate(const hwdb::HardwareView& hw);
/// Node DRAM bandwidth (STREAM-like, all sockets).
Rate dram_rate(const hwdb::HardwareView& hw);
/// The node's NVMe array.
Rate ssd_read_rate(const hwdb::HardwareView& hw, const ClusterSpec& c);
Rate ssd_write_rate(const hwdb::HardwareView& hw, const ClusterSpec& c);

/// Bytes of node DRAM traffic per parameter of a CPU Adam step (see docs/costs.md):
/// read fp32 param, m, v, grad (16) + write param, m, v (12) + write the bf16 copy (2) = 30.
constexpr double kCpuAdamBytesPerParam = 30.0;
/// The same in the profiler's fp32 AdamW benchmark: read p, g, m, v (16), write p, m, v (12).
constexpr double kCpuAdamBenchBytesPerParam = 28.0;

inline std::int64_t to_ns(double seconds) {
    if (!(seconds > 0)) return 0;
    return static_cast<std::int64_t>(seconds * 1e9 + 0.5);
}

}  // namespace strata::sim::cost_detail
