// PyTorch's expandable segments, replayed (c10/cuda/CUDACachingAllocator.cpp: ExpandableSegment,
// find_expandable_block, map_block, try_allocate_expandable_block, unmap_block, release_blocks).
// A segment is a virtual range whose pages are mapped on demand, so the physical memory of a free
// hole can be unmapped and mapped again at the end: what the caching allocator cannot do with a
// cudaMalloc segment that a live block keeps split.
#include <algorithm>
#include <limits>
#include <vector>

#include "strata/common/error.hpp"
#include "strata/sim/caching_allocator.hpp"

namespace strata::sim {

namespace {

std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }
std::int64_t round_down(std::int64_t x, std::int64_t to) { return x / to * to; }

}  // namespace

// The size best fit ranks a free block by: itself plus the unmapped range after it, into which it
// could grow.
std::int64_t CachingAllocator::expandable_size(int id) {
    const Block& b = at(id);
    return b.size + (b.next >= 0 && !at(b.next).mapped ? at(b.next).size : 0);
}

// The lowest address from which `size` bytes of free or unmapped blocks run contiguously: an
// unmapped range, or the free block just before it. None: a new segment of 9/8 of the GPU's
// memory (PyTorch reserves that much address space so holes can be remapped at the end).
int CachingAllocator::find_expandable(bool small, std::int64_t size) {
    for (const AddrKey& u : unmapped(small)) {
        int c = u.second;
        if (at(c).prev >= 0 && !at(at(c).prev).allocated) c = at(c).prev;
        std::int64_t bytes = 0;
        for (int b = c; bytes < size && b >= 0 && !at(b).allocated; b = at(b).next) bytes += at(b).size;
        if (bytes >= size) return c;
    }
    const std::int64_t page = page_bytes(small);
    constexpr std::int64_t kMaxVirtualBytes = std::int64_t{1} << 50;  // an unbounded GPU still needs a finite range
    const std::int64_t wanted = std::min(limit_, kMaxVirtualBytes);
    const std::int64_t span = round_up(std::max(size, wanted + wanted / 8), page);
    const int id = new_block();
    Block& b = at(id);
    b.ptr = round_up(next_ptr_, kLargeBufferBytes);  // page-aligned for either pool
    b.size = span;
    b.small = small;
    b.mapped = false;
    next_ptr_ = b.ptr + span;
    unmapped(small).insert({b.ptr, id});
    return id;
}

// Maps the pages covering the first `size` bytes of the unmapped block `id` (its start is
// page-aligned); the rest stays unmapped. Fails when the pages would pass the limit, unless
// `over_limit` (a request that fails is still served, so the replay can run on).
bool CachingAllocator::map_block(int id, std::int64_t size, bool over_limit) {
    Block& b = at(id);
    STRATA_ASSERT(!b.mapped && !b.allocated && size <= b.size, "allocator: mapping a mapped block");
    const std::int64_t mapped = std::min(b.size, round_up(size, page_bytes(b.small)));
    if (!over_limit && stats_.reserved_bytes + mapped > limit_) return false;
    unmapped(b.small).erase({b.ptr, id});
    if (mapped < b.size) {
        const int rest = new_block();
        Block& r = at(rest);
        Block& m = at(id);
        r.ptr = m.ptr + mapped;
        r.size = m.size - mapped;
        r.small = m.small;
        r.mapped = false;
        link_after(id, rest);
        m.size = mapped;
        unmapped(r.small).insert({r.ptr, rest});
    }
    at(id).mapped = true;
    merge(id, at(id).prev);
    merge(id, at(id).next);
    pool(at(id).small).insert(key(at(id), id));
    stats_.reserved_bytes += mapped;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    ++stats_.segments_allocated;
    return true;
}

// A free mapped block of at least `size` bytes made by mapping more pages (removed from its pool),
// or -1 when the pages would pass the limit.
int CachingAllocator::grow_expandable(bool small, std::int64_t size, bool over_limit) {
    int c = find_expandable(small, size);
    if (!at(c).mapped && !map_block(c, std::min(at(c).size, size), over_limit)) return -1;
    while (at(c).size < size) {
        // A free block followed by an unmapped one: map some of that, which merges the two.
        const int next = at(c).next;
        STRATA_ASSERT(next >= 0 && !at(next).mapped, "allocator: expandable range is not free -> unmapped");
        if (!map_block(next, std::min(size - at(c).size, at(next).size), over_limit)) return -1;
        c = next;
    }
    pool(small).erase(key(at(c), c));
    return c;
}

// Unmaps the whole pages inside the free block `id`; the partial pages at its ends stay mapped as
// free blocks of their own.
void CachingAllocator::unmap_block(int id) {
    const std::int64_t page = page_bytes(at(id).small);
    const std::int64_t lo = at(id).ptr, hi = at(id).ptr + at(id).size;
    const std::int64_t begin = round_up(lo, page), end = round_down(hi, page);
    if (begin >= end) return;
    pool(at(id).small).erase(key(at(id), id));
    auto free_piece = [&](std::int64_t ptr, std::int64_t size) {
        const int p = new_block();
        Block& f = at(p);
        f.ptr = ptr;
        f.size = size;
        f.small = at(id).small;
        return p;
    };
    if (begin > lo) {
        const int before = free_piece(lo, begin - lo);
        Block& b = at(id);
        at(before).prev = b.prev;
        at(before).next = id;
        if (b.prev >= 0) at(b.prev).next = before;
        b.prev = before;
        pool(b.small).insert(key(at(before), before));
    }
    if (end < hi) {
        const int after = free_piece(end, hi - end);
        link_after(id, after);
        pool(at(id).small).insert(key(at(after), after));
    }
    Block& b = at(id);
    b.ptr = begin;
    b.size = end - begin;
    b.mapped = false;
    stats_.reserved_bytes -= end - begin;
    merge(id, at(id).prev);
    merge(id, at(id).next);
    unmapped(at(id).small).insert({at(id).ptr, id});
}

// Emptying the cache: every free block gives back its whole pages; a segment left entirely
// unmapped is released.
void CachingAllocator::release_expandable() {
    std::vector<int> to_unmap;
    for (const std::set<Key>* p : {&small_free_, &large_free_})
        for (const Key& k : *p) to_unmap.push_back(std::get<2>(k));
    for (const int id : to_unmap) {
        unmap_block(id);
        const Block& b = at(id);
        if (!b.mapped && b.prev < 0 && b.next < 0) {
            unmapped(b.small).erase({b.ptr, id});
            drop_block(id);
        }
    }
}

}  // namespace strata::sim
