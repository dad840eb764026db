// The fidelity suite: published training runs (bench/fidelity/runs.json) loaded as specs, simulated
// with the datasheet hardware database, and compared with what was published in the source's own
// FLOP convention; error statistics per split and a deterministic fit of the Calibration multipliers
// on the train split. No I/O and no printing: the CLI (cmd_fidelity.cpp) reads files and formats.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "strata/hwdb/view.hpp"
#include "strata/sim/cost.hpp"
#include "strata/sim/spec.hpp"

namespace strata::sim {

/// How a source counts the FLOPs behind its TFLOP/s or MFU figure (docs/fidelity.md).
enum class FlopsConvention {
    model,               ///< model FLOPs as NeMo/Megatron-Bridge and Meta count them: Strata's model_flops_per_step
    megatron_model,      ///< SC21 closed form without recompute: 72 B s l h^2 (1 + s/6h + V/12lh)
    megatron_recompute,  ///< SC21 Eq. (3), full recompute counted: 96 B s l h^2 (1 + s/6h + V/16lh)
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

    int gpus() const { return cluster.gpu_count(); }
};

/// Parse runs.json. Malformed structure (missing id, measured not an object, ...) is an InputError;
/// an entry whose specs fail Strata's parser or validate_plan is kept with `skipped` set.
std::vector<FidelityEntry> load_fidelity_runs(const std::string& text, const std::string& file);

/// Node type the loader infers from the GPU id (A100 -> DGX-A100, H100/H800 -> DGX-H100, V100 ->
/// DGX-1-V100; "" when unknown).
std::string node_for_gpu(const std::string& gpu);

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

    bool compared() const { return skipped.empty(); }
};

/// Resolves the hardware view of a cluster (the CLI passes hwdb::Database::view).
using ViewResolver = std::function<hwdb::HardwareView(const ClusterSpec&)>;

/// Simulate one entry with `cal` (skipped entries come back as rows with `skipped` set).
FidelityRow run_fidelity_entry(const FidelityEntry& e, const ViewResolver& views, const Calibration& cal);

/// Whether this build's simulate() applies Calibration (SimOptions::calibration exists).
bool calibration_supported();

/// Entries of a split: "train", "test" or "all".
std::vector<FidelityEntry> select_split(const std::vector<FidelityEntry>& all, const std::string& split);

/// Error statistics over compared rows. Fractions, not percent.
struct FidelityStats {
    int entries = 0, compared = 0, skipped = 0;
    double mape = 0;        ///< mean |error|
    double median_ape = 0;  ///< median |error|
    double worst_ape = 0;
    std::string worst_id;
    int over_15pct = 0;     ///< |error| > 0.15
    int oom_agree = 0;      ///< published outcome == engine outcome
    int fits_agree = 0;     ///< published "ran" with analytical fit, or "oom" without
};
FidelityStats fidelity_stats(const std::vector<FidelityRow>& rows, const std::string& split = "all");
double mean_abs(const std::vector<double>& v);
double median_abs(const std::vector<double>& v);

/// Coordinate search over the five multipliers: golden-section on each in [lo, hi], `passes`
/// sweeps, a move kept only when it lowers the objective. Deterministic.
struct FitOptions {
    double lo = 0.5, hi = 3.0;
    int passes = 3;
    double tolerance = 0.005;  ///< stop a line search when the bracket is narrower than this
};
struct FitResult {
    Calibration calibration;
    double before = 0, after = 0;  ///< objective at the identity and at the result
    int evaluations = 0;
};
FitResult fit_calibration(const std::function<double(const Calibration&)>& objective, const FitOptions& o = {});

/// bench/fidelity/calibration.json: the fitted multipliers and how they were obtained.
struct CalibrationRecord {
    Calibration calibration;
    bool fitted = false;
    double train_mape_before = 0, train_mape_after = 0;
    int train_entries = 0;
    std::string date;  ///< YYYY-MM-DD of the fit
    std::string note;
};
std::string to_json_text(const CalibrationRecord& r);
CalibrationRecord calibration_from_json_text(const std::string& text, const std::string& file);

/// Rows and summaries as deterministic JSON / a fixed-width table.
std::string fidelity_json_text(const std::vector<FidelityRow>& rows, const CalibrationRecord& cal);
std::string fidelity_table_text(const std::vector<FidelityRow>& rows);
std::string fidelity_summary_text(const std::vector<FidelityRow>& rows);

}  // namespace strata::sim
