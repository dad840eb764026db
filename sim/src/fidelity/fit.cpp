// The calibration fit: a linear surrogate of each train row's step time in the six multipliers
// (its critical path split by calibration class), minimised by coordinate golden-section search, and
// re-built at the new point by simulating again. The simulator is a callback, so the fit is tested
// on synthetic rows. No I/O.
#include <algorithm>
#include <cmath>

#include "strata/common/error.hpp"
#include "strata/sim/fidelity.hpp"

namespace strata::sim {

namespace {

bool is_rate(Quantity q) { return q != Quantity::step_time_s; }

double surrogate_mape(const std::vector<FidelityRow>& rows, const Calibration& f) {
    double sum = 0;
    int n = 0;
    for (const FidelityRow& r : rows)
        if (r.scored()) sum += std::abs(surrogate_error(r, f)), ++n;
    return n ? sum / n : 0.0;
}

double real_mape(const std::vector<FidelityRow>& rows) {
    double sum = 0;
    int n = 0;
    for (const FidelityRow& r : rows)
        if (r.scored()) sum += std::abs(r.error), ++n;
    return n ? sum / n : 0.0;
}

}  // namespace

double surrogate_error(const FidelityRow& r, const Calibration& f) {
    if (!r.scored() || r.step_time_s <= 0) return r.error;
    double step = r.other_s;
    for (int c = 0; c < Calibration::kFactors; ++c)
        step += r.class_s[static_cast<std::size_t>(c)] * f.at(c) / r.applied.at(c);
    step = std::max(step, 1e-12);
    // Every compared quantity is a step time or proportional to its inverse (a rate, a FLOP rate).
    const double ratio = is_rate(r.quantity) ? r.step_time_s / step : step / r.step_time_s;
    return (1.0 + r.error) * ratio - 1.0;
}

Calibration fit_surrogate(const std::vector<FidelityRow>& rows, const Calibration& start, const FitOptions& o) {
    STRATA_ASSERT(o.lo > 0 && o.hi > o.lo && o.passes >= 1 && o.tolerance > 0, "bad fit options");
    Calibration best = start;
    double best_f = surrogate_mape(rows, best);
    // Golden-section search (Kiefer 1953) per coordinate in log2 space; MAPE is piecewise smooth and
    // not guaranteed unimodal, so a line search's result is kept only if it beats the current point.
    const double inv_phi = (std::sqrt(5.0) - 1.0) / 2.0;
    const double llo = std::log2(o.lo), lhi = std::log2(o.hi);
    for (int pass = 0; pass < o.passes; ++pass) {
        const double pass_start = best_f;
        for (int i = 0; i < Calibration::kFactors; ++i) {
            Calibration trial = best;
            auto eval = [&](double lx) {
                trial.at(i) = std::exp2(lx);
                return surrogate_mape(rows, trial);
            };
            double a = llo, b = lhi;
            double x1 = b - inv_phi * (b - a), x2 = a + inv_phi * (b - a);
            double f1 = eval(x1), f2 = eval(x2);
            while (b - a > o.tolerance) {
                if (f1 <= f2) {
                    b = x2, x2 = x1, f2 = f1;
                    x1 = b - inv_phi * (b - a);
                    f1 = eval(x1);
                } else {
                    a = x1, x1 = x2, f1 = f2;
                    x2 = a + inv_phi * (b - a);
                    f2 = eval(x2);
                }
            }
            const double fx = std::min(f1, f2);
            if (fx < best_f - 1e-9) {
                best_f = fx;
                best.at(i) = std::round(std::exp2(f1 <= f2 ? x1 : x2) * 1e4) / 1e4;  // the 4 decimals the file keeps
                best_f = surrogate_mape(rows, best);
            }
        }
        if (pass_start - best_f < 1e-7) break;  // a whole sweep gained nothing
    }
    // Prune: a factor that earns less than min_gain goes back to 1. Without this a flat direction
    // drifts to whichever bound the last few 1e-9 of MAPE point at (Ampere p2p once sat at 0.5,
    // faster than the wire, after the pipeline scatter/gather made its share negligible).
    for (int i = 0; i < Calibration::kFactors; ++i) {
        if (best.at(i) == 1.0) continue;
        Calibration trial = best;
        trial.at(i) = 1.0;
        const double f = surrogate_mape(rows, trial);
        if (f < best_f + o.min_gain) best = trial, best_f = f;
    }
    return best;
}

FitResult fit_calibration(const std::function<std::vector<FidelityRow>(const Calibration&)>& evaluate, const FitOptions& o) {
    FitResult res;
    Calibration best;
    best.overlap = o.overlap;
    best.host_launch_us = o.host_launch_us;
    std::vector<FidelityRow> rows = evaluate(best);
    ++res.simulations;
    res.before = real_mape(rows);
    double best_f = res.before;
    for (int round = 0; round < o.rounds; ++round) {
        const Calibration next = fit_surrogate(rows, best, o);
        bool improved = false;
        // The surrogate can overshoot where the critical path moves (a hidden transfer becoming
        // exposed): try the step, then half of it in log space.
        for (double step : {1.0, 0.5}) {
            Calibration trial;
            trial.overlap = o.overlap;
            trial.host_launch_us = o.host_launch_us;
            for (int c = 0; c < Calibration::kFactors; ++c)
                trial.at(c) = std::round(std::exp2(std::log2(best.at(c)) + step * (std::log2(next.at(c)) - std::log2(best.at(c)))) * 1e4) / 1e4;
            std::vector<FidelityRow> got = evaluate(trial);
            ++res.simulations;
            const double f = real_mape(got);
            if (f < best_f - 1e-6) {
                best = trial, best_f = f, rows = std::move(got);
                improved = true;
                break;
            }
        }
        if (!improved) break;
    }
    res.calibration = best;
    res.after = best_f;
    return res;
}

FitResult fit_calibration_overlap(const std::function<std::vector<FidelityRow>(const Calibration&)>& evaluate,
                                  const FitOptions& o) {
    STRATA_ASSERT(!o.overlap_grid.empty(), "fit_calibration_overlap needs an overlap grid");
    FitResult best;
    bool have = false;
    double identity = 0;
    int simulations = 0;
    for (double k : o.overlap_grid) {
        FitOptions oo = o;
        oo.overlap = k;
        const FitResult r = fit_calibration(evaluate, oo);
        simulations += r.simulations;
        if (!have) identity = r.before;  // the grid's first value: 0, the uncalibrated model
        if (!have || r.after < best.after - 1e-6) best = r, have = true;
    }
    best.before = identity;
    best.simulations = simulations;
    return best;
}

}  // namespace strata::sim
