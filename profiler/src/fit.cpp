// Weighted least squares for the profiler's curves (see fit.hpp). Solved with Eigen's
// column-pivoting Householder QR on the row-scaled system [1/t, x/t] [a b]^T = 1, which is the
// relative-error objective sum(((a + b x - t)/t)^2) (profiler-notes §9: weight 1/t^2).
#include "strata/profiler/fit.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>

namespace strata::profiler {

namespace {
LineFit finish(double a, double b, const std::vector<double>& x, const std::vector<double>& t) {
    LineFit f;
    f.intercept = a;
    f.slope = b;
    f.n_points = static_cast<int>(x.size());
    double err = 0;
    for (std::size_t i = 0; i < x.size(); ++i) err += std::abs(a + b * x[i] - t[i]) / t[i];
    f.mape = err / static_cast<double>(x.size());
    f.x_min = *std::min_element(x.begin(), x.end());
    f.x_max = *std::max_element(x.begin(), x.end());
    f.ok = true;
    return f;
}
}  // namespace

LineFit fit_line_relative(const std::vector<double>& x, const std::vector<double>& t) {
    std::vector<double> xs, ts;
    for (std::size_t i = 0; i < x.size() && i < t.size(); ++i)
        if (t[i] > 0 && std::isfinite(t[i]) && std::isfinite(x[i])) {
            xs.push_back(x[i]);
            ts.push_back(t[i]);
        }
    LineFit bad;
    bad.n_points = static_cast<int>(xs.size());
    if (xs.size() < 2) return bad;
    if (*std::min_element(xs.begin(), xs.end()) == *std::max_element(xs.begin(), xs.end())) return bad;
    const auto n = static_cast<Eigen::Index>(xs.size());
    // Scale x to O(1) so the normal system is well conditioned across 8 B .. 1 GiB.
    const double xscale = *std::max_element(xs.begin(), xs.end());
    Eigen::MatrixXd A(n, 2);
    Eigen::VectorXd rhs = Eigen::VectorXd::Ones(n);
    for (Eigen::Index i = 0; i < n; ++i) {
        const auto u = static_cast<std::size_t>(i);
        A(i, 0) = 1.0 / ts[u];
        A(i, 1) = (xs[u] / xscale) / ts[u];
    }
    Eigen::Vector2d sol = A.colPivHouseholderQr().solve(rhs);
    double a = sol(0), b = sol(1) / xscale;
    if (a < 0 || b < 0) {
        // A negative intercept (or slope) has no physical meaning: keep the other term alone.
        if (a < 0) {
            Eigen::VectorXd col = A.col(1);
            b = std::max(0.0, col.dot(rhs) / col.dot(col)) / xscale;
            a = 0;
        } else {
            Eigen::VectorXd col = A.col(0);
            a = std::max(0.0, col.dot(rhs) / col.dot(col));
            b = 0;
        }
    }
    return finish(a, b, xs, ts);
}

namespace {
/// The highest bytes / time among the valid points (0 if none).
double best_rate(const std::vector<double>& x, const std::vector<double>& time_s) {
    double best = 0;
    for (std::size_t i = 0; i < x.size() && i < time_s.size(); ++i)
        if (time_s[i] > 0 && std::isfinite(time_s[i]) && x[i] > 0 && std::isfinite(x[i])) best = std::max(best, x[i] / time_s[i]);
    return best;
}

/// Mean |alpha + x / rate - t| / t over the points with a positive time.
double relative_error(const std::vector<double>& x, const std::vector<double>& time_s, double alpha, double rate, int* points) {
    double err = 0;
    int n = 0;
    for (std::size_t i = 0; i < x.size() && i < time_s.size(); ++i) {
        if (!(time_s[i] > 0)) continue;
        err += std::abs(alpha + x[i] / rate - time_s[i]) / time_s[i];
        ++n;
    }
    if (points) *points = n;
    return n > 0 ? err / n : 0;
}
}  // namespace

AlphaBetaFit fit_alpha_beta(Collective c, int n, const std::vector<double>& S_bytes, const std::vector<double>& time_s) {
    AlphaBetaFit r;
    const double f = busbw_factor(c, n);
    r.n_points = static_cast<int>(S_bytes.size());
    if (f <= 0 || S_bytes.empty()) return r;
    // t = alpha + (S*f) / busbw: a line in x = S*f with slope 1/busbw.
    std::vector<double> x(S_bytes.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = S_bytes[i] * f;
    const LineFit lf = fit_line_relative(x, time_s);
    r.n_points = lf.n_points;
    if (lf.ok && lf.slope > 0) {
        r.alpha_s = lf.intercept;
        r.busbw_Bps = 1.0 / lf.slope;
        r.mape = lf.mape;
    } else {
        // Noisy small sizes (a loaded host, thread wake-ups) can tilt the one-line fit flat or
        // negative. Fall back to the two-segment reading of profiler-notes §9: alpha = the fastest
        // time seen at any size (latency bounds every point from below; a noisy smallest message
        // must not inflate it), bus bandwidth from the largest message's time above alpha.
        std::size_t hi = 0;
        double alpha = std::numeric_limits<double>::infinity();
        for (std::size_t i = 0; i < x.size(); ++i) {
            if (x[i] > x[hi]) hi = i;
            if (time_s[i] > 0) alpha = std::min(alpha, time_s[i]);
        }
        if (!(time_s[hi] > 0) || !std::isfinite(alpha)) return r;
        const double beta_t = time_s[hi] - alpha;
        if (beta_t > 0) {
            r.alpha_s = alpha;
            r.busbw_Bps = x[hi] / beta_t;
        } else {
            // The largest message was itself the fastest (every point within the noise): no
            // latency can be told apart, and the best rate seen bounds the bandwidth from below.
            r.alpha_s = 0;
            r.busbw_Bps = best_rate(x, time_s);
        }
        r.mape = relative_error(x, time_s, r.alpha_s, r.busbw_Bps, nullptr);
    }
    r.min_bytes = *std::min_element(S_bytes.begin(), S_bytes.end());
    r.max_bytes = *std::max_element(S_bytes.begin(), S_bytes.end());
    r.ok = true;
    return r;
}

BandwidthCurve fit_bandwidth(const std::vector<double>& bytes, const std::vector<double>& time_s) {
    BandwidthCurve r;
    const LineFit lf = fit_line_relative(bytes, time_s);
    r.n_points = lf.n_points;
    if (lf.ok && lf.slope > 0) {
        r.latency_s = lf.intercept;
        r.Bps = 1.0 / lf.slope;
        r.mape = lf.mape;
        r.min_bytes = lf.x_min;
        r.max_bytes = lf.x_max;
        r.ok = true;
        return r;
    }
    // Times that do not grow with size (a page cache, a loaded host): no latency to tell apart;
    // the best rate seen is what the device delivered at least.
    const double rate = best_rate(bytes, time_s);
    if (!(rate > 0)) return r;
    r.latency_s = 0;
    r.Bps = rate;
    r.mape = relative_error(bytes, time_s, 0, rate, &r.n_points);
    r.min_bytes = *std::min_element(bytes.begin(), bytes.end());
    r.max_bytes = *std::max_element(bytes.begin(), bytes.end());
    r.ok = true;
    return r;
}

}  // namespace strata::profiler
