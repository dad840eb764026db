// Small text helpers used at the edges: did-you-mean suggestions and human units.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

/// ASCII lower case ("RMSNorm" -> "rmsnorm"), for names matched whatever their case.
std::string ascii_lower(std::string s);

/// Levenshtein distance (for did-you-mean).
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The closest candidate to `word` within a distance of max(2, |word|/3), or "" if none.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

/// printf into a std::string (the text tables of the CLI; at most 1023 characters).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/// "80.0 GB", "1.50 TB" (decimal units, as datasheets use).
std::string human_bytes(double bytes);
/// "12.3 ms", "4.56 s", "789 ns".
std::string human_seconds(double seconds);
/// "1.23e+15" style compact scientific formatting with `digits` significant digits.
std::string fmt_sci(double v, int digits = 3);
/// Fixed formatting with `decimals` decimals.
std::string fmt_fixed(double v, int decimals);

/// JSON string escaping (quotes included), for the hand-written JSON writers.
std::string json_quote(const std::string& s);
/// JSON number with `decimals` digits after the point, no exponent, no negative zero; null when
/// not finite (JSON has no infinity).
std::string json_num(double v, int decimals);

}  // namespace strata
