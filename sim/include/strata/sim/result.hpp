// What one simulated training step produced: step time, per-rank stream busy time, pipeline bubble,
// exposed communication, memory peaks and OOMs per tier, resource utilisation, cost provenance and
// the critical path; plus the deterministic JSON writer. Job-level figures (tokens/s, MFU) are
// computed by the caller (simulate.hpp) and passed in through JobFigures.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "strata/common/text.hpp"
#include "strata/sim/cost.hpp"
#include "strata/lowering/program.hpp"
#include "strata/lowering/spec.hpp"
#include "strata/lowering/tensors.hpp"

namespace strata::sim {

using TagBytes = std::array<double, kTensorTagCount>;

/// Per RankProgram figures. Idle time of the compute stream is split exactly into
/// exposed_comm_ns + exposed_copy_ns + host_wait_ns + bubble_ns (see docs/engine.md, "Bubble and
/// exposed comm").
struct RankStats {
    int id = 0;
    int pp_stage = 0;
    int node = 0;
    std::int64_t multiplicity = 1;
    std::array<std::int64_t, kStreamCount> busy_ns{};  ///< time each stream spent executing (not waiting)
    std::int64_t compute_idle_ns = 0;    ///< step_time - compute kernels' time on the compute stream
    std::int64_t exposed_comm_ns = 0;    ///< compute stream waiting on collectives / p2p data in flight
    std::int64_t exposed_copy_ns = 0;    ///< compute stream waiting on copies (h2d, d2h, ssd) or CPU optimizer
    std::int64_t host_wait_ns = 0;       ///< compute kernels ready on the GPU but not yet issued by the host
    std::int64_t bubble_ns = 0;          ///< the rest of the idle time: pipeline dependencies
    std::array<double, kTierCount> peak_bytes{};        ///< gpu: this GPU; cpu/ssd: its node's pool
    std::array<TagBytes, kTierCount> peak_breakdown{};  ///< by TensorTag at that peak (allocated bytes)
    /// With the caching-allocator replay, peak_bytes[gpu] is what its segments reserved at most
    /// (nvidia-smi's view) and this is the most its blocks held at once (max_memory_allocated);
    /// without it the two are the same.
    double gpu_peak_allocated_bytes = 0;
    std::int64_t gpu_cache_flushes = 0;  ///< times the replay emptied its cache to make room
    std::array<double, kTierCount> capacity_bytes{};
};

struct OomRecord {
    std::int64_t time_ns = 0;
    Tier tier = Tier::gpu;
    int rank = 0;          ///< RankProgram id that allocated
    int node = 0;
    int instr = 0;         ///< index into that RankProgram's instrs
    std::string name;      ///< the instruction's label
    double request_bytes = 0;   ///< as charged (after allocator rounding)
    double in_use_bytes = 0;    ///< after the allocation
    double capacity_bytes = 0;
    TagBytes breakdown{};       ///< in use by tag after the allocation
};

struct ResourceUtil {
    std::string name;
    LinkClass cls = LinkClass::nvlink;
    double busy_s = 0;        ///< integral of the resource's load over the step
    double utilisation = 0;   ///< busy_s / step time
};

/// One group of the critical path: time the path spends in (rank, stream, label).
struct CriticalSegment {
    int rank = 0;
    int pp_stage = 0;
    Stream stream = Stream::compute;
    std::string label;       ///< op or collective kind, e.g. "gemm", "reduce_scatter(dp)"
    std::string link;        ///< transfers: the class whose busy time dominates ("" for compute)
    std::int64_t duration_ns = 0;
    double share = 0;        ///< of the path length
};

/// One instruction of the critical path: `rank` indexes Program::ranks, `instr` that rank's instrs.
struct CriticalStep {
    int rank = 0;
    int instr = 0;
};

struct CriticalPath {
    std::int64_t length_ns = 0;
    std::string summary;                    ///< one readable line
    std::vector<CriticalSegment> segments;  ///< sorted by duration, largest first
    /// The instructions on the path that took time, in time order (a timeline highlights them).
    std::vector<CriticalStep> steps;
};

/// A span of the timeline, kept only when EngineOptions::record_trace is set.
struct TraceSpan {
    int rank = 0;
    int instr = 0;
    std::int64_t start_ns = 0, end_ns = 0;
    std::int8_t provenance = -1;   ///< hwdb::Provenance of the instruction's cost (-1: none)
};
/// A memory counter sample (pool use after an alloc/free), kept only with record_trace.
struct MemorySample {
    int rank = 0;   ///< the RankProgram that changed it
    Tier tier = Tier::gpu;
    int node = 0;
    std::int64_t time_ns = 0;
    double bytes = 0;
};

/// The one readable line of a critical path: its heaviest streams (summed over stages), each with
/// the stages it spans and its heaviest label, then what the path leaves unexplained.
std::string critical_path_summary(const std::vector<CriticalSegment>& segments, std::int64_t step_time_ns, std::int64_t length_ns);

struct SimResult {
    std::int64_t step_time_ns = 0;
    std::vector<RankStats> ranks;
    double bubble_fraction = 0;          ///< mean over ranks with compute work of bubble_ns / step
    std::int64_t exposed_comm_ns = 0;    ///< mean over those ranks
    std::int64_t exposed_copy_ns = 0;    ///< mean over those ranks
    std::int64_t host_wait_ns = 0;       ///< mean over those ranks (EngineOptions::host_launch_ns)
    std::array<double, kTierCount> peak_bytes_max{};  ///< max over ranks
    bool oom = false;
    std::vector<OomRecord> ooms;         ///< first excursion past capacity of each pool, every time
    std::int64_t oom_count = 0;          ///< may exceed ooms.size() when the list was capped
    std::vector<ResourceUtil> utilisation;
    std::array<std::int64_t, 3> provenance_counts{};  ///< indexed by hwdb::Provenance
    std::int64_t instructions = 0;       ///< instructions executed
    std::int64_t flows = 0;              ///< shared-resource flows simulated
    bool deadlock = false;               ///< some stream never finished (bad program)
    std::string deadlock_detail;
    CriticalPath critical_path;
    std::vector<TraceSpan> spans;
    std::vector<MemorySample> memory_samples;

    double step_time_s() const { return static_cast<double>(step_time_ns) * 1e-9; }
};

/// Figures of the whole job that the caller derives from the step time.
struct JobFigures {
    double tokens_per_s = 0;
    double tflops_per_gpu = 0;
    double mfu = 0;
    std::string model, cluster, plan;
    Calibration calibration;  ///< the cost multipliers the step was simulated with (identity: none)
};

/// The result as JSON text: fixed key order, fixed number formatting (byte-identical for identical
/// input). Keys: see docs/engine.md "Result JSON".
std::string to_json_text(const SimResult& r, const JobFigures& job);

/// json_quote / json_num (the writers' fixed formatting) live in strata/common/text.hpp.
using strata::json_num;
using strata::json_quote;

}  // namespace strata::sim
