// advise_huge_pages (huge_pages.hpp): madvise(MADV_HUGEPAGE) on Linux, nothing elsewhere.
#include "huge_pages.hpp"

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace strata::sim::detail {

void advise_huge_pages(const void* p, std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes < kHugeBufferMinBytes) return;
    const auto lo = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t first = (lo + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
    const std::uintptr_t last = (lo + bytes) & ~(kHugePageBytes - 1);
    if (last > first) (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);  // a hint: failure is fine
#else
    (void)p;
    (void)bytes;
#endif
}

}  // namespace strata::sim::detail
