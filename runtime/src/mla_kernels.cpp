// The cpu backend's kernels for multi-head latent attention's RoPE and the assembly of the
// attention's rows (cpu_kernels.hpp), and the column copies its latents are split with.
#include <cmath>
#include <cstring>
#include <vector>

#include "strata/runtime/cpu_kernels.hpp"

namespace strata::runtime::cpu {

void copy_columns(float* dst, i64 dst_stride, const float* src, i64 src_stride, i64 cols, i64 rows) {
    for (i64 r = 0; r < rows; ++r) std::memcpy(dst + r * dst_stride, src + r * src_stride, static_cast<std::size_t>(cols) * sizeof(float));
}

namespace {
// rope()'s rotation of one rope-wide vector at a position (rotate-half, base 10000): y may be x.
struct Rotation {
    std::vector<float> cs, sn;
    Rotation(double pos, i64 d, bool inverse) : cs(static_cast<std::size_t>(d / 2)), sn(static_cast<std::size_t>(d / 2)) {
        for (i64 i = 0; i < d / 2; ++i) {
            const double theta = pos * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(d));
            cs[static_cast<std::size_t>(i)] = static_cast<float>(std::cos(theta));
            sn[static_cast<std::size_t>(i)] = static_cast<float>((inverse ? -1.0 : 1.0) * std::sin(theta));
        }
    }
    void operator()(float* y, const float* x) const {
        const i64 half = static_cast<i64>(cs.size());
        for (i64 i = 0; i < half; ++i) {
            const float a = x[i], b = x[i + half], c = cs[static_cast<std::size_t>(i)], s = sn[static_cast<std::size_t>(i)];
            y[i] = a * c - b * s;
            y[i + half] = b * c + a * s;
        }
    }
};
}  // namespace

void mla_rope_forward(float* qkv, const float* q, const float* kv, const float* k_rope, i64 T, const Positions& where, i64 heads, i64 nope,
                      i64 rope, i64 dv) {
    const i64 dqk = nope + rope, W = heads * (2 * dqk + dv), Wq = heads * dqk, Wkv = heads * (nope + dv);
    std::vector<float> kr(static_cast<std::size_t>(rope));
    for (i64 t = 0; t < T; ++t) {
        const Rotation rot(static_cast<double>(where(t)), rope, false);
        rot(kr.data(), k_rope + t * rope);
        float* row = qkv + t * W;
        for (i64 h = 0; h < heads; ++h) {
            const float* qh = q + t * Wq + h * dqk;
            const float* kvh = kv + t * Wkv + h * (nope + dv);
            float* Q = row + h * dqk;
            float* K = row + Wq + h * dqk;
            float* V = row + 2 * Wq + h * dv;
            std::memcpy(Q, qh, static_cast<std::size_t>(nope) * sizeof(float));
            rot(Q + nope, qh + nope);
            std::memcpy(K, kvh, static_cast<std::size_t>(nope) * sizeof(float));
            std::memcpy(K + nope, kr.data(), static_cast<std::size_t>(rope) * sizeof(float));
            std::memcpy(V, kvh + nope, static_cast<std::size_t>(dv) * sizeof(float));
        }
    }
}

void mla_rope_backward(float* dq, float* dkv, float* dk_rope, const float* dqkv, i64 T, const Positions& where, i64 heads, i64 nope,
                       i64 rope, i64 dv) {
    const i64 dqk = nope + rope, W = heads * (2 * dqk + dv), Wq = heads * dqk, Wkv = heads * (nope + dv);
    std::vector<float> sum(static_cast<std::size_t>(rope));
    for (i64 t = 0; t < T; ++t) {
        const Rotation back(static_cast<double>(where(t)), rope, true);  // the rotation's transpose
        const float* row = dqkv + t * W;
        std::fill(sum.begin(), sum.end(), 0.0f);
        for (i64 h = 0; h < heads; ++h) {
            float* dqh = dq + t * Wq + h * dqk;
            float* dkvh = dkv + t * Wkv + h * (nope + dv);
            const float* Q = row + h * dqk;
            const float* K = row + Wq + h * dqk;
            const float* V = row + 2 * Wq + h * dv;
            std::memcpy(dqh, Q, static_cast<std::size_t>(nope) * sizeof(float));
            back(dqh + nope, Q + nope);
            std::memcpy(dkvh, K, static_cast<std::size_t>(nope) * sizeof(float));
            std::memcpy(dkvh + nope, V, static_cast<std::size_t>(dv) * sizeof(float));
            for (i64 i = 0; i < rope; ++i) sum[static_cast<std::size_t>(i)] += K[nope + i];
        }
        back(dk_rope + t * rope, sum.data());
    }
}

}  // namespace strata::runtime::cpu
