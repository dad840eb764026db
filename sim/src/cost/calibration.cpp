// Calibration's factor table (cost.hpp): the six multipliers by index and name, so fits and the
// calibration file iterate over them. Depends on nothing else in sim (the fuzz target links it).
#include <algorithm>

#include "strata/sim/cost.hpp"

namespace strata::sim {

double& Calibration::at(int i) {
    switch (i) {
        case 0: return gemm;
        case 1: return gemm_fp8;
        case 2: return attention;
        case 3: return memory_bound;
        case 4: return collective;
        default: return p2p;
    }
}

double Calibration::at(int i) const { return const_cast<Calibration*>(this)->at(i); }

const char* Calibration::name(int i) {
    static constexpr const char* kNames[kFactors] = {"gemm", "gemm_fp8", "attention", "memory_bound", "collective", "p2p"};
    return kNames[std::clamp(i, 0, kFactors - 1)];
}

bool Calibration::is_identity() const {
    for (int i = 0; i < kFactors; ++i)
        if (at(i) != 1.0) return false;
    return overlap == 0.0 && host_launch_us == 0.0;
}

}  // namespace strata::sim
