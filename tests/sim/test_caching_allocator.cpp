// The caching-allocator replay against PyTorch's rules (c10/cuda/CUDACachingAllocator.cpp),
// each case worked out by hand from those rules, and its use by the engine.
#include <catch2/catch.hpp>

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
