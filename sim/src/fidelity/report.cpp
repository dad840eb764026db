// Text forms of the fidelity suite: the per-entry table and split summaries a person reads, the
// rows as deterministic JSON, and bench/fidelity/calibration.json (write and strict read). Fixed
// number formatting and fixed order throughout, so identical runs give identical bytes.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "strata/common/json_reader.hpp"
#include "strata/sim/fidelity.hpp"
#include "strata/sim/result.hpp"

namespace strata::sim {

namespace {

std::string fixed(double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

std::string pad(std::string s, std::size_t w, bool right = false) {
    if (s.size() >= w) return s;
    return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

// Published values span 0.3 (MFU) to 2.8e6 (tokens/s): four significant figures, no exponent.
std::string value_text(double v) {
    if (v == 0) return "0";
    const double a = std::abs(v);
    const int decimals = a >= 1000 ? 0 : a >= 100 ? 1 : a >= 10 ? 2 : a >= 1 ? 3 : 4;
    return fixed(v, decimals);
}

// "+12.3%" / "-4.5%". Appending to a std::string (not const char* + string, whose insert at 0
// GCC 12 misreads under -Wrestrict).
std::string signed_percent(double fraction) {
    std::string s = fraction >= 0 ? "+" : "";
    s += fixed(100.0 * fraction, 1);
    s += "%";
    return s;
}

std::string quantity_short(Quantity q) {
    switch (q) {
        case Quantity::step_time_s: return "step s";
        case Quantity::tokens_per_s: return "tok/s";
        case Quantity::tokens_per_s_per_gpu: return "tok/s/gpu";
        case Quantity::samples_per_s: return "samples/s";
        case Quantity::tflops_per_gpu: return "TFLOP/s";
        case Quantity::mfu: return "MFU";
    }
    return "?";
}

void stats_json(std::ostringstream& o, const FidelityStats& s) {
    o << "{\"entries\": " << s.entries << ", \"scored\": " << s.scored << ", \"skipped\": " << s.skipped
      << ", \"mape\": " << json_num(s.mape, 6) << ", \"median_ape\": " << json_num(s.median_ape, 6)
      << ", \"worst_ape\": " << json_num(s.worst_ape, 6) << ", \"worst_id\": " << json_quote(s.worst_id)
      << ", \"over_15pct\": " << s.over_15pct << ", \"memory_compared\": " << s.memory_compared
      << ", \"oom_agree\": " << s.oom_agree << ", \"fits_agree\": " << s.fits_agree
      << ", \"peak_compared\": " << s.peak_compared << ", \"peak_mape\": " << json_num(s.peak_mape, 6)
      << ", \"peak_worst_ape\": " << json_num(s.peak_worst_ape, 6) << ", \"not_scored\": " << s.not_scored
      << ", \"mape_with_not_scored\": " << json_num(s.mape_with_not_scored, 6) << "}";
}

}  // namespace

std::string fidelity_json_text(const std::vector<FidelityRow>& rows, const CalibrationRecord& cal) {
    std::ostringstream o;
    o << "{\n  \"calibration\": {\"fitted\": " << (cal.fitted ? "true" : "false")
      << ", \"applied\": " << (calibration_supported() ? "true" : "false") << ", \"groups\": [";
    for (std::size_t i = 0; i < cal.groups.size(); ++i)
        o << (i ? ", " : "") << "{\"arch\": " << json_quote(cal.groups[i].arch)
          << ", \"factors\": " << factors_json(cal.groups[i].factors) << "}";
    o << "]},\n";
    o << "  \"summary\": {";
    const char* splits[] = {"train", "test", "all"};
    for (int i = 0; i < 3; ++i) {
        o << (i ? ", " : "") << "\"" << splits[i] << "\": ";
        stats_json(o, fidelity_stats(rows, splits[i]));
    }
    o << "},\n  \"by_group\": {";
    for (int i = 0; i < 2; ++i) {
        o << (i ? ", " : "") << "\"" << splits[i] << "\": {";
        int g = 0;
        for (const auto& [label, by] : {std::pair{"publisher", FidelityGroup::publisher}, std::pair{"gpu", FidelityGroup::gpu},
                                        std::pair{"framework", FidelityGroup::framework}}) {
            o << (g++ ? ", " : "") << "\"" << label << "\": {";
            const auto groups = fidelity_stats_by(rows, splits[i], by);
            for (std::size_t k = 0; k < groups.size(); ++k) {
                o << (k ? ", " : "") << json_quote(groups[k].first) << ": ";
                stats_json(o, groups[k].second);
            }
            o << "}";
        }
        o << "}";
    }
    o << "},\n  \"entries\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
        const FidelityRow& r = rows[i];
        o << (i ? ",\n" : "\n") << "    {\"id\": " << json_quote(r.id) << ", \"publisher\": " << json_quote(r.publisher)
          << ", \"split\": " << json_quote(r.split) << ", \"gpu\": " << json_quote(r.gpu) << ", \"gpus\": " << r.gpus
          << ", \"quantity\": " << json_quote(r.memory_only ? "none" : to_string(r.quantity))
          << ", \"flops_convention\": " << json_quote(to_string(r.convention));
        if (!r.simulated()) {
            o << ", \"skipped\": " << json_quote(r.skipped) << "}";
            continue;
        }
        if (!r.publisher_regression.empty())
            o << ", \"scored\": false, \"publisher_regression\": " << json_quote(r.publisher_regression);
        if (r.memory_only) o << ", \"memory_only\": true";
        else
            o << ", \"published\": " << json_num(r.published, 6) << ", \"predicted\": " << json_num(r.predicted, 6)
              << ", \"error\": " << json_num(r.error, 6);
        o << ", \"peak_hbm_bytes\": " << json_num(r.peak_hbm_bytes, 0)
          << ", \"hbm_capacity_bytes\": " << json_num(r.hbm_capacity_bytes, 0);
        if (r.published_peak_hbm_bytes > 0)
            o << ", \"published_peak_hbm_bytes\": " << json_num(r.published_peak_hbm_bytes, 0)
              << ", \"peak_counter\": " << json_quote(r.peak_counter)
              << ", \"peak_error\": " << json_num(r.peak_error, 6);
        o << ", \"step_time_s\": " << json_num(r.step_time_s, 6)
          << ", \"bubble_fraction\": " << json_num(r.bubble_fraction, 6)
          << ", \"exposed_comm_s\": " << json_num(r.exposed_comm_s, 6) << ", \"mfu\": " << json_num(r.mfu, 6)
          << ", \"outcome\": " << json_quote(r.outcome) << ", \"engine_oom\": " << (r.engine_oom ? "true" : "false")
          << ", \"fits\": " << (r.fits ? "true" : "false")
          << ", \"convention_check\": " << json_num(r.convention_check, 6)
          << ", \"arch\": " << json_quote(r.arch) << ", \"calibration\": " << factors_json(r.applied)
          << ", \"critical_path\": " << json_quote(r.critical_path) << "}";
    }
    o << "\n  ]\n}\n";
    return o.str();
}

std::string fidelity_table_text(const std::vector<FidelityRow>& rows) {
    std::ostringstream o;
    o << pad("id", 36) << pad("publisher", 17) << pad("gpus", 6, true) << "  " << pad("quantity", 10)
      << pad("published", 11, true) << pad("predicted", 11, true) << pad("error", 9, true) << "  " << pad("split", 6)
      << "memory (engine peak/capacity)\n";
    for (const FidelityRow& r : rows) {
        o << pad(r.id, 36) << pad(r.publisher, 17) << pad(std::to_string(r.gpus), 6, true) << "  "
          << pad(r.memory_only ? "memory" : quantity_short(r.quantity), 10);
        if (!r.simulated()) {
            o << pad(value_text(r.published), 11, true) << "  skipped: " << r.skipped << "\n";
            continue;
        }
        if (r.memory_only)
            o << pad(r.outcome == "oom" ? "OOM" : "ran", 11, true) << pad("-", 11, true) << pad("-", 9, true);
        else
            o << pad(value_text(r.published), 11, true) << pad(value_text(r.predicted), 11, true)
              << pad(signed_percent(r.error), 9, true);
        // Memory: the engine's verdict, its peak against the capacity (GB), a published peak.
        o << "  " << pad(r.split, 6) << (r.engine_oom ? "OOM" : "ok") << " " << fixed(r.peak_hbm_bytes / 1e9, 1) << "/"
          << fixed(r.hbm_capacity_bytes / 1e9, 1) << " GB";
        if (r.published_peak_hbm_bytes > 0)
            o << " (published " << fixed(r.published_peak_hbm_bytes / 1e9, 1) << " " << r.peak_counter << ", "
              << signed_percent(r.peak_error) << ")";
        o << (r.oom_agrees ? "" : " disagrees");
        if (!r.publisher_regression.empty()) o << "  not scored: publisher-reported regression";
        o << "\n";
    }
    return o.str();
}

std::string fidelity_summary_text(const std::vector<FidelityRow>& rows) {
    std::ostringstream o;
    o << pad("split", 7) << pad("entries", 8, true) << pad("scored", 10, true) << pad("MAPE", 9, true)
      << pad("median", 9, true) << pad("worst", 9, true) << "  " << pad("worst entry", 36) << pad(">15%", 5, true)
      << pad("OOM agree", 11, true) << "\n";
    const char* splits[] = {"train", "test", "all"};
    const FidelityStats per_split[] = {fidelity_stats(rows, splits[0]), fidelity_stats(rows, splits[1]),
                                       fidelity_stats(rows, splits[2])};
    for (int i = 0; i < 3; ++i) {
        const char* split = splits[i];
        const FidelityStats& s = per_split[i];
        if (s.entries == 0) continue;
        o << pad(split, 7) << pad(std::to_string(s.entries), 8, true) << pad(std::to_string(s.scored), 10, true)
          << pad(fixed(100 * s.mape, 1) + "%", 9, true) << pad(fixed(100 * s.median_ape, 1) + "%", 9, true)
          << pad(fixed(100 * s.worst_ape, 1) + "%", 9, true) << "  " << pad(s.worst_id, 36)
          << pad(std::to_string(s.over_15pct), 5, true)
          << pad(std::to_string(s.oom_agree) + "/" + std::to_string(s.memory_compared), 11, true) << "\n";
    }
    const FidelityStats& all = per_split[2];
    if (all.not_scored > 0) {
        // Never silent: which rows are out, and what the MAPE would be with them scored.
        o << "not scored: " << all.not_scored << " compared entr" << (all.not_scored == 1 ? "y" : "ies")
          << " whose publisher reports the figure as a regression of its own software (";
        int k = 0;
        for (const FidelityRow& r : rows)
            if (r.compared() && !r.scored()) o << (k++ ? ", " : "") << r.id;
        o << "); scored with them, MAPE";
        for (int i = 0; i < 3; ++i)
            if (per_split[i].entries > 0) o << " " << splits[i] << " " << fixed(100 * per_split[i].mape_with_not_scored, 1) << "%";
        o << "\n";
    }
    if (all.peak_compared > 0)
        o << "peak HBM against published peaks: " << all.peak_compared << " entries, MAPE "
          << fixed(100 * all.peak_mape, 1) << "%, worst " << fixed(100 * all.peak_worst_ape, 1) << "%\n";
    // Per publisher and per GPU (docs/fidelity-dataset.md): where the error lives.
    for (const char* split : {"test", "train"}) {
        for (const auto& [label, by] : {std::pair{"publisher", FidelityGroup::publisher}, std::pair{"GPU", FidelityGroup::gpu},
                                        std::pair{"framework", FidelityGroup::framework}}) {
            const auto groups = fidelity_stats_by(rows, split, by);
            if (groups.empty()) continue;
            o << "\n" << pad(std::string(split) + " by " + label, 24) << pad("scored", 10, true) << pad("MAPE", 9, true)
              << pad("median", 9, true) << pad(">15%", 6, true) << "\n";
            for (const auto& [name, s] : groups) {
                o << "  " << pad(name, 22) << pad(std::to_string(s.scored), 10, true);
                if (s.scored == 0) {
                    o << pad("-", 9, true) << pad("-", 9, true) << pad("-", 6, true) << "\n";
                    continue;
                }
                o << pad(fixed(100 * s.mape, 1) + "%", 9, true) << pad(fixed(100 * s.median_ape, 1) + "%", 9, true)
                  << pad(std::to_string(s.over_15pct), 6, true) << "\n";
            }
        }
    }
    return o.str();
}

}  // namespace strata::sim
