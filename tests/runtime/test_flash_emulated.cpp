// runtime/cuda/flash.cuh's kernels, run on the CPU (cuda_emulation.hpp), against the cpu kernels
// on bf16-rounded inputs: the flash schedule's tiles, causal bounds, online softmax, dropout and
// backward accumulation are checked in CI, where no GPU is; test_cuda.cpp checks the same kernels
// on a GPU. A wrong operand layout (row- for column-major K in the forward) fails every case here.
#include <catch2/catch.hpp>

#include <random>

#include "runtime_fixtures.hpp"  // before the emulation's macros
#include "cuda_emulation.hpp"

namespace strata::runtime::emulated {
#include "kernels.cuh"
#include "flash.cuh"

namespace {
std::vector<float> randoms(std::size_t n, unsigned seed) {  // bf16-representable, as the kernels read them
    std::vector<float> v = strata::test::uniform_floats(n, seed);
    cpu::round_bf16(v.data(), static_cast<i64>(n));
    return v;
}

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
    std::vector<__nv_bfloat16> out;
    for (float x : v) out.push_back(__float2bfloat16_rn(x));
    return out;
}

// The executor's layouts, as attention.cuh's flash path passes them: qkv and dout rows in, out
// rows and the lse out; dQ, dK, dV per head, summed over each group as k_attn_merge_grads does.
template <int D>
void check(i64 seq, i64 batch, i64 hq, i64 hkv, float p, i64 window = 0) {
    const i64 T = seq * batch, row = (hq + 2 * hkv) * D, od = hq * D, items = batch * hq, n = items * seq * D, g = hq / hkv;
    const Dropout drop{p, dropout_key(7, 3, 1, DropoutSite::attention_probs), 5, 0, 0, hq};
    const auto qkv = randoms(T * row, 19), dout = randoms(T * od, 20);
    std::vector<float> out(T * od), lse(T * hq), dqkv(T * row);
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), T, seq, hq, hkv, D, drop, window);
    cpu::round_bf16(out.data(), T * od);
    cpu::attention_backward(dqkv.data(), qkv.data(), out.data(), lse.data(), dout.data(), T, seq, hq, hkv, D, drop, window);
    const std::vector<__nv_bfloat16> QKV = to_bf16(qkv), dO = to_bf16(dout);
    std::vector<__nv_bfloat16> O(T * od);
    std::vector<float> L(T * hq), dQ(n), dK(n), dV(n), Dd(items * seq);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const dim3 grid(static_cast<unsigned>((seq + 63) / 64), static_cast<unsigned>(items));
    launch(grid, dim3(kFlashThreads), flash_fwd_smem<D>(), [&] { k_flash_fwd<D>(QKV.data(), O.data(), TV{L.data(), 0}, seq, hq, hkv, scale, drop, window); });
    double worst_o = 0, worst_l = 0, scale_o = 0;
    for (i64 i = 0; i < T * od; ++i) {
        scale_o = std::max(scale_o, std::fabs(static_cast<double>(out[i])));
        worst_o = std::max(worst_o, std::fabs(static_cast<double>(out[i]) - __bfloat162float(O[i])));
    }
    for (i64 i = 0; i < T * hq; ++i) worst_l = std::max(worst_l, std::fabs(static_cast<double>(lse[i]) - L[i]));
    // D = dO . O from the rows, with the kernel's own bf16 O.
    launch(dim3(static_cast<unsigned>((items * seq + 7) / 8)), dim3(32, 8), 0,
           [&] { k_attn_rowdot_rows(Dd.data(), TV{const_cast<__nv_bfloat16*>(dO.data()), 1}, TV{O.data(), 1}, seq, hq, D, items * seq); });
    launch(grid, dim3(kFlashThreads), flash_bwd_smem<D>(), [&] {
        k_flash_bwd<D>(QKV.data(), dO.data(), TV{L.data(), 0}, Dd.data(), dQ.data(), dK.data(), dV.data(), seq, hq, hkv, scale, drop, window);
    });
    double worst_g = 0, scale_g = 0;
    for (i64 i = 0; i < T * row; ++i) {
        const i64 col = i % row, rw = i / row, b = rw / seq, t = rw % seq, c = col % D;
        auto at = [&](i64 h) { return ((b * hq + h) * seq + t) * D + c; };
        float v;
        if (col < hq * D) v = dQ[at(col / D)];
        else {
            const bool key = col < (hq + hkv) * D;
            const i64 kvh = (key ? col - hq * D : col - (hq + hkv) * D) / D;
            v = 0;
            const std::vector<float>& from = key ? dK : dV;  // GCC 12's UBSan miscompiles (c ? p : q)[i]
            for (i64 h = kvh * g; h < (kvh + 1) * g; ++h) v += from[static_cast<std::size_t>(at(h))];
        }
        scale_g = std::max(scale_g, std::fabs(static_cast<double>(dqkv[i])));
        worst_g = std::max(worst_g, std::fabs(static_cast<double>(dqkv[i]) - v));
    }
    INFO("head dim " << D << ", seq " << seq << ", batch " << batch << ", heads " << hq << "/" << hkv << ", dropout " << p << ", window " << window);
    CHECK(worst_o <= 1e-2 * scale_o);  // one bf16 rounding of the output
    CHECK(worst_l <= 1e-4);
    CHECK(worst_g <= 2e-2 * scale_g);  // P and dS rounded to bf16 for the tensor cores
}

}  // namespace
}  // namespace strata::runtime::emulated

TEST_CASE("flash attention's kernels, emulated on the CPU, match the cpu kernels", "[runtime][flash]") {
    using namespace strata::runtime::emulated;
    check<64>(100, 1, 2, 1, 0.1f);  // two tiles, the second partial; dropout
    check<128>(70, 2, 4, 2, 0.0f);  // 128-wide heads, GQA, two sequences
    check<64>(30, 2, 2, 2, 0.0f);   // shorter than one tile
}

TEST_CASE("flash attention's kernels with a sliding window, emulated, match the cpu kernels", "[runtime][flash]") {
    using namespace strata::runtime::emulated;
    check<64>(200, 1, 2, 1, 0.1f, 70);  // the forward walk starts past tile 0, the backward's stops before the last
    check<64>(130, 1, 2, 2, 0.0f, 64);  // a window of exactly one tile
    check<128>(100, 2, 2, 1, 0.0f, 5);  // narrower than a 16-row fragment
}
