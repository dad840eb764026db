// Least-squares fits of the profiler (Eigen): a straight line t = a + b*x fitted on RELATIVE error
// (each row weighted by 1/t, i.e. squared weight 1/t^2, profiler-notes §9) so that small sizes are
// not drowned by large ones. Used for collectives (alpha-beta) and for copy/HBM/SSD bandwidth.
// Does not decide which points to fit: callers select them.
#pragma once
#include <vector>

#include "strata/profiler/busbw.hpp"

namespace strata::profiler {

struct LineFit {
    double intercept = 0;  ///< a (seconds)
    double slope = 0;      ///< b (seconds per unit of x)
    double mape = 0;       ///< mean |t_fit - t| / t over the points (fraction, 0.01 = 1%)
    int n_points = 0;
    double x_min = 0, x_max = 0;
    bool ok = false;       ///< false: too few points or a degenerate system
};

/// Fit t = a + b*x minimising sum(((a + b x_i - t_i) / t_i)^2), with a >= 0 and b >= 0 (a
/// negative intercept is refitted through the origin). Needs >= 2 points with distinct x.
LineFit fit_line_relative(const std::vector<double>& x, const std::vector<double>& t);

/// Alpha-beta collective model t = alpha + S*f(n)/busbw (nccl-tests busbw, notes §9).
struct AlphaBetaFit {
    double alpha_s = 0, busbw_Bps = 0, mape = 0;
    int n_points = 0;
    double min_bytes = 0, max_bytes = 0;
    bool ok = false;
};
AlphaBetaFit fit_alpha_beta(Collective c, int n, const std::vector<double>& S_bytes,
                            const std::vector<double>& time_s);

/// Bandwidth model t = latency + bytes/Bps.
struct BandwidthCurve {
    double latency_s = 0, Bps = 0, mape = 0;
    int n_points = 0;
    double min_bytes = 0, max_bytes = 0;
    bool ok = false;
};
BandwidthCurve fit_bandwidth(const std::vector<double>& bytes, const std::vector<double>& time_s);

}  // namespace strata::profiler
