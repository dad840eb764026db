// Goodput: the share of wall-clock time a training run spends on steps it keeps, once checkpoint
// writes, failures, restarts and the work lost to each failure are counted (docs/planner.md,
// "Goodput"). Closed forms, no simulation; the defaults come from published large runs.
#pragma once
#include "strata/hwdb/view.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::planner {

/// Meta, "The Llama 3 Herd of Models" (arXiv:2407.21783, Sec. 3.3.4): 419 unexpected interruptions
/// in a 54-day snapshot of Llama 3 405B pre-training on 16,384 H100 GPUs, i.e.
/// 419 / (54 x 24 h x 16,384 GPUs) = 1.973e-5 interruptions per GPU-hour.
inline constexpr double kLlama3Interruptions = 419;
inline constexpr double kLlama3Days = 54;
inline constexpr double kLlama3Gpus = 16384;
inline constexpr double kDefaultInterruptionsPerGpuHour = kLlama3Interruptions / (kLlama3Days * 24.0 * kLlama3Gpus);
/// Detect the failure, drain and reschedule, re-initialise NCCL and reload the checkpoint. Not a
/// published figure (the Llama 3 paper reports > 90 % effective training time, not a restart
/// time): an assumption to override with the cluster's `restart_s`.
inline constexpr double kDefaultRestartS = 600;

/// Where neither the cluster names a file system nor the node has SSDs: the per-GPU share of Llama 3's
/// storage, Tectonic, 2 TB/s sustained for 16,384 GPUs (arXiv:2407.21783, Sec. 3.3.1), times the job's GPUs.
inline constexpr double kLlama3StorageBps = 2e12;
inline constexpr double kDefaultCheckpointBpsPerGpu = kLlama3StorageBps / kLlama3Gpus;

/// Bytes a checkpoint holds: every parameter once, with its optimizer state (weights in the plan's
/// precision, the fp32 master copy under mixed precision, Adam's two moments in their dtypes);
/// gradients and activations are not saved.
double checkpoint_bytes(const sim::ModelSpec& m, const sim::PlanSpec& p);

/// What the run's figures are built from, all resolved (cluster overrides or defaults).
struct GoodputInputs {
    double work_s = 0;                     ///< failure-free training time (tokens / tokens_per_s); > 0
    int gpus = 1;
    double interruptions_per_gpu_hour = kDefaultInterruptionsPerGpuHour;
    double restart_s = kDefaultRestartS;
    double checkpoint_bytes = 0;           ///< checkpoint_bytes() of the plan
    double checkpoint_write_s = 0;         ///< time to write one checkpoint to its storage
    double checkpoint_stall_s = 0;         ///< training time a checkpoint costs (sync: the write; async: the copy to host)
    bool async = false;
    double interval_s = 0;                 ///< work between checkpoints; 0 = Young/Daly
    const char* storage = "";              ///< where checkpoints go: "file system", "node SSDs", "Llama 3 share"
};

struct Goodput {
    double mtbf_s = 0;             ///< job-level mean time between interruptions (inf without failures)
    double interval_s = 0;         ///< work between checkpoints used
    double checkpoints = 0;        ///< work_s / interval_s
    double failures = 0;           ///< expected interruptions over the wall time
    double lost_per_failure_s = 0; ///< expected work redone after one interruption
    double checkpoint_s = 0;       ///< all checkpoint stalls
    double restart_total_s = 0;    ///< failures x restart_s
    double lost_total_s = 0;       ///< failures x lost_per_failure_s
    double wall_s = 0;             ///< work + checkpoints + restarts + lost work
    double goodput = 1;            ///< work_s / wall_s
    bool converges = true;         ///< false: a failure comes sooner than a restart plus its lost work
};

/// Young's first-order optimal interval, sqrt(2 C M) (J. W. Young, CACM 17(9), 1974), for a
/// checkpoint that stalls training C seconds and a mean time between failures M; with an
/// asynchronous checkpoint at least the write time W (one write at a time). Infinite M: +inf.
double young_daly_interval_s(double stall_s, double mtbf_s, double write_s = 0);

/// Expected work redone after one failure with checkpoints every `interval_s` of work: half an
/// interval, plus (sync) half a stall, the failure falling uniformly in interval + stall; async:
/// the last finished checkpoint lags by its write, so interval / 2 + write_s.
double expected_lost_work_s(double interval_s, double stall_s, double write_s, bool async);

/// wall = (work + checkpoints x stall) / (1 - lambda (restart + lost)), lambda = GPUs x rate: the
/// failures are a Poisson process over the wall time, each costing a restart and its lost work.
Goodput goodput(const GoodputInputs& in);

/// The inputs for one plan on one cluster: checkpoint size from the plan, bandwidth from the
/// cluster's `checkpoint_gbyte_per_s` or else every node writing to its own SSDs at once (hwdb's
/// measured write fit where there is one, else the datasheet's sequential write), else
/// kDefaultCheckpointBpsPerGpu x GPUs; async stalls for a GPU's share copied to host memory over
/// its PCIe link.
GoodputInputs goodput_inputs(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& p,
                             const hwdb::HardwareView& hw, double work_s);

}  // namespace strata::planner
