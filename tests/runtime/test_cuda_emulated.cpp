// runtime/cuda/kernels.cuh's and moe_kernels.cuh's kernels, run on the CPU (cuda_emulation.hpp) with device_cuda.cu's
// launch shapes, against the cpu kernels: in fp32, and with a bf16 (or fp16) plan's widths (2-byte
// activations and weights read and written through TV, fp32 statistics and weight gradients).
// test_cuda.cpp checks the same kernels on a GPU; this runs in CI, where no GPU is.
#include <catch2/catch.hpp>

#include <limits>
#include <random>
#include <tuple>

#include "runtime_fixtures.hpp"  // before the emulation's macros
#include "cuda_emulation.hpp"

namespace strata::runtime::emulated {
#include "kernels.cuh"
#include "moe_kernels.cuh"
#include "ring_attention.cuh"
#include "mla_kernels.cuh"
#include "cuda_emulated_checks.hpp"
}  // namespace strata::runtime::emulated

TEST_CASE("the cuda kernels, emulated on the CPU, match the cpu kernels in fp32 and on bf16 and fp16 operands", "[runtime][cuda-emulated]") {
    using namespace strata::runtime::emulated;
    namespace cpu = strata::runtime::cpu;
    const int H = GENERATE(0, 1, 2);  // TV's fmt
    {
        INFO(fmt_name(H));
        const double tol = H ? 1e-2 : 2e-5;  // one rounding step of bf16 (fp16's is 8x finer), else summation order
        const i64 T = 7, C = 40, F = 24;
        auto x = rounded(randoms(T * C, 1, -2, 3), H), w = rounded(randoms(C, 2), H), b = rounded(randoms(C, 3), H);
        auto dy = rounded(randoms(T * C, 4), H), res = rounded(randoms(T * C, 5), H);
        SECTION("LayerNorm and RMSNorm, forward and backward; weight gradients in fp32") {
            for (const bool ln : {true, false}) {
                std::vector<float> y(T * C), dx(T * C), dw(C), db(C);
                cpu::norm_forward(y.data(), x.data(), w.data(), ln ? b.data() : nullptr, T, C);
                cpu::norm_backward(dx.data(), dw.data(), ln ? db.data() : nullptr, x.data(), dy.data(), w.data(), ln ? res.data() : nullptr, ln, T, C);
                Buf X(x, H), W(w, H), B(b, H), DY(dy, H), R(res, H), Y(std::vector<float>(T * C), H), DX(std::vector<float>(T * C), H);
                Buf DW(std::vector<float>(C), false), DB(std::vector<float>(C), false), ST(std::vector<float>(2 * T), false);
                launch(dim3(T), dim3(kThreads), C * sizeof(float), [&] { k_norm_fwd(Y.tv(), X.tv(), W.tv(), ln ? B.tv() : TV{}, C, RowMap{}); });
                launch(dim3(T), dim3(kThreads), 2 * C * sizeof(float),
                       [&] { k_norm_bwd_dx(DX.tv(), ST.tv(), X.tv(), DY.tv(), W.tv(), ln ? R.tv() : TV{}, ln, C, RowMap{}); });
                launch(col_grid(T, C), dim3(32, kColLanes), 0,
                       [&] { k_norm_bwd_dw(DW.tv(), ln ? DB.tv() : TV{}, X.tv(), DY.tv(), ST.tv(), T, C, RowMap{}); });
                same(rounded(y, H), Y.get(), "norm forward", tol);
                same(rounded(dx, H), DX.get(), "norm dx", 2 * tol);
                same(dw, DW.get(), "norm dw", 5e-5);
                if (ln) same(db, DB.get(), "norm db", 5e-5);
            }
        }
        SECTION("QK-norm: each head of Q and K inside the fused QKV rows, V untouched") {
            // 3 tokens; 3 query heads and 1 key/value head of 8: a row is Q(24) K(8) V(8) = 40 = C.
            const i64 hq = 3, hkv = 1, hd = 8, Tq = 3;
            REQUIRE((hq + 2 * hkv) * hd == C);
            for (const bool ln : {true, false}) {
                const auto qkv = std::vector<float>(x.begin(), x.begin() + Tq * C), d = std::vector<float>(dy.begin(), dy.begin() + Tq * C);
                const auto wq = std::vector<float>(w.begin(), w.begin() + hd), bq = std::vector<float>(b.begin(), b.begin() + hd);
                const auto wk = std::vector<float>(w.begin() + hd, w.begin() + 2 * hd), bk = std::vector<float>(b.begin() + hd, b.begin() + 2 * hd);
                // The reference: the cpu backend's per-head loop (runtime/src/ops.cpp).
                std::vector<float> y = qkv, dx = d, dwq(hd), dbq(hd), dwk(hd), dbk(hd);
                for (i64 t = 0; t < Tq; ++t) {
                    const i64 q = t * C, k = q + hq * hd;
                    cpu::norm_forward(y.data() + q, qkv.data() + q, wq.data(), ln ? bq.data() : nullptr, hq, hd);
                    cpu::norm_forward(y.data() + k, qkv.data() + k, wk.data(), ln ? bk.data() : nullptr, hkv, hd);
                    cpu::norm_backward(dx.data() + q, dwq.data(), ln ? dbq.data() : nullptr, qkv.data() + q, d.data() + q, wq.data(), nullptr, ln, hq, hd);
                    cpu::norm_backward(dx.data() + k, dwk.data(), ln ? dbk.data() : nullptr, qkv.data() + k, d.data() + k, wk.data(), nullptr, ln, hkv, hd);
                }
                Buf X(qkv, H), DY(d, H), WQ(wq, H), BQ(bq, H), WK(wk, H), BK(bk, H), Y(qkv, H), DX(d, H);
                Buf DWQ(std::vector<float>(hd), false), DBQ(std::vector<float>(hd), false), DWK(std::vector<float>(hd), false),
                    DBK(std::vector<float>(hd), false), ST(std::vector<float>(2 * Tq * hq), false);
                const RowMap mq{hq, C, 0}, mk{hkv, C, hq * hd};
                launch(dim3(Tq * hq), dim3(kThreads), hd * sizeof(float), [&] { k_norm_fwd(Y.tv(), X.tv(), WQ.tv(), ln ? BQ.tv() : TV{}, hd, mq); });
                launch(dim3(Tq * hkv), dim3(kThreads), hd * sizeof(float), [&] { k_norm_fwd(Y.tv(), X.tv(), WK.tv(), ln ? BK.tv() : TV{}, hd, mk); });
                for (const auto& [heads, map, W_, DW_, DB_] : {std::tuple{hq, mq, &WQ, &DWQ, &DBQ}, std::tuple{hkv, mk, &WK, &DWK, &DBK}}) {
                    launch(dim3(Tq * heads), dim3(kThreads), 2 * hd * sizeof(float),
                           [&] { k_norm_bwd_dx(DX.tv(), ST.tv(), X.tv(), DY.tv(), W_->tv(), TV{}, ln, hd, map); });
                    launch(col_grid(Tq * heads, hd), dim3(32, kColLanes), 0,
                           [&] { k_norm_bwd_dw(DW_->tv(), ln ? DB_->tv() : TV{}, X.tv(), DY.tv(), ST.tv(), Tq * heads, hd, map); });
                }
                same(rounded(y, H), Y.get(), "qk-norm forward", tol);
                same(rounded(dx, H), DX.get(), "qk-norm dx", 2 * tol);
                same(dwq, DWQ.get(), "qk-norm dwq", 5e-5);
                same(dwk, DWK.get(), "qk-norm dwk", 5e-5);
                if (ln) same(dbk, DBK.get(), "qk-norm dbk", 5e-5);
                // V's 8 columns of every row are the input's, bit for bit.
                for (i64 t = 0; t < Tq; ++t)
                    for (i64 c = (hq + hkv) * hd; c < C; ++c) CHECK(Y.get()[static_cast<std::size_t>(t * C + c)] == rounded(qkv, H)[static_cast<std::size_t>(t * C + c)]);
            }
        }
        SECTION("GELU, SwiGLU, GeGLU, the residual add with bias, bias rows and their column sums") {
            const auto a = rounded(randoms(T * 2 * F, 6, -4, 4), H), da = rounded(randoms(T * F, 7), H);
            std::vector<float> g(T * F), dg(T * F), s(T * F), ds(T * 2 * F), sum(T * C), db(C);
            cpu::gelu_forward(g.data(), a.data(), T * F);
            cpu::gelu_backward(dg.data(), a.data(), da.data(), T * F);
            cpu::glu_forward(s.data(), a.data(), T, F, cpu::Gate::silu);
            cpu::glu_backward(ds.data(), a.data(), da.data(), T, F, cpu::Gate::silu);
            cpu::add(sum.data(), x.data(), res.data(), b.data(), T, C);
            cpu::bias_grad(db.data(), dy.data(), T, C);
            Buf A(a, H), DA(da, H), G(g, H), DG(dg, H), S(s, H), DS(ds, H), X(x, H), R(res, H), B(b, H), SUM(sum, H), DY(dy, H);
            Buf DB(std::vector<float>(C), false), YB(x, H);
            run1(T * F, [&] { k_gelu_fwd(G.tv(), A.tv(), T * F); });
            run1(T * F, [&] { k_gelu_bwd(DG.tv(), A.tv(), DA.tv(), T * F); });
            run1(T * F, [&] { k_glu_fwd(S.tv(), A.tv(), T, F, false); });
            run1(T * F, [&] { k_glu_bwd(DS.tv(), A.tv(), DA.tv(), T, F, false); });
            run1(T * C, [&] { k_add(SUM.tv(), X.tv(), R.tv(), B.tv(), T, C); });
            run1(T * C, [&] { k_bias_rows(YB.tv(), B.tv(), T, C); });
            launch(col_grid(T, C), dim3(32, kColLanes), 0, [&] { k_col_sum(DB.tv(), DY.tv(), T, C); });
            same(rounded(g, H), G.get(), "gelu", tol);
            same(rounded(dg, H), DG.get(), "gelu backward", tol);
            same(rounded(s, H), S.get(), "swiglu", tol);
            same(rounded(ds, H), DS.get(), "swiglu backward", tol);
            // GeGLU: the same kernels with the GELU gate.
            cpu::glu_forward(s.data(), a.data(), T, F, cpu::Gate::gelu);
            cpu::glu_backward(ds.data(), a.data(), da.data(), T, F, cpu::Gate::gelu);
            run1(T * F, [&] { k_glu_fwd(S.tv(), A.tv(), T, F, true); });
            run1(T * F, [&] { k_glu_bwd(DS.tv(), A.tv(), DA.tv(), T, F, true); });
            same(rounded(s, H), S.get(), "geglu", tol);
            same(rounded(ds, H), DS.get(), "geglu backward", tol);
            same(rounded(sum, H), SUM.get(), "add", tol);
            // ReLU, its backward from the output (as the lowering keeps it).
            std::vector<float> r(T * F), dr(T * F);
            cpu::relu_forward(r.data(), a.data(), T * F);
            cpu::relu_backward(dr.data(), r.data(), da.data(), T * F);
            Buf RO(r, H), DR(dr, H), RIN(r, H);
            run1(T * F, [&] { k_relu_fwd(RO.tv(), A.tv(), T * F); });
            run1(T * F, [&] { k_relu_bwd(DR.tv(), RIN.tv(), DA.tv(), T * F); });
            same(rounded(r, H), RO.get(), "relu", tol);
            same(rounded(dr, H), DR.get(), "relu backward", tol);
            std::vector<float> xb(T * C);
            for (i64 i = 0; i < T * C; ++i) xb[static_cast<std::size_t>(i)] = x[static_cast<std::size_t>(i)] + b[static_cast<std::size_t>(i % C)];
            same(rounded(xb, H), YB.get(), "bias rows", tol);
            same(db, DB.get(), "bias gradient", 5e-5);
        }
        SECTION("RoPE in place, embedding forward and backward, the loss and its gradient") {
            const i64 seq = 4, hq = 2, hkv = 1, hd = 8, row = (hq + 2 * hkv) * hd, V = 30;
            auto qkv = rounded(randoms(2 * seq * row, 8), H);
            Buf Q(qkv, H);
            cpu::rope(qkv.data(), 2 * seq, cpu::Positions{seq, 1, 0}, hq, hkv, hd, false);
            run1(2 * seq * (hq + hkv) * (hd / 2), [&] { k_rope(Q.tv(), 2 * seq, cpu::Positions{seq, 1, 0}, hq + hkv, row, hd, 1.0f); });
            same(rounded(qkv, H), Q.get(), "rope", tol);
            {
                // Context parallelism's layout (cp 2, rank 1: positions 2..5 of each sequence of 8):
                // the rotation, the learned positions, their gradient and the hidden dropout at
                // each row's own position, as the cpu kernels place them.
                const cpu::Positions cp{8, 2, 1};
                const i64 rows = 2 * cp.local();
                auto q2 = rounded(randoms(rows * row, 30), H);
                Buf Q2(q2, H);
                cpu::rope(q2.data(), rows, cp, hq, hkv, hd, false);
                run1(rows * (hq + hkv) * (hd / 2), [&] { k_rope(Q2.tv(), rows, cp, hq + hkv, row, hd, 1.0f); });
                same(rounded(q2, H), Q2.get(), "rope, cp rank 1", tol);
                const i64 Cp = 6;
                const auto e = rounded(randoms(rows * Cp, 31), H), pos = rounded(randoms(8 * Cp, 32), H), g = rounded(randoms(rows * Cp, 33), H);
                std::vector<float> px(rows * Cp), dpos(8 * Cp, 0.0f), dx(rows * Cp), mask(rows * Cp);
                cpu::position_forward(px.data(), e.data(), pos.data(), 0, rows, cp, Cp);
                cpu::position_backward(dpos.data(), g.data(), rows, cp, Cp);
                const strata::runtime::Dropout drop{0.3f, strata::runtime::dropout_key(5, 1, 0, strata::runtime::DropoutSite::mlp_out), 3, 0, 0, 0};
                cpu::dropout_forward(dx.data(), mask.data(), g.data(), rows, Cp, drop, cp);
                Buf PX(std::vector<float>(rows * Cp), H), E2(e, H), P2(pos, H), G2(g, H), DP(std::vector<float>(8 * Cp), false),
                    DX(std::vector<float>(rows * Cp), H), M2(std::vector<float>(rows * Cp), H);
                run1(rows * Cp, [&] { k_position_fwd(PX.tv(), E2.tv(), P2.tv(), 0, rows, cp, Cp); });
                run1(cp.local() * Cp, [&] { k_position_bwd(DP.tv(), G2.tv(), rows, cp, Cp); });
                run1(rows * Cp, [&] { k_dropout_fwd(DX.tv(), M2.tv(), G2.tv(), rows * Cp, Cp, cp, drop); });
                same(rounded(px, H), PX.get(), "positions, cp rank 1", tol);
                same(dpos, DP.get(), "positions backward, cp rank 1", 5e-5);
                same(rounded(mask, H), M2.get(), "dropout mask, cp rank 1", tol);
                same(rounded(dx, H), DX.get(), "dropout, cp rank 1", tol);
                CHECK(dpos[0] == 0.0f);  // position 0 lives on rank 0
            }

            std::vector<float> tokens(2 * T);
            std::mt19937 gen(9);
            for (auto& t : tokens) t = static_cast<float>(gen() % V);
            const auto table = rounded(randoms(V * C, 10), H), logits = rounded(randoms(T * V, 11, -5, 5), H);
            std::vector<float> e(T * C), dtab(V * C), stats(3 * T), lse(T), dl(T * V);
            cpu::embedding_forward(e.data(), tokens.data(), table.data(), 0, V, T, C);
            cpu::embedding_backward(dtab.data(), tokens.data(), dy.data(), 0, V, T, C);
            cpu::loss_stats(stats.data(), logits.data(), tokens.data(), 0, T, V);
            cpu::loss_combine(nullptr, lse.data(), stats.data(), 1, T);
            cpu::loss_backward(dl.data(), logits.data(), tokens.data(), lse.data(), 0, T, V, 0.5f);
            Buf TK(tokens, false), TB(table, H), E(e, H), DT(std::vector<float>(V * C), false), DY(dy, H), LG(logits, H), STS(stats, false);
            run1(T * C, [&] { k_embedding_fwd(E.tv(), TK.tv(), TB.tv(), 0, V, T, C); });
            run1(T * C, [&] { k_embedding_bwd(DT.tv(), TK.tv(), DY.tv(), 0, V, T, C); });
            launch(dim3(T), dim3(1024), 0, [&] { k_loss_stats(STS.tv(), LG.tv(), TK.tv(), 0, V); });
            launch(dim3(T), dim3(1024), 0, [&] { k_loss_bwd(LG.tv(), LG.tv(), TK.tv(), STS.tv(), 1, 0, T, V, 0.5f); });  // in place
            same(rounded(e, H), E.get(), "embedding", tol);
            same(dtab, DT.get(), "embedding backward", 5e-5);
            same(stats, STS.get(), "loss stats", 1e-5);
            same(rounded(dl, H), LG.get(), "loss backward", tol);
        }
        SECTION("the loss scale's unscale in the gradients' width: an inf or NaN flagged, the flag kept") {
            auto g = rounded(randoms(300, 16, -100, 100), H);
            g[77] = std::numeric_limits<float>::infinity();
            std::vector<float> want = g;
            for (float& e : want) e *= 0.25f;
            Buf G(g, H), G2(rounded(randoms(300, 17), H), H);
            float found = 0.0f;
            run1(300, [&] { k_unscale(G.tv(), 0.25f, &found, 300); });
            CHECK(found == 1.0f);
            const auto got = G.get(), wr = rounded(want, H);
            for (std::size_t i = 0; i < got.size(); ++i)
                if (i != 77) CHECK(got[i] == wr[i]);
            CHECK(std::isinf(got[77]));
            run1(300, [&] { k_unscale(G2.tv(), 0.5f, &found, 300); });  // a clean range leaves the flag
            CHECK(found == 1.0f);
            found = 0.0f;
            run1(300, [&] { k_unscale(G2.tv(), 0.5f, &found, 300); });
            CHECK(found == 0.0f);
        }
        SECTION("AdamW over chunks from gradients of the plan's width; conversions and sums") {
            const i64 n = 3000;
            const auto p0 = randoms(n, 12), g = rounded(randoms(n, 13), H), m0 = randoms(n, 14, -0.1f, 0.1f), v0 = randoms(n, 15, 0, 0.1f);
            auto p = p0, m = m0, v = v0;
            const std::vector<unsigned char> all(n, 1);
            cpu::adamw(p.data(), m.data(), v.data(), g.data(), all.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
            Buf P(p0, false), M(m0, false), Vv(v0, false), G(g, H);
            std::vector<AdamChunk> chunks{{0, 2000, 0.1f}, {2000, 1000, 0.1f}};
            const float c1 = 1.0f - std::pow(0.9f, 3.0f), c2 = 1.0f - std::pow(0.95f, 3.0f);
            Buf W(std::vector<float>(n), H), W2(std::vector<float>(n), H);
            launch(dim3(2), dim3(kThreads), 0,
                   [&] { k_adamw_chunks(P.tv(), M.tv(), Vv.tv(), G.tv(), W.tv(), chunks.data(), 1e-3f, 0.9f, 0.95f, 1e-8f, c1, c2); });
            same(p, P.get(), "adamw parameters", 1e-6);
            same(m, M.get(), "adamw m", 1e-6);
            CHECK(W.get() == rounded(P.get(), H));  // the weights written in the same pass: the master's rounding
            if (H == 1) {  // pure bf16 (plan.master_weights false, bf16 moments): the update in each buffer's own width
                auto pb = rounded(p0, true), mb = rounded(m0, true), vb = rounded(v0, true);
                cpu::adamw(pb.data(), mb.data(), vb.data(), g.data(), all.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
                Buf PB(rounded(p0, true), true), MB(rounded(m0, true), true), VB(rounded(v0, true), true);
                launch(dim3(2), dim3(kThreads), 0,
                       [&] { k_adamw_chunks(PB.tv(), MB.tv(), VB.tv(), G.tv(), TV{}, chunks.data(), 1e-3f, 0.9f, 0.95f, 1e-8f, c1, c2); });
                CHECK(PB.get() == rounded(pb, true));  // computed in fp32, written to nearest even
                CHECK(MB.get() == rounded(mb, true));
                CHECK(VB.get() == rounded(vb, true));
            }
            run1(n, [&] { k_convert(W2.tv(), P.tv(), n); });  // as a copy would give them
            CHECK(W2.get() == W.get());
            double total = 0;
            for (float e : W.get()) total += e;
            double out = 0;
            launch(dim3(std::min<unsigned>(blocks_for(n), 1024)), dim3(kThreads), 0, [&] { k_sum(&out, W.tv(), n); });
            CHECK(out == Approx(total).epsilon(1e-5));
        }
    }
}

TEST_CASE("the cuda MoE kernels, emulated on the CPU, match the cpu kernels", "[runtime][cuda-emulated]") {
    using namespace strata::runtime::emulated;
    namespace cpu = strata::runtime::cpu;
    const bool H = GENERATE(false, true);
    INFO((H ? "bf16 rows" : "fp32"));
    const double tol = H ? 1e-2 : 2e-5;
    // 9 tokens, 6 experts, top 3, rows 20 wide; a tie in token 4's logits (experts 1 and 4) must go
    // to the lower id, as the cpu kernel's order has it.
    const i64 T = 9, E = 6, k = 3, C = 20;
    auto logits = randoms(T * E, 40, -3, 3);
    logits[4 * E + 4] = logits[4 * E + 1] = 5.0f;
    std::vector<float> routing(T * 2 * k), dlogits(T * E);
    cpu::moe_route(routing.data(), logits.data(), T, E, k, 0, 0);
    Buf L(logits, false), R(std::vector<float>(T * 2 * k), false);
    launch(dim3(T), dim3(kRouteThreads), 0, [&] { k_moe_route(R.tv(), L.tv(), E, k, 0, 0); });
    for (i64 c = 0; c < T * k; ++c) CHECK(R.get()[static_cast<std::size_t>((c / k) * 2 * k + c % k)] == routing[static_cast<std::size_t>((c / k) * 2 * k + c % k)]);
    same(routing, R.get(), "router ids and weights", 1e-6);
    const auto dprobs = randoms(T * k, 41);
    cpu::moe_route_backward(dlogits.data(), routing.data(), dprobs.data(), T, E, k);
    Buf DP(dprobs, false), DL(randoms(T * E, 42), false);  // stale values: the kernel zeroes the row
    launch(dim3(T), dim3(kThreads), 0, [&] { k_moe_route_bwd(DL.tv(), R.tv(), DP.tv(), E, k); });
    same(dlogits, DL.get(), "router backward", 1e-6);
    {
        // Group-limited routing: 3 groups of 2 experts, the best 1 group a token (so top 3 within a
        // pair is impossible: top 2), groups scored by their best k / group_topk = 2 logits.
        const i64 kg = 2;
        std::vector<float> rg(T * 2 * kg);
        cpu::moe_route(rg.data(), logits.data(), T, E, kg, 3, 1);
        Buf RG(std::vector<float>(T * 2 * kg), false);
        launch(dim3(T), dim3(kRouteThreads), 0, [&] { k_moe_route(RG.tv(), L.tv(), E, kg, 3, 1); });
        same(rg, RG.get(), "group-limited router ids and weights", 1e-6);
        for (i64 t = 0; t < T; ++t)  // both choices in one group, by construction of the rule
            CHECK(static_cast<i64>(RG.get()[static_cast<std::size_t>(t * 2 * kg)]) / 2 == static_cast<i64>(RG.get()[static_cast<std::size_t>(t * 2 * kg + 1)]) / 2);
    }

    // The token order as the executor gives it to the device: the cpu kernel's, on the host.
    std::vector<i64> pos(T * k), counts(E);
    cpu::moe_order(pos.data(), counts.data(), routing.data(), T, E, k, 0);
    const auto x = rounded(randoms(T * C, 43), H), ye = rounded(randoms(T * k * C, 44), H), dy = rounded(randoms(T * C, 45), H);
    std::vector<float> xp(T * k * C), dx(T * C), y(T * C), dye(T * k * C), dpr(T * k), pr(T * k), dpb(T * k);
    cpu::moe_permute(xp.data(), x.data(), pos.data(), T, k, C);
    cpu::moe_permute_backward(dx.data(), ye.data(), pos.data(), T, k, C);
    cpu::moe_unpermute(y.data(), ye.data(), routing.data(), pos.data(), T, k, C);
    cpu::moe_unpermute_backward(dye.data(), dpr.data(), dy.data(), ye.data(), routing.data(), pos.data(), T, k, C);
    for (i64 c = 0; c < T * k; ++c) pr[static_cast<std::size_t>(pos[static_cast<std::size_t>(c)])] = routing[static_cast<std::size_t>((c / k) * 2 * k + k + c % k)];
    for (i64 c = 0; c < T * k; ++c) dpb[static_cast<std::size_t>(c)] = dpr[static_cast<std::size_t>(pos[static_cast<std::size_t>(c)])];
    Buf X(x, H), XP(std::vector<float>(T * k * C), H), YE(ye, H), DX(std::vector<float>(T * C), H), Y(std::vector<float>(T * C), H);
    Buf DY(dy, H), DYE(std::vector<float>(T * k * C), H), DPR(std::vector<float>(T * k), false), PR(std::vector<float>(T * k), false);
    Buf DPRB(dpr, false), DPB(std::vector<float>(T * k), false);
    run1(T * k * C, [&] { k_moe_permute(XP.tv(), X.tv(), pos.data(), T, k, C); });
    run1(T * C, [&] { k_moe_permute_bwd(DX.tv(), YE.tv(), pos.data(), T, k, C); });
    run1(T * C, [&] { k_moe_unpermute(Y.tv(), YE.tv(), R.tv(), pos.data(), T, k, C); });
    run1(T * k * C, [&] { k_moe_unpermute_bwd_rows(DYE.tv(), DY.tv(), R.tv(), pos.data(), T, k, C); });
    launch(dim3(T * k), dim3(kThreads), 0, [&] { k_moe_unpermute_bwd_probs(DPR.tv(), DY.tv(), YE.tv(), pos.data(), k, C); });
    run1(T * k, [&] { k_moe_probs(PR.tv(), R.tv(), pos.data(), T, k); });
    run1(T * k, [&] { k_moe_probs_bwd(DPB.tv(), DPRB.tv(), pos.data(), T, k); });
    same(rounded(xp, H), XP.get(), "permute", tol);
    same(rounded(dx, H), DX.get(), "permute backward", tol);
    same(rounded(y, H), Y.get(), "unpermute", tol);
    same(rounded(dye, H), DYE.get(), "unpermute backward, rows", tol);
    same(dpr, DPR.get(), "unpermute backward, weights", 1e-5);
    same(pr, PR.get(), "the rows' weights in expert order", 1e-6);
    same(dpb, DPB.get(), "their gradients back in token order", 1e-6);
    // Without weights (fc2_input: applied inside the experts) every row counts once.
    std::vector<float> ones(T * 2 * k, 1.0f), y1(T * C);
    cpu::moe_unpermute(y1.data(), ye.data(), ones.data(), pos.data(), T, k, C);
    Buf Y1(std::vector<float>(T * C), H);
    run1(T * C, [&] { k_moe_unpermute(Y1.tv(), YE.tv(), TV{}, pos.data(), T, k, C); });
    same(rounded(y1, H), Y1.get(), "unpermute without weights", tol);
    // The weighted activation's pieces: rows scaled by a weight, and a dot per row.
    const auto w = randoms(T, 46);
    std::vector<float> sc(T * C), dots(T);
    for (i64 r = 0; r < T; ++r) {
        double d = 0;
        for (i64 c = 0; c < C; ++c) {
            sc[static_cast<std::size_t>(r * C + c)] = x[static_cast<std::size_t>(r * C + c)] * w[static_cast<std::size_t>(r)];
            d += static_cast<double>(x[static_cast<std::size_t>(r * C + c)]) * dy[static_cast<std::size_t>(r * C + c)];
        }
        dots[static_cast<std::size_t>(r)] = static_cast<float>(d);
    }
    Buf W(w, false), SC(std::vector<float>(T * C), H), DOT(std::vector<float>(T), false);
    run1(T * C, [&] { k_scale_rows(SC.tv(), X.tv(), W.tv(), T, C); });
    launch(dim3(T), dim3(kThreads), 0, [&] { k_row_dot(DOT.tv(), X.tv(), DY.tv(), C); });
    same(rounded(sc, H), SC.get(), "scaled rows", tol);
    same(dots, DOT.get(), "row dots", 1e-5);
}

TEST_CASE("the exact attention path's softmax kernels, emulated, keep a sliding window", "[runtime][cuda-emulated]") {
    using namespace strata::runtime::emulated;
    // One sequence of 9 scores a row, one head: row i's probabilities over keys max(0, i - 2) .. i
    // (a window of 3), written out here; the backward's P and dS = P (dP - D) scale on them, 0 elsewhere.
    const i64 seq = 9, window = 3;
    const float scale = 0.5f;
    std::vector<float> S = randoms(seq * seq, 41), dP = randoms(seq * seq, 42), D = randoms(seq, 43), P(seq * seq), lse(seq),
                       P2(seq * seq), dS(seq * seq);
    launch(dim3(seq, 1), dim3(kThreads), 0,
           [&] { k_softmax_causal(S.data(), TV{P.data(), 0}, TV{lse.data(), 0}, seq, 1, 0, scale, strata::runtime::Dropout{}, window); });
    launch(dim3(seq, 1), dim3(kThreads), 0, [&] {
        k_softmax_causal_bwd(S.data(), dP.data(), TV{P2.data(), 0}, TV{dS.data(), 0}, TV{lse.data(), 0}, D.data(), seq, 1, 0, scale, strata::runtime::Dropout{},
                             window);
    });
    for (i64 i = 0; i < seq; ++i) {
        const i64 lo = std::max<i64>(0, i - window + 1);
        double mx = -1e30, sum = 0;
        for (i64 j = lo; j <= i; ++j) mx = std::max(mx, static_cast<double>(S[i * seq + j]) * scale);
        for (i64 j = lo; j <= i; ++j) sum += std::exp(S[i * seq + j] * scale - mx);
        INFO("row " << i);
        CHECK(lse[i] == Approx(mx + std::log(sum)).epsilon(1e-5));
        for (i64 j = 0; j < seq; ++j) {
            const bool seen = j >= lo && j <= i;
            const double p = seen ? std::exp(S[i * seq + j] * scale - mx) / sum : 0.0;
            CHECK(P[i * seq + j] == Approx(p).margin(1e-6));
            CHECK(P2[i * seq + j] == Approx(p).margin(1e-6));
            CHECK(dS[i * seq + j] == Approx(seen ? p * (dP[i * seq + j] - D[i]) * scale : 0.0).margin(1e-6));
        }
    }
}

TEST_CASE("the ring's attention blocks, emulated, match the cpu block kernels", "[runtime][cuda-emulated][cp]") {
    // Rank 1 of cp 2 over two sequences of 8: its own block, then rank 0's merged in; backward the
    // queries' gradient accumulates and rank 0's block gets its K/V gradient. GQA (4 query heads
    // on 2 KV heads), with and without a window and attention dropout, fp32 and bf16 operands.
    using namespace strata::runtime::emulated;
    namespace cpu = strata::runtime::cpu;
    using strata::runtime::Dropout;
    const bool H = GENERATE(false, true);
    const i64 window = GENERATE(i64{0}, i64{3});
    const float p = GENERATE(0.0f, 0.2f);
    INFO((H ? "bf16" : "fp32") << ", window " << window << ", dropout " << p);
    const double tol = H ? 1e-2 : 2e-5;
    const i64 hq = 4, hkv = 2, d = 8, row = (hq + 2 * hkv) * d, G = 2 * hkv * d;
    cpu::Positions mine{8, 2, 1}, theirs{8, 2, 0};
    mine.window = window;
    const i64 T = 2 * mine.local();
    const Dropout drop{p, strata::runtime::dropout_key(3, 1, 2, strata::runtime::DropoutSite::attention_probs), 6, 0, 4, 2 * hq};
    const auto qkv = rounded(randoms(T * row, 50), H), kv = rounded(randoms(T * G, 51), H), dout = rounded(randoms(T * hq * d, 52), H);
    std::vector<float> out(T * hq * d), lse(T * hq), dqkv(T * row), dkv(T * G);
    cpu::attention_block_forward(out.data(), lse.data(), qkv.data(), qkv.data() + hq * d, row, mine, mine, T, hq, hkv, d, false, drop);
    cpu::attention_block_forward(out.data(), lse.data(), qkv.data(), kv.data(), G, mine, theirs, T, hq, hkv, d, true, drop);
    Buf Q(qkv, H), K(kv, H), O(std::vector<float>(T * hq * d), H), L(std::vector<float>(T * hq), false), DO(dout, H);
    run1(T * hq, [&] { k_ring_block_fwd(O.tv(), L.tv(), Q.tv(), Q.tv() + hq * d, row, mine, mine, T, hq, hkv, d, false, drop); });
    run1(T * hq, [&] { k_ring_block_fwd(O.tv(), L.tv(), Q.tv(), K.tv(), G, mine, theirs, T, hq, hkv, d, true, drop); });
    same(rounded(out, H), O.get(), "ring forward out", tol);
    same(lse, L.get(), "ring forward lse", 1e-5);
    // Backward against the emulated forward's own out and lse, as the device would run it.
    const auto o_dev = O.get(), l_dev = L.get();
    cpu::attention_block_backward(dqkv.data(), nullptr, row, qkv.data(), qkv.data() + hq * d, o_dev.data(), l_dev.data(), dout.data(), mine, mine,
                                  T, hq, hkv, d, false, drop);
    cpu::attention_block_backward(dqkv.data(), dkv.data(), G, qkv.data(), kv.data(), o_dev.data(), l_dev.data(), dout.data(), mine, theirs, T,
                                  hq, hkv, d, true, drop);
    Buf DQ(std::vector<float>(T * row), H), DK(randoms(T * G, 53), H);  // the block's buffer starts dirty: it is written
    std::vector<float> s1(T * G, 0.0f), s2(T * G, 0.0f);
    run1(T * hq, [&] { k_ring_block_bwd(DQ.tv(), s1.data(), Q.tv(), Q.tv() + hq * d, row, O.tv(), L.tv(), DO.tv(), mine, mine, T, hq, hkv, d, drop); });
    run1(T * G, [&] { k_ring_kv_out(DQ.tv(), TV{}, row, s1.data(), T, hq, hkv, d); });
    run1(T * hq, [&] { k_ring_block_bwd(DQ.tv(), s2.data(), Q.tv(), K.tv(), G, O.tv(), L.tv(), DO.tv(), mine, theirs, T, hq, hkv, d, drop); });
    run1(T * G, [&] { k_ring_kv_out(DQ.tv(), DK.tv(), G, s2.data(), T, hq, hkv, d); });
    same(rounded(dqkv, H), DQ.get(), "ring backward dqkv", H ? 2e-2 : 5e-5);
    same(rounded(dkv, H), DK.get(), "ring backward dkv", H ? 2e-2 : 5e-5);
    // The returned K/V gradients into dqkv's trailing columns (cp.dkv_combine).
    std::vector<float> sum = dqkv;
    for (i64 t = 0; t < T; ++t)
        for (i64 c = 0; c < G; ++c) sum[t * row + hq * d + c] += dkv[t * G + c];
    Buf S(dqkv, H), R(dkv, H);
    run1(T * G, [&] { k_add_columns(S.tv(), row, R.tv(), G, T); });
    same(rounded(sum, H), S.get(), "returned K/V gradients added", tol);
}


TEST_CASE("unfused attention's probabilities and their gradient: softmax by hand, dout . out, and the cuda kernels emulated", "[runtime][cuda-emulated]") {
    // Megatron's CoreAttention keeps P = softmax(q k / sqrt(d)) (dropped: P z) and its backward forms
    // dP = dO V^T. Checked from outside the kernels: P against a softmax written out here; each
    // query row's sum over keys of (P z) dP equals dO . O (since O = (P z) V, the identity behind
    // FlashAttention's D term); and the emulated cuda kernels give the cpu kernels' values.
    using namespace strata::runtime::emulated;
    namespace cpu = strata::runtime::cpu;
    using strata::runtime::Dropout;
    const float p = GENERATE(0.0f, 0.2f);
    const i64 window = GENERATE(i64{0}, i64{3});
    INFO("dropout " << p << ", window " << window);
    const i64 seq = 6, batch = 2, hq = 4, hkv = 2, d = 8, T = seq * batch, row = (hq + 2 * hkv) * d, od = hq * d, n = batch * hq * seq * seq;
    const Dropout drop{p, strata::runtime::dropout_key(5, 2, 1, strata::runtime::DropoutSite::attention_probs), 3, 0, 0, hq};
    const auto qkv = randoms(T * row, 70), dout = randoms(T * od, 71);
    std::vector<float> out(T * od), lse(T * hq), probs(n), mask(n), dropped(n), dprobs(n);
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), T, seq, hq, hkv, d, drop, window);
    cpu::attention_probs(probs.data(), p > 0 ? mask.data() : nullptr, p > 0 ? dropped.data() : nullptr, qkv.data(), lse.data(), T, seq, hq, hkv, d,
                         drop, window);
    cpu::attention_probs_grad(dprobs.data(), qkv.data(), dout.data(), T, seq, hq, hkv, d);
    double worst_p = 0, worst_d = 0;
    for (i64 b = 0; b < batch; ++b)
        for (i64 h = 0; h < hq; ++h)
            for (i64 i = 0; i < seq; ++i) {
                const i64 t = b * seq + i, at = ((b * hq + h) * seq + i) * seq;
                std::vector<double> s(static_cast<std::size_t>(seq), -1e300);
                double mx = -1e300, z = 0;
                for (i64 j = 0; j <= i; ++j) {
                    if (window > 0 && i - j >= window) continue;
                    double dot = 0;
                    for (i64 c = 0; c < d; ++c) dot += qkv[t * row + h * d + c] * qkv[(b * seq + j) * row + hq * d + (h / 2) * d + c];
                    s[static_cast<std::size_t>(j)] = dot / std::sqrt(static_cast<double>(d));
                    mx = std::max(mx, s[static_cast<std::size_t>(j)]);
                }
                for (i64 j = 0; j < seq; ++j) z += s[static_cast<std::size_t>(j)] > -1e299 ? std::exp(s[static_cast<std::size_t>(j)] - mx) : 0.0;
                double lhs = 0, rhs = 0;
                for (i64 j = 0; j < seq; ++j) {
                    const double want = s[static_cast<std::size_t>(j)] > -1e299 ? std::exp(s[static_cast<std::size_t>(j)] - mx) / z : 0.0;
                    worst_p = std::max(worst_p, std::fabs(want - probs[at + j]));
                    lhs += static_cast<double>(p > 0 ? dropped[at + j] : probs[at + j]) * dprobs[at + j];
                }
                for (i64 c = 0; c < d; ++c) rhs += static_cast<double>(dout[(t * hq + h) * d + c]) * out[(t * hq + h) * d + c];
                worst_d = std::max(worst_d, std::fabs(lhs - rhs));
            }
    CHECK(worst_p < 1e-6);
    CHECK(worst_d < 1e-5);
    // A key outside the causal window still has a gradient (the bmm does not know the mask).
    CHECK(std::fabs(dprobs[1]) > 0.0f);
    Buf Q(qkv, 0), L(lse, 0), DO(dout, 0), P(std::vector<float>(n), 0), M(std::vector<float>(n), 0), PD(std::vector<float>(n), 0),
        DP(randoms(n, 72), 0);  // a dirty buffer: every element is written
    run1(n, [&] {
        k_attn_probs(P.tv(), p > 0 ? M.tv() : TV{}, p > 0 ? PD.tv() : TV{}, Q.tv(), L.tv(), seq, hq, hkv, d, 1.0f / std::sqrt(static_cast<float>(d)),
                     drop, window, n);
    });
    run1(n, [&] { k_attn_probs_grad(DP.tv(), Q.tv(), DO.tv(), seq, hq, hkv, d, n); });
    same(probs, P.get(), "probabilities", 2e-6);
    if (p > 0) {
        same(mask, M.get(), "dropout factors", 0);
        same(dropped, PD.get(), "dropped probabilities", 2e-6);
    }
    same(dprobs, DP.get(), "probabilities' gradient", 2e-6);
}

TEST_CASE("MLA's cuda kernels, emulated, match the cpu kernels: RoPE's assembly, its backward, the column copies", "[runtime][cuda-emulated][mla]") {
    using namespace strata::runtime::emulated;
    namespace cpu = strata::runtime::cpu;
    const int H = GENERATE(0, 1);
    INFO(fmt_name(H));
    const double tol = H ? 1e-2 : 2e-6;
    const i64 T = 9, heads = 3, nope = 8, rope = 4, dv = 6, dqk = nope + rope, W = heads * (2 * dqk + dv), Wq = heads * dqk, Wkv = heads * (nope + dv);
    const cpu::Positions where{3, 1, 0};
    const auto q = rounded(randoms(T * Wq, 80), H), kv = rounded(randoms(T * Wkv, 81), H), kr = rounded(randoms(T * rope, 82), H),
               g = rounded(randoms(T * W, 83), H);
    std::vector<float> qkv(T * W), dq(T * Wq), dkv(T * Wkv), dkr(T * rope);
    cpu::mla_rope_forward(qkv.data(), q.data(), kv.data(), kr.data(), T, where, heads, nope, rope, dv);
    cpu::mla_rope_backward(dq.data(), dkv.data(), dkr.data(), g.data(), T, where, heads, nope, rope, dv);
    Buf Q(q, H), KV(kv, H), KR(kr, H), G(g, H), O(randoms(T * W, 84), H), DQ(randoms(T * Wq, 85), H), DKV(randoms(T * Wkv, 86), H),
        DKR(randoms(T * rope, 87), H);  // dirty outputs: every element is written
    run1(T * W, [&] { k_mla_rope_fwd(O.tv(), Q.tv(), KV.tv(), KR.tv(), T, where, heads, nope, rope, dv); });
    run1(T * (Wq + Wkv), [&] { k_mla_rope_bwd(DQ.tv(), DKV.tv(), G.tv(), T, where, heads, nope, rope, dv); });
    run1(T * rope, [&] { k_mla_rope_bwd_key(DKR.tv(), G.tv(), T, where, heads, nope, rope, dv); });
    same(rounded(qkv, H), O.get(), "mla rope forward", tol);
    same(rounded(dq, H), DQ.get(), "mla rope backward, query", tol);
    same(rounded(dkv, H), DKV.get(), "mla rope backward, key/value", tol);
    same(rounded(dkr, H), DKR.get(), "mla rope backward, shared key", H ? 2e-2 : 2e-6);
    // A column block out of wider rows, and into them.
    std::vector<float> block(T * 5), wide = rounded(randoms(T * 11, 88), H);
    cpu::copy_columns(block.data(), 5, wide.data() + 4, 11, 5, T);
    Buf B(std::vector<float>(T * 5), H), Wd(wide, H);
    run1(T * 5, [&] { k_copy_columns(B.tv(), 5, Wd.tv() + 4, 11, 5, T * 5); });
    same(block, B.get(), "copy_columns", 0);
    for (i64 t = 0; t < T; ++t) CHECK(block[t * 5] == wide[t * 11 + 4]);
}
