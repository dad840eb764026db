// What compute instructions do, read off their operands (lower.hpp's dataflow conventions): the
// kernels (the device's, else the cpu backend's), a memory-only walk's bookkeeping, and the
// optimizer on its tier. Collectives, transfers and copies: transfers.cpp.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <tuple>
#include <vector>
#include <unistd.h>

#include "strata/runtime/cpu_kernels.hpp"
#include "rank.hpp"
#include "strata/common/error.hpp"
#include "strata/lowering/model.hpp"

namespace strata::runtime {

using namespace sim;

namespace {
using Args = OperandView;
bool backward(Phase p) { return p == Phase::backward; }
}  // namespace

// The kernels whose contract is the same on both backends (device.hpp): the device's when there
// is one, else the cpu backend's.
#define KERNEL(fn, ...) (dev_ ? dev_->fn(__VA_ARGS__) : cpu::fn(__VA_ARGS__))

void RankState::compute(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const Program& prog = w_.program;
    const Args a{prog, rp_, rp_.operands[i]};
    const int nin = a.o.n_in, nout = a.o.n_out;
    if (nin + nout == 0) fail(i, "has no operands: the dataflow lowering did not name them");
    auto I = [&](int k) { return tensor(a.id(k), false, i); };
    auto O = [&](int k) { return tensor(a.id(nin + k), true, i); };
    const std::string& name = prog.names[static_cast<std::size_t>(in.name)];
    const ModelSpec& m = w_.model;
    const i64 hd = head_dim_of(m);
    if (m.is_moe() && moe_compute(i)) return;
    if (m.mla && mla_compute(i)) return;
    if (m.mtp_depth > 0 && mtp_op(i)) return;
    switch (in.op) {
        case Op::gemm: {
            // FP8 (Transformer Engine's HYBRID recipe): forward operands in E4M3, the gradient a
            // backward GEMM reads in E5M2, each quantized with its own scale (gemm_operand; the
            // identity otherwise). A bias and its gradient stay in high precision.
            constexpr auto e4m3 = cpu::Fp8::e4m3, e5m2 = cpu::Fp8::e5m2;
            const bool fp8 = in.dtype == DType::fp8 && !dev_;
            if (nout >= 1 && (a.out(0).role == TensorRole::param_grad || a.out(0).role == TensorRole::weight_grad)) {  // wgrad: dW += dY^T X
                const DataTensor &x = a.in(0), &dy = a.in(1), &dw = a.out(0);
                if (dw.rows != dy.cols || dw.cols != x.cols || x.rows != dy.rows) fail(i, "wgrad operand shapes disagree");
                const float* xq = gemm_operand(in, I(0), x.elements(), e4m3, 0);
                const float* dyq = gemm_operand(in, I(1), dy.elements(), e5m2, 1);
                if (fp8 && nout > 1) cpu::bias_grad(O(1), I(1), dy.rows, dy.cols);
                KERNEL(matmul_wgrad, O(0), nout > 1 && !fp8 ? O(1) : nullptr, xq, dyq, x.rows, x.cols, dy.cols);
            } else if (in.ring_step >= 0) {  // TP overlap: one row block, of the gathered input or of the output
                const DataTensor &x = a.in(0), &w = a.in(1), &y = a.out(0);
                const i64 rows = in.m, at_x = ring_block_at(i, x, rows), at_y = ring_block_at(i, y, rows);
                const bool dgrad = y.role == TensorRole::grad;
                const bool shapes = dgrad ? nin == 2 && w.rows == x.cols && y.cols == w.cols : w.cols == x.cols && y.cols == w.rows;
                if (!shapes) fail(i, "a row block's GEMM operand shapes disagree");
                // Under FP8 a block is quantized with its own scale (Transformer Engine reduces the
                // amax over the TP group: one scale for the gathered tensor).
                const float* xq = gemm_operand(in, I(0) + at_x, rows * x.cols, dgrad ? e5m2 : e4m3, 0);
                const float* wq = gemm_operand(in, I(1), w.elements(), e4m3, 1);
                if (dgrad) KERNEL(matmul_dgrad, O(0) + at_y, xq, wq, rows, w.cols, w.rows);
                else KERNEL(matmul_forward, O(0) + at_y, xq, wq, nin > 2 ? I(2) : nullptr, rows, x.cols, w.rows);
            } else if (a.out(0).role == TensorRole::grad) {  // dgrad: dX = dY W (dY may be the logits, turned into their gradient in place)
                const DataTensor &dy = a.in(0), &w = a.in(1), &dx = a.out(0);
                if (w.rows != dy.cols || dx.cols != w.cols || dx.rows != dy.rows) fail(i, "dgrad operand shapes disagree");
                if (nin > 2 && a.id(2) == a.id(nin)) {  // {dy, W, dx} -> dx: adds into dx (the MoE router's, 16-bit under FP8)
                    if (dev_) return dev_->matmul_dgrad_add(O(0), I(0), I(1), dy.rows, w.cols, w.rows);
                    std::vector<float> part(static_cast<std::size_t>(dx.elements()));
                    cpu::matmul_dgrad(part.data(), I(0), I(1), dy.rows, w.cols, w.rows);
                    float* sum = O(0);
                    cpu::add(sum, sum, part.data(), nullptr, dx.rows, dx.cols);
                    return;
                }
                const float* dyq = gemm_operand(in, I(0), dy.elements(), e5m2, 0);
                const float* wq = gemm_operand(in, I(1), w.elements(), e4m3, 1);
                KERNEL(matmul_dgrad, O(0), dyq, wq, dy.rows, w.cols, w.rows);
            } else {  // forward: Y = X W^T + b
                const DataTensor &x = a.in(0), &w = a.in(1), &y = a.out(0);
                if (w.cols != x.cols || y.cols != w.rows || y.rows != x.rows) fail(i, "forward GEMM operand shapes disagree");
                const float* xq = gemm_operand(in, I(0), x.elements(), e4m3, 0);
                const float* wq = gemm_operand(in, I(1), w.elements(), e4m3, 1);
                KERNEL(matmul_forward, O(0), xq, wq, nin > 2 ? I(2) : nullptr, x.rows, x.cols, w.rows);
            }
            return;
        }
        case Op::attention_fwd: {
            const DataTensor &qkv = a.in(0), &out = a.out(0);
            const i64 hq = out.cols / hd, hkv = (qkv.cols / hd - hq) / 2;
            const Dropout drop = attention_dropout(in, qkv, hq);
            const i64 win = m.window_of(in.layer);
            cpu::Positions q = positions();
            q.window = win;
            if (name == "attention") {
                KERNEL(attention_forward, O(0), O(1), I(0), qkv.rows, m.seq_len, hq, hkv, hd, drop, win);
                // Unfused (plan.flash_attention off): the probabilities kept for the backward,
                // [and their dropout mask and dropped values] (the kernels recompute from lse).
                if (nout > 2)
                    KERNEL(attention_probs, O(2), nout > 3 ? O(3) : nullptr, nout > 4 ? O(4) : nullptr, I(0), O(1), qkv.rows, m.seq_len, hq,
                           hkv, hd, drop, win);
            } else if (name == "attention.local") {  // context parallelism: this rank's own block
                KERNEL(attention_block_forward, O(0), O(1), I(0), I(0) + hq * hd, qkv.cols, q, positions(), qkv.rows, hq, hkv, hd, false, drop);
            } else {  // a block passed along the ring, merged in
                const DataTensor& kv = a.in(1);
                KERNEL(attention_block_forward, O(0), O(1), I(0), I(1), kv.cols, q, positions(ring_source(kv.ring)), qkv.rows, hq, hkv, hd, true,
                       drop);
            }
            return;
        }
        case Op::attention_bwd: {
            // Inputs {qkv, out, lse, dout}, or for a ring block {qkv, kv, out, lse, dout, dqkv}.
            const bool ring_block = name == "attention.remote";
            const DataTensor &qkv = a.in(0), &out = a.in(ring_block ? 2 : 1);
            const i64 hq = out.cols / hd, hkv = (qkv.cols / hd - hq) / 2;
            const Dropout drop = attention_dropout(in, qkv, hq);
            const i64 win = m.window_of(in.layer);
            cpu::Positions q = positions();
            q.window = win;
            if (name == "attention") {
                KERNEL(attention_backward, O(0), I(0), I(1), I(2), I(3), qkv.rows, m.seq_len, hq, hkv, hd, drop, win);
                // Unfused: the probabilities' gradient, the transient its softmax backward reads.
                if (nout > 1) KERNEL(attention_probs_grad, O(1), I(0), I(3), qkv.rows, m.seq_len, hq, hkv, hd);
            } else if (name == "attention.local") {
                KERNEL(attention_block_backward, O(0), nullptr, qkv.cols, I(0), I(0) + hq * hd, I(1), I(2), I(3), q, positions(), qkv.rows, hq,
                       hkv, hd, false, drop);
            } else {  // ins {qkv, kv, out, lse, dout, dqkv} -> {dqkv, the block's K/V gradient}
                const DataTensor& kv = a.in(1);
                KERNEL(attention_block_backward, O(0), O(1), kv.cols, I(0), I(1), I(2), I(3), I(4), q, positions(ring_source(kv.ring)),
                       qkv.rows, hq, hkv, hd, true, drop);
            }
            return;
        }
        case Op::norm: {
            const bool ln = m.norm == NormKind::layernorm;
            const DataTensor& x = a.in(0);
            if (name == "qk_norm") {  // per head over Q's and K's columns of the fused QKV rows; V passes through
                const i64 W = x.cols, hq = m.heads / tp_size_, hkv = (m.kv_heads > 0 ? m.kv_heads : m.heads) / tp_size_;
                const int per = ln ? 2 : 1;  // weight[, bias] of each norm
                const int w0 = backward(in.phase) ? 2 : 1;
                const float *wq = I(w0), *bq = ln ? I(w0 + 1) : nullptr, *wk = I(w0 + per), *bk = ln ? I(w0 + per + 1) : nullptr;
                float* y = O(0);
                if (dev_) {
                    if (!backward(in.phase)) dev_->qk_norm_forward(y, I(0), wq, bq, wk, bk, x.rows, W, hq, hkv, hd);
                    else dev_->qk_norm_backward(y, O(1), ln ? O(2) : nullptr, O(1 + per), ln ? O(2 + per) : nullptr, I(0), I(1), wq, wk, ln, x.rows, W, hq, hkv, hd);
                    return;
                }
                const float* src = backward(in.phase) ? I(1) : I(0);
                std::memcpy(y, src, static_cast<std::size_t>(x.elements()) * sizeof(float));
                for (i64 t = 0; t < x.rows; ++t) {
                    const i64 q = t * W, k = q + hq * hd;
                    if (!backward(in.phase)) {
                        cpu::norm_forward(y + q, I(0) + q, wq, bq, hq, hd);
                        cpu::norm_forward(y + k, I(0) + k, wk, bk, hkv, hd);
                    } else {  // outputs {dx, dwq[, dbq], dwk[, dbk]}, accumulated into
                        cpu::norm_backward(y + q, O(1), ln ? O(2) : nullptr, I(0) + q, I(1) + q, wq, nullptr, ln, hq, hd);
                        cpu::norm_backward(y + k, O(1 + per), ln ? O(2 + per) : nullptr, I(0) + k, I(1) + k, wk, nullptr, ln, hkv, hd);
                    }
                }
                return;
            }
            if (!backward(in.phase)) {
                KERNEL(norm_forward, O(0), I(0), I(1), ln && nin > 2 ? I(2) : nullptr, x.rows, x.cols);
            } else {
                float* db = ln && nout > 2 ? O(2) : nullptr;
                const float* dy = I(1);
                Sum sum(*this, i, nin > 4 ? x.elements() : 0);
                if (nin > 4) {  // a second gradient of the norm's output (MoE's shared experts under SP): summed first
                    KERNEL(add, sum.p, dy, I(4), nullptr, x.rows, x.cols);
                    dy = sum.p;
                }
                KERNEL(norm_backward, O(0), O(1), db, I(0), dy, I(2), nin > 3 ? I(3) : nullptr, ln, x.rows, x.cols);
            }
            return;
        }
        case Op::embedding: {
            if (!backward(in.phase)) {
                const DataTensor &tab = a.in(1), &e = a.out(0);
                KERNEL(embedding_forward, O(0), I(0), I(1), tp_rank_ * tab.rows, tab.rows, e.rows, e.cols);
            } else {
                const DataTensor &g = a.in(1), &tab = a.out(0);
                KERNEL(embedding_backward, O(0), I(0), I(1), tp_rank_ * tab.rows, tab.rows, g.rows, g.cols);
                if (nout > 1) KERNEL(position_backward, O(1), I(1), g.rows, positions(), g.cols);
            }
            return;
        }
        case Op::loss: {
            const DataTensor& logits = a.in(0);
            const i64 T = logits.rows, V = logits.cols;
            const int k = mtp_depth_of(a.in(1));  // an MTP module's loss: its shifted tokens
            if (!backward(in.phase)) {
                KERNEL(loss_stats, O(0), I(0), I(1), tp_rank_ * V, T, V);
                if (nout > 1) {  // one shard: the loss itself
                    float* loss = O(1);
                    KERNEL(loss_combine, loss, nullptr, O(0), 1, T);
                    add_loss(i, loss, T, k);
                }
            } else {
                const i64 shards = a.in(2).elements() / (T * 3);
                // fp16: the loss scaled up (Megatron's scale_loss) so that small gradients survive
                // fp16. An MTP module's mean is over the rows its shift leaves, times its weight.
                double scale = w_.loss_scale / w_.program.tokens_per_step;
                if (k > 0) scale *= w_.options.mtp_loss_scale / m.mtp_depth / mtp_kept_fraction(m, k);
                if (dev_) {
                    dev_->loss_backward(O(0), I(0), I(1), I(2), shards, tp_rank_ * V, T, V, static_cast<float>(scale));
                } else {
                    std::vector<float> lse(static_cast<std::size_t>(T));
                    KERNEL(loss_combine, nullptr, lse.data(), I(2), shards, T);
                    cpu::loss_backward(O(0), I(0), I(1), lse.data(), tp_rank_ * V, T, V, static_cast<float>(scale));
                }
                if (k > 0) mask_rows(i, O(0), k, T, V);  // the rows past the sequence's end have no target
            }
            return;
        }
        case Op::optimizer_gpu: optimizer(i, false); return;
        case Op::grad_accum: {  // autograd's accumulation: {fresh gradients.., ranges..} -> {ranges..}, each range += its gradient
            if (nin != 2 * nout) fail(i, "grads.accumulate pairs each fresh gradient with its range");
            for (int k = 0; k < nout; ++k) {
                if (a.id(nout + k) != a.id(nin + k) || a.in(k).elements() != a.out(k).elements())
                    fail(i, "grads.accumulate adds a gradient into a range of its own size, in place");
                float* sum = O(k);
                KERNEL(add, sum, sum, I(k), nullptr, 1, a.out(k).elements());
            }
            return;
        }
        case Op::elementwise: break;
        default: fail(i, std::string("op ") + to_string(in.op) + " is not executed by the runtime");
    }
    // Elementwise ops, by what the lowering calls them.
    if (name == "act" || name == "shared.act") {
        const bool glu = gated(m.ffn);
        const cpu::Gate gate = gate_of(m.ffn);
        if (!backward(in.phase)) {
            const DataTensor& y = a.out(0);
            if (glu) KERNEL(glu_forward, O(0), I(0), y.rows, y.cols, gate);
            else if (m.ffn == FfnKind::relu2) KERNEL(relu2_forward, O(0), I(0), y.elements());
            else if (m.ffn == FfnKind::relu) KERNEL(relu_forward, O(0), I(0), y.elements());
            else KERNEL(gelu_forward, O(0), I(0), y.elements());
        } else {
            const DataTensor& dy = a.in(1);
            if (glu) KERNEL(glu_backward, O(0), I(0), I(1), dy.rows, dy.cols, gate);
            else if (m.ffn == FfnKind::relu2) KERNEL(relu2_backward, O(0), I(0), I(1), dy.elements());
            else if (m.ffn == FfnKind::relu) KERNEL(relu_backward, O(0), I(0), I(1), dy.elements());  // I(0): the output
            else KERNEL(gelu_backward, O(0), I(0), I(1), dy.elements());
        }
    } else if (name == "residual1" || name == "residual2") {
        if (!backward(in.phase)) {
            // {x, y[, bias][, z]} -> {out[, dropout mask]}: a bias is one row; a whole tensor beside
            // them (MoE's shared experts under SP) is added too.
            const DataTensor& c = a.out(0);
            const float* b = nullptr;
            int whole = -1;
            for (int k = 2; k < nin; ++k) {
                if (a.in(k).rows == 1) b = I(k);
                else whole = k;
            }
            // The third tensor joins in fp32, before the output's one rounding (scratch of the
            // backend's: a device's output buffer would round each add).
            Sum sum(*this, i, whole >= 0 ? c.elements() : 0);
            if (nout > 1) {  // bias-dropout-add: the branch (with its bias) through the mask
                const float* y = I(1);
                if (whole >= 0) {
                    KERNEL(add, sum.p, y, I(whole), nullptr, c.rows, c.cols);
                    y = sum.p;
                }
                const Dropout drop = dropout(in, name == "residual1" ? DropoutSite::attention_out : DropoutSite::mlp_out, c);
                KERNEL(dropout_add, O(0), O(1), I(0), y, b, c.rows, c.cols, drop, positions());
                return;
            }
            if (whole < 0) {
                KERNEL(add, O(0), I(0), I(1), b, c.rows, c.cols);
            } else {
                KERNEL(add, sum.p, I(0), I(1), b, c.rows, c.cols);
                KERNEL(add, O(0), sum.p, I(whole), nullptr, c.rows, c.cols);
            }
        } else if (nin > 1) {  // {dy, mask} -> {the branch's gradient[, bias grad]}
            const DataTensor& d = a.in(0);
            KERNEL(mul, O(0), I(0), I(1), d.elements());
            // The bias gradient sums the branch's gradient as stored: a 2-byte one rounded first,
            // as a device's buffer (and PyTorch's bf16 tensor) holds it.
            if (nout > 1 && !dev_ && elem_bytes(a.out(0)) == 2.0) round_half(O(0), d.elements());
            if (nout > 1) KERNEL(bias_grad, O(1), O(0), d.rows, d.cols);
        } else if (nout > 0) {  // the skip path passes the gradient on; only a bias takes its sum
            const DataTensor& d = a.in(0);
            KERNEL(bias_grad, O(0), I(0), d.rows, d.cols);
        }
    } else if (name == "optimizer.unscale") {  // fp16: {grads..} -> {grads.., found_inf} (loss_scale.cpp)
        unscale(i);
    } else if (name == "embedding.dropout") {  // {x} -> {x, mask}; backward {dx, mask} -> {dx}, in place
        const DataTensor& x = a.in(0);
        if (!backward(in.phase)) {
            const Dropout drop = dropout(in, DropoutSite::embedding, x);
            KERNEL(dropout_forward, O(0), O(1), I(0), x.rows, x.cols, drop, positions());
        } else {
            KERNEL(mul, O(0), I(0), I(1), x.elements());
        }
    } else if (name == "rope") {
        const DataTensor& q = a.in(0);
        const i64 hq = m.heads / tp_size_, hkv = (m.kv_heads > 0 ? m.kv_heads : m.heads) / tp_size_;
        float* p = O(0);
        if (p != I(0)) {  // out of the projection op-level SAC keeps: copy, then rotate in place
            if (backward(in.phase)) fail(i, "rope's backward is applied in place");
            if (dev_) dev_->copy(p, I(0), q.elements());
            else std::memcpy(p, I(0), static_cast<std::size_t>(q.elements()) * sizeof(float));
        }
        KERNEL(rope, p, q.rows, positions(), hq, hkv, hd, backward(in.phase));
    } else if (name == "embedding.position") {
        const DataTensor &e = a.in(0), &x = a.out(0);
        const i64 row0 = x.rows < e.rows ? tp_rank_ * x.rows : 0;  // with SP the rank keeps its shard
        KERNEL(position_forward, O(0), I(0), I(1), row0, x.rows, positions(), x.cols);
    } else if (name == "tp.ring.local_block") {  // TP overlap: {the rank's shard} -> its block of the gathered tensor
        const DataTensor &x = a.in(0), &g = a.out(0);
        float* to = O(0) + ring_block_at(i, g, x.rows);
        if (dev_) dev_->copy(to, I(0), x.elements());
        else std::memcpy(to, I(0), static_cast<std::size_t>(x.elements()) * sizeof(float));
    } else if (name == "tp.ring.combine") {  // TP overlap: {what the ring brought, the own block} -> the own block
        const DataTensor& y = a.out(0);
        KERNEL(add, O(0), I(1), I(0), nullptr, y.rows, y.cols);
    } else if (name == "cp.dkv_combine") {  // ins {returned K/V gradients, dqkv} -> dqkv
        const DataTensor &ret = a.in(0), &dq = a.out(0);
        float* d = O(0);
        const float* r = I(0);
        if (dev_) return dev_->add_columns(d, dq.cols, r, ret.cols, dq.rows);
        for (i64 t = 0; t < dq.rows; ++t)
            for (i64 c = 0; c < ret.cols; ++c) d[t * dq.cols + (dq.cols - ret.cols) + c] += r[t * ret.cols + c];
    } else if (name == "loss.cast") {  // {x} -> {y}: the logits or their gradient in the other width
        const i64 n = a.in(0).elements();
        if (dev_) dev_->copy(O(0), I(0), n);  // converts between the buffers' widths
        else std::memcpy(O(0), I(0), static_cast<std::size_t>(n) * sizeof(float));  // rounded by finish if 2 bytes wide
    } else if (name == "loss.combine") {
        const DataTensor& loss = a.out(0);
        const i64 T = loss.rows, shards = a.in(0).elements() / (T * 3);
        float* l = O(0);
        KERNEL(loss_combine, l, nullptr, I(0), shards, T);
        if (tp_rank_ == 0) add_loss(i, l, T, mtp_depth_of(loss));  // every TP rank holds the same loss: count it once
    } else {
        fail(i, "elementwise op '" + name + "' is not executed by the runtime");
    }
}

// Memory only: the operands an instruction reads must exist, the ones it writes come to life, an
// optimizer's moments are created on its tier (the ssd tier's file is sized, sparse), and nothing
// is computed, moved or waited for.
void RankState::touch(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const Args a{w_.program, rp_, rp_.operands[i]};
    for (int k = 0; k < a.o.n_in; ++k) {
        const DataTensor& t = a.in(k);
        if (t.tier != Tier::ssd) tensor(a.id(k), false, i);
        else ssd_fd();
    }
    for (int k = 0; k < a.o.n_out; ++k) {
        const DataTensor& t = a.out(k);
        if (t.tier != Tier::ssd) tensor(a.id(a.o.n_in + k), true, i);
        else ssd_fd();
    }
    const bool cpu_stream = in.kind == InstrKind::optimizer;
    if (in.op == Op::optimizer_gpu || cpu_stream) {
        const std::string& name = w_.program.names[static_cast<std::size_t>(in.name)];
        if (cpu_stream && name == "optimizer.ssd") return;  // its state is staged from the file
        for (int k = 0; k < a.o.n_out; ++k) {
            const DataTensor& p = a.out(k);
            if (p.role == TensorRole::param) moments(p.offset, p.elements(), cpu_stream ? Tier::cpu : Tier::gpu);
        }
    }
}

// A skipped step (fp16 overflow) on ZeRO-Infinity's sub-groups: the host's weights of a step
// staged through the host (host_weights_staged_) are a value of this step, which the update writes
// and the copies after it read (to the file, to the GPU). Skipped, they are the unchanged fp32
// master's rounding, as the GPU's weights already are.
std::function<void()> RankState::skipped_ssd_update(std::size_t i, int n_in) {
    const Args a{w_.program, rp_, rp_.operands[i]};
    const std::string& name = w_.program.names[static_cast<std::size_t>(rp_.instrs[i].name)];
    if (name != "optimizer.ssd" || !host_weights_staged_) return [] {};
    const int n = n_in / 2;
    if (n_in != 2 * n || a.o.n_out != 2 * n) fail(i, "the ssd optimizer pairs grads, state and params");
    if (w_.plan.precision == Precision::fp32) fail(i, "an fp32 plan's update is never skipped");
    return host_copies(i, n, n, n);  // the staged state starts with the master: {master, m, v}
}

// A job copying inputs from_in.. onto outputs to_out.. (count pairs, each the output's length) on
// the host; the operands are resolved now, on the rank's thread.
std::function<void()> RankState::host_copies(std::size_t i, int from_in, int to_out, int count) {
    const Args a{w_.program, rp_, rp_.operands[i]};
    std::vector<std::tuple<const float*, float*, i64>> copies;
    for (int k = 0; k < count; ++k)
        copies.emplace_back(tensor(a.id(from_in + k), false, i), tensor(a.id(a.o.n_in + to_out + k), true, i), a.out(to_out + k).elements());
    return [copies = std::move(copies)] {
        for (const auto& [from, to, n] : copies) std::memcpy(to, from, static_cast<std::size_t>(n) * sizeof(float));
    };
}

// FSDP's CPU offload (plan.cpu_grad_accumulation): {copies down.., sums..} -> {sums..}, each
// sum += its micro-batch's copy, on the host.
std::function<void()> RankState::host_sums(std::size_t i) {
    const Args a{w_.program, rp_, rp_.operands[i]};
    if (a.o.n_in != 2 * a.o.n_out) fail(i, "the host's gradient sum pairs each copy down with its range");
    std::vector<std::tuple<const float*, float*, i64>> sums;
    for (int k = 0; k < a.o.n_out; ++k) {
        if (a.in(k).elements() != a.out(k).elements()) fail(i, "the host's gradient sum adds a copy into a range of its own size");
        sums.emplace_back(tensor(a.id(k), false, i), tensor(a.id(a.o.n_in + k), true, i), a.out(k).elements());
    }
    return [sums = std::move(sums)] {
        for (const auto& [from, to, n] : sums)
            for (i64 e = 0; e < n; ++e) to[e] += from[e];
    };
}

// The operands are resolved here, on the rank's thread (tensor() and moments() keep the rank's
// books); the returned job only computes, so that a host update can run on a thread of its own
// beside the kernels the rank goes on issuing (step.cpp).
std::function<void()> RankState::optimizer_job(std::size_t i, bool cpu_stream) {
    const Instr& in = rp_.instrs[i];
    const Args a{w_.program, rp_, rp_.operands[i]};
    const RunOptions& o = w_.options;
    if (w_.program.names[static_cast<std::size_t>(in.name)] == "grads.host_accumulate") return host_sums(i);
    if (update_number(cpu_stream) == 0) return [] {};  // a lock-free run's first step: no gradients yet
    // fp16: the step's overflow flag, summed over the ranks, comes last; a step that found an
    // inf or NaN is skipped (Megatron's optimizer.step returns before the update).
    int nin = a.o.n_in;
    if (nin > 0 && a.in(nin - 1).role == TensorRole::stats) {
        --nin;
        float flag = 0;
        to_host(&flag, tensor(a.id(nin), false, i), 1);
        if (flag > 0) {
            skipped_ = true;
            return skipped_ssd_update(i, nin);
        }
    }
    struct Update {
        float *p, *m, *v;
        const float* g;
        i64 offset, n;
        bool on_device;
        float* weights;  ///< bf16: the weights the fp32 master p is copied to (null: p is them)
        bool start_master = false;  ///< first update of a master staged from the SSD: start it from the weights
    };
    std::vector<Update> updates;
    const std::string& name = w_.program.names[static_cast<std::size_t>(in.name)];
    if (name == "optimizer.publish") {  // lock-free: {fp32 masters..} -> {homed weights..}, rounded by finish
        if (a.o.n_in != a.o.n_out) fail(i, "the publish pairs each master with its weights");
        return host_copies(i, 0, 0, a.o.n_in);
    }
    if (!cpu_stream || name == "optimizer.cpu") {  // moments on the instruction's own tier
        const Tier tier = cpu_stream ? Tier::cpu : Tier::gpu;
        if (nin != a.o.n_out) fail(i, "the optimizer pairs gradient and parameter ranges");
        for (int k = 0; k < nin; ++k) {
            const DataTensor& p = a.out(k);
            MomentBlock& mb = moments(p.offset, p.elements(), tier);
            float* weights = p.version == 1 ? nullptr : tensor(a.id(a.o.n_in + k), true, i);  // lock-free: the master alone
            // bf16 on the GPU: AdamW on the fp32 master, whose bf16 rounding (finish) the weights take.
            float* master = mb.master.empty() ? nullptr : mb.master.data();
            updates.push_back({master ? master : weights, mb.m.data(), mb.v.data(), tensor(a.id(k), false, i), p.offset, p.elements(),
                               dev_ && tier == Tier::gpu, master ? weights : nullptr});
        }
    } else {
        if (name != "optimizer.ssd") fail(i, "unknown CPU optimizer '" + name + "'");
        // ZeRO-Infinity's sub-group: {host grads.., staged state..} -> {staged state.., host params..}.
        const int n = nin / 2;
        if (nin != 2 * n || a.o.n_out != 2 * n) fail(i, "the ssd optimizer pairs grads, state and params");
        // A bf16 plan's staged state is {master, m, v}: AdamW on the master, copied to the host's
        // weights; the first update starts the master from those weights (the file holds none yet).
        const bool master = w_.plan.precision != Precision::fp32;
        for (int k = 0; k < n; ++k) {
            const DataTensor& p = a.out(n + k);
            const i64 e = p.elements();
            float* st = tensor(a.id(n + k), false, i);
            float* weights = tensor(a.id(a.o.n_in + n + k), true, i);
            // Staged weights are written by this update: the file's master started as the weights (init_params).
            if (master)
                updates.push_back({st, st + e, st + 2 * e, tensor(a.id(k), false, i), p.offset, e, false, weights,
                                   update_number(cpu_stream) == 1 && !host_weights_staged_});
            else updates.push_back({weights, st, st + e, tensor(a.id(k), false, i), p.offset, e, false, nullptr});
        }
    }
    const int update = update_number(cpu_stream);
    const double warm = o.warmup_steps > 0 ? std::min(1.0, static_cast<double>(update) / o.warmup_steps) : 1.0;
    const auto lr = static_cast<float>(o.lr * warm), b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2),
               eps = static_cast<float>(o.eps), wd = static_cast<float>(o.weight_decay);
    const int threads = host_threads();
    const bool narrow_m = w_.plan.exp_avg_dtype == Precision::bf16, narrow_v = w_.plan.exp_avg_sq_dtype == Precision::bf16;
    return [this, updates = std::move(updates), lr, b1, b2, eps, wd, update, threads, narrow_m, narrow_v] {
        for (const Update& u : updates) {
            if (u.start_master) std::memcpy(u.p, u.weights, static_cast<std::size_t>(u.n) * sizeof(float));
            if (u.on_device) {  // each parameter with its weight decay or none, in one launch
                std::vector<i64> begin, len;
                std::vector<float> decay;
                for (const ParamEntry& e : layout_.entries) {
                    const i64 lo = std::max(u.offset, e.offset), hi = std::min(u.offset + u.n, e.end());
                    if (lo >= hi) continue;
                    begin.push_back(lo - u.offset);
                    len.push_back(hi - lo);
                    decay.push_back(e.decay ? wd : 0.0f);
                }
                dev_->adamw_ranges(u.p, u.m, u.v, u.g, u.weights, begin, len, decay, lr, b1, b2, eps, update);  // the weights too
            } else {
                // The host's AdamW on all the cores a lone rank has (DeepSpeed's CPU Adam is multi-threaded too).
                parallel_chunks(u.n, threads, [&](i64 lo, i64 hi) {
                    cpu::adamw(u.p + lo, u.m + lo, u.v + lo, u.g + lo, decay_.data() + u.offset + lo, hi - lo, lr, b1, b2, eps, wd, update);
                    if (narrow_m) cpu::round_bf16(u.m + lo, hi - lo);  // stored in bf16, updated in fp32
                    if (narrow_v) cpu::round_bf16(u.v + lo, hi - lo);
                });
            }
            if (!u.weights || u.on_device) continue;
            // Only a host update has weights apart from its master on a device (a device update's
            // are on_device). Its job runs on a thread of its own, and the Device is the rank
            // thread's alone: the weights go up from there once the job is done (host_job_done).
            if (dev_) host_uploads_.emplace_back(u.weights, u.p, u.n);
            else std::memcpy(u.weights, u.p, static_cast<std::size_t>(u.n) * sizeof(float));
        }
    };
}

}  // namespace strata::runtime
