#include "strata/gui/models/workbench.hpp"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/sim/fidelity.hpp"

namespace strata::gui {

namespace fs = std::filesystem;

std::string default_scenarios_dir() { return STRATA_SCENARIOS_DIR; }

std::vector<std::string> bundled_names(const std::string& scenarios_dir, const std::string& kind) {
    std::vector<std::string> names;
    const fs::path dir = fs::path(scenarios_dir.empty() ? default_scenarios_dir() : scenarios_dir) / kind;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->is_regular_file(ec) && it->path().extension() == ".json") names.push_back(it->path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

std::string bundled_file(const std::string& scenarios_dir, const std::string& kind, const std::string& name) {
    if (name.empty()) return "";
    const fs::path root = scenarios_dir.empty() ? default_scenarios_dir() : scenarios_dir;
    // The same candidates as the CLI's --model/--cluster/--plan/--scenario lookup.
    for (const fs::path& cand : {root / kind / (name + ".json"), root / kind / name, root / (name + ".json")}) {
        std::error_code ec;
        if (fs::is_regular_file(cand, ec)) return cand.string();
    }
    return "";
}

std::string locate(const std::string& scenarios_dir, const std::string& kind, const std::string& what,
                   const std::string& option) {
    std::error_code ec;
    if (fs::is_regular_file(what, ec)) return what;
    std::string b = bundled_file(scenarios_dir, kind, what);
    if (!b.empty()) return b;
    throw InputError(option, "", "\"" + what + "\" is neither a file nor a bundled " + kind + " name (see scenarios/" + kind + "/)");
}

Hardware::Hardware(const Settings& s)
    : db_path_(s.db_path.empty() ? hwdb::default_db_path() : s.db_path), db_(hwdb::Database::open(db_path_, false)) {
    if (s.calibration == "none") return;
    calibration_source_ = s.calibration.empty() ? "built-in" : s.calibration;
    const std::string text = s.calibration.empty() ? std::string(sim::default_calibration_json()) : read_text_file(s.calibration);
    record_ = std::make_shared<const sim::CalibrationRecord>(sim::calibration_from_json_text(text, calibration_source_));
}

hwdb::HardwareView Hardware::view(const sim::ClusterSpec& c, const std::string& file) const {
    try {
        return db_.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu);
    } catch (const InputError& e) {
        if (!e.file().empty()) throw;
        throw InputError(file, e.path(), e.rule());
    }
}

sim::Calibration Hardware::calibration(const hwdb::HardwareView& hw) const {
    return record_ ? record_->for_arch(sim::arch_family(hw.gpu.arch)) : sim::Calibration{};
}

std::string Hardware::calibration_note(const hwdb::HardwareView& hw) const {
    if (!record_) return "none (uncalibrated datasheet model)";
    const sim::CalibrationGroup* g = record_->group_for(sim::arch_family(hw.gpu.arch));
    return calibration_source_ + ", set " + (!g ? "none (identity)" : g->arch == "*" ? "for other GPUs" : g->arch);
}

std::vector<std::string> Hardware::gpu_ids() const {
    std::vector<std::string> ids;
    for (const auto& g : db_.gpus()) ids.push_back(g.id);
    return ids;
}

Figures figures_of(const sim::SimOutput& out) {
    Figures f;
    f.step_time_s = out.step_time_s;
    f.tokens_per_s = out.job.tokens_per_s;
    f.mfu = out.job.mfu;
    f.peak_hbm_bytes = out.result.peak_bytes_max[static_cast<int>(sim::Tier::gpu)];
    f.fits = !out.result.oom;
    return f;
}

Snapshot simulate_snapshot(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& p,
                           const hwdb::HardwareView& hw, const sim::Calibration& cal, const std::string& file) {
    sim::validate_plan(m, c, p, file);
    sim::SimOptions o;
    o.trace = true;
    o.critical_path = true;
    o.calibration = cal;
    const auto t0 = std::chrono::steady_clock::now();
    Snapshot s{m, c, p, std::make_shared<const sim::SimOutput>(sim::simulate(m, c, p, hw, o)), 0};
    s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s;
}

}  // namespace strata::gui
