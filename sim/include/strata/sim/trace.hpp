// Chrome Trace Event JSON of a simulated step (opens in Perfetto and chrome://tracing): a process
// per RankProgram, a thread per stream, "X" events per executed instruction, "C" counter tracks of
// memory per tier. Needs a SimResult run with EngineOptions::record_trace; writes text only.
#pragma once
#include <string>

#include "strata/lowering/program.hpp"
#include "strata/sim/result.hpp"

namespace strata::sim {

/// {"displayTimeUnit": "ns", "traceEvents": [...]}, byte-identical for identical input.
/// Timestamps are microseconds printed with 3 decimals (exact nanoseconds).
std::string to_chrome_trace(const Program& p, const SimResult& r);

/// "12.345" for 12345 ns: microseconds with exactly three decimals, no floating point.
std::string trace_us(std::int64_t ns);

}  // namespace strata::sim
