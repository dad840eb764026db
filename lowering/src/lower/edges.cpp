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
// Megatron's vocab-parallel loss on fp32 logits (plan.loss_upcast, not eager: the eager loss's
// casts are in its bytes) in a 2-byte plan: logits.float() before it and the gradient's cast back
// after it are kernels of their own (read one width, write the other).
bool RankLowering::loss_cast() const { return p_.loss_upcast && !p_.eager_cross_entropy && d_.act_bytes < 4; }

double RankLowering::loss_bytes(bool backward) const {
    const double logits = d_.tokens * d_.vocab / d_.tp, a = d_.act_bytes;
    if (p_.eager_cross_entropy) return logits * (backward ? 4 + 16 + 4 + a : a + 4 + 12);
    if (p_.loss_upcast) return logits * 8;
    return logits * (backward ? 2 * a : a);
}

// Final norm, vocab-parallel logits, cross-entropy. The loss works on this rank's vocabulary shard:
// per token its largest logit, the sum of exponentials below it and the target's logit if this
// rank holds the target; with TP the ranks all-gather those three numbers and combine them into the
// log-sum-exp and the loss (a vocab-parallel cross-entropy in one gather, where Megatron uses three
// all-reduces of the same numbers).
void RankLowering::head_forward() {
    wait(Stream::compute, head_ready_);
    head_ready_ = -1;
    fetch_edge(true);
    const int xl = act(n_.t_x, m_.layers, d_.tokens_sp, d_.h), xf = act(n_.t_xf, -1, d_.tokens_sp, d_.h);
    compute(Op::norm, n_.final_norm, 0, 2 * d_.tokens_sp * d_.h * d_.act_bytes);
    if (df_) io({xl, prm("final_norm.weight", -1), bias("final_norm.bias", -1, false)}, {xf});
    const int xfg = d_.tp > 1 && d_.sp ? act(n_.t_xf_g, -1, d_.tokens, d_.h) : xf;
    tp_forward_in(true, xf, xfg);
    const AllocRun ws = alloc_list(head_fwd_ws_desc_, head_fwd_ws_ids_);  // the logits beside their fp32 copy
    const int logits = act(n_.t_logits, -1, d_.tokens, d_.vocab / d_.tp);
    gemm_high(n_.logits, d_.tokens, d_.vocab / d_.tp, d_.h);  // vocab-parallel head
    if (loss_cast()) {  // the head's output in its dtype, then the fp32 copy the loss keeps
        const int low = act(n_.t_logits_lp, -1, d_.tokens, d_.vocab / d_.tp);
        if (df_) io({xfg, head_weight(false)}, {low});
        compute(Op::elementwise, n_.loss_cast, 0, d_.tokens * d_.vocab / d_.tp * (d_.act_bytes + 4));
        if (df_) io({low}, {logits});
    } else if (df_) {
        io({xfg, head_weight(false)}, {logits});
    }
    // Vocab-parallel cross-entropy (its traffic: loss_bytes), the softmax or log-sum-exp kept for backward.
    // The per-token loss is fp32 whatever the plan's precision: a statistic, not an activation.
    const int stats = act(n_.t_loss_stats, -1, d_.tokens, 3, TensorRole::stats), loss = act(n_.t_loss, -1, d_.tokens, 1, TensorRole::stats);
    compute(Op::loss, n_.loss, 0, loss_bytes(false));
    if (d_.tp > 1) {
        if (df_) io({logits, tokens()}, {stats});
        const int gathered = act(n_.t_loss_stats_g, -1, d_.tokens, 3 * d_.tp, TensorRole::stats);
        wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_gather, Group::tp, d_.tokens * 3 * d_.tp * 4, n_.tp_ag));
        if (df_) io({stats}, {gathered});
        compute(Op::elementwise, n_.loss_combine, 0, d_.tokens * (3 * d_.tp + 1) * 4);
        if (df_) io({gathered}, {loss});
    } else if (df_) {
        io({logits, tokens()}, {stats, loss});
    }
    free_list(ws);
}

void RankLowering::head_backward() {
    fetch_edge(true);
    const int xl = act(n_.t_x, m_.layers, d_.tokens_sp, d_.h), xf = act(n_.t_xf, -1, d_.tokens_sp, d_.h);
    const int xfg = d_.tp > 1 && d_.sp ? act(n_.t_xf_g, -1, d_.tokens, d_.h) : xf;
    const int logits = act(n_.t_logits, -1, d_.tokens, d_.vocab / d_.tp);
    const int stats = d_.tp > 1 ? act(n_.t_loss_stats_g, -1, d_.tokens, 3 * d_.tp, TensorRole::stats)
                                : act(n_.t_loss_stats, -1, d_.tokens, 3, TensorRole::stats);
    // Megatron's cross-entropy turns its fp32 softmax into the gradient in place (the memory
    // model's rule, tensors.cpp head_workspace); a loss in the logits' own dtype or an eager one
    // writes a new tensor.
    const bool in_place = p_.loss_upcast && !p_.eager_cross_entropy;
    int dlogits = in_place ? logits : grad(n_.g_logits, -1, d_.tokens, d_.vocab / d_.tp);
    const int dxf = grad(n_.g_xf, -1, d_.tokens, d_.h);
    const AllocRun ws = alloc_list(head_ws_desc_, head_ws_ids_);  // the gradient's cast, an unfused wgrad
    compute(Op::loss, n_.loss, 0, loss_bytes(true));
    if (df_) io({logits, tokens(), stats}, {dlogits});
    if (loss_cast()) {  // the fp32 gradient back to the logits' dtype for the head's GEMMs
        const int low = grad(n_.g_logits_lp, -1, d_.tokens, d_.vocab / d_.tp);
        compute(Op::elementwise, n_.loss_cast, 0, d_.tokens * d_.vocab / d_.tp * (4 + d_.act_bytes));
        if (df_) io({dlogits}, {low});
        dlogits = low;
    }
    gemm_high(n_.logits, d_.tokens, d_.h, d_.vocab / d_.tp);  // dgrad
    if (df_) io({dlogits, head_weight(false)}, {dxf});
    gemm_high(n_.logits, d_.h, d_.vocab / d_.tp, d_.tokens);  // wgrad
    if (df_) io({xfg, dlogits}, {head_weight(true)});
    free_list(ws);
    int dxf_in = dxf;
    if (d_.tp > 1) {
        const double bytes = d_.tokens * d_.h * d_.act_bytes;
        wait(Stream::compute, collective(Stream::tp_comm, d_.sp ? CollKind::reduce_scatter : CollKind::all_reduce,
                                         Group::tp, bytes, d_.sp ? n_.tp_rs : n_.tp_ar));
        if (d_.sp) dxf_in = grad(n_.g_xf_s, -1, d_.tokens_sp, d_.h);
        if (df_) io({dxf}, {dxf_in});
    }
    compute(Op::norm, n_.final_norm, 0, 3 * d_.tokens_sp * d_.h * d_.act_bytes);
    if (df_)
        io({xl, dxf_in, prm("final_norm.weight", -1)},
           {grad(n_.g_x, m_.layers, d_.tokens_sp, d_.h), prm_grad("final_norm.weight", -1), bias("final_norm.bias", -1, true)});
}

// One MTP module (Megatron-Core MultiTokenPredictionLayer, DeepSeek-V3 Sec. 2.2): look up the
// next tokens in the embedding copy, normalise them and the main hidden state, project the
// concatenation 2h -> h (column-parallel: with SP its input is gathered over the sequence, its
// output over the hidden dimension), run a layer built like the last decoder layer, then the
// shared head and loss.
void RankLowering::mtp_forward() {
    const double act = d_.tokens_sp * d_.h * d_.act_bytes;
    compute(Op::embedding, n_.mtp_embedding, 0, 2 * act);
    compute(Op::norm, n_.mtp_norms, 0, 2 * 2 * act);
    if (d_.tp > 1 && d_.sp)
        wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_gather, Group::tp, 2 * d_.tokens * d_.h * d_.act_bytes, n_.tp_ag));
    gemm_cast(n_.mtp_proj, d_.tokens, d_.h / d_.tp, 2 * d_.h);
    if (d_.tp > 1)
        wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_gather, Group::tp, d_.tokens * d_.h * d_.act_bytes, n_.tp_ag));
    mtp_pass_ = true;
    layer_forward(mtp_layer_kind(m_), Phase::forward);
    join_deferred();
    mtp_pass_ = false;
    head_forward();
}

void RankLowering::mtp_backward() {
    head_backward();
    mtp_pass_ = true;
    layer_backward(mtp_layer_kind(m_), 0);
    join_deferred();
    mtp_pass_ = false;
    layer_ = -1;
    // The projection's gradients: dgrad to the 2h input (reduced over TP: reduce-scatter with SP),
    // wgrad; then the two norms and the embedding's gradient (scatter-add into the copy).
    const double act = d_.tokens_sp * d_.h * d_.act_bytes;
    gemm_cast(n_.mtp_proj, d_.tokens, 2 * d_.h, d_.h / d_.tp);
    gemm(n_.mtp_proj, 2 * d_.h, d_.h / d_.tp, d_.tokens);
    if (d_.tp > 1)
        wait(Stream::compute, collective(Stream::tp_comm, d_.sp ? CollKind::reduce_scatter : CollKind::all_reduce, Group::tp,
                                         2 * d_.tokens * d_.h * d_.act_bytes, d_.sp ? n_.tp_rs : n_.tp_ar));
    compute(Op::norm, n_.mtp_norms, 0, 2 * 3 * act);
    compute(Op::embedding, n_.mtp_embedding, 0, 3 * act);
}

}  // namespace strata::sim::lower_detail
