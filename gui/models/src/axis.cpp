#include "strata/gui/models/axis.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace strata::gui {

double nice_step(double raw) {
    if (!(raw > 0) || !std::isfinite(raw)) return 1;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (m * mag >= raw * (1 - 1e-12)) return m * mag;
    return 10 * mag;
}

std::vector<Tick> linear_ticks(double lo, double hi, int max_ticks, std::string (*format)(double)) {
    std::vector<Tick> out;
    if (!(hi > lo) || max_ticks < 1) return out;
    const double step = nice_step((hi - lo) / max_ticks);
    for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
        out.push_back({std::fabs(v) < step * 1e-9 ? 0.0 : v, format(std::fabs(v) < step * 1e-9 ? 0.0 : v)});
    return out;
}

std::vector<Tick> log10_ticks(double lo, double hi, int max_ticks, std::string (*format)(double)) {
    std::vector<Tick> out;
    if (!(lo > 0) || !(hi > lo)) return out;
    for (const bool all : {true, false}) {
        out.clear();
        for (double decade = std::pow(10.0, std::floor(std::log10(lo))); decade <= hi; decade *= 10)
            for (double m : {1.0, 2.0, 5.0}) {
                if (!all && m != 1.0) continue;
                const double v = m * decade;
                if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push_back({v, format(v)});
            }
        if (static_cast<int>(out.size()) <= max_ticks) break;
    }
    return out;
}

std::vector<Tick> log2_ticks(double lo, double hi, int max_ticks) {
    std::vector<Tick> all;
    for (double v = 1; v <= hi * (1 + 1e-9); v *= 2)
        if (v >= lo * (1 - 1e-9)) all.push_back({v, std::to_string(static_cast<long long>(v))});
    if (max_ticks < 1 || static_cast<int>(all.size()) <= max_ticks) return all;
    const std::size_t stride = (all.size() + static_cast<std::size_t>(max_ticks) - 1) / static_cast<std::size_t>(max_ticks);
    std::vector<Tick> out;
    for (std::size_t i = 0; i < all.size(); i += stride) out.push_back(all[i]);
    return out;
}

std::string time_label(std::int64_t t_ns, std::int64_t step_ns) {
    struct Unit {
        std::int64_t ns;
        const char* name;
    };
    static const Unit units[] = {{1'000'000'000, "s"}, {1'000'000, "ms"}, {1'000, "us"}, {1, "ns"}};
    // The unit follows the larger of the time and ten steps, so a window's 0 reads "0.0 ms", not "0 us".
    const std::int64_t mag = std::max(std::llabs(t_ns), 10 * std::llabs(step_ns));
    const Unit* u = &units[3];
    for (const auto& c : units)
        if (mag >= c.ns) {
            u = &c;
            break;
        }
    // Enough decimals that consecutive ticks differ.
    int decimals = 0;
    for (std::int64_t s = u->ns; s > step_ns && decimals < 9; s /= 10) ++decimals;
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.*f %s", decimals, static_cast<double>(t_ns) / static_cast<double>(u->ns), u->name);
    return buf;
}

std::vector<Tick> time_ticks(const TimeWindow& w, double width_px, double min_spacing_px) {
    std::vector<Tick> out;
    if (width_px <= 0 || w.length_ns() <= 0) return out;
    const double raw = static_cast<double>(w.length_ns()) * min_spacing_px / width_px;
    const auto step = std::max<std::int64_t>(1, static_cast<std::int64_t>(nice_step(raw)));
    for (std::int64_t t = (w.start_ns + step - 1) / step * step; t <= w.end_ns; t += step)
        out.push_back({static_cast<double>(t), time_label(t, step)});
    return out;
}

std::string bytes_label(double b) {
    char buf[32];
    const double a = std::fabs(b);
    if (a >= 1e12) std::snprintf(buf, sizeof buf, "%g TB", b / 1e12);
    else if (a >= 1e9) std::snprintf(buf, sizeof buf, "%g GB", b / 1e9);
    else if (a >= 1e6) std::snprintf(buf, sizeof buf, "%g MB", b / 1e6);
    else if (a >= 1e3) std::snprintf(buf, sizeof buf, "%g kB", b / 1e3);
    else std::snprintf(buf, sizeof buf, "%g B", b);
    return buf;
}

std::string days_label(double d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, d >= 100 ? "%.0f d" : d >= 10 ? "%.1f d" : "%.2f d", d);
    return buf;
}

std::string usd_label(double usd) {
    char buf[32];
    const double a = std::fabs(usd);
    if (a >= 1e9) std::snprintf(buf, sizeof buf, "$%gB", usd / 1e9);
    else if (a >= 1e6) std::snprintf(buf, sizeof buf, "$%gM", usd / 1e6);
    else if (a >= 1e3) std::snprintf(buf, sizeof buf, "$%gk", usd / 1e3);
    else std::snprintf(buf, sizeof buf, "$%g", usd);
    return buf;
}

}  // namespace strata::gui
