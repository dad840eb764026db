// splitmix64 (Steele, Lea and Flood 2014): the counter-based generator behind the runtime's
// sample order, synthetic stream, parameter initialisation and dropout masks. A value depends only
// on its counter, never on who draws it or in which order; a bijection on 64 bits whose output
// bits each depend on every input bit. Inline for the cuda module's kernels too.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__ __forceinline__
#else
#define STRATA_HD inline
#endif

namespace strata::runtime {

STRATA_HD std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

}  // namespace strata::runtime
