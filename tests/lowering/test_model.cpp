// Parameter and FLOP counts (model.hpp) against published figures: Meta's LLaMA-2 parameter
// counts, Mistral's Mixtral-8x7B totals, Narayanan et al. (SC21) §5.1 for GPT parameter and
// per-iteration FLOP formulas, and PaLM's 6N + 12LHQT model-FLOPs rule.
#include <catch2/catch.hpp>

#include "strata/lowering/lower.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/params.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;

namespace {

ModelSpec llama(int layers, std::int64_t h, int heads, int kv, std::int64_t ffn) {
    ModelSpec m;
    m.name = "llama";
    m.layers = layers;
    m.hidden = h;
    m.heads = heads;
    m.kv_heads = kv;
    m.head_dim = h / heads;
    m.ffn_hidden = ffn;
    m.ffn = FfnKind::swiglu;
    m.vocab = 32000;
    m.seq_len = 4096;
    m.norm = NormKind::rmsnorm;
    m.position = PositionKind::rope;
    return m;
}

// GPT as Megatron-LM trains it: 4h gelu MLP, biases, layernorm, learned positions, tied embedding.
ModelSpec gpt(int layers, std::int64_t h, int heads, std::int64_t vocab = 51200, std::int64_t seq = 2048) {
    ModelSpec m;
    m.name = "gpt";
    m.layers = layers;
    m.hidden = h;
    m.heads = heads;
    m.kv_heads = heads;
    m.head_dim = h / heads;
    m.ffn_hidden = 4 * h;
    m.ffn = FfnKind::gelu;
    m.vocab = vocab;
    m.seq_len = seq;
    m.max_position = seq;
    m.norm = NormKind::layernorm;
    m.position = PositionKind::learned;
    m.tied_embeddings = true;
    m.linear_bias = true;
    m.dropout = 0.1;
    return m;
}

ModelSpec mixtral() {
    ModelSpec m = llama(32, 4096, 32, 8, 14336);
    m.seq_len = 32768;
    MoeSpec moe;
    moe.experts = 8;
    moe.top_k = 2;
    m.moe = moe;
    return m;
}

}  // namespace

TEST_CASE("LLaMA-2 parameter counts are exact", "[model]") {
    // Meta's released checkpoints: 6,738,415,616 (7B) and 68,976,648,192 (70B) parameters.
    ParamCounts p7 = param_counts(llama(32, 4096, 32, 32, 11008));
    CHECK(p7.total == 6'738'415'616LL);
    CHECK(p7.active == p7.total);
    // Breakdown by hand: embedding = lm head = 32000·4096; per layer 4h² + 3h·ffn + 2h.
    CHECK(p7.embedding == 131'072'000LL);
    CHECK(p7.lm_head == 131'072'000LL);
    CHECK(p7.attention == 32LL * 4 * 4096 * 4096);
    CHECK(p7.mlp == 32LL * 3 * 4096 * 11008);
    CHECK(p7.norms == 32LL * 2 * 4096);
    CHECK(p7.final_norm == 4096);
    CHECK(p7.position == 0);
    // The parameters outside the layers, without the walk over them: the same hand figures.
    const ParamCounts e7 = edge_param_counts(llama(32, 4096, 32, 32, 11008));
    CHECK(e7.embedding == 131'072'000LL);
    CHECK(e7.lm_head == 131'072'000LL);
    CHECK(e7.final_norm == 4096);
    CHECK(e7.position == 0);
    CHECK(e7.layers == 0);

    // 70B uses GQA (8 KV heads of 128): K and V are h x 1024 each.
    ParamCounts p70 = param_counts(llama(80, 8192, 64, 8, 28672));
    CHECK(p70.total == 68'976'648'192LL);
    CHECK(p70.attention == 80LL * (2 * 8192 * 8192 + 2 * 8192 * 1024));
}

TEST_CASE("Nemotron-4 340B: a squared-ReLU MLP has two matrices", "[model]") {
    // Nemotron-4 340B technical report, Table 1: 96 layers, hidden 18432, 96 heads (192 wide), 8
    // KV heads, MLP 73728 with squared ReLU (no gate), vocab 256000, untied, LayerNorm, no biases.
    // By hand per layer: Q and output projection 2 h^2, K and V 2 h (8 x 192), MLP 2 h x 73728,
    // two LayerNorms 4 h: 736,100,352 + 2,717,908,992 + 73,728 = 3,454,083,072; 96 of them, the
    // two 256000 x h tables and the final norm (2 h): 341,029,195,776.
    ModelSpec m;
    m.layers = 96;
    m.hidden = 18432;
    m.heads = 96;
    m.kv_heads = 8;
    m.head_dim = 192;
    m.ffn_hidden = 73728;
    m.ffn = FfnKind::relu2;
    m.vocab = 256000;
    m.seq_len = 4096;
    m.position = PositionKind::rope;
    m.tied_embeddings = false;
    const ParamCounts p = param_counts(m);
    CHECK(p.total == 341'029'195'776LL);
    CHECK(p.mlp == 96LL * 2 * 18432 * 73728);
    // Two matrices like GELU: the same parameters and matmul FLOPs; only the activation is cheaper.
    ModelSpec g = m;
    g.ffn = FfnKind::gelu;
    CHECK(param_counts(g).total == p.total);
    CHECK(forward_flops(g, 1).matmul() == forward_flops(m, 1).matmul());
    CHECK(forward_flops(m, 1).other < forward_flops(g, 1).other);
    // Plain ReLU (OPT): the same matrices again; its activation is one max per element where
    // squared ReLU takes a max and a square: per layer and token, ffn fewer flops.
    ModelSpec r = m;
    r.ffn = FfnKind::relu;
    CHECK(param_counts(r).total == p.total);
    CHECK(forward_flops(r, 1).matmul() == forward_flops(m, 1).matmul());
    CHECK(layer_forward_flops(m, 0, 1).other - layer_forward_flops(r, 0, 1).other == Approx(4096.0 * 73728));
}

TEST_CASE("Gemma 2 9B: a GeGLU MLP has SwiGLU's three matrices and a dearer gate", "[model]") {
    // Gemma 2 report (arXiv:2408.00118), Table 1 and HF config: 42 layers, d_model 3584, 16 heads
    // of 256, 8 KV heads, gated MLP 14336 (GeGLU), vocab 256000, tied. By hand per layer: Q and
    // output 2 x 3584 x 4096, K and V 2 x 3584 x 2048, the MLP 3 x 3584 x 14336, two RMSNorms
    // 2 x 3584 (Strata counts two of Gemma's four): 29,360,128 + 14,680,064 + 154,140,672 + 7,168.
    ModelSpec m;
    m.layers = 42;
    m.hidden = 3584;
    m.heads = 16;
    m.kv_heads = 8;
    m.head_dim = 256;
    m.ffn_hidden = 14336;
    m.ffn = FfnKind::geglu;
    m.norm = NormKind::rmsnorm;
    m.vocab = 256000;
    m.seq_len = 4096;
    m.position = PositionKind::rope;
    m.tied_embeddings = true;
    const ParamCounts p = param_counts(m);
    CHECK(p.mlp == 42LL * 3 * 3584 * 14336);
    CHECK(p.total == 42LL * (29'360'128 + 14'680'064 + 154'140'672 + 7'168) + 256000LL * 3584 + 3584);
    // The matmuls are SwiGLU's; per token and layer the gate costs 9 flops an element (GELU's
    // tanh form ~8, then the product) where SiLU's costs 5.
    ModelSpec s = m;
    s.ffn = FfnKind::swiglu;
    CHECK(param_counts(s).total == p.total);
    CHECK(forward_flops(s, 1).matmul() == forward_flops(m, 1).matmul());
    CHECK(layer_forward_flops(m, 0, 1).other - layer_forward_flops(s, 0, 1).other == Approx(4096.0 * 4 * 14336));
    // Its activations are SwiGLU's (the fused kernel keeps the same tensors).
    PlanSpec plan;
    plan.global_batch = 8;
    CHECK(memory_estimate(m, plan, Capacities{}).stages[0].activations_bytes ==
          memory_estimate(s, plan, Capacities{}).stages[0].activations_bytes);
}

TEST_CASE("Mixtral-8x7B total and active parameters", "[model]") {
    // Mistral AI: 46.7B total, 12.9B active (top-2 of 8 experts).
    ParamCounts p = param_counts(mixtral());
    CHECK(p.total == 46'702'792'704LL);
    CHECK(p.router == 32LL * 4096 * 8);
    CHECK(p.experts == 32LL * 8 * 3 * 4096 * 14336);
    // Active: 6 of the 8 experts per layer are not touched: 46,702,792,704 - 32·6·3·4096·14336.
    CHECK(p.active == 46'702'792'704LL - 32LL * 6 * 3 * 4096 * 14336);
    CHECK(static_cast<double>(p.active) == Approx(12.9e9).epsilon(0.005));
}

TEST_CASE("GPT parameter count matches Narayanan et al. SC21 §5.1", "[model]") {
    // P = 12lh²(1 + 13/12h + (V+s)/12lh): per layer 12h² + 13h (QKV 3h²+3h, proj h²+h, MLP 8h²+5h,
    // two layernorms 4h), plus token and position embeddings. The formula leaves out the final
    // layernorm (2h), which we count.
    ModelSpec m = gpt(96, 12288, 96);
    ParamCounts p = param_counts(m);
    const double formula = megatron_param_count(m);
    CHECK(static_cast<double>(p.total) - formula == Approx(2.0 * 12288).margin(1.0));
    // Table 1 of the paper lists 174.6B for this configuration.
    CHECK(static_cast<double>(p.total) == Approx(174.6e9).epsilon(0.0005));
    // 12·96·12288² + 13·12288·96 + (51200 + 2048)·12288 + 2·12288 computed by hand:
    CHECK(p.total == 173'946'175'488LL + 15'335'424LL + 654'311'424LL + 24'576LL);
}

TEST_CASE("Per-iteration FLOPs reproduce Megatron-LM's formulas", "[model]") {
    // Narayanan et al. SC21 §5.1: F = 72Bslh²(1 + s/6h + V/12lh) without recomputation and
    // 96Bslh²(1 + s/6h + V/16lh) with full recomputation. They count matmuls only, with the full
    // s² attention square. Our matmul-only count must agree to rounding; with the non-matmul
    // estimate (norms, softmax, gelu, biases, residuals, loss) it stays within 0.1%.
    struct Cfg { int l; std::int64_t h; int a; double B; };
    for (Cfg c : {Cfg{96, 12288, 96, 1536}, Cfg{128, 25600, 160, 3072}, Cfg{40, 6144, 48, 1024}}) {
        ModelSpec m = gpt(c.l, c.h, c.a);
        const double f72 = megatron_flops_per_step(m, c.B, false);
        const double f96 = megatron_flops_per_step(m, c.B, true);
        CHECK(step_flops(m, c.B, Recompute::none, false, true).total() == Approx(f72).epsilon(1e-12));
        CHECK(step_flops(m, c.B, Recompute::full, false, true).total() == Approx(f96).epsilon(1e-12));
        const double with_other = flops_per_step(m, c.B, Recompute::none);
        CHECK(with_other > f72);
        CHECK(with_other == Approx(f72).epsilon(0.001));
        CHECK(flops_per_step(m, c.B, Recompute::full) == Approx(f96).epsilon(0.001));
    }
    // An independent spot value, by hand: GPT-3 175B, B = 1536:
    // 72·1536·2048·96·12288² = 3.2831e18; × (1 + 2048/73728 + 51200/14155776) = × 1.0313945 = 3.3862e18.
    CHECK(megatron_flops_per_step(gpt(96, 12288, 96), 1536, false) == Approx(3.3862e18).epsilon(1e-4));
}

TEST_CASE("Model FLOPs per token follow PaLM's 6N + 12LHQT", "[model]") {
    // Chowdhery et al. (PaLM, 2022), Appendix B: 6N + 12·L·H·Q·T per token, N the matmul
    // parameters (no embedding lookup, no norms), full attention square.
    ModelSpec m = llama(32, 4096, 32, 32, 11008);
    ParamCounts p = param_counts(m);
    const double n_matmul = static_cast<double>(p.attention + p.mlp + p.lm_head);
    const double attn = 12.0 * 32 * 32 * 128 * 4096;
    CHECK(model_flops_per_token(m) == Approx(6.0 * n_matmul + attn).epsilon(1e-12));
    // Causal halving removes half of the attention term only.
    CHECK(model_flops_per_token(m, true) == Approx(6.0 * n_matmul + attn / 2).epsilon(1e-12));

    // MoE: the active matmul parameters (top-2 experts and the router) replace N.
    ModelSpec mx = mixtral();
    ParamCounts px = param_counts(mx);
    const double n_active = static_cast<double>(px.attention + px.router + 32LL * 2 * 3 * 4096 * 14336 + px.lm_head);
    CHECK(model_flops_per_token(mx) == Approx(6.0 * n_active + 12.0 * 32 * 32 * 128 * 32768).epsilon(1e-12));
}

TEST_CASE("Attention FLOPs and the causal convention", "[model]") {
    ModelSpec m = gpt(1, 1024, 16, 1000, 512);
    // QK^T and PV: 2 matmuls × 2 flops × s² × (heads·head_dim) = 4·512²·1024 per sequence.
    CHECK(attention_flops(m, 512, false) == Approx(4.0 * 512 * 512 * 1024));
    CHECK(attention_flops(m, 512, true) == Approx(2.0 * 512 * 512 * 1024));
    // Selective recompute re-runs exactly the attention core (matmul-only accounting).
    const double none = step_flops(m, 8, Recompute::none, false, true).total();
    const double sel = step_flops(m, 8, Recompute::selective, false, true).total();
    CHECK(sel - none == Approx(8 * attention_flops(m, 512, false)));
}

TEST_CASE("GQA and SwiGLU layer FLOPs", "[model]") {
    // LLaMA-2-70B layer, one sequence of 4096: QKV = 2·s·h·(h + 2·1024), proj 2·s·h², MLP 3 GEMMs
    // of 2·s·h·ffn.
    ModelSpec m = llama(80, 8192, 64, 8, 28672);
    LayerFlops f = layer_forward_flops(m, 0, 1.0);
    const double s = 4096, h = 8192;
    CHECK(f.qkv == Approx(2 * s * h * (h + 2 * 1024)));
    CHECK(f.proj == Approx(2 * s * h * h));
    CHECK(f.mlp == Approx(3 * 2 * s * h * 28672));
    CHECK(f.router == 0);
    CHECK(f.other > 0);
    CHECK(f.other < 0.01 * f.matmul());
}

namespace {
// DeepSeek-V3 (technical report arXiv:2412.19437 and its config.json): 61 layers, h 7168, 128
// heads, MLA with q_lora 1536, kv_lora 512, nope 128 + rope 64 per query/key head, values 128;
// the first 3 layers dense (ffn 18432), then 256 routed experts + 1 shared of width 2048, top-8.
ModelSpec deepseek_v3() {
    ModelSpec m = llama(61, 7168, 128, 128, 18432);
    m.vocab = 129280;
    m.seq_len = 4096;
    m.mla = MlaSpec{1536, 512, 128, 64, 128};
    MoeSpec moe;
    moe.experts = 256;
    moe.top_k = 8;
    moe.expert_ffn_hidden = 2048;
    moe.shared_experts = 1;
    moe.first_k_dense = 3;
    m.moe = moe;
    return m;
}
}  // namespace

TEST_CASE("DeepSeek-V3 parameters: MLA and dense-first layers give the published 671B / 37B", "[model][mla]") {
    // The report: 671B total parameters of which 37B are activated per token (the 14B MTP module
    // is not counted in the 671B). Per-layer MLA weights by hand: q_down 7168x1536, q_up
    // 1536x(128x192), kv_down 7168x(512+64), kv_up 512x(128x256), proj (128x128)x7168, plus the
    // latent norms 1536 + 512 = 187,107,328 + 2,048.
    const ModelSpec m = deepseek_v3();
    const LayerParams dense = layer_params(m, 0), moe = layer_params(m, 3);
    const std::int64_t mla = 7168LL * 1536 + 1536LL * 128 * 192 + 7168LL * 576 + 512LL * 128 * 256 + 128LL * 128 * 7168 + 2048;
    CHECK(dense.attention == mla);
    CHECK(moe.attention == mla);
    CHECK(dense.mlp == 3LL * 7168 * 18432);
    CHECK(dense.experts == 0);
    CHECK(moe.experts == 256LL * 3 * 7168 * 2048);
    CHECK(moe.shared_experts == 3LL * 7168 * 2048);
    const ParamCounts p = param_counts(m);
    CHECK(static_cast<double>(p.total) == Approx(671e9).epsilon(0.001));
    CHECK(static_cast<double>(p.active) == Approx(37.5e9).epsilon(0.02));
    CHECK_FALSE(m.layer_is_moe(2));
    CHECK(m.layer_is_moe(3));
}

TEST_CASE("DeepSeek-V3 with its MTP module: the published 685B checkpoint", "[model][mla][mtp]") {
    // The Hugging Face card: 685B = 671B main model + 14B MTP module, whose checkpoint stores its
    // own copies of the embedding and the output head. Strata shares those (Megatron-Core keeps
    // them shared), so its own MTP weights are one MoE layer + eh_proj (2h x h) + enorm, hnorm
    // and the module's final norm, by hand:
    ModelSpec m = deepseek_v3();
    m.mtp_depth = 1;
    const std::int64_t h = 7168;
    const std::int64_t mla = 7168LL * 1536 + 1536LL * 128 * 192 + 7168LL * 576 + 512LL * 128 * 256 + 128LL * 128 * 7168 + 2048;
    const std::int64_t moe_layer = mla + 2 * h + h * 256 + 257LL * 3 * h * 2048;
    const std::int64_t own = moe_layer + 2 * h * h + 3 * h;
    const ParamCounts p = param_counts(m);
    CHECK(p.mtp == own);
    CHECK(static_cast<double>(p.total + p.embedding + p.lm_head) == Approx(685e9).epsilon(0.001));
    // One token activates 8 of the module's 256 routed experts.
    m.mtp_depth = 0;
    const ParamCounts base = param_counts(m);
    CHECK(p.total - base.total == own);
    CHECK(p.active - base.active == own - 248LL * 3 * h * 2048);
    // Two modules: twice the weights.
    m.mtp_depth = 2;
    CHECK(param_counts(m).mtp == 2 * own);
}

TEST_CASE("MTP FLOPs: a layer, the 2h -> h projection and the head again", "[model][mtp]") {
    ModelSpec m = llama(4, 1024, 8, 8, 2816);
    m.vocab = 32000;
    m.seq_len = 2048;
    const ForwardFlops f0 = forward_flops(m, 2.0);
    m.mtp_depth = 1;
    const ForwardFlops f1 = forward_flops(m, 2.0);
    const double tokens = 2 * 2048.0, h = 1024;
    const LayerFlops lf = layer_forward_flops(m, 3, 2.0);
    CHECK(f1.mtp == Approx(lf.matmul() + 2 * tokens * 2 * h * h + 2 * tokens * h * 32000));
    CHECK(f1.matmul() - f0.matmul() == Approx(f1.mtp));
    CHECK(f1.attention_core - f0.attention_core == Approx(lf.attention));
    // Full recomputation re-runs the decoder layers only: the MTP module adds its forward and
    // backward (3x) and no recompute.
    const StepFlops with = step_flops(m, 2.0, Recompute::full, false, true);
    m.mtp_depth = 0;
    const StepFlops without = step_flops(m, 2.0, Recompute::full, false, true);
    CHECK(with.forward - without.forward == Approx(f1.mtp));
    CHECK(with.backward - without.backward == Approx(2 * f1.mtp));
    CHECK(with.recompute == Approx(without.recompute));
}

TEST_CASE("MLA layer FLOPs: five projections, scores over 192 and values over 128 per head", "[model][mla]") {
    const ModelSpec m = deepseek_v3();
    const LayerFlops f = layer_forward_flops(m, 0, 1.0);
    const double s = 4096, h = 7168;
    CHECK(f.qkv == Approx(2 * s * (h * 1536 + h * 576 + 1536.0 * 128 * 192 + 512.0 * 128 * 256)));
    CHECK(f.proj == Approx(2 * s * 128 * 128 * h));
    // Full square: QK^T 2 s^2 x 128 x 192, PV 2 s^2 x 128 x 128.
    CHECK(f.attention == Approx(2 * s * s * 128 * (192 + 128)));
    CHECK(attention_flops(m, 4096, true) == Approx(s * s * 128 * 320));
}

TEST_CASE("Megatron-Core's model FLOPs reproduce the Megatron-Bridge cards' TFLOP/s-to-tokens ratio", "[model]") {
    // Megatron-Bridge's Qwen3 verification cards (2026) publish model TFLOP/s/GPU and tokens/s/GPU
    // of one run each; their ratio is the count per token. By hand, per token forward: attention
    // GEMMs 2·h·(q + 2kv) + 2·q·h, the causal score and value products 2·2·q·s/2, the MLP (or 8 of
    // 128 experts) 3·2·h·f, times the layers, plus the logits 2·h·V; no router GEMM; times 3.
    // Qwen3-8B (36 x 4096, q 4096, kv 1024, f 12288, V 151936, s 4096):
    //   (83,886,080 + 33,554,432 + 301,989,888) x 36 + 1,244,659,712 = 16,344,154,112; x3 = 49,032,462,336
    //   card: 512.7e12 / 10456.348 = 49.0325e9.
    ModelSpec q8 = llama(36, 4096, 32, 8, 12288);
    q8.head_dim = 128;
    q8.vocab = 151936;
    q8.seq_len = 4096;
    q8.qk_norm = true;  // its norms are not matmuls
    CHECK(megatron_core_flops_per_step(q8, 1) / 4096 == Approx(49'032'462'336.0).epsilon(1e-12));
    CHECK(megatron_core_flops_per_step(q8, 1) / 4096 == Approx(512.7e12 / 10456.348).epsilon(1e-4));
    // Qwen3-30B-A3B (48 x 2048, q 4096, kv 512, 8 of 128 experts of 768):
    //   (37,748,736 + 33,554,432 + 75,497,472) x 48 + 622,329,856 = 7,668,760,576; x3 = 23,006,281,728
    //   card: 299.352e12 / 13011.378 = 23.0073e9 (the router's 2·h·128 per token would add 0.3 %).
    ModelSpec q30 = llama(48, 2048, 32, 4, 6144);
    q30.head_dim = 128;
    q30.vocab = 151936;
    q30.seq_len = 4096;
    q30.qk_norm = true;
    q30.moe = MoeSpec{};
    q30.moe->experts = 128;
    q30.moe->top_k = 8;
    q30.moe->expert_ffn_hidden = 768;
    CHECK(megatron_core_flops_per_step(q30, 2) / (2 * 4096) == Approx(23'006'281'728.0).epsilon(1e-12));
    CHECK(megatron_core_flops_per_step(q30, 1) / 4096 == Approx(299.352e12 / 13011.378).epsilon(1e-4));
}

TEST_CASE("vocabulary padding follows Megatron's rule and the published padded sizes", "[model][vocab]") {
    // Megatron-LM's _vocab_size_with_padding: up to a multiple of make_vocab_size_divisible_by x tp.
    // Independent figures: llm.c's GPT-2 tables hold padded_vocab_size = 50304 rows (no TP);
    // BLOOM's released config says vocab_size 250880, its tokenizer 250680 entries, trained at TP 4.
    PlanSpec p;
    p.vocab_divisible_by = 128;
    ModelSpec m = gpt(12, 768, 12, 50257, 1024);
    CHECK(padded_vocab(m, p) == 50304);
    p.tp = 8;
    CHECK(padded_vocab(m, p) == 51200);  // multiple of 1024
    m.vocab = 250680;
    p.tp = 4;
    CHECK(padded_vocab(m, p) == 250880);
    // The default pads to the TP degree only; a multiple stays as it is.
    p.vocab_divisible_by = 1;
    m.vocab = 50257;
    CHECK(padded_vocab(m, p) == 50260);
    m.vocab = 128256;
    p.tp = 8;
    CHECK(padded_vocab(m, p) == 128256);
    p.tp = 1;
    CHECK(padded_vocab(m, p) == 128256);

    // What a rank holds: the padded table, split over TP, and the head's GEMM over its rows.
    ModelSpec g = strata::test::small_gpt();
    g.vocab = 100;  // not a multiple of tp = 2
    g.tied_embeddings = false;
    PlanSpec q = strata::test::plan(2, 1, 1, 2);
    q.vocab_divisible_by = 64;  // x tp 2 = 128 rows
    REQUIRE(padded_vocab(g, q) == 128);
    CHECK(edge_param_counts(g, q).embedding == 128 * g.hidden);
    CHECK(edge_param_counts(g, q).lm_head == 128 * g.hidden);
    CHECK(edge_param_counts(g).embedding == 100 * g.hidden);  // the model's own count is unpadded
    const ParamLayout L = param_layout(g, q, 0);
    for (const char* name : {"word_embedding.weight", "lm_head.weight"}) {
        const ParamEntry* e = L.find(name);
        REQUIRE(e != nullptr);
        CHECK(e->full_rows == 128);
        CHECK(e->rows == 64);
    }
    const Program prog = lower(g, strata::test::cluster(2), q);
    int head_gemms = 0;
    for (const Instr& in : prog.ranks[0].instrs)
        if (in.kind == InstrKind::compute && in.op == Op::gemm && prog.names[static_cast<std::size_t>(in.name)] == "logits") {
            ++head_gemms;
            CHECK((in.m == 64 || in.n == 64 || in.k == 64));  // forward, dgrad and wgrad each span the rank's 64 rows
            CHECK(in.flops == Approx(2.0 * 32 * 64 * g.hidden));
        }
    CHECK(head_gemms == 3 * 2);  // two micro-batches of one sequence
    // The model's FLOPs (MFU's numerator) stay the unpadded vocabulary's: the same as on one GPU,
    // where 100 rows need no padding.
    const Program one = lower(g, strata::test::cluster(1), strata::test::plan(1, 1, 1, 2));
    CHECK(prog.model_flops_per_step == Approx(one.model_flops_per_step).epsilon(1e-12));
}
