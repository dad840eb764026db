// HardwareView: everything the simulator's cost models may know about one cluster's hardware, as a
// plain value. Built once from the database (Database::view) so sim/ never touches SQL or files.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/hwdb/types.hpp"

namespace strata::hwdb {

/// A measured GEMM efficiency point: achieved / datasheet peak for one shape and dtype.
struct GemmPoint {
    std::int64_t m = 0, n = 0, k = 0;
    Dtype dtype = Dtype::bf16;
    double efficiency = 0;
    bool plan = false;  ///< timed at a plan's own shape (`strata validate`); wins over a grid point
};

/// Achieved TFLOP/s of attention (forward or backward) at one (seq, head_dim, causal).
struct AttentionPoint {
    std::int64_t seq = 0, head_dim = 0;
    bool causal = true, backward = false;
    Dtype dtype = Dtype::bf16;
    double flops_per_s = 0;
    std::int64_t batch_heads = 0;  ///< sequences x query heads it was timed at (0: not recorded)
    bool plan = false;             ///< timed at a plan's own shape; wins over a grid point
    bool runtime = false;          ///< Strata's runtime's own kernel (impl "strata-runtime"), not a framework's
    /// The cuda profile's unfused floor (impl "unfused": cuBLASLt GEMMs over the full square and a
    /// softmax kernel): not what a fused kernel achieves, so it never prices one.
    bool unfused = false;
};

/// Alpha-beta collective model: t = alpha_ns + bytes * factor(n) / busbw_Bps (nccl-tests' busbw).
struct CollectiveFit {
    std::string collective;  ///< all_reduce, all_gather, reduce_scatter, all_to_all, send_recv, broadcast
    std::string scope;       ///< "intra" (one node) or "inter" (across nodes)
    int group = 0;           ///< ranks in the group
    double alpha_ns = 0;
    double busbw_Bps = 0;
    Provenance provenance = Provenance::fitted;
};

/// A bandwidth with a fixed latency: t = latency_ns + bytes / Bps.
struct BandwidthFit {
    double latency_ns = 0;
    double Bps = 0;
    Provenance provenance = Provenance::datasheet;
};

struct HardwareView {
    Gpu gpu;
    Node node;
    Link scale_up;     ///< NVLink/NVSwitch (or PCIe when none)
    Link host;         ///< GPU <-> host PCIe
    Link nic;          ///< one NIC
    Ssd ssd;
    Cpu cpu;

    // Measured/fitted figures (empty when the database has none for this GPU).
    std::vector<GemmPoint> gemm_points;
    std::vector<AttentionPoint> attention_points;
    std::vector<CollectiveFit> collectives;
    std::optional<BandwidthFit> hbm;             ///< achieved HBM bandwidth of memory-bound kernels
    /// The memory-bound kernels themselves, where they were measured and differ from raw bandwidth
    /// (the cpu backend's, bound by arithmetic): their achieved rate, bytes as the lowering counts
    /// them (fit key "kernel/runtime"). The memory-bound cost prefers it to hbm.
    std::optional<BandwidthFit> memory_bound;
    /// Likewise the GPU-side optimizer kernel (fit key "kernel/runtime_adam"; bytes as the lowering
    /// charges Op::optimizer_gpu). The optimizer's cost prefers it to memory_bound and hbm.
    std::optional<BandwidthFit> optimizer_kernel;
    /// On a GPU, Strata's own runtime's kernels (fit keys "kernel/runtime_fp32",
    /// "kernel/runtime_adam_fp32", "kernel/runtime_bf16"): they price fp32 instructions (only the
    /// runtime runs those on a GPU), and bf16 ones where the cost model is told the runtime runs
    /// the Program (CostContext::runtime_kernels); frameworks' bf16 kernels keep hbm.
    std::optional<BandwidthFit> memory_bound_fp32, optimizer_kernel_fp32, memory_bound_bf16;
    std::optional<BandwidthFit> h2d, d2h;        ///< pinned copies
    std::optional<BandwidthFit> ssd_read, ssd_write;
    std::optional<double> cpu_adam_params_per_s;
    std::optional<BandwidthFit> host_dram;       ///< measured host memory bandwidth (read + write), all cores
    std::int64_t measured_run = 0;               ///< newest run the measured figures come from (0 = none)
    std::string measured_device;                 ///< the GPU id those measurements were taken on
};

}  // namespace strata::hwdb
