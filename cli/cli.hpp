// Shared plumbing of the `strata` subcommands: each cmd_*.cpp registers itself with
// STRATA_COMMAND, and uses these helpers for the options every command shares (--db, the spec
// options). Commands are thin: they parse options, call the libraries, print.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "strata/hwdb/hwdb.hpp"
#include "strata/planner/interval.hpp"
#include "strata/sim/cost.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::cli {

using Registrar = std::function<void(CLI::App&)>;
/// Called from static initializers in cmd_*.cpp; `order` sorts the help listing.
bool register_command(int order, Registrar r);
/// The whole application: --version, CLI11's settings and every registered command.
void build_app(CLI::App& app);
/// When the command words of argv (those before the first option) name no command where one is
/// required ("strata nosuch", "strata hwdb lst", "strata"): true, with the message to print.
bool unknown_command(const CLI::App& app, int argc, const char* const* argv, std::string& message);
/// main(): parse, run, map errors to exit codes.
int run(int argc, char** argv);

#define STRATA_COMMAND_CAT2(a, b) a##b
#define STRATA_COMMAND_CAT(a, b) STRATA_COMMAND_CAT2(a, b)
#define STRATA_COMMAND(order, fn) \
    static const bool STRATA_COMMAND_CAT(strata_cmd_registered_, __LINE__) = ::strata::cli::register_command(order, fn)

/// Ctrl-C stopped the command: it wrote no output file, and main exits 130 (128 + SIGINT), as a
/// shell reports a process that SIGINT ended.
class Interrupted : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// --db PATH (default: the seeded database of this build).
void add_db_option(CLI::App* cmd, std::string& db_path);
/// The database for a command that only reads it: opened read-only, so a file or folder the user
/// may not write still works, and nothing in it changes.
hwdb::Database open_db(const std::string& db_path);
/// The database for a command that adds to it (profile, hwdb import): it must exist and be a Strata
/// database (only `hwdb init` creates one) and be writable.
hwdb::Database open_db_for_write(const std::string& db_path);

// ---- numeric options ----
// Every numeric option carries its range (CLI::Range, shown in --help as "in [lo - hi]"), checked
// by CLI11 while parsing: a value outside it (or not a number) is refused with exit 2, never
// replaced by a default. An option left out keeps the variable's initial value (0 often meaning
// "the default"). tests/cli/test_cli_flags.cpp holds every command to it.

/// An integer option in [lo, hi].
CLI::Option* add_int_option(CLI::App* cmd, const std::string& flags, int& v, int lo, int hi, const std::string& help);
CLI::Option* add_int_option(CLI::App* cmd, const std::string& flags, std::int64_t& v, std::int64_t lo, std::int64_t hi,
                            const std::string& help);
/// A real option in [lo, hi]. (build_app also makes every real option of every command refuse a
/// value that is not finite: CLI::Range lets NaN through.)
CLI::Option* add_num_option(CLI::App* cmd, const std::string& flags, double& v, double lo, double hi, const std::string& help);

/// --threads,-j N: one meaning, range and default on every command that runs work in parallel:
/// N in [1, kMaxThreads] workers; left out, all cores (std::thread::hardware_concurrency).
constexpr int kMaxThreads = 1024;
void add_threads_option(CLI::App* cmd, int& threads, const std::string& what);
/// The worker count for a --threads value (0: not given, all cores; never less than 1).
int thread_count(int threads);

/// --global-batch,-b N in [1, kMaxGlobalBatch] (docs/formats.md), and --seq-len N in [1, 2^24].
void add_global_batch_option(CLI::App* cmd, int& global_batch, const std::string& default_text);

// ---- outputs ----
// Conventions (docs/cli.md): `--json FILE` on a command that prints a report also writes its
// result as JSON; `-o, --output FILE` is the file a command exists to produce (export, import-hf,
// plan-merge, hwdb export; default: stdout); named products (--trace, --fit-calibration) likewise.
// Every one takes '-' for stdout; at most one output per command may be '-', and then the human
// report goes to stderr, so stdout carries nothing but that output. Every path is checked before the
// work starts (a typo costs nothing), and files are written atomically (strata/common/files.hpp).

struct Output {
    std::string option;  ///< "--json"
    std::string path;    ///< "" = not requested, "-" = stdout
};
/// InputError (exit 2) naming the option when a path cannot be written or two outputs are '-'.
void check_outputs(const std::vector<Output>& outputs);
/// Where the human report goes: std::cout, or std::cerr when one of `outputs` is stdout.
std::ostream& report_stream(const std::vector<Output>& outputs);

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
/// --residuals FILE|none (plan, capacity): the held-out residuals behind the prediction intervals.
void add_residuals_option(CLI::App* cmd, std::string& residuals);
/// The table `--residuals` names: built-in bench/fidelity/residuals.json when empty, none for "none"
/// (then no interval is shown); `described` says which.
std::optional<planner::ResidualTable> residuals_for(const std::string& residuals, std::string* described = nullptr);

/// The hardware view for a cluster (resolving node/link defaults through hwdb).
hwdb::HardwareView view_for(const hwdb::Database& db, const sim::ClusterSpec& c);
/// The same, for the cluster of `a`: an id hwdb does not know is reported against the file it came
/// from (--cluster, else --scenario), like every other bad field.
hwdb::HardwareView view_for(const hwdb::Database& db, const sim::ClusterSpec& c, const SpecArgs& a);

/// Write text to `path` atomically, or to stdout when path is "-" (RuntimeError if stdout fails,
/// e.g. a full disk behind a redirection).
void write_output(const std::string& path, const std::string& text);

/// The file a resolved plan came from (--plan, else --scenario), for messages about the plan.
std::string plan_source(const SpecArgs& args);

}  // namespace strata::cli
