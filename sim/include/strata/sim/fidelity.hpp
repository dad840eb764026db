// The fidelity suite: published training runs (bench/fidelity/runs.json) loaded as specs, simulated
// with the datasheet hardware database, and compared with what was published in the source's own
// FLOP convention; error statistics per split and a deterministic fit of the Calibration multipliers
// on the train split. No I/O and no printing: the CLI (cmd_fidelity.cpp) reads files and formats.
#pragma once
#include <array>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "strata/hwdb/view.hpp"
#include "strata/sim/cost.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::sim {

/// How a source counts the FLOPs behind its TFLOP/s or MFU figure (docs/fidelity.md).
enum class FlopsConvention {
    model,               ///< model FLOPs as NeMo/Megatron-Bridge and Meta count them: Strata's model_flops_per_step
    megatron_model,      ///< SC21 closed form without recompute: 72 B s l h^2 (1 + s/6h + V/12lh)
    megatron_recompute,  ///< SC21 Eq. (3), full recompute counted: 96 B s l h^2 (1 + s/6h + V/16lh)
    megatron_core,       ///< Megatron-Core / Megatron-Bridge: causal attention halved, no router GEMM (megatron_core_flops_per_step)
    mpt,                 ///< llm-foundry: per sequence 6 N s + 12 L d s^2 (N = all parameters)
    none,                ///< the source publishes no FLOP figure
};
const char* to_string(FlopsConvention c);

/// The published quantity an entry is compared on (the most direct one it has).
enum class Quantity { step_time_s, tokens_per_s, tokens_per_s_per_gpu, samples_per_s, tflops_per_gpu, mfu };
const char* to_string(Quantity q);

/// One published run, mapped onto Strata's specs.
struct FidelityEntry {
    std::string id, publisher, split;  ///< split: "train" or "test"
    /// The framework that ran it (runs.json "framework", a plan.framework preset name; "" = none
    /// has a preset). Kept beside the plan: the entry's plan states its knobs by hand.
    std::string framework;
    ModelSpec model;
    ClusterSpec cluster;
    PlanSpec plan;
    std::map<std::string, double> measured;  ///< published numbers by runs.json name
    std::string outcome = "ran";             ///< "ran" or "oom"
    FlopsConvention convention = FlopsConvention::none;
    Quantity quantity = Quantity::step_time_s;
    double published = 0;                    ///< measured[to_string(quantity)]
    std::vector<std::string> dropped;        ///< runs.json fields Strata does not read (e.g. "model.mla")
    std::vector<std::string> substitutions;  ///< mappings made by the loader (node type, NIC id)
    std::string skipped;                     ///< non-empty: why this entry is not simulated (the rule)
    /// Publishes only a memory outcome (oom, or peak_hbm_bytes) and no throughput: simulated and
    /// counted for memory, left out of the throughput MAPE and the fit.
    bool memory_only = false;
    /// What a published peak_hbm_bytes counts (measured.peak_hbm_counter): "device" (nvidia-smi:
    /// the process, CUDA context and allocator cache included), "max_reserved"
    /// (torch.cuda.max_memory_reserved) or "max_allocated" (torch.cuda.max_memory_allocated), and
    /// on which pipeline stage (measured.peak_hbm_stage: "max" over all, "first" or "last").
    std::string peak_counter = "device";
    std::string peak_stage = "max";
    /// Non-empty: the publisher itself reports the published figure as a performance regression of
    /// its own software (runs.json `publisher_regression.source`, the report's address). Such an
    /// entry is simulated and printed with its error, counted for memory, but not scored: it stays
    /// out of the MAPE and the fit (docs/fidelity-dataset.md, "Not scored").
    std::string publisher_regression;

    int gpus() const { return cluster.gpu_count(); }
};

/// Parse runs.json. Malformed structure (missing id, measured not an object, ...) is an InputError;
/// an entry whose specs fail Strata's parser or validate_plan is kept with `skipped` set.
/// presets_only: each entry with a framework is read with the knobs its preset covers removed from
/// the plan and plan.framework set, so the preset alone supplies them (docs/fidelity.md, "Presets").
struct FidelityLoadOptions {
    bool presets_only = false;
};
std::vector<FidelityEntry> load_fidelity_runs(const std::string& text, const std::string& file,
                                              const FidelityLoadOptions& options = {});

/// Node type the loader infers from the GPU id and the GPUs a node (A100 -> DGX-A100, H100/H800 ->
/// DGX-H100, V100 -> DGX-1-V100, or DGX-2 with 16 a node; "" when unknown).
std::string node_for_gpu(const std::string& gpu, int gpus_per_node = 8);

/// FLOPs of one optimizer step of `e` counted the way its source counts them (0 for none).
double convention_flops_per_step(const FidelityEntry& e);

/// The value of quantity `q` for entry `e` if one step takes `step_time_s`; `peak_flops_per_gpu`
/// is only used for MFU.
double quantity_from_step_time(const FidelityEntry& e, Quantity q, double step_time_s, double peak_flops_per_gpu);

/// The step time implied by the published value of a time or throughput quantity (0 for
/// tflops_per_gpu / mfu, which need a FLOP convention to invert).
double published_step_time_s(const FidelityEntry& e);

/// Result of simulating one entry.
struct FidelityRow {
    std::string id, publisher, split, gpu;
    int gpus = 0;
    Quantity quantity = Quantity::step_time_s;
    FlopsConvention convention = FlopsConvention::none;
    double published = 0, predicted = 0;
    double error = 0;             ///< predicted / published - 1
    std::string skipped;          ///< non-empty: not simulated, with the rule
    std::string outcome = "ran";  ///< published
    bool engine_oom = false;      ///< the engine's pools overflowed
    bool fits = true;             ///< the analytical memory model says it fits
    bool oom_agrees = true;       ///< published oom == engine oom
    double step_time_s = 0;
    double bubble_fraction = 0;
    double exposed_comm_s = 0;
    double mfu = 0;               ///< Strata's model-FLOP MFU
    double convention_check = 0;  ///< published TFLOP/s vs the convention applied to the published time, - 1 (0 if n/a)
    std::string critical_path;
    std::string arch;             ///< GPU architecture family (arch_family of hwdb gpu.arch)
    Calibration applied;          ///< the multipliers this row was simulated with
    /// Seconds of the critical path in each calibration class (Calibration::at order), at `applied`;
    /// the rest of the step (copies, idle) is other_s. The fit's linear surrogate (fit.cpp).
    std::array<double, Calibration::kFactors> class_s{};
    double other_s = 0;
    bool memory_only = false;               ///< no published throughput (FidelityEntry::memory_only)
    double peak_hbm_bytes = 0;              ///< the engine's peak on the fullest GPU (allocator model on)
    double hbm_capacity_bytes = 0;          ///< the GPU's capacity the engine checked against
    double published_peak_hbm_bytes = 0;    ///< measured.peak_hbm_bytes, 0 if not published
    std::string peak_counter;               ///< its counter and stage ("max_allocated, last stage"); then
                                            ///< peak_hbm_bytes is the engine's in the same terms
    double peak_error = 0;                  ///< peak_hbm_bytes / published - 1 (0 if not published)
    std::string publisher_regression;       ///< FidelityEntry::publisher_regression
    std::string framework;                  ///< FidelityEntry::framework ("" = none)

    bool simulated() const { return skipped.empty(); }
    /// Simulated with a published throughput: its error is printed.
    bool compared() const { return simulated() && !memory_only; }
    /// In the throughput statistics and the fit: compared, and not a publisher-reported regression.
    bool scored() const { return compared() && publisher_regression.empty(); }
};

/// The architecture family a calibration set is keyed by: the first word of hwdb's gpu.arch
/// ("Ampere", "Hopper", "Volta"); "" when unknown.
std::string arch_family(const std::string& gpu_arch);

/// The calibration family of a hardware view: its architecture family, with "+measured" where
/// hwdb holds this GPU's own GEMM measurements. The factors are fitted against the model they
/// correct, and a profiled GPU's GEMMs are priced from its measurements, not the datasheet
/// curve: a set fitted on the seed applied to them counts twice what the measurement already
/// explains (docs/costs.md, "Calibration").
std::string calibration_family(const hwdb::HardwareView& hw);

/// Resolves the hardware view of a cluster (the CLI passes hwdb::Database::view).
using ViewResolver = std::function<hwdb::HardwareView(const ClusterSpec&)>;

/// Simulate one entry with `cal` (skipped entries come back as rows with `skipped` set).
FidelityRow run_fidelity_entry(const FidelityEntry& e, const ViewResolver& views, const Calibration& cal);

/// Whether this build's simulate() applies Calibration (SimOptions::calibration exists).
bool calibration_supported();

/// Entries of a split: "train", "test" or "all".
std::vector<FidelityEntry> select_split(const std::vector<FidelityEntry>& all, const std::string& split);

/// Error statistics over scored rows. Fractions, not percent.
struct FidelityStats {
    int entries = 0, scored = 0, skipped = 0;  ///< scored: the rows the MAPE is over (FidelityRow::scored)
    double mape = 0;        ///< mean |error| over scored rows
    double median_ape = 0;  ///< median |error|
    double worst_ape = 0;
    std::string worst_id;
    int over_15pct = 0;     ///< |error| > 0.15
    int memory_compared = 0;  ///< simulated rows, throughput or memory-only: the OOM denominator
    int oom_agree = 0;      ///< published outcome == engine outcome
    int fits_agree = 0;     ///< published "ran" with analytical fit, or "oom" without
    int peak_compared = 0;  ///< rows with a published peak_hbm_bytes
    double peak_mape = 0;   ///< mean |peak error| over those
    double peak_worst_ape = 0;
    /// Compared rows left unscored as publisher-reported regressions, and the MAPE the split would
    /// have with them scored (equal to mape when there are none).
    int not_scored = 0;
    double mape_with_not_scored = 0;
};
FidelityStats fidelity_stats(const std::vector<FidelityRow>& rows, const std::string& split = "all");
/// The same per publisher or per GPU id, in name order (docs/fidelity-dataset.md: report the test
/// error per publisher and per GPU type).
enum class FidelityGroup { publisher, gpu, framework };
std::vector<std::pair<std::string, FidelityStats>> fidelity_stats_by(const std::vector<FidelityRow>& rows,
                                                                     const std::string& split, FidelityGroup by);
double mean_abs(const std::vector<double>& v);
double median_abs(const std::vector<double>& v);

/// The fit. Simulations are expensive, so it minimises the train MAPE of a linear surrogate: a row
/// simulated at `applied` predicts step(f) = other_s + sum_c class_s[c] * f[c] / applied[c] (the
/// critical path with every kernel of class c stretched by f[c] / applied[c]). Coordinate
/// golden-section search in log space on [lo, hi] per factor, `passes` sweeps, a move kept only when
/// it lowers the surrogate MAPE; then the point is simulated for real and the surrogate re-built
/// there, up to `rounds` times, keeping the best real MAPE. Deterministic.
struct FitOptions {
    double lo = 0.5, hi = 2.5;  ///< a calibrated cost stays within 0.5x..2.5x of the datasheet-driven model
    int passes = 4;
    double tolerance = 0.001;  ///< stop a line search when the log2 bracket is narrower than this
    int rounds = 4;            ///< simulate-and-relinearise rounds
    /// A fitted factor is reset to 1 (the datasheet model) unless it lowers the train MAPE by at
    /// least this much (0.1 point): a direction train cannot tell apart is not a finding.
    double min_gain = 0.001;
    double overlap = 0;        ///< fit_calibration: the interference term, held fixed
    /// Host time per kernel launch (Calibration::host_launch_us), held fixed: a published
    /// measurement, not fitted (kHostLaunchUs).
    double host_launch_us = 0;
    /// fit_calibration_overlap: the interference values tried (each with its own multiplier fit)
    std::vector<double> overlap_grid = {0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4};
};
/// Host time per kernel launch in PyTorch eager mode, microseconds: Llama 3.1 8B decode on one
/// H100 SXM5 takes 8.4 ms per step eager and 5.1 ms as a CUDA graph (cloudai.pt, "CUDA Graphs +
/// torch.compile: 1.65x LLM Decode Speedup"); eager decode is host-bound, and a forward of the
/// Hugging Face model dispatches about 1,780 aten ops (32 layers x ~55, plus embedding and head):
/// 8.4 ms / 1,780 = 4.7 us. The train half has no host-bound entry to fit it on.
constexpr double kHostLaunchUs = 4.7;

struct FitResult {
    Calibration calibration;
    double before = 0, after = 0;  ///< real train MAPE at the identity and at the result
    int simulations = 0;           ///< real evaluations of the train rows
};
/// The error a row would have with multipliers `f`, by the surrogate above.
double surrogate_error(const FidelityRow& r, const Calibration& f);
/// Minimise the surrogate MAPE of `rows` from `start`.
Calibration fit_surrogate(const std::vector<FidelityRow>& rows, const Calibration& start, const FitOptions& o = {});
/// The whole fit: `evaluate` simulates the train rows at a calibration. The interference term
/// stays at o.overlap; `before` is the MAPE at the identity multipliers with that term.
FitResult fit_calibration(const std::function<std::vector<FidelityRow>(const Calibration&)>& evaluate,
                          const FitOptions& o = {});
/// The interference term is not linear in the critical path's classes, so it is searched on a grid
/// (o.overlap_grid), the multipliers fitted at each value; the lowest real train MAPE wins (ties:
/// the smaller term). `before` is the MAPE of the uncalibrated model (identity, no interference).
FitResult fit_calibration_overlap(const std::function<std::vector<FidelityRow>(const Calibration&)>& evaluate,
                                  const FitOptions& o = {});

/// One fitted set: for GPUs of architecture family `arch`, or "*" for every other GPU (fitted on
/// all train entries).
struct CalibrationGroup {
    std::string arch = "*";
    Calibration factors;
    int train_entries = 0;
    double train_mape_before = 0, train_mape_after = 0;
};

/// bench/fidelity/calibration.json: the fitted sets and how they were obtained.
struct CalibrationRecord {
    bool fitted = false;
    std::string date;  ///< YYYY-MM-DD of the fit
    std::string note;
    std::vector<CalibrationGroup> groups;  ///< "*" first, then by arch

    /// The group for a GPU of this family: its own, else (a "+measured" family) its architecture's,
    /// else "*", else none (nullptr).
    const CalibrationGroup* group_for(const std::string& arch) const;
    /// That group's factors, or the identity when there is none.
    const Calibration& for_arch(const std::string& arch) const;
};
std::string to_json_text(const CalibrationRecord& r);
CalibrationRecord calibration_from_json_text(const std::string& text, const std::string& file);

/// The six multipliers and the interference term as one JSON object (fixed formatting).
std::string factors_json(const Calibration& c);

/// bench/fidelity/calibration.json as it was when this binary was built (the CLI's default).
const char* default_calibration_json();

/// Rows and summaries as deterministic JSON / a fixed-width table.
std::string fidelity_json_text(const std::vector<FidelityRow>& rows, const CalibrationRecord& cal);
std::string fidelity_table_text(const std::vector<FidelityRow>& rows);
std::string fidelity_summary_text(const std::vector<FidelityRow>& rows);

}  // namespace strata::sim
