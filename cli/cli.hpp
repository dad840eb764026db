// Shared plumbing of the `strata` subcommands: each cmd_*.cpp registers itself with
// STRATA_COMMAND, and uses these helpers for the options every command shares (--db, the spec
// options). Commands are thin: they parse options, call the libraries, print.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>

#include "strata/hwdb/hwdb.hpp"
#include "strata/sim/cost.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::cli {

using Registrar = std::function<void(CLI::App&)>;
/// Called from static initializers in cmd_*.cpp; `order` sorts the help listing.
bool register_command(int order, Registrar r);

#define STRATA_COMMAND_CAT2(a, b) a##b
#define STRATA_COMMAND_CAT(a, b) STRATA_COMMAND_CAT2(a, b)
#define STRATA_COMMAND(order, fn) \
    static const bool STRATA_COMMAND_CAT(strata_cmd_registered_, __LINE__) = ::strata::cli::register_command(order, fn)

/// --db PATH (default: the seeded database of this build).
void add_db_option(CLI::App* cmd, std::string& db_path);
hwdb::Database open_db(const std::string& db_path);

/// --scenario S, or --model M --cluster C [--plan P]. A value that is not an existing file is
/// looked up by name in the bundled scenarios/ folder (models/, clusters/, plans/).
struct SpecArgs {
    std::string scenario, model, cluster, plan;
};
void add_spec_options(CLI::App* cmd, SpecArgs& args);
/// Resolve to a Scenario; need_plan: a plan is required (and validated against model and cluster).
sim::Scenario resolve_specs(const SpecArgs& args, bool need_plan);
/// Find a bundled scenario file by name under scenarios/<kind>/ ("" if none).
std::string find_bundled(const std::string& kind, const std::string& name);

/// --calibration FILE|none (default: bench/fidelity/calibration.json as built in). The set for
/// the view's GPU architecture family; `described` gets one line saying which set and factors.
void add_calibration_option(CLI::App* cmd, std::string& calibration);
sim::Calibration calibration_for(const std::string& calibration, const hwdb::HardwareView& hw, std::string* described = nullptr);

/// The hardware view for a cluster (resolving node/link defaults through hwdb).
hwdb::HardwareView view_for(const hwdb::Database& db, const sim::ClusterSpec& c);
/// The same, for the cluster of `a`: an id hwdb does not know is reported against the file it came
/// from (--cluster, else --scenario), like every other bad field.
hwdb::HardwareView view_for(const hwdb::Database& db, const sim::ClusterSpec& c, const SpecArgs& a);

/// Write text to `path` atomically, or to stdout when path is "-".
void write_output(const std::string& path, const std::string& text);

}  // namespace strata::cli
