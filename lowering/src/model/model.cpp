// Parameter and FLOP counting for ModelSpec (model.hpp). Counts matmul FLOPs exactly as 2·m·n·k
// and estimates the non-matmul work separately ("other"), so that the matmul part can be checked
// against Megatron-LM's closed forms and the rest stays visible. Does not know about parallelism,
// but for the padded vocabulary a rank's tables hold (padded_vocab).
#include "strata/lowering/model.hpp"

#include <algorithm>
#include <string_view>

namespace strata::sim {

std::int64_t head_dim_of(const ModelSpec& m) {
    if (m.head_dim > 0) return m.head_dim;
    return m.heads > 0 ? m.hidden / m.heads : 0;
}
int kv_heads_of(const ModelSpec& m) { return m.kv_heads > 0 ? m.kv_heads : m.heads; }
std::int64_t q_width(const ModelSpec& m) { return static_cast<std::int64_t>(m.heads) * head_dim_of(m); }
std::int64_t kv_width(const ModelSpec& m) { return static_cast<std::int64_t>(kv_heads_of(m)) * head_dim_of(m); }
std::int64_t qk_head_dim_of(const ModelSpec& m) {
    return m.mla ? m.mla->qk_nope_head_dim + m.mla->qk_rope_head_dim : head_dim_of(m);
}
std::int64_t v_head_dim_of(const ModelSpec& m) { return m.mla ? m.mla->v_head_dim : head_dim_of(m); }

std::vector<AttentionLinear> attention_linears(const ModelSpec& m) {
    const std::int64_t h = m.hidden, heads = m.heads;
    if (!m.mla) return {{"qkv", h, q_width(m) + 2 * kv_width(m), true, false}, {"proj", q_width(m), h, true, true}};
    const MlaSpec& a = *m.mla;
    std::vector<AttentionLinear> v;
    if (a.q_lora_rank > 0) v.push_back({"q_down", h, a.q_lora_rank, false, true});
    v.push_back({"kv_down", h, a.kv_lora_rank + a.qk_rope_head_dim, false, true});
    if (a.q_lora_rank > 0) v.push_back({"q_up", a.q_lora_rank, heads * (a.qk_nope_head_dim + a.qk_rope_head_dim), true, false});
    else v.push_back({"q", h, heads * (a.qk_nope_head_dim + a.qk_rope_head_dim), true, true});
    v.push_back({"kv_up", a.kv_lora_rank, heads * (a.qk_nope_head_dim + a.v_head_dim), true, false});
    v.push_back({"proj", heads * a.v_head_dim, h, true, true});
    return v;
}

std::int64_t attention_norm_params(const ModelSpec& m) {
    const std::int64_t per = m.norm == NormKind::layernorm ? 2 : 1;
    if (m.mla) return per * (m.mla->q_lora_rank + m.mla->kv_lora_rank);
    return m.qk_norm ? per * 2 * head_dim_of(m) : 0;
}

std::int64_t expert_ffn_of(const ModelSpec& m) {
    if (m.moe && m.moe->expert_ffn_hidden > 0) return m.moe->expert_ffn_hidden;
    return m.ffn_hidden;
}

namespace {

std::int64_t norm_params(const ModelSpec& m) { return m.norm == NormKind::layernorm ? 2 * m.hidden : m.hidden; }

// One MLP of width `ffn`: gelu = fc1 (h->ffn) + fc2 (ffn->h); swiglu/geglu = gate + up (h->ffn) + down.
std::int64_t mlp_params(const ModelSpec& m, std::int64_t ffn) {
    const std::int64_t h = m.hidden;
    if (gated(m.ffn)) return 3 * h * ffn + (m.linear_bias ? 2 * ffn + h : 0);
    return 2 * h * ffn + (m.linear_bias ? ffn + h : 0);
}
// Matmul flops per token of one MLP of width ffn (2 flops per multiply-add).
double mlp_flops_per_token(const ModelSpec& m, std::int64_t ffn) {
    const double mats = gated(m.ffn) ? 3.0 : 2.0;
    return 2.0 * mats * static_cast<double>(m.hidden) * static_cast<double>(ffn);
}
// Non-matmul flops per token of one MLP: the activation (gelu tanh form ~8 flops/element; SiLU
// then the gating product ~5; GeGLU the GELU then the product ~9; squared ReLU a max and a
// square; ReLU a max) and bias adds.
double mlp_other_per_token(const ModelSpec& m, std::int64_t ffn) {
    const double f = static_cast<double>(ffn);
    double act = m.ffn == FfnKind::swiglu ? 5.0 * f
                 : m.ffn == FfnKind::geglu ? 9.0 * f
                 : m.ffn == FfnKind::relu2 ? 2.0 * f
                 : m.ffn == FfnKind::relu  ? f
                                           : 8.0 * f;
    double bias = m.linear_bias ? (gated(m.ffn) ? 2.0 * f : f) + static_cast<double>(m.hidden) : 0.0;
    return act + bias;
}

}  // namespace

LayerParams layer_params(const ModelSpec& m, int layer) {
    LayerParams p;
    const std::int64_t h = m.hidden, qw = q_width(m), kvw = kv_width(m);
    // MHA/GQA: Q (h x qw), K and V (h x kvw each), output projection (qw x h); MLA: its five
    // projections and two latent norms.
    for (const AttentionLinear& a : attention_linears(m)) p.attention += a.in * a.out;
    p.attention += attention_norm_params(m);
    if (m.linear_bias) p.attention += qw + 2 * kvw + h;
    else if (m.qkv_bias) p.attention += qw + 2 * kvw;
    p.norms = 2 * norm_params(m);
    if (m.layer_is_moe(layer)) {
        const std::int64_t eff = expert_ffn_of(m);
        // NeMo AutoModel's FakeBalancedGate (round_robin) has no parameters.
        p.router = m.moe->has_router() ? h * m.moe->experts : 0;
        p.expert_one = mlp_params(m, eff);
        p.experts = p.expert_one * m.moe->experts;
        p.shared_experts = p.expert_one * m.moe->shared_experts;
    } else {
        p.mlp = mlp_params(m, m.ffn_hidden);
    }
    return p;
}

std::int64_t mtp_extra_params(const ModelSpec& m) { return 2 * m.hidden * m.hidden + 3 * norm_params(m); }

ParamCounts edge_param_counts(const ModelSpec& m) {
    ParamCounts c;
    c.embedding = m.vocab * m.hidden;
    if (m.position == PositionKind::learned) c.position = (m.max_position > 0 ? m.max_position : m.seq_len) * m.hidden;
    c.final_norm = norm_params(m);
    c.lm_head = m.tied_embeddings ? 0 : m.vocab * m.hidden;
    return c;
}

ParamCounts edge_param_counts(const ModelSpec& m, const PlanSpec& p) {
    ParamCounts c = edge_param_counts(m);
    const std::int64_t rows = padded_vocab(m, p);
    c.embedding = rows * m.hidden;
    if (!m.tied_embeddings) c.lm_head = rows * m.hidden;
    return c;
}

std::int64_t padded_vocab(const ModelSpec& m, const PlanSpec& p) {
    const std::int64_t multiple = static_cast<std::int64_t>(std::max(1, p.vocab_divisible_by)) * std::max(1, p.tp);
    return (m.vocab + multiple - 1) / multiple * multiple;
}

ParamCounts param_counts(const ModelSpec& m) {
    ParamCounts c = edge_param_counts(m);
    std::int64_t active_layers = 0;
    for (int l = 0; l < m.layers; ++l) {
        LayerParams lp = layer_params(m, l);
        c.attention += lp.attention;
        c.mlp += lp.mlp;
        c.norms += lp.norms;
        c.router += lp.router;
        c.experts += lp.experts;
        c.shared_experts += lp.shared_experts;
        c.layers += lp.total();
        active_layers += lp.total() - lp.experts + (lp.experts > 0 ? lp.expert_one * m.moe->top_k : 0);
    }
    std::int64_t active_mtp = 0;
    if (m.mtp_depth > 0 && m.layers > 0) {
        const LayerParams lp = layer_params(m, mtp_layer_kind(m));
        const std::int64_t extra = mtp_extra_params(m);
        c.mtp = m.mtp_depth * (lp.total() + extra);
        active_mtp = m.mtp_depth * (lp.total() - lp.experts + (lp.experts > 0 ? lp.expert_one * m.moe->top_k : 0) + extra);
    }
    c.total = c.embedding + c.position + c.layers + c.final_norm + c.lm_head + c.mtp;
    c.active = c.embedding + c.position + active_layers + c.final_norm + c.lm_head + active_mtp;
    return c;
}

double attention_flops(const ModelSpec& m, std::int64_t seq, bool causal_halved) {
    // QK^T: (s x d) by (d x s) per head = 2·s²·d flops; PV the same. Causal kernels skip the upper
    // triangle: s(s+1)/2 of the s² scores; we use s²/2 (the diagonal is negligible).
    const double s = static_cast<double>(seq);
    const double full = 2.0 * s * s * static_cast<double>(m.heads) * static_cast<double>(qk_head_dim_of(m) + v_head_dim_of(m));
    return causal_halved ? full / 2.0 : full;
}

double window_fraction(const ModelSpec& m, int layer) {
    // A causal window of w keys (the query's own included) over s positions: s w - w (w - 1) / 2
    // scores, against s (s + 1) / 2 (counted s^2 / 2) for the whole context; Megatron-Bridge's
    // flop count (calculate_swa_context: w - w (w - 1) / 2s per query, against s / 2).
    const double w = static_cast<double>(m.window_of(layer)), s = static_cast<double>(m.seq_len);
    if (w <= 0 || s <= 0) return 1.0;
    return std::min(1.0, (2.0 * w - w * (w - 1.0) / s) / s);
}

LayerFlops layer_forward_flops(const ModelSpec& m, int layer, double seqs, bool causal_halved) {
    LayerFlops f;
    const double h = static_cast<double>(m.hidden), qw = static_cast<double>(q_width(m));
    const double kvw = static_cast<double>(kv_width(m));
    const double tokens = seqs * static_cast<double>(m.seq_len);
    const std::vector<AttentionLinear> lin = attention_linears(m);
    for (std::size_t i = 0; i + 1 < lin.size(); ++i) f.qkv += 2.0 * tokens * static_cast<double>(lin[i].in) * static_cast<double>(lin[i].out);
    const double windowed = window_fraction(m, layer);
    f.attention = seqs * attention_flops(m, m.seq_len, causal_halved) * windowed;
    f.proj = 2.0 * tokens * static_cast<double>(lin.back().in) * h;
    double other_per_token = 0;
    if (m.layer_is_moe(layer)) {
        const auto& moe = *m.moe;
        const std::int64_t eff = expert_ffn_of(m);
        // A round-robin gate computes no scores: no GEMM, no softmax over the experts.
        const bool learned = moe.has_router();
        f.router = learned ? 2.0 * tokens * h * moe.experts : 0.0;
        const int active = moe.top_k + moe.shared_experts;
        f.mlp = tokens * active * mlp_flops_per_token(m, eff);
        // Router softmax (~5 flops per logit) and the weighted combine of top_k outputs.
        other_per_token += active * mlp_other_per_token(m, eff) + (learned ? 5.0 * moe.experts : 0.0) + 2.0 * h * moe.top_k;
    } else {
        f.mlp = tokens * mlp_flops_per_token(m, m.ffn_hidden);
        other_per_token += mlp_other_per_token(m, m.ffn_hidden);
    }
    // Two norms (layernorm ~5 flops/element: mean, variance, normalise, scale, shift; rmsnorm ~4),
    // two residual adds, attention biases, and softmax (~5 flops per score: scale, max, exp, sum,
    // divide) over heads x seq scores per token (half under causal halving).
    const double norm = m.norm == NormKind::layernorm ? 5.0 : 4.0;
    other_per_token += 2.0 * norm * h + 2.0 * h;
    if (m.qk_norm) other_per_token += norm * (qw + kvw);  // over every query and key head
    if (m.linear_bias) other_per_token += qw + 2.0 * kvw + h;
    else if (m.qkv_bias) other_per_token += qw + 2.0 * kvw;
    const double scores = static_cast<double>(m.heads) * static_cast<double>(m.seq_len) * (causal_halved ? 0.5 : 1.0) * windowed;
    other_per_token += 5.0 * scores;
    f.other = tokens * other_per_token;
    return f;
}

ForwardFlops forward_flops(const ModelSpec& m, double seqs, bool causal_halved) {
    ForwardFlops f;
    for (int l = 0; l < m.layers; ++l) {
        LayerFlops lf = layer_forward_flops(m, l, seqs, causal_halved);
        f.layers_matmul += lf.matmul();
        f.attention_core += lf.attention;
        f.router += lf.router;
        f.other += lf.other;
    }
    const double tokens = seqs * static_cast<double>(m.seq_len);
    const double h = static_cast<double>(m.hidden), v = static_cast<double>(m.vocab);
    f.logits = 2.0 * tokens * h * v;
    // Final norm, and the cross-entropy's softmax over the vocabulary (~5 flops per logit).
    const double head_other = tokens * ((m.norm == NormKind::layernorm ? 5.0 : 4.0) * h + 5.0 * v);
    f.other += head_other;
    // Each MTP module: its layer, the 2h -> h projection and the shared head again (DeepSeek-V3
    // Sec. 2.2), plus two more norms before the projection.
    if (m.mtp_depth > 0 && m.layers > 0) {
        const LayerFlops lf = layer_forward_flops(m, mtp_layer_kind(m), seqs, causal_halved);
        const double d = m.mtp_depth;
        f.mtp = d * (lf.matmul() + 2.0 * tokens * (2.0 * h) * h + f.logits);
        f.attention_core += d * lf.attention;
        f.router += d * lf.router;
        f.mtp_other = d * (lf.other + head_other + tokens * 2.0 * (m.norm == NormKind::layernorm ? 5.0 : 4.0) * h);
        f.other += f.mtp_other;
    }
    return f;
}

std::vector<SacMatmul> op_sac_matmuls(const ModelSpec& m, bool moe_layer) {
    const std::int64_t h = m.hidden, q = q_width(m), kv = kv_width(m), f = m.ffn_hidden;
    std::vector<SacMatmul> out = {{"wq", h, q}, {"wk", h, kv}, {"wv", h, kv}, {"wo", q, h}};
    if (m.mla) {
        // torchtitan models/deepseek_v3/model.py: wq (or wq_a, then wq_b after q_norm), wkv_a,
        // wkv_b after kv_norm, wo.
        const MlaSpec& a = *m.mla;
        const std::int64_t heads = m.heads, qk = heads * (a.qk_nope_head_dim + a.qk_rope_head_dim);
        out.clear();
        if (a.q_lora_rank > 0) out.insert(out.end(), {{"wq_a", h, a.q_lora_rank}, {"wq_b", a.q_lora_rank, qk}});
        else out.push_back({"wq", h, qk});
        out.insert(out.end(), {{"wkv_a", h, a.kv_lora_rank + a.qk_rope_head_dim},
                               {"wkv_b", a.kv_lora_rank, heads * (a.qk_nope_head_dim + a.v_head_dim)},
                               {"wo", heads * a.v_head_dim, h}});
    }
    if (moe_layer) {
        // A MoE block's matmuls (torchtitan moe.py): the router's gate is forced to recompute by
        // its shape (SelectiveAC's force_recompute_mm_shapes_by_fqns, ["moe.router.gate"]) and is
        // not counted; the routed experts run torch._grouped_mm, which is not on the save list;
        // the shared experts are plain matmuls and count on (w1, w3, w2).
        if (m.moe->shared_experts > 0) {
            const std::int64_t fs = m.moe->shared_experts * (m.moe->expert_ffn_hidden > 0 ? m.moe->expert_ffn_hidden : f);
            if (gated(m.ffn)) out.insert(out.end(), {{"shared.w1", h, fs}, {"shared.w3", h, fs}, {"shared.w2", fs, h}});
            else out.insert(out.end(), {{"shared.fc1", h, fs}, {"shared.fc2", fs, h}});
        }
    } else if (gated(m.ffn)) {
        // w2(silu(w1(x)) * w3(x)): Python evaluates w1 before w3.
        out.insert(out.end(), {{"w1", h, f}, {"w3", h, f}, {"w2", f, h}});
    } else {
        out.insert(out.end(), {{"fc1", h, f}, {"fc2", f, h}});
    }
    // The count restarts in each layer's checkpoint context: the 1st, 3rd, ... are kept.
    for (std::size_t i = 0; i < out.size(); ++i) out[i].saved = i % 2 == 0;
    return out;
}

bool sac_row_parallel(const SacMatmul& mm) {
    const std::string_view n = mm.name;
    return n == "wo" || n == "w2" || n == "fc2" || n == "shared.w2" || n == "shared.fc2";
}

StepFlops step_flops(const ModelSpec& m, double batch_seqs, Recompute r, bool causal_halved, bool matmul_only) {
    const ForwardFlops f = forward_flops(m, batch_seqs, causal_halved);
    StepFlops s;
    const double fwd = matmul_only ? f.matmul() : f.total();
    // Backward of a matmul is two matmuls of the same size (input and weight gradients): 2x forward.
    s.forward = fwd;
    s.backward = 2.0 * fwd;
    if (r == Recompute::full) {
        // Layers re-run their forward; the logits are not recomputed (Megatron: 96 = 4 x 24 for the
        // layers but 3 x 2 for the logits term).
        // The MTP modules are not recomputed either (their activations are kept, tensors.hpp).
        const double logits_part = matmul_only ? f.logits : f.logits + static_cast<double>(m.seq_len) * batch_seqs * 5.0 * static_cast<double>(m.vocab);
        s.recompute = fwd - logits_part - f.mtp - (matmul_only ? 0.0 : f.mtp_other);
    } else if (r == Recompute::selective) {
        s.recompute = f.attention_core;
        if (!matmul_only) {
            const double scores = static_cast<double>(m.heads) * static_cast<double>(m.seq_len) * (causal_halved ? 0.5 : 1.0);
            double layers = m.mtp_depth > 0 && m.layers > 0 ? m.mtp_depth * window_fraction(m, mtp_layer_kind(m)) : 0.0;
            for (int l = 0; l < m.layers; ++l) layers += window_fraction(m, l);  // each layer's share of the scores
            s.recompute += 5.0 * scores * static_cast<double>(m.seq_len) * batch_seqs * layers;
        }
    }
    return s;
}

double flops_per_step(const ModelSpec& m, double batch_seqs, Recompute r, bool causal_halved) {
    return step_flops(m, batch_seqs, r, causal_halved, false).total();
}

double model_flops_per_token(const ModelSpec& m, bool causal_halved) {
    const StepFlops s = step_flops(m, 1.0, Recompute::none, causal_halved, true);
    return s.total() / static_cast<double>(m.seq_len);
}

double megatron_flops_per_step(const ModelSpec& m, double batch_seqs, bool full_recompute) {
    const double B = batch_seqs, s = static_cast<double>(m.seq_len), l = m.layers;
    const double h = static_cast<double>(m.hidden), V = static_cast<double>(m.vocab);
    if (full_recompute) return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
    return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

double megatron_core_flops_per_step(const ModelSpec& m, double batch_seqs) {
    const ForwardFlops f = forward_flops(m, batch_seqs, true);
    return 3.0 * (f.matmul() - f.router);
}

double megatron_param_count(const ModelSpec& m) {
    const double l = m.layers, h = static_cast<double>(m.hidden);
    const double V = static_cast<double>(m.vocab), s = static_cast<double>(m.seq_len);
    return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (V + s) / (12.0 * l * h));
}

}  // namespace strata::sim
