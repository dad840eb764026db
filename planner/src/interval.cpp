// Prediction intervals from held-out fidelity residuals (interval.hpp).
#include "strata/planner/interval.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <tuple>

#include "strata/common/json_reader.hpp"

namespace strata::planner {

double quantile(std::vector<double> x, double q) {
    if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
    std::sort(x.begin(), x.end());
    const double h = (static_cast<double>(x.size()) - 1.0) * q;
    const std::size_t i = static_cast<std::size_t>(std::floor(h));
    if (i + 1 >= x.size()) return x.back();
    return x[i] + (h - static_cast<double>(i)) * (x[i + 1] - x[i]);
}

std::pair<double, double> conformal_bounds(std::vector<double> x, double level) {
    if (x.empty()) return {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
    std::sort(x.begin(), x.end());
    const double n = static_cast<double>(x.size()), tail = (1.0 - level) / 2.0;
    // 1-based order statistics of split conformal prediction; past the sample, its extreme.
    // (A hair of tolerance: (n + 1) x 0.1 must floor to 2 at n = 19, not to 1 by rounding.)
    const auto lo = static_cast<std::size_t>(std::clamp(std::floor((n + 1.0) * tail + 1e-9), 1.0, n));
    const auto hi = static_cast<std::size_t>(std::clamp(std::ceil((n + 1.0) * (1.0 - tail) - 1e-9), 1.0, n));
    return {x[lo - 1], x[hi - 1]};
}

const char* scale_class(int gpus) { return gpus <= 64 ? "<=64 GPUs" : gpus <= 1024 ? "<=1024 GPUs" : ">1024 GPUs"; }

StepInterval step_interval(const ResidualTable& t, const std::string& arch, bool moe, int gpus, const std::string& framework,
                           double level, const std::string& skip_id) {
    const std::string kind = moe ? "MoE" : "dense";
    const std::string scale = scale_class(gpus);
    // Finest class first; a class is used once it holds enough residuals for its tails to mean something.
    struct Rule {
        std::string name;
        bool by_arch, by_framework, by_moe, by_scale;
    };
    std::vector<Rule> rules;
    if (!framework.empty()) {
        rules.push_back({arch + " " + framework + " " + kind + " " + scale, true, true, true, true});
        rules.push_back({arch + " " + framework + " " + kind, true, true, true, false});
    }
    for (const Rule& r : {Rule{arch + " " + kind + " " + scale, true, false, true, true}, Rule{arch + " " + kind, true, false, true, false},
                          Rule{arch, true, false, false, false}, Rule{"all", false, false, false, false}})
        rules.push_back(r);
    for (const Rule& r : rules) {
        std::vector<double> v;
        for (const StepResidual& s : t.step) {
            if (s.id == skip_id) continue;
            if (r.by_arch && s.arch != arch) continue;
            if (r.by_framework && s.framework != framework) continue;
            if (r.by_moe && s.moe != moe) continue;
            if (r.by_scale && scale_class(s.gpus) != scale) continue;
            v.push_back(s.ratio);
        }
        if (static_cast<int>(v.size()) < kMinClassSize) continue;
        StepInterval iv;
        iv.available = true;
        std::tie(iv.lo, iv.hi) = conformal_bounds(v, level);
        iv.n = static_cast<int>(v.size());
        iv.cls = r.name;
        return iv;
    }
    return {};
}

double memory_error(const ResidualTable& t) {
    double sum = 0;
    for (const MemoryResidual& m : t.memory) sum += std::fabs(m.error);
    return t.memory.empty() ? 0.0 : sum / static_cast<double>(t.memory.size());
}

const char* memory_verdict(double peak_bytes, double capacity_bytes, double error) {
    if (capacity_bytes > 0 && std::fabs(peak_bytes - capacity_bytes) / capacity_bytes < error) return "borderline";
    return peak_bytes <= capacity_bytes ? "fits" : "does not fit";
}

double coverage(const ResidualTable& t, double level) {
    int inside = 0, n = 0;
    for (const StepResidual& s : t.step) {
        const StepInterval iv = step_interval(t, s.arch, s.moe, s.gpus, s.framework, level, s.id);
        if (!iv.available) continue;
        ++n;
        if (s.ratio >= iv.lo && s.ratio <= iv.hi) ++inside;
    }
    return n > 0 ? static_cast<double>(inside) / n : 0.0;
}

ResidualTable residuals_from_rows(const std::vector<sim::FidelityEntry>& entries, const std::vector<sim::FidelityRow>& rows,
                                  const std::string& split, const std::string& calibration) {
    ResidualTable t;
    t.split = split;
    t.calibration = calibration;
    for (const sim::FidelityRow& r : rows) {
        if (split != "all" && r.split != split) continue;
        const auto e = std::find_if(entries.begin(), entries.end(), [&](const sim::FidelityEntry& x) { return x.id == r.id; });
        if (e == entries.end()) continue;
        if (r.scored() && r.predicted > 0 && r.published > 0) {
            // error = predicted / published - 1 of a time (too fast: < 0) or of a rate (too fast: > 0);
            // either way, published time / predicted time.
            const double ratio = r.quantity == sim::Quantity::step_time_s ? 1.0 / (1.0 + r.error) : 1.0 + r.error;
            t.step.push_back({r.id, r.arch, r.framework, e->model.moe.has_value(), r.gpus, ratio});
        }
        if (r.simulated() && r.published_peak_hbm_bytes > 0) t.memory.push_back({r.id, r.peak_error});
    }
    return t;
}

namespace {
double six_digits(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::strtod(buf, nullptr);
}
}  // namespace

std::string to_json_text(const ResidualTable& t) {
    nlohmann::ordered_json j;
    j["schema"] = 1;
    j["split"] = t.split;
    j["calibration"] = t.calibration;
    j["note"] = "ratio: published step time / predicted step time of each scored run of the split; memory: predicted / "
                "published peak - 1. Written by `strata fidelity --split test --residuals FILE` (docs/planner.md).";
    j["interval_level"] = kIntervalLevel;
    j["loo_coverage"] = six_digits(coverage(t));
    j["memory_error"] = six_digits(memory_error(t));
    nlohmann::ordered_json step = nlohmann::ordered_json::array();
    for (const StepResidual& s : t.step)
        step.push_back({{"id", s.id}, {"arch", s.arch}, {"framework", s.framework}, {"moe", s.moe}, {"gpus", s.gpus}, {"ratio", six_digits(s.ratio)}});
    j["step"] = step;
    nlohmann::ordered_json mem = nlohmann::ordered_json::array();
    for (const MemoryResidual& m : t.memory) mem.push_back({{"id", m.id}, {"error", six_digits(m.error)}});
    j["memory"] = mem;
    return j.dump(1) + "\n";
}

ResidualTable residuals_from_json_text(const std::string& text, const std::string& file) {
    const nlohmann::json j = parse_json_text(text, file);
    JsonReader r(j, file, "");
    ResidualTable t;
    if (r.i64("schema") != 1) r.fail("schema", "must be 1");
    t.split = r.choice("split", {"train", "test", "all"});
    t.calibration = r.str_or("calibration", "");
    r.str_or("note", "");
    r.num_or("interval_level", kIntervalLevel);
    r.num_or("loo_coverage", 0);
    r.num_or("memory_error", 0);
    auto array = [&](const char* key) -> const nlohmann::json& {
        const nlohmann::json* a = r.get(key);
        if (!a || !a->is_array()) r.fail(key, "must be an array");
        return *a;
    };
    const nlohmann::json& step = array("step");
    for (std::size_t i = 0; i < step.size(); ++i) {
        JsonReader e(step[i], file, std::string("step[") + std::to_string(i) + "]");
        StepResidual s;
        s.id = e.str("id");
        s.arch = e.str("arch");
        s.framework = e.str_or("framework", "");
        s.moe = e.boolean_or("moe", false);
        s.gpus = static_cast<int>(e.i64("gpus"));
        s.ratio = e.num("ratio");
        if (!(s.ratio > 0 && std::isfinite(s.ratio))) e.fail("ratio", "must be a positive number");
        if (s.gpus < 1) e.fail("gpus", "must be a positive integer");
        e.reject_unknown();
        t.step.push_back(s);
    }
    const nlohmann::json& mem = array("memory");
    for (std::size_t i = 0; i < mem.size(); ++i) {
        JsonReader e(mem[i], file, std::string("memory[") + std::to_string(i) + "]");
        MemoryResidual m;
        m.id = e.str("id");
        m.error = e.num("error");
        if (!std::isfinite(m.error) || m.error <= -1) e.fail("error", "must be a finite number > -1");
        e.reject_unknown();
        t.memory.push_back(m);
    }
    r.reject_unknown();
    return t;
}

}  // namespace strata::planner
