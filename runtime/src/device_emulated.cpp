// The emulated device: device.hpp's interface over the cpu kernels, in this process, so that the
// executor's cuda path (every dev_ branch of ops.cpp, transfers.cpp, moe_ops.cpp, step.cpp,
// rank.cpp and buffer.cpp) runs where no GPU is, in CI. It keeps the cuda device's rules and checks
// them where a GPU would only misbehave later:
// - device memory is handed out as addresses in a reserved range that is never mapped, so host
//   code that reads or writes it directly faults here, as it would on a GPU;
// - every kernel's and copy's operand range must lie inside one live buffer, and a kernel must be
//   given device memory;
// - bf16 and fp16 buffers hold floats rounded to their format after every write (the cuda device
//   stores 2 bytes);
// - the lanes are queues: kernels run at once, copies on the h2d and d2h lanes run as late as the
//   events allow (when a lane waits for them, the host syncs, settles a buffer or asks whether an
//   event was reached). A copy the Program forgot to order against a kernel therefore shows up as
//   a wrong value, deterministically, where a GPU would race.
// The kernels here (the cpu kernels on the buffers' storage); the device model: device_emulated.hpp.
#include <cmath>
#include <iterator>
#include <memory>

#include "device_emulated.hpp"

namespace strata::runtime {
namespace {

using i64 = Device::i64;

class EmulatedDevice final : public EmulatedBase {
public:
    // Kernels: the cpu kernels on the buffers' storage, then 2-byte outputs rounded.
    void matmul_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 K, i64 N) override {
        const Ref Y = dev(y, T * N, "matmul_forward y"), X = dev(x, T * K, "matmul_forward x"), W = dev(w, N * K, "matmul_forward w"),
                  B = opt(b, N, "matmul_forward b");
        kernel([=] { cpu::matmul_forward(Y.p, X.p, W.p, B.p, T, K, N); }, {Y});
    }
    void matmul_dgrad(float* dx, const float* dy, const float* w, i64 T, i64 K, i64 N) override {
        const Ref DX = dev(dx, T * K, "matmul_dgrad dx"), DY = dev(dy, T * N, "matmul_dgrad dy"), W = dev(w, N * K, "matmul_dgrad w");
        kernel([=] { cpu::matmul_dgrad(DX.p, DY.p, W.p, T, K, N); }, {DX});
    }
    void matmul_dgrad_add(float* dx, const float* dy, const float* w, i64 T, i64 K, i64 N) override {
        const Ref DX = dev(dx, T * K, "matmul_dgrad_add dx"), DY = dev(dy, T * N, "matmul_dgrad_add dy"), W = dev(w, N * K, "matmul_dgrad_add w");
        kernel([=] {
            std::vector<float> part(static_cast<std::size_t>(T * K));
            cpu::matmul_dgrad(part.data(), DY.p, W.p, T, K, N);
            cpu::add(DX.p, DX.p, part.data(), nullptr, T, K);
        }, {DX});
    }
    void matmul_wgrad(float* dw, float* db, const float* x, const float* dy, i64 T, i64 K, i64 N) override {
        const Ref DW = dev(dw, N * K, "matmul_wgrad dw"), DB = opt(db, N, "matmul_wgrad db"), X = dev(x, T * K, "matmul_wgrad x"),
                  DY = dev(dy, T * N, "matmul_wgrad dy");
        kernel([=] { cpu::matmul_wgrad(DW.p, DB.p, X.p, DY.p, T, K, N); }, {DW, DB});
    }
    void bias_grad(float* db, const float* d, i64 T, i64 N) override {
        const Ref DB = dev(db, N, "bias_grad db"), D = dev(d, T * N, "bias_grad d");
        kernel([=] { cpu::bias_grad(DB.p, D.p, T, N); }, {DB});
    }
    void norm_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 C) override {
        const Ref Y = dev(y, T * C, "norm_forward y"), X = dev(x, T * C, "norm_forward x"), W = dev(w, C, "norm_forward w"),
                  B = opt(b, C, "norm_forward b");
        kernel([=] { cpu::norm_forward(Y.p, X.p, W.p, B.p, T, C); }, {Y});
    }
    void norm_backward(float* dx, float* dw, float* db, const float* x, const float* dy, const float* w, const float* residual, bool ln,
                       i64 T, i64 C) override {
        const Ref DX = dev(dx, T * C, "norm_backward dx"), DW = dev(dw, C, "norm_backward dw"), DB = opt(db, C, "norm_backward db"),
                  X = dev(x, T * C, "norm_backward x"), DY = dev(dy, T * C, "norm_backward dy"), W = dev(w, C, "norm_backward w"),
                  R = opt(residual, T * C, "norm_backward residual");
        kernel([=] { cpu::norm_backward(DX.p, DW.p, DB.p, X.p, DY.p, W.p, R.p, ln, T, C); }, {DX, DW, DB});
    }
    // QK-norm as the cpu backend's executor runs it (ops.cpp): V copied through, each head normed.
    void qk_norm_forward(float* y, const float* x, const float* wq, const float* bq, const float* wk, const float* bk, i64 T, i64 W,
                         i64 hq, i64 hkv, i64 hd) override {
        const Ref Y = dev(y, T * W, "qk_norm_forward y"), X = dev(x, T * W, "qk_norm_forward x"), WQ = dev(wq, hd, "qk_norm_forward wq"),
                  BQ = opt(bq, hd, "qk_norm_forward bq"), WK = dev(wk, hd, "qk_norm_forward wk"), BK = opt(bk, hd, "qk_norm_forward bk");
        kernel([=] {
            if (Y.p != X.p) std::memcpy(Y.p, X.p, static_cast<std::size_t>(T * W) * sizeof(float));
            for (i64 t = 0; t < T; ++t) {
                const i64 q = t * W, k = q + hq * hd;
                cpu::norm_forward(Y.p + q, X.p + q, WQ.p, BQ.p, hq, hd);
                cpu::norm_forward(Y.p + k, X.p + k, WK.p, BK.p, hkv, hd);
            }
        }, {Y});
    }
    void qk_norm_backward(float* dx, float* dwq, float* dbq, float* dwk, float* dbk, const float* x, const float* dy, const float* wq,
                          const float* wk, bool ln, i64 T, i64 W, i64 hq, i64 hkv, i64 hd) override {
        const Ref DX = dev(dx, T * W, "qk_norm_backward dx"), DWQ = dev(dwq, hd, "qk_norm_backward dwq"),
                  DBQ = opt(dbq, hd, "qk_norm_backward dbq"), DWK = dev(dwk, hd, "qk_norm_backward dwk"),
                  DBK = opt(dbk, hd, "qk_norm_backward dbk"), X = dev(x, T * W, "qk_norm_backward x"), DY = dev(dy, T * W, "qk_norm_backward dy"),
                  WQ = dev(wq, hd, "qk_norm_backward wq"), WK = dev(wk, hd, "qk_norm_backward wk");
        kernel([=] {
            if (DX.p != DY.p) std::memcpy(DX.p, DY.p, static_cast<std::size_t>(T * W) * sizeof(float));
            for (i64 t = 0; t < T; ++t) {
                const i64 q = t * W, k = q + hq * hd;
                cpu::norm_backward(DX.p + q, DWQ.p, DBQ.p, X.p + q, DY.p + q, WQ.p, nullptr, ln, hq, hd);
                cpu::norm_backward(DX.p + k, DWK.p, DBK.p, X.p + k, DY.p + k, WK.p, nullptr, ln, hkv, hd);
            }
        }, {DX, DWQ, DBQ, DWK, DBK});
    }
    void gelu_forward(float* y, const float* x, i64 n) override { unary(cpu::gelu_forward, y, x, n, "gelu_forward"); }
    void gelu_backward(float* dx, const float* x, const float* dy, i64 n) override { binary(cpu::gelu_backward, dx, x, dy, n, "gelu_backward"); }
    void relu2_forward(float* y, const float* x, i64 n) override { unary(cpu::relu2_forward, y, x, n, "relu2_forward"); }
    void relu2_backward(float* dx, const float* x, const float* dy, i64 n) override { binary(cpu::relu2_backward, dx, x, dy, n, "relu2_backward"); }
    void relu_forward(float* y, const float* x, i64 n) override { unary(cpu::relu_forward, y, x, n, "relu_forward"); }
    void relu_backward(float* dx, const float* y, const float* dy, i64 n) override { binary(cpu::relu_backward, dx, y, dy, n, "relu_backward"); }
    void mul(float* out, const float* a, const float* b, i64 n) override { binary(cpu::mul, out, a, b, n, "mul"); }
    void glu_forward(float* y, const float* x, i64 T, i64 F, cpu::Gate gate) override {
        const Ref Y = dev(y, T * F, "glu_forward y"), X = dev(x, 2 * T * F, "glu_forward x");
        kernel([=] { cpu::glu_forward(Y.p, X.p, T, F, gate); }, {Y});
    }
    void glu_backward(float* dx, const float* x, const float* dy, i64 T, i64 F, cpu::Gate gate) override {
        const Ref DX = dev(dx, 2 * T * F, "glu_backward dx"), X = dev(x, 2 * T * F, "glu_backward x"), DY = dev(dy, T * F, "glu_backward dy");
        kernel([=] { cpu::glu_backward(DX.p, X.p, DY.p, T, F, gate); }, {DX});
    }
    void add(float* out, const float* a, const float* b, const float* bias, i64 T, i64 C) override {
        const Ref O = dev(out, T * C, "add out"), A = dev(a, T * C, "add a"), B = dev(b, T * C, "add b"), BI = opt(bias, C, "add bias");
        kernel([=] { cpu::add(O.p, A.p, B.p, BI.p, T, C); }, {O});
    }
    void rope(float* qkv, i64 T, const cpu::Positions& where, i64 hq, i64 hkv, i64 d, bool inverse) override {
        const Ref Q = dev(qkv, T * (hq + 2 * hkv) * d, "rope qkv");
        kernel([=] { cpu::rope(Q.p, T, where, hq, hkv, d, inverse); }, {Q});
    }
    void attention_forward(float* out, float* lse, const float* qkv, i64 T, i64 seq, i64 hq, i64 hkv, i64 d, const Dropout& drop,
                           i64 window) override {
        const Ref O = dev(out, T * hq * d, "attention_forward out"), L = dev(lse, T * hq, "attention_forward lse"),
                  Q = dev(qkv, T * (hq + 2 * hkv) * d, "attention_forward qkv");
        kernel([=] { cpu::attention_forward(O.p, L.p, Q.p, T, seq, hq, hkv, d, drop, window); }, {O, L});
    }
    void attention_backward(float* dqkv, const float* qkv, const float* out, const float* lse, const float* dout, i64 T, i64 seq, i64 hq,
                            i64 hkv, i64 d, const Dropout& drop, i64 window) override {
        const i64 W = (hq + 2 * hkv) * d;
        const Ref DQ = dev(dqkv, T * W, "attention_backward dqkv"), Q = dev(qkv, T * W, "attention_backward qkv"),
                  O = dev(out, T * hq * d, "attention_backward out"), L = dev(lse, T * hq, "attention_backward lse"),
                  DO = dev(dout, T * hq * d, "attention_backward dout");
        kernel([=] { cpu::attention_backward(DQ.p, Q.p, O.p, L.p, DO.p, T, seq, hq, hkv, d, drop, window); }, {DQ});
    }
    void attention_probs(float* probs, float* mask, float* dropped, const float* qkv, const float* lse, i64 T, i64 seq, i64 hq, i64 hkv,
                         i64 d, const Dropout& drop, i64 window) override {
        const i64 n = T / seq * hq * seq * seq;
        const Ref P = dev(probs, n, "attention_probs probs"), Q = dev(qkv, T * (hq + 2 * hkv) * d, "attention_probs qkv"),
                  L = dev(lse, T * hq, "attention_probs lse"), M = mask ? dev(mask, n, "attention_probs mask") : Ref{},
                  D = dropped ? dev(dropped, n, "attention_probs dropped") : Ref{};
        kernel([=] { cpu::attention_probs(P.p, M.p, D.p, Q.p, L.p, T, seq, hq, hkv, d, drop, window); }, {P, M, D});  // absent ones skipped
    }
    void attention_probs_grad(float* dprobs, const float* qkv, const float* dout, i64 T, i64 seq, i64 hq, i64 hkv, i64 d) override {
        const Ref P = dev(dprobs, T / seq * hq * seq * seq, "attention_probs_grad dprobs"), Q = dev(qkv, T * (hq + 2 * hkv) * d, "attention_probs_grad qkv"),
                  G = dev(dout, T * hq * d, "attention_probs_grad dout");
        kernel([=] { cpu::attention_probs_grad(P.p, Q.p, G.p, T, seq, hq, hkv, d); }, {P});
    }
    void attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, i64 kv_stride, const cpu::Positions& qpos,
                                 const cpu::Positions& kpos, i64 T, i64 hq, i64 hkv, i64 d, bool merge, const Dropout& drop) override {
        const i64 W = (hq + 2 * hkv) * d, kv_n = T > 0 ? (T - 1) * kv_stride + 2 * hkv * d : 0;
        const Ref O = dev(out, T * hq * d, "attention_block_forward out"), L = dev(lse, T * hq, "attention_block_forward lse"),
                  Q = dev(qkv, T * W, "attention_block_forward qkv"), K = dev(kv, kv_n, "attention_block_forward kv");
        kernel([=] { cpu::attention_block_forward(O.p, L.p, Q.p, K.p, kv_stride, qpos, kpos, T, hq, hkv, d, merge, drop); }, {O, L});
    }
    void attention_block_backward(float* dqkv, float* dkv, i64 kv_stride, const float* qkv, const float* kv, const float* out, const float* lse,
                                  const float* dout, const cpu::Positions& qpos, const cpu::Positions& kpos, i64 T, i64 hq, i64 hkv, i64 d,
                                  bool accumulate, const Dropout& drop) override {
        const i64 W = (hq + 2 * hkv) * d, kv_n = T > 0 ? (T - 1) * kv_stride + 2 * hkv * d : 0;
        const Ref DQ = dev(dqkv, T * W, "attention_block_backward dqkv"), DK = opt(dkv, kv_n, "attention_block_backward dkv"),
                  Q = dev(qkv, T * W, "attention_block_backward qkv"), K = dev(kv, kv_n, "attention_block_backward kv"),
                  O = dev(out, T * hq * d, "attention_block_backward out"), L = dev(lse, T * hq, "attention_block_backward lse"),
                  DO = dev(dout, T * hq * d, "attention_block_backward dout");
        kernel([=] { cpu::attention_block_backward(DQ.p, DK.p, kv_stride, Q.p, K.p, O.p, L.p, DO.p, qpos, kpos, T, hq, hkv, d, accumulate, drop); },
               {DQ, DK});
    }
    void copy_columns(float* dst, i64 dst_stride, const float* src, i64 src_stride, i64 cols, i64 rows) override {
        if (rows == 0) return;
        const Ref D = dev(dst, (rows - 1) * dst_stride + cols, "copy_columns dst"), S = dev(src, (rows - 1) * src_stride + cols, "copy_columns src");
        kernel([=] { cpu::copy_columns(D.p, dst_stride, S.p, src_stride, cols, rows); }, {D});
    }
    void mla_rope_forward(float* qkv, const float* q, const float* kv, const float* k_rope, i64 T, const cpu::Positions& where, i64 heads,
                          i64 nope, i64 rope, i64 dv) override {
        const i64 dqk = nope + rope;
        const Ref O = dev(qkv, T * heads * (2 * dqk + dv), "mla_rope_forward qkv"), Q = dev(q, T * heads * dqk, "mla_rope_forward q"),
                  KV = dev(kv, T * heads * (nope + dv), "mla_rope_forward kv"), R = dev(k_rope, T * rope, "mla_rope_forward k_rope");
        kernel([=] { cpu::mla_rope_forward(O.p, Q.p, KV.p, R.p, T, where, heads, nope, rope, dv); }, {O});
    }
    void mla_rope_backward(float* dq, float* dkv, float* dk_rope, const float* dqkv, i64 T, const cpu::Positions& where, i64 heads, i64 nope,
                           i64 rope, i64 dv) override {
        const i64 dqk = nope + rope;
        const Ref DQ = dev(dq, T * heads * dqk, "mla_rope_backward dq"), DKV = dev(dkv, T * heads * (nope + dv), "mla_rope_backward dkv"),
                  DR = dev(dk_rope, T * rope, "mla_rope_backward dk_rope"), G = dev(dqkv, T * heads * (2 * dqk + dv), "mla_rope_backward dqkv");
        kernel([=] { cpu::mla_rope_backward(DQ.p, DKV.p, DR.p, G.p, T, where, heads, nope, rope, dv); }, {DQ, DKV, DR});
    }
    void add_columns(float* dst, i64 dst_cols, const float* src, i64 src_cols, i64 rows) override {
        const Ref D = dev(dst, rows * dst_cols, "add_columns dst"), S = dev(src, rows * src_cols, "add_columns src");
        kernel(
            [=] {
                for (i64 t = 0; t < rows; ++t)
                    for (i64 c = 0; c < src_cols; ++c) D.p[t * dst_cols + (dst_cols - src_cols) + c] += S.p[t * src_cols + c];
            },
            {D});
    }
    void dropout_forward(float* y, float* mask, const float* x, i64 T, i64 C, const Dropout& drop, const cpu::Positions& where) override {
        const Ref Y = dev(y, T * C, "dropout_forward y"), M = dev(mask, T * C, "dropout_forward mask"), X = dev(x, T * C, "dropout_forward x");
        kernel([=] { cpu::dropout_forward(Y.p, M.p, X.p, T, C, drop, where); }, {Y, M});
    }
    void dropout_add(float* out, float* mask, const float* a, const float* b, const float* bias, i64 T, i64 C, const Dropout& drop,
                     const cpu::Positions& where) override {
        const Ref O = dev(out, T * C, "dropout_add out"), M = dev(mask, T * C, "dropout_add mask"), A = dev(a, T * C, "dropout_add a"),
                  B = dev(b, T * C, "dropout_add b"), BI = opt(bias, C, "dropout_add bias");
        kernel([=] { cpu::dropout_add(O.p, M.p, A.p, B.p, BI.p, T, C, drop, where); }, {O, M});
    }
    void embedding_forward(float* out, const float* tokens, const float* table, i64 first, i64 rows, i64 T, i64 C) override {
        const Ref O = dev(out, T * C, "embedding_forward out"), TK = dev(tokens, 2 * T, "embedding_forward tokens"),
                  TB = dev(table, rows * C, "embedding_forward table");
        kernel([=] { cpu::embedding_forward(O.p, TK.p, TB.p, first, rows, T, C); }, {O});
    }
    void embedding_backward(float* dtable, const float* tokens, const float* dout, i64 first, i64 rows, i64 T, i64 C) override {
        const Ref D = dev(dtable, rows * C, "embedding_backward dtable"), TK = dev(tokens, 2 * T, "embedding_backward tokens"),
                  DO = dev(dout, T * C, "embedding_backward dout");
        kernel([=] { cpu::embedding_backward(D.p, TK.p, DO.p, first, rows, T, C); }, {D});
    }
    void position_forward(float* out, const float* e, const float* pos, i64 row0, i64 rows_out, const cpu::Positions& where, i64 C) override {
        const Ref O = dev(out, rows_out * C, "position_forward out"), E = dev(e, (row0 + rows_out) * C, "position_forward e"),
                  P = dev(pos, where.seq * C, "position_forward pos");
        kernel([=] { cpu::position_forward(O.p, E.p, P.p, row0, rows_out, where, C); }, {O});
    }
    void position_backward(float* dpos, const float* d, i64 T, const cpu::Positions& where, i64 C) override {
        const Ref DP = dev(dpos, where.seq * C, "position_backward dpos"), D = dev(d, T * C, "position_backward d");
        kernel([=] { cpu::position_backward(DP.p, D.p, T, where, C); }, {DP});
    }
    void loss_stats(float* stats, const float* logits, const float* tokens, i64 first, i64 T, i64 V) override {
        const Ref S = dev(stats, 3 * T, "loss_stats stats"), L = dev(logits, T * V, "loss_stats logits"), TK = dev(tokens, 2 * T, "loss_stats tokens");
        kernel([=] { cpu::loss_stats(S.p, L.p, TK.p, first, T, V); }, {S});
    }
    void loss_combine(float* loss, float* lse, const float* stats, i64 n, i64 T) override {
        const Ref L = dev(loss, T, "loss_combine loss"), E = opt(lse, T, "loss_combine lse"), S = dev(stats, 3 * n * T, "loss_combine stats");
        kernel([=] { cpu::loss_combine(L.p, E.p, S.p, n, T); }, {L, E});
    }
    void loss_backward(float* dlogits, const float* logits, const float* tokens, const float* stats, i64 shards, i64 first, i64 T, i64 V,
                       float scale) override {
        const Ref D = dev(dlogits, T * V, "loss_backward dlogits"), L = dev(logits, T * V, "loss_backward logits"),
                  TK = dev(tokens, 2 * T, "loss_backward tokens"), S = dev(stats, 3 * shards * T, "loss_backward stats");
        kernel([=] {
            std::vector<float> loss(static_cast<std::size_t>(T)), lse(static_cast<std::size_t>(T));
            cpu::loss_combine(loss.data(), lse.data(), S.p, shards, T);
            cpu::loss_backward(D.p, L.p, TK.p, lse.data(), first, T, V, scale);
        }, {D});
    }

    // Mixture of experts: the moves follow moe_kernels.cuh (a null routing weighs 1; dprobs may be null).
    void moe_set_order(const i64* pos, i64 n) override {
        order_.assign(pos, pos + n);
        kept_ = 0;
        for (i64 p : order_) kept_ = std::max(kept_, p + 1);
    }
    void moe_route(float* routing, const float* logits, i64 T, i64 E, i64 k, i64 groups, i64 group_topk) override {
        const Ref R = dev(routing, 2 * k * T, "moe_route routing"), L = dev(logits, T * E, "moe_route logits");
        kernel([=] { cpu::moe_route(R.p, L.p, T, E, k, groups, group_topk); }, {R});
    }
    void moe_route_backward(float* dlogits, const float* routing, const float* dprobs, i64 T, i64 E, i64 k) override {
        const Ref D = dev(dlogits, T * E, "moe_route_backward dlogits"), R = dev(routing, 2 * k * T, "moe_route_backward routing"),
                  DP = dev(dprobs, T * k, "moe_route_backward dprobs");
        kernel([=] { cpu::moe_route_backward(D.p, R.p, DP.p, T, E, k); }, {D});
    }
    void moe_permute(float* xp, const float* x, i64 T, i64 k, i64 C) override {
        const Ref XP = dev(xp, kept_ * C, "moe_permute xp"), X = dev(x, T * C, "moe_permute x");
        const std::vector<i64> pos = order(T * k, "moe_permute");
        kernel([=] {
            for (i64 tk = 0; tk < T * k; ++tk)
                if (pos[tk] >= 0) std::memcpy(XP.p + pos[tk] * C, X.p + (tk / k) * C, static_cast<std::size_t>(C) * sizeof(float));
        }, {XP});
    }
    void moe_permute_backward(float* dx, const float* dxp, i64 T, i64 k, i64 C) override {
        const Ref DX = dev(dx, T * C, "moe_permute_backward dx"), DXP = dev(dxp, kept_ * C, "moe_permute_backward dxp");
        const std::vector<i64> pos = order(T * k, "moe_permute_backward");
        kernel([=] {
            for (i64 t = 0; t < T; ++t)
                for (i64 c = 0; c < C; ++c) {
                    float s = 0;
                    for (i64 j = 0; j < k; ++j)
                        if (const i64 p = pos[t * k + j]; p >= 0) s += DXP.p[p * C + c];
                    DX.p[t * C + c] = s;
                }
        }, {DX});
    }
    void moe_unpermute(float* y, const float* ye, const float* routing, i64 T, i64 k, i64 C) override {
        const Ref Y = dev(y, T * C, "moe_unpermute y"), YE = dev(ye, kept_ * C, "moe_unpermute ye"), R = opt(routing, 2 * k * T, "moe_unpermute routing");
        const std::vector<i64> pos = order(T * k, "moe_unpermute");
        kernel([=] {
            for (i64 t = 0; t < T; ++t)
                for (i64 c = 0; c < C; ++c) {
                    float s = 0;
                    for (i64 j = 0; j < k; ++j)
                        if (const i64 p = pos[t * k + j]; p >= 0) s += (R.p ? R.p[t * 2 * k + k + j] : 1.0f) * YE.p[p * C + c];
                    Y.p[t * C + c] = s;
                }
        }, {Y});
    }
    void moe_unpermute_backward(float* dye, float* dprobs, const float* dy, const float* ye, const float* routing, i64 T, i64 k,
                                i64 C) override {
        const Ref DYE = dev(dye, kept_ * C, "moe_unpermute_backward dye"), DP = opt(dprobs, T * k, "moe_unpermute_backward dprobs"),
                  DY = dev(dy, T * C, "moe_unpermute_backward dy"), YE = opt(ye, kept_ * C, "moe_unpermute_backward ye"),
                  R = opt(routing, 2 * k * T, "moe_unpermute_backward routing");
        if (DP.p && !YE.p) throw std::runtime_error("emulated device: moe_unpermute_backward: dprobs without ye");
        const std::vector<i64> pos = order(T * k, "moe_unpermute_backward");
        kernel([=] {
            for (i64 tk = 0; tk < T * k; ++tk) {
                const i64 p = pos[tk], t = tk / k;
                float dot = 0;
                if (p >= 0)
                    for (i64 c = 0; c < C; ++c) {
                        DYE.p[p * C + c] = (R.p ? R.p[t * 2 * k + k + tk % k] : 1.0f) * DY.p[t * C + c];
                        if (DP.p) dot += DY.p[t * C + c] * YE.p[p * C + c];
                    }
                if (DP.p) DP.p[tk] = p >= 0 ? dot : 0.0f;
            }
        }, {DYE, DP});
    }
    void moe_permute_probs(float* pr, const float* routing, i64 T, i64 k) override {
        const Ref P = dev(pr, kept_, "moe_permute_probs pr"), R = dev(routing, 2 * k * T, "moe_permute_probs routing");
        const std::vector<i64> pos = order(T * k, "moe_permute_probs");
        kernel([=] {
            for (i64 i = 0; i < T * k; ++i)
                if (pos[i] >= 0) P.p[pos[i]] = R.p[(i / k) * 2 * k + k + i % k];
        }, {P});
    }
    void moe_permute_probs_backward(float* dp, const float* dr, i64 T, i64 k) override {
        const Ref DP = dev(dp, T * k, "moe_permute_probs_backward dp"), DR = dev(dr, kept_, "moe_permute_probs_backward dr");
        const std::vector<i64> pos = order(T * k, "moe_permute_probs_backward");
        kernel([=] {
            for (i64 i = 0; i < T * k; ++i) DP.p[i] = pos[i] < 0 ? 0.0f : DR.p[pos[i]];
        }, {DP});
    }
    void scale_rows(float* y, const float* x, const float* w, i64 rows, i64 C) override {
        const Ref Y = dev(y, rows * C, "scale_rows y"), X = dev(x, rows * C, "scale_rows x"), W = dev(w, rows, "scale_rows w");
        kernel([=] {
            for (i64 i = 0; i < rows * C; ++i) Y.p[i] = X.p[i] * W.p[i / C];
        }, {Y});
    }
    void row_dot(float* out, const float* a, const float* b, i64 rows, i64 C) override {
        const Ref O = dev(out, rows, "row_dot out"), A = dev(a, rows * C, "row_dot a"), B = dev(b, rows * C, "row_dot b");
        kernel([=] {
            for (i64 r = 0; r < rows; ++r) {
                float s = 0;
                for (i64 c = 0; c < C; ++c) s += A.p[r * C + c] * B.p[r * C + c];
                O.p[r] = s;
            }
        }, {O});
    }

    void unscale(float* g, i64 n, float inv, float* found) override {
        const Ref G = dev(g, n, "unscale g"), F = dev(found, 1, "unscale found");
        kernel([=] {
            bool bad = false;
            for (i64 e = 0; e < n; ++e) {
                bad |= !std::isfinite(G.p[e]);
                G.p[e] *= inv;
            }
            if (bad) *F.p = 1.0f;
        }, {G});
    }

    void adamw(float* p, float* m, float* v, const float* g, const unsigned char* decay, i64 n, float lr, float b1, float b2, float eps,
               float wd, int step) override {
        const Ref P = dev(p, n, "adamw p"), M = dev(m, n, "adamw m"), V = dev(v, n, "adamw v"), G = dev(g, n, "adamw g"),
                  D = opt(reinterpret_cast<const float*>(decay), (n + 3) / 4, "adamw decay");
        const auto* dk = reinterpret_cast<const unsigned char*>(D.p);
        kernel([=] {  // the device's null: every element decays (the cpu kernel's: none)
            const std::vector<unsigned char> all(dk ? 0 : static_cast<std::size_t>(n), 1);
            cpu::adamw(P.p, M.p, V.p, G.p, dk ? dk : all.data(), n, lr, b1, b2, eps, wd, step);
        }, {P, M, V});
    }
    void adamw_ranges(float* p, float* m, float* v, const float* g, float* weights, const std::vector<i64>& begin, const std::vector<i64>& len,
                      const std::vector<float>& wd, float lr, float b1, float b2, float eps, int step) override {
        if (begin.size() != len.size() || begin.size() != wd.size()) throw std::runtime_error("emulated device: adamw_ranges: tables of different lengths");
        i64 n = 0;
        for (std::size_t r = 0; r < begin.size(); ++r) n = std::max(n, begin[r] + len[r]);
        const Ref P = dev(p, n, "adamw_ranges p"), M = dev(m, n, "adamw_ranges m"), V = dev(v, n, "adamw_ranges v"), G = dev(g, n, "adamw_ranges g"),
                  WT = opt(weights, n, "adamw_ranges weights");
        kernel([=] {
            for (std::size_t r = 0; r < begin.size(); ++r) {
                const i64 b = begin[r], l = len[r];
                const std::vector<unsigned char> all(static_cast<std::size_t>(l), 1);  // every element by the range's wd
                cpu::adamw(P.p + b, M.p + b, V.p + b, G.p + b, all.data(), l, lr, b1, b2, eps, wd[r], step);
                if (WT.p) {
                    std::memcpy(WT.p + b, P.p + b, static_cast<std::size_t>(l) * sizeof(float));
                    narrow(WT.fmt, WT.p + b, l);
                }
            }
        }, {P, M, V});
    }
};

}  // namespace

std::unique_ptr<Device> make_emulated_device() { return std::make_unique<EmulatedDevice>(); }

}  // namespace strata::runtime
