// `strata simulate`: one training step of a (model, cluster, plan) through lower -> engine, printed
// as a human summary on stdout; --json writes the result JSON, --trace a Chrome trace. All outputs
// are computed first and written atomically, so a failure never leaves a partial file.
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "strata/common/error.hpp"
#include "strata/sim/simulate.hpp"

namespace strata::cli {
namespace {

struct SimulateArgs {
    SpecArgs specs;
    std::string db, json, trace, calibration;
    bool full = false;
    int steps = 1;
    bool no_allocator = false;
};

void run_simulate(const SimulateArgs& a) {
    const sim::Scenario s = resolve_specs(a.specs, true);
    const hwdb::Database db = open_db(a.db);
    const hwdb::HardwareView hw = view_for(db, s.cluster, a.specs);
    sim::SimOptions o;
    o.trace = !a.trace.empty();
    o.full = a.full;
    o.steps = a.steps;
    o.allocator_model = !a.no_allocator;
    std::string cal_line;
    o.calibration = calibration_for(a.calibration, hw, &cal_line);
    const sim::SimOutput out = sim::simulate(s.model, s.cluster, *s.plan, hw, o);
    // Render everything before writing anything.
    const std::string json = a.json.empty() ? "" : sim::to_json_text(out.result, out.job);
    const std::string trace = a.trace.empty() ? "" : sim::trace_text(out);
    if (!a.json.empty()) write_output(a.json, json);
    if (!a.trace.empty()) write_output(a.trace, trace);
    if (a.json != "-" && a.trace != "-") std::cout << sim::summary_text(out) << "calibration        " << cal_line << "\n";
}

void add_simulate(CLI::App& app) {
    auto a = std::make_shared<SimulateArgs>();
    auto* cmd = app.add_subcommand("simulate", "Simulate one training step: time, throughput, MFU, memory per tier, OOMs");
    add_spec_options(cmd, a->specs);
    add_db_option(cmd, a->db);
    add_calibration_option(cmd, a->calibration);
    cmd->add_option("--json", a->json, "write the result as JSON to FILE ('-' = stdout)");
    cmd->add_option("--trace", a->trace, "write a Chrome trace (Perfetto, chrome://tracing) to FILE");
    cmd->add_flag("--full", a->full, "full mode: simulate every GPU (stragglers, expert skew), not one rank per stage");
    cmd->add_option("--steps", a->steps, "training steps to simulate (reported per step)")->check(CLI::Range(1, 100));
    cmd->add_flag("--no-allocator-model", a->no_allocator, "charge allocations as requested (no replay of PyTorch's caching allocator)");
    cmd->callback([a] { run_simulate(*a); });
}

STRATA_COMMAND(30, add_simulate);

}  // namespace
}  // namespace strata::cli
