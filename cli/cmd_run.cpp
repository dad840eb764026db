// `strata run`: execute a scenario's plan for real with the runtime (docs/runtime.md), a line per
// step: loss, step time, tokens/s, MFU, peak memory per tier. A plan that cannot fit is refused
// before anything is allocated; a tier that fills mid-step is reported, not a crash; Ctrl-C stops
// between steps (and saves with --save). --trace writes the last step's measured timeline in the
// simulator's trace format, --json the per-step figures.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "run_support.hpp"
#include "strata/common/error.hpp"
#include "strata/common/text.hpp"
#include "strata/sim/trace.hpp"

namespace strata::cli {
namespace {

struct RunArgs {
    SpecArgs specs;
    RuntimeArgs rt;
    std::string db, trace, json;
    bool memory_only = false;
    int peak_detail = 0;
};

// The rank with the largest GPU peak, and what it held then.
void print_peak_detail(std::ostream& out, const std::vector<runtime::PeakDetail>& details) {
    if (details.empty()) return;
    const runtime::PeakDetail& d = details.front();
    out << "at its GPU peak, " << human_bytes(d.bytes) << ", rank " << d.rank << " (the largest of " << details.size()
        << (details.size() == 1 ? " rank" : " ranks") << " walked) ran " << d.at << " and held, largest first:\n";
    for (const runtime::PeakHeld& h : d.largest) out << "  " << human_bytes(h.bytes) << "  " << h.what << "\n";
    out << "  (the dataflow's values held then: " << human_bytes(d.values_bytes) << ")\n";
}

std::string peak_details_json(const std::vector<runtime::PeakDetail>& details) {
    std::string o = "[";
    for (std::size_t i = 0; i < details.size(); ++i) {
        const auto& d = details[i];
        o += std::string(i ? ",\n" : "\n") + "    {\"rank\": " + std::to_string(d.rank) + ", \"bytes\": " + json_num(d.bytes, 0) + ", \"at\": " +
             json_quote(d.at) + ", \"values_bytes\": " + json_num(d.values_bytes, 0) + ", \"largest\": [";
        for (std::size_t k = 0; k < d.largest.size(); ++k)
            o += std::string(k ? ", " : "") + "{\"what\": " + json_quote(d.largest[k].what) + ", \"bytes\": " + json_num(d.largest[k].bytes, 0) + "}";
        o += "]}";
    }
    return o + "\n  ]";
}

std::string step_line(const runtime::StepReport& r, int of) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "step %4d/%d  loss %8.4f  %9.2f ms  %12.0f tokens/s  MFU %6.2f%%  peak gpu %s cpu %s ssd %s", r.step, of,
                  r.loss, r.step_s * 1e3, r.tokens_per_s, 100 * r.mfu, human_bytes(r.peak_bytes[0]).c_str(),
                  human_bytes(r.peak_bytes[1]).c_str(), human_bytes(r.peak_bytes[2]).c_str());
    std::string line = buf;
    if (r.mtp_loss > 0) line += "  mtp loss " + json_num(r.mtp_loss, 4);
    if (r.skipped) line += "  (update skipped: fp16 overflow at loss scale " + json_num(r.loss_scale, 0) + ")";
    return line;
}

std::string steps_json(const std::vector<runtime::StepReport>& steps, const std::string& scenario, const std::string& backend,
                       const std::vector<runtime::PeakDetail>& details = {}) {
    std::string o = "{\n  \"schema\": \"strata.run/1\",\n  \"scenario\": " + json_quote(scenario) + ",\n  \"backend\": " + json_quote(backend) +
                    ",\n  \"steps\": [";
    for (std::size_t i = 0; i < steps.size(); ++i) {
        const auto& r = steps[i];
        o += std::string(i ? ",\n" : "\n") + "    {\"step\": " + std::to_string(r.step) + ", \"loss\": " + json_num(r.loss, 6) +
             (r.mtp_loss > 0 ? ", \"mtp_loss\": " + json_num(r.mtp_loss, 6) : std::string()) +
             ", \"step_s\": " + json_num(r.step_s, 6) + ", \"tokens_per_s\": " + json_num(r.tokens_per_s, 1) + ", \"mfu\": " +
             json_num(r.mfu, 6) + ", \"peak_bytes\": {\"gpu\": " + json_num(r.peak_bytes[0], 0) + ", \"cpu\": " +
             json_num(r.peak_bytes[1], 0) + ", \"ssd\": " + json_num(r.peak_bytes[2], 0) + "}, \"loss_scale\": " +
             json_num(r.loss_scale, 0) + ", \"skipped\": " + (r.skipped ? "true" : "false") + "}";
    }
    o += "\n  ]";
    if (!details.empty()) o += ",\n  \"peak_detail\": " + peak_details_json(details);
    return o + "\n}\n";
}

void run_run(const RunArgs& a) {
    const std::vector<Output> outputs{{"--trace", a.trace}, {"--json", a.json}};
    check_outputs(outputs);  // before a step is run
    std::ostream& report = report_stream(outputs);
    const sim::Scenario s = resolve_specs(a.specs, true);
    const hwdb::Database db = open_db(a.db);
    const hwdb::HardwareView hw = view_for(db, s.cluster, a.specs);
    runtime::RunOptions o = runtime_options(a.rt, s, hw);
    o.record_spans = !a.trace.empty();
    o.peak_detail = a.peak_detail;
    if (a.memory_only) {
        // One step's dataflow, walked whatever it needs: no capacity stops it, nothing is allocated.
        o.memory_only = true;
        o.check_fit = false;
        o.capacity_bytes = {};
        // Two steps: the first creates Adam's moments at its end, the second holds them throughout.
        runtime::Session session(s.model, s.cluster, *s.plan, o);
        session.step();
        runtime::StepReport r = session.step();
        r.peak_bytes = session.peak_bytes();
        const std::size_t walked = session.program().ranks.size(), all = static_cast<std::size_t>(s.plan->gpus());
        report << "memory only (the dataflow of two steps walked, nothing computed or allocated), "
               << (walked == all ? std::to_string(all) + " ranks" : std::to_string(walked) + " representative ranks of " + std::to_string(all))
               << ": peak gpu " << human_bytes(r.peak_bytes[0]) << " per rank, cpu " << human_bytes(r.peak_bytes[1]) << " per node, ssd "
               << human_bytes(r.peak_bytes[2]) << " per node\n";
        const std::string trace = a.trace.empty() ? "" : sim::to_chrome_trace(session.program(), measured_result(session.program(), session.traces()));
        print_peak_detail(report, session.peak_details());
        const std::string json = a.json.empty() ? "" : steps_json({r}, s.name, "memory-only", session.peak_details());
        if (!trace.empty()) write_output(a.trace, trace);
        if (!json.empty()) write_output(a.json, json);
        return;
    }
    install_sigint();
    o.stop = &g_run_interrupted;
    runtime::Session session(s.model, s.cluster, *s.plan, o);
    const bool tty = ::isatty(STDERR_FILENO);
    report << "running " << (s.name.empty() ? a.specs.scenario : s.name) << " on the " << runtime::to_string(o.backend) << " backend: "
              << session.program().ranks.size() << " ranks, " << s.plan->micro_batches() << " micro-batches of " << s.plan->micro_batch
              << " x " << s.model.seq_len << " tokens a step"
              << (session.steps_done() > 0 ? ", resumed at step " + std::to_string(session.steps_done()) : std::string()) << "\n";
    std::vector<runtime::StepReport> steps;
    bool interrupted = false;
    for (int i = 0; i < a.rt.steps; ++i) {
        if (g_run_interrupted.load()) {
            interrupted = true;
            break;
        }
        if (tty) std::fprintf(stderr, "\rstep %d/%d ...", i + 1, a.rt.steps);
        runtime::StepReport r;
        try {
            r = session.step();
        } catch (...) {
            if (tty) std::fprintf(stderr, "\r%40s\r", "");
            restore_sigint();
            throw;
        }
        if (tty) std::fprintf(stderr, "\r%40s\r", "");
        steps.push_back(r);
        report << step_line(r, session.steps_done() - static_cast<int>(steps.size()) + a.rt.steps) << std::endl;
        if (!std::isfinite(r.loss)) throw RuntimeError("the loss is not finite at step " + std::to_string(r.step) + " (lower --lr?)");
    }
    restore_sigint();
    // Outputs are rendered before anything is written.
    const std::string trace = a.trace.empty() || steps.empty() ? "" : sim::to_chrome_trace(session.program(), measured_result(session.program(), session.traces()));
    print_peak_detail(report, session.peak_details());
    const std::string json = a.json.empty() ? "" : steps_json(steps, s.name, runtime::to_string(o.backend), session.peak_details());
    if (!a.rt.save.empty()) {
        session.save(a.rt.save);
        report << "saved a checkpoint at step " << session.steps_done() << " to " << a.rt.save << "\n";
    }
    if (!trace.empty()) write_output(a.trace, trace);
    if (!json.empty()) write_output(a.json, json);
    // Thrown, not std::exit: the session's destructor removes its temporary ssd directory.
    if (interrupted) throw Interrupted("stopped after step " + std::to_string(session.steps_done()));
}

void add_run(CLI::App& app) {
    auto a = std::make_shared<RunArgs>();
    auto* cmd = app.add_subcommand("run", "Train with the plan for real (the runtime): loss, step time, tokens/s, MFU, peak memory per tier");
    add_spec_options(cmd, a->specs);
    add_db_option(cmd, a->db);
    add_runtime_options(cmd, a->rt, 10);
    cmd->add_option("--trace", a->trace, "write the last step's measured timeline as a Chrome trace to FILE ('-' = stdout)");
    cmd->add_option("--json", a->json, "write the per-step figures as JSON to FILE ('-' = stdout)");
    cmd->add_flag("--memory-only", a->memory_only,
                  "walk two steps' dataflow without computing or allocating anything: the peak memory per tier a run reaches, "
                  "in seconds, also for a plan this machine cannot hold");
    cmd->add_option("--peak-detail", a->peak_detail,
                    "print the N largest things the rank with the largest GPU peak held then (weights, gradients, optimizer states, "
                    "gathered parameters, each activation or gradient value), and every rank's in --json")
        ->check(CLI::Range(0, 1000));
    cmd->callback([a] { run_run(*a); });
}

STRATA_COMMAND(35, add_run);

}  // namespace
}  // namespace strata::cli
