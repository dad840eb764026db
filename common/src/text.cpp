#include "strata/common/text.hpp"

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cmath>
#include <cstdio>

namespace strata {

std::string ascii_lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
    std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
    std::string best;
    std::size_t best_d = limit + 1;
    for (const auto& c : candidates) {
        std::size_t d = edit_distance(word, c);
        if (d < best_d) {
            best_d = d;
            best = c;
        }
    }
    return best;
}

// As long as it takes: %f writes every integer digit (1e300 is 301 of them), which a fixed buffer
// cut short (a file read back then held another number: the calibration fuzzer).
static std::string printf_str(const char* fmt, double v) {
    const int n = std::snprintf(nullptr, 0, fmt, v);
    std::string s(static_cast<std::size_t>(std::max(n, 0)), '\0');
    std::snprintf(s.data(), s.size() + 1, fmt, v);
    return s;
}

static std::string printf_fixed(int decimals, double v) {
    const int n = std::snprintf(nullptr, 0, "%.*f", decimals, v);
    std::string s(static_cast<std::size_t>(std::max(n, 0)), '\0');
    std::snprintf(s.data(), s.size() + 1, "%.*f", decimals, v);
    return s;
}

std::string format(const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

std::string human_bytes(double bytes) {
    const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
    int u = 0;
    double v = bytes;
    while (std::fabs(v) >= 1000.0 && u < 5) {
        v /= 1000.0;
        ++u;
    }
    return printf_str(u == 0 ? "%.0f" : "%.2f", v) + " " + units[u];
}

std::string human_seconds(double s) {
    double a = std::fabs(s);
    if (a >= 1.0) return printf_str("%.3f", s) + " s";
    if (a >= 1e-3) return printf_str("%.3f", s * 1e3) + " ms";
    if (a >= 1e-6) return printf_str("%.3f", s * 1e6) + " us";
    return printf_str("%.0f", s * 1e9) + " ns";
}

std::string fmt_sci(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*e", std::max(0, digits - 1), v);
    return buf;
}

std::string fmt_fixed(double v, int decimals) { return printf_fixed(decimals, v); }

std::string json_quote(const std::string& s) {
    std::string o = "\"";
    for (unsigned char c : s) {
        switch (c) {
            case '"': o += "\\\""; break;
            case '\\': o += "\\\\"; break;
            case '\n': o += "\\n"; break;
            case '\t': o += "\\t"; break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    o += buf;
                } else {
                    o += static_cast<char>(c);
                }
        }
    }
    return o + "\"";
}

std::string json_num(double v, int decimals) {
    if (!std::isfinite(v)) return "null";  // JSON has no infinity (e.g. an unlimited capacity)
    std::string s = printf_fixed(decimals, v);
    if (s == "-0" || s.rfind("-0.", 0) == 0) {  // print negative zero as zero
        bool zero = true;
        for (char c : s) zero = zero && (c == '-' || c == '0' || c == '.');
        if (zero) s.erase(0, 1);
    }
    return s;
}

}  // namespace strata
