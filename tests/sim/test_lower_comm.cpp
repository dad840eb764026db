// Lowering of pipeline and context-parallel communication on the small GPT: blocking pipeline
// p2p (DeepSpeed) and ring attention. Expected values are derived by hand in the comments.
#include <catch2/catch.hpp>

#include <utility>

#include "strata/sim/lower.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;
using strata::test::cluster;
using strata::test::plan;
using strata::test::small_gpt;

TEST_CASE("blocking pipeline p2p: compute waits for every send it issued", "[lower]") {
    PlanSpec p = plan(1, 2, 1, 4);
    auto sends_awaited = [&](const Program& prog) {
        int sends = 0, awaited = 0;
        for (const auto& rp : prog.ranks) {
            const auto& v = rp.instrs;
            for (std::size_t i = 0; i < v.size(); ++i) {
                if (v[i].kind != InstrKind::send) continue;
                ++sends;
                // The send's stream records right after it, and compute waits for that event.
                if (i + 2 < v.size() && v[i + 1].kind == InstrKind::record && v[i + 1].stream == Stream::pp_p2p &&
                    v[i + 2].kind == InstrKind::wait && v[i + 2].stream == Stream::compute && v[i + 2].event == v[i + 1].event)
                    ++awaited;
            }
        }
        return std::make_pair(sends, awaited);
    };
    const auto overlapped = sends_awaited(lower(small_gpt(), cluster(2), p));
    p.p2p_blocking = true;
    const auto blocking = sends_awaited(lower(small_gpt(), cluster(2), p));
    // 4 micro-batches: stage 0 sends 4 activations, stage 1 sends 4 gradients.
    CHECK(overlapped.first == 8);
    CHECK(overlapped.second == 0);
    CHECK(blocking.first == 8);
    CHECK(blocking.second == 8);
}

TEST_CASE("context parallelism: ring attention in cp - 1 steps of one K/V chunk each", "[lower]") {
    // cp = 4, s = 32: each rank holds s/cp = 8 queries; one K/V chunk = 2*b*(s/cp)*kv_w/tp*2 =
    // 2*1*8*64*2 = 2048 bytes. A ring step moves one chunk per rank, costed as an all-gather of
    // S = 2048 * 4/3; forward: 3 steps per layer, backward: 3 K/V steps + 3 dK/dV steps. The
    // attention runs as the local block plus one block per step, each 1/cp of the FLOPs.
    PlanSpec p = plan(1, 1, 1, 4);
    p.cp = 4;
    const Program prog = lower(small_gpt(), cluster(4), p);
    int fwd_steps = 0, bwd_ag = 0, bwd_rs = 0, fwd_blocks = 0;
    double flops = 0, block0 = -1;
    for (const auto& in : prog.ranks[0].instrs) {
        if (in.layer != 0 || in.microbatch != 0) continue;
        if (in.kind == InstrKind::collective && in.group == Group::cp) {
            CHECK(in.bytes == Approx(2048.0 * 4 / 3));
            if (in.phase == Phase::forward) ++fwd_steps;
            else if (in.coll == CollKind::all_gather) ++bwd_ag;
            else ++bwd_rs;
        }
        if (in.kind == InstrKind::compute && in.op == Op::attention_fwd && in.phase == Phase::forward) {
            ++fwd_blocks;
            flops += in.flops;
            if (block0 < 0) block0 = in.flops;
            CHECK(in.flops == Approx(block0));  // equal blocks (load-balanced causal chunks)
        }
    }
    CHECK(fwd_steps == 3);
    CHECK(bwd_ag == 3);
    CHECK(bwd_rs == 3);
    CHECK(fwd_blocks == 4);
    // All blocks together: causal 4*b*(s/cp)*s*heads*hd/tp/2 = 4*1*8*32*64/2 = 32768.
    CHECK(flops == Approx(4.0 * 8 * 32 * 64 / 2));
}
