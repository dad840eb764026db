// The profiler's entry point: run the microbenchmarks of one backend (cuda or cpu), fit the curves
// the simulator reads, and hand back ONE run (run row + measurements + fits) as values. Writing it
// to hwdb is a single Database::write_run call by the caller, so an interrupted profile (the cancel
// flag) leaves the database untouched. Formats of the rows: docs/profiler.md. No printing here.
#pragma once
#include <atomic>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "strata/common/error.hpp"
#include "strata/hwdb/types.hpp"

namespace strata::profiler {

/// Thrown when the cancel flag was seen set; nothing has been written anywhere.
class Cancelled : public RuntimeError {
public:
    Cancelled() : RuntimeError("profile interrupted") {}
};

/// Benchmark kinds (the --only vocabulary, and Measurement::kind).
const std::vector<std::string>& all_kinds();

struct Options {
    std::string backend = "cpu";  ///< "cpu" or "cuda"
    bool quick = false;           ///< small sweeps (CI): the CPU quick profile takes well under a minute
    std::string ssd_dir = "/tmp"; ///< where the SSD benchmark writes its scratch file
    std::set<std::string> only;   ///< kinds to run (empty: all of the backend's kinds)
    int threads = 0;              ///< CPU threads for Adam and CPU collectives (0: hardware)
    const std::atomic<bool>* cancel = nullptr;  ///< checked between (and inside) benchmarks
    /// Progress report: stage name, steps done, steps total (of that stage).
    std::function<void(const std::string&, int, int)> progress;
    /// Test hook: called after every measurement is recorded (e.g. to set the cancel flag).
    std::function<void(const hwdb::Measurement&)> on_measurement;

    /// A plan's own shapes (`strata validate`): with plan_shapes set, the gemm and attention
    /// kinds time exactly these, in plan_dtype as the runtime runs them, instead of their grids,
    /// and label them origin "plan" (hwdb's view adds them to the grid's points, docs/profiler.md).
    struct GemmShape {
        long m = 0, n = 0, k = 0;  ///< rows (x batch), columns, depth
    };
    struct AttentionShape {
        long batch = 0, heads = 0, seq = 0, head_dim = 0;  ///< heads: a rank's query heads (MHA)
    };
    bool plan_shapes = false;
    std::string plan_dtype = "fp32";  ///< fp32, bf16 or fp16 (the cuda backend's 16-bit plans); the cpu backend times fp32
    std::vector<GemmShape> gemm_shapes;
    std::vector<AttentionShape> attention_shapes;
};

struct Profile {
    hwdb::Run run;
    std::vector<hwdb::Measurement> measurements;
    std::vector<hwdb::Fit> fits;
    std::vector<std::string> warnings;  ///< e.g. "O_DIRECT unsupported on /tmp: page cache used"
};

/// True when this build has the CUDA backend compiled in.
bool has_cuda_backend();

/// Run the benchmarks and fits. Throws Cancelled when options.cancel is set, RuntimeError on
/// CUDA/NCCL/IO failures, InputError for a bad backend or kind name.
Profile run_profile(const Options& options);

/// Fits from measurements (also used on their own by tests): collective alpha-beta per
/// collective/scope/group (never from 1-rank or unrepresentative rows), bandwidth curves for
/// memcpy, membw (key "hbm"), SSD, the Adam rate. GEMM/attention points stay points.
std::vector<hwdb::Fit> fit_measurements(const std::vector<hwdb::Measurement>& ms);

/// hwdb GPU id for a CUDA device name ("NVIDIA H100 80GB HBM3" -> "H100-SXM5-80GB"); the raw
/// name when unknown.
std::string gpu_id_for_name(const std::string& cuda_name);

/// Human tables: nccl-tests style per collective, GEMM (m n k dtype TFLOP/s eff%), copies, SSD,
/// Adam, fits. `peak` (optional) gives the datasheet peak FLOP/s per dtype for eff%.
std::string format_tables(const Profile& p, const hwdb::Gpu* peak = nullptr);

/// The run as an hwdb document (schema 1, one run with its measurements and fits; warnings are in
/// run.notes), readable by Database::import_json: deterministic key order and float formatting.
std::string to_json(const Profile& p);

}  // namespace strata::profiler
