// Recomputation before a layer's backward, besides full recompute (layer_forward with
// Phase::recompute): Megatron-Core's checkpointed modules and torchtitan's op-level SAC.
#include <string_view>

#include "lower_impl.hpp"

namespace strata::sim::lower_detail {

// Selective recomputation (plan.recompute_modules): before a block's backward, rerun the forward
// of what its modules dropped (tensors.cpp recompute_drops), as Megatron-Core's checkpointed
// modules do: a checkpointed module reruns whole, its TP / EP communication included.
void RankLowering::recompute_modules_before_mlp(int layer) {
    if (p_.recompute != Recompute::selective) return;
    const Phase saved = phase_;
    phase_ = Phase::recompute;
    const LayerTensors t = layer_tensors(layer);
    if (p_.recomputes(RecomputeModule::layernorm)) {
        compute(Op::norm, n_.norm2, 0, 2 * d_.tokens_sp * d_.h * d_.act_bytes);
        if (df_) io({t.x1, prm("ln2.weight", layer), bias("ln2.bias", layer, false)}, {t.ln2});
    }
    if (m_.layer_is_moe(layer)) {
        if (p_.recomputes(RecomputeModule::moe)) {
            moe_forward(layer);
            if (!d_.sp) tp_forward_out();
        } else {
            if (p_.recomputes(RecomputeModule::moe_act)) {
                const double batch = d_.experts / d_.ep, te = expert_tokens(), f = d_.expert_ffn / d_.etp;
                compute(Op::elementwise, n_.experts_act, 0, batch * d_.mats * te * f * d_.act_bytes);
                if (df_) {
                    const MoeTensors mt = moe_tensors(layer);
                    io({mt.fc1, opt(mt.gath_p)}, {mt.act});
                }
            }
            if (p_.recomputes(RecomputeModule::shared_experts) && d_.shared > 0) {
                shared_experts_forward(layer);
                if (d_.tp > 1 && d_.sp) {
                    const MoeTensors mt = moe_tensors(layer);
                    wait(Stream::compute, tp_out_collective(mt.sfc2, mt.sfc2_s));
                }
            }
        }
    } else if (p_.recomputes(RecomputeModule::mlp)) {
        mlp_forward(t);
    }
    phase_ = saved;
}

void RankLowering::recompute_modules_before_attention() {
    if (p_.recompute != Recompute::selective) return;
    const Phase saved = phase_;
    phase_ = Phase::recompute;
    const LayerTensors t = layer_tensors(layer_);
    if (p_.recomputes(RecomputeModule::layernorm)) {
        compute(Op::norm, n_.norm1, 0, 2 * d_.tokens_sp * d_.h * d_.act_bytes);
        if (df_) io({t.x, prm("ln1.weight", layer_), bias("ln1.bias", layer_, false)}, {t.ln1});
    }
    if (m_.mla && p_.recomputes(RecomputeModule::mla_up_proj)) {
        mla_up_projections_forward(mla_tensors(layer_));  // Q, K, V from the stashed (gathered) latents
    }
    if (p_.recomputes(RecomputeModule::core_attn)) attention_core_forward(Phase::recompute, t.qkv, t.attn, t.lse, t.probs, t.pmask, t.pdrop);
    phase_ = saved;
}

// torchtitan's op-level SAC (plan.recompute_policy "op"; cp = 1): before the layer's backward
// the checkpoint reruns its forward; ops whose outputs the policy saved return the cached tensor
// (the odd matmuls, SDPA, under TP the reduce-scatters), the rest run again: the norms, RoPE, the
// residual add, the activation, the even matmuls (op_sac_matmuls: wk, wo, w3 for SwiGLU) and
// under TP the sequence-parallel all-gathers, which send their bytes again. Recomputation stops
// once every tensor the backward reads is rebuilt (torch.utils.checkpoint's early stop), so a
// trailing matmul whose output nothing reads (fc2 of a GeLU MLP) is not rerun.
void RankLowering::op_sac_recompute(int layer) {
    const Phase saved = phase_;
    phase_ = Phase::recompute;
    const LayerTensors t = layer_tensors(layer);
    const double norm_bytes = 2 * d_.tokens_sp * d_.h * d_.act_bytes;
    const bool moe_layer = m_.layer_is_moe(layer);
    const std::vector<SacMatmul> mms = op_sac_matmuls(m_, moe_layer);
    std::vector<char> rerun(mms.size());
    std::size_t attn_mms = 0;  // the attention's matmuls end with wo; the MLP's (or shared experts') follow
    for (std::size_t i = 0; i < mms.size(); ++i) {
        rerun[i] = !mms[i].saved;
        if (std::string_view(mms[i].name) == "wo") attn_mms = i + 1;
    }
    const bool glu = gated(m_.ffn);
    const double tp = d_.tp;
    compute(Op::norm, n_.norm1, 0, norm_bytes);
    if (df_) io({t.x, prm("ln1.weight", layer), bias("ln1.bias", layer, false)}, {t.ln1});
    if (!m_.mla) tp_forward_in(true, t.ln1, t.ln1_g);  // not kept: gathered again (tp > 1 is SP; validation)
    // Dataflow: a GEMM with any part rerun rewrites its whole output (the cost counts the rerun
    // part only); one wholly kept keeps its forward value. The norms and RoPE rerun from the kept
    // projection (qkv_pre under QK-norm or RoPE), the residual add redraws its dropout mask.
    if (m_.mla) {
        op_sac_recompute_mla(rerun.data());
    } else {
        const double qkv_n = ((rerun[0] ? d_.q_w : 0) + (rerun[1] ? d_.kv_w : 0) + (rerun[2] ? d_.kv_w : 0)) / tp;
        if (qkv_n > 0) {
            gemm(n_.qkv, d_.tokens, qkv_n, d_.h);
            if (df_) io({t.ln1_g, prm("qkv.weight", layer)}, {t.qkv_pre});
        }
        qk_norm_and_rope(t, layer);
    }
    if (rerun[attn_mms - 1]) {  // its partial sum: the reduce-scatter after it is kept, not rerun
        gemm_cast(n_.proj, d_.tokens, d_.h, d_.heads * d_.v_dim / tp);
        if (df_) io({t.attn, prm("proj.weight", layer)}, {t.proj});
    }
    compute(Op::elementwise, n_.residual1, 0, 3 * d_.tokens_sp * d_.h * d_.act_bytes);
    if (df_) io({t.x, t.proj_s}, {t.x1, t.mask1});
    compute(Op::norm, n_.norm2, 0, norm_bytes);
    if (df_) io({t.x1, prm("ln2.weight", layer), bias("ln2.bias", layer, false)}, {t.ln2});
    if (moe_layer) {
        op_sac_recompute_moe(rerun.data() + attn_mms, layer);
        phase_ = saved;
        return;
    }
    const char* mlp = rerun.data() + attn_mms;
    tp_forward_in(true, t.ln2, t.ln2_g);
    const double fc1_n = (glu ? (mlp[0] ? d_.ffn : 0) + (mlp[1] ? d_.ffn : 0) : (mlp[0] ? d_.ffn : 0)) / tp;
    if (fc1_n > 0) {
        gemm(n_.fc1, d_.tokens, fc1_n, d_.h);
        if (df_) io({t.ln2_g, prm("fc1.weight", layer)}, {t.fc1});
    }
    compute(Op::elementwise, n_.act, 0, d_.mats * d_.tokens * d_.ffn / tp * d_.act_bytes);
    if (df_) io({t.fc1}, {t.act});
    // w2 (SwiGLU's 7th matmul) is kept; fc2 (GeLU's 6th) is past the early stop.
    phase_ = saved;
}

// MLA's projections under op-level SAC, torchtitan's matmuls in its order: wq_a and wq_b (or wq),
// wkv_a, wkv_b; the rerun ones again, the latent norms and RoPE always (tp = 1: every projection
// sees all the tokens). Lowered in the forward's order: the down-projections, the latent norms,
// the up-projections, RoPE. Dataflow: a rerun matmul rewrites its output, a kept one's (the
// latents of wq_a and wkv_a, or wq's query, or wkv_b's key/value) is the forward's. wo is the caller's.
void RankLowering::op_sac_recompute_mla(const char* rerun) {
    const MlaSpec& a = *m_.mla;
    const MlaTensors mt = mla_tensors(layer_);
    const LayerTensors t = layer_tensors(layer_);
    const bool qlat = a.q_lora_rank > 0;
    std::size_t i = 0;
    const bool r_qa = qlat && rerun[i++], r_qb = qlat && rerun[i++], r_q = !qlat && rerun[i++];
    const bool r_kva = rerun[i++], r_kvb = rerun[i];
    const double heads = d_.heads, qk = heads * static_cast<double>(a.qk_nope_head_dim + a.qk_rope_head_dim);
    const double lat = static_cast<double>(a.q_lora_rank + a.kv_lora_rank), rope = static_cast<double>(a.qk_rope_head_dim);
    const double ql = static_cast<double>(a.q_lora_rank), kl = static_cast<double>(a.kv_lora_rank);
    if (r_qa) {
        gemm_cast(n_.q_down, d_.tokens, ql, d_.h);
        if (df_) io({t.ln1, prm("q_down.weight", layer_)}, {mt.q_lat});
    }
    if (r_kva) {
        gemm_cast(n_.kv_down, d_.tokens, kl + rope, d_.h);
        if (df_) io({t.ln1, prm("kv_down.weight", layer_)}, {mt.kv_lat});
    }
    compute(Op::norm, n_.latent_norm, 0, 2 * d_.tokens * lat * d_.act_bytes);
    if (df_)
        io({opt(mt.q_lat), mt.kv_lat, qlat ? prm("q_latent_norm.weight", layer_) : -1, prm("kv_latent_norm.weight", layer_)},
           {opt(mt.q_n), mt.kv_n, mt.k_rope});
    if (r_qb) {
        gemm_cast(n_.q_up, d_.tokens, qk, ql);
        if (df_) io({mt.q_g, prm("q_up.weight", layer_)}, {mt.q});
    }
    if (r_q) {
        gemm_cast(n_.q, d_.tokens, qk, d_.h);
        if (df_) io({t.ln1, prm("q.weight", layer_)}, {mt.q});
    }
    if (r_kvb) {
        gemm_cast(n_.kv_up, d_.tokens, heads * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim), kl);
        if (df_) io({mt.kv_g, prm("kv_up.weight", layer_)}, {mt.kv});
    }
    compute(Op::elementwise, n_.rope, 0, mla_rope_bytes());
    if (df_) io({mt.q, mt.kv, mt.k_rope_g}, {t.qkv});
}

// A MoE block under op-level SAC (costs only: the runtime does not execute it). torchtitan's
// checkpoint reruns the router's gate (forced by its shape), the routing and the token moves, the
// routed experts' grouped GEMMs (torch._grouped_mm is not on the save list) and activation, and
// the shared experts' rerun matmuls; the all-to-alls' outputs are kept, so nothing is sent again.
// SelectiveAC wraps blocks with early_stop off (activation_checkpoint.py), so the whole block
// reruns, the experts' fc2 included. `shared_rerun`: the shared experts' matmuls, in order.
void RankLowering::op_sac_recompute_moe(const char* shared_rerun, int layer) {
    const double routed = d_.tokens;
    const LayerTensors lt = layer_tensors(layer);
    const MoeTensors mt = moe_tensors(layer);
    // Dataflow (tp = 1): the routing is rebuilt as it was (deterministic), the expert-side rows
    // the dispatch delivered are the forward's (kept), and so are the combined rows and a kept
    // shared matmul's output; what reruns writes its tensors again.
    router_forward(lt, mt, layer, routed);
    const double permute_bytes = (routed + routed_rows_k(routed)) * d_.h * d_.act_bytes;
    compute(Op::elementwise, n_.moe_permute, 0, permute_bytes);
    if (df_) io({lt.ln2, mt.routing}, {mt.in, opt(mt.in_p)});  // under EP nothing reads it: the dispatch is kept
    routed_experts_forward(mt, layer);  // under EP the combine's rows are kept: nothing reads this fc2 output
    if (d_.shared > 0) {
        const double fs = d_.shared * d_.expert_ffn;
        const bool glu = gated(m_.ffn);
        const double in_n = glu ? (shared_rerun[0] ? fs : 0) + (shared_rerun[1] ? fs : 0) : (shared_rerun[0] ? fs : 0);
        if (in_n > 0) {
            gemm_cast(n_.shared_fc1, d_.tokens, in_n, d_.h);
            if (df_) io({lt.ln2, prm("shared.fc1.weight", layer)}, {mt.sfc1});
        }
        compute(Op::elementwise, n_.shared_act, 0, d_.mats * d_.tokens * fs * d_.act_bytes);
        if (df_) io({mt.sfc1}, {mt.sact});
        if (shared_rerun[glu ? 2 : 1]) {
            gemm_cast(n_.shared_fc2, d_.tokens, d_.h, fs);
            if (df_) io({mt.sact, prm("shared.fc2.weight", layer)}, {mt.sfc2});
        }
    }
    compute(Op::elementwise, n_.moe_unpermute, 0, permute_bytes);
    if (df_) io({mt.comb, mt.routing, opt(mt.sfc2)}, {lt.fc2});
}

}  // namespace strata::sim::lower_detail
