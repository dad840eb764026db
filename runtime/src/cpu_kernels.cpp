// The cpu backend's kernels (cpu_kernels.hpp). GEMMs through Eigen (single-threaded, so the same
// shape always sums in the same order); the rest as plain loops in the style of llm.c.
#include "strata/runtime/cpu_kernels.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace strata::runtime::cpu {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Map = Eigen::Map<RowMat>;
using CMap = Eigen::Map<const RowMat>;
constexpr float kNormEps = 1e-5f;
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
}  // namespace

void matmul_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 K, i64 N) {
    Map Y(y, T, N);
    Y.noalias() = CMap(x, T, K) * CMap(w, N, K).transpose();
    if (b)
        for (i64 t = 0; t < T; ++t)
            for (i64 n = 0; n < N; ++n) y[t * N + n] += b[n];
}

void matmul_dgrad(float* dx, const float* dy, const float* w, i64 T, i64 K, i64 N) {
    Map(dx, T, K).noalias() = CMap(dy, T, N) * CMap(w, N, K);
}

void matmul_wgrad(float* dw, float* db, const float* x, const float* dy, i64 T, i64 K, i64 N) {
    Map(dw, N, K).noalias() += CMap(dy, T, N).transpose() * CMap(x, T, K);
    if (db) bias_grad(db, dy, T, N);
}

void bias_grad(float* db, const float* d, i64 T, i64 N) {
    for (i64 t = 0; t < T; ++t)
        for (i64 n = 0; n < N; ++n) db[n] += d[t * N + n];
}

void norm_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 C) {
    for (i64 t = 0; t < T; ++t) {
        const float* xr = x + t * C;
        float mean = 0;
        if (b) {
            for (i64 c = 0; c < C; ++c) mean += xr[c];
            mean /= static_cast<float>(C);
        }
        float var = 0;
        for (i64 c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
        const float rstd = 1.0f / std::sqrt(var / static_cast<float>(C) + kNormEps);
        for (i64 c = 0; c < C; ++c) y[t * C + c] = (xr[c] - mean) * rstd * w[c] + (b ? b[c] : 0.0f);
    }
}

void norm_backward(float* dx, float* dw, float* db, const float* x, const float* dy, const float* w,
                   const float* residual, bool layernorm, i64 T, i64 C) {
    std::vector<float> xhat(static_cast<std::size_t>(C));
    for (i64 t = 0; t < T; ++t) {
        const float* xr = x + t * C;
        const float* dyr = dy + t * C;
        float mean = 0;
        if (layernorm) {
            for (i64 c = 0; c < C; ++c) mean += xr[c];
            mean /= static_cast<float>(C);
        }
        float var = 0;
        for (i64 c = 0; c < C; ++c) var += (xr[c] - mean) * (xr[c] - mean);
        const float rstd = 1.0f / std::sqrt(var / static_cast<float>(C) + kNormEps);
        float dmean = 0, dproj = 0;  // mean(dxhat), mean(dxhat * xhat)
        for (i64 c = 0; c < C; ++c) {
            xhat[static_cast<std::size_t>(c)] = (xr[c] - mean) * rstd;
            const float g = dyr[c] * w[c];
            dmean += g;
            dproj += g * xhat[static_cast<std::size_t>(c)];
        }
        dmean /= static_cast<float>(C);
        dproj /= static_cast<float>(C);
        for (i64 c = 0; c < C; ++c) {
            const float xh = xhat[static_cast<std::size_t>(c)];
            const float g = dyr[c] * w[c];
            const float d = rstd * (g - (layernorm ? dmean : 0.0f) - xh * dproj);
            dx[t * C + c] = (residual ? residual[t * C + c] : 0.0f) + d;
            dw[c] += dyr[c] * xh;
            if (db) db[c] += dyr[c];
        }
    }
}

namespace {
// GELU's tanh form and its derivative, for GELU and for GeGLU's gate.
float gelu_value(float v) { return 0.5f * v * (1.0f + std::tanh(kGeluC * (v + 0.044715f * v * v * v))); }
float gelu_slope(float v) {
    const float th = std::tanh(kGeluC * (v + 0.044715f * v * v * v));
    return 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
}
float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }
// act(g) and act'(g) of a gated MLP's gate.
float gate_value(float g, Gate gate) { return gate == Gate::silu ? g * sigmoid(g) : gelu_value(g); }
float gate_slope(float g, Gate gate) {
    if (gate == Gate::gelu) return gelu_slope(g);
    const float s = sigmoid(g);
    return s * (1.0f + g * (1.0f - s));
}
}  // namespace

void gelu_forward(float* y, const float* x, i64 n) {
    for (i64 i = 0; i < n; ++i) y[i] = gelu_value(x[i]);
}

void gelu_backward(float* dx, const float* x, const float* dy, i64 n) {
    for (i64 i = 0; i < n; ++i) dx[i] = dy[i] * gelu_slope(x[i]);
}

void glu_forward(float* y, const float* x, i64 T, i64 F, Gate gate) {
    for (i64 t = 0; t < T; ++t)
        for (i64 f = 0; f < F; ++f) {
            const float g = x[t * 2 * F + f], u = x[t * 2 * F + F + f];
            y[t * F + f] = gate_value(g, gate) * u;
        }
}

void glu_backward(float* dx, const float* x, const float* dy, i64 T, i64 F, Gate gate) {
    for (i64 t = 0; t < T; ++t)
        for (i64 f = 0; f < F; ++f) {
            const float g = x[t * 2 * F + f], u = x[t * 2 * F + F + f], d = dy[t * F + f];
            dx[t * 2 * F + f] = d * u * gate_slope(g, gate);
            dx[t * 2 * F + F + f] = d * gate_value(g, gate);
        }
}

void relu2_forward(float* y, const float* x, i64 n) {
    for (i64 i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] * x[i] : 0.0f;
}

void relu2_backward(float* dx, const float* x, const float* dy, i64 n) {
    for (i64 i = 0; i < n; ++i) dx[i] = x[i] > 0 ? 2.0f * x[i] * dy[i] : 0.0f;
}

void relu_forward(float* y, const float* x, i64 n) {
    for (i64 i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
}

// From the output, as PyTorch's threshold_backward: y > 0 exactly where x > 0.
void relu_backward(float* dx, const float* y, const float* dy, i64 n) {
    for (i64 i = 0; i < n; ++i) dx[i] = y[i] > 0 ? dy[i] : 0.0f;
}

void add(float* out, const float* a, const float* b, const float* bias, i64 T, i64 C) {
    for (i64 t = 0; t < T; ++t)
        for (i64 c = 0; c < C; ++c) out[t * C + c] = a[t * C + c] + b[t * C + c] + (bias ? bias[c] : 0.0f);
}

void rope(float* qkv, i64 T, const Positions& where, i64 hq, i64 hkv, i64 d, bool inverse) {
    const i64 row = (hq + 2 * hkv) * d, half = d / 2;
    std::vector<float> cs(static_cast<std::size_t>(half)), sn(static_cast<std::size_t>(half));
    for (i64 t = 0; t < T; ++t) {
        const double pos = static_cast<double>(where(t));
        for (i64 i = 0; i < half; ++i) {
            const double theta = pos * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(d));
            cs[static_cast<std::size_t>(i)] = static_cast<float>(std::cos(theta));
            sn[static_cast<std::size_t>(i)] = static_cast<float>((inverse ? -1.0 : 1.0) * std::sin(theta));
        }
        for (i64 h = 0; h < hq + hkv; ++h) {  // query heads, then key heads
            float* v = qkv + t * row + h * d;
            for (i64 i = 0; i < half; ++i) {
                const float a = v[i], b = v[i + half];
                const float c = cs[static_cast<std::size_t>(i)], s = sn[static_cast<std::size_t>(i)];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

// Without context parallelism a rank's block is all there is: the block kernels below, on the
// rank's own keys.
void attention_forward(float* out, float* lse, const float* qkv, i64 T, i64 seq, i64 hq, i64 hkv, i64 d, const Dropout& drop, i64 window) {
    const Positions all{seq, 1, 0, window};
    attention_block_forward(out, lse, qkv, qkv + hq * d, (hq + 2 * hkv) * d, all, all, T, hq, hkv, d, false, drop);
}

void attention_backward(float* dqkv, const float* qkv, const float* out, const float* lse, const float* dout, i64 T,
                        i64 seq, i64 hq, i64 hkv, i64 d, const Dropout& drop, i64 window) {
    const Positions all{seq, 1, 0, window};
    attention_block_backward(dqkv, nullptr, (hq + 2 * hkv) * d, qkv, qkv + hq * d, out, lse, dout, all, all, T, hq, hkv, d, false, drop);
}

namespace {
// The attention dropout's first hash word for query row t, head h (dropout.hpp); the key's
// position is the second.
std::uint64_t attn_drop_row(const Dropout& drop, const Positions& qpos, i64 t, i64 h) {
    return dropout_attention_row(drop, t / qpos.local(), h, qpos.seq, qpos(t));
}
// Causal, and inside the query's window where it has one.
bool visible(const Positions& qpos, i64 qp, i64 kp) { return kp <= qp && (qpos.window <= 0 || qp - kp < qpos.window); }
// Sequence and position of a hidden-state row, as one token number.
std::uint64_t token_of(const Dropout& drop, const Positions& where, i64 r) {
    const i64 row = drop.row0 + r;
    return dropout_token(drop, row / where.local(), where.seq, where(row));
}
}  // namespace

void attention_probs(float* probs, float* mask, float* dropped, const float* qkv, const float* lse, i64 T, i64 seq, i64 hq, i64 hkv,
                     i64 d, const Dropout& drop, i64 window) {
    const Positions qpos{seq, 1, 0, window};
    const i64 row = (hq + 2 * hkv) * d, group = hq / hkv;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (i64 t = 0; t < T; ++t) {
        const i64 b = t / seq, qp = t % seq, first = t - qp;
        for (i64 h = 0; h < hq; ++h) {
            const float* q = qkv + t * row + h * d;
            const float l = lse[t * hq + h];
            const i64 at = ((b * hq + h) * seq + qp) * seq;
            const std::uint64_t drow = mask ? attn_drop_row(drop, qpos, t, h) : 0;
            for (i64 j = 0; j < seq; ++j) {
                float p = 0;
                if (visible(qpos, qp, j)) {
                    const float* k = qkv + (first + j) * row + hq * d + (h / group) * d;
                    float dot = 0;
                    for (i64 i = 0; i < d; ++i) dot += q[i] * k[i];
                    p = std::exp(dot * scale - l);
                }
                probs[at + j] = p;
                if (!mask) continue;
                const float z = dropout_scale(drop.key, drow, static_cast<std::uint64_t>(j), drop.p);
                mask[at + j] = z;
                dropped[at + j] = p * z;
            }
        }
    }
}

void attention_probs_grad(float* dprobs, const float* qkv, const float* dout, i64 T, i64 seq, i64 hq, i64 hkv, i64 d) {
    const i64 row = (hq + 2 * hkv) * d, group = hq / hkv;
    for (i64 t = 0; t < T; ++t) {
        const i64 b = t / seq, qp = t % seq, first = t - qp;
        for (i64 h = 0; h < hq; ++h) {
            const float* g = dout + (t * hq + h) * d;
            float* out = dprobs + ((b * hq + h) * seq + qp) * seq;
            for (i64 j = 0; j < seq; ++j) {
                const float* v = qkv + (first + j) * row + (hq + hkv) * d + (h / group) * d;
                float dot = 0;
                for (i64 i = 0; i < d; ++i) dot += g[i] * v[i];
                out[j] = dot;
            }
        }
    }
}

void dropout_forward(float* y, float* mask, const float* x, i64 T, i64 C, const Dropout& drop, const Positions& where) {
    for (i64 t = 0; t < T; ++t) {
        const std::uint64_t a = token_of(drop, where, t);
        for (i64 c = 0; c < C; ++c) {
            const float z = dropout_scale(drop.key, a, static_cast<std::uint64_t>(c), drop.p);
            mask[t * C + c] = z;
            y[t * C + c] = x[t * C + c] * z;
        }
    }
}

void dropout_add(float* out, float* mask, const float* a, const float* b, const float* bias, i64 T, i64 C, const Dropout& drop,
                 const Positions& where) {
    for (i64 t = 0; t < T; ++t) {
        const std::uint64_t tok = token_of(drop, where, t);
        for (i64 c = 0; c < C; ++c) {
            const float z = dropout_scale(drop.key, tok, static_cast<std::uint64_t>(c), drop.p);
            mask[t * C + c] = z;
            out[t * C + c] = a[t * C + c] + z * (b[t * C + c] + (bias ? bias[c] : 0.0f));
        }
    }
}

void mul(float* out, const float* a, const float* b, i64 n) {
    for (i64 i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

void embedding_forward(float* out, const float* tokens, const float* table, i64 first, i64 rows, i64 T, i64 C) {
    for (i64 t = 0; t < T; ++t) {
        const i64 id = static_cast<i64>(tokens[t * 2]) - first;
        float* o = out + t * C;
        if (id >= 0 && id < rows) std::copy(table + id * C, table + id * C + C, o);
        else std::fill(o, o + C, 0.0f);
    }
}

void embedding_backward(float* dtable, const float* tokens, const float* dout, i64 first, i64 rows, i64 T, i64 C) {
    for (i64 t = 0; t < T; ++t) {
        const i64 id = static_cast<i64>(tokens[t * 2]) - first;
        if (id < 0 || id >= rows) continue;
        for (i64 c = 0; c < C; ++c) dtable[id * C + c] += dout[t * C + c];
    }
}

void position_forward(float* out, const float* e, const float* pos, i64 row0, i64 rows_out, const Positions& where, i64 C) {
    for (i64 t = 0; t < rows_out; ++t) {
        const i64 g = row0 + t, p = where(g);
        for (i64 c = 0; c < C; ++c) out[t * C + c] = e[g * C + c] + pos[p * C + c];
    }
}

void position_backward(float* dpos, const float* d, i64 T, const Positions& where, i64 C) {
    for (i64 t = 0; t < T; ++t) {
        const i64 p = where(t);
        for (i64 c = 0; c < C; ++c) dpos[p * C + c] += d[t * C + c];
    }
}

// Context parallelism: one block of keys, the rows of the same sequence only (a rank holds
// local() rows of each sequence, in order), visible where the key's position is not after the
// query's.
void attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, i64 kv_stride, const Positions& qpos,
                             const Positions& kpos, i64 T, i64 hq, i64 hkv, i64 d, bool merge, const Dropout& drop) {
    const i64 row = (hq + 2 * hkv) * d, group = hq / hkv, Ls = qpos.local();
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    std::vector<float> p(static_cast<std::size_t>(Ls)), o(static_cast<std::size_t>(d));
    for (i64 t = 0; t < T; ++t) {
        const i64 first = t - t % Ls, qp = qpos(t);
        for (i64 h = 0; h < hq; ++h) {
            const float* q = qkv + t * row + h * d;
            const i64 kh = h / group, vh = hkv + h / group;
            float mx = -std::numeric_limits<float>::infinity();
            for (i64 j = first; j < first + Ls; ++j) {
                float& sc = p[static_cast<std::size_t>(j - first)];
                sc = -std::numeric_limits<float>::infinity();
                if (!visible(qpos, qp, kpos(j))) continue;
                const float* k = kv + j * kv_stride + kh * d;
                float dot = 0;
                for (i64 i = 0; i < d; ++i) dot += q[i] * k[i];
                sc = dot * scale;
                mx = std::max(mx, sc);
            }
            if (mx == -std::numeric_limits<float>::infinity()) continue;  // nothing visible in this block
            float sum = 0;
            std::fill(o.begin(), o.end(), 0.0f);
            const std::uint64_t drow = drop.on() ? attn_drop_row(drop, qpos, t, h) : 0;
            for (i64 j = first; j < first + Ls; ++j) {
                const float sc = p[static_cast<std::size_t>(j - first)];
                if (sc == -std::numeric_limits<float>::infinity()) continue;
                const float e = std::exp(sc - mx);
                sum += e;  // the softmax's sum is of the undropped probabilities
                const float ez = drop.on() ? e * dropout_scale(drop.key, drow, static_cast<std::uint64_t>(kpos(j)), drop.p) : e;
                const float* v = kv + j * kv_stride + vh * d;
                for (i64 i = 0; i < d; ++i) o[static_cast<std::size_t>(i)] += ez * v[i];
            }
            const float lb = mx + std::log(sum);
            float* dst = out + t * hq * d + h * d;
            float& l = lse[t * hq + h];
            if (!merge || l == -std::numeric_limits<float>::infinity()) {
                for (i64 i = 0; i < d; ++i) dst[i] = o[static_cast<std::size_t>(i)] / sum;
                l = lb;
                continue;
            }
            const float ln = std::max(l, lb) + std::log1p(std::exp(-std::fabs(l - lb)));
            const float a = std::exp(l - ln), b = std::exp(lb - ln);
            for (i64 i = 0; i < d; ++i) dst[i] = a * dst[i] + b * o[static_cast<std::size_t>(i)] / sum;
            l = ln;
        }
    }
}

void attention_block_backward(float* dqkv, float* dkv, i64 kv_stride, const float* qkv, const float* kv, const float* out,
                              const float* lse, const float* dout, const Positions& qpos, const Positions& kpos, i64 T, i64 hq,
                              i64 hkv, i64 d, bool accumulate, const Dropout& drop) {
    const i64 row = (hq + 2 * hkv) * d, group = hq / hkv, Ls = qpos.local();
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    // Where the key and value gradients go: the block's own buffer, or this rank's dqkv columns.
    float* kvg = dkv ? dkv : dqkv + hq * d;
    const i64 kvg_stride = dkv ? kv_stride : row;
    if (!accumulate) std::fill(dqkv, dqkv + T * row, 0.0f);
    if (dkv)
        for (i64 t = 0; t < T; ++t) std::fill(dkv + t * kv_stride, dkv + t * kv_stride + 2 * hkv * d, 0.0f);
    for (i64 t = 0; t < T; ++t) {
        const i64 first = t - t % Ls, qp = qpos(t);
        for (i64 h = 0; h < hq; ++h) {
            const float* q = qkv + t * row + h * d;
            const float* o = out + t * hq * d + h * d;
            const float* dO = dout + t * hq * d + h * d;
            const i64 kh = h / group, vh = hkv + h / group;
            float D = 0;
            for (i64 i = 0; i < d; ++i) D += dO[i] * o[i];
            float* dq = dqkv + t * row + h * d;
            const std::uint64_t drow = drop.on() ? attn_drop_row(drop, qpos, t, h) : 0;
            for (i64 j = first; j < first + Ls; ++j) {
                if (!visible(qpos, qp, kpos(j))) continue;
                const float* k = kv + j * kv_stride + kh * d;
                const float* v = kv + j * kv_stride + vh * d;
                float sc = 0, dp = 0;
                for (i64 i = 0; i < d; ++i) {
                    sc += q[i] * k[i];
                    dp += dO[i] * v[i];
                }
                const float pr = std::exp(sc * scale - lse[t * hq + h]);
                // Through the mask z: out used P z, so dP = z (dO . v) and dV gets P z dO; D = dO . out
                // is still the sum of P dP (FlashAttention's backward with dropout).
                const float z = drop.on() ? dropout_scale(drop.key, drow, static_cast<std::uint64_t>(kpos(j)), drop.p) : 1.0f;
                const float ds = pr * (dp * z - D) * scale;
                float* dk = kvg + j * kvg_stride + kh * d;
                float* dv = kvg + j * kvg_stride + vh * d;
                for (i64 i = 0; i < d; ++i) {
                    dq[i] += ds * k[i];
                    dk[i] += ds * q[i];
                    dv[i] += pr * z * dO[i];
                }
            }
        }
    }
}

void loss_stats(float* stats, const float* logits, const float* tokens, i64 first, i64 T, i64 V) {
    for (i64 t = 0; t < T; ++t) {
        const float* l = logits + t * V;
        float mx = -std::numeric_limits<float>::infinity();
        for (i64 v = 0; v < V; ++v) mx = std::max(mx, l[v]);
        float sum = 0;
        for (i64 v = 0; v < V; ++v) sum += std::exp(l[v] - mx);
        const i64 target = static_cast<i64>(tokens[t * 2 + 1]) - first;
        stats[t * 3] = mx;
        stats[t * 3 + 1] = sum;
        stats[t * 3 + 2] = target >= 0 && target < V ? l[target] : 0.0f;
    }
}

void loss_combine(float* loss, float* lse, const float* stats, i64 n, i64 T) {
    for (i64 t = 0; t < T; ++t) {
        float mx = -std::numeric_limits<float>::infinity(), target = 0;
        for (i64 r = 0; r < n; ++r) mx = std::max(mx, stats[(r * T + t) * 3]);
        float sum = 0;
        for (i64 r = 0; r < n; ++r) {
            const float* s = stats + (r * T + t) * 3;
            sum += s[1] * std::exp(s[0] - mx);
            target += s[2];
        }
        const float l = mx + std::log(sum);
        if (lse) lse[t] = l;
        if (loss) loss[t] = l - target;
    }
}

void loss_backward(float* dlogits, const float* logits, const float* tokens, const float* lse, i64 first, i64 T, i64 V,
                   float scale) {
    for (i64 t = 0; t < T; ++t) {
        const i64 target = static_cast<i64>(tokens[t * 2 + 1]) - first;
        for (i64 v = 0; v < V; ++v) {
            const float p = std::exp(logits[t * V + v] - lse[t]);
            dlogits[t * V + v] = (p - (v == target ? 1.0f : 0.0f)) * scale;
        }
    }
}

void round_bf16(float* p, i64 n) {
    for (i64 i = 0; i < n; ++i) {
        std::uint32_t b;
        std::memcpy(&b, p + i, 4);
        if ((b & 0x7F800000u) == 0x7F800000u) {  // infinities as they are; a NaN keeps a mantissa bit
            if (b & 0x007FFFFFu) b |= 0x00400000u;
        } else {
            b += 0x7FFFu + ((b >> 16) & 1u);  // round to nearest, ties to even (may carry into inf)
        }
        b &= 0xFFFF0000u;
        std::memcpy(p + i, &b, 4);
    }
}

void adamw(float* p, float* m, float* v, const float* g, const unsigned char* decay, i64 n, float lr, float b1, float b2,
           float eps, float wd, int step) {
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(step)), c2 = 1.0f - std::pow(b2, static_cast<float>(step));
    for (i64 i = 0; i < n; ++i) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        const float mh = m[i] / c1, vh = v[i] / c2;
        p[i] -= lr * (mh / (std::sqrt(vh) + eps) + (decay && decay[i] ? wd * p[i] : 0.0f));
    }
}

void round_fp16(float* p, i64 n) {
    for (i64 i = 0; i < n; ++i) {
        const float x = p[i];
        if (!std::isfinite(x)) continue;  // infinities and NaN as they are
        const float a = std::fabs(x);
        if (a >= 65520.0f) {  // halfway between 65504 and the next step rounds to infinity
            p[i] = std::copysign(std::numeric_limits<float>::infinity(), x);
            continue;
        }
        // The spacing of halves near a: 2^(e - 10) for a normal a in [2^e, 2^(e+1)), 2^-24 below 2^-14.
        int e = 0;
        std::frexp(a, &e);  // a = f 2^e, f in [0.5, 1)
        const float ulp = std::ldexp(1.0f, std::max(e - 1, -14) - 10);
        p[i] = std::copysign(std::nearbyint(a / ulp) * ulp, x);  // the default rounding: to nearest, ties to even
    }
}

std::uint16_t fp16_bits(float x) {
    float r = x;
    round_fp16(&r, 1);
    const std::uint16_t sign = std::signbit(r) ? 0x8000u : 0u;
    if (std::isnan(r)) return static_cast<std::uint16_t>(sign | 0x7E00u);
    const float a = std::fabs(r);
    if (std::isinf(a)) return static_cast<std::uint16_t>(sign | 0x7C00u);
    if (a < 0x1p-14f) return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(a * 0x1p24f));  // subnormal (or zero): a / 2^-24
    int e = 0;
    const float f = std::frexp(a, &e);  // a = f 2^e, f in [0.5, 1): the half's exponent field is e - 1 + 15
    const auto mantissa = static_cast<std::uint16_t>((f * 2.0f - 1.0f) * 1024.0f);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>((e + 14) << 10) | mantissa);
}

float from_fp16_bits(std::uint16_t h) {
    const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    float a = 0;
    if (e == 0) a = std::ldexp(static_cast<float>(m), -24);
    else if (e == 31) a = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    else a = std::ldexp(1.0f + static_cast<float>(m) / 1024.0f, e - 15);
    return (h & 0x8000u) ? -a : a;
}

}  // namespace strata::runtime::cpu
