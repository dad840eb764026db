// bench/fidelity/calibration.json: the fitted calibration sets written with fixed formatting and
// read back strictly (every rule names the file and the JSON path). Depends only on common/ and
// the Calibration table, so the fuzz target can link it alone.
#include <cmath>
#include <sstream>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/common/text.hpp"
#include "strata/sim/fidelity.hpp"

namespace strata::sim {

std::string factors_json(const Calibration& c) {
    std::ostringstream o;
    o << "{";
    for (int i = 0; i < Calibration::kFactors; ++i)
        o << (i ? ", " : "") << "\"" << Calibration::name(i) << "\": " << json_num(c.at(i), 4);
    o << ", \"overlap\": " << json_num(c.overlap, 4);
    if (c.host_launch_us > 0) o << ", \"host_launch_us\": " << json_num(c.host_launch_us, 4);
    o << "}";
    return o.str();
}

namespace {

Calibration read_factors(JsonReader f) {
    // Values are kept to the 4 decimals the file is written with, and checked after that rounding,
    // so whatever is read can be written and read back unchanged.
    auto four = [](double v) { return std::round(v * 1e4) / 1e4; };
    Calibration c;
    for (int i = 0; i < Calibration::kFactors; ++i) {
        const double raw = f.num_or(Calibration::name(i), 1.0);
        const double v = four(raw);
        if (!(v >= 0.001 && v <= 99.9999))
            f.fail(Calibration::name(i), "must be a multiplier in [0.001, 100) (got " + describe_json(nlohmann::json(raw)) + ")");
        c.at(i) = v;
    }
    const double raw = f.num_or("overlap", 0.0);
    c.overlap = four(raw);
    if (!(c.overlap >= 0 && c.overlap <= 0.9999))
        f.fail("overlap", "must be a slowdown fraction in [0, 1) (got " + describe_json(nlohmann::json(raw)) + ")");
    const double host_raw = f.num_or("host_launch_us", 0.0);
    c.host_launch_us = four(host_raw);
    if (!(c.host_launch_us >= 0 && c.host_launch_us <= 999.9999))
        f.fail("host_launch_us", "must be microseconds per kernel launch in [0, 1000) (got " + describe_json(nlohmann::json(host_raw)) + ")");
    f.reject_unknown();
    return c;
}

}  // namespace

const CalibrationGroup* CalibrationRecord::group_for(const std::string& arch) const {
    for (const CalibrationGroup& g : groups)
        if (g.arch == arch) return &g;
    if (const std::size_t plus = arch.find('+'); plus != std::string::npos) return group_for(arch.substr(0, plus));
    for (const CalibrationGroup& g : groups)
        if (g.arch == "*") return &g;
    return nullptr;
}

const Calibration& CalibrationRecord::for_arch(const std::string& arch) const {
    static const Calibration kIdentity{};
    const CalibrationGroup* g = group_for(arch);
    return g ? g->factors : kIdentity;
}

std::string to_json_text(const CalibrationRecord& r) {
    std::ostringstream o;
    o << "{\n";
    o << "  \"schema\": 2,\n";
    o << "  \"fitted\": " << (r.fitted ? "true" : "false") << ",\n";
    o << "  \"date\": " << json_quote(r.date) << ",\n";
    o << "  \"split\": \"train\",\n";
    o << "  \"groups\": [";
    for (std::size_t i = 0; i < r.groups.size(); ++i) {
        const CalibrationGroup& g = r.groups[i];
        o << (i ? ",\n" : "\n") << "    {\"arch\": " << json_quote(g.arch) << ", \"train_entries\": " << g.train_entries
          << ", \"train_mape_before\": " << json_num(g.train_mape_before, 6)
          << ", \"train_mape_after\": " << json_num(g.train_mape_after, 6) << ",\n     \"factors\": " << factors_json(g.factors)
          << "}";
    }
    o << "\n  ],\n";
    o << "  \"note\": " << json_quote(r.note) << "\n";
    o << "}\n";
    return o.str();
}

CalibrationRecord calibration_from_json_text(const std::string& text, const std::string& file) {
    const nlohmann::json j = parse_json_text(text, file);
    if (!j.is_object()) throw InputError(file, "", "must be a JSON object");
    JsonReader r(j, file, "");
    CalibrationRecord c;
    const std::int64_t schema = r.i64("schema");
    if (schema != 2) r.fail("schema", "= " + std::to_string(schema) + " is not supported (expected 2)");
    c.fitted = r.boolean_or("fitted", false);
    c.date = r.str_or("date", "");
    if (r.str_or("split", "train") != "train") r.fail("split", "must be \"train\" (calibration is fitted on train only)");
    c.note = r.str_or("note", "");
    const nlohmann::json* groups = r.get("groups");
    if (!groups || !groups->is_array()) r.fail("groups", "is required (an array of {arch, factors})");
    for (std::size_t i = 0; i < groups->size(); ++i) {
        const std::string path = "groups[" + std::to_string(i) + "]";
        if (!(*groups)[i].is_object()) r.fail(path, "must be an object");
        JsonReader g((*groups)[i], file, path);
        CalibrationGroup grp;
        grp.arch = g.str("arch");
        for (const CalibrationGroup& seen : c.groups)
            if (seen.arch == grp.arch) g.fail("arch", "\"" + grp.arch + "\" appears twice");
        grp.train_entries = static_cast<int>(g.i64_or("train_entries", 0));
        grp.train_mape_before = g.num_or("train_mape_before", 0);
        grp.train_mape_after = g.num_or("train_mape_after", 0);
        grp.factors = read_factors(g.object("factors"));
        g.reject_unknown();
        c.groups.push_back(grp);
    }
    r.reject_unknown();
    return c;
}

}  // namespace strata::sim
