// What every view of strata-gui shares: the hardware database and the cost calibration, resolved
// exactly as the CLI resolves them (same hwdb view, same built-in calibration set per GPU
// architecture), the bundled scenario names, and a simulated step packaged for the views.
// Value types in and out; no Qt type crosses this header.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "strata/hwdb/hwdb.hpp"
#include "strata/lowering/spec.hpp"
#include "strata/sim/simulate.hpp"

namespace strata::sim {
struct CalibrationRecord;
}

namespace strata::gui {

struct Settings {
    std::string scenarios_dir;  ///< bundled models/, clusters/, plans/ ("" = this build's scenarios/)
    std::string db_path;        ///< hardware database ("" = hwdb::default_db_path(), which honours $STRATA_HWDB)
    std::string calibration;    ///< "" = built-in bench/fidelity/calibration.json, "none", or a file
};

/// The scenarios folder this build was configured with.
std::string default_scenarios_dir();

/// Names of the bundled files of a kind ("models", "clusters", "plans"; "" = whole scenarios),
/// sorted, without ".json".
std::vector<std::string> bundled_names(const std::string& scenarios_dir, const std::string& kind);
/// The file of a bundled name ("" if there is none).
std::string bundled_file(const std::string& scenarios_dir, const std::string& kind, const std::string& name);
/// A name that is an existing file is that file; otherwise the bundled one of that kind; otherwise
/// an InputError worded as the CLI words it.
std::string locate(const std::string& scenarios_dir, const std::string& kind, const std::string& what,
                   const std::string& option);

/// The hardware database and the calibration, opened once. Not thread-safe: use it on the GUI
/// thread and hand the views (values) to workers.
class Hardware {
public:
    explicit Hardware(const Settings& s);
    /// hwdb's view of a cluster; an unknown id is an InputError naming `file`.
    hwdb::HardwareView view(const sim::ClusterSpec& c, const std::string& file) const;
    /// The calibration `strata simulate` applies for this GPU (identity with calibration "none").
    sim::Calibration calibration(const hwdb::HardwareView& hw) const;
    /// One line: which calibration set applies ("built-in, set ampere" / "none (uncalibrated)").
    std::string calibration_note(const hwdb::HardwareView& hw) const;
    /// GPU ids of the database (for the capacity sweep's choice of GPU types).
    std::vector<std::string> gpu_ids() const;
    const std::string& db_path() const { return db_path_; }

private:
    std::string db_path_;
    hwdb::Database db_;
    std::string calibration_source_;                          ///< "" = uncalibrated
    std::shared_ptr<const sim::CalibrationRecord> record_;   ///< parsed once
};

/// One simulated step, with the trace kept, as the timeline and memory views read it.
struct Snapshot {
    sim::ModelSpec model;
    sim::ClusterSpec cluster;
    sim::PlanSpec plan;
    std::shared_ptr<const sim::SimOutput> out;
    double wall_s = 0;  ///< how long the simulation took (reported, never asserted)
};

/// The figures a plan is compared by (the plan table's columns and the what-if delta).
struct Figures {
    double step_time_s = 0, tokens_per_s = 0, mfu = 0, peak_hbm_bytes = 0;
    bool fits = true;
};
Figures figures_of(const sim::SimOutput& out);

/// validate_plan, then lower -> engine -> figures with the trace and critical path kept. Throws
/// InputError (naming `file`) for a plan the CLI would refuse.
Snapshot simulate_snapshot(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& p,
                           const hwdb::HardwareView& hw, const sim::Calibration& cal, const std::string& file);

}  // namespace strata::gui
