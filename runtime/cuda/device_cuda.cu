// The runtime's cuda backend (device.hpp): fp32 throughout, as the cpu backend, so that the two
// backends agree to rounding and the cpu kernels are the reference of every kernel here
// (tests/runtime/test_cuda.cpp). GEMMs are cuBLAS SGEMMs (plain fp32 math, no TF32, which is what
// a plan of precision fp32 is priced as). Attention is exact, not flash: per head, Q K^T into a
// scratch of seq x seq scores by a batched SGEMM, a causal softmax kernel that also writes the
// log-sum-exp, then P V; the backward recomputes P from the log-sum-exp (the forward saves only
// out and lse, as the memory model assumes) and runs four more SGEMMs. Everything else is an own
// kernel in the style of llm.c's reference kernels. One stream; the host thread issues in the
// Program's order, so a freed block can be handed to the next request at once.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "device.hpp"

namespace strata::runtime {
namespace {

using i64 = std::int64_t;

std::string where(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

#define CK(call)                                                                                                   \
    do {                                                                                                           \
        const cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess)                                                                                     \
            throw std::runtime_error(std::string("cuda: ") + #call + " failed at " + where(__FILE__, __LINE__) + \
                                     ": " + cudaGetErrorString(e_));                                               \
    } while (0)
#define CB(call)                                                                                                      \
    do {                                                                                                              \
        const cublasStatus_t s_ = (call);                                                                             \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                              \
            throw std::runtime_error(std::string("cublas: ") + #call + " failed at " + where(__FILE__, __LINE__) + \
                                     ": " + cublasGetStatusString(s_));                                               \
    } while (0)
#define LAUNCHED() CK(cudaGetLastError())

constexpr float kNormEps = 1e-5f;
constexpr float kGeluC = 0.7978845608028654f;
constexpr int kThreads = 256;

unsigned blocks_for(i64 n, int threads = kThreads) { return static_cast<unsigned>(std::max<i64>(1, (n + threads - 1) / threads)); }

// ---- reductions within a block (blockDim.x a multiple of 32, at most 1024) ----
__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Every thread gets the block's total. `sh` holds 32 floats.
__device__ float block_sum(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = lane < warps ? sh[lane] : 0.0f;
    return warp_sum(t);
}
__device__ float block_max(float v, float* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = lane < warps ? sh[lane] : -INFINITY;
    return warp_max(t);
}

// ---- elementwise ----
__global__ void k_bias_rows(float* y, const float* b, i64 T, i64 N) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < T * N) y[i] += b[i % N];
}
// Column sums over rows (a bias gradient, a norm's weight gradients): blocks of 32 columns x 8
// row lanes, each over kRowsPerBlock rows, added into the result atomically. One thread per
// column walking all rows was latency-bound: 24 threads' worth of blocks for a 768-wide bias.
constexpr int kColLanes = 8;
constexpr i64 kRowsPerBlock = 256;
dim3 col_grid(i64 T, i64 N) {
    return dim3(static_cast<unsigned>((N + 31) / 32), static_cast<unsigned>(std::max<i64>(1, (T + kRowsPerBlock - 1) / kRowsPerBlock)));
}
__global__ void k_col_sum(float* db, const float* d, i64 T, i64 N) {
    __shared__ float sh[kColLanes][33];
    const i64 n = blockIdx.x * 32 + threadIdx.x;
    const i64 r0 = blockIdx.y * kRowsPerBlock, r1 = min(T, r0 + kRowsPerBlock);
    float s = 0;
    if (n < N)
        for (i64 t = r0 + threadIdx.y; t < r1; t += kColLanes) s += d[t * N + n];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && n < N) {
        float tot = 0;
        for (int k = 0; k < kColLanes; ++k) tot += sh[k][threadIdx.x];
        atomicAdd(db + n, tot);
    }
}
__global__ void k_gelu_fwd(float* y, const float* x, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(kGeluC * (v + 0.044715f * v * v * v)));
}
__global__ void k_gelu_bwd(float* dx, const float* x, const float* dy, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float v = x[i];
    const float th = tanhf(kGeluC * (v + 0.044715f * v * v * v));
    const float du = kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du);
}
__global__ void k_swiglu_fwd(float* y, const float* x, i64 T, i64 F) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * F) return;
    const i64 t = i / F, f = i % F;
    const float g = x[t * 2 * F + f], u = x[t * 2 * F + F + f];
    y[i] = g / (1.0f + expf(-g)) * u;
}
__global__ void k_swiglu_bwd(float* dx, const float* x, const float* dy, i64 T, i64 F) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * F) return;
    const i64 t = i / F, f = i % F;
    const float g = x[t * 2 * F + f], u = x[t * 2 * F + F + f], d = dy[i];
    const float s = 1.0f / (1.0f + expf(-g));
    dx[t * 2 * F + f] = d * u * s * (1.0f + g * (1.0f - s));
    dx[t * 2 * F + F + f] = d * g * s;
}
__global__ void k_relu2_fwd(float* y, const float* x, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < n) y[i] = x[i] > 0 ? x[i] * x[i] : 0.0f;
}
__global__ void k_relu2_bwd(float* dx, const float* x, const float* dy, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < n) dx[i] = x[i] > 0 ? 2.0f * x[i] * dy[i] : 0.0f;
}
__global__ void k_add(float* out, const float* a, const float* b, const float* bias, i64 T, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < T * C) out[i] = a[i] + b[i] + (bias ? bias[i % C] : 0.0f);
}

// ---- norms: one block per row ----
__global__ void k_norm_fwd(float* y, const float* x, const float* w, const float* b, i64 C) {
    __shared__ float sh[32];
    const float* xr = x + blockIdx.x * C;
    float s = 0;
    if (b) {
        for (i64 c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
        s = block_sum(s, sh);
    }
    const float mean = b ? s / static_cast<float>(C) : 0.0f;
    float v = 0;
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) v += (xr[c] - mean) * (xr[c] - mean);
    v = block_sum(v, sh);
    const float rstd = rsqrtf(v / static_cast<float>(C) + kNormEps);
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) y[blockIdx.x * C + c] = (xr[c] - mean) * rstd * w[c] + (b ? b[c] : 0.0f);
}
// dx per row; the row's mean and rstd to `stats` for the weight gradients.
__global__ void k_norm_bwd_dx(float* dx, float* stats, const float* x, const float* dy, const float* w, const float* residual,
                              bool ln, i64 C) {
    __shared__ float sh[32];
    const i64 t = blockIdx.x;
    const float* xr = x + t * C;
    const float* dyr = dy + t * C;
    float s = 0;
    if (ln) {
        for (i64 c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
        s = block_sum(s, sh);
    }
    const float mean = ln ? s / static_cast<float>(C) : 0.0f;
    float v = 0;
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) v += (xr[c] - mean) * (xr[c] - mean);
    v = block_sum(v, sh);
    const float rstd = rsqrtf(v / static_cast<float>(C) + kNormEps);
    float dm = 0, dp = 0;
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
        const float g = dyr[c] * w[c];
        dm += g;
        dp += g * (xr[c] - mean) * rstd;
    }
    dm = block_sum(dm, sh) / static_cast<float>(C);
    dp = block_sum(dp, sh) / static_cast<float>(C);
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
        const float xh = (xr[c] - mean) * rstd;
        const float d = rstd * (dyr[c] * w[c] - (ln ? dm : 0.0f) - xh * dp);
        dx[t * C + c] = (residual ? residual[t * C + c] : 0.0f) + d;
    }
    if (threadIdx.x == 0) {
        stats[2 * t] = mean;
        stats[2 * t + 1] = rstd;
    }
}
// dw[c] += sum_t dy * xhat; db[c] += sum_t dy: column sums as k_col_sum's.
__global__ void k_norm_bwd_dw(float* dw, float* db, const float* x, const float* dy, const float* stats, i64 T, i64 C) {
    __shared__ float shw[kColLanes][33], shb[kColLanes][33];
    const i64 c = blockIdx.x * 32 + threadIdx.x;
    const i64 r0 = blockIdx.y * kRowsPerBlock, r1 = min(T, r0 + kRowsPerBlock);
    float sw = 0, sb = 0;
    if (c < C)
        for (i64 t = r0 + threadIdx.y; t < r1; t += kColLanes) {
            const float g = dy[t * C + c];
            sw += g * (x[t * C + c] - stats[2 * t]) * stats[2 * t + 1];
            sb += g;
        }
    shw[threadIdx.y][threadIdx.x] = sw;
    shb[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0, tb = 0;
        for (int k = 0; k < kColLanes; ++k) tw += shw[k][threadIdx.x], tb += shb[k][threadIdx.x];
        atomicAdd(dw + c, tw);
        if (db) atomicAdd(db + c, tb);
    }
}

// ---- rotary embedding, in place on query and key heads: a thread per (row, head, pair) ----
__global__ void k_rope(float* qkv, i64 T, i64 seq, i64 heads, i64 row, i64 d, float sign) {
    const i64 half = d / 2;
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * heads * half) return;
    const i64 t = i / (heads * half), h = (i / half) % heads, k = i % half;
    const double theta = static_cast<double>(t % seq) * pow(10000.0, -2.0 * static_cast<double>(k) / static_cast<double>(d));
    const float c = static_cast<float>(cos(theta)), s = sign * static_cast<float>(sin(theta));
    float* v = qkv + t * row + h * d;
    const float a = v[k], b = v[k + half];
    v[k] = a * c - b * s;
    v[k + half] = b * c + a * s;
}

// ---- attention ----
// Per head, contiguous: the query, key and value heads of item (b, h) as [seq, d] blocks
// (items b * hq + h; a GQA key/value head copied to each query head of its group), so that one
// strided-batched SGEMM covers every sequence and head.
__global__ void k_attn_split(float* Q, float* K, float* V, const float* qkv, i64 seq, i64 hq, i64 hkv, i64 d, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const i64 c = i % d, t = (i / d) % seq, h = (i / (d * seq)) % hq, b = i / (d * seq * hq);
    const i64 R = (hq + 2 * hkv) * d, g = hq / hkv;
    const float* row = qkv + (b * seq + t) * R;
    Q[i] = row[h * d + c];
    K[i] = row[hq * d + (h / g) * d + c];
    V[i] = row[(hq + hkv) * d + (h / g) * d + c];
}
// [items, seq, d] <-> the [B*seq, hq*d] layout of out / dout.
__global__ void k_attn_heads(float* dst, const float* src, i64 seq, i64 hq, i64 d, i64 n, bool to_rows) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const i64 c = i % d, t = (i / d) % seq, h = (i / (d * seq)) % hq, b = i / (d * seq * hq);
    const i64 r = (b * seq + t) * hq * d + h * d + c;
    if (to_rows) dst[r] = src[i];
    else dst[i] = src[r];
}
// dqkv from the per-head gradients: a key/value head sums the gradients of its group's heads.
__global__ void k_attn_merge_grads(float* dqkv, const float* dQ, const float* dK, const float* dV, i64 seq, i64 hq, i64 hkv, i64 d,
                                   i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const i64 R = (hq + 2 * hkv) * d, g = hq / hkv;
    const i64 col = i % R, row = i / R, b = row / seq, t = row % seq, c = col % d;
    auto at = [&](i64 h) { return ((b * hq + h) * seq + t) * d + c; };
    if (col < hq * d) {
        dqkv[i] = dQ[at(col / d)];
        return;
    }
    const bool key = col < (hq + hkv) * d;
    const i64 kvh = (key ? col - hq * d : col - (hq + hkv) * d) / d;
    float s = 0;
    for (i64 h = kvh * g; h < (kvh + 1) * g; ++h) s += (key ? dK : dV)[at(h)];
    dqkv[i] = s;
}
// Scores of `items` heads from item0, [item][seq][seq]: S -> P = exp(S scale - lse) on and below
// the diagonal, 0 above; lse[(b seq + i) hq + h]. A block per row (gridDim.y: items).
__global__ void k_softmax_causal(float* S, float* lse, i64 seq, i64 hq, i64 item0, float scale) {
    __shared__ float sh[32];
    const i64 i = blockIdx.x, item = item0 + blockIdx.y;
    float* row = S + (static_cast<i64>(blockIdx.y) * seq + i) * seq;
    float mx = -INFINITY;
    for (i64 j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, row[j] * scale);
    mx = block_max(mx, sh);
    float s = 0;
    for (i64 j = threadIdx.x; j <= i; j += blockDim.x) s += expf(row[j] * scale - mx);
    s = block_sum(s, sh);
    const float l = mx + logf(s);
    for (i64 j = threadIdx.x; j < seq; j += blockDim.x) row[j] = j <= i ? expf(row[j] * scale - l) : 0.0f;
    if (threadIdx.x == 0) lse[((item / hq) * seq + i) * hq + item % hq] = l;
}
// Backward: S -> P from the saved lse, dP -> dS = P (dP - D) scale, D[item][i] = dout . out.
__global__ void k_softmax_causal_bwd(float* S, float* dP, const float* lse, const float* D, i64 seq, i64 hq, i64 item0, float scale) {
    const i64 i = blockIdx.x, item = item0 + blockIdx.y;
    const float l = lse[((item / hq) * seq + i) * hq + item % hq], Di = D[item * seq + i];
    float* prow = S + (static_cast<i64>(blockIdx.y) * seq + i) * seq;
    float* drow = dP + (static_cast<i64>(blockIdx.y) * seq + i) * seq;
    for (i64 j = threadIdx.x; j < seq; j += blockDim.x) {
        const float p = j <= i ? expf(prow[j] * scale - l) : 0.0f;
        prow[j] = p;
        drow[j] = j <= i ? p * (drow[j] - Di) * scale : 0.0f;  // never read above the diagonal: no stale NaN
    }
}
// D[item][t] = sum over the head's columns of dout * out (per-head layout).
__global__ void k_attn_rowdot(float* D, const float* dO, const float* O, i64 d, i64 rows) {
    const i64 r = blockIdx.x * static_cast<i64>(blockDim.y) + threadIdx.y;
    if (r >= rows) return;
    float s = 0;
    for (i64 c = threadIdx.x; c < d; c += 32) s += dO[r * d + c] * O[r * d + c];
    s = warp_sum(s);
    if (threadIdx.x == 0) D[r] = s;
}

// ---- embedding, positions, loss ----
__global__ void k_embedding_fwd(float* out, const float* tokens, const float* table, i64 first, i64 rows, i64 T, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * C) return;
    const i64 t = i / C, c = i % C, id = static_cast<i64>(tokens[t * 2]) - first;
    out[i] = id >= 0 && id < rows ? table[id * C + c] : 0.0f;
}
__global__ void k_embedding_bwd(float* dtable, const float* tokens, const float* dout, i64 first, i64 rows, i64 T, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * C) return;
    const i64 t = i / C, c = i % C, id = static_cast<i64>(tokens[t * 2]) - first;
    if (id >= 0 && id < rows) atomicAdd(dtable + id * C + c, dout[i]);
}
__global__ void k_position_fwd(float* out, const float* e, const float* pos, i64 row0, i64 rows_out, i64 seq, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= rows_out * C) return;
    const i64 t = i / C, c = i % C, g = row0 + t;
    out[i] = e[g * C + c] + pos[(g % seq) * C + c];
}
// dpos[p] += sum over the rows at position p: a thread per (position, column), sequences in order.
__global__ void k_position_bwd(float* dpos, const float* d, i64 T, i64 seq, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= seq * C) return;
    const i64 p = i / C, c = i % C;
    float s = 0;
    for (i64 t = p; t < T; t += seq) s += d[t * C + c];
    dpos[i] += s;
}
__global__ void k_loss_stats(float* stats, const float* logits, const float* tokens, i64 first, i64 V) {
    __shared__ float sh[32];
    const i64 t = blockIdx.x;
    const float* l = logits + t * V;
    float mx = -INFINITY;
    for (i64 v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, l[v]);
    mx = block_max(mx, sh);
    float s = 0;
    for (i64 v = threadIdx.x; v < V; v += blockDim.x) s += expf(l[v] - mx);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        const i64 target = static_cast<i64>(tokens[t * 2 + 1]) - first;
        stats[t * 3] = mx;
        stats[t * 3 + 1] = s;
        stats[t * 3 + 2] = target >= 0 && target < V ? l[target] : 0.0f;
    }
}
__device__ float combine_lse(const float* stats, i64 n, i64 T, i64 t, float* target) {
    float mx = -INFINITY, tg = 0;
    for (i64 r = 0; r < n; ++r) mx = fmaxf(mx, stats[(r * T + t) * 3]);
    float sum = 0;
    for (i64 r = 0; r < n; ++r) {
        const float* s = stats + (r * T + t) * 3;
        sum += s[1] * expf(s[0] - mx);
        tg += s[2];
    }
    *target = tg;
    return mx + logf(sum);
}
__global__ void k_loss_combine(float* loss, float* lse, const float* stats, i64 n, i64 T) {
    const i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (t >= T) return;
    float tg = 0;
    const float l = combine_lse(stats, n, T, t, &tg);
    if (lse) lse[t] = l;
    if (loss) loss[t] = l - tg;
}
__global__ void k_loss_bwd(float* dlogits, const float* logits, const float* tokens, const float* stats, i64 shards, i64 first,
                           i64 T, i64 V, float scale) {
    const i64 t = blockIdx.x;
    float tg = 0;
    const float l = combine_lse(stats, shards, T, t, &tg);
    const i64 target = static_cast<i64>(tokens[t * 2 + 1]) - first;
    for (i64 v = threadIdx.x; v < V; v += blockDim.x)
        dlogits[t * V + v] = (expf(logits[t * V + v] - l) - (v == target ? 1.0f : 0.0f)) * scale;
}
__global__ void k_adamw(float* p, float* m, float* v, const float* g, const unsigned char* decay, i64 n, float lr, float b1,
                        float b2, float eps, float wd, float c1, float c2) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float gi = g[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi, vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + (decay == nullptr || decay[i] ? wd * p[i] : 0.0f));
}
__global__ void k_sum(double* out, const float* p, i64 n) {
    __shared__ float sh[32];
    float s = 0;
    for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x) s += p[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) atomicAdd(out, static_cast<double>(s));
}

class CudaDevice final : public Device {
public:
    CudaDevice() {
        CK(cudaSetDevice(0));
        CK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        CB(cublasCreate(&blas_));
        CB(cublasSetStream(blas_, stream_));
        CB(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));  // plain fp32 SGEMM: no TF32 behind the plan's back
        CK(cudaMalloc(&sum_, sizeof(double)));
        cudaDeviceProp prop{};
        CK(cudaGetDeviceProperties(&prop, 0));
        int drv = 0, rt = 0, blas = 0;
        cudaDriverGetVersion(&drv);
        cudaRuntimeGetVersion(&rt);
        cublasGetVersion(blas_, &blas);
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s, sm_%d%d, %d SMs, %.1f GiB, driver %d.%d, runtime %d.%d, cuBLAS %d", prop.name, prop.major,
                      prop.minor, prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1u << 30), drv / 1000,
                      (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10, blas);
        desc_ = buf;
        total_ = static_cast<double>(prop.totalGlobalMem);
    }
    ~CudaDevice() override {
        cudaStreamSynchronize(stream_);
        for (auto& [bytes, list] : cache_)
            for (void* p : list) cudaFree(p);
        for (cudaEvent_t e : events_) cudaEventDestroy(e);
        cudaFree(sum_);
        cudaFree(scratch_);
        cublasDestroy(blas_);
        cudaStreamDestroy(stream_);
    }

    std::string describe() const override { return desc_; }
    double memory_bytes() const override { return total_; }

    float* alloc(i64 n) override {
        const std::size_t bytes = round_up(static_cast<std::size_t>(std::max<i64>(n, 1)) * sizeof(float));
        void* p = nullptr;
        auto& list = cache_[bytes];
        if (!list.empty()) {
            p = list.back();
            list.pop_back();
        } else {
            if (cudaMalloc(&p, bytes) != cudaSuccess) {
                cudaGetLastError();
                drop_cache();
                if (cudaMalloc(&p, bytes) != cudaSuccess) {
                    cudaGetLastError();
                    return nullptr;
                }
            }
            reserved_ += static_cast<double>(bytes);
            reserved_peak_ = std::max(reserved_peak_, reserved_);
        }
        CK(cudaMemsetAsync(p, 0, bytes, stream_));
        return static_cast<float*>(p);
    }
    void release(float* p, i64 n) override {
        if (p) cache_[round_up(static_cast<std::size_t>(std::max<i64>(n, 1)) * sizeof(float))].push_back(p);
    }
    float* alloc_host(i64 n) override {
        void* p = nullptr;
        const std::size_t bytes = static_cast<std::size_t>(std::max<i64>(n, 1)) * sizeof(float);
        if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
            cudaGetLastError();
            return nullptr;
        }
        std::memset(p, 0, bytes);
        return static_cast<float*>(p);
    }
    void release_host(float* p) override {
        if (!p) return;
        cudaStreamSynchronize(stream_);  // no queued copy may still read it
        cudaFreeHost(p);
    }
    void copy(float* dst, const float* src, i64 n) override {
        if (n <= 0 || dst == src) return;
        CK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDefault, stream_));
        cudaPointerAttributes a{}, b{};
        CK(cudaPointerGetAttributes(&a, dst));
        CK(cudaPointerGetAttributes(&b, src));
        if (a.type != cudaMemoryTypeDevice || b.type != cudaMemoryTypeDevice) CK(cudaStreamSynchronize(stream_));
    }
    void zero(float* p, i64 n) override {
        if (n > 0) CK(cudaMemsetAsync(p, 0, static_cast<std::size_t>(n) * sizeof(float), stream_));
    }
    void sync() override { CK(cudaStreamSynchronize(stream_)); }
    double sum(const float* p, i64 n) override {
        CK(cudaMemsetAsync(sum_, 0, sizeof(double), stream_));
        if (n > 0) {
            k_sum<<<std::min<unsigned>(blocks_for(n), 1024), kThreads, 0, stream_>>>(sum_, p, n);
            LAUNCHED();
        }
        double h = 0;
        CK(cudaMemcpyAsync(&h, sum_, sizeof(double), cudaMemcpyDeviceToHost, stream_));
        CK(cudaStreamSynchronize(stream_));
        return h;
    }
    double reserved_bytes() const override { return reserved_; }
    double reserved_peak_bytes() override { return reserved_peak_; }
    void reset_reserved_peak() override { reserved_peak_ = reserved_; }

    void timing_reset(std::size_t slots) override {
        while (events_.size() < slots) {
            cudaEvent_t e;
            CK(cudaEventCreate(&e));
            events_.push_back(e);
        }
        marked_.assign(slots, 0);
    }
    void mark(std::size_t slot) override {
        if (slot >= marked_.size()) throw std::runtime_error("cuda: timing slot out of range");
        CK(cudaEventRecord(events_[slot], stream_));
        marked_[slot] = 1;
    }
    void times(std::vector<std::int64_t>& out) override {
        out.assign(marked_.size(), -1);
        if (marked_.empty() || !marked_[0]) return;
        CK(cudaEventSynchronize(events_[0]));
        for (std::size_t s = 0; s < marked_.size(); ++s) {
            if (!marked_[s]) continue;
            float ms = 0;
            CK(cudaEventSynchronize(events_[s]));
            CK(cudaEventElapsedTime(&ms, events_[0], events_[s]));
            out[s] = static_cast<std::int64_t>(static_cast<double>(ms) * 1e6);
        }
    }

    // Row-major C[M,N] = op(A) op(B) (batched with strides): cuBLAS sees the transposes.
    void gemm(bool ta, bool tb, i64 M, i64 N, i64 K, const float* A, i64 lda, i64 sa, const float* B, i64 ldb, i64 sb, float* C,
              i64 ldc, i64 sc, i64 batch, float alpha, float beta) {
        CB(cublasSgemmStridedBatched(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                                     static_cast<int>(M), static_cast<int>(K), &alpha, B, static_cast<int>(ldb), sb, A,
                                     static_cast<int>(lda), sa, &beta, C, static_cast<int>(ldc), sc, static_cast<int>(batch)));
    }

    void matmul_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 K, i64 N) override {
        gemm(false, true, T, N, K, x, K, 0, w, K, 0, y, N, 0, 1, 1.0f, 0.0f);
        if (b) {
            k_bias_rows<<<blocks_for(T * N), kThreads, 0, stream_>>>(y, b, T, N);
            LAUNCHED();
        }
    }
    void matmul_dgrad(float* dx, const float* dy, const float* w, i64 T, i64 K, i64 N) override {
        gemm(false, false, T, K, N, dy, N, 0, w, K, 0, dx, K, 0, 1, 1.0f, 0.0f);
    }
    void matmul_wgrad(float* dw, float* db, const float* x, const float* dy, i64 T, i64 K, i64 N) override {
        gemm(true, false, N, K, T, dy, N, 0, x, K, 0, dw, K, 0, 1, 1.0f, 1.0f);
        if (db) bias_grad(db, dy, T, N);
    }
    void bias_grad(float* db, const float* d, i64 T, i64 N) override {
        if (T == 0 || N == 0) return;
        k_col_sum<<<col_grid(T, N), dim3(32, kColLanes), 0, stream_>>>(db, d, T, N);
        LAUNCHED();
    }
    void norm_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 C) override {
        if (T == 0) return;
        k_norm_fwd<<<static_cast<unsigned>(T), kThreads, 0, stream_>>>(y, x, w, b, C);
        LAUNCHED();
    }
    void norm_backward(float* dx, float* dw, float* db, const float* x, const float* dy, const float* w, const float* residual,
                       bool layernorm, i64 T, i64 C) override {
        if (T == 0) return;
        float* stats = scratch(2 * T);
        k_norm_bwd_dx<<<static_cast<unsigned>(T), kThreads, 0, stream_>>>(dx, stats, x, dy, w, residual, layernorm, C);
        LAUNCHED();
        k_norm_bwd_dw<<<col_grid(T, C), dim3(32, kColLanes), 0, stream_>>>(dw, db, x, dy, stats, T, C);
        LAUNCHED();
    }
    void gelu_forward(float* y, const float* x, i64 n) override { launch1(k_gelu_fwd, n, y, x, n); }
    void gelu_backward(float* dx, const float* x, const float* dy, i64 n) override { launch1(k_gelu_bwd, n, dx, x, dy, n); }
    void swiglu_forward(float* y, const float* x, i64 T, i64 F) override { launch1(k_swiglu_fwd, T * F, y, x, T, F); }
    void swiglu_backward(float* dx, const float* x, const float* dy, i64 T, i64 F) override {
        launch1(k_swiglu_bwd, T * F, dx, x, dy, T, F);
    }
    void relu2_forward(float* y, const float* x, i64 n) override { launch1(k_relu2_fwd, n, y, x, n); }
    void relu2_backward(float* dx, const float* x, const float* dy, i64 n) override { launch1(k_relu2_bwd, n, dx, x, dy, n); }
    void add(float* out, const float* a, const float* b, const float* bias, i64 T, i64 C) override {
        launch1(k_add, T * C, out, a, b, bias, T, C);
    }
    void rope(float* qkv, i64 T, i64 seq, i64 hq, i64 hkv, i64 d, bool inverse) override {
        launch1(k_rope, T * (hq + hkv) * (d / 2), qkv, T, seq, hq + hkv, (hq + 2 * hkv) * d, d, inverse ? -1.0f : 1.0f);
    }

    // Causal attention as batched SGEMMs over every (sequence, head), in row blocks of queries so
    // that keys after a block's last query are never multiplied: with blocks of `rows` queries the
    // GEMMs do (n + 1) / 2n of the full seq x seq work (n blocks), near the causal half a flash
    // kernel does. Scores live in scratch for `chunk` heads at a time (at most 1 GiB).
    struct AttnPlan {
        i64 items, chunk, rows, blocks;
    };
    static AttnPlan attn_plan(i64 T, i64 seq, i64 hq, int score_buffers) {
        AttnPlan a;
        a.items = T / seq * hq;
        const i64 per = score_buffers * seq * seq * static_cast<i64>(sizeof(float));
        a.chunk = std::max<i64>(1, std::min<i64>({a.items, i64{65535}, (i64{1} << 30) / std::max<i64>(per, 1)}));  // grid.y
        a.rows = std::max<i64>(std::min<i64>(seq, 128), (seq + 15) / 16);
        a.blocks = (seq + a.rows - 1) / a.rows;
        return a;
    }
    void attention_forward(float* out, float* lse, const float* qkv, i64 T, i64 seq, i64 hq, i64 hkv, i64 d) override {
        const AttnPlan a = attn_plan(T, seq, hq, 1);
        const i64 n = a.items * seq * d, hs = seq * d, ss = seq * seq;
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        float* Q = scratch(4 * n + a.chunk * ss);
        float *K = Q + n, *V = K + n, *O = V + n, *S = O + n;
        launch1(k_attn_split, n, Q, K, V, qkv, seq, hq, hkv, d, n);
        for (i64 i0 = 0; i0 < a.items; i0 += a.chunk) {
            const i64 ni = std::min(a.chunk, a.items - i0);
            for (i64 k = 0; k < a.blocks; ++k) {  // S[rows of block k, keys up to its last query]
                const i64 r0 = k * a.rows, m = std::min(a.rows, seq - r0), keys = r0 + m;
                gemm(false, true, m, keys, d, Q + i0 * hs + r0 * d, d, hs, K + i0 * hs, d, hs, S + r0 * seq, seq, ss, ni, 1.0f, 0.0f);
            }
            k_softmax_causal<<<dim3(static_cast<unsigned>(seq), static_cast<unsigned>(ni)), kThreads, 0, stream_>>>(S, lse, seq, hq, i0, scale);
            LAUNCHED();
            for (i64 k = 0; k < a.blocks; ++k) {  // O[block k] = P[block k, keys] V[keys]
                const i64 r0 = k * a.rows, m = std::min(a.rows, seq - r0), keys = r0 + m;
                gemm(false, false, m, d, keys, S + r0 * seq, seq, ss, V + i0 * hs, d, hs, O + i0 * hs + r0 * d, d, hs, ni, 1.0f, 0.0f);
            }
        }
        launch1(k_attn_heads, n, out, O, seq, hq, d, n, true);
    }
    void attention_backward(float* dqkv, const float* qkv, const float* out, const float* lse, const float* dout, i64 T, i64 seq,
                            i64 hq, i64 hkv, i64 d) override {
        const AttnPlan a = attn_plan(T, seq, hq, 2);
        const i64 n = a.items * seq * d, hs = seq * d, ss = seq * seq;
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        float* Q = scratch(8 * n + a.items * seq + 2 * a.chunk * ss);
        float *K = Q + n, *V = K + n, *O = V + n, *dO = O + n, *dQ = dO + n, *dK = dQ + n, *dV = dK + n;
        float *D = dV + n, *S = D + a.items * seq, *dP = S + a.chunk * ss;
        launch1(k_attn_split, n, Q, K, V, qkv, seq, hq, hkv, d, n);
        launch1(k_attn_heads, n, O, out, seq, hq, d, n, false);
        launch1(k_attn_heads, n, dO, dout, seq, hq, d, n, false);
        zero(dK, 2 * n);  // dK and dV accumulate over the query blocks
        const i64 rows = a.items * seq;
        k_attn_rowdot<<<static_cast<unsigned>((rows + 7) / 8), dim3(32, 8), 0, stream_>>>(D, dO, O, d, rows);
        LAUNCHED();
        for (i64 i0 = 0; i0 < a.items; i0 += a.chunk) {
            const i64 ni = std::min(a.chunk, a.items - i0), q0 = i0 * hs;
            for (i64 k = 0; k < a.blocks; ++k) {
                const i64 r0 = k * a.rows, m = std::min(a.rows, seq - r0), keys = r0 + m;
                gemm(false, true, m, keys, d, Q + q0 + r0 * d, d, hs, K + q0, d, hs, S + r0 * seq, seq, ss, ni, 1.0f, 0.0f);
                gemm(false, true, m, keys, d, dO + q0 + r0 * d, d, hs, V + q0, d, hs, dP + r0 * seq, seq, ss, ni, 1.0f, 0.0f);
            }
            k_softmax_causal_bwd<<<dim3(static_cast<unsigned>(seq), static_cast<unsigned>(ni)), kThreads, 0, stream_>>>(S, dP, lse, D, seq, hq,
                                                                                                                      i0, scale);
            LAUNCHED();
            for (i64 k = 0; k < a.blocks; ++k) {
                const i64 r0 = k * a.rows, m = std::min(a.rows, seq - r0), keys = r0 + m;
                // dV[keys] += P[block]^T dO[block]; dQ[block] = dS[block] K[keys]; dK[keys] += dS[block]^T Q[block]
                gemm(true, false, keys, d, m, S + r0 * seq, seq, ss, dO + q0 + r0 * d, d, hs, dV + q0, d, hs, ni, 1.0f, 1.0f);
                gemm(false, false, m, d, keys, dP + r0 * seq, seq, ss, K + q0, d, hs, dQ + q0 + r0 * d, d, hs, ni, 1.0f, 0.0f);
                gemm(true, false, keys, d, m, dP + r0 * seq, seq, ss, Q + q0 + r0 * d, d, hs, dK + q0, d, hs, ni, 1.0f, 1.0f);
            }
        }
        launch1(k_attn_merge_grads, T * (hq + 2 * hkv) * d, dqkv, dQ, dK, dV, seq, hq, hkv, d, T * (hq + 2 * hkv) * d);
    }
    void embedding_forward(float* out, const float* tokens, const float* table, i64 first, i64 rows, i64 T, i64 C) override {
        launch1(k_embedding_fwd, T * C, out, tokens, table, first, rows, T, C);
    }
    void embedding_backward(float* dtable, const float* tokens, const float* dout, i64 first, i64 rows, i64 T, i64 C) override {
        launch1(k_embedding_bwd, T * C, dtable, tokens, dout, first, rows, T, C);
    }
    void position_forward(float* out, const float* e, const float* pos, i64 row0, i64 rows_out, i64 seq, i64 C) override {
        launch1(k_position_fwd, rows_out * C, out, e, pos, row0, rows_out, seq, C);
    }
    void position_backward(float* dpos, const float* d, i64 T, i64 seq, i64 C) override {
        launch1(k_position_bwd, std::min(T, seq) * C, dpos, d, T, seq, C);
    }
    void loss_stats(float* stats, const float* logits, const float* tokens, i64 first, i64 T, i64 V) override {
        if (T == 0) return;
        k_loss_stats<<<static_cast<unsigned>(T), 1024, 0, stream_>>>(stats, logits, tokens, first, V);
        LAUNCHED();
    }
    void loss_combine(float* loss, float* lse, const float* stats, i64 n, i64 T) override { launch1(k_loss_combine, T, loss, lse, stats, n, T); }
    void loss_backward(float* dlogits, const float* logits, const float* tokens, const float* stats, i64 shards, i64 first, i64 T,
                       i64 V, float scale) override {
        if (T == 0) return;
        k_loss_bwd<<<static_cast<unsigned>(T), 1024, 0, stream_>>>(dlogits, logits, tokens, stats, shards, first, T, V, scale);
        LAUNCHED();
    }
    void adamw(float* p, float* m, float* v, const float* g, const unsigned char* decay, i64 n, float lr, float b1, float b2, float eps,
               float wd, int step) override {
        const float c1 = 1.0f - std::pow(b1, static_cast<float>(step)), c2 = 1.0f - std::pow(b2, static_cast<float>(step));
        launch1(k_adamw, n, p, m, v, g, decay, n, lr, b1, b2, eps, wd, c1, c2);
    }

private:
    template <typename... K, typename... A>
    void launch1(void (*kernel)(K...), i64 n, A... args) {
        if (n <= 0) return;
        kernel<<<blocks_for(n), kThreads, 0, stream_>>>(args...);
        LAUNCHED();
    }
    static std::size_t round_up(std::size_t b) { return (b + 511) / 512 * 512; }
    void drop_cache() {
        cudaStreamSynchronize(stream_);
        for (auto& [bytes, list] : cache_)
            for (void* p : list) {
                cudaFree(p);
                reserved_ -= static_cast<double>(bytes);
            }
        cache_.clear();
    }
    // The kernels' own workspace (attention's scores, a norm's row statistics): grown when needed,
    // outside the tiers the Program accounts for (reserved_bytes counts it).
    float* scratch(i64 n) {
        const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
        if (bytes > scratch_bytes_) {
            CK(cudaStreamSynchronize(stream_));
            if (scratch_) cudaFree(scratch_);
            reserved_ -= static_cast<double>(scratch_bytes_);
            scratch_ = nullptr;
            scratch_bytes_ = 0;
            if (cudaMalloc(&scratch_, bytes) != cudaSuccess) {
                cudaGetLastError();
                drop_cache();
                CK(cudaMalloc(&scratch_, bytes));
            }
            scratch_bytes_ = bytes;
            reserved_ += static_cast<double>(bytes);
            reserved_peak_ = std::max(reserved_peak_, reserved_);
        }
        return static_cast<float*>(scratch_);
    }

    cudaStream_t stream_ = nullptr;
    cublasHandle_t blas_ = nullptr;
    double* sum_ = nullptr;
    void* scratch_ = nullptr;
    std::size_t scratch_bytes_ = 0;
    std::map<std::size_t, std::vector<void*>> cache_;
    double reserved_ = 0, reserved_peak_ = 0, total_ = 0;
    std::vector<cudaEvent_t> events_;
    std::vector<char> marked_;
    std::string desc_;
};

}  // namespace
}  // namespace strata::runtime

extern "C" __attribute__((visibility("default"))) strata::runtime::Device* strata_runtime_cuda_create(int api_version, std::string* why) {
    if (api_version != strata::runtime::kDeviceApiVersion) {
        if (why) *why = "the cuda module is of another build (api " + std::to_string(api_version) + " asked for); rebuild";
        return nullptr;
    }
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why) *why = std::string("no CUDA device here (") + (e != cudaSuccess ? cudaGetErrorString(e) : "none visible") + ")";
        return nullptr;
    }
    try {
        return new strata::runtime::CudaDevice();
    } catch (const std::exception& ex) {
        if (why) *why = ex.what();
        return nullptr;
    }
}
