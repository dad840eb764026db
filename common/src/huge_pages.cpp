// advise_huge_pages (huge_pages.hpp): madvise(MADV_HUGEPAGE) on Linux, nothing elsewhere.
#include "strata/common/huge_pages.hpp"

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace strata {

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

void prepare_write_once(const void* p, std::size_t bytes) noexcept {
    if (bytes < kHugeBufferMinBytes) return;
    advise_huge_pages(p, bytes);
#if defined(__linux__) && defined(MADV_POPULATE_WRITE)
    constexpr std::uintptr_t kPage = 4096;
    const auto lo = reinterpret_cast<std::uintptr_t>(p);
    const std::uintptr_t hi = lo + bytes;
    const std::uintptr_t down = lo & ~(kHugePageBytes - 1);
    const std::uintptr_t first = lo - down < kPage ? down : down + kHugePageBytes;  // as advise_huge_pages
    const std::uintptr_t last = hi & ~(kHugePageBytes - 1);
    if (last <= first) return;
    // Whole pages inside the buffer only: the page holding malloc's header is touched already.
    const std::uintptr_t head_lo = (lo + kPage - 1) & ~(kPage - 1);
    if (first > head_lo) (void)madvise(reinterpret_cast<void*>(head_lo), first - head_lo, MADV_POPULATE_WRITE);
    const std::uintptr_t tail_hi = hi & ~(kPage - 1);
    if (tail_hi > last) (void)madvise(reinterpret_cast<void*>(last), tail_hi - last, MADV_POPULATE_WRITE);
#endif
}

}  // namespace strata
