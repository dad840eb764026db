// Which calibration set a GPU takes (sim::calibration_family, CalibrationRecord::group_for): the
// factors correct the model they were fitted with, the seed's datasheet curve or a GPU's own
// measured GEMMs (docs/fidelity.md, "A set per base").
#include <catch2/catch.hpp>

#include "strata/hwdb/view.hpp"
#include "strata/sim/fidelity.hpp"

using namespace strata;
using namespace strata::sim;

TEST_CASE("a profiled GPU takes the calibration fitted on measured GEMMs, else its architecture's", "[fidelity]") {
    // The factors correct the model they were fitted with: on the seed, GEMMs come from the
    // datasheet curve; on a profiled GPU, from its own grid (docs/costs.md, "Calibration").
    hwdb::HardwareView v;
    v.gpu.arch = "Hopper (sm_90)";
    CHECK(calibration_family(v) == "Hopper");
    hwdb::GemmPoint plan_only;
    plan_only.m = plan_only.n = plan_only.k = 1024, plan_only.efficiency = 0.5, plan_only.plan = true;
    v.gemm_points = {plan_only};  // `strata validate`'s shapes alone are no profile
    CHECK(calibration_family(v) == "Hopper");
    hwdb::GemmPoint grid = plan_only;
    grid.plan = false;
    v.gemm_points.push_back(grid);
    CHECK(calibration_family(v) == "Hopper+measured");
    CalibrationRecord r;
    CalibrationGroup all, hopper, measured;
    all.factors.gemm = 1.25;
    hopper.arch = "Hopper";
    hopper.factors.gemm = 1.5;
    measured.arch = "Hopper+measured";
    measured.factors.gemm = 1.125;
    r.groups = {all, hopper, measured};
    CHECK(r.for_arch("Hopper+measured").gemm == Approx(1.125));
    CHECK(r.for_arch("Hopper").gemm == Approx(1.5));
    CHECK(r.for_arch("Ampere+measured").gemm == Approx(1.25));  // no Ampere sets: "*"
    r.groups.pop_back();
    CHECK(r.for_arch("Hopper+measured").gemm == Approx(1.5));  // no measured set yet: the architecture's
}
