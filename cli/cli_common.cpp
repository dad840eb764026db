#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cli.hpp"
#include "strata/common/error.hpp"
#include "strata/common/files.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/common/text.hpp"
#include "strata/sim/fidelity.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::cli {

namespace fs = std::filesystem;

void add_db_option(CLI::App* cmd, std::string& db_path) {
    cmd->add_option("--db", db_path, "hardware database (default: the seeded database of this build, or $STRATA_HWDB)");
}

void add_calibration_option(CLI::App* cmd, std::string& calibration) {
    cmd->add_option("--calibration", calibration,
                    "cost multipliers fitted on the fidelity suite's train half: a calibration JSON, or 'none' for the "
                    "uncalibrated datasheet model (default: bench/fidelity/calibration.json as built in)");
}

void add_residuals_option(CLI::App* cmd, std::string& residuals) {
    cmd->add_option("--residuals", residuals,
                    "held-out fidelity residuals behind the prediction intervals: a residuals JSON (strata fidelity "
                    "--residuals), or 'none' for no interval (default: bench/fidelity/residuals.json as built in)");
}

std::optional<planner::ResidualTable> residuals_for(const std::string& residuals, std::string* described) {
    if (residuals == "none") {
        if (described) *described = "none (no prediction interval)";
        return std::nullopt;
    }
    if (residuals.empty()) {
        const std::string text = planner::default_residuals_json();
        if (text.empty()) {
            if (described) *described = "none built in (bench/fidelity/residuals.json was absent at build time)";
            return std::nullopt;
        }
        if (described) *described = "built-in bench/fidelity/residuals.json";
        return planner::residuals_from_json_text(text, "built-in bench/fidelity/residuals.json");
    }
    if (described) *described = residuals;
    return planner::residuals_from_json_text(read_text_file(residuals), residuals);
}

sim::Calibration calibration_for(const std::string& calibration, const hwdb::HardwareView& hw, std::string* described) {
    if (calibration == "none") {
        if (described) *described = "none (uncalibrated datasheet model)";
        return {};
    }
    const sim::CalibrationRecord rec =
        calibration.empty() ? sim::calibration_from_json_text(sim::default_calibration_json(), "built-in bench/fidelity/calibration.json")
                            : sim::calibration_from_json_text(read_text_file(calibration), calibration);
    const std::string arch = sim::calibration_family(hw);
    const sim::CalibrationGroup* group = rec.group_for(arch);
    const sim::Calibration c = group ? group->factors : sim::Calibration{};
    if (described) {
        std::string line = (calibration.empty() ? std::string("built-in") : calibration) + ", set " +
                           (!group ? "none (identity)" : group->arch == "*" ? "for other GPUs" : group->arch) + ":";
        char buf[64];
        for (int i = 0; i < sim::Calibration::kFactors; ++i) {
            std::snprintf(buf, sizeof buf, " %s %.2f", sim::Calibration::name(i), c.at(i));
            line += buf;
        }
        std::snprintf(buf, sizeof buf, " overlap %.2f", c.overlap);
        line += buf;
        if (c.host_launch_us > 0) {
            std::snprintf(buf, sizeof buf, " host_launch %.1f us", c.host_launch_us);
            line += buf;
        }
        *described = line + " (--calibration none: uncalibrated)";
    }
    return c;
}

hwdb::Database open_db(const std::string& db_path) {
    return hwdb::Database::open_read_only(db_path.empty() ? hwdb::default_db_path() : db_path);
}

hwdb::Database open_db_for_write(const std::string& db_path) {
    return hwdb::Database::open(db_path.empty() ? hwdb::default_db_path() : db_path, false);
}

// ---- numeric options ----

CLI::Option* add_int_option(CLI::App* cmd, const std::string& flags, int& v, int lo, int hi, const std::string& help) {
    return cmd->add_option(flags, v, help)->check(CLI::Range(lo, hi));
}
CLI::Option* add_int_option(CLI::App* cmd, const std::string& flags, std::int64_t& v, std::int64_t lo, std::int64_t hi,
                            const std::string& help) {
    return cmd->add_option(flags, v, help)->check(CLI::Range(lo, hi));
}
CLI::Option* add_num_option(CLI::App* cmd, const std::string& flags, double& v, double lo, double hi, const std::string& help) {
    return cmd->add_option(flags, v, help)->check(CLI::Range(lo, hi));
}

void add_threads_option(CLI::App* cmd, int& threads, const std::string& what) {
    add_int_option(cmd, "--threads,-j", threads, 1, kMaxThreads, what + " (default: all cores)");
}

int thread_count(int threads) {
    if (threads > 0) return threads;
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void add_global_batch_option(CLI::App* cmd, int& global_batch, const std::string& default_text) {
    add_int_option(cmd, "--global-batch,-b", global_batch, 1, static_cast<int>(sim::kMaxGlobalBatch),
                   "sequences per step (default: " + default_text + ")");
}

// ---- outputs ----

namespace {
bool to_stdout(const std::string& path) { return path == "-" || standard_fd(path) == 1; }
}  // namespace

void check_outputs(const std::vector<Output>& outputs) {
    const Output* on_stdout = nullptr;
    std::vector<std::pair<const Output*, fs::path>> files;
    for (const Output& o : outputs) {
        if (o.path.empty()) continue;
        if (to_stdout(o.path)) {
            if (on_stdout)
                throw InputError(o.option, "", "and " + on_stdout->option + " both write to stdout: give one of them a file");
            on_stdout = &o;
            continue;
        }
        const std::string why = unwritable_reason(o.path);
        if (!why.empty()) throw InputError(o.option, "", "\"" + o.path + "\" " + why);
        std::error_code ec;
        fs::path canon = fs::weakly_canonical(o.path, ec);
        if (ec) canon = fs::absolute(o.path, ec);
        for (const auto& [other, p] : files)
            if (p == canon) throw InputError(o.option, "", "\"" + o.path + "\" is also the file of " + other->option + ": give each output its own file");
        files.emplace_back(&o, canon);
    }
}

std::ostream& report_stream(const std::vector<Output>& outputs) {
    for (const Output& o : outputs)
        if (to_stdout(o.path)) return std::cerr;
    return std::cout;
}

void add_spec_options(CLI::App* cmd, SpecArgs& a) {
    cmd->add_option("--scenario,-s", a.scenario, "scenario JSON (model, cluster and plan), or a bundled scenario name");
    cmd->add_option("--model,-m", a.model, "model JSON, or a bundled model name (e.g. llama-2-7b)");
    cmd->add_option("--cluster,-c", a.cluster, "cluster JSON, or a bundled cluster name (e.g. dgx-h100-x8)");
    cmd->add_option("--plan,-p", a.plan, "plan JSON, or a bundled plan name");
}

std::string find_bundled(const std::string& kind, const std::string& name) {
    if (name.empty()) return "";
    const fs::path root = STRATA_SCENARIOS_DIR;
    for (const fs::path& cand : {root / kind / (name + ".json"), root / kind / name, root / (name + ".json")}) {
        std::error_code ec;
        if (fs::is_regular_file(cand, ec)) return cand.string();
    }
    return "";
}

namespace {

// Bundled names of one kind ("" = whole scenarios), for suggestions.
std::vector<std::string> bundled_names(const std::string& kind) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(STRATA_SCENARIOS_DIR) / kind, ec))
        if (e.is_regular_file(ec) && e.path().extension() == ".json") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::string locate(const std::string& kind, const std::string& what, const std::string& option) {
    const std::string noun = kind.empty() ? "scenario" : kind.substr(0, kind.size() - 1);  // "models" -> "model"
    const std::string folder = kind.empty() ? "scenarios/" : "scenarios/" + kind + "/";
    std::error_code ec;
    if (fs::is_regular_file(what, ec)) return what;
    if (fs::is_directory(what, ec)) throw InputError(option, "", "\"" + what + "\" is a directory, not a " + noun + " file");
    std::string b = find_bundled(kind, what);
    if (!b.empty()) return b;
    const std::vector<std::string> names = bundled_names(kind);
    std::string hint;
    const std::string dym = did_you_mean(what, names);
    if (!dym.empty()) {
        hint = " (did you mean \"" + dym + "\"?)";
    } else if (!names.empty()) {
        std::string list;
        for (std::size_t i = 0; i < names.size() && i < 16; ++i) list += (i ? ", " : "") + names[i];
        hint = "; bundled: " + list + (names.size() > 16 ? ", ..." : "");
    }
    throw InputError(option, "", "\"" + what + "\" is neither a file nor a bundled " + noun + " name (" + folder + ")" + hint);
}

}  // namespace

sim::Scenario resolve_specs(const SpecArgs& a, bool need_plan) {
    sim::Scenario s;
    std::string plan_file;
    if (!a.scenario.empty()) {
        plan_file = locate("", a.scenario, "--scenario");
        s = sim::load_scenario(plan_file);
    } else {
        if (a.model.empty()) throw InputError("--model", "", "is required (or give --scenario)");
        if (a.cluster.empty()) throw InputError("--cluster", "", "is required (or give --scenario)");
        s.model = sim::load_model(locate("models", a.model, "--model"));
        s.cluster = sim::load_cluster(locate("clusters", a.cluster, "--cluster"));
        s.name = s.model.name + " on " + s.cluster.name;
    }
    // Explicit --model/--cluster/--plan override the scenario's own.
    if (!a.scenario.empty() && !a.model.empty()) s.model = sim::load_model(locate("models", a.model, "--model"));
    if (!a.scenario.empty() && !a.cluster.empty()) s.cluster = sim::load_cluster(locate("clusters", a.cluster, "--cluster"));
    if (!a.plan.empty()) {
        plan_file = locate("plans", a.plan, "--plan");
        s.plan = sim::load_plan(plan_file);
    }
    if (need_plan && !s.plan) throw InputError(a.scenario.empty() ? "--plan" : a.scenario, "plan", "is required");
    if (s.plan) {
        sim::derive_unstated_dp(s.cluster, *s.plan);  // again: --cluster may have replaced the scenario's
        sim::validate_plan(s.model, s.cluster, *s.plan, plan_file.empty() ? "--plan" : plan_file);
    }
    return s;
}

hwdb::HardwareView view_for(const hwdb::Database& db, const sim::ClusterSpec& c) {
    return db.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu);
}

hwdb::HardwareView view_for(const hwdb::Database& db, const sim::ClusterSpec& c, const SpecArgs& a) {
    try {
        return view_for(db, c);
    } catch (const InputError& e) {
        if (!e.file().empty()) throw;
        const std::string file = !a.cluster.empty() ? locate("clusters", a.cluster, "--cluster") : a.scenario.empty() ? "--cluster" : locate("", a.scenario, "--scenario");
        throw InputError(file, e.path(), e.rule());
    }
}

void write_output(const std::string& path, const std::string& text) {
    if (path == "-") {
        std::cout << text;
        if (!text.empty() && text.back() != '\n') std::cout << "\n";
        std::cout.flush();
        if (!std::cout) throw RuntimeError("cannot write to stdout");
        return;
    }
    write_file_atomic(path, text);
}

std::string plan_source(const SpecArgs& a) {
    if (!a.plan.empty()) return locate("plans", a.plan, "--plan");
    if (!a.scenario.empty()) return locate("", a.scenario, "--scenario");
    return "--plan";
}

}  // namespace strata::cli
