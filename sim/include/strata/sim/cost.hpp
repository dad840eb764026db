// Cost models: pure functions from one instruction and a HardwareView to what it costs, with the
// provenance of the figure (measured, fitted, datasheet). No state, no I/O.
//
// Contract with the engine: compute kernels get a duration. Data movement (collectives, p2p,
// copies, CPU optimizer) gets a Demand: a fixed latency plus, for each class of resource it
// crosses, the seconds it would keep that resource busy if it ran alone ("busy_s"). The engine
// maps each class to concrete shared resources of the topology (this GPU's NVLink port, the NIC
// of its rail, its PCIe switch, the node's DRAM/SSD, the spine) and shares each resource max-min
// fairly: a resource is a unit of "busy seconds per second", so two equal flows on one link each
// progress at half speed. A demand's own speed limit is 1 / max(busy_s).
#pragma once
#include <array>
#include <cstdint>

#include "strata/hwdb/view.hpp"
#include "strata/lowering/groups.hpp"
#include "strata/lowering/program.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::sim {

/// Classes of shared resources a data movement can occupy.
enum class LinkClass : std::uint8_t {
    nvlink,      ///< the GPU's scale-up port (NVLink/NVSwitch; PCIe peer-to-peer when none)
    nic,         ///< the NIC on the GPU's rail (shared when NICs < GPUs per node)
    spine,       ///< leaf uplinks of a fat tree (shared by the leaf; oversubscription)
    pcie_h2d,    ///< host -> GPU over the GPU's PCIe switch (shared by gpus_per_pcie_switch GPUs)
    pcie_d2h,    ///< GPU -> host
    host_mem,    ///< node DRAM bandwidth (shared by the node)
    ssd_read,    ///< node NVMe array, reads
    ssd_write,   ///< node NVMe array, writes
    cpu,         ///< node CPU cores (CPU Adam)
    count
};
constexpr int kLinkClassCount = static_cast<int>(LinkClass::count);
const char* to_string(LinkClass);

struct Estimate {
    std::int64_t duration_ns = 0;
    hwdb::Provenance provenance = hwdb::Provenance::datasheet;
};

struct Demand {
    std::int64_t latency_ns = 0;                   ///< fixed part (alpha), before data flows
    std::array<double, kLinkClassCount> busy_s{};  ///< seconds each resource class is busy if alone
    hwdb::Provenance provenance = hwdb::Provenance::datasheet;
    /// Duration when nothing else shares its resources.
    std::int64_t alone_ns() const;
};

/// Duration multipliers fitted on the training half of the fidelity suite (bench/fidelity); 1 = the
/// uncalibrated models. A value > 1 makes that class of work slower. Never tuned per entry; the
/// suite fits one set per GPU architecture (docs/fidelity.md).
struct Calibration {
    double gemm = 1.0;          ///< GEMM kernels in fp32/tf32/fp16/bf16
    double gemm_fp8 = 1.0;      ///< FP8 GEMM kernels (their scaling, casts and transposes ride along)
    double attention = 1.0;     ///< attention core kernels
    double memory_bound = 1.0;  ///< norms, element-wise, embedding, loss, GPU optimizer
    double collective = 1.0;    ///< collectives (latency and busy time)
    double p2p = 1.0;           ///< pipeline send/recv
    /// Not a multiplier: compute kernels that start while a transfer of their rank is in flight run
    /// (1 + overlap) times longer (EngineOptions::overlap_slowdown). 0 = ideal overlap.
    double overlap = 0.0;
    /// Not a multiplier: host time per kernel launch in microseconds (EngineOptions::host_launch_ns,
    /// the host issue model). 0 = the host is never the bottleneck.
    double host_launch_us = 0.0;

    static constexpr int kFactors = 6;  ///< the multipliers above (overlap and host_launch_us are fitted separately)
    /// The factors by index, in the order above (fits iterate over them).
    double& at(int i);
    double at(int i) const;
    static const char* name(int i);  ///< "gemm", "gemm_fp8", ...
    bool is_identity() const;
};

/// How much longer a layer's norms and elementwise ops take when a framework runs them as eager
/// PyTorch kernels (plan.eager_elementwise) than the fused figure the cost model gives. Measured,
/// not fitted: an MPT 7B layer as llm-foundry runs it (native LayerNorm, GELU, 6 x 2048 tokens,
/// forward + backward) spent 3.57 ms in such kernels on an H100 against the model's fused 1.55 ms
/// (docs/validation-gpu.md): the extra passes are autograd's gradient adds, the concatenation of
/// the q/k/v gradients, layout copies and unfused activation backward.
inline constexpr double kEagerElementwiseFactor = 2.3;

/// Kernel launches the host issues for one instruction (EngineOptions::host_launch_ns): a batched
/// (grouped-expert) GEMM launches one GEMM per batch entry, as Transformer Engine's GroupedLinear
/// does, and FP8 adds one quantisation kernel per GEMM; the MoE router is about 8 small kernels
/// (softmax, top-k, scatter, the auxiliary loss); every other kernel, collective, p2p, copy and
/// CPU optimizer step is one. record, wait, alloc, free and host_sync cost the host nothing here.
int host_launches(const Instr& in);

/// What the cost models need to know about the job beyond the instruction.
struct CostContext {
    const hwdb::HardwareView* hw = nullptr;
    const ClusterSpec* cluster = nullptr;
    const PlanSpec* plan = nullptr;
    double gpu_slowdown = 1.0;   ///< full mode: straggler factor of this rank's GPU
    const Program* program = nullptr;  ///< optional: lets p2p see whether its peer shares the node
    int rank = -1;                     ///< index of this RankProgram in `program` (-1: unknown)
    Calibration calibration;           ///< applied by compute_cost / transfer_demand
    /// The Program runs on Strata's own runtime (`strata validate`), not on a framework: attention
    /// and memory-bound kernels are priced by the runtime's own where hwdb has them timed.
    bool runtime_kernels = false;
};

/// Kernels: GEMM (efficiency by m,n,k,dtype: measured grid where hwdb has it, else a size-aware
/// default curve), attention, memory-bound ops (bytes / HBM bandwidth), GPU optimizer.
Estimate compute_cost(const Instr& in, const CostContext& ctx);

/// Collectives (alpha-beta with nccl-tests' bus factors; hierarchical across nodes), p2p, copies
/// (H2D/D2H/SSD) and the CPU optimizer step.
Demand transfer_demand(const Instr& in, const CostContext& ctx);

/// A node's host DRAM and SSD drives: the cluster's figures, else its hwdb node's; a generic node
/// (the cluster names none) scales its per-GPU figures to the cluster's gpus_per_node.
double host_dram_bytes_per_node(const ClusterSpec& c, const hwdb::HardwareView& hw);
int ssd_drives_per_node(const ClusterSpec& c, const hwdb::HardwareView& hw);

/// nccl-tests' bus-bandwidth factor for a collective over n ranks: all-reduce 2(n-1)/n,
/// all-gather/reduce-scatter/all-to-all (n-1)/n, broadcast 1.
double bus_factor(CollKind k, int n);

}  // namespace strata::sim
