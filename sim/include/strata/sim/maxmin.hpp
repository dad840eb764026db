// Fluid max-min fair sharing of resources among flows, by progressive filling (the weighted form
// of Bertsekas & Gallager, "Data Networks", 2nd ed., sec. 6.5.2; SimGrid's lmm solver does the same).
// Pure arithmetic: no simulation, no topology; the engine calls it whenever a flow starts or ends.
// Units: a resource offers `capacity` busy-seconds per second (1 = one whole link); a flow's rate is
// the fraction of its transfer completed per second.
#pragma once
#include <limits>
#include <vector>

namespace strata::sim {

/// One resource a flow crosses: `weight` = busy-seconds of that resource the whole transfer costs
/// (busy_s of its class x how many GPUs of the program load the resource at once).
struct MaxMinUse {
    int resource = 0;
    double weight = 0;
};

struct MaxMinFlow {
    std::vector<MaxMinUse> uses;
    /// Own upper bound on the rate (fractions per second); infinity = only the resources limit it.
    double cap = std::numeric_limits<double>::infinity();
    /// Relative share: a flow of priority 2 gets twice the normalised progress of one of priority 1.
    double priority = 1.0;
};

/// Reusable solver (keeps its buffers so the engine does not allocate per event).
///
/// Fairness is on normalised progress: flow f grows as rate_f = t * phi_f with
/// phi_f = priority_f / max_r w_{f,r}, i.e. every flow advances at the same fraction of the speed
/// it would have alone, so two flows on one link get half the link each whatever their sizes.
/// Constraints: sum_f rate_f * w_{f,r} <= capacity_r for every r, and rate_f <= cap_f.
/// Progressive filling raises t until a resource saturates or a flow hits its cap, freezes the flows
/// concerned, and repeats; flows and resources are visited in index order, so the result is
/// deterministic.
class MaxMinSolver {
public:
    /// rates[i] receives flow i's rate. A flow without uses gets its cap (infinity when none).
    void solve(const std::vector<double>& capacity, const std::vector<MaxMinFlow>& flows, std::vector<double>& rates);

private:
    std::vector<double> residual_, load_, phi_;
    std::vector<char> frozen_, saturated_;
};

/// Convenience wrapper over MaxMinSolver for one-off problems (tests, docs).
std::vector<double> maxmin_rates(const std::vector<double>& capacity, const std::vector<MaxMinFlow>& flows);

}  // namespace strata::sim
