// PyTorch's caching allocator, replayed (caching_allocator.hpp says which rules and why).
#include "strata/sim/caching_allocator.hpp"

#include <algorithm>
#include <limits>

#include "strata/common/error.hpp"

namespace strata::sim {

CachingAllocator::CachingAllocator(std::int64_t limit_bytes, bool expandable_segments)
    : limit_(limit_bytes), expandable_(expandable_segments) {}

std::int64_t CachingAllocator::round_size(std::int64_t bytes) {
    if (bytes < kMinBlockBytes) return kMinBlockBytes;
    return kMinBlockBytes * ((bytes + kMinBlockBytes - 1) / kMinBlockBytes);
}

std::int64_t CachingAllocator::segment_size(std::int64_t rounded) {
    if (rounded <= kSmallSizeBytes) return kSmallBufferBytes;
    if (rounded < kMinLargeAllocBytes) return kLargeBufferBytes;
    return kRoundLargeBytes * ((rounded + kRoundLargeBytes - 1) / kRoundLargeBytes);
}

int CachingAllocator::new_block() {
    if (!spare_.empty()) {
        const int id = spare_.back();
        spare_.pop_back();
        blocks_[static_cast<std::size_t>(id)] = Block{};
        return id;
    }
    STRATA_ASSERT(blocks_.size() < static_cast<std::size_t>(std::numeric_limits<int>::max()), "allocator: too many blocks");
    blocks_.emplace_back();
    return static_cast<int>(blocks_.size() - 1);
}

void CachingAllocator::drop_block(int id) {
    blocks_[static_cast<std::size_t>(id)].size = 0;
    spare_.push_back(id);
}

// Inserts the new block `tail` right after `id` in its segment.
void CachingAllocator::link_after(int id, int tail) {
    Block& b = at(id);
    Block& t = at(tail);
    t.prev = id;
    t.next = b.next;
    if (b.next >= 0) at(b.next).prev = tail;
    b.next = tail;
}

// The free block a request takes (removed from its pool), or -1: the smallest that fits, the lower
// address on a tie. With expandable segments a block bordering unmapped space counts as that much
// larger, so the scan moves on to a later block whose expandable size is smaller (PyTorch's
// get_free_block).
int CachingAllocator::best_fit(bool small, std::int64_t size) {
    std::set<Key>& free_blocks = pool(small);
    auto it = free_blocks.lower_bound(Key{size, std::numeric_limits<std::int64_t>::min(), -1});
    if (it == free_blocks.end()) return -1;
    if (expandable_) {
        for (auto next = std::next(it); next != free_blocks.end() && expandable_size(std::get<2>(*next)) < expandable_size(std::get<2>(*it));
             ++next)
            it = next;
    }
    const int id = std::get<2>(*it);
    free_blocks.erase(it);
    return id;
}

CachingAllocator::Grant CachingAllocator::malloc(std::int64_t bytes) {
    const std::int64_t size = round_size(std::max<std::int64_t>(bytes, 1));
    const bool small = size <= kSmallSizeBytes;
    Grant g;
    int id = best_fit(small, size);
    if (id < 0 && expandable_) {
        id = grow_expandable(small, size, false);
        if (id < 0) {
            release_cached();
            ++stats_.cache_flushes;
            id = grow_expandable(small, size, false);
        }
        if (id < 0) {
            g.failed = true;
            ++stats_.failed_requests;
            id = grow_expandable(small, size, true);
        }
    } else if (id < 0) {
        const std::int64_t seg = segment_size(size);
        if (stats_.reserved_bytes + seg > limit_) {
            release_cached();
            ++stats_.cache_flushes;
            if (stats_.reserved_bytes + seg > limit_) {
                g.failed = true;
                ++stats_.failed_requests;
            }
        }
        id = new_block();
        Block& b = at(id);
        b.ptr = next_ptr_;
        b.size = seg;
        b.small = small;
        next_ptr_ += seg;
        stats_.reserved_bytes += seg;
        ++stats_.segments_allocated;
    }
    // Split off the rest when it is worth a block of its own in this pool.
    const std::int64_t rest = at(id).size - size;
    if ((small || expandable_) ? rest >= kMinBlockBytes : rest > kSmallSizeBytes) {
        const int tail = new_block();  // may reallocate blocks_: index afresh below
        Block& t = at(tail);
        t.ptr = at(id).ptr + size;
        t.size = rest;
        t.small = small;
        link_after(id, tail);
        at(id).size = size;
        pool(small).insert(key(t, tail));
    }
    Block& b = at(id);
    b.allocated = true;
    stats_.allocated_bytes += b.size;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    g.handle = id;
    g.block_bytes = b.size;
    return g;
}

// Absorbs `src` (a neighbour of `dst` in its segment) into `dst` when it is free and mapped alike;
// `dst` is in no set while this runs.
void CachingAllocator::merge(int dst, int src) {
    if (src < 0) return;
    Block& s = at(src);
    Block& d = at(dst);
    if (s.allocated || s.mapped != d.mapped) return;
    if (s.mapped)
        pool(s.small).erase(key(s, src));
    else
        unmapped(s.small).erase({s.ptr, src});
    if (d.prev == src) {
        d.ptr = s.ptr;
        d.prev = s.prev;
        if (d.prev >= 0) blocks_[static_cast<std::size_t>(d.prev)].next = dst;
    } else {
        d.next = s.next;
        if (d.next >= 0) blocks_[static_cast<std::size_t>(d.next)].prev = dst;
    }
    d.size += s.size;
    drop_block(src);
}

void CachingAllocator::free(std::int64_t handle) {
    STRATA_ASSERT(handle >= 0 && handle < static_cast<std::int64_t>(blocks_.size()), "allocator: bad handle");
    const int id = static_cast<int>(handle);
    Block& b = blocks_[static_cast<std::size_t>(id)];
    STRATA_ASSERT(b.allocated && b.size > 0, "allocator: double free");
    b.allocated = false;
    stats_.allocated_bytes -= b.size;
    const int prev = b.prev, next = b.next;
    merge(id, prev);
    merge(id, next);
    const Block& m = blocks_[static_cast<std::size_t>(id)];
    pool(m.small).insert(key(m, id));
}

// cudaFree of every cached block that is a whole segment (a split one still has a live part);
// with expandable segments, unmapping every whole page of a free block.
void CachingAllocator::release_cached() {
    if (expandable_) {
        release_expandable();
        return;
    }
    for (std::set<Key>* p : {&small_free_, &large_free_}) {
        for (auto it = p->begin(); it != p->end();) {
            const int id = std::get<2>(*it);
            const Block& b = blocks_[static_cast<std::size_t>(id)];
            if (b.prev < 0 && b.next < 0) {
                stats_.reserved_bytes -= b.size;
                it = p->erase(it);
                drop_block(id);
            } else {
                ++it;
            }
        }
    }
}

}  // namespace strata::sim
