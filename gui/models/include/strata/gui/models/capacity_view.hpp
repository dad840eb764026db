// The capacity view's data: a sweep set up as `strata capacity` sets it up (a template cluster per
// GPU type from the bundled clusters, the reduced per-size search, the calibration of each GPU's
// architecture), run by planner::plan_capacity, and its points laid out per GPU type for the
// time-to-train and cost charts with the Pareto front marked.
#pragma once
#include <string>
#include <vector>

#include "strata/gui/models/workbench.hpp"
#include "strata/planner/capacity.hpp"

namespace strata::gui {

struct CapacityRequest {
    sim::ModelSpec model;
    double tokens = 300e9;         ///< tokens to train
    double deadline_s = 30 * 86400.0;  ///< 0 = none
    double budget_usd = 0;         ///< 0 = none
    std::vector<std::string> gpus{"H100-SXM5-80GB", "A100-SXM4-80GB"};
    int min_gpus = 8, max_gpus = 4096;
    int global_batch = 1024;
};

/// The sweep's inputs, as the CLI builds them; InputError for a GPU type hwdb does not know.
std::vector<planner::ClusterOption> capacity_clusters(const Hardware& hw, const std::string& scenarios_dir,
                                                      const std::vector<std::string>& gpus);
planner::CapacityOptions capacity_options(const CapacityRequest& r);

/// One GPU type's points in GPU-count order; `point` indexes CapacityResult::points.
struct CapacitySeries {
    std::string gpu;
    std::vector<int> points;
};
struct CapacityLayout {
    std::vector<CapacitySeries> series;
    double min_gpus = 1, max_gpus = 1;     ///< over feasible points
    double max_days = 0, max_cost_usd = 0;
    std::vector<int> pareto;               ///< Pareto points, fastest first
};
CapacityLayout capacity_layout(const planner::CapacityResult& r);

/// One line about a point, for its tooltip and the status bar.
std::string describe_point(const planner::CapacityPoint& p);

}  // namespace strata::gui
