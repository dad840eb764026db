// The runtime's cuda backend against its cpu backend, which finite differences check
// (test_runtime.cpp): every kernel on random inputs, then whole runs (GPT and Llama, the optimizer
// on the GPU, on the CPU and on SSD, recompute, checkpoints). In fp32 they differ only in
// summation order, so they agree to about 1e-5 relative; in bf16 (2-byte storage, fp32 arithmetic
// on both) to a rounding step of bf16. On a machine without a GPU the test
// prints "skipped: no CUDA device" and ctest counts it as skipped (tests/CMakeLists.txt); any other
// reason the backend cannot open (a module that does not load) fails it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <random>

#include "cuda_device.hpp"
#include "device_runs.hpp"
#include "strata/runtime/cpu_kernels.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;
using runtime::Device;
namespace cpu = strata::runtime::cpu;
using runtime::Dropout;
using runtime::DropoutSite;
using runtime::dropout_key;

using namespace strata::test::cuda;

TEST_CASE("cuda kernels match the cpu kernels", "[runtime][cuda]") {
    Device* dp = device();
    if (!dp) return;
    Device& d = *dp;
    using i64 = std::int64_t;

    SECTION("GEMMs: forward with bias, input gradient, weight and bias gradients accumulated") {
        const i64 T = 37, K = 48, N = 80;
        const auto x = randoms(T * K, 1), w = randoms(N * K, 2), b = randoms(N, 3), dy = randoms(T * N, 4);
        const auto dw0 = randoms(N * K, 5), db0 = randoms(N, 6);
        std::vector<float> y(T * N), dx(T * K), dw = dw0, db = db0;
        cpu::matmul_forward(y.data(), x.data(), w.data(), b.data(), T, K, N);
        cpu::matmul_dgrad(dx.data(), dy.data(), w.data(), T, K, N);
        cpu::matmul_wgrad(dw.data(), db.data(), x.data(), dy.data(), T, K, N);
        Dev X(d, x), W(d, w), B(d, b), DY(d, dy), Y(d, std::vector<float>(T * N)), DX(d, std::vector<float>(T * K)), DW(d, dw0), DB(d, db0);
        d.matmul_forward(Y.p, X.p, W.p, B.p, T, K, N);
        d.matmul_dgrad(DX.p, DY.p, W.p, T, K, N);
        d.matmul_wgrad(DW.p, DB.p, X.p, DY.p, T, K, N);
        same(y, Y.get(), "forward");
        same(dx, DX.get(), "dgrad");
        same(dw, DW.get(), "wgrad");
        same(db, DB.get(), "bias grad");
        // The router's dgrad adds into what the experts' path left (dx += dy w).
        std::vector<float> twice = dx;
        for (float& v : twice) v *= 2.0f;
        d.matmul_dgrad_add(DX.p, DY.p, W.p, T, K, N);
        same(twice, DX.get(), "accumulating dgrad");
    }
    SECTION("LayerNorm and RMSNorm, forward and backward") {
        const i64 T = 19, C = 300;
        const auto x = randoms(T * C, 7, -2, 3), w = randoms(C, 8), b = randoms(C, 9), dy = randoms(T * C, 10), res = randoms(T * C, 11);
        for (bool ln : {true, false}) {
            std::vector<float> y(T * C), dx(T * C), dw = randoms(C, 12), db = randoms(C, 13);
            const auto dw0 = dw, db0 = db;
            cpu::norm_forward(y.data(), x.data(), w.data(), ln ? b.data() : nullptr, T, C);
            cpu::norm_backward(dx.data(), dw.data(), ln ? db.data() : nullptr, x.data(), dy.data(), w.data(), ln ? res.data() : nullptr, ln, T, C);
            Dev X(d, x), W(d, w), B(d, b), DY(d, dy), R(d, res), Y(d, std::vector<float>(T * C)), DX(d, std::vector<float>(T * C)), DW(d, dw0), DB(d, db0);
            d.norm_forward(Y.p, X.p, W.p, ln ? B.p : nullptr, T, C);
            d.norm_backward(DX.p, DW.p, ln ? DB.p : nullptr, X.p, DY.p, W.p, ln ? R.p : nullptr, ln, T, C);
            same(y, Y.get(), ln ? "layernorm forward" : "rmsnorm forward");
            same(dx, DX.get(), ln ? "layernorm dx" : "rmsnorm dx", 5e-5);
            same(dw, DW.get(), ln ? "layernorm dw" : "rmsnorm dw", 5e-5);
            if (ln) same(db, DB.get(), "layernorm db");
        }
    }
    SECTION("activations and the residual add") {
        const i64 T = 13, F = 70, n = T * F;
        const auto x = randoms(n, 14, -4, 4), x2 = randoms(2 * n, 15, -4, 4), dy = randoms(n, 16), b = randoms(F, 17);
        std::vector<float> y(n), dx(n), y2(n), dx2(2 * n), s(n);
        Dev X(d, x), X2(d, x2), DY(d, dy), B(d, b), Y(d, y), DX(d, dx), DX2(d, dx2);
        cpu::gelu_forward(y.data(), x.data(), n);
        d.gelu_forward(Y.p, X.p, n);
        same(y, Y.get(), "gelu");
        cpu::gelu_backward(dx.data(), x.data(), dy.data(), n);
        d.gelu_backward(DX.p, X.p, DY.p, n);
        same(dx, DX.get(), "gelu backward");
        cpu::relu2_forward(y.data(), x.data(), n);
        d.relu2_forward(Y.p, X.p, n);
        same(y, Y.get(), "relu2");
        cpu::relu2_backward(dx.data(), x.data(), dy.data(), n);
        d.relu2_backward(DX.p, X.p, DY.p, n);
        same(dx, DX.get(), "relu2 backward");
        cpu::relu_forward(y.data(), x.data(), n);
        d.relu_forward(Y.p, X.p, n);
        same(y, Y.get(), "relu");
        Dev RY(d, y);
        cpu::relu_backward(dx.data(), y.data(), dy.data(), n);
        d.relu_backward(DX.p, RY.p, DY.p, n);
        same(dx, DX.get(), "relu backward");
        for (const cpu::Gate gate : {cpu::Gate::silu, cpu::Gate::gelu}) {
            const std::string what = gate == cpu::Gate::silu ? "swiglu" : "geglu";
            cpu::glu_forward(y2.data(), x2.data(), T, F, gate);
            d.glu_forward(Y.p, X2.p, T, F, gate);
            same(y2, Y.get(), what.c_str());
            cpu::glu_backward(dx2.data(), x2.data(), dy.data(), T, F, gate);
            d.glu_backward(DX2.p, X2.p, DY.p, T, F, gate);
            same(dx2, DX2.get(), (what + " backward").c_str());
        }
        cpu::add(s.data(), x.data(), dy.data(), b.data(), T, F);
        d.add(Y.p, X.p, DY.p, B.p, T, F);
        same(s, Y.get(), "add with bias");
    }
    SECTION("dropout: the same mask on both backends, a shard's rows at their place") {
        const i64 seq = 12, T = 3 * seq, C = 20;
        const auto x = randoms(T * C, 40), y = randoms(T * C, 41), b = randoms(C, 42);
        const Dropout drop{0.25f, dropout_key(9, 2, 3, DropoutSite::mlp_out), 4, seq / 2, 0, 0};  // a shard from mid-sequence
        std::vector<float> out(T * C), mask(T * C), dx(T * C);
        cpu::dropout_add(out.data(), mask.data(), x.data(), y.data(), b.data(), T, C, drop, cpu::Positions{seq, 1, 0});
        Dev X(d, x), Y(d, y), B(d, b), O(d, std::vector<float>(T * C)), M(d, std::vector<float>(T * C));
        d.dropout_add(O.p, M.p, X.p, Y.p, B.p, T, C, drop, cpu::Positions{seq, 1, 0});
        same(mask, M.get(), "dropout mask");
        same(out, O.get(), "bias-dropout-add");
        cpu::dropout_forward(dx.data(), mask.data(), x.data(), T, C, drop, cpu::Positions{seq, 1, 0});
        d.dropout_forward(O.p, M.p, X.p, T, C, drop, cpu::Positions{seq, 1, 0});
        same(dx, O.get(), "dropout");
        cpu::mul(dx.data(), y.data(), mask.data(), T * C);
        d.mul(O.p, Y.p, M.p, T * C);
        same(dx, O.get(), "through the mask");
    }
    SECTION("rotary embedding and its inverse") {
        const i64 seq = 16, T = 2 * seq, hq = 4, hkv = 2, hd = 16, row = (hq + 2 * hkv) * hd;
        const auto qkv = randoms(T * row, 18);
        for (bool inverse : {false, true}) {
            auto ref = qkv;
            cpu::rope(ref.data(), T, cpu::Positions{seq, 1, 0}, hq, hkv, hd, inverse);
            Dev Q(d, qkv);
            d.rope(Q.p, T, cpu::Positions{seq, 1, 0}, hq, hkv, hd, inverse);
            same(ref, Q.get(), inverse ? "rope inverse" : "rope");
            auto lb = qkv;  // context parallelism's layout: cp 4, rank 2's rows of two sequences
            const cpu::Positions cp{seq, 4, 2};
            cpu::rope(lb.data(), 2 * cp.local(), cp, hq, hkv, hd, inverse);
            Dev Q4(d, qkv);
            d.rope(Q4.p, 2 * cp.local(), cp, hq, hkv, hd, inverse);
            const std::vector<float> got = Q4.get();
            same(std::vector<float>(lb.begin(), lb.begin() + 2 * cp.local() * row), std::vector<float>(got.begin(), got.begin() + 2 * cp.local() * row),
                 "rope, cp rank 2 of 4");
        }
    }
    SECTION("causal attention, forward and backward, MHA and GQA, head dims 16 and 64") {
        struct Shape {
            i64 seq, batch, hq, hkv, hd;
        };
        for (const Shape sh : {Shape{24, 2, 4, 2, 16}, Shape{40, 3, 2, 2, 64}, Shape{7, 1, 3, 1, 8}, Shape{200, 2, 8, 2, 32}})
        for (const float p : {0.0f, 0.1f})
        for (const i64 window : {i64{0}, i64{5}}) {  // the whole causal context, or a sliding window
            const i64 T = sh.seq * sh.batch, row = (sh.hq + 2 * sh.hkv) * sh.hd, od = sh.hq * sh.hd;
            const auto qkv = randoms(T * row, 19), dout = randoms(T * od, 20);
            // With dropout: the rank's heads start at 1 of 2 hq, its sequences at global index 5.
            const Dropout drop{p, dropout_key(7, 3, 1, DropoutSite::attention_probs), 5, 0, 1, 2 * sh.hq};
            std::vector<float> out(T * od), lse(T * sh.hq), dqkv(T * row);
            cpu::attention_forward(out.data(), lse.data(), qkv.data(), T, sh.seq, sh.hq, sh.hkv, sh.hd, drop, window);
            cpu::attention_backward(dqkv.data(), qkv.data(), out.data(), lse.data(), dout.data(), T, sh.seq, sh.hq, sh.hkv, sh.hd, drop, window);
            Dev Q(d, qkv), DO(d, dout), O(d, std::vector<float>(T * od)), L(d, std::vector<float>(T * sh.hq)), DQ(d, randoms(T * row, 21));
            d.attention_forward(O.p, L.p, Q.p, T, sh.seq, sh.hq, sh.hkv, sh.hd, drop, window);
            d.attention_backward(DQ.p, Q.p, O.p, L.p, DO.p, T, sh.seq, sh.hq, sh.hkv, sh.hd, drop, window);
            INFO("seq " << sh.seq << " batch " << sh.batch << " heads " << sh.hq << "/" << sh.hkv << " dim " << sh.hd << " dropout " << p
                        << " window " << window);
            same(out, O.get(), "attention out");
            same(lse, L.get(), "attention lse");
            same(dqkv, DQ.get(), "attention dqkv", 5e-5);
        }
    }
    SECTION("context parallelism's ring blocks: rank 1 of cp 2, its own block then rank 0's merged in, and back") {
        const i64 hq = 4, hkv = 2, hd = 16, row = (hq + 2 * hkv) * hd, G = 2 * hkv * hd;
        for (const i64 window : {i64{0}, i64{5}}) {
            cpu::Positions mine{16, 2, 1}, theirs{16, 2, 0};
            mine.window = window;
            const i64 T = 2 * mine.local();
            const Dropout drop{0.1f, dropout_key(4, 1, 0, DropoutSite::attention_probs), 3, 0, 0, hq};
            const auto qkv = randoms(T * row, 60), kv = randoms(T * G, 61), dout = randoms(T * hq * hd, 62);
            std::vector<float> out(T * hq * hd), lse(T * hq), dqkv(T * row), dkv(T * G);
            cpu::attention_block_forward(out.data(), lse.data(), qkv.data(), qkv.data() + hq * hd, row, mine, mine, T, hq, hkv, hd, false, drop);
            cpu::attention_block_forward(out.data(), lse.data(), qkv.data(), kv.data(), G, mine, theirs, T, hq, hkv, hd, true, drop);
            cpu::attention_block_backward(dqkv.data(), nullptr, row, qkv.data(), qkv.data() + hq * hd, out.data(), lse.data(), dout.data(), mine,
                                          mine, T, hq, hkv, hd, false, drop);
            cpu::attention_block_backward(dqkv.data(), dkv.data(), G, qkv.data(), kv.data(), out.data(), lse.data(), dout.data(), mine, theirs,
                                          T, hq, hkv, hd, true, drop);
            Dev Q(d, qkv), K(d, kv), O(d, std::vector<float>(T * hq * hd)), L(d, std::vector<float>(T * hq)), DO(d, dout),
                DQ(d, randoms(T * row, 63)), DK(d, randoms(T * G, 64));  // stale values: the kernels write or zero them
            d.attention_block_forward(O.p, L.p, Q.p, Q.p + hq * hd, row, mine, mine, T, hq, hkv, hd, false, drop);
            d.attention_block_forward(O.p, L.p, Q.p, K.p, G, mine, theirs, T, hq, hkv, hd, true, drop);
            INFO("window " << window);
            same(out, O.get(), "ring out");
            same(lse, L.get(), "ring lse");
            Dev O2(d, out), L2(d, lse);  // the backward against the cpu forward's, as the cpu backward ran
            d.attention_block_backward(DQ.p, nullptr, row, Q.p, Q.p + hq * hd, O2.p, L2.p, DO.p, mine, mine, T, hq, hkv, hd, false, drop);
            d.attention_block_backward(DQ.p, DK.p, G, Q.p, K.p, O2.p, L2.p, DO.p, mine, theirs, T, hq, hkv, hd, true, drop);
            same(dqkv, DQ.get(), "ring dqkv", 5e-5);
            same(dkv, DK.get(), "ring dkv", 5e-5);
        }
    }
    SECTION("embedding (a vocab shard), positions, loss and its gradient") {
        const i64 T = 40, C = 24, V = 50, first = 10, seq = 8;
        std::vector<float> tokens(2 * T);
        std::mt19937 g(22);
        for (auto& t : tokens) t = static_cast<float>(g() % 70);  // some outside the shard
        const auto table = randoms(V * C, 23), dout = randoms(T * C, 24), pos = randoms(seq * C, 25), logits = randoms(T * V, 26, -5, 5);
        std::vector<float> e(T * C), dtab = randoms(V * C, 27), px(T * C), dpos = randoms(seq * C, 28), stats(3 * T), loss(T), lse(T), dl(T * V);
        const auto dtab0 = dtab, dpos0 = dpos;
        cpu::embedding_forward(e.data(), tokens.data(), table.data(), first, V, T, C);
        cpu::embedding_backward(dtab.data(), tokens.data(), dout.data(), first, V, T, C);
        const cpu::Positions where{seq, 1, 0};
        cpu::position_forward(px.data(), e.data(), pos.data(), 0, T, where, C);
        cpu::position_backward(dpos.data(), dout.data(), T, where, C);
        cpu::loss_stats(stats.data(), logits.data(), tokens.data(), first, T, V);
        cpu::loss_combine(loss.data(), lse.data(), stats.data(), 1, T);
        cpu::loss_backward(dl.data(), logits.data(), tokens.data(), lse.data(), first, T, V, 0.25f);
        Dev TK(d, tokens), TB(d, table), DO(d, dout), P(d, pos), LG(d, logits), E(d, e), DT(d, dtab0), PX(d, px), DP(d, dpos0), ST(d, stats),
            LS(d, loss), LE(d, lse), DL(d, dl);
        d.embedding_forward(E.p, TK.p, TB.p, first, V, T, C);
        d.embedding_backward(DT.p, TK.p, DO.p, first, V, T, C);
        d.position_forward(PX.p, E.p, P.p, 0, T, where, C);
        d.position_backward(DP.p, DO.p, T, where, C);
        d.loss_stats(ST.p, LG.p, TK.p, first, T, V);
        d.loss_combine(LS.p, LE.p, ST.p, 1, T);
        d.loss_backward(DL.p, LG.p, TK.p, ST.p, 1, first, T, V, 0.25f);
        same(e, E.get(), "embedding");
        same(dtab, DT.get(), "embedding backward");
        same(px, PX.get(), "positions");
        same(dpos, DP.get(), "positions backward");
        same(stats, ST.get(), "loss stats");
        same(loss, LS.get(), "loss");
        same(lse, LE.get(), "loss lse");
        same(dl, DL.get(), "loss backward");
        double total = 0;
        for (float l : loss) total += l;
        CHECK(d.sum(LS.p, T) == Approx(total).epsilon(1e-5));
    }
    SECTION("AdamW with and without weight decay") {
        const i64 n = 1000;
        const auto p0 = randoms(n, 29), g = randoms(n, 30), m0 = randoms(n, 31, -0.1f, 0.1f), v0 = randoms(n, 32, 0.0f, 0.1f);
        for (float wd : {0.1f, 0.0f}) {
            auto p = p0, m = m0, v = v0;
            const std::vector<unsigned char> all(n, 1);
            cpu::adamw(p.data(), m.data(), v.data(), g.data(), all.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, 3);
            Dev P(d, p0), M(d, m0), Vv(d, v0), G(d, g);
            d.adamw(P.p, M.p, Vv.p, G.p, nullptr, n, 1e-3f, 0.9f, 0.95f, 1e-8f, wd, 3);
            same(p, P.get(), "adamw parameters", 1e-6);
            same(m, M.get(), "adamw m", 1e-6);
            same(v, Vv.get(), "adamw v", 1e-6);
        }
        // One launch over ranges with their own decay (a range longer than a chunk of 16384, one
        // element long, and a gap left alone) against the cpu kernel's decay mask.
        const i64 big = 40000;
        const auto q0 = randoms(big, 33), h = randoms(big, 34), a0 = randoms(big, 35, -0.1f, 0.1f), b0 = randoms(big, 36, 0.0f, 0.1f);
        const std::vector<i64> begin{0, 20000, 20001}, len{20000, 1, 19000};
        const std::vector<float> wds{0.1f, 0.0f, 0.1f};
        auto q = q0, a = a0, b = b0;
        std::vector<unsigned char> mask(static_cast<std::size_t>(big), 0);
        for (i64 i = 0; i < 20000; ++i) mask[static_cast<std::size_t>(i)] = 1;
        for (i64 i = 20001; i < 39001; ++i) mask[static_cast<std::size_t>(i)] = 1;
        cpu::adamw(q.data(), a.data(), b.data(), h.data(), mask.data(), 39001, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
        Dev Q(d, q0), A(d, a0), B(d, b0), H(d, h);
        for (int twice = 0; twice < 2; ++twice) {  // the second call reuses the uploaded table
            if (twice == 1) {
                cpu::adamw(q.data(), a.data(), b.data(), h.data(), mask.data(), 39001, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 4);
            }
            d.adamw_ranges(Q.p, A.p, B.p, H.p, nullptr, begin, len, wds, 1e-3f, 0.9f, 0.95f, 1e-8f, 3 + twice);
        }
        same(q, Q.get(), "adamw_ranges parameters", 1e-6);
        same(a, A.get(), "adamw_ranges m", 1e-6);
        same(b, B.get(), "adamw_ranges v", 1e-6);
    }
}

namespace {
std::vector<float> rounded(std::vector<float> v) {
    cpu::round_bf16(v.data(), static_cast<std::int64_t>(v.size()));
    return v;
}
std::vector<float> halves(std::vector<float> v) {
    cpu::round_fp16(v.data(), static_cast<std::int64_t>(v.size()));
    return v;
}

// GEMMs on 2-byte activations and weights (storage `fmt`, rounded to it by `round`) against the
// cpu kernels on the rounded inputs: the outputs to one rounding step, the fp32 gradients
// accumulated to summation order, and an fp32 input against 2-byte weights widened.
void check_half_gemms(Device& d, runtime::Storage fmt, std::vector<float> (*round)(std::vector<float>), double ulp, unsigned seed) {
    using i64 = std::int64_t;
    const i64 T = 37, K = 48, N = 80;
    const auto x = round(randoms(T * K, seed)), w = round(randoms(N * K, seed + 1)), b = round(randoms(N, seed + 2)),
               dy = round(randoms(T * N, seed + 3));
    const auto dw0 = randoms(N * K, seed + 4), db0 = randoms(N, seed + 5);
    std::vector<float> y(T * N), dx(T * K), dw = dw0, db = db0;
    cpu::matmul_forward(y.data(), x.data(), w.data(), b.data(), T, K, N);
    cpu::matmul_dgrad(dx.data(), dy.data(), w.data(), T, K, N);
    cpu::matmul_wgrad(dw.data(), db.data(), x.data(), dy.data(), T, K, N);
    Dev X(d, x, fmt), W(d, w, fmt), B(d, b, fmt), DY(d, dy, fmt), Y(d, std::vector<float>(T * N), fmt),
        DX(d, std::vector<float>(T * K), fmt), DW(d, dw0), DB(d, db0), XF(d, x), YF(d, std::vector<float>(T * N));
    d.matmul_forward(Y.p, X.p, W.p, B.p, T, K, N);
    d.matmul_dgrad(DX.p, DY.p, W.p, T, K, N);
    d.matmul_wgrad(DW.p, DB.p, X.p, DY.p, T, K, N);
    d.matmul_forward(YF.p, XF.p, W.p, B.p, T, K, N);  // fp32 x 2-byte -> fp32
    same(round(y), Y.get(), "2-byte forward", ulp);
    same(round(dx), DX.get(), "2-byte dgrad", ulp);
    same(dw, DW.get(), "2-byte wgrad into fp32", 1e-4);
    same(db, DB.get(), "2-byte bias grad into fp32", 1e-4);
    same(y, YF.get(), "mixed-width forward", 1e-4);
}
}  // namespace

// A bf16 plan's tensors (RankState::elem_bytes): 2-byte activations and weights, fp32 statistics,
// gradients accumulated in fp32. The reference is the cpu kernel on the bf16-rounded inputs, its
// bf16 outputs rounded, as the cpu backend executes a bf16 plan. Both compute in fp32, so a bf16
// output may differ by one rounding step (2^-7 of its binade); an fp32 one by summation order.
TEST_CASE("cuda kernels on bf16 operands match the cpu kernels rounded to bf16", "[runtime][cuda]") {
    Device* dp = device();
    if (!dp) return;
    Device& d = *dp;
    using i64 = std::int64_t;
    constexpr auto H = runtime::Storage::bf16;
    const double ulp = 1e-2;

    SECTION("copies convert, an inner pointer addresses its elements, zero and sum read the width") {
        const auto x = randoms(1000, 50, -3, 3);
        Dev A(d, x, H), F(d, x);
        CHECK(A.get() == rounded(x));  // host fp32 -> bf16 -> host fp32
        Dev B(d, std::vector<float>(1000), H), G(d, std::vector<float>(1000));
        d.copy(B.p, F.p, 1000);  // device fp32 -> bf16
        CHECK(B.get() == rounded(x));
        d.copy(G.p, A.p, 1000);  // device bf16 -> fp32
        CHECK(G.get() == rounded(x));
        std::vector<float> part(100);
        d.copy(part.data(), A.p + 300, 100);  // float 300 of a handle is element 300
        const std::vector<float> xr = rounded(x);  // one vector: two calls' iterators would be of two
        CHECK(part == std::vector<float>(xr.begin() + 300, xr.begin() + 400));
        d.zero(A.p + 500, 500);
        const auto z = A.get();
        CHECK(z[499] == rounded(x)[499]);
        CHECK(z[500] == 0.0f);
        CHECK(z[999] == 0.0f);
        double total = 0;
        for (int i = 0; i < 500; ++i) total += rounded(x)[static_cast<std::size_t>(i)];
        CHECK(d.sum(A.p, 1000) == Approx(total).epsilon(1e-5));
    }
    SECTION("GEMMs: bf16 activations and weights, fp32 gradients accumulated; a mixed-width GEMM widened") {
        check_half_gemms(d, H, rounded, ulp, 1);
    }
    SECTION("norms, activations, residual add and RoPE") {
        const i64 T = 19, C = 300, F = 150;
        const auto x = rounded(randoms(T * C, 7, -2, 3)), w = rounded(randoms(C, 8)), b = rounded(randoms(C, 9)), dy = rounded(randoms(T * C, 10)),
                   res = rounded(randoms(T * C, 11));
        for (bool ln : {true, false}) {
            std::vector<float> y(T * C), dx(T * C), dw = randoms(C, 12), db = randoms(C, 13);
            const auto dw0 = dw, db0 = db;
            cpu::norm_forward(y.data(), x.data(), w.data(), ln ? b.data() : nullptr, T, C);
            cpu::norm_backward(dx.data(), dw.data(), ln ? db.data() : nullptr, x.data(), dy.data(), w.data(), ln ? res.data() : nullptr, ln, T, C);
            Dev X(d, x, H), W(d, w, H), B(d, b, H), DY(d, dy, H), R(d, res, H), Y(d, std::vector<float>(T * C), H),
                DX(d, std::vector<float>(T * C), H), DW(d, dw0), DB(d, db0);
            d.norm_forward(Y.p, X.p, W.p, ln ? B.p : nullptr, T, C);
            d.norm_backward(DX.p, DW.p, ln ? DB.p : nullptr, X.p, DY.p, W.p, ln ? R.p : nullptr, ln, T, C);
            same(rounded(y), Y.get(), "bf16 norm forward", ulp);
            same(rounded(dx), DX.get(), "bf16 norm dx", ulp);
            same(dw, DW.get(), "bf16 norm dw into fp32", 1e-4);
            if (ln) same(db, DB.get(), "bf16 norm db into fp32", 1e-4);
        }
        const auto a = rounded(randoms(T * 2 * F, 14, -4, 4)), da = rounded(randoms(T * F, 15));
        std::vector<float> g(T * F), dg(T * F), s(T * F), ds(T * 2 * F), sum(T * C);
        cpu::gelu_forward(g.data(), a.data(), T * F);
        cpu::gelu_backward(dg.data(), a.data(), da.data(), T * F);
        cpu::glu_forward(s.data(), a.data(), T, F, cpu::Gate::silu);
        cpu::glu_backward(ds.data(), a.data(), da.data(), T, F, cpu::Gate::silu);
        cpu::add(sum.data(), x.data(), res.data(), b.data(), T, C);
        Dev A(d, a, H), DA(d, da, H), G(d, g, H), DG(d, dg, H), S(d, s, H), DS(d, ds, H), X(d, x, H), R(d, res, H), B(d, b, H),
            SUM(d, sum, H);
        d.gelu_forward(G.p, A.p, T * F);
        d.gelu_backward(DG.p, A.p, DA.p, T * F);
        d.glu_forward(S.p, A.p, T, F, cpu::Gate::silu);
        d.glu_backward(DS.p, A.p, DA.p, T, F, cpu::Gate::silu);
        d.add(SUM.p, X.p, R.p, B.p, T, C);
        same(rounded(g), G.get(), "bf16 gelu", ulp);
        same(rounded(dg), DG.get(), "bf16 gelu backward", ulp);
        same(rounded(s), S.get(), "bf16 swiglu", ulp);
        same(rounded(ds), DS.get(), "bf16 swiglu backward", ulp);
        same(rounded(sum), SUM.get(), "bf16 add", ulp);
        const i64 seq = 16, hq = 4, hkv = 2, hd = 16, row = (hq + 2 * hkv) * hd;
        auto qkv = rounded(randoms(2 * seq * row, 18));
        Dev Q(d, qkv, H);
        cpu::rope(qkv.data(), 2 * seq, cpu::Positions{seq, 1, 0}, hq, hkv, hd, false);
        d.rope(Q.p, 2 * seq, cpu::Positions{seq, 1, 0}, hq, hkv, hd, false);
        same(rounded(qkv), Q.get(), "bf16 rope", ulp);
    }
    SECTION("attention: bf16 Q, K, V and outputs, fp32 log-sum-exp; the flash kernels at 64- and 128-wide heads") {
        struct Shape {
            i64 seq, batch, hq, hkv, hd;
            float p;
        };
        // Head dim 32: the exact kernels; 64 and 128: flash.cuh, with a sequence that is not a
        // multiple of its 64-row tiles, one shorter than a tile, GQA and dropout.
        for (const Shape sh : {Shape{40, 2, 4, 2, 32, 0.0f}, Shape{100, 2, 4, 2, 64, 0.0f}, Shape{64, 1, 2, 1, 128, 0.0f},
                               Shape{200, 1, 2, 2, 64, 0.1f}, Shape{30, 3, 2, 1, 128, 0.1f}})
        for (const i64 window : {i64{0}, i64{70}}) {  // a window wider than a tile: the flash walk's first tile moves
            const i64 seq = sh.seq, hq = sh.hq, hkv = sh.hkv, hd = sh.hd, T = seq * sh.batch, row = (hq + 2 * hkv) * hd, od = hq * hd;
            const Dropout drop{sh.p, dropout_key(7, 3, 1, DropoutSite::attention_probs), 5, 0, 0, hq};
            const auto qkv = rounded(randoms(T * row, 19)), dout = rounded(randoms(T * od, 20));
            std::vector<float> out(T * od), lse(T * hq), dqkv(T * row);
            cpu::attention_forward(out.data(), lse.data(), qkv.data(), T, seq, hq, hkv, hd, drop, window);
            out = rounded(out);
            cpu::attention_backward(dqkv.data(), qkv.data(), out.data(), lse.data(), dout.data(), T, seq, hq, hkv, hd, drop, window);
            Dev Q(d, qkv, H), DO(d, dout, H), O(d, std::vector<float>(T * od), H), L(d, std::vector<float>(T * hq)),
                DQ(d, std::vector<float>(T * row), H);
            d.attention_forward(O.p, L.p, Q.p, T, seq, hq, hkv, hd, drop, window);
            d.attention_backward(DQ.p, Q.p, O.p, L.p, DO.p, T, seq, hq, hkv, hd, drop, window);
            INFO("seq " << seq << " batch " << sh.batch << " heads " << hq << "/" << hkv << " dim " << hd << " dropout " << sh.p << " window "
                        << window);
            same(out, O.get(), "bf16 attention out", ulp);
            same(lse, L.get(), "bf16 attention lse", 1e-5);
            same(rounded(dqkv), DQ.get(), "bf16 attention dqkv", 2 * ulp);
        }
    }
    SECTION("embedding, loss on bf16 logits, AdamW on an fp32 master from bf16 gradients") {
        const i64 T = 40, C = 24, V = 50;
        std::vector<float> tokens(2 * T);
        std::mt19937 g(22);
        for (auto& t : tokens) t = static_cast<float>(g() % V);
        const auto table = rounded(randoms(V * C, 23)), dout = rounded(randoms(T * C, 24)), logits = rounded(randoms(T * V, 26, -5, 5));
        std::vector<float> e(T * C), dtab(V * C), stats(3 * T), lse(T), dl(T * V);
        cpu::embedding_forward(e.data(), tokens.data(), table.data(), 0, V, T, C);
        cpu::embedding_backward(dtab.data(), tokens.data(), dout.data(), 0, V, T, C);
        cpu::loss_stats(stats.data(), logits.data(), tokens.data(), 0, T, V);
        cpu::loss_combine(nullptr, lse.data(), stats.data(), 1, T);
        cpu::loss_backward(dl.data(), logits.data(), tokens.data(), lse.data(), 0, T, V, 0.25f);
        Dev TK(d, tokens), TB(d, table, H), DO(d, dout, H), E(d, e, H), DT(d, std::vector<float>(V * C)), LG(d, logits, H), ST(d, stats);
        d.embedding_forward(E.p, TK.p, TB.p, 0, V, T, C);
        d.embedding_backward(DT.p, TK.p, DO.p, 0, V, T, C);
        d.loss_stats(ST.p, LG.p, TK.p, 0, T, V);
        d.loss_backward(LG.p, LG.p, TK.p, ST.p, 1, 0, T, V, 0.25f);  // in place, as the dataflow does
        same(rounded(e), E.get(), "bf16 embedding", ulp);
        same(dtab, DT.get(), "bf16 embedding backward into fp32", 1e-5);
        same(stats, ST.get(), "bf16 loss stats", 1e-5);
        same(rounded(dl), LG.get(), "bf16 loss backward", ulp);

        const i64 n = 20000;
        const auto p0 = randoms(n, 29), gr = rounded(randoms(n, 30)), m0 = randoms(n, 31, -0.1f, 0.1f), v0 = randoms(n, 32, 0.0f, 0.1f);
        auto p = p0, m = m0, v = v0;
        const std::vector<unsigned char> all(n, 1);
        cpu::adamw(p.data(), m.data(), v.data(), gr.data(), all.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
        Dev P(d, p0), M(d, m0), Vv(d, v0), G(d, gr, H), Wt(d, std::vector<float>(n), H);
        d.adamw_ranges(P.p, M.p, Vv.p, G.p, Wt.p, {0}, {n}, {0.1f}, 1e-3f, 0.9f, 0.95f, 1e-8f, 3);  // the weights in the same pass
        same(p, P.get(), "AdamW master from bf16 gradients", 1e-6);
        same(m, M.get(), "AdamW m", 1e-6);
        CHECK(Wt.get() == rounded(P.get()));  // the master's bf16 rounding
    }
}

// An fp16 plan's tensors: IEEE halves where a bf16 plan has bf16 (RankState::buffer), with fp16's
// loss scaling. The reference is the cpu kernel on inputs rounded to halves, its 2-byte outputs
// rounded to halves: one rounding step of fp16 is 2^-10 of its binade.
TEST_CASE("cuda kernels on fp16 operands match the cpu kernels rounded to halves", "[runtime][cuda]") {
    Device* dp = device();
    if (!dp) return;
    Device& d = *dp;
    using i64 = std::int64_t;
    constexpr auto H = runtime::Storage::fp16;
    const double ulp = 2e-3;

    SECTION("copies convert to halves and back; past 65504 is infinity") {
        auto x = randoms(1000, 60, -3, 3);
        x[7] = 70000.0f;    // overflows a half
        x[8] = 1e-6f;       // a subnormal half
        x[9] = 65519.0f;    // rounds down to the largest half
        Dev A(d, x, H), F(d, x);
        const auto back = A.get();
        CHECK(back == halves(x));
        CHECK(std::isinf(back[7]));
        CHECK(back[9] == 65504.0f);
        Dev B(d, std::vector<float>(1000), H), G(d, std::vector<float>(1000));
        d.copy(B.p, F.p, 1000);  // device fp32 -> fp16
        CHECK(B.get() == halves(x));
        d.copy(G.p, A.p, 1000);  // device fp16 -> fp32
        CHECK(G.get() == halves(x));
    }
    SECTION("GEMMs in halves, fp32 gradients accumulated; a mixed-width GEMM widened") {
        check_half_gemms(d, H, halves, ulp, 61);
    }
    SECTION("attention in halves: the exact kernels, 64-wide heads included (the flash ones take bf16)") {
        for (const i64 hd : {i64{32}, i64{64}}) {
            const i64 seq = 40, hq = 4, hkv = 2, T = 2 * seq, row = (hq + 2 * hkv) * hd, od = hq * hd;
            const auto qkv = halves(randoms(T * row, 67)), dout = halves(randoms(T * od, 68));
            std::vector<float> out(T * od), lse(T * hq), dqkv(T * row);
            cpu::attention_forward(out.data(), lse.data(), qkv.data(), T, seq, hq, hkv, hd, {}, 0);
            out = halves(out);
            cpu::attention_backward(dqkv.data(), qkv.data(), out.data(), lse.data(), dout.data(), T, seq, hq, hkv, hd, {}, 0);
            Dev Q(d, qkv, H), DO(d, dout, H), O(d, std::vector<float>(T * od), H), L(d, std::vector<float>(T * hq)),
                DQ(d, std::vector<float>(T * row), H);
            d.attention_forward(O.p, L.p, Q.p, T, seq, hq, hkv, hd, {}, 0);
            d.attention_backward(DQ.p, Q.p, O.p, L.p, DO.p, T, seq, hq, hkv, hd, {}, 0);
            INFO("head dim " << hd);
            same(out, O.get(), "fp16 attention out", ulp);
            same(lse, L.get(), "fp16 attention lse", 1e-5);
            same(halves(dqkv), DQ.get(), "fp16 attention dqkv", 4 * ulp);
        }
    }
    SECTION("the loss scale: unscaled in place, an inf or NaN flagged, the flag kept over ranges") {
        std::vector<float> g = halves(randoms(5000, 69, -60000, 60000)), flag{0.0f};
        Dev G(d, g, H), G2(d, g, H), Fl(d, flag);
        d.unscale(G.p, 5000, 1.0f / 1024, Fl.p);
        CHECK(Fl.get()[0] == 0.0f);
        std::vector<float> want = g;
        for (float& e : want) e *= 1.0f / 1024;
        CHECK(G.get() == halves(want));  // a power of two: exact, but for what falls under a half's range
        g[4321] = std::numeric_limits<float>::infinity();
        Dev Bad(d, g, H);
        d.unscale(Bad.p, 5000, 0.5f, Fl.p);
        CHECK(Fl.get()[0] == 1.0f);
        d.unscale(G2.p, 5000, 0.5f, Fl.p);  // a clean range after: the flag stays
        CHECK(Fl.get()[0] == 1.0f);
        g[4321] = std::numeric_limits<float>::quiet_NaN();
        Dev Nan(d, g, H);
        d.zero(Fl.p, 1);
        d.unscale(Nan.p, 5000, 0.5f, Fl.p);
        CHECK(Fl.get()[0] == 1.0f);
    }
}

TEST_CASE("a run on the cuda backend follows the cpu backend's loss curve", "[runtime][cuda]") {
    if (!device()) return;
    device_runs::check_loss_curves(runtime::Backend::cuda);
}

TEST_CASE("the cuda backend: checkpoints, timelines, memory and refusals", "[runtime][cuda]") {
    if (!device()) return;
    device_runs::check_checkpoint_and_timeline(runtime::Backend::cuda);
}

// A communicator of one member on the one GPU (NCCL's calls, streams, widths and scratch with
// itself as the peer; a lent machine has one GPU, and NCCL puts one rank on a GPU): every
// collective of device.hpp's DeviceComm, in fp32 and bf16, against what it must leave by hand
// (send and receive need the two members of a pipeline direction).
TEST_CASE("the cuda backend's communicators: every operation on a communicator of one", "[runtime][cuda]") {
    Device* d = device();
    if (!d) return;
    using runtime::DeviceComm;
    using runtime::Storage;
    auto comms = d->comms_with({d});
    REQUIRE(comms.size() == 1);
    DeviceComm& c = *comms[0];
    for (Storage s : {Storage::fp32, Storage::bf16}) {
        INFO((s == Storage::fp32 ? "fp32" : "bf16"));
        const std::vector<float> v{1, 2, 3, 4, 5, 6};  // exact in bf16
        Dev a(*d, v, s), b(*d, std::vector<float>(6, 0.0f), s), acc(*d, std::vector<float>(6, 10.0f), s);
        c.all_reduce(b.p, a.p, 6, 1);
        CHECK(b.get() == v);
        c.all_gather(b.p, a.p, {0, 6}, 2);
        CHECK(b.get() == v);
        c.reduce_scatter(acc.p, a.p, {0, 6}, DeviceComm::Reduce::accumulate, 3);
        CHECK(acc.get() == std::vector<float>{11, 12, 13, 14, 15, 16});
        c.reduce_scatter(b.p, a.p, {0, 6}, DeviceComm::Reduce::zero_rest, 4);
        CHECK(b.get() == v);
        Dev e(*d, std::vector<float>(6, 0.0f), s);
        c.all_to_all(e.p, a.p, {0, 6}, {0, 6}, 5);
        CHECK(e.get() == v);
        Dev r(*d, std::vector<float>(4, 0.0f), s);  // the last 2 of 3 columns of 2 rows, to itself
        c.ring_shift(r.p, a.p, 2, 3, 1, 2, 1, false, 6);
        CHECK(r.get() == std::vector<float>{2, 3, 5, 6});
        Dev u(*d, std::vector<float>(6, 0.0f), s);  // Ulysses over one member: the rows as they were
        c.ulysses(u.p, a.p, 2, {3}, 2, true, 7);
        d->sync();
        CHECK(u.get() == std::vector<float>{1, 2, 3, 4, 5, 6});
        CHECK(c.done());
    }
}
