// `strata fidelity`: simulate the published runs of bench/fidelity/runs.json with the datasheet
// hardware database, print predicted vs published per entry and MAPE per split; optionally fit the
// Calibration multipliers on the train split (--fit-calibration). Outputs are rendered fully
// before any file is written. Per-entry tuning does not exist here by design.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <ctime>
#include <exception>
#include <functional>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "cli.hpp"
#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/planner/interval.hpp"
#include "strata/sim/fidelity.hpp"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

struct FidelityArgs {
    bool presets_only = false, fit_measured = false;
    std::string runs, split = "all", json, calibration, fit_out, db, date, residuals_out;
    int threads = 0;  // all cores
};

// runs.json from the working directory, else from the source tree this binary was built from.
std::string default_runs_path() {
    const fs::path here = "bench/fidelity/runs.json";
    std::error_code ec;
    if (fs::is_regular_file(here, ec)) return here.string();
    return (fs::path(STRATA_SCENARIOS_DIR).parent_path() / "bench" / "fidelity" / "runs.json").string();
}

std::string today_utc() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
    return buf;
}

// Hardware views by entry id, resolved once per run on one thread (the database handle is not
// shared across threads; a fit simulates the train rows dozens of times).
struct Views {
    std::map<std::string, hwdb::HardwareView> ok;
    std::map<std::string, InputError> errors;
};

Views resolve_views(const std::vector<sim::FidelityEntry>& entries, const hwdb::Database& db) {
    Views v;
    for (const sim::FidelityEntry& e : entries) {
        if (!e.skipped.empty()) continue;
        try {
            v.ok.emplace(e.id, view_for(db, e.cluster));
        } catch (const InputError& err) {
            v.errors.emplace(e.id, err);
        }
    }
    return v;
}

// The calibration a run applies: --calibration's file, else calibration.json beside the runs file
// if there is one; none for 'none'.
sim::CalibrationRecord loaded_calibration(const FidelityArgs& a, const std::string& runs_path) {
    if (a.calibration == "none") return {};
    std::string path = a.calibration;
    if (path.empty()) path = (fs::path(runs_path).parent_path() / "calibration.json").string();
    std::error_code ec;
    if (!a.calibration.empty() || fs::is_regular_file(path, ec)) return sim::calibration_from_json_text(read_text_file(path), path);
    return {};
}

// `cal` picks the multipliers for a calibration family.
using CalibrationFor = std::function<sim::Calibration(const std::string& arch)>;

// The simulations run on `threads` workers, each writing its own row, so the output does not
// depend on the thread count.
std::vector<sim::FidelityRow> run_all(const std::vector<sim::FidelityEntry>& entries, const Views& hw,
                                      const CalibrationFor& cal, int threads) {
    const auto& views = hw.ok;
    const auto& view_errors = hw.errors;
    std::vector<sim::FidelityRow> rows(entries.size());
    std::atomic<std::size_t> next{0};
    std::exception_ptr failure;
    std::mutex failure_mutex;
    auto worker = [&] {
        for (std::size_t i = next++; i < entries.size(); i = next++) {
            const sim::FidelityEntry& e = entries[i];
            const sim::ViewResolver resolve = [&](const sim::ClusterSpec&) -> hwdb::HardwareView {
                if (auto it = view_errors.find(e.id); it != view_errors.end()) throw it->second;
                return views.at(e.id);
            };
            try {
                const auto v = views.find(e.id);
                const sim::Calibration c = v == views.end() ? sim::Calibration{} : cal(sim::calibration_family(v->second));
                rows[i] = sim::run_fidelity_entry(e, resolve, c);
            } catch (...) {
                std::lock_guard<std::mutex> lock(failure_mutex);
                if (!failure) failure = std::current_exception();
            }
        }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
    if (failure) std::rethrow_exception(failure);
    return rows;
}

void run_fidelity(const FidelityArgs& a) {
    if (a.split != "train" && a.split != "test" && a.split != "all")
        throw InputError("--split", "", "must be train, test or all (got \"" + a.split + "\")");
    const std::vector<Output> outputs{{"--json", a.json}, {"--fit-calibration", a.fit_out}, {"--residuals", a.residuals_out}};
    if (!a.residuals_out.empty() && a.split != "test")
        throw InputError("--residuals", "", "needs --split test: the intervals come from held-out runs only");
    if (a.fit_measured && a.fit_out.empty()) throw InputError("--fit-measured", "", "needs --fit-calibration FILE: where the sets are written");
    check_outputs(outputs);
    const std::string runs_path = a.runs.empty() ? default_runs_path() : a.runs;
    const std::vector<sim::FidelityEntry> all = sim::load_fidelity_runs(read_text_file(runs_path), runs_path, sim::FidelityLoadOptions{a.presets_only});
    const hwdb::Database db = open_db(a.db);
    const Views views = resolve_views(all, db);
    const int threads = thread_count(a.threads);

    sim::CalibrationRecord cal;
    std::string cal_text;  // calibration file to write (fit mode)
    if (!a.fit_out.empty()) {
        // Fit on train only: one set over every train entry ("*", for GPUs without their own set),
        // then one per architecture family with at least kMinGroup compared train entries.
        constexpr int kMinGroup = 5;
        // Memory-only entries publish no rate or time: they cannot inform a cost factor; nor can a
        // figure its publisher reports as a regression of its software.
        std::vector<sim::FidelityEntry> train = sim::select_split(all, "train");
        train.erase(std::remove_if(train.begin(), train.end(),
                                   [](const sim::FidelityEntry& e) { return e.memory_only || !e.publisher_regression.empty(); }),
                    train.end());
        std::map<std::string, std::vector<sim::FidelityEntry>> by_arch;
        for (const sim::FidelityEntry& e : train) {
            if (!e.skipped.empty()) continue;
            const auto v = views.ok.find(e.id);
            if (v == views.ok.end()) continue;
            by_arch[sim::calibration_family(v->second)].push_back(e);
        }
        // --fit-measured: only the families of GPUs this database has measured ("Hopper+measured"),
        // added to the calibration in use; every other set stays as it was fitted.
        std::vector<std::pair<std::string, std::vector<sim::FidelityEntry>>> groups;
        if (!a.fit_measured) groups.emplace_back("*", train);
        for (auto& [arch, entries] : by_arch)
            if (static_cast<int>(entries.size()) >= kMinGroup && !arch.empty() && (!a.fit_measured || arch.find("+measured") != std::string::npos))
                groups.emplace_back(arch, entries);
        if (a.fit_measured) {
            if (groups.empty()) throw InputError("--fit-measured", "", "no architecture has " + std::to_string(kMinGroup) +
                                                 " train entries on GPUs this database measured (import a profile: docs/profiler.md)");
            cal = loaded_calibration(a, runs_path);
        }
        const std::string date = a.date.empty() ? today_utc() : a.date;
        if (!a.fit_measured) cal.date = date;  // else the record keeps its main fit's date; the note says this one's
        int simulations = 0;
        for (const auto& [arch, entries] : groups) {
            auto evaluate = [&, &entries = entries](const sim::Calibration& c) {
                return run_all(entries, views, [&](const std::string&) { return c; }, threads);
            };
            sim::CalibrationGroup g;
            g.arch = arch;
            g.train_entries = static_cast<int>(
                std::count_if(entries.begin(), entries.end(), [](const sim::FidelityEntry& e) { return e.skipped.empty(); }));
            if (sim::calibration_supported()) {
                sim::FitOptions fo;
                fo.host_launch_us = sim::kHostLaunchUs;
                const sim::FitResult fit = sim::fit_calibration_overlap(evaluate, fo);
                g.factors = fit.calibration;
                g.train_mape_before = fit.before;
                g.train_mape_after = fit.after;
                simulations += fit.simulations;
            } else {
                g.train_mape_before = g.train_mape_after = sim::fidelity_stats(evaluate({}), "train").mape;
            }
            auto same = std::find_if(cal.groups.begin(), cal.groups.end(), [&](const sim::CalibrationGroup& c) { return c.arch == g.arch; });
            if (same != cal.groups.end()) *same = g;
            else cal.groups.push_back(g);
        }
        cal.fitted = sim::calibration_supported();
        const std::string how = "surrogate (critical path by class) golden-section search in [0.5, 2.5], re-linearised by simulation, at each "
                                "overlap-interference value of a grid; " + std::to_string(simulations) + " simulations of the train rows";
        if (a.fit_measured) cal.note += "; +measured sets fitted " + date + " on a database with measured GEMMs, " + how;
        else cal.note = cal.fitted ? "per architecture family: " + how : "not fitted: this build's simulate() does not apply Calibration; identity factors";
        cal_text = sim::to_json_text(cal);
    } else {
        cal = loaded_calibration(a, runs_path);
    }

    const std::vector<sim::FidelityRow> rows =
        run_all(sim::select_split(all, a.split), views, [&](const std::string& arch) { return cal.for_arch(arch); }, threads);
    const std::string json = a.json.empty() ? "" : sim::fidelity_json_text(rows, cal);
    if (!a.fit_out.empty()) write_output(a.fit_out, cal_text);
    if (!a.json.empty()) write_output(a.json, json);
    if (!a.residuals_out.empty()) {
        const std::string described = a.calibration == "none" ? "none" : cal.groups.empty() ? "identity" : cal.date.empty() ? "loaded" : "fitted " + cal.date;
        write_output(a.residuals_out, planner::to_json_text(planner::residuals_from_rows(all, rows, a.split, described)));
    }
    std::ostream& out = report_stream(outputs);
    out << sim::fidelity_table_text(rows) << "\n" << sim::fidelity_summary_text(rows);
    out << std::fixed << std::setprecision(3);
    out << "calibration: " << (cal.fitted ? "fitted on train" : cal.groups.empty() ? "identity" : "loaded")
              << (sim::calibration_supported() ? "" : " (not applied: simulate() has no calibration input yet)") << "\n";
    for (const sim::CalibrationGroup& g : cal.groups) {
        out << "  " << std::left << std::setw(8) << (g.arch == "*" ? "other" : g.arch) << std::right;
        for (int i = 0; i < sim::Calibration::kFactors; ++i)
            out << "  " << sim::Calibration::name(i) << " " << g.factors.at(i);
        out << "  overlap " << g.factors.overlap;
        if (g.factors.host_launch_us > 0) out << "  host_launch_us " << g.factors.host_launch_us;
        if (g.train_entries > 0)
            out << std::setprecision(1) << "  (train " << g.train_entries << ": " << 100 * g.train_mape_before << "% -> "
                      << 100 * g.train_mape_after << "%)" << std::setprecision(3);
        out << "\n";
    }
    if (!a.fit_out.empty()) out << "written to " << a.fit_out << "\n";
}

void add_fidelity(CLI::App& app) {
    auto a = std::make_shared<FidelityArgs>();
    auto* cmd = app.add_subcommand("fidelity", "Compare simulated with published training runs (bench/fidelity): error per entry, MAPE per split");
    cmd->add_option("--runs", a->runs, "the data set (default: bench/fidelity/runs.json)");
    cmd->add_option("--split", a->split, "train, test or all (default: all)");
    cmd->add_flag("--presets-only", a->presets_only,
                  "read each entry with a framework from its stated fields and its framework's preset, without the "
                  "knobs set by hand (docs/fidelity.md, \"Presets\")");
    cmd->add_option("--json", a->json, "also write entries and summaries as JSON to FILE ('-': stdout, the table then goes to stderr)");
    cmd->add_option("--calibration", a->calibration,
                    "calibration JSON to apply, or 'none' (default: calibration.json next to the runs file, if present)");
    cmd->add_option("--fit-calibration", a->fit_out, "fit the multipliers on the train split and write them to FILE ('-': stdout)");
    cmd->add_option("--residuals", a->residuals_out,
                    "with --split test: write the held-out residuals (published / predicted step time, memory peak errors) "
                    "behind plan's and capacity's prediction intervals to FILE (bench/fidelity/residuals.json)");
    cmd->add_option("--date", a->date, "date recorded by --fit-calibration (default: today, UTC)");
    cmd->add_flag("--fit-measured", a->fit_measured,
                  "with --fit-calibration: fit only the sets of GPUs this database has measured GEMMs of (\"Hopper+measured\"), "
                  "added to the calibration in use (docs/costs.md, \"Calibration\")");
    add_threads_option(cmd, a->threads, "simulations run in parallel (results do not depend on it)");
    add_db_option(cmd, a->db);
    cmd->callback([a] { run_fidelity(*a); });
}

STRATA_COMMAND(70, add_fidelity);

}  // namespace
}  // namespace strata::cli
