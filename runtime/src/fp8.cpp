// FP8 numerics of the cpu backend. A GEMM of an FP8 plan reads its operands as Transformer
// Engine's FP8 GEMM does: each one scaled into the format's range by its own amax (current
// scaling), rounded to the format, and the product taken in fp32 with the scales undone; the
// cpu backend stores the rounded values back as floats, which every FP8 value is exactly.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "strata/runtime/cpu_kernels.hpp"

namespace strata::runtime::cpu {

namespace {
struct Format {
    int mantissa_bits;
    int min_normal_exp;  ///< exponent of the smallest normal value (below it: subnormal spacing)
    float max;
};
Format format(Fp8 f) { return f == Fp8::e4m3 ? Format{3, -6, 448.0f} : Format{2, -14, 57344.0f}; }
}  // namespace

float fp8_max(Fp8 f) { return format(f).max; }

void round_fp8(float* p, i64 n, Fp8 f) {
    const Format fm = format(f);
    const int shift = 23 - fm.mantissa_bits;  // float mantissa bits dropped
    const std::uint32_t half = (1u << (shift - 1)) - 1, keep = ~((1u << shift) - 1);
    const float min_normal = std::ldexp(1.0f, fm.min_normal_exp);
    // Below the smallest normal the spacing is fixed, 2^(emin - m): adding a float whose own
    // spacing is exactly that rounds to it (to nearest, ties to even), and subtracting it is exact.
    const float sub = std::ldexp(1.0f, fm.min_normal_exp - fm.mantissa_bits + 23);
    for (i64 i = 0; i < n; ++i) {
        const float x = p[i];
        if (std::isnan(x) || x == 0.0f) continue;
        const float a = std::fabs(x);
        float q;
        if (a >= fm.max) {
            q = fm.max;  // satfinite: infinities and overflows to the largest value
        } else if (a < min_normal) {
            volatile float t = a + sub;  // volatile: the sum must be rounded, not folded away
            q = t - sub;
        } else {
            std::uint32_t b;
            std::memcpy(&b, &a, 4);
            b = (b + half + ((b >> shift) & 1u)) & keep;  // mantissa to m bits, ties to even
            std::memcpy(&q, &b, 4);
            q = std::min(q, fm.max);
        }
        p[i] = std::copysign(q, x);
    }
}

float fp8_quantize(float* dst, const float* src, i64 n, Fp8 f) {
    float amax = 0.0f;
    for (i64 i = 0; i < n; ++i) amax = std::max(amax, std::fabs(src[i]));
    const float scale = amax > 0.0f && std::isfinite(amax) ? fp8_max(f) / amax : 1.0f;
    const float inv = 1.0f / scale;
    for (i64 i = 0; i < n; ++i) dst[i] = src[i] * scale;
    round_fp8(dst, n, f);
    for (i64 i = 0; i < n; ++i) dst[i] *= inv;
    return scale;
}

}  // namespace strata::runtime::cpu
