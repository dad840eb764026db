#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli.hpp"
#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
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

sim::Calibration calibration_for(const std::string& calibration, const hwdb::HardwareView& hw, std::string* described) {
    if (calibration == "none") {
        if (described) *described = "none (uncalibrated datasheet model)";
        return {};
    }
    const sim::CalibrationRecord rec =
        calibration.empty() ? sim::calibration_from_json_text(sim::default_calibration_json(), "built-in bench/fidelity/calibration.json")
                            : sim::calibration_from_json_text(read_text_file(calibration), calibration);
    const std::string arch = sim::arch_family(hw.gpu.arch);
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
    return hwdb::Database::open(db_path.empty() ? hwdb::default_db_path() : db_path, false);
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

static std::string locate(const std::string& kind, const std::string& what, const std::string& option) {
    std::error_code ec;
    if (fs::is_regular_file(what, ec)) return what;
    std::string b = find_bundled(kind, what);
    if (!b.empty()) return b;
    throw InputError(option, "", "\"" + what + "\" is neither a file nor a bundled " + kind + " name (see scenarios/" + kind + "/)");
}

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
    if (s.plan) sim::validate_plan(s.model, s.cluster, *s.plan, plan_file.empty() ? "--plan" : plan_file);
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
        return;
    }
    write_file_atomic(path, text);
}

}  // namespace strata::cli
