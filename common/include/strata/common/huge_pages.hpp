// Big, write-once buffers (a Program's instructions, the engine's per-instruction timings, the
// critical-path graph) on transparent huge pages where Linux offers them. Such a
// buffer is filled right after it is allocated, so each 4 KiB page costs a page fault, and under a
// hypervisor a fault costs microseconds: for GPT-3 175B on 1024 GPUs (2.1M instructions, ~300 MB)
// faults were a third of a simulation's time. madvise(MADV_HUGEPAGE) makes it one fault per 2 MiB
// when THP is "madvise" or "always"; with THP off, or off Linux, nothing changes. Only a hint: no
// result depends on it. Shared by the lowering and the engine.
#pragma once
#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace strata {

constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
constexpr std::size_t kHugeBufferMinBytes = kHugePageBytes;  ///< smaller buffers: plain pages

/// Advises huge pages for the 2 MiB-aligned part of [p, p + bytes). Call before the memory is
/// first written (e.g. right after vector::reserve); harmless on memory already touched.
void advise_huge_pages(const void* p, std::size_t bytes) noexcept;

/// For a buffer about to be written front to back that this code did not allocate itself (a
/// std::vector's reserve): advise_huge_pages for its aligned interior, and the unaligned head and
/// tail (4 KiB pages either way) populated in one call (MADV_POPULATE_WRITE, Linux 5.14+) instead
/// of one fault per page, which here costs ~3x more. Like the advice, failure changes nothing.
void prepare_write_once(const void* p, std::size_t bytes) noexcept;

/// std::allocator, except that buffers of kHugeBufferMinBytes or more are 2 MiB-aligned, rounded up
/// to whole huge pages and advised.
template <typename T>
struct HugePageAllocator {
    using value_type = T;
    HugePageAllocator() = default;
    template <typename U>
    HugePageAllocator(const HugePageAllocator<U>&) noexcept {}

    T* allocate(std::size_t n) {
        const std::size_t bytes = n * sizeof(T);
        if (bytes < kHugeBufferMinBytes) return std::allocator<T>{}.allocate(n);
        // Whole huge pages: a partial last one would fall back to 4 KiB pages. The slack is
        // address space only until written.
        const std::size_t whole = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
        void* p = ::operator new(whole, std::align_val_t{kHugePageBytes});
        advise_huge_pages(p, whole);
        return static_cast<T*>(p);
    }
    void deallocate(T* p, std::size_t n) noexcept {
        if (n * sizeof(T) < kHugeBufferMinBytes) return std::allocator<T>{}.deallocate(p, n);
        ::operator delete(p, std::align_val_t{kHugePageBytes});
    }
    template <typename U>
    bool operator==(const HugePageAllocator<U>&) const noexcept { return true; }
};

template <typename T>
using BigVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace strata
