#pragma once
// Small typed readers shared by the spec readers (spec_io.cpp) and the plan knob table
// (plan_knobs.cpp): each range-checks a value and names its path through JsonReader.
#include <climits>
#include <cstdint>
#include <string>

#include "strata/common/json_reader.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::sim::spec_readers {

using nlohmann::json;

inline int int_in(JsonReader& r, const std::string& key, std::int64_t lo, std::int64_t hi, const std::string& what) {
    std::int64_t v = r.i64(key);
    if (v < lo || v > hi) r.fail(key, "must be " + what + " (got " + std::to_string(v) + ")");
    return static_cast<int>(v);
}

// Upper limits keep every derived product (h^2, s^2 x heads, FLOPs per step) far from int64
// overflow downstream; they are orders of magnitude above any real model (docs/formats.md).
constexpr std::int64_t kMaxCount = 1 << 16;         // layers, heads, experts
constexpr std::int64_t kMaxWidth = 1 << 20;         // hidden, head_dim
constexpr std::int64_t kMaxFfn = 1 << 24;           // ffn_hidden, expert_ffn_hidden
constexpr std::int64_t kMaxTokens = kMaxSeqLen;      // seq_len, max_position (spec_io.hpp)
constexpr std::int64_t kMaxVocab = INT_MAX;

inline std::int64_t pos_i64(JsonReader& r, const std::string& key, std::int64_t max = INT_MAX) {
    std::int64_t v = r.i64(key);
    if (v < 1) r.fail(key, "must be a positive integer (got " + std::to_string(v) + ")");
    if (v > max) r.fail(key, "= " + std::to_string(v) + " exceeds the limit of " + std::to_string(max));
    return v;
}
inline std::int64_t pos_i64_or(JsonReader& r, const std::string& key, std::int64_t dflt, std::int64_t max = INT_MAX) {
    return r.has(key) ? pos_i64(r, key, max) : (r.get(key), dflt);
}
inline int pos_int(JsonReader& r, const std::string& key, std::int64_t max = INT_MAX) { return static_cast<int>(pos_i64(r, key, max)); }
inline int pos_int_or(JsonReader& r, const std::string& key, int dflt, std::int64_t max = INT_MAX) {
    return static_cast<int>(pos_i64_or(r, key, dflt, max));
}
inline int nonneg_int_or(JsonReader& r, const std::string& key, int dflt) {
    return r.has(key) ? int_in(r, key, 0, INT_MAX, "a non-negative integer") : (r.get(key), dflt);
}

inline double num_in(JsonReader& r, const std::string& key, double dflt, double lo, double hi, const std::string& what) {
    double v = r.num_or(key, dflt);
    if (!(v >= lo && v <= hi)) r.fail(key, "must be " + what + " (got " + describe_json(json(v)) + ")");
    return v;
}

constexpr double kHuge = 1e300;

}  // namespace strata::sim::spec_readers
