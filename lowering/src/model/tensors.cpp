// The tensor list (tensors.hpp): per-rank bytes of every activation a layer stashes, of the model
// states and of the runtime buffers, after TP/SP/CP/EP/ZeRO. The itemisation follows Korthikanti
// et al. (MLSys 2023) §4 so that GPT-like configs reproduce their Eqs. 1-5 exactly; GQA, SwiGLU,
// flash attention, MoE and CP fall out of the same list (docs/formulas.md). No timing, no tiers'
// capacities: only sizes and where plan.offload puts them.
#include <algorithm>
#include <cmath>

#include "strata/common/error.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/tensors.hpp"
#include "tensors_local.hpp"

namespace strata::sim {

namespace detail {

Local local_of(const ModelSpec& m, const PlanSpec& p) {
    Local L;
    L.t = std::max(1, p.tp);
    L.b = p.micro_batch;
    L.s_k = static_cast<double>(m.seq_len);
    L.s_q = L.s_k / std::max(1, p.cp);
    L.tokens = L.s_q * L.b;
    L.tok_rep = (p.sequence_parallel && p.tp > 1) ? L.tokens / L.t : L.tokens;
    L.h = static_cast<double>(m.hidden);
    L.heads = m.heads / L.t;
    const double kv = kv_heads_of(m);
    L.kv_heads = kv >= L.t ? kv / L.t : 1.0;
    L.hd = static_cast<double>(head_dim_of(m));
    // Activations are kept in the compute dtype; fp8 recipes keep bf16 activations between GEMMs,
    // but Transformer Engine saves each FP8 GEMM's input for its weight gradient as the FP8 cast
    // (1 byte): the inputs of QKV, the attention projection, fc1 and fc2.
    L.act = p.precision == Precision::fp32 ? 4.0 : 2.0;
    L.gemm_in = p.precision == Precision::fp8 ? 1.0 : L.act;
    L.dropout = m.dropout > 0.0;
    return L;
}

// Per-rank parameters of one layer (TP-split where Megatron splits them; norms, row-parallel
// biases and the router are replicated).
StageParams layer_params_local(const ModelSpec& m, const PlanSpec& p, int layer) {
    const Local L = local_of(m, p);
    StageParams sp;
    const double h = L.h;
    const double qw = L.heads * L.hd * L.t, kvw_local = L.kv_heads * L.hd;
    const LayerParams lp = layer_params(m, layer);
    double attn = h * qw / L.t + 2.0 * h * kvw_local + qw * h / L.t;
    if (m.mla) {  // down-projections and latent norms replicated, the rest split over TP
        attn = 0;
        for (const AttentionLinear& a : attention_linears(m))
            attn += static_cast<double>(a.in) * static_cast<double>(a.out) / (a.tp_split ? L.t : 1.0);
    }
    attn += static_cast<double>(attention_norm_params(m));
    if (m.linear_bias) attn += qw / L.t + 2.0 * kvw_local + h;
    else if (m.qkv_bias) attn += qw / L.t + 2.0 * kvw_local;
    sp.dense = attn + static_cast<double>(lp.norms);
    if (m.layer_is_moe(layer)) {
        sp.dense += static_cast<double>(lp.router) + static_cast<double>(lp.shared_experts) / L.t;
        sp.expert = static_cast<double>(lp.experts) / std::max(1, p.ep) / p.etp();
    } else {
        // fc2's bias is row-parallel: replicated, not split (h / tp of it was counted above).
        sp.dense += static_cast<double>(lp.mlp) / L.t + (m.linear_bias ? h - h / L.t : 0.0);
    }
    return sp;
}

}  // namespace detail

using detail::Local;
using detail::local_of;
using detail::layer_params_local;

const char* to_string(TensorTag t) {
    switch (t) {
        case TensorTag::weights: return "weights";
        case TensorTag::grads: return "grads";
        case TensorTag::optimizer: return "optimizer";
        case TensorTag::activations: return "activations";
        case TensorTag::buffers: return "buffers";
        case TensorTag::count: break;
    }
    return "?";
}

namespace {

TensorDesc act_tensor(std::string name, double bytes, std::string shape, const PlanSpec& p) {
    TensorDesc d;
    d.name = std::move(name);
    d.tag = TensorTag::activations;
    d.lifetime = Lifetime::stashed;
    d.bytes = bytes;
    d.tiers = p.offload.activations;
    d.shape = std::move(shape);
    return d;
}

// The MLP intermediates of `rows` tokens through an MLP of width `ffn_local` on this rank.
// relu_keeps_output: ReLU's backward reads its output, except where the router's weights scale it
// (routed experts under moe_probs_at fc2_input), which keeps its input as GeLU does.
void mlp_intermediates(std::vector<TensorDesc>& out, const ModelSpec& m, const PlanSpec& p, const Local& L,
                       const std::string& prefix, double rows, double ffn_local, const std::string& rows_shape,
                       bool relu_keeps_output = true) {
    const double bytes = L.act * rows * ffn_local;
    const std::string shape = "(" + rows_shape + ", ffn/tp)";
    if (gated(m.ffn)) {
        // The fused SwiGLU (Megatron's bias_swiglu; GeGLU's bias_geglu alike) keeps its input,
        // the gate and up fc1 outputs, and recomputes act(gate) in backward; fc2 keeps its input
        // act(gate)·up. Same convention as gelu: activation input + fc2 input.
        out.push_back(act_tensor(prefix + ".gate_out", bytes, shape, p));
        out.push_back(act_tensor(prefix + ".up_out", bytes, shape, p));
        out.push_back(act_tensor(prefix + ".act_out", L.gemm_in * rows * ffn_local, shape, p));
    } else if (m.ffn == FfnKind::relu && relu_keeps_output) {
        // ReLU's backward reads its output (threshold_backward(dy, y, 0)), which fc2 keeps as its
        // input: one tensor where GeLU keeps two (OPT's fc1 -> relu -> fc2). Under FP8 fc2 keeps its
        // cast beside the 16-bit output ReLU's backward reads.
        const double kept = p.precision == Precision::fp8 ? L.act + L.gemm_in : L.gemm_in;
        out.push_back(act_tensor(prefix + ".act_out", kept * rows * ffn_local, shape, p));
    } else {
        // Korthikanti: GeLU input 8sbh and GeLU output (fc2 input) 8sbh for ffn = 4h.
        out.push_back(act_tensor(prefix + ".fc1_out", bytes, shape, p));
        out.push_back(act_tensor(prefix + ".act_out", L.gemm_in * rows * ffn_local, shape, p));
    }
}

// Tokens one rank's experts process per micro-batch: each of this rank's tokens goes to top_k
// experts; spread uniformly, an EP rank receives as many assignments as its tokens make
// (tokens·top_k), the hottest rank (1 + load_skew) times that. With a capacity factor an expert
// keeps at most capacity_factor times its mean; padded (plan.moe_pad_to_capacity), exactly that.
// Routed rows: with SP each TP rank routes its own tok_rep tokens and the expert-TP group gathers
// etp ranks' worth (etp = tp: all the tokens, as without SP).
double routed_rows(const ModelSpec& m, const PlanSpec& p, const Local& L) {
    const auto& moe = *m.moe;
    const double tokens = p.sequence_parallel && p.tp > 1 ? L.tok_rep * p.etp() : L.tokens;
    if (moe.capacity_factor > 0.0 && p.moe_pad_to_capacity) {  // every expert its capacity, ceil(tokens k / E x factor)
        const double E = static_cast<double>(moe.experts);
        return E * std::ceil(tokens * moe.top_k / E * moe.capacity_factor);
    }
    if (moe.capacity_factor > 0.0) return tokens * moe.top_k * std::min(1.0 + moe.load_skew, moe.capacity_factor);
    return tokens * moe.top_k * (1.0 + moe.load_skew);
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Which stashed tensors a selective recompute module drops (Megatron-Core's --recompute-modules;
// each module keeps its input).
bool recompute_drops(const std::string& name, const PlanSpec& p, bool moe_layer) {
    if (p.recompute != Recompute::selective) return false;
    if (p.recomputes(RecomputeModule::core_attn) && (starts_with(name, "attn.softmax") || name == "attn.lse" || name == "attn.out_heads"))
        return true;  // the score matrix (or flash attention's log-sum-exp and, under Ulysses, its output)
    if (p.recomputes(RecomputeModule::layernorm) && (name == "attn.qkv_in" || name == "attn.down_in" || name == "mlp.fc1_in"))
        return true;  // the norm outputs; the norms' inputs (attn.norm_in, mlp.norm_in) stay
    if (p.recomputes(RecomputeModule::mla_up_proj) && (name == "attn.q" || name == "attn.k" || name == "attn.v"))
        return true;  // rebuilt from attn.up_in (the gathered latents)
    if (p.recomputes(RecomputeModule::mlp) && !moe_layer && starts_with(name, "mlp.") && name != "mlp.norm_in" &&
        name != "mlp.fc1_in" && name != "mlp.dropout_mask")
        return true;  // the dense MLP's intermediates; its input mlp.fc1_in stays
    if (p.recomputes(RecomputeModule::moe_act) && name == "moe.experts.act_out") return true;  // fc2 input, from fc1's outputs
    if (p.recomputes(RecomputeModule::shared_experts) && starts_with(name, "moe.shared.")) return true;
    if (p.recomputes(RecomputeModule::moe) && starts_with(name, "moe.")) return true;  // all of the block but its input
    return false;
}

std::vector<TensorDesc> full_layer_activations(const ModelSpec& m, const PlanSpec& p, int layer) {
    const Local L = local_of(m, p);
    std::vector<TensorDesc> out;
    const double rep = L.act * L.tok_rep * L.h;  // one hidden-state tensor in a replicated region
    const std::string rep_shape = (p.sequence_parallel && p.tp > 1) ? "(s/cp/tp, b, h)" : "(s/cp, b, h)";
    // --- attention block ---
    out.push_back(act_tensor("attn.norm_in", rep, rep_shape, p));
    if (m.mla) {
        // Multi-head latent attention: the down-projections read the (sequence-sharded) norm output;
        // the latents (q_lora + kv_lora, and the shared RoPE key) are kept before their norms and,
        // gathered over TP, as the up-projections' inputs; then Q, K (qk_dim per head) and V.
        const MlaSpec& a = *m.mla;
        const double lat = static_cast<double>(a.q_lora_rank + a.kv_lora_rank), rope = static_cast<double>(a.qk_rope_head_dim);
        const double dqk = static_cast<double>(qk_head_dim_of(m)), dv = static_cast<double>(a.v_head_dim);
        out.push_back(act_tensor("attn.down_in", L.gemm_in * L.tok_rep * L.h, rep_shape, p));
        out.push_back(act_tensor("attn.latent", L.act * L.tok_rep * (lat + rope), "(tokens, q_lora + kv_lora + rope)", p));
        out.push_back(act_tensor("attn.up_in", L.gemm_in * L.tokens * lat, "(s/cp, b, q_lora + kv_lora)", p));
        // Recomputing the up-projections (and RoPE) before the backward reads the shared rope key
        // again: Megatron-Core's up-projection checkpoint keeps it beside the latents.
        if (p.recompute == Recompute::selective && p.recomputes(RecomputeModule::mla_up_proj))
            out.push_back(act_tensor("attn.k_rope", L.act * L.tokens * rope, "(s/cp, b, rope)", p));
        out.push_back(act_tensor("attn.q", L.act * L.tokens * L.heads * dqk, "(s/cp, b, heads/tp, nope + rope)", p));
        out.push_back(act_tensor("attn.k", L.act * L.tokens * L.heads * dqk, "(s/cp, b, heads/tp, nope + rope)", p));
        out.push_back(act_tensor("attn.v", L.act * L.tokens * L.heads * dv, "(s/cp, b, heads/tp, v)", p));
    } else {
        out.push_back(act_tensor("attn.qkv_in", L.gemm_in * L.tok_rep * L.h, rep_shape, p));
        if (m.qk_norm) {  // the norms' inputs; Q and K below are their outputs after RoPE
            out.push_back(act_tensor("attn.q_norm_in", L.act * L.tokens * L.heads * L.hd, "(s/cp, b, heads/tp, d)", p));
            out.push_back(act_tensor("attn.k_norm_in", L.act * L.tokens * L.kv_heads * L.hd, "(s/cp, b, kv_heads/tp, d)", p));
        }
        out.push_back(act_tensor("attn.q", L.act * L.tokens * L.heads * L.hd, "(s/cp, b, heads/tp, d)", p));
        out.push_back(act_tensor("attn.k", L.act * L.tokens * L.kv_heads * L.hd, "(s/cp, b, kv_heads/tp, d)", p));
        out.push_back(act_tensor("attn.v", L.act * L.tokens * L.kv_heads * L.hd, "(s/cp, b, kv_heads/tp, d)", p));
    }
    const double scores = L.heads * L.s_q * L.s_k * L.b;  // elements of the score matrix on this rank
    if (!p.flash_attention) {
        out.push_back(act_tensor("attn.softmax_out", L.act * scores, "(b, heads/tp, s/cp, s)", p));
        if (L.dropout) {
            out.push_back(act_tensor("attn.softmax_dropout_mask", 1.0 * scores, "(b, heads/tp, s/cp, s)", p));
            out.push_back(act_tensor("attn.softmax_dropout_out", L.act * scores, "(b, heads/tp, s/cp, s)", p));
        }
    } else {
        // Flash attention keeps only the fp32 log-sum-exp per query row; O is proj_in below.
        out.push_back(act_tensor("attn.lse", 4.0 * L.heads * L.s_q * L.b, "(b, heads/tp, s/cp) fp32", p));
    }
    // Under FP8 the projection keeps its input's FP8 cast (Transformer Engine saves the quantized
    // input for the wgrad), and the fused attention keeps its 16-bit output besides for its own
    // backward (the dO . O row sums); Ulysses' kernel keeps its head-split copy instead (below),
    // and unfused attention's backward reads the probabilities, not O.
    const bool o_kept = p.precision == Precision::fp8 && p.flash_attention && !(p.cp > 1 && p.cp_comm_type == CpCommType::a2a);
    out.push_back(act_tensor("attn.proj_in", (L.gemm_in + (o_kept ? L.act : 0.0)) * L.tokens * L.heads * static_cast<double>(v_head_dim_of(m)),
                             o_kept ? "(s/cp, b, heads/tp, d) fp8 cast + 16-bit O" : "(s/cp, b, heads/tp, d)", p));
    // Ulysses: the fused kernel keeps its output in the head split for its backward; the
    // projection's input is the same values returned to the sequence split (Transformer Engine's
    // a2a context parallelism saves both). Eager attention's backward reads the probabilities.
    if (p.cp > 1 && p.cp_comm_type == CpCommType::a2a && p.flash_attention)
        out.push_back(act_tensor("attn.out_heads", L.act * L.tokens * L.heads * static_cast<double>(v_head_dim_of(m)), "(s, b, heads/tp/cp, d)", p));
    if (L.dropout) out.push_back(act_tensor("attn.dropout_mask", L.tok_rep * L.h, rep_shape + " u8", p));
    // --- MLP / MoE block ---
    out.push_back(act_tensor("mlp.norm_in", rep, rep_shape, p));
    // Under FP8 a MoE layer's norm output is the router's 16-bit input (outside fp8_autocast),
    // with the shared experts' FP8 cast beside it; the routed experts cast their own rows below.
    const bool fp8_moe = p.precision == Precision::fp8 && m.layer_is_moe(layer);
    const double fc1_in = fp8_moe ? (m.moe->has_router() ? L.act : 0.0) + (m.moe->shared_experts > 0 ? L.gemm_in : 0.0) : L.gemm_in;
    out.push_back(act_tensor("mlp.fc1_in", fc1_in * L.tok_rep * L.h, fp8_moe ? rep_shape + " router's 16-bit + shared experts' cast" : rep_shape, p));
    if (m.layer_is_moe(layer)) {
        const auto& moe = *m.moe;
        const double eff_local = static_cast<double>(expert_ffn_of(m)) / p.etp();
        const double rows = routed_rows(m, p, L);
        // A round-robin gate (AutoModel's FakeBalancedGate) keeps only its k weights a token.
        if (!moe.has_router())
            out.push_back(act_tensor("moe.router_probs", 4.0 * L.tok_rep * moe.top_k, "(tokens, top_k) fp32", p));
        else out.push_back(act_tensor("moe.router_probs", 4.0 * L.tok_rep * moe.experts, "(tokens, experts) fp32", p));
        out.push_back(act_tensor("moe.dispatched_in", L.gemm_in * rows * L.h, "(tokens·top_k, h)", p));  // expert fc1 input
        Local experts = L;
        if (p.moe_act_fp8_cache) experts.act = 1.0;  // the SwiGLU inputs cached in FP8 (DeepSeek-V3 Sec. 3.3.3)
        mlp_intermediates(out, m, p, experts, "moe.experts", rows, eff_local, "tokens·top_k",
                          p.moe_probs_at != MoeProbsAt::fc2_input && !p.recomputes(RecomputeModule::moe_act));
        if (p.moe_probs_at == MoeProbsAt::fc2_output) {
            // Kept for the router weights' gradient at the un-permute: the experts' outputs once
            // combined on the tokens' own rank, so the rank's routed rows (no expert-TP gather, no
            // load skew: each rank gets back exactly its own).
            const double own = (p.sequence_parallel && p.tp > 1 ? L.tok_rep : L.tokens) * moe.top_k;
            const double kept = moe.capacity_factor > 0.0 && p.moe_pad_to_capacity ? moe.capacity_factor * own : own;
            out.push_back(act_tensor("moe.expert_out", L.act * kept * L.h, "(tokens·top_k, h)", p));
        }
        if (moe.shared_experts > 0)
            mlp_intermediates(out, m, p, L, "moe.shared", L.tokens, static_cast<double>(expert_ffn_of(m)) / L.t * moe.shared_experts, "s/cp·b");
    } else {
        mlp_intermediates(out, m, p, L, "mlp", L.tokens, static_cast<double>(m.ffn_hidden) / L.t, "s/cp·b");
    }
    if (L.dropout) out.push_back(act_tensor("mlp.dropout_mask", L.tok_rep * L.h, rep_shape + " u8", p));
    // Selective recomputation: the modules' tensors are rebuilt before the backward.
    const bool moe_layer = m.layer_is_moe(layer);
    std::erase_if(out, [&](const TensorDesc& d) { return recompute_drops(d.name, p, moe_layer); });
    return out;
}

TensorDesc buffer_tensor(std::string name, double bytes, Lifetime life, std::string shape) {
    return TensorDesc{std::move(name), TensorTag::buffers, life, bytes, TierSplit{}, std::move(shape)};
}

// torchtitan's op-level SAC (activation_checkpoint.py): the checkpoint keeps the layer's input
// and the outputs of the ops its policy marks MUST_SAVE: the odd matmuls (op_sac_matmuls) and
// SDPA's output and fp32 log-sum-exp. Norms, RoPE, the activation, the residual adds and the even
// matmuls are rerun in the backward (cp = 1, validation).
// Under TP (torchtitan's parallelize: SequenceParallel norms, colwise wq/wk/wv and w1/w3, rowwise
// wo and w2 with Shard(1) outputs) a kept column-parallel matmul's output is the rank's 1/tp of
// its columns, a kept row-parallel one's (w2) is its whole partial sum before the
// reduce-scatter, and the policy also keeps both reduce-scatters' outputs (the rank's shard of
// the tokens); the all-gathers are not kept, so the recomputation gathers again.
// A MoE layer (torchtitan's DeepSeek-V3 and Qwen3 run SelectiveAC by default): its attention's
// and shared experts' kept matmuls, and the outputs of all_to_all_single, which the save list
// keeps so as not to communicate again: the rows the dispatch delivered and those the combine
// returned. The routed experts' grouped GEMMs, the router and the token moves are rerun.
std::vector<TensorDesc> op_sac_layer_activations(const ModelSpec& m, const PlanSpec& p, int layer) {
    const Local L = local_of(m, p);
    const bool moe_layer = m.layer_is_moe(layer);
    std::vector<TensorDesc> out;
    out.push_back(act_tensor("sac.layer_in", L.act * L.tok_rep * L.h, "(s[/tp], b, h)", p));
    for (const SacMatmul& mm : op_sac_matmuls(m, moe_layer))
        if (mm.saved) {
            const double cols = sac_row_parallel(mm) ? static_cast<double>(mm.out) : static_cast<double>(mm.out) / L.t;
            out.push_back(act_tensor(std::string("sac.") + mm.name + "_out", L.act * L.tokens * cols, "(s·b, out[/tp])", p));
        }
    out.push_back(act_tensor("sac.sdpa_out", L.act * L.tokens * L.heads * static_cast<double>(v_head_dim_of(m)), "(b, heads/tp, s, d_v)", p));
    out.push_back(act_tensor("sac.sdpa_lse", 4.0 * L.heads * L.tokens, "(b, heads/tp, s) fp32", p));
    if (L.t > 1)  // the attention's and the MLP's reduce-scatters
        for (const char* rs : {"sac.attn_reduce_scatter_out", "sac.mlp_reduce_scatter_out"})
            out.push_back(act_tensor(rs, L.act * L.tok_rep * L.h, "(s/tp, b, h)", p));
    if (moe_layer && p.ep > 1) {
        out.push_back(act_tensor("sac.moe_dispatched", L.act * routed_rows(m, p, L) * L.h, "(tokens·top_k, h)", p));
        out.push_back(act_tensor("sac.moe_combined", L.act * L.tokens * m.moe->top_k * L.h, "(tokens·top_k, h)", p));
    }
    return out;
}

// The tensors of the Megatron-style list that the op-level SAC cache already holds (so the
// recompute does not build them again): the layer input, SDPA's output and log-sum-exp, a kept
// matmul output that the list stashes as is (V; the gate or fc1 output, the shared experts'), and
// under EP the dispatched rows.
bool op_sac_cached(const ModelSpec& m, const PlanSpec& p, bool moe_layer, const std::string& name) {
    if (name == "attn.norm_in" || name == "attn.lse" || name == "attn.proj_in") return true;
    if (moe_layer && p.ep > 1 && name == "moe.dispatched_in") return true;
    for (const SacMatmul& mm : op_sac_matmuls(m, moe_layer)) {
        if (!mm.saved) continue;
        const std::string n = mm.name;
        if ((n == "wv" && name == "attn.v") || (n == "w1" && name == "mlp.gate_out") || (n == "fc1" && name == "mlp.fc1_out") ||
            (n == "shared.w1" && name == "moe.shared.gate_out") || (n == "shared.fc1" && name == "moe.shared.fc1_out"))
            return true;
    }
    return false;
}

}  // namespace

std::vector<TensorDesc> layer_activations(const ModelSpec& m, const PlanSpec& p, int layer, bool recomputed) {
    if (!recomputed && p.op_sac()) return op_sac_layer_activations(m, p, layer);
    if (!recomputed) return full_layer_activations(m, p, layer);
    // Full recompute keeps only the layer input (Korthikanti §5: 2sbh, /tp with SP).
    const Local L = local_of(m, p);
    const std::string shape = (p.sequence_parallel && p.tp > 1) ? "(s/cp/tp, b, h)" : "(s/cp, b, h)";
    return {act_tensor("layer.input", L.act * L.tok_rep * L.h, shape, p)};
}

std::vector<TensorDesc> layer_forward_transients(const ModelSpec& m, const PlanSpec& p, int layer) {
    PlanSpec no_sel = p;
    no_sel.recompute = Recompute::none;
    std::vector<TensorDesc> out;
    for (TensorDesc d : full_layer_activations(m, no_sel, layer)) {
        if (d.name == "attn.norm_in") continue;  // the stashed layer input itself
        d.name = "forward." + d.name;
        d.lifetime = Lifetime::transient;
        d.tiers = TierSplit{};  // on the GPU whatever the activations' offload
        out.push_back(std::move(d));
    }
    return out;
}

std::vector<TensorDesc> layer_backward_workspace(const ModelSpec& m, const PlanSpec& p, int layer, bool recomputed) {
    const Local L = local_of(m, p);
    std::vector<TensorDesc> out;
    PlanSpec no_sel = p;
    no_sel.recompute = Recompute::none;
    const std::vector<TensorDesc> full = full_layer_activations(m, no_sel, layer);
    double widest = 0;
    for (const TensorDesc& d : full) widest = std::max(widest, d.bytes);
    if (recomputed) {
        // The layer's forward runs again just before its backward, its whole list live. The
        // backward frees the MLP's (or MoE block's) tensors before it reaches attention's, whose
        // widest gradient (the score matrix's, unfused) then finds only attention's tensors beside
        // it: live at once are attention's, and the larger of the MLP's with their widest gradient
        // and attention's widest gradient (until stop 63 all of them and the widest gradient: 1.3 GB
        // over the walk on Llama 3 8B at tp 4, unfused, 4 sequences of 8192).
        double mlp = 0, widest_mlp = 0, widest_attn = 0;
        for (const TensorDesc& d : full) {
            out.push_back(buffer_tensor("recompute." + d.name, d.bytes, Lifetime::transient, d.shape));
            const bool attn = starts_with(d.name, "attn.");
            (attn ? widest_attn : widest_mlp) = std::max(attn ? widest_attn : widest_mlp, d.bytes);
            if (!attn) mlp += d.bytes;
        }
        out.push_back(buffer_tensor("grad.widest", std::max(widest_mlp, widest_attn - mlp), Lifetime::transient,
                                    "widest intermediate of the pass, past the MLP's freed"));
    } else if (p.op_sac()) {
        // The checkpoint reruns the layer's forward before its backward: everything but what its
        // cache holds is live again. Under TP the rerun all-gathers rebuild the matmuls' gathered
        // inputs, which the backward reads as they are (the list holds Megatron's shards).
        for (const TensorDesc& d : full)
            if (!op_sac_cached(m, p, m.layer_is_moe(layer), d.name)) {
                const bool gathered = L.t > 1 && (d.name == "attn.qkv_in" || d.name == "mlp.fc1_in");
                out.push_back(buffer_tensor("recompute." + d.name, gathered ? d.bytes * L.t : d.bytes, Lifetime::transient, d.shape));
            }
    } else if (p.recompute == Recompute::selective) {
        // Everything the selected modules dropped is live again while this layer's backward runs.
        const bool moe_layer = m.layer_is_moe(layer);
        for (const TensorDesc& d : full)
            if (recompute_drops(d.name, p, moe_layer))
                out.push_back(buffer_tensor("recompute." + d.name, d.bytes, Lifetime::transient, d.shape));
    }
    // Gradients: the incoming and outgoing hidden-state gradients, plus the gradient of the widest
    // intermediate (the largest stashed tensor) while its matmul's backward runs. The backward
    // frees the layer's MLP (or MoE block) tensors before it reaches attention's (autograd frees a
    // node's saved tensors once it has run), so an attention gradient wider than the MLP's finds
    // them gone: unfused attention's probabilities' gradient beside the stash less them (until
    // stop 64 beside all of it: 1.1 GB over the walk on Llama 3 8B at tp 4, fp32, 2 x 8192).
    if (!recomputed && !p.op_sac()) {
        double mlp = 0, widest_mlp = 0, widest_attn = 0;
        for (const TensorDesc& d : full) {
            const bool attn = starts_with(d.name, "attn.");
            (attn ? widest_attn : widest_mlp) = std::max(attn ? widest_attn : widest_mlp, d.bytes);
            if (!attn) mlp += d.bytes * p.offload.activations.gpu;
        }
        out.push_back(buffer_tensor("grad.widest", std::max(widest_mlp, widest_attn - mlp), Lifetime::transient,
                                    "widest intermediate, past the MLP's freed"));
    } else if (!recomputed) {
        out.push_back(buffer_tensor("grad.widest", widest, Lifetime::transient, "widest intermediate"));
    }
    out.push_back(buffer_tensor("grad.hidden", 2.0 * L.act * L.tokens * L.h, Lifetime::transient, "2 x (s/cp, b, h)"));
    // Context parallelism by all-gather: the other ranks' K/V chunks gathered for the attention's
    // backward, and the K/V gradient each block leaves until one reduce-scatter returns them (the
    // ring holds a block or two at a time, which the model leaves out).
    if (p.cp > 1 && p.cp_comm_type == CpCommType::allgather && p.flash_attention) {
        const double kv_cols = m.mla ? L.heads * static_cast<double>(qk_head_dim_of(m) + v_head_dim_of(m)) : 2.0 * L.kv_heads * L.hd;
        const double remote = (p.cp - 1) * L.act * L.tokens * kv_cols;
        out.push_back(buffer_tensor("cp.kv_gathered", remote, Lifetime::transient, "(cp - 1) x (s/cp, b, 2 kv/tp, d)"));
        out.push_back(buffer_tensor("cp.dkv_blocks", remote, Lifetime::transient, "(cp - 1) x (s/cp, b, 2 kv/tp, d)"));
    }
    // Unfused accumulation: autograd writes each weight's gradient to a new tensor before it is
    // added into the sum. The widest dense weight is the largest such tensor; experts' weights are smaller.
    if (p.adds_unfused_grads() && !m.mla) {
        const double qkv = L.h * (L.heads + 2.0 * L.kv_heads) * L.hd, proj = L.heads * L.hd * L.h;
        const double ffn = static_cast<double>(m.ffn_hidden) / L.t;
        const double fc1 = L.h * ffn * (gated(m.ffn) ? 2.0 : 1.0), fc2 = ffn * L.h;
        const double widest_w = m.layer_is_moe(layer) ? std::max(qkv, proj) : std::max({qkv, proj, fc1, fc2});
        out.push_back(buffer_tensor("grad.weight_unfused", widest_w * L.act, Lifetime::transient, "widest local weight"));
    }
    for (TensorDesc& d : out) d.tag = TensorTag::activations;
    return out;
}

std::vector<TensorDesc> embedding_activations(const ModelSpec& m, const PlanSpec& p) {
    const Local L = local_of(m, p);
    std::vector<TensorDesc> out;
    // The embedding output is the first layer's attn.norm_in; only the dropout mask is extra.
    // Token ids (4-8 bytes per token) are not counted.
    if (L.dropout) out.push_back(act_tensor("embed.dropout_mask", L.tok_rep * L.h, "(s/cp[/tp], b, h) u8", p));
    return out;
}

std::vector<TensorDesc> embedding_backward_workspace(const ModelSpec& m, const PlanSpec& p) {
    const Local L = local_of(m, p);
    // The table's gradient comes in the activations' dtype (FP8 recipes keep the embedding in BF16).
    const double table = static_cast<double>(edge_param_counts(m, p).embedding) / L.t;
    std::vector<TensorDesc> out{buffer_tensor("embed.grad_table", table * L.act, Lifetime::transient, "(V/tp, h) dense"),
                                buffer_tensor("embed.grad_out", L.act * L.tok_rep * L.h, Lifetime::transient, "(s/cp[/tp], b, h)")};
    for (TensorDesc& d : out) d.tag = TensorTag::activations;
    return out;
}

std::vector<TensorDesc> head_workspace(const ModelSpec& m, const PlanSpec& p, bool backward) {
    const Local L = local_of(m, p);
    std::vector<TensorDesc> out;
    const double logits = L.tokens * static_cast<double>(padded_vocab(m, p)) / L.t;
    const bool cast = p.loss_upcast && L.act < 4;
    // Megatron's vocab-parallel cross-entropy (tensor_parallel/cross_entropy.py) upcasts the
    // logits: in the forward the head's (s, b, V/tp) output and its fp32 copy live together, and
    // in the backward the fp32 softmax, turned into the gradient in place, is cast back to the
    // logits' dtype before the fp32 one is freed. Either way one logits-sized tensor in the
    // activation dtype beside the stashed fp32 one; none when training in fp32. A loss that keeps
    // the logits in their dtype (plan.loss_upcast off) writes their gradient to a new tensor.
    if (p.eager_cross_entropy) {
        // F.cross_entropy(logits.float(), labels) as eager ops (torchtitan's loss_fn): the stash
        // keeps log_softmax's output (lm_head.logits); its backward allocates nll_loss's gradient
        // and then log_softmax's, both logits-sized in the loss dtype, while the stashed output is
        // still held. In the forward the head's output and its fp32 copy live beside it.
        const double d = p.loss_upcast ? 4.0 : L.act;
        if (backward) {
            out.push_back(buffer_tensor("lm_head.nll_grad", d * logits, Lifetime::transient, "(s/cp, b, V/tp)"));
            out.push_back(buffer_tensor("lm_head.log_softmax_grad", d * logits, Lifetime::transient, "(s/cp, b, V/tp)"));
            // loss_parallel's fused backward: (zeros + exp(output)) * grad, the zeros, the
            // exponentials and their sum held at once (torch's _nll_loss_and_log_softmax_backward).
            if (p.eager_loss_parallel()) out.push_back(buffer_tensor("lm_head.exp_output", d * logits, Lifetime::transient, "(s/cp, b, V/tp)"));
        } else {
            out.push_back(buffer_tensor("lm_head.logits_out", L.act * logits, Lifetime::transient, "(s/cp, b, V/tp)"));
            if (cast) out.push_back(buffer_tensor("lm_head.logits_fp32", 4.0 * logits, Lifetime::transient, "(s/cp, b, V/tp) fp32"));
            // loss_parallel's log_softmax, decomposed: the shifted logits live until the result
            // (the stash) is written, and their exponentials before it.
            if (p.eager_loss_parallel()) out.push_back(buffer_tensor("lm_head.shifted", d * logits, Lifetime::transient, "(s/cp, b, V/tp)"));
        }
    } else if (cast) {
        out.push_back(buffer_tensor("lm_head.logits_cast", L.act * logits, Lifetime::transient, "(s/cp, b, V/tp)"));
    }
    if (backward && !p.loss_upcast && !p.eager_cross_entropy)
        out.push_back(buffer_tensor("lm_head.logits_grad", L.act * logits, Lifetime::transient, "(s/cp, b, V/tp)"));
    // Unfused accumulation: the head's (or the tied embedding copy's) weight gradient is a fresh
    // tensor. After a cast it comes once the fp32 softmax is freed, and the stash keeps that (its
    // GPU part) until the micro-batch's backward ends, so only what it exceeds that by is extra.
    if (backward && p.adds_unfused_grads()) {
        const double weight = L.act * static_cast<double>(padded_vocab(m, p)) / L.t * L.h;
        const double over = cast ? weight - 4.0 * logits * p.offload.activations.gpu : weight;
        if (over > 0) out.push_back(buffer_tensor("lm_head.weight_grad_unfused", over, Lifetime::transient, "(V/tp, h), less the freed fp32 logits"));
    }
    for (TensorDesc& d : out) d.tag = TensorTag::activations;
    return out;
}

std::vector<TensorDesc> pipe_output_slice(const ModelSpec& m, const PlanSpec& p) {
    if (p.torch_pipelining && p.pp > 1) {
        // torch.distributed.pipelining keeps the whole output (fwd_cache) until its backward.
        const Local L = local_of(m, p);
        return {act_tensor("pp.kept_output", L.act * L.tok_rep * L.h, "(s/cp[/tp], b, h)", p)};
    }
    if (!(p.p2p_blocking && p.p2p_scatter_gather)) return {};
    const Local L = local_of(m, p);
    return {act_tensor("pp.sent_output_slice", L.act * L.tokens * L.h / L.t, "(s, b, h) / tp", p)};
}

std::vector<TensorDesc> pipe_output_regathered(const ModelSpec& m, const PlanSpec& p) {
    if (!(p.p2p_blocking && p.p2p_scatter_gather)) return {};
    const Local L = local_of(m, p);
    TensorDesc d = buffer_tensor("pp.output_regathered", L.act * L.tokens * L.h, Lifetime::transient, "(s, b, h)");
    d.tag = TensorTag::activations;
    return {d};
}

std::vector<TensorDesc> logits_activations(const ModelSpec& m, const PlanSpec& p) {
    const Local L = local_of(m, p);
    const double V = static_cast<double>(padded_vocab(m, p));
    // Korthikanti §4.3: final norm input and output-projection input (2sbh each, /tp with SP), and
    // the cross-entropy's fp32 logits 4sbv/tp (vocab-parallel), or the logits in their own dtype
    // under a loss that does not upcast (plan.loss_upcast off).
    const auto head = [&](const std::string& pre) {
        return std::vector<TensorDesc>{act_tensor(pre + "final.norm_in", L.act * L.tok_rep * L.h, "(s/cp[/tp], b, h)", p),
                                       act_tensor(pre + "lm_head.in", L.act * L.tok_rep * L.h, "(s/cp[/tp], b, h)", p),
                                       act_tensor(pre + "lm_head.logits", (p.loss_upcast ? 4.0 : L.act) * L.tokens * V / L.t,
                                                  p.loss_upcast ? "(s/cp, b, V/tp) fp32" : "(s/cp, b, V/tp)", p)};
    };
    std::vector<TensorDesc> out = head("");
    // Each MTP module keeps what its backward needs, never recomputed: the inputs of its two norms
    // and of the 2h -> h projection, its layer's activations (built like the last decoder layer,
    // selective recomputation honoured) and a second head's.
    for (int k = 0; k < m.mtp_depth && m.layers > 0; ++k) {
        const std::string pre = "mtp" + std::to_string(k) + ".";
        out.push_back(act_tensor(pre + "norms_in", 2.0 * L.act * L.tok_rep * L.h, "2 x (s/cp[/tp], b, h)", p));
        out.push_back(act_tensor(pre + "proj_in", L.gemm_in * L.tok_rep * 2.0 * L.h, "(s/cp[/tp], b, 2h)", p));
        for (TensorDesc& d : full_layer_activations(m, p, mtp_layer_kind(m))) {
            d.name = pre + d.name;
            out.push_back(std::move(d));
        }
        for (TensorDesc& d : head(pre)) out.push_back(std::move(d));
    }
    return out;
}

StageParams mtp_params_local(const ModelSpec& m, const PlanSpec& p) {
    StageParams sp;
    if (m.mtp_depth <= 0 || m.layers <= 0) return sp;
    const StageParams lp = layer_params_local(m, p, mtp_layer_kind(m));
    const double t = std::max(1, p.tp), h = static_cast<double>(m.hidden);
    const double norms = static_cast<double>(mtp_extra_params(m)) - 2.0 * h * h;
    // The projection is column-parallel over TP; the norms are replicated.
    sp.dense = m.mtp_depth * (lp.dense + 2.0 * h * h / t + norms);
    sp.expert = m.mtp_depth * lp.expert;
    return sp;
}

bool head_stage_embedding_copy(const ModelSpec& m, const PlanSpec& p) {
    return head_stage(p) != 0 && (m.tied_embeddings || m.mtp_depth > 0);
}

bool head_reads_embedding_table(const ModelSpec& m, const PlanSpec& p) { return m.tied_embeddings && !head_stage_embedding_copy(m, p); }

bool layer_recomputed(const ModelSpec& m, const PlanSpec& p, int stage, int layer_in_stage) {
    if (p.recompute != Recompute::full) return false;
    // torchtitan's layer-level SAC wraps the blocks whose running count (1-based, across the
    // rank's chunks in build order) is a multiple of n (parallelize.py's ptd_checkpoint_wrapper._count).
    if (p.recompute_every > 0) return (layer_in_stage + 1) % p.recompute_every == 0;
    return p.recompute_layers < 0 || layer_in_stage < p.recompute_layers;
}

}  // namespace strata::sim
