// One transformer layer as instructions, per rank and micro-batch: its forward (or recomputed
// forward), its backward, and the TP / SP / CP / EP communication around them, following
// Megatron-LM's layer structure. GEMM (m, n, k): Y[m,n] = X[m,k] W[k,n], flops = 2mnk; backward
// = dgrad (m, k, n) + wgrad (k, n, m), 2x forward. Memory-bound ops carry bytes, not flops.
#include "lower_impl.hpp"

namespace strata::sim::lower_detail {

// Sequence parallelism: all-gather the sequence-sharded input before a column-parallel GEMM
// (Korthikanti et al. 2022, Fig. 5 "g"). Without SP the input is already replicated. Returns the
// event (-1: none); with wait_now the compute stream waits for it at once.
int RankLowering::tp_forward_in(bool wait_now, int in, int out) {
    if (d_.tp <= 1 || !d_.sp) return -1;
    int ev = collective(Stream::tp_comm, CollKind::all_gather, Group::tp, d_.tokens * d_.h * d_.act_bytes, n_.tp_ag);
    if (df_) io({in}, {out});
    if (wait_now) wait(Stream::compute, ev);
    return ev;
}

// TP communication overlap (plan.tp_comm_overlap; Transformer Engine's userbuffers behind
// Megatron's --tp-comm-overlap, with SP): a column-parallel GEMM's input all-gather and a
// row-parallel GEMM's output reduce-scatter are cut into the tp blocks of S = T / tp rows the
// members own, moved one ring step at a time (TE's ring exchange, split_overlap_ag_p2p and
// split_overlap_rs_p2p) while the GEMM runs block by block: tp GEMMs of S rows, and a step's
// transfer hidden behind the block before it. Instr::ring_step names the block, as the member
// that many places back along the ring. Each step is priced as an all-gather (reduce-scatter)
// that moves one block per rank, as the context-parallel ring's are. Under FP8 the blocks travel
// in FP8 (TE's fp8_buf: the norm writes its FP8 output into the buffer, dY is cast before it
// moves, and the FP8 recipes' reduce-scatter buffers take the GEMM's FP8 output; torchtitan's
// async TP reduces in bf16: plan.tp_overlap_rs_fp8).
//
// The all-gather side: the rank's own block copied into the gathered tensor (TE's
// copy_into_buffer), and block j's GEMM run once the step bringing it has landed.
void RankLowering::tp_ring_gather(int shard, int full, const std::function<void(int)>& block) {
    const int P = static_cast<int>(d_.tp);
    const double chunk = tp_ring_block_bytes(false);
    compute(Op::elementwise, n_.tp_ring_local, 0, 2 * chunk).ring_step = 0;
    if (df_) io({shard}, {full});
    const int local = record(Stream::compute);
    std::vector<int> landed(static_cast<std::size_t>(P), -1);
    for (int j = 1; j < P; ++j) {
        landed[static_cast<std::size_t>(j)] = collective(Stream::tp_comm, CollKind::all_gather, Group::tp, chunk * P / (P - 1), n_.tp_ag_ring, local);
        rp_.instrs[last_collective_].ring_step = j;
        if (df_) io({shard}, {full});
    }
    for (int j = 0; j < P; ++j) {
        if (j > 0) wait(Stream::compute, landed[static_cast<std::size_t>(j)]);
        block(j);
    }
}

// The reduce-scatter side: the blocks other members own first, each sent to its owner as soon as
// it is computed and summed there as it arrives (a received sum of its own per rank), then the
// rank's own block, to which the sum is added once the last step is in.
void RankLowering::tp_ring_reduce(int out_s, const std::function<void(int, int)>& block) {
    const int P = static_cast<int>(d_.tp);
    const double chunk = tp_ring_block_bytes(true);
    const int received = df_ ? act(n_.t_tp_ring_recv, layer_, d_.tokens_sp, d_.h) : -1;
    int ev = -1;
    for (int j = 1; j < P; ++j) {
        const int part = df_ ? act(n_.t_tp_ring_part, layer_, d_.tokens_sp, d_.h, TensorRole::activation, j) : -1;
        block(j, part);
        ev = collective(Stream::tp_comm, CollKind::reduce_scatter, Group::tp, chunk * P / (P - 1), n_.tp_rs_ring);
        rp_.instrs[last_collective_].ring_step = j;
        if (df_) {
            if (j == 1) io({part}, {received});
            else io({part, received}, {received});
        }
    }
    block(0, out_s);
    wait(Stream::compute, ev);
    compute(Op::elementwise, n_.tp_ring_combine, 0, 3 * d_.tokens_sp * d_.h * d_.act_bytes);
    if (df_) io({received, out_s}, {out_s});
}

// A GEMM fed by SP's gather of `shard` into `full`: gathered whole, then one GEMM of the T rows;
// or under TP overlap block by block as the ring brings them. `gemm_of(rows)` pushes the GEMM with
// its operands and returns it.
void RankLowering::sp_gather_gemm(int shard, int full, const std::function<Instr&(double)>& gemm_of) {
    if (!tp_overlap()) {
        tp_forward_in(true, shard, full);
        gemm_of(d_.tokens);
        return;
    }
    tp_ring_gather(shard, full, [&](int j) { gemm_of(d_.tokens_sp).ring_step = j; });
}

// A row-parallel GEMM into `out`, reduced over TP into `out_s` (SP's reduce-scatter, else an
// all-reduce in place); under TP overlap its blocks are reduced as they are computed.
// `gemm_of(rows, out)` pushes the GEMM writing `out` with its operands and returns it.
void RankLowering::sp_reduce_gemm(int out, int out_s, const std::function<Instr&(double, int)>& gemm_of) {
    if (!tp_overlap()) {
        gemm_of(d_.tokens, out);
        tp_forward_out(out, out_s);
        return;
    }
    tp_ring_reduce(out_s, [&](int j, int part) { gemm_of(d_.tokens_sp, part).ring_step = j; });
}

// After a row-parallel GEMM: all-reduce (Megatron "g" in forward), or reduce-scatter with SP.
// nccl-tests' S = the full b*s/cp*h buffer either way.
int RankLowering::tp_out_collective(int t, int shard) {
    if (d_.tp <= 1) return -1;
    const double bytes = d_.tokens * d_.h * d_.act_bytes;
    const int ev = d_.sp ? collective(Stream::tp_comm, CollKind::reduce_scatter, Group::tp, bytes, n_.tp_rs)
                         : collective(Stream::tp_comm, CollKind::all_reduce, Group::tp, bytes, n_.tp_ar);
    if (df_) io({t}, {d_.sp ? shard : t});
    return ev;
}

void RankLowering::tp_forward_out(int t, int shard) {
    const int ev = tp_out_collective(t, shard);
    if (ev >= 0) wait(Stream::compute, ev);
}

RankLowering::LayerTensors RankLowering::layer_tensors(int l) {
    LayerTensors t{};
    if (!df_) {
        std::fill_n(&t.x, sizeof(LayerTensors) / sizeof(int), -1);
        return t;
    }
    const double T = d_.tokens, S = d_.tokens_sp, H = d_.h, tp = d_.tp;
    const bool sp = d_.sp;
    auto a = [&](int name, double rows, double cols) { return act(name, l, rows, cols); };
    auto g = [&](int name, double rows, double cols) { return grad(name, l, rows, cols); };
    const double qkv = (d_.q_w + 2 * d_.kv_w) / tp, attn = d_.heads * d_.v_dim / tp, f = d_.ffn / tp;
    t.x = a(n_.t_x, S, H);
    t.ln1 = a(n_.t_ln1, S, H);
    t.ln1_g = sp ? a(n_.t_ln1_g, T, H) : t.ln1;
    t.qkv = a(n_.t_qkv, T, qkv);
    // The projection's output before the norms, or, under op-level SAC with RoPE, before the
    // rotation: the value the checkpoint keeps and reruns them from.
    const bool pre = m_.qk_norm || (p_.op_sac() && m_.position == PositionKind::rope);
    t.qkv_pre = pre ? a(n_.t_qkv_pre, T, qkv) : t.qkv;
    t.attn = a(n_.t_attn, T, attn);
    t.lse = act(n_.t_attn_lse, l, T, d_.heads / tp, TensorRole::stats);
    // Unfused attention (Megatron's CoreAttention: baddbmm, softmax, dropout, bmm) keeps the
    // (b, heads/tp, s, s) probabilities for its backward, and under attention dropout the mask and
    // the dropped probabilities the value bmm read (tensors.cpp, attn.softmax_*). Context
    // parallelism's ring and Ulysses run fused kernels.
    // Its backward forms the gradient of the probabilities the value bmm read, (b, heads/tp, s, s)
    // again, for the softmax's backward: a transient the fused kernels never hold (the memory
    // model's grad.widest).
    t.probs = t.pmask = t.pdrop = t.dprobs = -1;
    if (!p_.flash_attention && d_.cp <= 1) {
        const double rows = d_.b * d_.heads / tp * d_.s, cols = d_.s;
        t.probs = a(n_.t_attn_probs, rows, cols);
        t.dprobs = g(n_.g_attn_probs, rows, cols);
        if (m_.dropout > 0) {
            t.pmask = act(n_.t_attn_pmask, l, rows, cols, TensorRole::mask);
            t.pdrop = a(n_.t_attn_pdrop, rows, cols);
        }
    }
    t.proj = a(n_.t_proj, T, H);
    t.proj_s = sp ? a(n_.t_proj_s, S, H) : t.proj;
    t.x1 = a(n_.t_x1, S, H);
    t.ln2 = a(n_.t_ln2, S, H);
    t.ln2_g = sp ? a(n_.t_ln2_g, T, H) : t.ln2;
    t.fc1 = a(n_.t_fc1, T, (d_.mats - 1) * f);
    t.act = a(n_.t_act, T, f);
    t.fc2 = a(n_.t_fc2, T, H);
    t.fc2_s = sp ? a(n_.t_fc2_s, S, H) : t.fc2;
    t.out = act(n_.t_x, l + 1, S, H);
    t.dout = grad(n_.g_x, l + 1, S, H);
    t.dout_g = sp ? g(n_.g_x_g, T, H) : t.dout;
    t.dx1 = g(n_.g_x1, S, H);
    t.dx1_g = sp ? g(n_.g_x1_g, T, H) : t.dx1;
    t.dln2 = g(n_.g_ln2, T, H);
    t.dln2_s = sp ? g(n_.g_ln2_s, S, H) : t.dln2;
    t.dact = g(n_.g_act, T, f);
    t.dfc1 = g(n_.g_fc1, T, (d_.mats - 1) * f);
    t.dattn = g(n_.g_attn, T, attn);
    t.dqkv = g(n_.g_qkv, T, qkv);
    t.dqkv_pre = m_.qk_norm ? g(n_.g_qkv_pre, T, qkv) : t.dqkv;
    t.dln1 = g(n_.g_ln1, T, H);
    t.dln1_s = sp ? g(n_.g_ln1_s, S, H) : t.dln1;
    t.dx = g(n_.g_x, S, H);
    if (m_.dropout > 0) {
        t.mask1 = act(n_.t_mask_attn, l, S, H, TensorRole::mask);
        t.mask2 = act(n_.t_mask_mlp, l, S, H, TensorRole::mask);
        t.dbr1 = g(sp ? n_.g_proj_s : n_.g_proj, S, H);
        t.dbr1_g = sp ? g(n_.g_proj, T, H) : t.dbr1;
        t.dbr2 = g(sp ? n_.g_fc2_s : n_.g_fc2, S, H);
        t.dbr2_g = sp ? g(n_.g_fc2, T, H) : t.dbr2;
    } else {
        t.mask1 = t.mask2 = -1;
        t.dbr1 = t.dx1, t.dbr1_g = t.dx1_g, t.dbr2 = t.dout, t.dbr2_g = t.dout_g;
    }
    return t;
}

// The dense MLP and its TP communication: with SP the input gathered before fc1 and fc2's output
// reduce-scattered after (all-reduced without SP), or under TP overlap both cut into ring steps.
void RankLowering::mlp_forward(const LayerTensors& t) {
    const double f = d_.ffn / d_.tp, fc1_n = (d_.mats - 1) * f;  // SwiGLU: gate and up fused, n = 2*ffn/tp
    sp_gather_gemm(t.ln2, t.ln2_g, [&](double rows) -> Instr& {
        Instr& in = gemm(n_.fc1, rows, fc1_n, d_.h);
        if (df_) io({t.ln2_g, prm("fc1.weight", layer_), bias("fc1.bias", layer_, false)}, {t.fc1});
        return in;
    });
    compute(Op::elementwise, n_.act, 0, d_.mats * d_.tokens * f * d_.act_bytes);  // GELU: r+w; SwiGLU: 2r+w
    if (df_) io({t.fc1}, {t.act});
    sp_reduce_gemm(t.fc2, t.fc2_s, [&](double rows, int out) -> Instr& {
        Instr& in = gemm_cast(n_.fc2, rows, d_.h, f);
        if (df_) io({t.act, prm("fc2.weight", layer_)}, {out});
        return in;
    });
}

// After the QKV projection: QK-norm (read, write Q and K; V passes through, and the dataflow
// keeps the norms' input) and RoPE, in place, or out of the kept projection under op-level SAC
// (layer_tensors' qkv_pre). Forward, and again in op-level SAC's recomputation.
void RankLowering::qk_norm_and_rope(const LayerTensors& t, int layer) {
    if (m_.qk_norm) {
        compute(Op::norm, n_.qk_norm, 0, 2 * d_.qk_bytes());
        if (df_)
            io({t.qkv_pre, prm("q_norm.weight", layer), bias("q_norm.bias", layer, false), prm("k_norm.weight", layer),
                bias("k_norm.bias", layer, false)},
               {t.qkv});
    }
    if (m_.position == PositionKind::rope) {
        compute(Op::elementwise, n_.rope, 0, 2 * d_.qk_bytes());
        if (df_) io({m_.qk_norm ? t.qkv : t.qkv_pre}, {t.qkv});
    }
}

void RankLowering::layer_forward(int layer, Phase phase) {
    const Phase saved = phase_;
    const int saved_layer = layer_;
    phase_ = phase;
    layer_ = layer;
    const LayerTensors t = layer_tensors(layer);
    const double norm_bytes = 2 * d_.tokens_sp * d_.h * d_.act_bytes;               // read x, write y
    const double resid_bytes = (3 + (m_.dropout > 0 ? 1 : 0)) * d_.tokens_sp * d_.h * d_.act_bytes;  // x, dx, out (+mask)
    compute(Op::norm, n_.norm1, 0, norm_bytes);
    if (df_) io({t.x, prm("ln1.weight", layer), bias("ln1.bias", layer, false)}, {t.ln1});
    if (m_.mla) {
        mla_projections_forward(t);
    } else {
        const double qkv_n = (d_.q_w + 2 * d_.kv_w) / d_.tp;
        sp_gather_gemm(t.ln1, t.ln1_g, [&](double rows) -> Instr& {
            Instr& in = gemm(n_.qkv, rows, qkv_n, d_.h);
            if (df_) io({t.ln1_g, prm("qkv.weight", layer), bias("qkv.bias", layer, false)}, {t.qkv_pre});
            return in;
        });
        qk_norm_and_rope(t, layer);
    }
    attention_core_forward(phase, t.qkv, t.attn, t.lse, t.probs, t.pmask, t.pdrop);
    const double attn_cols = d_.heads * d_.v_dim / d_.tp;
    sp_reduce_gemm(t.proj, t.proj_s, [&](double rows, int out) -> Instr& {
        Instr& in = gemm_cast(n_.proj, rows, d_.h, attn_cols);
        if (df_) io({t.attn, prm("proj.weight", layer)}, {out});
        return in;
    });
    compute(Op::elementwise, n_.residual1, 0, resid_bytes);
    if (df_) io({t.x, t.proj_s, bias("proj.bias", layer, false)}, {t.x1, t.mask1});  // Megatron's bias-dropout-add
    compute(Op::norm, n_.norm2, 0, norm_bytes);
    if (df_) io({t.x1, prm("ln2.weight", layer), bias("ln2.bias", layer, false)}, {t.ln2});
    if (m_.layer_is_moe(layer)) {
        moe_forward(layer);  // with SP it moves its own tokens over TP; without, reduce as a row-parallel GEMM
        if (!d_.sp) tp_forward_out();
    } else {
        // A merged step pairs layers: a dense one's MLP takes the place of the experts.
        if (phase == Phase::forward) segment_cut();
        mlp_forward(t);
        if (phase == Phase::forward) segment_cut();
    }
    compute(Op::elementwise, n_.residual2, 0, resid_bytes);
    // A recomputed layer's output is a fresh value nobody reads: the original may still be on its
    // way to the next stage (a chunk's last layer), so it must not be written over.
    const int out = phase == Phase::recompute ? act(n_.t_x_recomputed, layer + 1, d_.tokens_sp, d_.h) : t.out;
    if (df_) io({t.x1, t.fc2_s, bias("fc2.bias", layer, false), shared_shard(layer, false)}, {out, t.mask2});
    phase_ = saved;
    layer_ = saved_layer;
}

// Backward of a column-parallel GEMM (fc1, qkv): the reduction of dX (all-reduce, or
// reduce-scatter with SP) runs on tp_comm while wgrad computes (Megatron's async grad all-reduce).
// With SP the wgrad needs the gathered input again, which is all-gathered meanwhile.
// With SP the output's gradient is gathered first (the mirror of the forward reduce-scatter), under
// TP overlap in ring steps beside the dgrad's blocks.
void RankLowering::mlp_backward(int layer, const LayerTensors& t) {
    const double f = d_.ffn / d_.tp;
    sp_gather_gemm(t.dbr2, t.dbr2_g, [&](double rows) -> Instr& {
        Instr& in = gemm_cast(n_.fc2, rows, f, d_.h);  // dgrad
        if (df_) io({t.dbr2_g, prm("fc2.weight", layer)}, {t.dact});
        return in;
    });
    {
        const std::size_t wb = weight_begin();  // DualPipe's zero bubble: to the weight pass
        gemm(n_.fc2, f, d_.h, d_.tokens);        // wgrad
        if (df_) io({t.act, t.dbr2_g}, {prm_grad("fc2.weight", layer)});
        weight_end(wb);
    }
    compute(Op::elementwise, n_.act, 0, 2 * d_.mats * d_.tokens * f * d_.act_bytes);
    if (df_) io({act_grad_reads(t.fc1, t.act), t.dact}, {t.dfc1});
    int input_ev = -1;
    if (d_.tp > 1 && d_.sp && !(p_.op_sac() && !mtp_pass_)) {  // op-level SAC's recomputation gathered it already
        input_ev = collective(Stream::tp_comm, CollKind::all_gather, Group::tp, d_.tokens * d_.h * d_.act_bytes, n_.tp_ag_input);
        if (df_) io({t.ln2}, {t.ln2_g});
    }
    gemm_cast(n_.fc1, d_.tokens, d_.h, (d_.mats - 1) * f);  // dgrad
    if (df_) io({t.dfc1, prm("fc1.weight", layer)}, {t.dln2});
    int red_ev = -1;
    if (d_.tp > 1) {
        red_ev = collective(Stream::tp_comm, d_.sp ? CollKind::reduce_scatter : CollKind::all_reduce, Group::tp,
                            d_.tokens * d_.h * d_.act_bytes, d_.sp ? n_.tp_rs : n_.tp_ar);
        if (df_) io({t.dln2}, {t.dln2_s});
    }
    if (input_ev >= 0) wait(Stream::compute, input_ev);
    {
        const std::size_t wb = weight_begin();  // DualPipe's zero bubble: to the weight pass
        gemm(n_.fc1, d_.h, (d_.mats - 1) * f, d_.tokens);  // wgrad
        if (df_) io({t.ln2_g, t.dfc1}, {prm_grad("fc1.weight", layer), bias("fc1.bias", layer, true)});
        weight_end(wb);
    }
    if (red_ev >= 0) wait(Stream::compute, red_ev);
}

void RankLowering::layer_backward(int layer, int layer_in_stage) {
    const bool full_re = !mtp_pass_ && p_.recompute == Recompute::full && layer_recomputed(m_, p_, stage_, layer_in_stage);
    if (full_re) layer_forward(layer, Phase::recompute);  // keep only the input; rerun the layer
    else if (p_.op_sac() && !mtp_pass_) op_sac_recompute(layer);
    const int saved_layer = layer_;
    layer_ = layer;
    const LayerTensors t = layer_tensors(layer);
    const double norm_bytes = 3 * d_.tokens_sp * d_.h * d_.act_bytes;  // read x, dy; write dx
    const double resid_bytes = (2 + (m_.dropout > 0 ? 1 : 0)) * d_.tokens_sp * d_.h * d_.act_bytes;
    // MLP block, mirrored. The residual's backward passes the gradient through (through the
    // dropout mask into the branch); it only sums the row-parallel bias's gradient (the norm's
    // backward adds the skip path).
    compute(Op::elementwise, n_.residual2, 0, resid_bytes);
    if (df_) io({t.dout, t.mask2}, {t.mask2 >= 0 ? t.dbr2 : -1, bias("fc2.bias", layer, true)});
    if (!full_re) recompute_modules_before_mlp(layer);
    if (m_.layer_is_moe(layer)) {
        moe_backward(layer);  // moves its own tokens over TP (see moe_forward)
    } else {
        segment_cut();
        mlp_backward(layer, t);
        segment_cut();
    }
    compute(Op::norm, n_.norm2, 0, norm_bytes);
    if (df_)
        io({t.x1, t.dln2_s, prm("ln2.weight", layer), t.dout, shared_shard(layer, true)},
           {t.dx1, prm_grad("ln2.weight", layer), bias("ln2.bias", layer, true)});
    // Attention block.
    compute(Op::elementwise, n_.residual1, 0, resid_bytes);
    if (df_) io({t.dx1, t.mask1}, {t.mask1 >= 0 ? t.dbr1 : -1, bias("proj.bias", layer, true)});
    const double attn_cols = d_.heads * d_.v_dim / d_.tp;
    sp_gather_gemm(t.dbr1, t.dbr1_g, [&](double rows) -> Instr& {
        Instr& in = gemm_cast(n_.proj, rows, attn_cols, d_.h);  // dgrad
        if (df_) io({t.dbr1_g, prm("proj.weight", layer)}, {t.dattn});
        return in;
    });
    {
        const std::size_t wb = weight_begin();  // DualPipe's zero bubble: to the weight pass
        gemm(n_.proj, attn_cols, d_.h, d_.tokens);  // wgrad
        if (df_) io({t.attn, t.dbr1_g}, {prm_grad("proj.weight", layer)});
        weight_end(wb);
    }
    if (!full_re) recompute_modules_before_attention();
    attention_core_backward(t);
    if (m_.mla) {
        mla_projections_backward(t);
        compute(Op::norm, n_.norm1, 0, norm_bytes);
        if (df_) io({t.x, t.dln1_s, prm("ln1.weight", layer), t.dx1}, {t.dx, prm_grad("ln1.weight", layer), bias("ln1.bias", layer, true)});
        layer_ = saved_layer;
        return;
    }
    if (m_.position == PositionKind::rope) {
        compute(Op::elementwise, n_.rope, 0, 2 * d_.qk_bytes());
        if (df_) io({t.dqkv}, {t.dqkv});
    }
    if (m_.qk_norm) {  // x, dy -> dx
        compute(Op::norm, n_.qk_norm, 0, 3 * d_.qk_bytes());
        if (df_)
            io({t.qkv_pre, t.dqkv, prm("q_norm.weight", layer), bias("q_norm.bias", layer, false), prm("k_norm.weight", layer),
                bias("k_norm.bias", layer, false)},
               {t.dqkv_pre, prm_grad("q_norm.weight", layer), bias("q_norm.bias", layer, true), prm_grad("k_norm.weight", layer),
                bias("k_norm.bias", layer, true)});
    }
    int input_ev = -1;
    if (d_.tp > 1 && d_.sp && !(p_.op_sac() && !mtp_pass_)) {  // op-level SAC's recomputation gathered it already
        input_ev = collective(Stream::tp_comm, CollKind::all_gather, Group::tp, d_.tokens * d_.h * d_.act_bytes, n_.tp_ag_input);
        if (df_) io({t.ln1}, {t.ln1_g});
    }
    const double qkv_n = (d_.q_w + 2 * d_.kv_w) / d_.tp;
    gemm_cast(n_.qkv, d_.tokens, d_.h, qkv_n);  // dgrad
    if (df_) io({t.dqkv_pre, prm("qkv.weight", layer)}, {t.dln1});
    int red_ev = -1;
    if (d_.tp > 1) {
        red_ev = collective(Stream::tp_comm, d_.sp ? CollKind::reduce_scatter : CollKind::all_reduce, Group::tp,
                            d_.tokens * d_.h * d_.act_bytes, d_.sp ? n_.tp_rs : n_.tp_ar);
        if (df_) io({t.dln1}, {t.dln1_s});
    }
    if (input_ev >= 0) wait(Stream::compute, input_ev);
    {
        const std::size_t wb = weight_begin();  // DualPipe's zero bubble: to the weight pass
        gemm(n_.qkv, d_.h, qkv_n, d_.tokens);  // wgrad
        if (df_) io({t.ln1_g, t.dqkv_pre}, {prm_grad("qkv.weight", layer), bias("qkv.bias", layer, true)});
        weight_end(wb);
    }
    if (red_ev >= 0) wait(Stream::compute, red_ev);
    compute(Op::norm, n_.norm1, 0, norm_bytes);
    if (df_) io({t.x, t.dln1_s, prm("ln1.weight", layer), t.dx1}, {t.dx, prm_grad("ln1.weight", layer), bias("ln1.bias", layer, true)});
    layer_ = saved_layer;
}

}  // namespace strata::sim::lower_detail
