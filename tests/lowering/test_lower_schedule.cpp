// Pipeline schedules alone (sim/lower.hpp pipeline_schedule): slot counts, warm-up lengths from
// Megatron-LM's formulas, forward-before-backward, and the in-flight bound of 1F1B.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "strata/lowering/lower.hpp"
#include "strata/lowering/spec.hpp"

using namespace strata::sim;

namespace {

// Forwards before the first backward.
int leading_forwards(const std::vector<PipeSlot>& s) {
    int n = 0;
    for (const auto& x : s) {
        if (!x.forward) break;
        ++n;
    }
    return n;
}

// Most (mb, chunk) pairs whose forward ran and backward has not: activations held at once.
int max_in_flight(const std::vector<PipeSlot>& s) {
    int cur = 0, best = 0;
    for (const auto& x : s) {
        cur += x.forward ? 1 : -1;
        best = std::max(best, cur);
    }
    return best;
}

void check_complete(const std::vector<PipeSlot>& s, int m, int vpp) {
    REQUIRE(s.size() == static_cast<std::size_t>(2 * m * vpp));
    std::set<std::pair<int, int>> fwd_done, bwd_done;
    for (const auto& x : s) {
        REQUIRE(x.microbatch >= 0);
        REQUIRE(x.microbatch < m);
        REQUIRE(x.chunk >= 0);
        REQUIRE(x.chunk < vpp);
        const auto key = std::make_pair(x.microbatch, x.chunk);
        if (x.forward) {
            REQUIRE(fwd_done.insert(key).second);  // once
        } else {
            REQUIRE(fwd_done.count(key) == 1);     // forward first
            REQUIRE(bwd_done.insert(key).second);
        }
    }
    REQUIRE(bwd_done.size() == static_cast<std::size_t>(m * vpp));
}

}  // namespace

namespace {
// A slot without its steady-state flag (PipeSlot::steady), for comparing order alone.
PipeSlot plain(PipeSlot s) {
    s.steady = false;
    return s;
}
}  // namespace

TEST_CASE("1F1B: warm-up min(pp-rank-1, m), in-flight min(pp-rank, m)", "[lower][schedule]") {
    for (int pp : {1, 2, 4, 8}) {
        for (int m : {1, 3, 8, 16}) {
            for (int rank = 0; rank < pp; ++rank) {
                const auto s = pipeline_schedule(Schedule::one_f_one_b, pp, rank, m, 1);
                check_complete(s, m, 1);
                const int warmup = std::min(pp - rank - 1, m);
                // Warm-up forwards, then the steady state opens with one more forward (if any left).
                CHECK(leading_forwards(s) == warmup + (m > warmup ? 1 : 0));
                CHECK(max_in_flight(s) == std::min(pp - rank, m));
                // Backwards run in micro-batch order.
                int next_b = 0;
                for (const auto& x : s)
                    if (!x.forward) CHECK(x.microbatch == next_b++);
            }
        }
    }
}

TEST_CASE("1F1B last stage alternates F and B", "[lower][schedule]") {
    // pp = 4, rank 3: warm-up 0, so F0 B0 F1 B1 F2 B2, every forward of the steady state.
    const auto s = pipeline_schedule(Schedule::one_f_one_b, 4, 3, 3, 1);
    const std::vector<PipeSlot> expect = {{0, 0, true, false, false, true}, {0, 0, false}, {1, 0, true, false, false, true},
                                          {1, 0, false}, {2, 0, true, false, false, true}, {2, 0, false}};
    CHECK(s == expect);
}

TEST_CASE("Combined 1F1B merges the steady state's pairs only", "[lower][schedule]") {
    // Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm) overlaps a steady-state
    // forward with the backward after it. A rank whose warm-up takes every forward (pp 2, vpp 2,
    // m 2: rank 0's 2 + 2 + 1 > 4) has no steady state: its last forward and first backward run
    // apart. Merging them deadlocked the pipeline (the losses sweep, seed 72): rank 0's merged
    // backward waited for rank 1's gradient, rank 1's merged step for rank 0's forward output.
    PlanSpec p;
    p.pp = 2;
    p.vpp = 2;
    p.ep = 2;
    p.schedule = Schedule::interleaved_1f1b;
    p.moe_a2a_overlap = true;
    auto merges = [&](int rank) {
        const auto s = pipeline_schedule(Schedule::interleaved_1f1b, 2, rank, 2, 2, 0, true);
        int n = 0;
        for (std::size_t k = 0; k + 1 < s.size(); ++k) n += merged_pair(p, s[k], s[k + 1]);
        return n;
    };
    CHECK(merges(0) == 0);
    CHECK(merges(1) == 1);  // warm-up 0 + 2 + 1 = 3 of 4: one steady pair
    // Non-interleaved, pp 2, m 4: rank 0 warms up 1 + 1, then 2 pairs; rank 1 warms up 1, then 3.
    p.vpp = 1;
    p.schedule = Schedule::one_f_one_b;
    for (int rank : {0, 1}) {
        const auto s = pipeline_schedule(Schedule::one_f_one_b, 2, rank, 4, 1, 0, true);
        int n = 0;
        for (std::size_t k = 0; k + 1 < s.size(); ++k) n += merged_pair(p, s[k], s[k + 1]);
        CHECK(n == (rank == 0 ? 2 : 3));
    }
}

TEST_CASE("GPipe: all forwards, then all backwards", "[lower][schedule]") {
    const auto s = pipeline_schedule(Schedule::gpipe, 4, 1, 6, 1);
    check_complete(s, 6, 1);
    CHECK(leading_forwards(s) == 6);
    CHECK(max_in_flight(s) == 6);  // GPipe keeps every micro-batch's activations
}

TEST_CASE("Interleaved 1F1B follows Megatron's order and warm-up", "[lower][schedule]") {
    const int pp = 4, vpp = 2, m = 8;
    for (int rank = 0; rank < pp; ++rank) {
        const auto s = pipeline_schedule(Schedule::interleaved_1f1b, pp, rank, m, vpp);
        check_complete(s, m, vpp);
        // Megatron: warm-up = (pp - rank - 1) * 2 + (vpp - 1) * pp; stage 0: 6 + 4 = 10.
        const int warmup = (pp - rank - 1) * 2 + (vpp - 1) * pp;
        CHECK(leading_forwards(s) == warmup + 1);
        // First backward is micro-batch 0 through the last chunk.
        const auto first_b = std::find_if(s.begin(), s.end(), [](const PipeSlot& x) { return !x.forward; });
        CHECK(first_b->microbatch == 0);
        CHECK(first_b->chunk == vpp - 1);
    }
    // Forward order: groups of pp micro-batches through chunk 0, then the same group through chunk 1:
    // k = 0..3 -> (0..3, c0), k = 4..7 -> (0..3, c1), k = 8 -> (4, c0).
    const auto s0 = pipeline_schedule(Schedule::interleaved_1f1b, pp, 0, m, vpp);
    std::vector<PipeSlot> fwd;
    for (const auto& x : s0)
        if (x.forward) fwd.push_back(x);
    CHECK(plain(fwd[0]) == PipeSlot{0, 0, true});
    CHECK(plain(fwd[3]) == PipeSlot{3, 0, true});
    CHECK(plain(fwd[4]) == PipeSlot{0, 1, true});
    CHECK(plain(fwd[7]) == PipeSlot{3, 1, true});
    CHECK(plain(fwd[8]) == PipeSlot{4, 0, true});
}

TEST_CASE("Interleaved with m == pp: Megatron-Core's warm-up, no all-forward special case", "[lower][schedule]") {
    // Megatron-Core's get_pp_rank_microbatches caps the warm-up at m*vpp and nothing more; its
    // older schedule ran every forward first when m == pp. Megatron's CI test gpt3_7b_tp1_pp4
    // (pp 4, vpp 8, m 4) is this case: its last rank runs 0*2 + 7*4 = 28 warm-up forwards and then
    // alternates, so it holds the last chunk (and the loss) of one micro-batch at a time.
    const int pp = 4, vpp = 8, m = 4;
    for (int rank = 0; rank < pp; ++rank) {
        const auto s = pipeline_schedule(Schedule::interleaved_1f1b, pp, rank, m, vpp);
        check_complete(s, m, vpp);
        const int warmup = std::min((pp - rank - 1) * 2 + (vpp - 1) * pp, m * vpp);
        CHECK(leading_forwards(s) == std::min(warmup + 1, m * vpp));
        int last_chunk = 0, most_last_chunk = 0;
        for (const auto& x : s)
            if (x.chunk == vpp - 1) most_last_chunk = std::max(most_last_chunk, last_chunk += x.forward ? 1 : -1);
        // Ranks 0 and 1 (2(pp - rank - 1) >= pp) stay in warm-up; ranks 2 and 3 reach 1F1B.
        CHECK(most_last_chunk == (2 * (pp - rank - 1) >= pp ? m : (rank == pp - 1 ? 1 : 2 * (pp - rank - 1) + 1)));
    }
    // pp 2, vpp 3, m 2: rank 0 all six forwards first, rank 1 four then 1F1B.
    CHECK(leading_forwards(pipeline_schedule(Schedule::interleaved_1f1b, 2, 0, 2, 3)) == 6);
    CHECK(leading_forwards(pipeline_schedule(Schedule::interleaved_1f1b, 2, 1, 2, 3)) == 5);
}

TEST_CASE("Interleaved micro-batch groups follow Megatron-Core's schedule table", "[lower][schedule]") {
    // Megatron-Core's own example (schedules.py, get_schedule_table): PP 2, N 3, M 5, VP 2 gives
    //   micro-batch 0 1 2 0 1 2 3 4 3 4, chunk 0 0 0 1 1 1 0 0 1 1.
    const int pp = 2, vpp = 2, m = 5, group = 3;
    const int want_mb[] = {0, 1, 2, 0, 1, 2, 3, 4, 3, 4};
    const int want_chunk[] = {0, 0, 0, 1, 1, 1, 0, 0, 1, 1};
    for (int rank = 0; rank < pp; ++rank) {
        INFO("rank " << rank);
        const auto s = pipeline_schedule(Schedule::interleaved_1f1b, pp, rank, m, vpp, group);
        check_complete(s, m, vpp);
        std::vector<PipeSlot> fwd, bwd;
        for (const auto& x : s) (x.forward ? fwd : bwd).push_back(x);
        for (int k = 0; k < m * vpp; ++k) {
            CHECK(plain(fwd[static_cast<std::size_t>(k)]) == PipeSlot{want_mb[k], want_chunk[k], true});
            // The k-th backward: the same entry on the mirrored chunk.
            CHECK(bwd[static_cast<std::size_t>(k)] == PipeSlot{want_mb[k], vpp - 1 - want_chunk[k], false});
        }
        // get_pp_rank_microbatches: (pp - rank - 1) * 2 + (vpp - 1) * N = 5 on rank 0, 3 on rank 1.
        CHECK(leading_forwards(s) == (pp - rank - 1) * 2 + (vpp - 1) * group + 1);
    }
    // The default group is pp: the same slots as without a group.
    for (int rank = 0; rank < 4; ++rank)
        CHECK(pipeline_schedule(Schedule::interleaved_1f1b, 4, rank, 8, 3, 4) == pipeline_schedule(Schedule::interleaved_1f1b, 4, rank, 8, 3));
    // A larger group holds more: warm-up grows by (vpp - 1) per extra micro-batch in the group.
    const auto g4 = pipeline_schedule(Schedule::interleaved_1f1b, 4, 0, 8, 2, 4);
    const auto g8 = pipeline_schedule(Schedule::interleaved_1f1b, 4, 0, 8, 2, 8);
    CHECK(max_in_flight(g4) == 6 + 4 + 1);
    CHECK(max_in_flight(g8) == 6 + 8 + 1);
}

TEST_CASE("Megatron-Core's rule for micro-batch groups", "[lower][schedule]") {
    // pp <= N <= m, and the last group (m mod N) empty or at least pp.
    CHECK(valid_microbatch_group(5, 2, 3));       // last group 2 >= pp 2
    CHECK_FALSE(valid_microbatch_group(7, 4, 5)); // last group 2 < pp 4
    CHECK_FALSE(valid_microbatch_group(8, 4, 3)); // smaller than pp
    CHECK_FALSE(valid_microbatch_group(8, 4, 9)); // larger than m
    CHECK(valid_microbatch_group(8, 4, 4));
    CHECK(smallest_microbatch_group(8, 4) == 4);
    CHECK(smallest_microbatch_group(10, 4) == 5);  // 10 = 5 + 5
    CHECK(smallest_microbatch_group(7, 4) == 7);   // 4, 5 and 6 leave 3, 2, 1
    CHECK(smallest_microbatch_group(14, 4) == 5);  // 5 + 5 + 4
    CHECK(smallest_microbatch_group(3, 4) == 0);   // fewer micro-batches than stages
}
