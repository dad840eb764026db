// Progressive filling for weighted max-min fairness (see maxmin.hpp for the model). Each round
// freezes at least one flow, so it ends after at most (number of flows) rounds.
#include "strata/sim/maxmin.hpp"

#include <algorithm>
#include <cmath>

namespace strata::sim {

namespace {
// Relative slack under which a resource counts as saturated (absorbs rounding of the subtraction).
constexpr double kSaturatedRel = 1e-12;
}  // namespace

void MaxMinSolver::solve(const std::vector<double>& capacity, const std::vector<MaxMinFlow>& flows,
                         std::vector<double>& rates) {
    const std::size_t nr = capacity.size(), nf = flows.size();
    rates.assign(nf, 0.0);
    residual_.assign(capacity.begin(), capacity.end());
    load_.assign(nr, 0.0);
    saturated_.assign(nr, 0);
    phi_.assign(nf, 0.0);
    frozen_.assign(nf, 0);

    std::size_t active = 0;
    for (std::size_t f = 0; f < nf; ++f) {
        double wmax = 0;
        for (const auto& u : flows[f].uses) wmax = std::max(wmax, u.weight);
        if (wmax <= 0) {  // touches nothing shared: only its own cap limits it
            rates[f] = flows[f].cap;
            frozen_[f] = 1;
            continue;
        }
        phi_[f] = flows[f].priority / wmax;
        ++active;
    }

    double t = 0;  // common level: unfrozen flow f runs at t * phi_f
    while (active > 0) {
        std::fill(load_.begin(), load_.end(), 0.0);
        for (std::size_t f = 0; f < nf; ++f) {
            if (frozen_[f]) continue;
            for (const auto& u : flows[f].uses) load_[u.resource] += phi_[f] * u.weight;
        }
        // How far t can rise before something binds.
        double dt = std::numeric_limits<double>::infinity();
        for (std::size_t r = 0; r < nr; ++r)
            if (load_[r] > 0) dt = std::min(dt, std::max(0.0, residual_[r]) / load_[r]);
        for (std::size_t f = 0; f < nf; ++f)
            if (!frozen_[f]) dt = std::min(dt, std::max(0.0, flows[f].cap / phi_[f] - t));
        t += dt;
        for (std::size_t r = 0; r < nr; ++r) {
            if (load_[r] <= 0) continue;
            residual_[r] -= load_[r] * dt;
            if (residual_[r] <= kSaturatedRel * capacity[r]) saturated_[r] = 1;
        }
        // Freeze every flow on a saturated resource and every flow at its cap.
        bool froze = false;
        for (std::size_t f = 0; f < nf; ++f) {
            if (frozen_[f]) continue;
            bool stop = t * phi_[f] >= flows[f].cap * (1 - kSaturatedRel);
            for (const auto& u : flows[f].uses) stop = stop || (saturated_[u.resource] && u.weight > 0);
            if (stop) {
                rates[f] = std::min(t * phi_[f], flows[f].cap);
                frozen_[f] = 1;
                --active;
                froze = true;
            }
        }
        if (!froze) {  // cannot happen in exact arithmetic; guard against rounding loops
            for (std::size_t f = 0; f < nf; ++f)
                if (!frozen_[f]) rates[f] = std::min(t * phi_[f], flows[f].cap), frozen_[f] = 1;
            active = 0;
        }
    }
}

std::vector<double> maxmin_rates(const std::vector<double>& capacity, const std::vector<MaxMinFlow>& flows) {
    MaxMinSolver s;
    std::vector<double> rates;
    s.solve(capacity, flows, rates);
    return rates;
}

}  // namespace strata::sim
