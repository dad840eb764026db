// Multi-head latent attention's instructions (lowering's mla_ops.cpp): the latent norms, which
// split the rope key off the key/value latent; RoPE, which assembles the attention's rows from
// the up-projections and the shared rope key; and the attention core on heads whose values are
// narrower than their queries and keys (v_head_dim < nope + rope).
#include <cstring>

#include "rank.hpp"
#include "strata/runtime/cpu_kernels.hpp"
#include "strata/lowering/model.hpp"

namespace strata::runtime {

using namespace sim;

#define KERNEL(fn, ...) (dev_ ? dev_->fn(__VA_ARGS__) : cpu::fn(__VA_ARGS__))

namespace {
// MLA's value heads, v wide, in the dk-wide head slots the attention kernels take, and back; T rows.
struct HeadPad {
    Device* dev;
    i64 h, dk, dv, T;
    void zero(float* p, i64 n) const {
        if (dev) dev->zero(p, n);
        else std::memset(p, 0, static_cast<std::size_t>(n) * sizeof(float));
    }
    void copy(float* dst, i64 ds, const float* src, i64 ss, i64 cols) const {
        if (dev) dev->copy_columns(dst, ds, src, ss, cols, T);
        else cpu::copy_columns(dst, ds, src, ss, cols, T);
    }
    /// h heads of dv columns of src (from column `from`, stride ss) into dk-wide slots of dst (at `at`).
    void pad(float* dst, i64 ds, i64 at, const float* src, i64 ss, i64 from) const {
        for (i64 k = 0; k < h; ++k) copy(dst + at + k * dk, ds, src + from + k * dv, ss, dv);
    }
    void unpad(float* dst, i64 ds, i64 at, const float* src, i64 ss, i64 from) const {
        for (i64 k = 0; k < h; ++k) copy(dst + at + k * dv, ds, src + from + k * dk, ss, dv);
    }
};
}  // namespace

// The attention kernels take one head width for Q, K and V. MLA's values are narrower: each value
// head is zero-padded to the query's width, the kernels run on the padded rows and the output's
// padding (zeros: P times zero columns) is dropped; in the backward the padded output and its
// gradient give the same D = dO . O, and the padded columns of dV (P^T dO's zero columns) are
// dropped. Exact, at the price of a wider P V than Transformer Engine's cuDNN kernels, which take
// v_head_dim as it is (their time is what the simulator prices).
void RankState::mla_attention(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const OperandView a{w_.program, rp_, rp_.operands[i]};
    const int nin = a.o.n_in, nout = a.o.n_out;
    auto I = [&](int k) { return tensor(a.id(k), false, i); };
    auto O = [&](int k) { return tensor(a.id(nin + k), true, i); };
    const ModelSpec& m = w_.model;
    const i64 dk = qk_head_dim_of(m), dv = v_head_dim_of(m);
    const bool bwd = in.op == Op::attention_bwd;
    const DataTensor& qkv = a.in(0);
    const i64 T = qkv.rows, h = (bwd ? a.in(1).cols : a.out(0).cols) / dv, seq = m.seq_len, win = m.window_of(in.layer);
    if (qkv.cols != h * (2 * dk + dv)) fail(i, "MLA's attention rows are not heads x (2 x qk + v) wide");
    const Dropout drop = attention_dropout(in, qkv, h);
    // [Q | K | V] rows of 3 h dk, V's heads zero-padded.
    const HeadPad hp{dev_, h, dk, dv, T};
    auto pad_heads = [&](float* dst, i64 ds, i64 at, const float* src, i64 ss, i64 from) { hp.pad(dst, ds, at, src, ss, from); };
    auto zeroed = [&](float* p, i64 n) { hp.zero(p, n); };
    const i64 W = 3 * h * dk;
    Sum padded(*this, i, T * W), out(*this, i, T * h * dk);
    zeroed(padded.p, T * W);
    KERNEL(copy_columns, padded.p, W, I(0), qkv.cols, 2 * h * dk, T);  // Q and K as they are
    pad_heads(padded.p, W, 2 * h * dk, I(0), qkv.cols, 2 * h * dk);
    if (!bwd) {
        KERNEL(attention_forward, out.p, O(1), padded.p, T, seq, h, h, dk, drop, win);
        hp.unpad(O(0), h * dv, 0, out.p, h * dk, 0);
        if (nout > 2)  // unfused: the probabilities (and their dropout) kept for the backward
            KERNEL(attention_probs, O(2), nout > 3 ? O(3) : nullptr, nout > 4 ? O(4) : nullptr, padded.p, O(1), T, seq, h, h, dk, drop, win);
        return;
    }
    // Inputs {qkv, out, lse, dout[, probs..]} -> {dqkv[, the probabilities' gradient]}.
    Sum dout(*this, i, T * h * dk), grads(*this, i, T * W);
    zeroed(out.p, T * h * dk);
    zeroed(dout.p, T * h * dk);
    pad_heads(out.p, h * dk, 0, I(1), h * dv, 0);
    pad_heads(dout.p, h * dk, 0, I(3), h * dv, 0);
    KERNEL(attention_backward, grads.p, padded.p, out.p, I(2), dout.p, T, seq, h, h, dk, drop, win);
    KERNEL(copy_columns, O(0), qkv.cols, grads.p, W, 2 * h * dk, T);
    hp.unpad(O(0), qkv.cols, 2 * h * dk, grads.p, W, 2 * h * dk);
    if (nout > 1) KERNEL(attention_probs_grad, O(1), padded.p, dout.p, T, seq, h, h, dk);
}

// Context parallelism's blocks (the ring's, or the all-gather's: ops.cpp's attention.local and
// attention.remote) on MLA's rows, padded as above: [Q | K | V] rows of qkv, [K | V] rows of a
// remote block, the output, its gradient and the gradients' V columns each to dk a head, and the
// padding dropped after. The running output a remote block merges into is padded again each time
// (its padding is zeros: exact).
void RankState::mla_attention_block(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const OperandView a{w_.program, rp_, rp_.operands[i]};
    const int nin = a.o.n_in;
    auto I = [&](int k) { return tensor(a.id(k), false, i); };
    auto O = [&](int k) { return tensor(a.id(nin + k), true, i); };
    const ModelSpec& m = w_.model;
    const i64 dk = qk_head_dim_of(m), dv = v_head_dim_of(m);
    const bool bwd = in.op == Op::attention_bwd;
    const bool remote = w_.program.names[static_cast<std::size_t>(in.name)] == "attention.remote";
    const DataTensor& qkv = a.in(0);
    const DataTensor& out_t = bwd ? a.in(remote ? 2 : 1) : a.out(0);
    const i64 T = qkv.rows, h = out_t.cols / dv;
    if (qkv.cols != h * (2 * dk + dv)) fail(i, "MLA's attention rows are not heads x (2 x qk + v) wide");
    if (remote && a.in(1).cols != h * (dk + dv)) fail(i, "MLA's K/V block is not heads x (qk + v) wide");
    const Dropout drop = attention_dropout(in, qkv, h);
    const HeadPad hp{dev_, h, dk, dv, T};
    auto zeroed = [&](float* p, i64 n) { hp.zero(p, n); };
    auto pad = [&](float* dst, i64 ds, i64 at, const float* src, i64 ss, i64 from) { hp.pad(dst, ds, at, src, ss, from); };
    auto unpad = [&](float* dst, i64 ds, i64 at, const float* src, i64 ss, i64 from) { hp.unpad(dst, ds, at, src, ss, from); };
    const i64 W = 3 * h * dk, KV = 2 * h * dk, QK = h * dk;
    Sum q(*this, i, T * W), kv(*this, i, remote ? T * KV : 0), out(*this, i, T * QK);
    zeroed(q.p, T * W);
    KERNEL(copy_columns, q.p, W, I(0), qkv.cols, 2 * QK, T);  // Q and K as they are
    pad(q.p, W, 2 * QK, I(0), qkv.cols, 2 * QK);
    if (remote) {  // a block [K | V] from the rank `ring` places back
        zeroed(kv.p, T * KV);
        KERNEL(copy_columns, kv.p, KV, I(1), a.in(1).cols, QK, T);
        pad(kv.p, KV, QK, I(1), a.in(1).cols, QK);
    }
    const float* kv_p = remote ? kv.p : q.p + QK;
    const i64 kv_stride = remote ? KV : W;
    cpu::Positions qpos = positions();
    qpos.window = m.window_of(in.layer);
    const cpu::Positions kpos = remote ? positions(ring_source(a.in(1).ring)) : positions();
    zeroed(out.p, T * QK);
    if (!bwd) {  // local {qkv} -> {out, lse}; remote {qkv, kv, out, lse} -> {out, lse}, merged
        if (remote) pad(out.p, QK, 0, I(2), h * dv, 0);
        KERNEL(attention_block_forward, out.p, O(1), q.p, kv_p, kv_stride, qpos, kpos, T, h, h, dk, remote, drop);
        unpad(O(0), h * dv, 0, out.p, QK, 0);
        return;
    }
    // Local {qkv, out, lse, dout} -> {dqkv} (its own K and V gradients written beside dQ); remote
    // {qkv, kv, out, lse, dout, dqkv} -> {dqkv, dkv}: dQ added, the block's K/V gradients apart.
    const int o_at = remote ? 2 : 1;
    Sum dout(*this, i, T * QK), dq(*this, i, T * W), dkv(*this, i, remote ? T * KV : 0);
    zeroed(dout.p, T * QK);
    pad(out.p, QK, 0, I(o_at), h * dv, 0);
    pad(dout.p, QK, 0, I(o_at + 2), h * dv, 0);
    zeroed(dq.p, T * W);
    if (remote) {  // the dQ summed so far (its K and V columns are the local block's, kept as they are)
        KERNEL(copy_columns, dq.p, W, I(5), qkv.cols, QK, T);
        zeroed(dkv.p, T * KV);
    }
    KERNEL(attention_block_backward, dq.p, remote ? dkv.p : nullptr, kv_stride, q.p, kv_p, out.p, I(o_at + 1), dout.p, qpos, kpos, T, h, h,
           dk, remote, drop);
    if (remote) {
        KERNEL(copy_columns, O(0), qkv.cols, dq.p, W, QK, T);  // dQ; dK and dV of the local block untouched
        KERNEL(copy_columns, O(1), a.out(1).cols, dkv.p, KV, QK, T);
        unpad(O(1), a.out(1).cols, QK, dkv.p, KV, QK);
        return;
    }
    KERNEL(copy_columns, O(0), qkv.cols, dq.p, W, 2 * QK, T);
    unpad(O(0), qkv.cols, 2 * QK, dq.p, W, 2 * QK);
}

// The latent norms (RMSNorm): forward {[q_lat,] kv_lat, [wq,] wkv} -> {[q_n,] kv_n, k_rope}, the
// key/value latent's first kv_lora columns normed and its rope columns split off; backward
// {[q_lat,] kv_lat, [dq_n,] dkv_n, dk_rope, [wq,] wkv} -> {[dq_lat,] dkv_lat, [dwq,] dwkv}.
void RankState::mla_latent_norm(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const OperandView a{w_.program, rp_, rp_.operands[i]};
    const int nin = a.o.n_in;
    auto I = [&](int k) { return tensor(a.id(k), false, i); };
    auto O = [&](int k) { return tensor(a.id(nin + k), true, i); };
    const MlaSpec& s = *w_.model.mla;
    const i64 kl = s.kv_lora_rank, r = s.qk_rope_head_dim, ql = s.q_lora_rank;
    const bool q = ql > 0, bwd = in.phase == Phase::backward;
    const int kv = q ? 1 : 0;  // the key/value latent's operand
    const i64 T = a.in(kv).rows;
    if (a.in(kv).cols != kl + r) fail(i, "the key/value latent is not kv_lora + rope wide");
    Sum x(*this, i, T * kl);
    KERNEL(copy_columns, x.p, kl, I(kv), kl + r, kl, T);
    if (!bwd) {
        if (q) KERNEL(norm_forward, O(0), I(0), I(2), nullptr, T, ql);
        KERNEL(norm_forward, O(kv), x.p, I(q ? 3 : 1), nullptr, T, kl);
        KERNEL(copy_columns, O(kv + 1), r, I(kv) + kl, kl + r, r, T);
        return;
    }
    const int d0 = q ? 2 : 1, w0 = q ? 5 : 3;  // the first gradient in, the first weight
    if (q) KERNEL(norm_backward, O(0), O(2), nullptr, I(0), I(d0), I(w0), nullptr, false, T, ql);
    Sum dx(*this, i, T * kl);
    KERNEL(norm_backward, dx.p, O(q ? 3 : 1), nullptr, x.p, I(d0 + (q ? 1 : 0)), I(w0 + (q ? 1 : 0)), nullptr, false, T, kl);
    KERNEL(copy_columns, O(kv), kl + r, dx.p, kl, kl, T);
    KERNEL(copy_columns, O(kv) + kl, kl + r, I(d0 + (q ? 2 : 1)), r, r, T);
}

bool RankState::mla_compute(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const std::string& name = w_.program.names[static_cast<std::size_t>(in.name)];
    if (name == "latent_norm") {
        mla_latent_norm(i);
        return true;
    }
    if ((in.op == Op::attention_fwd || in.op == Op::attention_bwd) && name == "attention") {
        mla_attention(i);
        return true;
    }
    if ((in.op == Op::attention_fwd || in.op == Op::attention_bwd) && (name == "attention.local" || name == "attention.remote")) {
        mla_attention_block(i);
        return true;
    }
    if (name != "rope") return false;
    // Forward {q, kv, k_rope} -> {qkv}; backward {dqkv} -> {dq, dkv, dk_rope}.
    const OperandView a{w_.program, rp_, rp_.operands[i]};
    const int nin = a.o.n_in;
    auto I = [&](int k) { return tensor(a.id(k), false, i); };
    auto O = [&](int k) { return tensor(a.id(nin + k), true, i); };
    const MlaSpec& s = *w_.model.mla;
    const i64 heads = w_.model.heads / tp_size_;
    if (in.phase != Phase::backward) {
        KERNEL(mla_rope_forward, O(0), I(0), I(1), I(2), a.out(0).rows, positions(), heads, s.qk_nope_head_dim, s.qk_rope_head_dim, s.v_head_dim);
    } else {
        KERNEL(mla_rope_backward, O(0), O(1), O(2), I(0), a.in(0).rows, positions(), heads, s.qk_nope_head_dim, s.qk_rope_head_dim,
               s.v_head_dim);
    }
    return true;
}

}  // namespace strata::runtime
