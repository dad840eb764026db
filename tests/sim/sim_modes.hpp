// One plan simulated in both lowering modes: symmetric (one program per stage) and full (one per
// GPU), without the critical path or the allocator model, for tests that compare the two.
#pragma once
#include "strata/sim/simulate.hpp"

namespace strata::sim::test {

struct BothModes {
    SimOutput symmetric, full;
};

inline BothModes simulate_both_modes(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const hwdb::HardwareView& hw) {
    SimOptions o;
    o.critical_path = false;
    o.allocator_model = false;
    BothModes b;
    b.symmetric = simulate(m, c, p, hw, o);
    o.full = true;
    b.full = simulate(m, c, p, hw, o);
    return b;
}

}  // namespace strata::sim::test
