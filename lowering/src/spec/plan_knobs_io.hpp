#pragma once
// The plan knob table's reader and writer, for spec_io.cpp and spec_io_write.cpp only.
#include <nlohmann/json.hpp>

#include "strata/common/json_reader.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::sim {

/// Reads every knob of the table from r into p (absent keys take their defaults), in table order;
/// the caller rejects unknown keys.
void read_plan_knobs(JsonReader& r, PlanSpec& p);

/// The canonical JSON of p: the plan's shape always, other knobs where they differ from their
/// default or where a framework preset could have set them (so reading it back gives p).
nlohmann::ordered_json plan_knobs_json(const PlanSpec& p);

}  // namespace strata::sim
