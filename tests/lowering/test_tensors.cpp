// The tensor list (tensors.hpp) against Korthikanti et al. (MLSys 2023) activation formulas on the
// paper's own model configurations, and model states against the ZeRO paper's worked example
// (Rajbhandari et al., SC20, §3 / Figure 1).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/tensors.hpp"
#include "support/gpt.hpp"

using namespace strata::sim;

namespace {

ModelSpec gpt(int layers, std::int64_t h, int heads, std::int64_t seq = 2048) {
    ModelSpec m;
    m.name = "gpt";
    m.layers = layers;
    m.hidden = h;
    m.heads = heads;
    m.kv_heads = heads;
    m.head_dim = h / heads;
    m.ffn_hidden = 4 * h;
    m.vocab = 51200;
    m.seq_len = seq;
    m.max_position = seq;
    m.tied_embeddings = true;
    m.linear_bias = true;
    m.dropout = 0.1;
    return m;
}

PlanSpec korthikanti_plan(int t, bool sp, Recompute r) {
    PlanSpec p;
    p.tp = t;
    p.sequence_parallel = sp;
    p.recompute = r;
    p.flash_attention = false;
    p.micro_batch = 1;
    return p;
}

double sum(const std::vector<TensorDesc>& v) {
    double b = 0;
    for (const auto& d : v) b += d.bytes;
    return b;
}

std::map<std::string, double> by_name(const std::vector<TensorDesc>& v) {
    std::map<std::string, double> out;
    for (const auto& d : v) out[d.name] += d.bytes;
    return out;
}

double states(const ModelSpec& m, const PlanSpec& p, int stage) { return sum(stage_model_states(m, p, stage)); }

}  // namespace

TEST_CASE("Korthikanti et al. per-layer activations on the paper's models", "[tensors]") {
    // Their Table 3 configurations (s = 2048, t = 8, b = 1): 22B (h 6144, a 64), 175B (12288, 96),
    // 530B (20480, 128), 1T (25600, 160). Eqs. 1-5 (2-byte activations, 1-byte masks):
    //   no parallelism          sbh(34 + 5as/h)
    //   TP t                    sbh(10 + 24/t + 5as/(ht))
    //   TP t + SP               sbh/t (34 + 5as/h)
    //   TP + SP + selective     34 sbh/t
    //   full recompute (SP)     2sbh/t
    // e.g. GPT-3 175B: sbh = 2048·12288 = 25,165,824; 5as/h = 5·96·2048/12288 = 80, so no
    // parallelism gives 25,165,824 · 114 = 2,868,903,936 bytes per layer.
    struct Cfg { std::int64_t h; int a; };
    for (Cfg c : {Cfg{6144, 64}, Cfg{12288, 96}, Cfg{20480, 128}, Cfg{25600, 160}}) {
        ModelSpec m = gpt(1, c.h, c.a);
        const double s = 2048, b = 1, h = static_cast<double>(c.h), a = c.a, t = 8;
        const double sbh = s * b * h;
        CHECK(sum(layer_activations(m, korthikanti_plan(1, false, Recompute::none), 0, false)) ==
              Approx(sbh * (34 + 5 * a * s / h)));
        CHECK(sum(layer_activations(m, korthikanti_plan(8, false, Recompute::none), 0, false)) ==
              Approx(sbh * (10 + 24 / t + 5 * a * s / (h * t))));
        CHECK(sum(layer_activations(m, korthikanti_plan(8, true, Recompute::none), 0, false)) ==
              Approx(sbh / t * (34 + 5 * a * s / h)));
        CHECK(sum(layer_activations(m, korthikanti_plan(8, true, Recompute::selective), 0, false)) ==
              Approx(34 * sbh / t));
        CHECK(sum(layer_activations(m, korthikanti_plan(8, true, Recompute::full), 0, true)) == Approx(2 * sbh / t));
        CHECK(sum(layer_activations(m, korthikanti_plan(8, false, Recompute::full), 0, true)) == Approx(2 * sbh));
    }
    // The paper's headline number, by hand: 175B, t = 8, SP + selective: 34·25,165,824/8 =
    // 106,954,752 bytes per layer per micro-batch.
    CHECK(sum(layer_activations(gpt(1, 12288, 96), korthikanti_plan(8, true, Recompute::selective), 0, false)) ==
          Approx(106'954'752.0));
}

TEST_CASE("Itemised tensors of a GPT layer", "[tensors]") {
    ModelSpec m = gpt(1, 1024, 16, 512);
    auto n = by_name(layer_activations(m, korthikanti_plan(1, false, Recompute::none), 0, false));
    const double sbh = 512.0 * 1024, as2b = 16.0 * 512 * 512;
    CHECK(n["attn.q"] + n["attn.k"] == Approx(4 * sbh));
    CHECK(n["attn.v"] == Approx(2 * sbh));
    CHECK(n["attn.softmax_out"] == Approx(2 * as2b));
    CHECK(n["attn.softmax_dropout_mask"] == Approx(as2b));
    CHECK(n["attn.softmax_dropout_out"] == Approx(2 * as2b));
    CHECK(n["mlp.fc1_out"] == Approx(8 * sbh));
    CHECK(n["mlp.act_out"] == Approx(8 * sbh));
    CHECK(n["attn.dropout_mask"] == Approx(sbh));
    CHECK(n["attn.norm_in"] + n["mlp.norm_in"] == Approx(4 * sbh));
}

TEST_CASE("Variants: no dropout, flash attention, GQA, SwiGLU, CP, MoE", "[tensors]") {
    ModelSpec m = gpt(1, 1024, 16, 512);
    const double s = 512, h = 1024, a = 16, sbh = s * h;
    PlanSpec p = korthikanti_plan(1, false, Recompute::none);

    // No dropout: no masks and no dropout output: 34 - 2 masks = 32 sbh, and 2as² for softmax.
    ModelSpec nd = m;
    nd.dropout = 0;
    CHECK(sum(layer_activations(nd, p, 0, false)) == Approx(32 * sbh + 2 * a * s * s));

    // Flash attention (no dropout): the s² terms become the fp32 log-sum-exp, 4·a·s·b bytes.
    PlanSpec pf = p;
    pf.flash_attention = true;
    CHECK(sum(layer_activations(nd, pf, 0, false)) == Approx(32 * sbh + 4 * a * s));

    // FP8 (Transformer Engine): the four GEMM inputs saved for the weight gradients are FP8 casts,
    // 1 byte instead of 2: QKV input sbh, projection input sbh, fc1 input sbh, fc2 input 4sbh
    // (ffn = 4h), so 7 sbh fewer bytes than BF16's 32 sbh; but the fused attention's backward
    // reads its output O, which it keeps in bf16 beside the projection's cast: 2 sbh more, 27 sbh.
    PlanSpec p8 = pf;
    p8.precision = Precision::fp8;
    CHECK(sum(layer_activations(nd, p8, 0, false)) == Approx(27 * sbh + 4 * a * s));
    // Unfused attention keeps the probabilities for its backward, not O: the cast alone, 25 sbh.
    PlanSpec p8u = p8;
    p8u.flash_attention = false;
    CHECK(sum(layer_activations(nd, p8u, 0, false)) == Approx(25 * sbh + 2 * a * s * s));
    // ReLU under FP8: its backward reads its 16-bit output, and fc2 keeps its cast besides, 4 sbh
    // more than the cast alone (from bf16's ReLU, 24 sbh, below: -3 sbh for the three other casts,
    // +2 sbh for O, +4 sbh for the ReLU output's cast: 27 sbh).
    ModelSpec r8 = nd;
    r8.ffn = FfnKind::relu;
    CHECK(sum(layer_activations(r8, p8, 0, false)) == Approx(27 * sbh + 4 * a * s));

    // ReLU (OPT): its backward reads its output, which fc2 keeps as its input, so the GeLU input's
    // 2·s·4h = 8 sbh bytes go: 32 - 8 = 24 sbh.
    ModelSpec r = nd;
    r.ffn = FfnKind::relu;
    CHECK(sum(layer_activations(r, pf, 0, false)) == Approx(24 * sbh + 4 * a * s));
    CHECK(by_name(layer_activations(r, pf, 0, false)).count("mlp.fc1_out") == 0);

    // GQA with 4 KV heads of 64: K and V shrink to 4/16 of Q's 2sbh each.
    ModelSpec g = nd;
    g.kv_heads = 4;
    auto gn = by_name(layer_activations(g, pf, 0, false));
    CHECK(gn["attn.k"] == Approx(2 * sbh / 4));
    CHECK(gn["attn.v"] == Approx(2 * sbh / 4));
    CHECK(gn["attn.q"] == Approx(2 * sbh));

    // SwiGLU: gate and up (the fused activation's input) and the product (fc2 input), each
    // 2·s·ffn bytes; silu(gate) is recomputed, not stored. Rest of the layer: norm inputs, QKV and
    // MLP inputs, Q, K, V, projection input = 8 x 2sbh, plus the log-sum-exp.
    ModelSpec sw = nd;
    sw.ffn = FfnKind::swiglu;
    sw.ffn_hidden = 2816;
    auto sn = by_name(layer_activations(sw, pf, 0, false));
    for (const char* k : {"mlp.gate_out", "mlp.up_out", "mlp.act_out"}) CHECK(sn[k] == Approx(2 * s * 2816));
    CHECK(sn.count("mlp.silu_out") == 0);
    CHECK(sum(layer_activations(sw, pf, 0, false)) == Approx(16 * sbh + 4 * a * s + 3 * 2 * s * 2816));

    // CP = 2 halves every per-token tensor and the query rows of the score matrix.
    PlanSpec pc = p;
    pc.cp = 2;
    CHECK(sum(layer_activations(m, pc, 0, false)) == Approx(sum(layer_activations(m, p, 0, false)) / 2));

    // MoE, top-2 of 8 experts, uniform load: each rank's experts process tokens·top_k rows;
    // load_skew 0.5 makes the hottest rank see 1.5x.
    ModelSpec moe = nd;
    MoeSpec ms;
    ms.experts = 8;
    ms.top_k = 2;
    moe.moe = ms;
    PlanSpec pe = pf;
    pe.ep = 4;
    auto mn = by_name(layer_activations(moe, pe, 0, false));
    CHECK(mn["moe.dispatched_in"] == Approx(2 * (s * 2) * h));
    CHECK(mn["moe.experts.fc1_out"] == Approx(2 * (s * 2) * 4096));
    moe.moe->load_skew = 0.5;
    auto mk = by_name(layer_activations(moe, pe, 0, false));
    CHECK(mk["moe.experts.fc1_out"] == Approx(1.5 * mn["moe.experts.fc1_out"]));
    // The router's weights applied at the un-permute (fc2_output): the combined expert outputs
    // are kept on the tokens' rank, s·top_k rows of h whatever the skew; under TP 2 with SP the
    // rank's own s/2 tokens (the experts' rows are gathered over TP, the kept outputs are not).
    PlanSpec po = pe;
    po.moe_probs_at = MoeProbsAt::fc2_output;
    CHECK(by_name(layer_activations(moe, po, 0, false))["moe.expert_out"] == Approx(2 * (s * 2) * h));
    po.tp = 2;
    po.sequence_parallel = true;
    auto mt = by_name(layer_activations(moe, po, 0, false));
    CHECK(mt["moe.expert_out"] == Approx(2 * (s / 2 * 2) * h));
    CHECK(mt["moe.dispatched_in"] == Approx(1.5 * 2 * (s * 2) * h));  // gathered (both TP ranks' rows) and skewed
}

TEST_CASE("QK-norm keeps the pre-norm query and key; its weights are replicated over TP", "[tensors]") {
    // Qwen3-30B-A3B's attention (config.json): h 2048, 32 query heads and 4 key/value heads of 128,
    // RMSNorm. Each head's query and key pass an RMSNorm over head_dim before RoPE; its backward
    // needs its input, so a layer keeps 2·s·b·(a + k_v)·d bytes more: at s 4096, b 1, TP 1,
    // 2·4096·36·128 = 37,748,736 bytes; over TP 4 with SP, (a/4 + k_v/4) heads per rank.
    ModelSpec m = gpt(1, 2048, 32, 4096);
    m.kv_heads = 4;
    m.head_dim = 128;
    m.norm = NormKind::rmsnorm;
    m.dropout = 0;
    m.linear_bias = false;
    PlanSpec p = korthikanti_plan(1, false, Recompute::none);
    p.flash_attention = true;
    ModelSpec q = m;
    q.qk_norm = true;
    auto n = by_name(layer_activations(q, p, 0, false));
    CHECK(n["attn.q_norm_in"] == Approx(2.0 * 4096 * 32 * 128));
    CHECK(n["attn.k_norm_in"] == Approx(2.0 * 4096 * 4 * 128));
    CHECK(sum(layer_activations(q, p, 0, false)) - sum(layer_activations(m, p, 0, false)) == Approx(37'748'736.0));
    PlanSpec t4 = p;
    t4.tp = 4;
    t4.sequence_parallel = true;
    CHECK(sum(layer_activations(q, t4, 0, false)) - sum(layer_activations(m, t4, 0, false)) == Approx(2.0 * 4096 * (8 + 1) * 128));
    // Full recomputation keeps only the layer input, with or without the norms.
    PlanSpec fr = p;
    fr.recompute = Recompute::full;
    CHECK(sum(layer_activations(q, fr, 0, true)) == Approx(sum(layer_activations(m, fr, 0, true))));
    // Weights: one head_dim-wide RMSNorm for the queries, one for the keys (2·128 per layer), on
    // every TP rank.
    CHECK(layer_params(q, 0).attention - layer_params(m, 0).attention == 256);
    CHECK(stage_params(q, t4, 0).dense - stage_params(m, t4, 0).dense == Approx(256));
}

// A stand-in with exactly 7.5e9 parameters (only the count matters to model states): no layers,
// a tied (7,499,999 x 1000) embedding and a 1000-wide RMSNorm.
static ModelSpec zero_paper_stand_in() {
    ModelSpec m;
    m.layers = 0;
    m.hidden = 1000;
    m.heads = 1;
    m.vocab = 7'499'999;
    m.seq_len = 1;
    m.norm = NormKind::rmsnorm;
    m.position = PositionKind::rope;
    m.tied_embeddings = true;
    return m;
}

TEST_CASE("ZeRO paper example: 7.5B parameters, Nd = 64, K = 12", "[tensors]") {
    const ModelSpec m = zero_paper_stand_in();
    PlanSpec p;
    p.dp = 64;
    REQUIRE(stage_params(m, p, 0).total() == Approx(7.5e9));
    // Rajbhandari et al. Fig. 1: 120 GB, 31.4 GB, 16.6 GB, 1.88 GB per device.
    const double expect[4] = {120e9, 4 * 7.5e9 + 12 * 7.5e9 / 64, 2 * 7.5e9 + 14 * 7.5e9 / 64, 16 * 7.5e9 / 64};
    for (int z = 0; z < 4; ++z) {
        p.zero_stage = z;
        CHECK(states(m, p, 0) == Approx(expect[z]));
    }
    CHECK(expect[1] == Approx(31.4e9).epsilon(0.001));
    CHECK(expect[2] == Approx(16.6e9).epsilon(0.003));
    CHECK(expect[3] == Approx(1.88e9).epsilon(0.003));
}

TEST_CASE("Precision-aware optimizer: bf16 moments take K from 12 to 8 bytes", "[tensors]") {
    // The same 7.5B stand-in as above. Megatron's --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16
    // keeps the fp32 master copy (4 bytes) and halves m and v (2 + 2): K = 8, so ZeRO-1's
    // per-device states are 4 Psi + 8 Psi / Nd.
    const ModelSpec m = zero_paper_stand_in();
    PlanSpec p;
    p.dp = 64;
    p.zero_stage = 1;
    p.exp_avg_dtype = Precision::bf16;
    p.exp_avg_sq_dtype = Precision::bf16;
    CHECK(p.adam_moment_bytes() == 4.0);
    // A fused AdamW's traffic a parameter, by hand: fp32 master read + written (8), bf16 weights
    // written (2), the bf16 gradient read (2), the bf16 moments read + written (2 x 4).
    CHECK(p.adam_gpu_bytes_per_param() == 8.0 + 2.0 + 2.0 + 8.0);
    PlanSpec f;
    f.precision = Precision::fp32;  // the weights are their own master: 8 + 4 + 16
    CHECK(f.adam_gpu_bytes_per_param() == 28.0);
    CHECK(states(m, p, 0) == Approx(4 * 7.5e9 + 8 * 7.5e9 / 64));
    auto st = by_name(stage_model_states(m, p, 0));
    CHECK(st["optimizer.master"] == Approx(4 * 7.5e9 / 64));
    CHECK(st["optimizer.m"] == Approx(2 * 7.5e9 / 64));
    // FP8 second moment alone: 4 + 2 + 1.
    p.exp_avg_sq_dtype = Precision::fp8;
    CHECK(states(m, p, 0) == Approx(4 * 7.5e9 + 7 * 7.5e9 / 64));
}

TEST_CASE("Stage parameters add up to the model", "[tensors]") {
    ModelSpec m = gpt(24, 2048, 16);
    m.tied_embeddings = false;
    PlanSpec p;
    p.pp = 4;
    double total = 0;
    for (int s = 0; s < 4; ++s) total += stage_params(m, p, s).total();
    CHECK(total == Approx(static_cast<double>(param_counts(m).total)));
    // Tied with pp > 1: the last stage keeps a copy of the word embedding.
    m.tied_embeddings = true;
    total = 0;
    for (int s = 0; s < 4; ++s) total += stage_params(m, p, s).total();
    CHECK(total == Approx(static_cast<double>(param_counts(m).total + param_counts(m).embedding)));

    // Experts are sharded over ep; their ZeRO sharding is over dp·cp/ep.
    ModelSpec e = gpt(2, 1024, 16);
    e.moe = strata::test::moe_spec(8, 2);
    PlanSpec pe;
    pe.ep = 4;
    pe.dp = 8;
    StageParams sp = stage_params(e, pe, 0);
    CHECK(sp.expert == Approx(static_cast<double>(param_counts(e).experts) / 4));
    pe.zero_stage = 1;
    auto st = by_name(stage_model_states(e, pe, 0));
    CHECK(st["optimizer.m"] == Approx(4 * (sp.dense / 8 + sp.expert / 2)));
}

TEST_CASE("ZeRO stages never increase model states", "[tensors]") {
    ModelSpec m = gpt(8, 4096, 32);
    PlanSpec p;
    p.dp = 16;
    p.tp = 2;
    double prev = 1e300;
    for (int z = 0; z <= 3; ++z) {
        p.zero_stage = z;
        const double s = states(m, p, 0);
        CHECK(s < prev);
        prev = s;
    }
    // Without data parallelism there is nothing to shard.
    p.dp = 1;
    p.zero_stage = 0;
    const double z0 = states(m, p, 0);
    p.zero_stage = 3;
    CHECK(states(m, p, 0) == Approx(z0));
}

TEST_CASE("Buffers: buckets, ZeRO-3 gathers, p2p, reserve", "[tensors]") {
    ModelSpec m = gpt(8, 4096, 32);
    PlanSpec p;
    p.dp = 4;
    p.pp = 2;
    auto b = by_name(stage_buffers(m, p, 0));
    CHECK(b["dp.grad_buckets"] == Approx(2 * 40e6));
    CHECK(b["pp.p2p"] == Approx(2 * 2 * 2048.0 * 4096));
    CHECK(b["framework.reserve"] == Approx(kFrameworkReserveBytes));
    CHECK(b.count("zero3.gathered_params") == 0);
    p.zero_stage = 3;
    p.pp = 1;
    auto b3 = by_name(stage_buffers(m, p, 0));
    // Two layers of 12h² + 13h parameters in bf16.
    CHECK(b3["zero3.gathered_params"] == Approx(2 * 2 * (12.0 * 4096 * 4096 + 13 * 4096)));
    // The edges stay gathered all step (FSDP's root module): the tied word embedding (51200 x h),
    // the learned positions (2048 x h) and the final LayerNorm (2h), in bf16.
    CHECK(b3["zero3.gathered_edges"] == Approx(2 * (51200.0 * 4096 + 2048.0 * 4096 + 2 * 4096)));
    CHECK(b.count("zero3.gathered_edges") == 0);
    // Under a pipeline (FSDP, PlanSpec::pipelined_fsdp) stage 0 holds its 4 layers, the word
    // embedding (51200 x h) and the learned positions (2048 x h) gathered for the whole step;
    // its gradients are not sharded (compare ZeRO-2 on the same stage).
    p.pp = 2;
    auto bp = by_name(stage_buffers(m, p, 0));
    const double h = 4096;
    CHECK(bp["zero3.gathered_params"] == Approx(2 * (4 * (12.0 * h * h + 13 * h) + 51200 * h + 2048 * h)));
    CHECK(bp.count("zero3.gathered_edges") == 0);  // counted in the whole stage's
    PlanSpec z2 = p;
    z2.zero_stage = 2;
    const auto s3 = by_name(stage_model_states(m, p, 0)), s2 = by_name(stage_model_states(m, z2, 0));
    CHECK(s3.at("grads") == Approx(4 * s2.at("grads")));  // dp 4: unsharded against a quarter
    CHECK(s3.at("weights") == Approx(s2.at("weights") / 4));
}

TEST_CASE("Embedding, logits, capacity factor, shared experts, workspace", "[tensors]") {
    ModelSpec m = gpt(2, 1024, 16, 512);
    PlanSpec p = korthikanti_plan(4, true, Recompute::none);
    const double s = 512, h = 1024, t = 4;
    // Korthikanti §4.3: embedding dropout mask sbh/t (SP); output side 2sbh/t + 2sbh/t and the
    // fp32 logits 4sbV/t.
    CHECK(sum(embedding_activations(m, p)) == Approx(s * h / t));
    CHECK(sum(logits_activations(m, p)) == Approx(4 * s * h / t + 4 * s * 51200 / t));
    ModelSpec nd = m;
    nd.dropout = 0;
    CHECK(embedding_activations(nd, p).empty());

    // Capacity factor 1.25, top-2: the experts are padded to 1.25·tokens·2 rows (load skew is
    // then irrelevant); one shared expert adds a dense MLP of the expert width over all tokens.
    ModelSpec e = nd;
    e.moe = strata::test::moe_spec(8, 2);
    e.moe->capacity_factor = 1.25;
    e.moe->load_skew = 3.0;
    e.moe->shared_experts = 1;
    e.moe->expert_ffn_hidden = 1408;
    auto n = by_name(layer_activations(e, p, 0, false));
    CHECK(n["moe.dispatched_in"] == Approx(2 * 1.25 * s * 2 * h));
    CHECK(n["moe.experts.fc1_out"] == Approx(2 * 1.25 * s * 2 * 1408 / t));
    CHECK(n["moe.shared.fc1_out"] == Approx(2 * s * 1408 / t));
    CHECK(n["moe.router_probs"] == Approx(4 * s / t * 8));

    // Workspace of a fully recomputed layer: the whole non-recomputed list again and two
    // hidden-state gradients 2·(2sbh), with the widest gradient of the pass. The MLP's backward
    // comes first, beside everything; attention's after the MLP's tensors are freed. Here the
    // unfused score matrix (b·a/t·s² in bf16: 2 MiB) is attention's widest, the fc1 output
    // (2·s·b·4h/t: 1 MiB) the MLP's, and the MLP's list holds more than the 1 MiB between them:
    // the MLP's phase is the peak, with the fc1 output's gradient.
    const auto list = layer_activations(m, p, 0, false);
    double full = 0, widest = 0, widest_attn = 0, widest_mlp = 0, attn = 0;
    for (const auto& d : list) {
        full += d.bytes;
        widest = std::max(widest, d.bytes);
        if (d.name.rfind("attn.", 0) == 0) widest_attn = std::max(widest_attn, d.bytes), attn += d.bytes;
        else widest_mlp = std::max(widest_mlp, d.bytes);
    }
    CHECK(widest_attn == Approx(2 * (16 / t) * s * s));
    CHECK(widest_mlp == Approx(2 * s * 4 * h / t));
    CHECK(full - attn > widest_attn - widest_mlp);
    CHECK(sum(layer_backward_workspace(m, p, 0, true)) == Approx(full + widest_mlp + 2 * 2 * s * h));
    // Without recompute only the gradients: the MLP's widest, since attention's (the score
    // matrix's) comes after the backward has freed the MLP's tensors, which outweigh the two
    // widest's difference (above).
    CHECK(sum(layer_backward_workspace(m, p, 0, false)) == Approx(widest_mlp + 2 * 2 * s * h));
    // At 4096 tokens the score matrix (128 MiB) outgrows the MLP's whole list (8 x 2.6 MiB): the
    // attention phase is the peak, attention's tensors and their widest gradient.
    ModelSpec lm = m;
    lm.seq_len = lm.max_position = 4096;
    double lattn = 0, lwidest = 0;
    for (const auto& d : layer_activations(lm, p, 0, false))
        if (d.name.rfind("attn.", 0) == 0) lattn += d.bytes, lwidest = std::max(lwidest, d.bytes);
    CHECK(lwidest == Approx(2 * (16 / t) * 4096.0 * 4096.0));
    CHECK(sum(layer_backward_workspace(lm, p, 0, true)) == Approx(lattn + lwidest + 2 * 2 * 4096.0 * h));
    // Without recompute the score matrix's gradient is the widest, beside the stash less the MLP's
    // freed tensors (the stash is counted apart): the workspace is that gradient less them.
    double lmlp = 0;
    for (const auto& d : layer_activations(lm, p, 0, false))
        if (d.name.rfind("attn.", 0) != 0) lmlp += d.bytes;
    CHECK(lwidest - lmlp > 2 * 4096.0 * 4 * h / t);  // wider than the MLP's widest even so
    CHECK(sum(layer_backward_workspace(lm, p, 0, false)) == Approx(lwidest - lmlp + 2 * 2 * 4096.0 * h));
}

TEST_CASE("ZeRO-Offload's gradients are held once on the host", "[tensors][offload]") {
    // ZeRO-2 over 8 ranks with the optimizer in host memory: the update reads a host copy of the
    // rank's gradient partition (grads.host), copied from the GPU's kept shard. With the gradients
    // homed on the host too (offload.grads cpu, DeepSpeed's CPU gradient partition) that partition
    // is the host copy, none on the GPU. Until stop 56 both were counted, the host's gradients
    // twice. The partition is fp32 (stage2.py's initialize_optimizer_states pins an fp32 .grad for
    // each fp32 partition; the copies down cast with .float()): P / 8 x 4 bytes since stop 66.
    ModelSpec m = gpt(8, 2048, 16);
    PlanSpec p;
    p.dp = 8;
    p.zero_stage = 2;
    p.precision = Precision::bf16;
    p.offload.optimizer = TierSplit{0, 1, 0};
    const double P = stage_params(m, p, 0).total();
    auto grads_on = [&](const PlanSpec& q, bool host) {
        double b = 0;
        for (const TensorDesc& d : stage_model_states(m, q, 0))
            if (d.tag == TensorTag::grads) b += d.bytes * (host ? d.tiers.cpu : d.tiers.gpu);
        return b;
    };
    REQUIRE(p.grad_bytes() == 2.0);
    CHECK(grads_on(p, false) == Approx(2 * P / 8));  // the GPU's shard ...
    CHECK(grads_on(p, true) == Approx(2 * P / 8));   // ... copied down for the update
    p.offload.grads = TierSplit{0, 1, 0};
    CHECK(grads_on(p, false) == 0);
    CHECK(grads_on(p, true) == Approx(4 * P / 8));
    // Half the gradients homed on the host: the other half still needs its host copy.
    p.offload.grads = TierSplit{0.5, 0.5, 0};
    CHECK(grads_on(p, false) == Approx(P / 8));
    CHECK(grads_on(p, true) == Approx(2 * P / 8));
}
