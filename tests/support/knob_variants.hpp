#pragma once
// Plans that differ from a base plan in one knob of the plan table (plan_knobs.hpp), at each of the
// knob's sample values: what the tests that vary every knob walk (round trips, cache keys, exports,
// the estimate against the engine). A knob added to the table is varied by all of them.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/common/error.hpp"
#include "strata/lowering/plan_knobs.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::test {

struct KnobVariant {
    std::string key;      ///< the knob, or "a+b" for a joint change
    nlohmann::json change;  ///< the keys set over the base
    sim::PlanSpec plan;
};

/// The changes tried: each knob at each sample value.
inline std::vector<std::pair<std::string, nlohmann::json>> knob_changes() {
    std::vector<std::pair<std::string, nlohmann::json>> out;
    for (const std::string& key : sim::plan_knob_keys())
        for (const nlohmann::json& sample : nlohmann::json::parse(sim::plan_knob_samples(key)))
            out.emplace_back(key, nlohmann::json{{key, sample}});
    return out;
}

/// The degrees two at a time, dp with each of tp, pp, cp (one knob alone would change the GPU count).
inline std::vector<std::pair<std::string, nlohmann::json>> degree_pairs() {
    std::vector<std::pair<std::string, nlohmann::json>> out;
    for (const char* a : {"tp", "pp", "cp"})
        for (int x : {1, 2, 4})
            for (int dp : {1, 2, 4, 8}) out.emplace_back(std::string(a) + "+dp", nlohmann::json{{a, x}, {"dp", dp}});
    return out;
}

/// The variants of `base` that the reader accepts, and validate_plan too when a model and cluster
/// are given; those equal to the base (a sample at the base's own value) are left out.
inline std::vector<KnobVariant> knob_variants(const nlohmann::json& base, const std::vector<std::pair<std::string, nlohmann::json>>& changes,
                                              const sim::ModelSpec* m = nullptr, const sim::ClusterSpec* c = nullptr) {
    const sim::PlanSpec b = sim::plan_from_json_text(base.dump(), "base.json");
    std::vector<KnobVariant> out;
    for (const auto& [key, change] : changes) {
        nlohmann::json j = base;
        j.update(change);
        sim::PlanSpec q;
        try {
            q = sim::plan_from_json_text(j.dump(), "variant.json");
            if (m && c) sim::validate_plan(*m, *c, q, "variant.json");
        } catch (const InputError&) {
            continue;  // a value this base cannot take (the reader's or validate_plan's rules)
        }
        if (sim::to_json_text(q) == sim::to_json_text(b)) continue;
        out.push_back({key, change, q});
    }
    return out;
}

}  // namespace strata::test
