// The estimator's probe plan and cache keys (estimate_keys.cpp), private to the planner.
#pragma once
#include <cstdint>
#include <vector>

#include "strata/lowering/plan_knobs.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::planner {

/// The one-layer, one-micro-batch plan the probe lowers.
sim::PlanSpec probe_plan(const sim::PlanSpec& p);
/// The probe's cache key of its plan p1 (probe_plan's).
void probe_key(const sim::PlanSpec& p1, bool dense_first, std::vector<std::int64_t>& key);
/// The knobs a stage's parameter counts do not read (their cache key leaves them out).
const sim::PlanKnobSet& stage_params_unread();

}  // namespace strata::planner
