// Order statistics of timing samples: median, p10, p90 (linear interpolation between order
// statistics, the "type 7" rule of R/NumPy). Header-only so the CUDA backend can use it too.
// Does not drop outliers: the spread is reported, not hidden.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace strata::profiler {

struct Summary {
    double median = 0, p10 = 0, p90 = 0, min = 0, max = 0;
    int samples = 0;
};

/// q-quantile (0..1) of `v` (any order); 0 for an empty vector.
inline double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(pos));
    const auto hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

inline Summary summarize(const std::vector<double>& v) {
    Summary s;
    if (v.empty()) return s;
    s.median = quantile(v, 0.5);
    s.p10 = quantile(v, 0.1);
    s.p90 = quantile(v, 0.9);
    s.min = *std::min_element(v.begin(), v.end());
    s.max = *std::max_element(v.begin(), v.end());
    s.samples = static_cast<int>(v.size());
    return s;
}

/// Summary of a rate work/t for time samples t: the median rate is work/median(t), and the rate's
/// p10 is work/p90(t) (a slow sample is a low rate).
inline Summary rate_summary(double work, const std::vector<double>& times_s) {
    const Summary t = summarize(times_s);
    Summary r;
    r.samples = t.samples;
    if (t.samples == 0) return r;
    auto rate = [&](double x) { return x > 0 ? work / x : 0.0; };
    r.median = rate(t.median);
    r.p10 = rate(t.p90);
    r.p90 = rate(t.p10);
    r.min = rate(t.max);
    r.max = rate(t.min);
    return r;
}

}  // namespace strata::profiler
