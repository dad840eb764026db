#pragma once
// The table of plan knobs: one row per key of a plan file. Each row reads its key (with the range
// and ordering rules of docs/formats.md), writes its canonical value, assigns a preset's value and
// encodes the setting for cache keys. The reader, the canonical writer, the framework presets and
// the planner's caches all walk this one table, so a knob added to it is read, written, applied
// and keyed everywhere at once; a knob missing from it cannot be read at all.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "strata/lowering/spec.hpp"

namespace strata::sim {

/// The plan file's keys, in the canonical writer's order.
const std::vector<std::string>& plan_knob_keys();

/// p's value of `key` as canonical JSON text (what the writer would write), or "" for an unknown key.
std::string plan_knob_value(const PlanSpec& p, const std::string& key);

/// Values worth trying for `key` (JSON text of an array), for tests that vary every knob. Some
/// may not fit a given plan; reading or validation then refuses them.
std::string plan_knob_samples(const std::string& key);

/// Sets `key` of p to a preset's value without the reader's checks (apply_framework's fast path).
/// Returns false for an unknown key or one a preset cannot set (the labels, the layer splits).
using PlanKnobAssign = void (*)(PlanSpec&, const nlohmann::json&);
PlanKnobAssign plan_knob_assign(std::string_view key);

/// A set of knobs, named by key (an unknown key is a programming error).
class PlanKnobSet {
public:
    PlanKnobSet(std::initializer_list<std::string_view> keys);
    bool contains(std::size_t row) const { return (bits_ >> row) & 1u; }

private:
    std::uint64_t bits_ = 0;
};

/// Every setting of p as integers, in the table's order (name and description excluded): equal
/// encodings mean equal plans. Appended to `out`. The planner's caches key on a plan's encoding
/// less the knobs they are known not to read (`skip`), so a new knob joins every key without
/// anyone listing it; tests/planner/test_cache_keys.cpp checks each skip against a fresh result.
void encode_plan(const PlanSpec& p, std::vector<std::int64_t>& out, const PlanKnobSet* skip = nullptr);
std::vector<std::int64_t> encode_plan(const PlanSpec& p);

}  // namespace strata::sim
