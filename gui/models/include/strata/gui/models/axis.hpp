// Axis ticks and labels for the charts: 1-2-5 steps on linear axes, powers of two for GPU counts,
// and time axes whose unit follows the zoom (s, ms, us, ns), so labels stay short and exact.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/gui/models/timeline.hpp"

namespace strata::gui {

struct Tick {
    double value = 0;  ///< in the axis' unit (ns for time axes)
    std::string label;
};

/// The smallest 1, 2 or 5 x 10^k that is >= raw.
double nice_step(double raw);
/// Ticks on [lo, hi] at most max_ticks apart-ish, labelled by `format`.
std::vector<Tick> linear_ticks(double lo, double hi, int max_ticks, std::string (*format)(double));
/// Ticks at 1, 2 and 5 x 10^k within [lo, hi] (a log axis); only the powers of ten where that
/// would give more than max_ticks.
std::vector<Tick> log10_ticks(double lo, double hi, int max_ticks, std::string (*format)(double));
/// Ticks at powers of two within [lo, hi] (GPU counts), thinned to at most max_ticks.
std::vector<Tick> log2_ticks(double lo, double hi, int max_ticks);
/// Ticks of a time window, at least min_spacing_px apart at this width, labelled in one unit.
std::vector<Tick> time_ticks(const TimeWindow& w, double width_px, double min_spacing_px);
/// "1.5 ms", "250 us", "3 s": a time at a given step's precision.
std::string time_label(std::int64_t t_ns, std::int64_t step_ns);

std::string bytes_label(double bytes);  ///< "80 GB"
std::string days_label(double days);    ///< "12.5 d"
std::string usd_label(double usd);      ///< "$1.2M"

}  // namespace strata::gui
