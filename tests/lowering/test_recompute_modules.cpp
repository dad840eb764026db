// Selective recomputation by module (plan.recompute_modules, Megatron-Core's --recompute-modules):
// the stashed bytes each module drops, derived by hand from the tensor list's definition
// (Korthikanti et al. §4 itemisation, docs/formulas.md), the forward work it adds back to the
// backward, the spec's rules, and the round trip through JSON.
#include <catch2/catch.hpp>

#include "strata/common/error.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/lowering/tensors.hpp"
#include "support/gpt.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;

namespace {

unsigned mods(std::initializer_list<RecomputeModule> list) {
    unsigned m = 0;
    for (RecomputeModule r : list) m |= 1u << static_cast<unsigned>(r);
    return m;
}

double stashed(const ModelSpec& m, const PlanSpec& p, int layer) {
    double b = 0;
    for (const TensorDesc& d : layer_activations(m, p, layer, false)) b += d.bytes;
    return b;
}

double recompute_flops(const Program& prog) {
    double f = 0;
    for (const auto& r : prog.ranks)
        for (const auto& in : r.instrs)
            if (in.kind == InstrKind::compute && in.phase == Phase::recompute) f += in.flops * static_cast<double>(r.multiplicity);
    return f;
}

// GPT shape, flash attention, no dropout, bf16, one GPU: s = 32, b = 1, h = 64, ffn = 4h, GeLU.
ModelSpec gpt() {
    ModelSpec m = strata::test::small_gpt();
    m.ffn = FfnKind::gelu;
    return m;
}

PlanSpec selective(unsigned modules) {
    PlanSpec p = strata::test::plan(1, 1, 1, 4);
    p.recompute = Recompute::selective;
    p.recompute_modules = modules;
    return p;
}

}  // namespace

TEST_CASE("dense layer: bytes each module drops, by hand", "[recompute][memory]") {
    const ModelSpec m = gpt();
    const double sbh = 32.0 * 1 * 64;
    // With flash attention and no dropout the layer stashes (bf16, in units of sbh bytes):
    // attn.norm_in 2, qkv_in 2, q 2, k 2, v 2, proj_in 2, mlp.norm_in 2, fc1_in 2, fc1_out 8,
    // act_out 8 = 32 sbh; core_attn drops only the fp32 log-sum-exp (4 bytes per head and query).
    const double lse = 4.0 * 4 * 32;
    PlanSpec none = strata::test::plan(1, 1, 1, 4);
    CHECK(stashed(m, none, 0) == Approx(32 * sbh + lse));
    CHECK(stashed(m, selective(mods({RecomputeModule::core_attn})), 0) == Approx(32 * sbh));
    // layernorm: the two norm outputs (qkv_in, fc1_in) go: 28 sbh.
    CHECK(stashed(m, selective(mods({RecomputeModule::core_attn, RecomputeModule::layernorm})), 0) == Approx(28 * sbh));
    // mlp: fc1_out and act_out go (16 sbh); its input fc1_in stays: 16 sbh.
    CHECK(stashed(m, selective(mods({RecomputeModule::core_attn, RecomputeModule::mlp})), 0) == Approx(16 * sbh));
    CHECK(stashed(m, selective(mods({RecomputeModule::core_attn, RecomputeModule::layernorm, RecomputeModule::mlp})), 0) ==
          Approx(12 * sbh));
    // The dropped tensors come back as transient workspace during that layer's backward.
    double ws_none = 0, ws_mlp = 0;
    for (const TensorDesc& d : layer_backward_workspace(m, selective(mods({RecomputeModule::core_attn})), 0, false)) ws_none += d.bytes;
    for (const TensorDesc& d : layer_backward_workspace(m, selective(mods({RecomputeModule::core_attn, RecomputeModule::mlp})), 0, false))
        ws_mlp += d.bytes;
    CHECK(ws_mlp - ws_none == Approx(16 * sbh));
}

TEST_CASE("dense layer: recomputed forward work, by hand", "[recompute][lower]") {
    const ModelSpec m = gpt();
    const ClusterSpec c = strata::test::cluster(1);
    // 4 layers, 4 micro-batches of 32 tokens, h = 64, f = 256, 4 heads of 16.
    const double tokens = 4 * 32.0, layers = 4;
    // core_attn: the causal attention core forward, 4 s h / 2 per token.
    const double core = layers * tokens * (4.0 * 32 * 64 / 2);
    CHECK(recompute_flops(lower(m, c, selective(mods({RecomputeModule::core_attn})))) == Approx(core));
    // mlp: fc1 and fc2 again, 2 x 2 h f per token (the checkpointed module reruns whole).
    const double mlp = layers * tokens * (2 * 2.0 * 64 * 256);
    CHECK(recompute_flops(lower(m, c, selective(mods({RecomputeModule::core_attn, RecomputeModule::mlp})))) == Approx(core + mlp));
    // layernorm adds memory-bound work only: no FLOPs, but recompute-phase instructions exist.
    const Program ln = lower(m, c, selective(mods({RecomputeModule::layernorm})));
    CHECK(recompute_flops(ln) == 0);
    int norms = 0;
    for (const auto& in : ln.ranks[0].instrs)
        if (in.kind == InstrKind::compute && in.phase == Phase::recompute && in.op == Op::norm) ++norms;
    CHECK(norms == 2 * 4 * 4);  // two norms per layer and micro-batch
}

TEST_CASE("MoE and MLA layers: bytes each module drops", "[recompute][memory]") {
    ModelSpec m = strata::test::gpt_shape("tiny-moe-mla", 2, 64, 4, 128, 32);
    m.ffn = FfnKind::swiglu;
    m.moe = strata::test::moe_spec(4, 2, 32);
    m.moe->shared_experts = 1;
    m.mla = MlaSpec{16, 8, 16, 8, 16};  // q_lora 16, kv_lora 8, nope 16, rope 8, v 16
    const double s = 32, h = 64;
    const PlanSpec base = selective(mods({RecomputeModule::core_attn}));
    const double b0 = stashed(m, base, 0);
    // mla_up_proj: Q and K (4 heads x (16 + 8)) and V (4 heads x 16), bf16, less the shared rope
    // key (8) the checkpoint keeps beside the latents to rerun RoPE from.
    const double qkv = 2.0 * s * 4 * (24 + 24 + 16) - 2.0 * s * 8;
    CHECK(b0 - stashed(m, selective(mods({RecomputeModule::core_attn, RecomputeModule::mla_up_proj})), 0) == Approx(qkv));
    // moe_act: the experts' fc2 input, tokens x top_k rows of expert_ffn (uniform routing), bf16.
    const double act = 2.0 * s * 2 * 32;
    CHECK(b0 - stashed(m, selective(mods({RecomputeModule::core_attn, RecomputeModule::moe_act})), 0) == Approx(act));
    // shared_experts: gate, up and act outputs of the 32-wide shared expert on every token.
    CHECK(b0 - stashed(m, selective(mods({RecomputeModule::core_attn, RecomputeModule::shared_experts})), 0) ==
          Approx(3 * 2.0 * s * 32));
    // moe: the whole block but its input: router probabilities (fp32, tokens x experts), the
    // dispatched input (tokens x top_k x h), expert gate/up/act and the shared expert's.
    const double block = 4.0 * s * 4 + 2.0 * s * 2 * h + 3 * (2.0 * s * 2 * 32) + 3 * (2.0 * s * 32);
    CHECK(b0 - stashed(m, selective(mods({RecomputeModule::core_attn, RecomputeModule::moe})), 0) == Approx(block));
    // With the router weights applied at the combine, the expert outputs (tokens x top_k x h, bf16)
    // are kept for the weights' gradient, and the moe module drops them too.
    PlanSpec at_output = base;
    at_output.moe_probs_at = MoeProbsAt::fc2_output;
    const double expert_out = 2.0 * s * 2 * h;
    CHECK(stashed(m, at_output, 0) - b0 == Approx(expert_out));
    PlanSpec at_output_moe = selective(mods({RecomputeModule::core_attn, RecomputeModule::moe}));
    at_output_moe.moe_probs_at = MoeProbsAt::fc2_output;
    CHECK(stashed(m, at_output, 0) - stashed(m, at_output_moe, 0) == Approx(block + expert_out));
    // Dense layers have no combine: the placement changes nothing there.
    ModelSpec alternating = m;
    alternating.moe->moe_every = 2;
    const int dense = alternating.layer_is_moe(0) ? 1 : 0;
    REQUIRE_FALSE(alternating.layer_is_moe(dense));
    CHECK(stashed(alternating, at_output, dense) == Approx(stashed(alternating, base, dense)));
}

TEST_CASE("moe_act_fp8_cache: the SwiGLU inputs kept for the recompute take 1 byte, not 2", "[recompute][memory]") {
    ModelSpec m = strata::test::gpt_shape("tiny-moe", 2, 64, 4, 128, 32);
    m.ffn = FfnKind::swiglu;
    m.moe = strata::test::moe_spec(4, 2, 32);
    PlanSpec p = selective(mods({RecomputeModule::core_attn, RecomputeModule::moe_act}));
    p.precision = Precision::fp8;
    const double s = 32;
    const double kept = stashed(m, p, 0);
    p.moe_act_fp8_cache = true;
    // gate and up outputs of tokens x top_k rows of expert_ffn 32: 2 tensors x (2 - 1) bytes each.
    CHECK(kept - stashed(m, p, 0) == Approx(2 * 1.0 * s * 2 * 32));
    // The fc2 input stays dropped; nothing else changes.
    for (const TensorDesc& d : layer_activations(m, p, 0, false)) {
        CHECK(d.name != "moe.experts.act_out");
        if (d.name == "moe.experts.gate_out" || d.name == "moe.experts.up_out") CHECK(d.bytes == Approx(s * 2 * 32));
    }
}

TEST_CASE("recompute_modules: spec rules and round trip", "[recompute][spec]") {
    const ModelSpec m = gpt();
    ClusterSpec c = strata::test::cluster(1);
    c.gpus_per_node = 1;
    auto parse = [](const std::string& text) { return plan_from_json_text(text, "plan.json"); };
    const PlanSpec p = parse(R"({"global_batch": 4, "recompute": "selective", "recompute_modules": ["core_attn", "layernorm", "mlp"]})");
    CHECK(p.recomputes(RecomputeModule::layernorm));
    CHECK(p.recomputes(RecomputeModule::mlp));
    CHECK_FALSE(p.recomputes(RecomputeModule::moe));
    CHECK(parse(to_json_text(p)).recompute_modules == p.recompute_modules);
    // Default: core_attn only (Megatron's default list).
    const PlanSpec d = parse(R"({"global_batch": 4, "recompute": "selective"})");
    CHECK(d.recompute_modules == mods({RecomputeModule::core_attn}));
    auto rule = [&](const std::string& text) {
        try {
            parse(text);
        } catch (const strata::InputError& e) {
            return e.path() + ": " + e.rule();
        }
        return std::string("accepted");
    };
    CHECK(rule(R"({"global_batch": 4, "recompute": "full", "recompute_modules": ["mlp"]})").find("needs plan.recompute") != std::string::npos);
    CHECK(rule(R"({"global_batch": 4, "recompute": "selective", "recompute_modules": ["mlpp"]})").find("must be one of") != std::string::npos);
    CHECK(rule(R"({"global_batch": 4, "recompute": "selective", "recompute_modules": ["mlp", "mlp"]})").find("twice") != std::string::npos);
    CHECK(rule(R"({"global_batch": 4, "recompute": "selective", "recompute_modules": []})").find("non-empty") != std::string::npos);
    // A module the model lacks is rejected by the validator.
    const PlanSpec mla = parse(R"({"global_batch": 4, "recompute": "selective", "recompute_modules": ["mla_up_proj"]})");
    CHECK_THROWS_WITH(validate_plan(m, c, mla, "plan.json"), Catch::Contains("mla_up_proj"));
    const PlanSpec moe = parse(R"({"global_batch": 4, "recompute": "selective", "recompute_modules": ["moe"]})");
    CHECK_THROWS_WITH(validate_plan(m, c, moe, "plan.json"), Catch::Contains("MoE"));
}
