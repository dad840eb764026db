// The runtime: executes a lowered Program on real numbers, so every prediction of the simulator
// can be checked against a measurement of the very same instructions. It keeps no schedule of its
// own: each rank walks its RankProgram's streams with the engine's Record/Wait semantics, and the
// Program's dataflow (lower.hpp, LowerOptions::dataflow) says what each instruction reads and
// writes. Backends: cpu (ranks as threads, fp32 Eigen kernels, an in-process transport) and, on a
// machine with a GPU, cuda; `emulated` runs the cuda backend's executor path over the cpu kernels
// (no GPU), so that CI checks that path. Design: docs/runtime.md.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/common/error.hpp"
#include "strata/lowering/program.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::runtime {

/// emulated: the executor's cuda path (device buffers, lanes, the cuda backend's rules) on an
/// in-process device whose kernels are the cpu backend's (runtime/src/device_emulated.cpp).
enum class Backend { cpu, cuda, emulated };
const char* to_string(Backend);

/// Where the token stream comes from.
struct DataOptions {
    std::string text_path;      ///< a byte-level text file (vocab >= 256); empty: the synthetic stream
    std::uint64_t seed = 1234;  ///< synthetic stream and sample order
    bool fixed_batch = false;   ///< every step trains on the first step's samples (gradient checks)
};

struct RunOptions {
    Backend backend = Backend::cpu;
    int steps = 10;
    // AdamW (fp32 master weights), constant learning rate after a linear warm-up; weight decay on
    // matrices only. No gradient clipping (its global norm is not an instruction of the Program).
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
    int warmup_steps = 0;
    /// Multi-token prediction (model.mtp_depth): the modules' losses join the objective as
    /// mtp_loss_scale / depth times their sum (Megatron-Core's --mtp-loss-scaling-factor, 0.1).
    double mtp_loss_scale = 0.1;
    /// fp16 plans: Megatron's dynamic loss scaling (--initial-loss-scale 2^32, --loss-scale-window
    /// 1000, --hysteresis 2, --min-loss-scale 1): the loss is scaled up before the backward; a step
    /// whose gradients overflow is skipped, and after `hysteresis` overflows the scale halves; after
    /// `loss_scale_window` clean steps it doubles.
    double initial_loss_scale = 4294967296.0, min_loss_scale = 1.0;
    int loss_scale_window = 1000, hysteresis = 2;
    std::uint64_t seed = 42;    ///< parameter initialisation (independent of the parallel split)
    DataOptions data;
    std::string resume_dir;     ///< checkpoint to continue from ("" = fresh)
    std::string ssd_dir;        ///< where the ssd tier's files go ("" = a temporary directory)
    /// Capacities checked before anything is allocated and enforced while running: per rank for
    /// the gpu tier, per node for cpu and ssd (bytes; 0 = unlimited).
    std::array<double, sim::kTierCount> capacity_bytes{};
    bool check_fit = true;      ///< refuse a plan the analytical memory model says cannot fit
    bool record_spans = false;  ///< per-instruction timestamps and memory samples of every step
    /// Walk the dataflow without running it: every tensor is charged to its tier when written and
    /// released after its last read, as in a run, but nothing is allocated, computed or moved.
    /// The peaks per tier are a real run's, in seconds, for a plan this machine could not hold
    /// (pipeline transfers still meet their peers, with no data).
    bool memory_only = false;
    /// A memory walk goes through a representative set of ranks (every pipeline stage, TP and CP
    /// rank, and the first data-parallel replicas, enough to fill a node: the others differ only
    /// in which ZeRO slice or experts they hold), so a plan of thousands of GPUs walks in seconds.
    /// true: every rank.
    bool walk_all_ranks = false;
    double peak_flops_per_rank = 0;  ///< for MFU (0: not reported)
    /// > 0: record what each rank held on its GPU when its peak was reached, its `peak_detail`
    /// largest holdings (Session::peak_details): where a plan's memory goes, value by value.
    int peak_detail = 0;
    /// A plan of several ranks on a device backend. false: rank r on GPU r of this machine, their
    /// collectives and pipeline transfers through NCCL communicators (on the emulated backend, a
    /// device each and the communicators' emulation). true: every rank on GPU 0, each with its own
    /// streams and allocator, the collectives and transfers staged through host memory (NCCL
    /// cannot put two ranks on one GPU). Right numbers, not NCCL's times: a correctness check on
    /// one GPU.
    bool ranks_share_gpu = false;
    const std::atomic<bool>* stop = nullptr;  ///< set (e.g. by SIGINT) to stop between steps
};

/// One executed instruction: when it started and ended, relative to its step's start.
struct Span {
    int instr = 0;
    std::int64_t start_ns = 0, end_ns = 0;
};
struct MemorySample {
    sim::Tier tier = sim::Tier::gpu;
    std::int64_t time_ns = 0;
    double bytes = 0;  ///< in use on this rank's tier after the change
};
struct RankTrace {
    std::vector<Span> spans;
    std::vector<MemorySample> memory;
};

/// What one rank held on its GPU tier at its peak (RunOptions::peak_detail).
struct PeakHeld {
    std::string what;  ///< "weights", "gradients", "optimizer states", "gathered parameters", or a value: tensor, layer, micro-batch
    double bytes = 0;
};
struct PeakDetail {
    int rank = 0;                   ///< global rank (the first of those its program stands for)
    double bytes = 0;               ///< its GPU peak
    std::string at;                 ///< the instruction whose outputs reached it: name, phase, layer, micro-batch
    std::vector<PeakHeld> largest;  ///< the largest holdings then, largest first
    double values_bytes = 0;        ///< all the dataflow's values held then (activations, their gradients, transients)
};

struct StepReport {
    int step = 0;             ///< 1-based, counting resumed steps
    double loss = 0;          ///< mean cross-entropy over the step's tokens (nats)
    double mtp_loss = 0;      ///< MTP: the modules' mean cross-entropies, averaged over the modules (not in `loss`)
    double step_s = 0;
    double tokens_per_s = 0;
    double mfu = 0;           ///< 0 when RunOptions::peak_flops_per_rank is 0
    double loss_scale = 1;    ///< fp16: the scale this step's backward ran with (1 otherwise)
    bool skipped = false;     ///< fp16: its gradients overflowed and the update was skipped
    /// Most bytes in use at once this step: gpu per rank (the worst rank), cpu and ssd per node.
    std::array<double, sim::kTierCount> peak_bytes{};
};

/// A tier ran out: before the run (the analytical model says it cannot fit) or while running
/// (RunOptions::capacity_bytes, or the allocator itself). The message names the tier, the rank,
/// the instruction and the bytes.
struct OutOfMemory : RuntimeError {
    using RuntimeError::RuntimeError;
};

/// The cuda backend's causal attention timed on this machine's GPU 0 (the profiler stores it as
/// attention points of its dtype, fp32, so that the prediction of a plan this runtime executes
/// prices the kernel it runs): median seconds per call of `reps` after a warm-up, for `batch`
/// sequences of `seq` tokens and `heads` heads of `head_dim` (MHA). Throws RuntimeError without a
/// usable cuda backend.
struct AttentionTiming {
    double forward_s = 0, backward_s = 0;
};
/// dtype: the storage of Q, K, V and the output ("fp32", "bf16" or "fp16"), as a plan of that precision runs.
AttentionTiming time_cuda_attention(int batch, int seq, int heads, int head_dim, int reps, const std::string& dtype = "fp32");

/// The cuda backend's memory-bound kernels and AdamW timed on GPU 0, as the profiler's cpu
/// backend times the cpu kernels (profiler/src/runtime_bench.cpp): median seconds for one GPT
/// layer's memory-bound kernels, forward and backward (two norms, two residual adds, GELU; two
/// norm and bias gradients, GELU's), at `tokens` x `hidden` (ffn 4 hidden), and for one AdamW
/// over `adam_params` parameters (fp32 master, moments and gradients). bf16: the layer's
/// activations and weights in bf16 buffers, their gradients fp32, as a bf16 plan holds them.
/// Throws RuntimeError without a usable cuda backend.
struct KernelTiming {
    double layer_s = 0, adamw_s = 0;
};
KernelTiming time_cuda_kernels(int tokens, int hidden, std::int64_t adam_params, int reps, bool bf16 = false);

/// Why this runtime cannot execute (model, plan) on `backend`; empty when it can.
std::string unsupported(const sim::ModelSpec& m, const sim::PlanSpec& p, Backend backend, bool ranks_share_gpu = false);

/// A training run in progress: lowered, allocated, initialised (or resumed); steps on demand.
class Session {
public:
    /// Throws InputError for a model/plan the runtime cannot execute or a checkpoint that does not
    /// match, and OutOfMemory (before allocating anything) when the analytical memory model says
    /// a tier cannot hold the plan.
    Session(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& p, const RunOptions& o);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    /// One optimizer step over the global batch. Throws OutOfMemory if a tier fills up.
    StepReport step();
    int steps_done() const;
    /// Every rank's state (parameters, optimizer moments, step count) into `dir`; resumable.
    void save(const std::string& dir) const;

    const sim::Program& program() const;
    /// Spans and memory samples of the last step (RunOptions::record_spans), per RankProgram.
    const std::vector<RankTrace>& traces() const;
    /// Peak bytes over all steps so far (as StepReport::peak_bytes).
    std::array<double, sim::kTierCount> peak_bytes() const;
    /// Per rank program, what it held at its GPU peak over all steps so far (empty unless
    /// RunOptions::peak_detail > 0), the largest peak first.
    std::vector<PeakDetail> peak_details() const;
    /// The cuda backend's device memory at its most: every block its allocator took from the
    /// driver (cached ones too) and the kernels' workspace (attention scores), not the CUDA
    /// context. 0 on the cpu backend.
    double device_reserved_peak_bytes() const;

    // For tests: one element of a parameter (name and layer as params.hpp lays them out), or of
    // its accumulated gradient, as held by global rank `rank`; `index` counts within the rank's piece.
    float param(int rank, const std::string& name, int layer, std::int64_t index) const;
    void set_param(int rank, const std::string& name, int layer, std::int64_t index, float value);
    float grad(int rank, const std::string& name, int layer, std::int64_t index) const;
    std::int64_t param_elements(int rank, const std::string& name, int layer) const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace strata::runtime
