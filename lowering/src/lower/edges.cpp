// The model's edges as instructions: the embedding (word and position lookup, summed over TP),
// the output head with its vocab-parallel cross-entropy, and the MTP modules, forward and backward.
#include "lower_impl.hpp"

namespace strata::sim::lower_detail {

// Lookup of the word (vocab-parallel: each TP rank holds V/tp rows and writes zeros for the
// others) and position embeddings; with TP the partial lookups are summed (Megatron's
// VocabParallelEmbedding all-reduce; with SP and no position table, a reduce-scatter straight
// into the sequence shard), then the position table is added and, with SP, the rank keeps its
// shard of the sequence (Megatron-Core's LanguageModelEmbedding); last, the embedding dropout.
void RankLowering::embedding_forward() {
    wait(Stream::compute, emb_ready_);
    emb_ready_ = -1;
    fetch_edge(false);
    const bool learned = m_.position == PositionKind::learned;
    const bool rs_direct = d_.tp > 1 && d_.sp && !learned;
    const int x0 = act(n_.t_x, 0, d_.tokens_sp, d_.h);
    const int e = learned || rs_direct ? act(n_.t_emb, -1, d_.tokens, d_.h) : x0;
    // Lookup: read the rows and write the (sequence-sharded with SP) output.
    compute(Op::embedding, n_.embedding, 0, 2 * d_.tokens_sp * d_.h * d_.act_bytes);
    if (df_) io({tokens(), prm("word_embedding.weight", -1)}, {e});
    if (d_.tp > 1) {
        const double bytes = d_.tokens * d_.h * d_.act_bytes;
        if (rs_direct) {
            wait(Stream::compute, collective(Stream::tp_comm, CollKind::reduce_scatter, Group::tp, bytes, n_.tp_rs));
            if (df_) io({e}, {x0});
        } else {
            wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_reduce, Group::tp, bytes, n_.tp_ar));
            if (df_) io({e}, {e});
        }
    }
    if (learned) {  // read the summed rows and the positions, write the (shard of the) sum
        compute(Op::elementwise, n_.emb_position, 0, 3 * d_.tokens_sp * d_.h * d_.act_bytes);
        if (df_) io({e, prm("position_embedding.weight", -1)}, {x0});
    }
    if (m_.dropout > 0) {  // Megatron's embedding_dropout, its own kernel: read, write, and a 1-byte mask
        compute(Op::elementwise, n_.emb_dropout, 0, (2 * d_.act_bytes + 1) * d_.tokens_sp * d_.h);
        if (df_) io({x0}, {x0, act(n_.t_mask_emb, -1, d_.tokens_sp, d_.h, TensorRole::mask)});
    }
}

// The backward of embedding_forward: with SP the sequence shards' gradients are gathered over TP
// first; the word rows this rank holds and the position rows accumulate them.
void RankLowering::embedding_backward() {
    const int g0 = grad(n_.g_x, 0, d_.tokens_sp, d_.h);
    if (m_.dropout > 0) {  // through the mask: read the gradient and the mask, write the gradient
        compute(Op::elementwise, n_.emb_dropout, 0, (2 * d_.act_bytes + 1) * d_.tokens_sp * d_.h);
        if (df_) io({g0, act(n_.t_mask_emb, -1, d_.tokens_sp, d_.h, TensorRole::mask)}, {g0});
    }
    int g = g0;
    if (d_.tp > 1 && d_.sp) {
        g = grad(n_.g_emb_g, -1, d_.tokens, d_.h);
        wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_gather, Group::tp, d_.tokens * d_.h * d_.act_bytes, n_.tp_ag));
        if (df_) io({g0}, {g});
    }
    compute(Op::embedding, n_.embedding, 0, 3 * d_.tokens_sp * d_.h * d_.act_bytes);
    if (df_)
        io({tokens(), g}, {prm_grad("word_embedding.weight", -1),
                           m_.position == PositionKind::learned ? prm_grad("position_embedding.weight", -1) : -1});
}

// The weight of the output layer: its own, or the word embedding (tied; on a head stage apart
// from the embedding, Megatron's copy of it).
int RankLowering::head_weight(bool grad_of) {
    const char* name = m_.tied_embeddings ? "word_embedding.weight" : "lm_head.weight";
    return grad_of ? prm_grad(name, -1) : prm(name, -1);
}

// What the cross-entropy's kernels move through HBM, per logit of this rank's shard, as each
// implementation is written:
// - fused on fp32 logits (plan.loss_upcast, Megatron's vocab-parallel loss): the forward reads the
//   fp32 logits and writes the fp32 softmax, the backward reads it and writes the gradient in
//   place: 8 bytes each way;
// - fused on the logits' own dtype (loss_upcast off: flash-attn's CrossEntropyLoss, llm.c's
//   fused_classifier): the forward reads the logits once for the log-sum-exp, the backward reads
//   them again and writes the gradient: 1 and 2 element-sizes;
// - eager PyTorch (plan.eager_cross_entropy, F.cross_entropy(logits.float())): the forward's cast
//   (read 2, write 4) and log_softmax (read its input for the max, again for the sum of
//   exponentials, write the output: 12); the backward's zero-filled nll gradient (4),
//   log_softmax_backward (read the gradient for its row sum, read it again with the output, write:
//   16) and the cast back (read 4, write 2).
//   Under TP in loss_parallel (plan.loss_parallel) DTensor decomposes log_softmax into separate
//   passes, and the backward into zeros + exp(output), times the gradient.
// Megatron's vocab-parallel loss on fp32 logits (plan.loss_upcast, not eager: the eager loss's
// casts are in its bytes) in a 2-byte plan: logits.float() before it and the gradient's cast back
// after it are kernels of their own (read one width, write the other).
bool RankLowering::loss_cast() const { return p_.loss_upcast && !p_.eager_cross_entropy && d_.act_bytes < 4; }

double RankLowering::loss_bytes(bool backward) const {
    const double logits = d_.tokens * d_.vocab / d_.tp, a = d_.act_bytes;
    // loss_parallel's decomposition: forward the max (read 4), the shift, exp, and result (read 4,
    // write 4 each) and the sum (read 4); backward the zeros (write 4), exp of the output (read 4,
    // write 4), their sum (read 8, write 4) and the product (read 4, write 4), then the cast back.
    if (p_.eager_loss_parallel()) return logits * (backward ? 4 + 8 + 12 + 8 + 4 + a : a + 4 + 4 + 8 + 8 + 4 + 8);
    if (p_.eager_cross_entropy) return logits * (backward ? 4 + 16 + 4 + a : a + 4 + 12);
    if (p_.loss_upcast) return logits * 8;
    return logits * (backward ? 2 * a : a);
}

// Final norm, vocab-parallel logits, cross-entropy. The loss works on this rank's vocabulary shard:
// per token its largest logit, the sum of exponentials below it and the target's logit if this
// rank holds the target; with TP the ranks all-gather those three numbers and combine them into the
// log-sum-exp and the loss (a vocab-parallel cross-entropy in one gather, where Megatron uses three
// all-reduces of the same numbers). `depth` > 0: MTP module `depth`'s head (its own final norm,
// the shared output layer, its shifted tokens), its tensors under layer number layers + 2 depth.
RankLowering::HeadOf RankLowering::head_of(int depth) const {
    if (depth == 0) return {-1, m_.layers, -1, "final_norm.weight", "final_norm.bias"};
    const int lk = mtp_layer_id(m_, depth);
    return {lk + 1, lk + 1, lk, "mtp.final_norm.weight", "mtp.final_norm.bias"};
}

void RankLowering::head_forward(int depth) {
    wait(Stream::compute, head_ready_);
    head_ready_ = -1;
    fetch_edge(true);
    const HeadOf h = head_of(depth);
    const int key = h.key, nl = h.norm_layer;
    const char *nw = h.norm_weight, *nb = h.norm_bias;
    const int xl = act(n_.t_x, h.input, d_.tokens_sp, d_.h), xf = act(n_.t_xf, key, d_.tokens_sp, d_.h);
    const int tok = depth == 0 ? tokens() : mtp_tokens(depth);
    compute(Op::norm, n_.final_norm, 0, 2 * d_.tokens_sp * d_.h * d_.act_bytes);
    if (df_) io({xl, prm(nw, nl), bias(nb, nl, false)}, {xf});
    const int xfg = d_.tp > 1 && d_.sp ? act(n_.t_xf_g, key, d_.tokens, d_.h) : xf;
    tp_forward_in(true, xf, xfg);
    const AllocRun ws = alloc_list(head_fwd_ws_desc_, head_fwd_ws_ids_);  // the logits beside their fp32 copy
    const int logits = act(n_.t_logits, key, d_.tokens, d_.vocab / d_.tp);
    gemm_high(n_.logits, d_.tokens, d_.vocab / d_.tp, d_.h);  // vocab-parallel head
    if (loss_cast()) {  // the head's output in its dtype, then the fp32 copy the loss keeps
        const int low = act(n_.t_logits_lp, key, d_.tokens, d_.vocab / d_.tp);
        if (df_) io({xfg, head_weight(false)}, {low});
        compute(Op::elementwise, n_.loss_cast, 0, d_.tokens * d_.vocab / d_.tp * (d_.act_bytes + 4));
        if (df_) io({low}, {logits});
    } else if (df_) {
        io({xfg, head_weight(false)}, {logits});
    }
    // Vocab-parallel cross-entropy (its traffic: loss_bytes), the softmax or log-sum-exp kept for backward.
    // The per-token loss is fp32 whatever the plan's precision: a statistic, not an activation.
    const int stats = act(n_.t_loss_stats, key, d_.tokens, 3, TensorRole::stats), loss = act(n_.t_loss, key, d_.tokens, 1, TensorRole::stats);
    compute(Op::loss, n_.loss, 0, loss_bytes(false));
    if (d_.tp > 1) {
        if (df_) io({logits, tok}, {stats});
        const int gathered = act(n_.t_loss_stats_g, key, d_.tokens, 3 * d_.tp, TensorRole::stats);
        wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_gather, Group::tp, d_.tokens * 3 * d_.tp * 4, n_.tp_ag));
        if (df_) io({stats}, {gathered});
        compute(Op::elementwise, n_.loss_combine, 0, d_.tokens * (3 * d_.tp + 1) * 4);
        if (df_) io({gathered}, {loss});
    } else if (df_) {
        io({logits, tok}, {stats, loss});
    }
    free_list(ws);
}

void RankLowering::head_backward(int depth) {
    fetch_edge(true);
    const HeadOf h = head_of(depth);
    const int key = h.key, nl = h.norm_layer, xin = h.input;
    const char *nw = h.norm_weight, *nb = h.norm_bias;
    const int xl = act(n_.t_x, xin, d_.tokens_sp, d_.h), xf = act(n_.t_xf, key, d_.tokens_sp, d_.h);
    const int xfg = d_.tp > 1 && d_.sp ? act(n_.t_xf_g, key, d_.tokens, d_.h) : xf;
    const int logits = act(n_.t_logits, key, d_.tokens, d_.vocab / d_.tp);
    const int stats = d_.tp > 1 ? act(n_.t_loss_stats_g, key, d_.tokens, 3 * d_.tp, TensorRole::stats)
                                : act(n_.t_loss_stats, key, d_.tokens, 3, TensorRole::stats);
    // Megatron's cross-entropy turns its fp32 softmax into the gradient in place (the memory
    // model's rule, tensors.cpp head_workspace); a loss in the logits' own dtype or an eager one
    // writes a new tensor.
    const bool in_place = p_.loss_upcast && !p_.eager_cross_entropy;
    int dlogits = in_place ? logits : grad(n_.g_logits, key, d_.tokens, d_.vocab / d_.tp);
    const int dxf = grad(n_.g_xf, key, d_.tokens, d_.h);
    const AllocRun ws = alloc_list(head_ws_desc_, head_ws_ids_);  // the gradient's cast, an unfused wgrad
    compute(Op::loss, n_.loss, 0, loss_bytes(true));
    if (df_) io({logits, depth == 0 ? tokens() : mtp_tokens(depth), stats}, {dlogits});
    if (loss_cast()) {  // the fp32 gradient back to the logits' dtype for the head's GEMMs
        const int low = grad(n_.g_logits_lp, key, d_.tokens, d_.vocab / d_.tp);
        compute(Op::elementwise, n_.loss_cast, 0, d_.tokens * d_.vocab / d_.tp * (4 + d_.act_bytes));
        if (df_) io({dlogits}, {low});
        dlogits = low;
    }
    // Under SP the column-parallel head keeps its input's shard and gathers it again for the
    // wgrad, beside the dgrad (Megatron's linear with sequence parallelism, as the layers' fc1).
    int input_ev = -1;
    if (d_.tp > 1 && d_.sp) {
        input_ev = collective(Stream::tp_comm, CollKind::all_gather, Group::tp, d_.tokens * d_.h * d_.act_bytes, n_.tp_ag_input);
        if (df_) io({xf}, {xfg});
    }
    gemm_high(n_.logits, d_.tokens, d_.h, d_.vocab / d_.tp);  // dgrad
    if (df_) io({dlogits, head_weight(false)}, {dxf});
    if (input_ev >= 0) wait(Stream::compute, input_ev);
    gemm_high(n_.logits, d_.h, d_.vocab / d_.tp, d_.tokens);  // wgrad
    if (df_) io({xfg, dlogits}, {head_weight(true)});
    free_list(ws);
    int dxf_in = dxf;
    if (d_.tp > 1) {
        const double bytes = d_.tokens * d_.h * d_.act_bytes;
        wait(Stream::compute, collective(Stream::tp_comm, d_.sp ? CollKind::reduce_scatter : CollKind::all_reduce,
                                         Group::tp, bytes, d_.sp ? n_.tp_rs : n_.tp_ar));
        if (d_.sp) dxf_in = grad(n_.g_xf_s, key, d_.tokens_sp, d_.h);
        if (df_) io({dxf}, {dxf_in});
    }
    // The hidden state also feeds the next MTP module, whose backward ran first: its gradient
    // joins the norm's as the residual.
    const int next = df_ && depth < m_.mtp_depth ? grad(n_.g_mtp_dh, mtp_layer_id(m_, depth + 1), d_.tokens_sp, d_.h) : -1;
    compute(Op::norm, n_.final_norm, 0, 3 * d_.tokens_sp * d_.h * d_.act_bytes);
    if (df_)
        io({xl, dxf_in, prm(nw, nl), next}, {grad(n_.g_x, xin, d_.tokens_sp, d_.h), prm_grad(nw, nl), bias(nb, nl, true)});
}

// MTP module k's tokens: on each row the token k places on and its target (the sequence's end
// masks the rows it passes: Megatron-Core's roll_tensor and rolled loss mask).
int RankLowering::mtp_tokens(int k) {
    if (!df_) return -1;
    return act(n_.t_tokens_mtp, k, d_.tokens, 2, TensorRole::tokens);
}

// One MTP module (Megatron-Core MultiTokenPredictionLayer, DeepSeek-V3 Sec. 2.2): look up the
// shifted tokens in the embedding (vocab-parallel, summed over TP), normalise them and the hidden
// state below (the decoder's output, or the previous module's), project the concatenation 2h -> h
// (column-parallel: with SP its input is gathered over the sequence, its output over the hidden
// dimension, then this rank's rows kept), run a layer built like the last decoder layer, then its
// own final norm and the shared head and loss.
void RankLowering::mtp_forward(int k) {
    const double act_b = d_.tokens_sp * d_.h * d_.act_bytes, T = d_.tokens, S = d_.tokens_sp, H = d_.h, tp = d_.tp;
    const bool sp = d_.tp > 1 && d_.sp;
    const int lk = df_ ? mtp_layer_id(m_, k) : mtp_layer_kind(m_);
    const int e_full = act(n_.t_emb, lk, T, H);
    int e = e_full;
    compute(Op::embedding, n_.mtp_embedding, 0, 2 * act_b);
    if (df_) io({mtp_tokens(k), prm("word_embedding.weight", -1)}, {e_full});
    if (d_.tp > 1) {  // the partial lookups summed, as the decoder's embedding does
        if (sp) {
            e = act(n_.t_mtp_e, lk, S, H);
            wait(Stream::compute, collective(Stream::tp_comm, CollKind::reduce_scatter, Group::tp, T * H * d_.act_bytes, n_.tp_rs));
        } else {
            wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_reduce, Group::tp, T * H * d_.act_bytes, n_.tp_ar));
        }
        if (df_) io({e_full}, {e});
    }
    const int hprev = act(n_.t_x, k == 1 ? m_.layers : mtp_layer_id(m_, k - 1) + 1, S, H);
    const int cat = act(n_.t_mtp_cat, lk, S, 2 * H);
    compute(Op::norm, n_.mtp_norms, 0, 2 * 2 * act_b);
    if (df_) io({e, hprev, prm("mtp.enorm.weight", lk), prm("mtp.hnorm.weight", lk)}, {cat});
    int cat_g = cat;
    if (sp) {
        cat_g = act(n_.t_mtp_cat_g, lk, T, 2 * H);
        wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_gather, Group::tp, 2 * T * H * d_.act_bytes, n_.tp_ag));
        if (df_) io({cat}, {cat_g});
    }
    const int x_in = act(n_.t_x, lk, S, H);
    const int y = d_.tp > 1 ? act(n_.t_mtp_y, lk, T, H / tp) : x_in;
    gemm_cast(n_.mtp_proj, d_.tokens, d_.h / d_.tp, 2 * d_.h);
    if (df_) io({cat_g, prm("mtp.eh_proj.weight", lk)}, {y});
    if (d_.tp > 1) {
        const int y_g = act(n_.t_mtp_y_g, lk, tp * T, H / tp);
        wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_gather, Group::tp, T * H * d_.act_bytes, n_.tp_ag));
        if (df_) io({y}, {y_g});
        // The gathered column blocks side by side (torch.cat along the hidden dimension), this
        // rank's rows of them under SP.
        compute(Op::elementwise, n_.mtp_proj_gather, 0, (T + S) * H * d_.act_bytes);
        if (df_) io({y_g}, {x_in});
    }
    mtp_pass_ = true;
    layer_forward(lk, Phase::forward);
    mtp_pass_ = false;
    head_forward(k);
}

void RankLowering::mtp_backward(int k) {
    head_backward(k);
    const double act_b = d_.tokens_sp * d_.h * d_.act_bytes, T = d_.tokens, S = d_.tokens_sp, H = d_.h, tp = d_.tp;
    const bool sp = d_.tp > 1 && d_.sp;
    const int lk = df_ ? mtp_layer_id(m_, k) : mtp_layer_kind(m_);
    mtp_pass_ = true;
    const AllocRun ws = alloc_list(mtp_ws_desc_, mtp_ws_ids_);
    layer_backward(lk, 0);
    free_list(ws);
    mtp_pass_ = false;
    layer_ = -1;
    // The layer input's gradient back to this rank's column block of the projection's output
    // (under SP gathered over the sequence first: the mirror of its scatter).
    const int dx_in = grad(n_.g_x, lk, S, H);
    int dy = dx_in;
    if (d_.tp > 1) {
        int dxg = dx_in;
        if (sp) {
            dxg = grad(n_.g_mtp_x_g, lk, T, H);
            wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_gather, Group::tp, T * H * d_.act_bytes, n_.tp_ag));
            if (df_) io({dx_in}, {dxg});
        }
        dy = grad(n_.g_mtp_y, lk, T, H / tp);
        compute(Op::elementwise, n_.mtp_proj_gather, 0, 2 * T * H / tp * d_.act_bytes);
        if (df_) io({dxg}, {dy});
    }
    // The projection's gradients: dgrad to the 2h input (reduced over TP: reduce-scatter with SP),
    // wgrad (under SP its input gathered again: the linear keeps its shard); then the two norms and
    // the embedding's gradient (scatter-add into the table or its copy).
    const int cat = act(n_.t_mtp_cat, lk, S, 2 * H);
    int cat_g = cat, input_ev = -1;
    if (sp) {
        cat_g = act(n_.t_mtp_cat_g, lk, T, 2 * H);
        input_ev = collective(Stream::tp_comm, CollKind::all_gather, Group::tp, 2 * T * H * d_.act_bytes, n_.tp_ag_input);
        if (df_) io({cat}, {cat_g});
    }
    const int dcat_g = grad(d_.tp > 1 ? n_.g_mtp_cat_g : n_.g_mtp_cat, lk, T, 2 * H);
    gemm_cast(n_.mtp_proj, d_.tokens, 2 * d_.h, d_.h / d_.tp);
    if (df_) io({dy, prm("mtp.eh_proj.weight", lk)}, {dcat_g});
    if (input_ev >= 0) wait(Stream::compute, input_ev);
    gemm(n_.mtp_proj, 2 * d_.h, d_.h / d_.tp, d_.tokens);
    if (df_) io({cat_g, dy}, {prm_grad("mtp.eh_proj.weight", lk)});
    int dcat = dcat_g;
    if (d_.tp > 1) {
        if (sp) dcat = grad(n_.g_mtp_cat, lk, S, 2 * H);
        wait(Stream::compute, collective(Stream::tp_comm, d_.sp ? CollKind::reduce_scatter : CollKind::all_reduce, Group::tp,
                                         2 * d_.tokens * d_.h * d_.act_bytes, d_.sp ? n_.tp_rs : n_.tp_ar));
        if (df_) io({dcat_g}, {dcat});
    }
    const int e = sp ? act(n_.t_mtp_e, lk, S, H) : act(n_.t_emb, lk, T, H);
    const int hprev = act(n_.t_x, k == 1 ? m_.layers : mtp_layer_id(m_, k - 1) + 1, S, H);
    const int de = grad(n_.g_mtp_e, lk, S, H), dh = grad(n_.g_mtp_dh, lk, S, H);
    compute(Op::norm, n_.mtp_norms, 0, 2 * 3 * act_b);
    if (df_)
        io({e, hprev, dcat, prm("mtp.enorm.weight", lk), prm("mtp.hnorm.weight", lk)},
           {de, dh, prm_grad("mtp.enorm.weight", lk), prm_grad("mtp.hnorm.weight", lk)});
    int de_g = de;
    if (sp) {
        de_g = grad(n_.g_mtp_e_g, lk, T, H);
        wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_gather, Group::tp, T * H * d_.act_bytes, n_.tp_ag));
        if (df_) io({de}, {de_g});
    }
    compute(Op::embedding, n_.mtp_embedding, 0, 3 * act_b);
    if (df_) io({mtp_tokens(k), de_g}, {prm_grad("word_embedding.weight", -1)});
}

}  // namespace strata::sim::lower_detail
