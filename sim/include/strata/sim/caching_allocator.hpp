// A replay of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, default
// settings, or expandable segments; no max_split_size, no garbage-collection threshold) over one
// GPU's stream of allocations and frees. It answers what a flat byte count cannot: how much HBM
// the cached segments hold (nvidia-smi's and max_reserved's figure), and whether a request fails
// because the free bytes are scattered over segments that live tensors keep split.
//
// The rules replayed: sizes round up to 512 B; requests up to 1 MiB come from 2 MiB segments of a
// small pool, larger ones from a large pool, whose new segments are 20 MiB below 10 MiB and the
// request rounded up to 2 MiB otherwise; a request takes the smallest free block that fits
// (best fit, ties to the lower address) and splits it when the rest is at least 512 B (small
// pool) or over 1 MiB (large pool); a freed block merges with free neighbours of its segment;
// when cudaMalloc would pass the limit, every free block that is a whole segment is returned to
// CUDA and the request retried, and only then does the allocation fail.
//
// With expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) each pool instead
// reserves one virtual range (9/8 of the GPU) and maps physical pages into it on demand: 2 MiB
// pages for the small pool, 20 MiB for the large. A request no free block serves grows the mapped
// part at the lowest free address range that is long enough; any free block may split (rest >= 512
// B); best fit counts a free block that borders unmapped space as that much larger, so interior
// holes are preferred; and emptying the cache unmaps every whole page inside a free block, so the
// physical memory of a hole can be mapped again elsewhere.
#pragma once
#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

namespace strata::sim {

struct AllocatorStats {
    std::int64_t allocated_bytes = 0;  ///< blocks handed out (rounded; a tail too small to split included)
    std::int64_t reserved_bytes = 0;   ///< segments held from cudaMalloc
    std::int64_t peak_allocated_bytes = 0;
    std::int64_t peak_reserved_bytes = 0;
    std::int64_t segments_allocated = 0;  ///< cudaMalloc calls (expandable: page-range mappings)
    std::int64_t cache_flushes = 0;       ///< cudaMalloc failures answered by emptying the cache
    std::int64_t failed_requests = 0;     ///< requests that failed even after the flush
};

class CachingAllocator {
public:
    static constexpr std::int64_t kMinBlockBytes = 512;
    static constexpr std::int64_t kSmallSizeBytes = 1 << 20;    ///< largest small-pool request
    static constexpr std::int64_t kSmallBufferBytes = 2 << 20;  ///< small-pool segment
    static constexpr std::int64_t kLargeBufferBytes = 20 << 20; ///< segment for 1-10 MiB requests
    static constexpr std::int64_t kMinLargeAllocBytes = 10 << 20;
    static constexpr std::int64_t kRoundLargeBytes = 2 << 20;

    /// `limit_bytes`: what cudaMalloc (or cuMemCreate) can hand out in total on this GPU.
    explicit CachingAllocator(std::int64_t limit_bytes, bool expandable_segments = false);

    struct Grant {
        std::int64_t handle = -1;
        std::int64_t block_bytes = 0;  ///< what the request occupies (>= the rounded request)
        bool failed = false;           ///< PyTorch would raise "CUDA out of memory" here
    };
    /// A failed request is still served (past the limit) so that a replay can run to its end and
    /// report how far over it went.
    Grant malloc(std::int64_t bytes);
    void free(std::int64_t handle);
    /// torch.cuda.empty_cache(): what a failing request does before it gives up.
    void empty_cache() { release_cached(); }

    const AllocatorStats& stats() const { return stats_; }

    static std::int64_t round_size(std::int64_t bytes);
    /// cudaMalloc size for a rounded request that no cached block can serve.
    static std::int64_t segment_size(std::int64_t rounded);

private:
    struct Block {
        std::int64_t ptr = 0, size = 0;
        int prev = -1, next = -1;  ///< neighbours in the same segment
        bool allocated = false, small = false;
        bool mapped = true;        ///< false: unmapped address space of an expandable segment
    };
    using Key = std::tuple<std::int64_t, std::int64_t, int>;  // (size, address, block): best fit, low address first
    using AddrKey = std::pair<std::int64_t, int>;             // (address, block)
    std::set<Key>& pool(bool small) { return small ? small_free_ : large_free_; }
    std::set<AddrKey>& unmapped(bool small) { return small ? small_unmapped_ : large_unmapped_; }
    static Key key(const Block& b, int id) { return {b.size, b.ptr, id}; }
    Block& at(int id) { return blocks_[static_cast<std::size_t>(id)]; }
    int new_block();
    void drop_block(int id);
    void link_after(int id, int tail);
    void merge(int dst, int src);
    int best_fit(bool small, std::int64_t size);
    void release_cached();

    // Expandable segments (expandable_segments.cpp).
    static std::int64_t page_bytes(bool small) { return small ? kSmallBufferBytes : kLargeBufferBytes; }
    std::int64_t expandable_size(int id);
    int find_expandable(bool small, std::int64_t size);
    bool map_block(int id, std::int64_t size, bool over_limit);
    int grow_expandable(bool small, std::int64_t size, bool over_limit);
    void unmap_block(int id);
    void release_expandable();

    std::int64_t limit_ = 0, next_ptr_ = 0;
    bool expandable_ = false;
    std::vector<Block> blocks_;
    std::vector<int> spare_;  // recycled block slots
    std::set<Key> small_free_, large_free_;            // free mapped blocks
    std::set<AddrKey> small_unmapped_, large_unmapped_;  // unmapped ranges of expandable segments
    AllocatorStats stats_;
};

}  // namespace strata::sim
