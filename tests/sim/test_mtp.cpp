// Multi-token prediction (model.mtp_depth; DeepSeek-V3 Sec. 2.2, Megatron-Core's MTP block): the
// module's weights and activations sit on the last pipeline stage with a copy of the word
// embedding; its layer, projection and second head are lowered there, forward and backward.
// Byte counts derived by hand in the comments.
#include <catch2/catch.hpp>

#include <string>

#include "cost_fixtures.hpp"
#include "sim_modes.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"
#include "strata/sim/simulate.hpp"
#include "strata/lowering/tensors.hpp"
#include "support/gpt.hpp"

using namespace strata::sim;
using namespace strata::sim::test;

namespace {

// 4 layers, h 256, 4 heads of 64, vocab 1024, 128 tokens; layer 0 dense (SwiGLU 704), then MoE
// layers of 8 experts (top-2) of width 128 and one shared expert. Untied embeddings.
ModelSpec mtp_model(int depth) {
    ModelSpec m = strata::test::gpt_shape("tiny-mtp", 4, 256, 4, 1024, 128);
    m.position = PositionKind::rope;
    m.norm = NormKind::rmsnorm;
    m.ffn = FfnKind::swiglu;
    m.ffn_hidden = 704;
    m.moe = strata::test::moe_spec(8, 2, 128);
    m.moe->first_k_dense = 1;
    m.moe->shared_experts = 1;
    m.mtp_depth = depth;
    return m;
}

PlanSpec pp_plan() {
    PlanSpec p;
    p.tp = 2, p.pp = 2, p.dp = 2, p.ep = 2, p.expert_tp = 1;
    p.micro_batch = 1;
    p.global_batch = 8;
    p.sequence_parallel = true;
    p.zero_stage = 1;
    return p;
}

int count_named(const Program& prog, int rank, const std::string& name, Phase phase) {
    int n = 0;
    for (const Instr& in : prog.ranks[static_cast<std::size_t>(rank)].instrs)
        if (in.kind == InstrKind::compute && in.name >= 0 && in.phase == phase &&
            prog.names[static_cast<std::size_t>(in.name)] == name)
            ++n;
    return n;
}

}  // namespace

TEST_CASE("MTP parameters live on the last stage with a copy of the embedding", "[mtp][tensors]") {
    const PlanSpec p = pp_plan();
    const ModelSpec with = mtp_model(1), without = mtp_model(0);
    // The module's own weights on one rank: its layer (an MoE layer like layer 3) as that layer
    // is split (TP 2, EP 2), the 2h x h projection over TP, three replicated norms of h.
    const StageParams layer3 = [&] {
        ModelSpec one = without;
        one.layers = 1;          // a one-layer model whose only layer is dense ...
        one.moe->first_k_dense = 0;  // ... unless it is MoE: make it layer 3's kind
        PlanSpec q = p;
        q.pp = 1;
        StageParams s = stage_params(one, q, 0);
        const double h = 256, t = 2;
        s.dense -= 1024 * h / t + h + 1024 * h / t;  // embedding, final norm, head
        return s;
    }();
    const StageParams mtp = mtp_params_local(with, p);
    CHECK(mtp.expert == Approx(layer3.expert));
    CHECK(mtp.dense == Approx(layer3.dense + 2.0 * 256 * 256 / 2 + 3 * 256));
    // Stage 1 gains the module and the embedding copy (vocab x h / tp); stage 0 is unchanged.
    CHECK(stage_params(with, p, 0).total() == Approx(stage_params(without, p, 0).total()));
    CHECK(stage_params(with, p, 1).dense - stage_params(without, p, 1).dense == Approx(mtp.dense + 1024.0 * 256 / 2));
    CHECK(stage_params(with, p, 1).expert - stage_params(without, p, 1).expert == Approx(mtp.expert));
    // Without pipelining the embedding is already there: no copy.
    PlanSpec flat = p;
    flat.pp = 1;
    flat.dp = 4;
    CHECK(stage_params(with, flat, 0).dense - stage_params(without, flat, 0).dense == Approx(mtp_params_local(with, flat).dense));
}

TEST_CASE("MTP activations: norms and projection inputs, a layer and a second head per module", "[mtp][tensors]") {
    const PlanSpec p = pp_plan();
    auto sum = [](const std::vector<TensorDesc>& v) {
        double b = 0;
        for (const TensorDesc& d : v) b += d.bytes;
        return b;
    };
    const double head = sum(logits_activations(mtp_model(0), p));
    const double layer = sum(layer_activations(mtp_model(0), p, 3, false));
    // With SP each TP rank keeps 128 / 2 = 64 tokens of the norms' inputs (2 x h) and of the 2h
    // projection input, 2 bytes each: 64 x (2 + 2) x 256 x 2.
    const double own = 64.0 * 4 * 256 * 2;
    CHECK(sum(logits_activations(mtp_model(1), p)) == Approx(head + own + layer + head));
    CHECK(sum(logits_activations(mtp_model(2), p)) == Approx(head + 2 * (own + layer + head)));
}

TEST_CASE("MTP lowering: the last stage runs the module forward and backward, the first does not", "[mtp][lower]") {
    const PlanSpec p = pp_plan();
    const Program prog = lower(mtp_model(1), dgx_cluster(1), p);
    REQUIRE(prog.ranks.size() == 2);  // symmetric mode: one program per stage
    const int micro = p.micro_batches();
    // Forward: one projection GEMM per micro-batch; backward: dgrad and wgrad.
    CHECK(count_named(prog, 1, "mtp.proj", Phase::forward) == micro);
    CHECK(count_named(prog, 1, "mtp.proj", Phase::backward) == 2 * micro);
    CHECK(count_named(prog, 0, "mtp.proj", Phase::forward) == 0);
    // The head runs twice per micro-batch on the last stage: main and MTP.
    CHECK(count_named(prog, 1, "logits", Phase::forward) == 2 * micro);
    // Untied embeddings with MTP across stages: first and last stage all-reduce the embedding's
    // gradient (Megatron-Core's embedding group), vocab x h / tp x 2 bytes.
    for (int r = 0; r < 2; ++r) {
        int emb_ar = 0;
        for (const Instr& in : prog.ranks[static_cast<std::size_t>(r)].instrs)
            if (in.kind == InstrKind::collective && in.group == Group::embedding) {
                ++emb_ar;
                CHECK(in.bytes == Approx(1024.0 * 256 / 2 * 2));
            }
        CHECK(emb_ar == 1);
    }
    const Program plain = lower(mtp_model(0), dgx_cluster(1), p);
    for (const RankProgram& rp : plain.ranks)
        for (const Instr& in : rp.instrs) CHECK_FALSE((in.kind == InstrKind::collective && in.group == Group::embedding));
}

TEST_CASE("MTP simulation: full mode agrees with symmetric mode; the engine peak matches the model", "[mtp][simulate]") {
    const auto hw = h100_view();
    const PlanSpec p = pp_plan();
    const SimOutput base = simulate_both_modes(mtp_model(0), dgx_cluster(1), p, hw).symmetric;
    const auto [sym, full] = simulate_both_modes(mtp_model(1), dgx_cluster(1), p, hw);
    REQUIRE_FALSE(sym.result.deadlock);
    REQUIRE_FALSE(full.result.deadlock);
    CHECK(full.result.step_time_ns == sym.result.step_time_ns);
    CHECK(sym.result.step_time_ns > base.result.step_time_ns);
    CHECK(sym.model_flops_per_step > base.model_flops_per_step);
    CHECK(sym.result.peak_bytes_max[0] == Approx(sym.memory.hbm_bytes).epsilon(0.01));
    CHECK(sym.memory.stages[1].activations_bytes > base.memory.stages[1].activations_bytes);
    CHECK(sym.memory.stages[0].activations_bytes == Approx(base.memory.stages[0].activations_bytes));
}

TEST_CASE("A virtual stage of only the MTP module and the loss (Megatron's 'mL' layout)", "[mtp][simulate][pipeline]") {
    // DeepSeek-V3's H100 layout in small: pp 2 x vpp 2, virtual stages E+t | t | tt | mL, so rank 0
    // holds 1 + 2 layers and rank 1 holds 1 + 0, the MTP module and the loss.
    const auto hw = h100_view();
    PlanSpec p = pp_plan();
    p.vpp = 2;
    p.schedule = Schedule::interleaved_1f1b;
    p.virtual_layer_split = {1, 1, 2, 0};
    REQUIRE(stage_layers(mtp_model(1), p) == std::vector<int>{3, 1});
    const auto [sym, full] = simulate_both_modes(mtp_model(1), dgx_cluster(1), p, hw);
    REQUIRE_FALSE(sym.result.deadlock);
    REQUIRE_FALSE(full.result.deadlock);
    CHECK(full.result.step_time_ns == sym.result.step_time_ns);
    // Rank 1 runs no decoder layer in its second chunk: its only decoder layer's norm1 runs once
    // per micro-batch forward (layer 1), the MTP layer's once more.
    const Program& prog = sym.program;
    int norm1_fwd = 0;
    for (const Instr& in : prog.ranks[1].instrs)
        if (in.kind == InstrKind::compute && in.phase == Phase::forward && in.name >= 0 &&
            prog.names[static_cast<std::size_t>(in.name)] == "norm1")
            ++norm1_fwd;
    CHECK(norm1_fwd == 2 * p.micro_batches());
}

TEST_CASE("The default pipeline split counts each MTP module as a layer of the last stage", "[mtp][spec]") {
    // DeepSeek-V3's 61 layers on 16 stages: 62 units give 14 stages of 4 and 2 of 3, the remainder
    // from the middle (stages 8..15, then 0..5); the last stage's 4 units are 3 layers + MTP.
    ModelSpec m = mtp_model(1);
    m.layers = 61;
    PlanSpec p;
    p.pp = 16;
    const std::vector<int> split = stage_layers(m, p);
    CHECK(split == std::vector<int>{4, 4, 4, 4, 4, 4, 3, 3, 4, 4, 4, 4, 4, 4, 4, 3});
    int sum = 0;
    for (int n : split) sum += n;
    CHECK(sum == 61);
    // Without MTP the last stage keeps 4 (61 = 13 x 4 + 3 x 3; the 3s go to stages 5..7).
    m.mtp_depth = 0;
    CHECK(stage_layers(m, p).back() == 4);
    // A stage per layer: no room to take a layer off the last one, so MTP adds to it.
    m.mtp_depth = 1;
    m.layers = 16;
    CHECK(stage_layers(m, p) == std::vector<int>(16, 1));
}
