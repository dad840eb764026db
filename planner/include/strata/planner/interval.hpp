// Prediction intervals from the fidelity suite's held-out residuals (docs/planner.md, "Prediction
// intervals"; the table: bench/fidelity/residuals.json, written by `strata fidelity --residuals`).
// A residual is how much longer a published run's step took than Strata predicted; the interval
// of a new prediction is two order statistics of the residuals of its nearest class of runs (GPU
// architecture, framework preset, dense or MoE, scale), by split conformal prediction. No normal
// distribution is assumed.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "strata/sim/fidelity.hpp"

namespace strata::planner {

/// One held-out run: published step time / predicted step time (> 1: Strata was too fast).
struct StepResidual {
    std::string id, arch;
    std::string framework;  ///< the run's plan.framework preset ("" = none stated)
    bool moe = false;
    int gpus = 0;
    double ratio = 1;
};

/// One held-out published memory peak: predicted / published - 1.
struct MemoryResidual {
    std::string id;
    double error = 0;
};

struct ResidualTable {
    std::string split = "test";
    std::string calibration;        ///< what the predictions were calibrated with
    std::vector<StepResidual> step;   ///< in runs.json order
    std::vector<MemoryResidual> memory;
};

/// Linear-interpolation quantile of a sample (Hyndman & Fan type 7, R's and numpy's default):
/// sorted x, h = (n - 1) q, x[floor h] + (h - floor h)(x[floor h + 1] - x[floor h]). Empty: NaN.
double quantile(std::vector<double> x, double q);

/// A central `level` interval from n exchangeable residuals by split conformal prediction (Vovk et
/// al. 2005; Lei et al. 2018): the floor((n + 1)(1 - level) / 2)-th and ceil((n + 1)(1 + level) / 2)-th
/// smallest, 1-based, clamped to the sample (where the rule asks for more than the data hold). Wider
/// than type-7 quantiles on small classes, which undercover: leave-one-out on the fidelity suite's
/// held-out runs, 73.6 % -> 81.1 % at the nominal 80 %. Empty: NaN, NaN.
std::pair<double, double> conformal_bounds(std::vector<double> x, double level);

/// Scale classes: up to 64 GPUs, up to 1024, more.
const char* scale_class(int gpus);

/// Residuals a class needs before its quantiles are used; fewer: the next coarser class.
inline constexpr int kMinClassSize = 8;
/// The interval's nominal coverage (central: quantiles (1 - level) / 2 and (1 + level) / 2).
inline constexpr double kIntervalLevel = 0.8;

struct StepInterval {
    bool available = false;
    double lo = 1, hi = 1;   ///< multipliers of a predicted step time (or time, or cost)
    int n = 0;               ///< residuals behind it
    std::string cls;         ///< the class used, e.g. "Hopper nemo dense", "Hopper dense <=1024 GPUs", "all"
};

/// The interval of the nearest class with at least kMinClassSize residuals: with a framework
/// preset, (arch, framework, dense/MoE, scale), then (arch, framework, dense/MoE); then (arch,
/// dense/MoE, scale), (arch, dense/MoE), arch, every residual. `skip_id`: leave one run out (the
/// coverage check).
StepInterval step_interval(const ResidualTable& t, const std::string& arch, bool moe, int gpus, const std::string& framework = "",
                           double level = kIntervalLevel, const std::string& skip_id = "");

/// The suite's memory error: the mean |predicted / published peak - 1| over the held-out published
/// peaks (docs/fidelity.md's peak MAPE, on the test split; 0 without data).
double memory_error(const ResidualTable& t);

/// "fits", "borderline" or "does not fit": borderline when |peak - capacity| / capacity < error.
const char* memory_verdict(double peak_bytes, double capacity_bytes, double error);

/// Leave-one-out coverage: the share of held-out runs whose published step time falls inside the
/// interval built from the other residuals (each run's own class rule).
double coverage(const ResidualTable& t, double level = kIntervalLevel);

/// The table from a fidelity run's rows (scored rows of the split; memory rows with a published peak).
ResidualTable residuals_from_rows(const std::vector<sim::FidelityEntry>& entries, const std::vector<sim::FidelityRow>& rows,
                                  const std::string& split, const std::string& calibration);

/// Fixed-format JSON (rounded to 6 significant digits: identical rows, identical bytes).
std::string to_json_text(const ResidualTable& t);
/// Strict reader (InputError naming the file and path).
ResidualTable residuals_from_json_text(const std::string& text, const std::string& file);
/// bench/fidelity/residuals.json as this binary was built with ("" when the file was absent).
const char* default_residuals_json();

}  // namespace strata::planner
