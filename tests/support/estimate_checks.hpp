#pragma once
// Two fast estimates equal to the last bit, every figure (a warm Estimator's caches against a fresh one's).
#include <catch2/catch.hpp>

#include "strata/planner/estimate.hpp"

namespace strata::test {

inline void require_same_estimate(const planner::FastEstimate& a, const planner::FastEstimate& b) {
    REQUIRE(a.step_time_s == b.step_time_s);
    REQUIRE(a.tokens_per_s == b.tokens_per_s);
    REQUIRE(a.tflops_per_gpu == b.tflops_per_gpu);
    REQUIRE(a.mfu == b.mfu);
    REQUIRE(a.compute_s == b.compute_s);
    REQUIRE(a.bubble_s == b.bubble_s);
    REQUIRE(a.exposed_comm_s == b.exposed_comm_s);
    REQUIRE(a.recompute_s == b.recompute_s);
    REQUIRE(a.optimizer_s == b.optimizer_s);
    REQUIRE(a.offload_s == b.offload_s);
    REQUIRE(a.hbm_bytes == b.hbm_bytes);
    REQUIRE(a.fits == b.fits);
    REQUIRE(a.near_fit == b.near_fit);
}

}  // namespace strata::test
