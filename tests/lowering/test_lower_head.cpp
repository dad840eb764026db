// The output head and the loss, lowered: the bytes each cross-entropy implementation moves, and
// the head's input under sequence parallelism. Counts by hand on the small GPT.
#include <catch2/catch.hpp>

#include <utility>

#include "strata/lowering/lower.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;
using strata::test::cluster;
using strata::test::plan;
using strata::test::small_gpt;

TEST_CASE("the cross-entropy moves the bytes of its implementation", "[lower]") {
    // One micro-batch of 32 tokens on one GPU, vocabulary 128: 4096 logits, bf16 (2 bytes).
    // Hand counts per logit, from each implementation's passes over the logits:
    //   fused on fp32 (Megatron's vocab-parallel loss, loss_upcast): forward reads the fp32 logits
    //     and writes the softmax (8), backward reads it and writes the gradient in place (8);
    //   fused on bf16 (flash-attn's CrossEntropyLoss, llm.c's fused_classifier): forward reads the
    //     logits (2), backward reads them and writes the gradient (4);
    //   eager F.cross_entropy(logits.float()): forward cast 2 + 4, log_softmax 4 + 4 + 4 = 18;
    //     backward nll's zero fill 4, log_softmax_backward 4 + 4 + 4 + 4 and the cast 4 + 2 = 26.
    auto loss_bytes = [](PlanSpec pl) {
        const Program p = lower(small_gpt(), cluster(1), pl);
        double fwd = 0, bwd = 0;
        for (const auto& in : p.ranks[0].instrs)
            if (in.kind == InstrKind::compute && in.op == Op::loss && in.microbatch == 0)
                (in.phase == Phase::forward ? fwd : bwd) += in.bytes;
        return std::pair{fwd, bwd};
    };
    // The fused fp32 loss in a bf16 plan casts first (logits.float(): read 2, write 4) and casts
    // its gradient back (read 4, write 2), each a kernel of its own; in fp32 nothing is cast, and
    // the other two implementations read the bf16 logits themselves (the eager one's casts are in
    // its bytes above).
    auto cast_bytes = [](PlanSpec pl) {
        Program p = lower(small_gpt(), cluster(1), pl);
        const int id = p.name_id("loss.cast");
        double fwd = 0, bwd = 0;
        for (const auto& in : p.ranks[0].instrs)
            if (in.kind == InstrKind::compute && in.name == id && in.microbatch == 0) (in.phase == Phase::forward ? fwd : bwd) += in.bytes;
        return std::pair{fwd, bwd};
    };
    const double logits = 32.0 * 128.0;
    PlanSpec pl = plan(1, 1, 1, 1);
    REQUIRE(pl.loss_upcast);
    REQUIRE(pl.precision == Precision::bf16);
    CHECK(loss_bytes(pl) == std::pair{8 * logits, 8 * logits});
    CHECK(cast_bytes(pl) == std::pair{6 * logits, 6 * logits});
    PlanSpec fp32 = pl;
    fp32.precision = Precision::fp32;
    CHECK(cast_bytes(fp32) == std::pair{0.0, 0.0});
    pl.loss_upcast = false;
    CHECK(loss_bytes(pl) == std::pair{2 * logits, 4 * logits});
    CHECK(cast_bytes(pl) == std::pair{0.0, 0.0});
    pl.eager_cross_entropy = true;
    CHECK(loss_bytes(pl) == std::pair{18 * logits, 26 * logits});
    CHECK(cast_bytes(pl) == std::pair{0.0, 0.0});
    // loss_parallel under TP 2, per logit of the rank's half: forward the cast (2 + 4), max (4),
    // shift (8), exp (8), sum (4), result (8); backward zeros (4), exp (8), their sum (12), the
    // product (8), the cast back (4 + 2). Off TP it is the plain eager loss.
    pl.loss_parallel = true;
    CHECK(loss_bytes(pl) == std::pair{18 * logits, 26 * logits});
    PlanSpec tp2 = plan(2, 1, 1, 1);
    tp2.loss_upcast = false;
    tp2.eager_cross_entropy = true;
    tp2.loss_parallel = true;
    const auto lp = [&] {
        const Program p = lower(small_gpt(), cluster(2), tp2);
        double fwd = 0, bwd = 0;
        for (const auto& in : p.ranks[0].instrs)
            if (in.kind == InstrKind::compute && in.op == Op::loss && in.microbatch == 0) (in.phase == Phase::forward ? fwd : bwd) += in.bytes;
        return std::pair{fwd, bwd};
    }();
    CHECK(lp == std::pair{38 * logits / 2, 38 * logits / 2});
}

TEST_CASE("the head under SP gathers its input again for its weight gradient, as Megatron's linear does", "[lower][sp]") {
    // Megatron's column-parallel linear with sequence parallelism keeps its input's shard and
    // all-gathers it again in the backward, beside the dgrad GEMM. The small GPT (L = 4, 32
    // tokens of h = 64 per micro-batch, 4 micro-batches) at tp 2 with SP: per micro-batch two such
    // gathers a layer (the QKV and fc1 inputs) and one for the head, each 32 x 64 x 2 bytes.
    PlanSpec p = plan(2, 1, 1, 4);
    p.sequence_parallel = true;
    Program prog = lower(small_gpt(), cluster(2), p);
    const int id = prog.name_id("tp.all_gather_input");
    int n = 0;
    for (const auto& in : prog.ranks[0].instrs) {
        if (in.kind != InstrKind::collective || in.name != id) continue;
        ++n;
        CHECK(in.phase == Phase::backward);
        CHECK(in.bytes == 32.0 * 64 * 2);
    }
    CHECK(n == (2 * 4 + 1) * 4);
    // The walk's reason: the head keeps the shard, so the gathered input is not held from the
    // forward to the backward (docs/reliability.md, stop 68's memory sweep).
    PlanSpec no_sp = plan(2, 1, 1, 4);
    Program plain = lower(small_gpt(), cluster(2), no_sp);
    const int none = plain.name_id("tp.all_gather_input");
    int gathers = 0;
    for (const auto& in : plain.ranks[0].instrs) gathers += in.name == none ? 1 : 0;
    CHECK(gathers == 0);
}
