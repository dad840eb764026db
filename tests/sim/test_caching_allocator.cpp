// The caching-allocator replay against PyTorch's rules (c10/cuda/CUDACachingAllocator.cpp),
// each case worked out by hand from those rules, and its use by the engine.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "strata/sim/caching_allocator.hpp"
#include "strata/sim/engine.hpp"

using namespace strata::sim;

namespace {

constexpr std::int64_t KiB = 1024, MiB = 1024 * 1024;

struct NoCost : CostModel {
    Estimate compute(const Instr&, const RankProgram&) const override { return Estimate{0, strata::hwdb::Provenance::measured}; }
    Demand transfer(const Instr&, const RankProgram&) const override { return Demand{}; }
};

Instr mem(InstrKind k, double bytes, std::int64_t tensor) {
    Instr in;
    in.kind = k;
    in.tier = Tier::gpu;
    in.bytes = bytes;
    in.tensor = tensor;
    in.tag = static_cast<int>(TensorTag::activations);
    return in;
}

}  // namespace

TEST_CASE("allocator: request rounding and segment sizes", "[allocator]") {
    CHECK(CachingAllocator::round_size(1) == 512);
    CHECK(CachingAllocator::round_size(512) == 512);
    CHECK(CachingAllocator::round_size(513) == 1024);
    // Up to 1 MiB: a 2 MiB small segment; above, up to (not incl.) 10 MiB: 20 MiB; then the
    // request rounded up to 2 MiB.
    CHECK(CachingAllocator::segment_size(MiB) == 2 * MiB);
    CHECK(CachingAllocator::segment_size(MiB + 512) == 20 * MiB);
    CHECK(CachingAllocator::segment_size(10 * MiB - 512) == 20 * MiB);
    CHECK(CachingAllocator::segment_size(10 * MiB) == 10 * MiB);
    CHECK(CachingAllocator::segment_size(10 * MiB + 512) == 12 * MiB);
}

TEST_CASE("allocator: small requests share 2 MiB segments", "[allocator]") {
    CachingAllocator a(1LL << 40);
    // Four 512 KiB blocks fill one segment exactly (each split leaves >= 512 B); the fifth opens a second.
    for (int i = 0; i < 4; ++i) a.malloc(512 * KiB);
    CHECK(a.stats().reserved_bytes == 2 * MiB);
    CHECK(a.stats().allocated_bytes == 2 * MiB);
    a.malloc(512 * KiB);
    CHECK(a.stats().reserved_bytes == 4 * MiB);
    CHECK(a.stats().segments_allocated == 2);
}

TEST_CASE("allocator: 1-10 MiB requests carve a 20 MiB segment; a tail of 1 MiB or less stays attached", "[allocator]") {
    CachingAllocator a(1LL << 40);
    // 6 MiB from a new 20 MiB segment (14 MiB left, split off); then 6 from the 14 (8 left); then 6
    // from the 8 (2 left, > 1 MiB, split): three blocks, one segment.
    for (int i = 0; i < 3; ++i) CHECK(a.malloc(6 * MiB).block_bytes == 6 * MiB);
    CHECK(a.stats().reserved_bytes == 20 * MiB);
    CHECK(a.stats().allocated_bytes == 18 * MiB);
    // 19.5 MiB: a 20 MiB segment of its own whose 0.5 MiB rest is too small to split off.
    CachingAllocator b(1LL << 40);
    const auto g = b.malloc(19 * MiB + 512 * KiB);
    CHECK(g.block_bytes == 20 * MiB);
    CHECK(b.stats().allocated_bytes == 20 * MiB);
}

TEST_CASE("allocator: best fit, and a freed block merges with its free neighbours", "[allocator]") {
    CachingAllocator a(1LL << 40);
    const auto x = a.malloc(100 * MiB);
    const auto y = a.malloc(60 * MiB);
    a.free(x.handle);
    a.free(y.handle);
    // 50 MiB: the smallest free block that fits is the 60 MiB segment, not the 100.
    const auto z = a.malloc(50 * MiB);
    CHECK(a.stats().reserved_bytes == 160 * MiB);
    const auto w = a.malloc(90 * MiB);  // the 100 MiB segment is still whole: no new cudaMalloc
    CHECK(a.stats().segments_allocated == 2);
    a.free(w.handle);
    a.free(z.handle);
    // Both segments whole again: a 160 MiB request fits neither and needs a third.
    a.malloc(160 * MiB);
    CHECK(a.stats().segments_allocated == 3);
    CHECK(a.stats().peak_reserved_bytes == 320 * MiB);
}

TEST_CASE("allocator: a full cache is emptied before a request fails", "[allocator]") {
    CachingAllocator a(100 * MiB);
    a.free(a.malloc(60 * MiB).handle);  // a whole cached segment
    const auto g = a.malloc(70 * MiB);  // 60 + 70 > 100: release the 60, then 70 fits
    CHECK_FALSE(g.failed);
    CHECK(a.stats().cache_flushes == 1);
    CHECK(a.stats().reserved_bytes == 70 * MiB);
}

TEST_CASE("allocator: fragmentation fails a request that the free bytes would cover", "[allocator]") {
    CachingAllocator a(100 * MiB);
    const auto big = a.malloc(60 * MiB);
    a.malloc(30 * MiB);  // reserved 90
    a.free(big.handle);
    a.malloc(20 * MiB);  // splits the cached 60: 20 in use, 40 free in a segment that cannot be released
    CHECK(a.stats().allocated_bytes == 50 * MiB);
    // 45 MiB: 50 allocated + 45 = 95 <= 100, but no free block holds 45, a new 46 MiB segment
    // would make 136, and the only cached block belongs to a split segment.
    const auto g = a.malloc(45 * MiB);
    CHECK(g.failed);
    CHECK(a.stats().failed_requests == 1);
    CHECK(a.stats().cache_flushes == 1);
}

TEST_CASE("engine: the allocator replay reserves segments and fails on fragmentation", "[allocator][engine]") {
    NoCost cost;
    // The fragmentation case above, as a program: 60, 30, free 60, 20, 45 (MiB) on a 100 MiB GPU.
    auto program = [] {
        Program p;
        p.ranks.resize(1);
        const double m = MiB;
        p.ranks[0].instrs = {mem(InstrKind::alloc, 60 * m, 1), mem(InstrKind::alloc, 30 * m, 2), mem(InstrKind::free, 60 * m, 1),
                             mem(InstrKind::alloc, 20 * m, 3), mem(InstrKind::alloc, 45 * m, 4)};
        return p;
    };
    EngineOptions o;
    o.memory.gpu_capacity_bytes = 100.0 * MiB;
    o.memory.fragmentation = 0;
    // Counted flat (requests over 1 MiB rounded up to 2 MiB: 45 -> 46), 96 MiB fit.
    auto flat = simulate_program(program(), cost, nullptr, o);
    CHECK_FALSE(flat.oom);
    CHECK(flat.ranks[0].peak_bytes[0] == 96.0 * MiB);
    CHECK(flat.ranks[0].gpu_peak_allocated_bytes == 96.0 * MiB);
    // Replayed, the 45 MiB request fails; the pool then holds 90 + 46 MiB of segments.
    o.memory.replay_caching_allocator = true;
    auto replay = simulate_program(program(), cost, nullptr, o);
    REQUIRE(replay.oom);
    REQUIRE(replay.ooms.size() == 1);
    CHECK(replay.ooms[0].instr == 4);
    CHECK(replay.ranks[0].peak_bytes[0] == 136.0 * MiB);
    // The 46 MiB segment's 1 MiB rest is too small to split off: 20 + 30 + 46 allocated.
    CHECK(replay.ranks[0].gpu_peak_allocated_bytes == 96.0 * MiB);
    CHECK(replay.ranks[0].gpu_cache_flushes == 1);
}

// Expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): the cases below follow
// find_expandable_block / map_block / unmap_block by hand. Pages are 20 MiB in the large pool and
// 2 MiB in the small one; the first large segment's address range starts at 0.

TEST_CASE("expandable segments: pages mapped on demand, and any rest splits off", "[allocator]") {
    CachingAllocator a(1LL << 40, true);
    // 30 MiB maps two 20 MiB pages; the 10 MiB rest is a free block of its own.
    CHECK(a.malloc(30 * MiB).block_bytes == 30 * MiB);
    CHECK(a.stats().reserved_bytes == 40 * MiB);
    // 8 MiB comes out of that rest: no new page.
    a.malloc(8 * MiB);
    CHECK(a.stats().reserved_bytes == 40 * MiB);
    CHECK(a.stats().segments_allocated == 1);
    // A small request maps one 2 MiB page of the small pool's range.
    a.malloc(512 * KiB);
    CHECK(a.stats().reserved_bytes == 42 * MiB);
    // 19.5 MiB: the caching allocator would hand out a whole 20 MiB block (a 0.5 MiB rest does
    // not split in the large pool); here the rest splits (>= 512 B). The 2 MiB left at the end of
    // the large range after the 8 MiB request, plus one new page, hold it.
    CachingAllocator b(1LL << 40, true);
    CHECK(b.malloc(19 * MiB + 512 * KiB).block_bytes == 19 * MiB + 512 * KiB);
    CHECK(b.stats().allocated_bytes == 19 * MiB + 512 * KiB);
    CHECK(b.stats().reserved_bytes == 20 * MiB);
}

TEST_CASE("expandable segments: a free block grows into the unmapped range after it", "[allocator]") {
    // 60 MiB freed, then 70: the caching allocator would need to release the 60 MiB segment and
    // cudaMalloc 70 (a flush); here the free 60 MiB at the end maps one more page and serves it.
    CachingAllocator a(100 * MiB, true);
    a.free(a.malloc(60 * MiB).handle);
    const auto g = a.malloc(70 * MiB);
    CHECK_FALSE(g.failed);
    CHECK(a.stats().cache_flushes == 0);
    CHECK(a.stats().reserved_bytes == 80 * MiB);  // 60 + one 20 MiB page; the 10 MiB rest stays free
    CHECK(a.stats().allocated_bytes == 70 * MiB);
}

TEST_CASE("expandable segments: best fit prefers an interior hole to the block that can grow", "[allocator]") {
    CachingAllocator a(1LL << 40, true);
    const auto x = a.malloc(30 * MiB);  // [0, 30), pages [0, 40): a free 10 MiB at [30, 40)
    a.malloc(12 * MiB);                 // [30, 42): the 10 MiB grows by a page; free [42, 60)
    a.free(x.handle);                   // free [0, 30), between the range's start and a live block
    CHECK(a.stats().reserved_bytes == 60 * MiB);
    // 15 MiB: the free 18 MiB at the end is the smaller block, but it borders unmapped space, so
    // best fit ranks it by what it could grow to and takes 15 of the interior 30 instead.
    a.malloc(15 * MiB);
    // The 18 MiB at the end is therefore still there for 18 MiB: no page mapped.
    a.malloc(18 * MiB);
    CHECK(a.stats().reserved_bytes == 60 * MiB);
    CHECK(a.stats().segments_allocated == 2);  // the 40 MiB at the start, one page for the 12
}

TEST_CASE("expandable segments: emptying the cache unmaps the pages of a hole, which a request then maps again", "[allocator]") {
    // 40, 40, free the first, 20 (splits the hole: 20 free at [20, 40)), 30. With cudaMalloc
    // segments the 30 fails: 40 + 40 + 30 > 100 and the split segment cannot be released, though
    // 90 allocated would fit.
    auto run = [](bool expandable) {
        CachingAllocator a(100 * MiB, expandable);
        const auto first = a.malloc(40 * MiB);
        a.malloc(40 * MiB);
        a.free(first.handle);
        a.malloc(20 * MiB);
        const auto g = a.malloc(30 * MiB);
        return std::make_pair(g, a.stats());
    };
    const auto [classic, classic_stats] = run(false);
    CHECK(classic.failed);
    // Expandable: mapping two pages for 30 at the end would make 120 MiB; the flush unmaps the
    // hole's whole page [20, 40) (60 MiB mapped), and the two pages then fit: 100 MiB, 90 allocated.
    const auto [exp, exp_stats] = run(true);
    CHECK_FALSE(exp.failed);
    CHECK(exp_stats.cache_flushes == 1);
    CHECK(exp_stats.reserved_bytes == 100 * MiB);
    CHECK(exp_stats.allocated_bytes == 90 * MiB);
}

TEST_CASE("expandable segments: a request fails when its pages do not fit after the flush", "[allocator]") {
    // 60, 30 (maps 40: 100 MiB), free the 60, 20 (from the hole: 40 free at [20, 60)), then 45.
    // The flush unmaps the hole's two whole pages (60 MiB mapped) but 45 MiB needs three pages in
    // one run of address space: the hole has two, the end of the range one plus a partly used one.
    CachingAllocator a(100 * MiB, true);
    const auto big = a.malloc(60 * MiB);
    a.malloc(30 * MiB);
    a.free(big.handle);
    a.malloc(20 * MiB);
    const auto g = a.malloc(45 * MiB);
    CHECK(g.failed);
    CHECK(a.stats().failed_requests == 1);
    // Served past the limit so a replay runs on: 60 mapped after the flush + three new pages.
    CHECK(a.stats().reserved_bytes == 120 * MiB);
}

TEST_CASE("expandable segments: the flush gives back every whole free page", "[allocator]") {
    CachingAllocator a(100 * MiB, true);
    a.free(a.malloc(50 * MiB).handle);  // three 20 MiB pages mapped, all free
    a.malloc(MiB);                      // the small pool's range: one 2 MiB page, half used
    CHECK(a.stats().reserved_bytes == 62 * MiB);
    // 90 MiB: the free 60 would grow by two pages, to 102 MiB mapped. The flush unmaps its three
    // pages (the small page keeps a live block); 90 MiB then needs five new pages, 2 + 100 > 100:
    // it fails, and is served past the limit. Without the unmapping this would read 162.
    const auto g = a.malloc(90 * MiB);
    CHECK(g.failed);
    CHECK(a.stats().cache_flushes == 1);
    CHECK(a.stats().reserved_bytes == 102 * MiB);
    a.free(g.handle);
    CHECK(a.stats().allocated_bytes == MiB);
}

TEST_CASE("engine: with expandable segments the hole is remapped and the program fits", "[allocator][engine]") {
    NoCost cost;
    // The flush case above as a program (MiB): 40, 40, free the first, 20, 30 on a 100 MiB GPU.
    Program p;
    p.ranks.resize(1);
    const double m = MiB;
    p.ranks[0].instrs = {mem(InstrKind::alloc, 40 * m, 1), mem(InstrKind::alloc, 40 * m, 2), mem(InstrKind::free, 40 * m, 1),
                         mem(InstrKind::alloc, 20 * m, 3), mem(InstrKind::alloc, 30 * m, 4)};
    EngineOptions o;
    o.memory.gpu_capacity_bytes = 100.0 * MiB;
    o.memory.fragmentation = 0;
    o.memory.replay_caching_allocator = true;
    const auto classic = simulate_program(p, cost, nullptr, o);
    REQUIRE(classic.oom);
    CHECK(classic.ooms[0].instr == 4);
    o.memory.expandable_segments = true;
    const auto expandable = simulate_program(p, cost, nullptr, o);
    CHECK_FALSE(expandable.oom);
    CHECK(expandable.ranks[0].peak_bytes[0] == 100.0 * MiB);
    CHECK(expandable.ranks[0].gpu_peak_allocated_bytes == 90.0 * MiB);
    CHECK(expandable.ranks[0].gpu_cache_flushes == 1);
}

TEST_CASE("allocator: random programs keep the books, in both modes", "[allocator]") {
    // Random allocs and frees (1 KiB to 64 MiB, log-uniform) against a 1 GiB limit, so both the
    // flush and failed requests occur. At every step: the allocated bytes are the live blocks'
    // sum, each block holds its rounded request, and no more is allocated than reserved. At the
    // end, with everything freed and the cache emptied, nothing is reserved: every segment (or
    // every mapped page) went back.
    for (const bool expandable : {false, true}) {
        INFO("expandable " << expandable);
        CachingAllocator a(1LL << 30, expandable);
        std::uint64_t state = 0x9E3779B97F4A7C15ULL;
        auto next = [&state] {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            return state;
        };
        std::vector<CachingAllocator::Grant> live;
        std::int64_t live_bytes = 0;
        bool books_ok = true;
        for (int step = 0; step < 4000; ++step) {
            if (live.empty() || next() % 100 < 55) {
                const double log2_bytes = 10 + static_cast<double>(next() % 1600) / 100.0;  // 2^10 .. 2^26
                const auto bytes = static_cast<std::int64_t>(std::exp2(log2_bytes));
                const auto g = a.malloc(bytes);
                books_ok = books_ok && g.block_bytes >= CachingAllocator::round_size(bytes);
                live.push_back(g);
                live_bytes += g.block_bytes;
            } else {
                const std::size_t i = next() % live.size();
                a.free(live[i].handle);
                live_bytes -= live[i].block_bytes;
                live[i] = live.back();
                live.pop_back();
            }
            books_ok = books_ok && a.stats().allocated_bytes == live_bytes && a.stats().reserved_bytes >= live_bytes;
        }
        CHECK(books_ok);
        CHECK(a.stats().cache_flushes > 0);
        CHECK(a.stats().failed_requests > 0);
        for (const auto& g : live) a.free(g.handle);
        CHECK(a.stats().allocated_bytes == 0);
        a.empty_cache();
        CHECK(a.stats().reserved_bytes == 0);
    }
}
