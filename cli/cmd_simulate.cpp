// `strata simulate`: one training step of a (model, cluster, plan) through lower -> engine, printed
// as a human summary on stdout (stderr when an output is '-'); --json writes the result JSON,
// --trace a Chrome trace. All outputs are computed first and written atomically, so a failure
// never leaves a partial file; a plan too large to simulate in this machine's memory is refused first.
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "strata/common/error.hpp"
#include "strata/common/system.hpp"
#include "strata/lowering/spec_io.hpp"
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
    const std::vector<Output> outputs{{"--json", a.json}, {"--trace", a.trace}};
    check_outputs(outputs);
    const sim::Scenario s = resolve_specs(a.specs, true);
    // A plan whose program would not fit in memory is refused here, not by std::bad_alloc later.
    sim::check_simulation_size(s.model, s.cluster, *s.plan, {a.full, !a.trace.empty(), a.steps},
                               static_cast<double>(memory_limit_bytes()), plan_source(a.specs));
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
    report_stream(outputs) << sim::summary_text(out) << "calibration        " << cal_line << "\n";
}

void add_simulate(CLI::App& app) {
    auto a = std::make_shared<SimulateArgs>();
    auto* cmd = app.add_subcommand("simulate", "Simulate one training step: time, throughput, MFU, memory per tier, OOMs");
    add_spec_options(cmd, a->specs);
    add_db_option(cmd, a->db);
    add_calibration_option(cmd, a->calibration);
    cmd->add_option("--json", a->json, "also write the result as JSON to FILE ('-': stdout, the summary then goes to stderr)");
    cmd->add_option("--trace", a->trace, "write a Chrome trace (Perfetto, chrome://tracing) to FILE ('-': stdout)");
    cmd->add_flag("--full", a->full, "full mode: simulate every GPU (stragglers, expert skew), not one rank per stage");
    add_int_option(cmd, "--steps", a->steps, 1, 100, "training steps to simulate (reported per step; default 1)");
    cmd->add_flag("--no-allocator-model", a->no_allocator, "charge allocations as requested (no replay of PyTorch's caching allocator)");
    cmd->callback([a] { run_simulate(*a); });
}

STRATA_COMMAND(30, add_simulate);

}  // namespace
}  // namespace strata::cli
