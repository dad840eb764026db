// Analytical per-rank memory of a training plan: model states (ZeRO paper), activations
// (Korthikanti et al.) times the micro-batches each pipeline schedule keeps in flight, buffers and
// a fixed framework reserve, placed on tiers (GPU HBM, host DRAM, SSD) by plan.offload. Closed
// form, no simulation; capacities come in as plain numbers so this header stays free of hwdb.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "strata/lowering/spec.hpp"
#include "strata/lowering/tensors.hpp"

namespace strata::sim {

/// HBM a process loses before it allocates anything: the CUDA context with cuBLAS/cuDNN kernel
/// images (PyTorch reports ~0.5-1 GB on A100/H100; we take 0.75 GB) plus NCCL's communicator
/// buffers (Fujii et al., arXiv 2411.06465, budget ~0.5 GB per communicator; one counted here).
inline constexpr double kCudaContextBytes = 0.75e9;
inline constexpr double kNcclBuffersBytes = 0.5e9;
inline constexpr double kFrameworkReserveBytes = kCudaContextBytes + kNcclBuffersBytes;
/// Capacity of one data-centre NVMe drive when the cluster does not say (hwdb's Ssd has no
/// capacity field): 3.84 TB, the size DGX A100/H100 ship with.
inline constexpr double kDefaultSsdDriveBytes = 3.84e12;

/// What the hardware offers, per GPU (HBM) and per node (host DRAM, SSD).
struct Capacities {
    double hbm_bytes = 0;           ///< one GPU
    double cpu_bytes_per_node = 0;  ///< host DRAM of one node
    double ssd_bytes_per_node = 0;  ///< all SSDs of one node
    int gpus_per_node = 8;
};

/// One rank of one pipeline stage (all ranks of a stage hold the same bytes).
struct StageMemory {
    int stage = 0;
    int layers = 0;
    double in_flight_microbatches = 0;  ///< micro-batch equivalents of activations held at peak
    double weights_bytes = 0, grads_bytes = 0, optimizer_bytes = 0;
    double activations_bytes = 0;       ///< stashed activations at the schedule's peak
    /// transient peak of a backward beside what is summed above: a layer's workspace, or the head's
    /// less the buffers only the layers' backward holds (layers_backward_gpu_bytes)
    double workspace_bytes = 0;
    double buffers_bytes = 0;           ///< DP buckets, ZeRO-3 gathers, p2p, framework reserve
    /// Of the GPU's buffers, those only the layers' backward holds (Lifetime::layers_backward): the
    /// head's backward, which runs before it, is not summed with them.
    double layers_backward_gpu_bytes = 0;
    /// Of the GPU's buffers, those from the head's weight gradient on (Lifetime::after_loss): not
    /// beside the loss's stashed logits, which go first.
    double after_loss_gpu_bytes = 0;
    std::array<double, kTierCount> tier_bytes{};  ///< per rank on gpu / cpu / ssd
    double total_bytes() const { return tier_bytes[0] + tier_bytes[1] + tier_bytes[2]; }
};

struct MemoryReport {
    std::vector<StageMemory> stages;
    int worst_hbm_stage = 0;     ///< stage with the largest per-GPU HBM use
    double hbm_bytes = 0;        ///< per GPU, worst stage
    double cpu_bytes = 0;        ///< per node (sum over the node's GPUs), worst node
    double ssd_bytes = 0;        ///< per node, worst node
    Capacities capacities;
    bool fits_hbm = true, fits_cpu = true, fits_ssd = true;
    bool fits() const { return fits_hbm && fits_cpu && fits_ssd; }
};

/// Micro-batch equivalents of activations stage `stage` holds at its peak: GPipe m; 1F1B
/// min(pp - stage, m); interleaved 1F1B (warm-up chunks + 1) / vpp, capped at m (docs/formulas.md).
double in_flight_microbatches(const PlanSpec& p, int stage);

/// Per-rank memory of every stage and the verdict against the capacities.
MemoryReport memory_estimate(const ModelSpec& m, const PlanSpec& p, const Capacities& caps);

/// Memo for callers that estimate many plans of ONE model (the planner): per-layer activation
/// bytes by layer shape and per-stage model-state/buffer lists by layout, so each is built once.
/// Results are identical to the uncached call. Not thread-safe; one per thread.
class MemoryCache {
public:
    MemoryCache();
    ~MemoryCache();
    MemoryCache(const MemoryCache&) = delete;
    MemoryCache& operator=(const MemoryCache&) = delete;
    struct Impl;
    Impl& impl() { return *impl_; }

private:
    std::unique_ptr<Impl> impl_;
};
MemoryReport memory_estimate(const ModelSpec& m, const PlanSpec& p, const Capacities& caps, MemoryCache* cache);

/// Canonical JSON of a report (fixed key order, bytes as integers).
std::string to_json_text(const MemoryReport& r);

}  // namespace strata::sim
