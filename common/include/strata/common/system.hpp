// What the machine offers the process: used to refuse work that could not finish (a simulation
// whose program would not fit in memory) with a message, instead of dying of std::bad_alloc or the
// OOM killer part-way through.
#pragma once
#include <cstdint>

namespace strata {

/// Memory this process may use, in bytes: the smallest of physical memory, the address-space and
/// data-segment limits (ulimit -v, -d) and the memory limit of its control group (cgroup v2
/// memory.max or v1 memory.limit_in_bytes), where those are set. Never 0: 1 GiB if nothing can be
/// read.
std::uint64_t memory_limit_bytes();

}  // namespace strata
