// Data races in a Program's dataflow, found statically: on each rank, every instruction that
// reads a value must happen after the one that wrote it, and every write after the earlier reads
// and writes it would disturb, where "happens after" is what the Program guarantees (program order
// on one stream, record/wait between streams). Flat ranges conflict where they overlap. An
// executor that runs streams concurrently (the runtime on a GPU, the engine's timing) may reorder
// anything else, so each hazard is a bug in the lowering.
#pragma once
#include <string>
#include <vector>

#include "strata/lowering/program.hpp"

namespace strata::sim {

/// Up to `limit` hazards, each naming the rank, both instructions and the tensor. Needs a Program
/// with dataflow (LowerOptions::dataflow).
std::vector<std::string> dataflow_hazards(const Program& p, std::size_t limit = 20);

}  // namespace strata::sim
