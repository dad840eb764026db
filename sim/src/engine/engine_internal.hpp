// Internal to the engine: the per-instruction timing record and the critical-path pass that reads
// it after the run. Not a public header.
#pragma once
#include <cstdint>
#include <vector>

#include "strata/common/huge_pages.hpp"
#include "strata/lowering/program.hpp"
#include "strata/sim/result.hpp"

namespace strata::sim::detail {

constexpr std::uint8_t kNoLink = 255;

/// When an instruction was reached (issue), began executing (exec: after its match for matched
/// transfers) and finished. -1 = never.
struct Timing {
    std::int64_t issue = -1, exec = -1, end = -1;
    std::int32_t group = -1;         ///< matched transfer group (cross-program), -1 = none
    std::uint8_t link = kNoLink;     ///< transfers: LinkClass with the largest busy_s
    std::int8_t provenance = -1;     ///< hwdb::Provenance of its cost, -1 = not costed
};

using Timings = std::vector<BigVector<Timing>>;  ///< [rank][instr]

/// Longest path of the executed-instruction DAG (stream order, record->wait, matched groups),
/// computed with Boost.Graph; summarised into segments and one readable line.
/// `groups`: matched transfer groups, numbered 0..groups-1 in Timing::group.
CriticalPath critical_path(const Program& p, const Timings& t, int groups, std::int64_t step_time_ns);

}  // namespace strata::sim::detail
