// Multi-head latent attention's projections (DeepSeek-V2/V3, Megatron-Core MLASelfAttention), per
// rank and micro-batch: the replicated down-projections on the rank's sequence shard, the latent
// norms, the gather over TP under SP, the column-parallel up-projections and RoPE on the rope part
// of the query and of the key all heads share; and the mirror in the backward. The attention core
// and the output projection are every layer's (layer_ops.cpp).
#include "lower_impl.hpp"

namespace strata::sim::lower_detail {

// Dataflow: a latent is its own tensor (the query's, q_lora wide; the key/value's, kv_lora + rope
// wide, kept for the norms' backward: tensors.cpp's attn.latent), normed into q_n, kv_n and the
// rope key split off (k_rope); under SP the three are gathered over TP (attn.up_in, kept for the
// up-projections' weight gradients), without SP the gathered ones are those themselves. RoPE
// assembles the attention's [Q | K | V] rows (heads/tp x (qk, qk, v)) from the up-projections'
// outputs and the shared rope key, as Transformer Engine's fused MLA RoPE writes query, key and
// value. Without q_lora_rank the query projection reads the gathered norm output (ln1_g).
RankLowering::MlaTensors RankLowering::mla_tensors(int l) {
    MlaTensors t{};
    if (!df_) {
        std::fill_n(&t.q_lat, sizeof(MlaTensors) / sizeof(int), -1);
        return t;
    }
    const MlaSpec& a = *m_.mla;
    const double S = d_.tokens_sp, T = d_.tokens, hq = d_.heads / d_.tp;
    const double ql = static_cast<double>(a.q_lora_rank), kl = static_cast<double>(a.kv_lora_rank);
    const double r = static_cast<double>(a.qk_rope_head_dim), nope = static_cast<double>(a.qk_nope_head_dim);
    const bool sp = d_.sp, qlat = a.q_lora_rank > 0;
    auto A = [&](int n, double rows, double cols) { return act(n, l, rows, cols); };
    auto G = [&](int n, double rows, double cols) { return grad(n, l, rows, cols); };
    t.q_lat = qlat ? A(n_.t_mla_q_lat, S, ql) : -1;
    t.kv_lat = A(n_.t_mla_kv_lat, S, kl + r);
    t.q_n = qlat ? A(n_.t_mla_q_n, S, ql) : -1;
    t.kv_n = A(n_.t_mla_kv_n, S, kl);
    t.k_rope = A(n_.t_mla_k_rope, S, r);
    t.q_g = !qlat ? -1 : sp ? A(n_.t_mla_q_g, T, ql) : t.q_n;
    t.kv_g = sp ? A(n_.t_mla_kv_g, T, kl) : t.kv_n;
    t.k_rope_g = sp ? A(n_.t_mla_k_rope_g, T, r) : t.k_rope;
    t.q = A(n_.t_mla_q, T, hq * d_.qk_dim);
    t.kv = A(n_.t_mla_kv, T, hq * (nope + d_.v_dim));
    t.dq = G(n_.g_mla_q, T, hq * d_.qk_dim);
    t.dkv = G(n_.g_mla_kv, T, hq * (nope + d_.v_dim));
    t.dq_n = qlat ? G(n_.g_mla_q_n, S, ql) : -1;
    t.dkv_n = G(n_.g_mla_kv_n, S, kl);
    t.dk_rope = G(n_.g_mla_k_rope, S, r);
    t.dq_g = !qlat ? -1 : sp ? G(n_.g_mla_q_g, T, ql) : t.dq_n;
    t.dkv_g = sp ? G(n_.g_mla_kv_g, T, kl) : t.dkv_n;
    t.dk_rope_g = sp ? G(n_.g_mla_k_rope_g, T, r) : t.dk_rope;
    t.dq_lat = qlat ? G(n_.g_mla_q_lat, S, ql) : -1;
    t.dkv_lat = G(n_.g_mla_kv_lat, S, kl + r);
    return t;
}

// RoPE on the query's and the shared key's rope part, with the assembly of the attention's rows
// around it, as Megatron-Core's fused MLA RoPE moves them (fused_mla_yarn_rope_apply.py): the
// query's rope part rotated in place (read, write), the key/value projection and the rope key read
// and the key (qk wide a head) and the value written. The backward moves the same bytes the other
// way. (The runtime writes the query whole into the attention's rows: its cost is not this.)
double RankLowering::mla_rope_bytes() const {
    const MlaSpec& a = *m_.mla;
    const double hq = d_.heads / d_.tp, r = static_cast<double>(a.qk_rope_head_dim), nope = static_cast<double>(a.qk_nope_head_dim);
    const double read = hq * r + hq * (nope + d_.v_dim) + r, write = hq * r + hq * (d_.qk_dim + d_.v_dim);
    return d_.tokens * (read + write) * d_.act_bytes;
}

// The down-projections are replicated over TP and run on the rank's sequence shard (all tokens
// without SP); their latents are normed and, with SP, all-gathered over TP (q_lora + kv_lora +
// rope wide instead of h); the up-projections are column-parallel over heads; RoPE touches the
// query's and the shared key's rope part. The output projection is the row-parallel one of every
// layer (layer_forward).
void RankLowering::mla_projections_forward(const LayerTensors& t) {
    const MlaSpec& a = *m_.mla;
    const MlaTensors mt = mla_tensors(layer_);
    const double lat = static_cast<double>(a.q_lora_rank + a.kv_lora_rank), rope = static_cast<double>(a.qk_rope_head_dim);
    const bool sp = d_.tp > 1 && d_.sp, qlat = a.q_lora_rank > 0;
    for (const MlaLinear& l : mla_down_) {
        gemm_cast(l.name, d_.tokens_sp, l.out, l.in);
        const bool q = l.name == n_.q_down;
        if (df_) io({t.ln1, prm(q ? "q_down.weight" : "kv_down.weight", layer_)}, {q ? mt.q_lat : mt.kv_lat});
    }
    compute(Op::norm, n_.latent_norm, 0, 2 * d_.tokens_sp * lat * d_.act_bytes);
    if (df_)
        io({opt(mt.q_lat), mt.kv_lat, qlat ? prm("q_latent_norm.weight", layer_) : -1, prm("kv_latent_norm.weight", layer_)},
           {opt(mt.q_n), mt.kv_n, mt.k_rope});
    if (sp) {
        wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_gather, Group::tp, d_.tokens * (lat + rope) * d_.act_bytes, n_.tp_ag));
        if (df_) io({opt(mt.q_n), mt.kv_n, mt.k_rope}, {opt(mt.q_g), mt.kv_g, mt.k_rope_g});
    }
    if (!qlat) tp_forward_in(true, t.ln1, t.ln1_g);  // an uncompressed query projection reads the gathered hidden states
    mla_up_projections_forward(mt);
}

// The column-parallel up-projections and RoPE on the query's and the shared key's rope part.
void RankLowering::mla_up_projections_forward(const MlaTensors& mt) {
    const LayerTensors t = layer_tensors(layer_);
    for (const MlaLinear& l : mla_up_) {
        if (l.cast) gemm_cast(l.name, d_.tokens, l.out / d_.tp, l.in);
        else gemm(l.name, d_.tokens, l.out / d_.tp, l.in);
        if (!df_) continue;
        if (l.name == n_.kv_up) io({mt.kv_g, prm("kv_up.weight", layer_)}, {mt.kv});
        else if (l.name == n_.q_up) io({mt.q_g, prm("q_up.weight", layer_)}, {mt.q});
        else io({t.ln1_g, prm("q.weight", layer_)}, {mt.q});
    }
    compute(Op::elementwise, n_.rope, 0, mla_rope_bytes());
    if (df_) io({mt.q, mt.kv, mt.k_rope_g}, {t.qkv});
}

// The mirror: RoPE, the up-projections' dgrad and wgrad, the latents' gradient reduced over TP
// (reduce-scatter with SP, all-reduce without: the up-projections are column-parallel), the latent
// norms, then the replicated down-projections on the shard, their input gradients summed into
// the norm's (the first writes it, the next adds; without q_lora_rank the query projection's,
// reduced with the latents', comes first). Without q_lora_rank under SP the query projection's
// weight gradient needs the gathered norm output again, gathered beside the key/value's GEMMs.
void RankLowering::mla_projections_backward(const LayerTensors& t) {
    const MlaSpec& a = *m_.mla;
    const MlaTensors mt = mla_tensors(layer_);
    const double lat = static_cast<double>(a.q_lora_rank + a.kv_lora_rank), rope = static_cast<double>(a.qk_rope_head_dim);
    const bool sp = d_.tp > 1 && d_.sp, qlat = a.q_lora_rank > 0;
    compute(Op::elementwise, n_.rope, 0, mla_rope_bytes());
    if (df_) io({t.dqkv}, {mt.dq, mt.dkv, mt.dk_rope_g});
    int input_ev = -1;
    if (!qlat && sp) {
        input_ev = collective(Stream::tp_comm, CollKind::all_gather, Group::tp, d_.tokens * d_.h * d_.act_bytes, n_.tp_ag_input);
        if (df_) io({t.ln1}, {t.ln1_g});
    }
    for (auto it = mla_up_.rbegin(); it != mla_up_.rend(); ++it) {
        const double out = it->out / d_.tp;
        const bool kv = it->name == n_.kv_up, q_up = it->name == n_.q_up;
        const char* w = kv ? "kv_up.weight" : q_up ? "q_up.weight" : "q.weight";
        gemm_cast(it->name, d_.tokens, it->in, out);  // dgrad
        if (df_) io({kv ? mt.dkv : mt.dq, prm(w, layer_)}, {kv ? mt.dkv_g : q_up ? mt.dq_g : t.dln1});
        if (!kv && !q_up && input_ev >= 0) wait(Stream::compute, input_ev);
        {
            const std::size_t wb = weight_begin();  // DualPipe's zero bubble: to the weight pass
            gemm(it->name, it->in, out, d_.tokens);  // wgrad
            if (df_) io({kv ? mt.kv_g : q_up ? mt.q_g : t.ln1_g, kv ? mt.dkv : mt.dq}, {prm_grad(w, layer_)});
            weight_end(wb);
        }
    }
    if (d_.tp > 1) {
        wait(Stream::compute, collective(Stream::tp_comm, sp ? CollKind::reduce_scatter : CollKind::all_reduce, Group::tp,
                                         d_.tokens * (lat + rope + (qlat ? 0 : d_.h)) * d_.act_bytes, sp ? n_.tp_rs : n_.tp_ar));
        if (df_) io({qlat ? mt.dq_g : t.dln1, mt.dkv_g, mt.dk_rope_g}, {qlat ? mt.dq_n : t.dln1_s, mt.dkv_n, mt.dk_rope});
    }
    compute(Op::norm, n_.latent_norm, 0, 3 * d_.tokens_sp * lat * d_.act_bytes);
    if (df_)
        io({opt(mt.q_lat), mt.kv_lat, opt(mt.dq_n), mt.dkv_n, mt.dk_rope, qlat ? prm("q_latent_norm.weight", layer_) : -1,
            prm("kv_latent_norm.weight", layer_)},
           {opt(mt.dq_lat), mt.dkv_lat, qlat ? prm_grad("q_latent_norm.weight", layer_) : -1, prm_grad("kv_latent_norm.weight", layer_)});
    bool written = !qlat;  // the query projection's input gradient is in dln1_s already
    for (auto it = mla_down_.rbegin(); it != mla_down_.rend(); ++it) {
        const bool q = it->name == n_.q_down;
        const char* w = q ? "q_down.weight" : "kv_down.weight";
        gemm_cast(it->name, d_.tokens_sp, d_.h, it->out);  // dgrad
        if (df_) io({q ? mt.dq_lat : mt.dkv_lat, prm(w, layer_), written ? t.dln1_s : -1}, {t.dln1_s});
        written = true;
        {
            const std::size_t wb = weight_begin();  // DualPipe's zero bubble: to the weight pass
            gemm(it->name, d_.h, it->out, d_.tokens_sp);  // wgrad
            if (df_) io({t.ln1, q ? mt.dq_lat : mt.dkv_lat}, {prm_grad(w, layer_)});
            weight_end(wb);
        }
    }
}

}  // namespace strata::sim::lower_detail
