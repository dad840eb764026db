// The cuda backend's kernels (device_cuda.cu launches them): each keeps the contract of its
// namesake in cpu_kernels.hpp, in the style of llm.c's reference kernels. Included by the one .cu
// file of the module, inside its unnamed namespace. Operands the executor owns are TVs: fp32, bf16
// or fp16 storage, each read as float and written rounded to its width (llm.c's floatX, chosen per
// operand at run time, since a 16-bit plan keeps statistics, masters and some gradients in fp32).
// Arithmetic is fp32 throughout, as the cpu backend's, which rounds what it writes to its format.
#pragma once

#ifdef __CUDACC__
#define STRATA_DYNAMIC_SMEM(name) extern __shared__ __align__(16) float name[]
#endif

// One element of a TV: reads as float, assignment rounds to the storage (to nearest even).
// fmt: 0 fp32, 1 bf16, 2 fp16 (IEEE halves: a value past 65504 rounds to infinity, which fp16's
// loss scaling then finds).
struct TRef {
    void* p;
    int fmt;
    i64 i;
    __device__ operator float() const {
        if (fmt == 1) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
        if (fmt == 2) return __half2float(static_cast<const __half*>(p)[i]);
        return static_cast<const float*>(p)[i];
    }
    __device__ const TRef& operator=(float v) const {
        if (fmt == 1) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
        else if (fmt == 2) static_cast<__half*>(p)[i] = __float2half_rn(v);
        else static_cast<float*>(p)[i] = v;
        return *this;
    }
    __device__ const TRef& operator=(const TRef& o) const { return *this = static_cast<float>(o); }
    __device__ const TRef& operator+=(float v) const { return *this = static_cast<float>(*this) + v; }
    __device__ const TRef& operator-=(float v) const { return *this = static_cast<float>(*this) - v; }
};
struct TV {
    void* p = nullptr;
    int fmt = 0;
    __host__ __device__ TRef operator[](i64 i) const { return TRef{p, fmt, i}; }
    __host__ __device__ TV operator+(i64 k) const {
        return TV{p ? static_cast<char*>(p) + k * (fmt ? 2 : 4) : nullptr, fmt};
    }
    __host__ __device__ explicit operator bool() const { return p != nullptr; }
};
__device__ void atomic_add(TV t, i64 i, float v) {
    if (t.fmt == 1) atomicAdd(static_cast<__nv_bfloat16*>(t.p) + i, __float2bfloat16_rn(v));
    else if (t.fmt == 2) atomicAdd(static_cast<__half*>(t.p) + i, __float2half_rn(v));
    else atomicAdd(static_cast<float*>(t.p) + i, v);
}

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
// Every thread gets the block's reduction: each warp's, then the warps' own. `sh` holds 32 floats;
// `identity` fills the lanes past the last warp.
template <float (*WarpOp)(float)>
__device__ float block_reduce(float v, float* sh, float identity) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = WarpOp(v);
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    return WarpOp(lane < warps ? sh[lane] : identity);
}
__device__ float block_sum(float v, float* sh) { return block_reduce<warp_sum>(v, sh, 0.0f); }
__device__ float block_max(float v, float* sh) { return block_reduce<warp_max>(v, sh, -INFINITY); }

// ---- elementwise ----
__global__ void k_bias_rows(TV y, TV b, i64 T, i64 N) {
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
__global__ void k_col_sum(TV db, TV d, i64 T, i64 N) {
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
        atomic_add(db, n, tot);
    }
}
// GELU's tanh form and its derivative, for GELU and for GeGLU's gate.
__device__ float gelu_value(float v) { return 0.5f * v * (1.0f + tanhf(kGeluC * (v + 0.044715f * v * v * v))); }
__device__ float gelu_slope(float v) {
    const float th = tanhf(kGeluC * (v + 0.044715f * v * v * v));
    return 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
}
__global__ void k_gelu_fwd(TV y, TV x, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < n) y[i] = gelu_value(x[i]);
}
__global__ void k_gelu_bwd(TV dx, TV x, TV dy, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < n) dx[i] = dy[i] * gelu_slope(x[i]);
}
// A gated MLP's gate: SiLU (SwiGLU) or GELU's tanh form (GeGLU), and its slope.
__device__ float gate_value(float g, bool gelu) { return gelu ? gelu_value(g) : g / (1.0f + expf(-g)); }
__device__ float gate_slope(float g, bool gelu) {
    if (gelu) return gelu_slope(g);
    const float s = 1.0f / (1.0f + expf(-g));
    return s * (1.0f + g * (1.0f - s));
}
__global__ void k_glu_fwd(TV y, TV x, i64 T, i64 F, bool gelu) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * F) return;
    const i64 t = i / F, f = i % F;
    const float g = x[t * 2 * F + f], u = x[t * 2 * F + F + f];
    y[i] = gate_value(g, gelu) * u;
}
__global__ void k_glu_bwd(TV dx, TV x, TV dy, i64 T, i64 F, bool gelu) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * F) return;
    const i64 t = i / F, f = i % F;
    const float g = x[t * 2 * F + f], u = x[t * 2 * F + F + f], d = dy[i];
    dx[t * 2 * F + f] = d * u * gate_slope(g, gelu);
    dx[t * 2 * F + F + f] = d * gate_value(g, gelu);
}
__global__ void k_relu2_fwd(TV y, TV x, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < n) y[i] = x[i] > 0 ? x[i] * x[i] : 0.0f;
}
__global__ void k_relu2_bwd(TV dx, TV x, TV dy, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < n) dx[i] = x[i] > 0 ? 2.0f * x[i] * dy[i] : 0.0f;
}
__global__ void k_relu_fwd(TV y, TV x, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < n) y[i] = x[i] > 0 ? static_cast<float>(x[i]) : 0.0f;
}
__global__ void k_relu_bwd(TV dx, TV y, TV dy, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < n) dx[i] = y[i] > 0 ? static_cast<float>(dy[i]) : 0.0f;
}
__global__ void k_add(TV out, TV a, TV b, TV bias, i64 T, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < T * C) out[i] = a[i] + b[i] + (bias ? bias[i % C] : 0.0f);
}

// ---- dropout (dropout.hpp; a row's position in context parallelism's layout: cpu::Positions) ----
__device__ float hidden_drop(const Dropout& d, i64 i, i64 C, const cpu::Positions& w) {
    const i64 row = d.row0 + i / C;
    return dropout_scale(d.key, dropout_token(d, row / w.local(), w.seq, w(row)), static_cast<std::uint64_t>(i % C), d.p);
}
__global__ void k_dropout_fwd(TV y, TV mask, TV x, i64 n, i64 C, cpu::Positions w, Dropout d) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float z = hidden_drop(d, i, C, w);
    mask[i] = z;
    y[i] = x[i] * z;
}
__global__ void k_dropout_add(TV out, TV mask, TV a, TV b, TV bias, i64 n, i64 C, cpu::Positions w,
                              Dropout d) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float z = hidden_drop(d, i, C, w);
    mask[i] = z;
    out[i] = a[i] + z * (b[i] + (bias ? bias[i % C] : 0.0f));
}
__global__ void k_convert(TV dst, TV src, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
// g *= inv; *found = 1 where an element was inf or NaN (any thread may write it: the same value).
__global__ void k_unscale(TV g, float inv, float* found, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float v = g[i];
    if (!isfinite(v)) *found = 1.0f;
    g[i] = v * inv;
}
__global__ void k_mul(TV out, TV a, TV b, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < n) out[i] = a[i] * b[i];
}

// ---- norms: one block per row, the row cached in dynamic shared memory ----
// A norm's row is read from global memory once (before: three times forward, five backward). Each
// thread reads back only the elements it cached itself, so no barrier is needed between.
// Rows are contiguous (RowMap{}), or for QK-norm a token's heads inside the fused QKV row: row r is
// head r % heads of token r / heads, at token * ld + off + head * C.
struct RowMap {
    i64 heads = 1, ld = 0, off = 0;  ///< ld 0: rows of C, back to back
};
__host__ __device__ i64 row_at(i64 r, i64 C, const RowMap& m) {
    return m.ld == 0 ? r * C : (r / m.heads) * m.ld + m.off + (r % m.heads) * C;
}
// The cached row's mean (LayerNorm; 0 for RMSNorm) and 1 / sqrt(variance + eps), in every thread.
__device__ void row_stats(const float* row, i64 C, bool ln, float* sh, float* mean, float* rstd) {
    float s = 0;
    if (ln) {
        for (i64 c = threadIdx.x; c < C; c += blockDim.x) s += row[c];
        s = block_sum(s, sh);
    }
    const float m = ln ? s / static_cast<float>(C) : 0.0f;
    float v = 0;
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) v += (row[c] - m) * (row[c] - m);
    v = block_sum(v, sh);
    *mean = m;
    *rstd = rsqrtf(v / static_cast<float>(C) + kNormEps);
}
// Shared memory: C floats.
__global__ void k_norm_fwd(TV y, TV x, TV w, TV b, i64 C, RowMap map) {
    __shared__ float sh[32];
    STRATA_DYNAMIC_SMEM(row);
    const i64 at = row_at(blockIdx.x, C, map);
    const TV xr = x + at;
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) row[c] = xr[c];
    float mean = 0, rstd = 0;
    row_stats(row, C, b.p != nullptr, sh, &mean, &rstd);
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) y[at + c] = (row[c] - mean) * rstd * w[c] + (b ? b[c] : 0.0f);
}
// dx per row; the row's mean and rstd to `stats` for the weight gradients. Shared memory: 2 C
// floats (the row of x, then dy w).
__global__ void k_norm_bwd_dx(TV dx, TV stats, TV x, TV dy, TV w, TV residual,
                              bool ln, i64 C, RowMap map) {
    __shared__ float sh[32];
    STRATA_DYNAMIC_SMEM(cache);
    float* xrow = cache;
    float* grow = cache + C;
    const i64 t = blockIdx.x, at = row_at(t, C, map);
    const TV xr = x + at, dyr = dy + at;
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) xrow[c] = xr[c];
    float mean = 0, rstd = 0;
    row_stats(xrow, C, ln, sh, &mean, &rstd);
    float dm = 0, dp = 0;
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
        const float g = dyr[c] * w[c];
        grow[c] = g;
        dm += g;
        dp += g * (xrow[c] - mean) * rstd;
    }
    dm = block_sum(dm, sh) / static_cast<float>(C);
    dp = block_sum(dp, sh) / static_cast<float>(C);
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
        const float xh = (xrow[c] - mean) * rstd;
        const float d = rstd * (grow[c] - (ln ? dm : 0.0f) - xh * dp);
        dx[at + c] = (residual ? residual[at + c] : 0.0f) + d;
    }
    if (threadIdx.x == 0) {
        stats[2 * t] = mean;
        stats[2 * t + 1] = rstd;
    }
}
// dw[c] += sum_t dy * xhat; db[c] += sum_t dy: column sums as k_col_sum's.
__global__ void k_norm_bwd_dw(TV dw, TV db, TV x, TV dy, TV stats, i64 T, i64 C, RowMap map) {
    __shared__ float shw[kColLanes][33], shb[kColLanes][33];
    const i64 c = blockIdx.x * 32 + threadIdx.x;
    const i64 r0 = blockIdx.y * kRowsPerBlock, r1 = min(T, r0 + kRowsPerBlock);
    float sw = 0, sb = 0;
    if (c < C)
        for (i64 t = r0 + threadIdx.y; t < r1; t += kColLanes) {
            const i64 at = row_at(t, C, map) + c;
            const float g = dy[at];
            sw += g * (x[at] - stats[2 * t]) * stats[2 * t + 1];
            sb += g;
        }
    shw[threadIdx.y][threadIdx.x] = sw;
    shb[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0, tb = 0;
        for (int k = 0; k < kColLanes; ++k) tw += shw[k][threadIdx.x], tb += shb[k][threadIdx.x];
        atomic_add(dw, c, tw);
        if (db) atomic_add(db, c, tb);
    }
}

// ---- rotary embedding, in place on query and key heads: a thread per (row, head, pair) ----
__global__ void k_rope(TV qkv, i64 T, cpu::Positions w, i64 heads, i64 row, i64 d, float sign) {
    const i64 half = d / 2;
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * heads * half) return;
    const i64 t = i / (heads * half), h = (i / half) % heads, k = i % half;
    const double theta = static_cast<double>(w(t)) * pow(10000.0, -2.0 * static_cast<double>(k) / static_cast<double>(d));
    const float c = static_cast<float>(cos(theta)), s = sign * static_cast<float>(sin(theta));
    TV v = qkv + t * row + h * d;
    const float a = v[k], b = v[k + half];
    v[k] = a * c - b * s;
    v[k + half] = b * c + a * s;
}

// ---- attention ----
// Per head, contiguous: the query, key and value heads of item (b, h) as [seq, d] blocks
// (items b * hq + h; a GQA key/value head copied to each query head of its group), so that one
// strided-batched SGEMM covers every sequence and head.
__global__ void k_attn_split(TV Q, TV K, TV V, TV qkv, i64 seq, i64 hq, i64 hkv, i64 d, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const i64 c = i % d, t = (i / d) % seq, h = (i / (d * seq)) % hq, b = i / (d * seq * hq);
    const i64 R = (hq + 2 * hkv) * d, g = hq / hkv;
    TV row = qkv + (b * seq + t) * R;
    Q[i] = row[h * d + c];
    K[i] = row[hq * d + (h / g) * d + c];
    V[i] = row[(hq + hkv) * d + (h / g) * d + c];
}
// [items, seq, d] <-> the [B*seq, hq*d] layout of out / dout.
__global__ void k_attn_heads(TV dst, TV src, i64 seq, i64 hq, i64 d, i64 n, bool to_rows) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const i64 c = i % d, t = (i / d) % seq, h = (i / (d * seq)) % hq, b = i / (d * seq * hq);
    const i64 r = (b * seq + t) * hq * d + h * d + c;
    if (to_rows) dst[r] = src[i];
    else dst[i] = src[r];
}
// dqkv from the per-head gradients: a key/value head sums the gradients of its group's heads.
__global__ void k_attn_merge_grads(TV dqkv, const float* dQ, const float* dK, const float* dV, i64 seq, i64 hq, i64 hkv, i64 d,
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
    const float* from = key ? dK : dV;  // not (key ? dK : dV)[i]: see flash.cuh's dK/dV store
    for (i64 h = kvh * g; h < (kvh + 1) * g; ++h) s += from[at(h)];
    dqkv[i] = s;
}
// Scores of `items` heads from item0, [item][seq][seq]: S -> P = exp(S scale - lse) on and below
// the diagonal, 0 above; lse[(b seq + i) hq + h]. A block per row (gridDim.y: items).
// The attention dropout of row i, key j of item (dropout.hpp): 1 when off.
__device__ float attn_drop(const Dropout& d, i64 item, i64 hq, i64 seq, i64 i, i64 j) {
    if (!(d.p > 0)) return 1.0f;
    return dropout_scale(d.key, dropout_attention_row(d, item / hq, item % hq, seq, i), static_cast<std::uint64_t>(j), d.p);
}
// With dropout the probabilities are dropped once lse is taken (P z feeds P V).
// P: S itself (fp32) or a bf16 copy for a tensor-core P V.
// window > 0: row i sees keys i - window + 1 .. i only (model.sliding_window).
__global__ void k_softmax_causal(float* S, TV P, TV lse, i64 seq, i64 hq, i64 item0, float scale, Dropout d, i64 window) {
    __shared__ float sh[32];
    const i64 i = blockIdx.x, item = item0 + blockIdx.y, lo = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
    const i64 at = (static_cast<i64>(blockIdx.y) * seq + i) * seq;
    const float* row = S + at;
    const TV prow = P + at;
    float mx = -INFINITY;
    for (i64 j = lo + threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, row[j] * scale);
    mx = block_max(mx, sh);
    float s = 0;
    for (i64 j = lo + threadIdx.x; j <= i; j += blockDim.x) s += expf(row[j] * scale - mx);
    s = block_sum(s, sh);
    const float l = mx + logf(s);
    for (i64 j = threadIdx.x; j < seq; j += blockDim.x)
        prow[j] = j >= lo && j <= i ? expf(row[j] * scale - l) * attn_drop(d, item, hq, seq, i, j) : 0.0f;
    if (threadIdx.x == 0) lse[((item / hq) * seq + i) * hq + item % hq] = l;
}
// Unfused attention's kept probabilities (cpu_kernels.hpp attention_probs): element e of
// [item][seq][seq] from Q, K and the forward's lse, with dropout its factor and the dropped one.
__global__ void k_attn_probs(TV P, TV M, TV Pd, TV qkv, TV lse, i64 seq, i64 hq, i64 hkv, i64 d, float scale, Dropout drop, i64 window,
                             i64 n) {
    const i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (e >= n) return;
    const i64 j = e % seq, i = (e / seq) % seq, item = e / (seq * seq), b = item / hq, h = item % hq;
    const i64 row = (hq + 2 * hkv) * d, t = b * seq + i;
    float p = 0;
    if (j <= i && (window <= 0 || i - j < window)) {
        const i64 q = t * row + h * d, kk = (b * seq + j) * row + hq * d + (h / (hq / hkv)) * d;
        float dot = 0;
        for (i64 c = 0; c < d; ++c) dot += static_cast<float>(qkv[q + c]) * static_cast<float>(qkv[kk + c]);
        p = expf(dot * scale - static_cast<float>(lse[t * hq + h]));
    }
    P[e] = p;
    if (!M) return;
    const float z = attn_drop(drop, item, hq, seq, i, j);
    M[e] = z;
    Pd[e] = p * z;
}
// Unfused attention's gradient of the probabilities (cpu_kernels.hpp attention_probs_grad): element
// e of [item][seq][seq], dout's query row against V's key row, every key.
__global__ void k_attn_probs_grad(TV dP, TV qkv, TV dout, i64 seq, i64 hq, i64 hkv, i64 d, i64 n) {
    const i64 e = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (e >= n) return;
    const i64 j = e % seq, i = (e / seq) % seq, item = e / (seq * seq), b = item / hq, h = item % hq;
    const i64 row = (hq + 2 * hkv) * d, t = b * seq + i;
    const i64 g = (t * hq + h) * d, v = (b * seq + j) * row + (hq + hkv) * d + (h / (hq / hkv)) * d;
    float dot = 0;
    for (i64 c = 0; c < d; ++c) dot += static_cast<float>(dout[g + c]) * static_cast<float>(qkv[v + c]);
    dP[e] = dot;
}
// Backward: S -> P z from the saved lse (what dV needs), dP -> dS = P (z dP - D) scale,
// D[item][i] = dout . out. P and dS: S and dP themselves (fp32), or bf16 copies.
__global__ void k_softmax_causal_bwd(const float* S, const float* dP, TV P, TV dS, TV lse, const float* D, i64 seq, i64 hq, i64 item0,
                                     float scale, Dropout d, i64 window) {
    const i64 i = blockIdx.x, item = item0 + blockIdx.y, lo = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
    const float l = lse[((item / hq) * seq + i) * hq + item % hq], Di = D[item * seq + i];
    const i64 at = (static_cast<i64>(blockIdx.y) * seq + i) * seq;
    const float* srow = S + at;
    const float* drow = dP + at;
    const TV prow = P + at, dsrow = dS + at;
    for (i64 j = threadIdx.x; j < seq; j += blockDim.x) {
        const bool seen = j >= lo && j <= i;
        const float p = seen ? expf(srow[j] * scale - l) : 0.0f;
        const float z = seen ? attn_drop(d, item, hq, seq, i, j) : 1.0f;
        const float ds = seen ? p * (drow[j] * z - Di) * scale : 0.0f;  // never read above the diagonal: no stale NaN
        prow[j] = p * z;
        dsrow[j] = ds;
    }
}
// D[item][t] = sum over the head's columns of dout * out (per-head layout).
// The same from the [tokens][hq d] rows of dout and out, D[item][t] (item = sequence x hq + head).
__global__ void k_attn_rowdot_rows(float* D, TV dO, TV O, i64 seq, i64 hq, i64 d, i64 rows) {
    const i64 r = blockIdx.x * static_cast<i64>(blockDim.y) + threadIdx.y;
    if (r >= rows) return;
    const i64 item = r / seq, t = r % seq, at = ((item / hq) * seq + t) * hq * d + (item % hq) * d;
    float s = 0;
    for (i64 c = threadIdx.x; c < d; c += 32) s += dO[at + c] * O[at + c];
    s = warp_sum(s);
    if (threadIdx.x == 0) D[r] = s;
}
__global__ void k_attn_rowdot(float* D, TV dO, TV O, i64 d, i64 rows) {
    const i64 r = blockIdx.x * static_cast<i64>(blockDim.y) + threadIdx.y;
    if (r >= rows) return;
    float s = 0;
    for (i64 c = threadIdx.x; c < d; c += 32) s += dO[r * d + c] * O[r * d + c];
    s = warp_sum(s);
    if (threadIdx.x == 0) D[r] = s;
}

// ---- embedding, positions, loss ----
__global__ void k_embedding_fwd(TV out, TV tokens, TV table, i64 first, i64 rows, i64 T, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * C) return;
    const i64 t = i / C, c = i % C, id = static_cast<i64>(tokens[t * 2]) - first;
    out[i] = id >= 0 && id < rows ? table[id * C + c] : 0.0f;
}
__global__ void k_embedding_bwd(TV dtable, TV tokens, TV dout, i64 first, i64 rows, i64 T, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * C) return;
    const i64 t = i / C, c = i % C, id = static_cast<i64>(tokens[t * 2]) - first;
    if (id >= 0 && id < rows) atomic_add(dtable, id * C + c, dout[i]);
}
__global__ void k_position_fwd(TV out, TV e, TV pos, i64 row0, i64 rows_out, cpu::Positions w, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= rows_out * C) return;
    const i64 t = i / C, c = i % C, g = row0 + t;
    out[i] = e[g * C + c] + pos[w(g) * C + c];
}
// dpos[p] += sum over the rows at position p: a thread per (local row of a sequence, column), the
// rank's sequences in order; the local row's position in context parallelism's layout.
__global__ void k_position_bwd(TV dpos, TV d, i64 T, cpu::Positions w, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    const i64 local = w.local();
    if (i >= local * C) return;
    const i64 j = i / C, c = i % C;
    float s = 0;
    for (i64 t = j; t < T; t += local) s += d[t * C + c];
    dpos[w(j) * C + c] += s;
}
__global__ void k_loss_stats(TV stats, TV logits, TV tokens, i64 first, i64 V) {
    __shared__ float sh[32];
    const i64 t = blockIdx.x;
    TV l = logits + t * V;
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
__device__ float combine_lse(TV stats, i64 n, i64 T, i64 t, float* target) {
    float mx = -INFINITY, tg = 0;
    for (i64 r = 0; r < n; ++r) mx = fmaxf(mx, stats[(r * T + t) * 3]);
    float sum = 0;
    for (i64 r = 0; r < n; ++r) {
        TV s = stats + (r * T + t) * 3;
        sum += s[1] * expf(s[0] - mx);
        tg += s[2];
    }
    *target = tg;
    return mx + logf(sum);
}
__global__ void k_loss_combine(TV loss, TV lse, TV stats, i64 n, i64 T) {
    const i64 t = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (t >= T) return;
    float tg = 0;
    const float l = combine_lse(stats, n, T, t, &tg);
    if (lse) lse[t] = l;
    if (loss) loss[t] = l - tg;
}
__global__ void k_loss_bwd(TV dlogits, TV logits, TV tokens, TV stats, i64 shards, i64 first,
                           i64 T, i64 V, float scale) {
    const i64 t = blockIdx.x;
    float tg = 0;
    const float l = combine_lse(stats, shards, T, t, &tg);
    const i64 target = static_cast<i64>(tokens[t * 2 + 1]) - first;
    for (i64 v = threadIdx.x; v < V; v += blockDim.x)
        dlogits[t * V + v] = (expf(logits[t * V + v] - l) - (v == target ? 1.0f : 0.0f)) * scale;
}
__global__ void k_adamw(TV p, TV m, TV v, TV g, const unsigned char* decay, i64 n, float lr, float b1,
                        float b2, float eps, float wd, float c1, float c2) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const float gi = g[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi, vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + (decay == nullptr || decay[i] ? wd * p[i] : 0.0f));
}
// One block per chunk of at most kAdamChunk elements of one range (multi_tensor_apply's shape).
struct AdamChunk {
    i64 begin;
    int len;
    float wd;
};
constexpr int kAdamChunk = 16384;
// weights: where the updated master's copy goes in the weights' width (a bf16 plan's), or none.
__global__ void k_adamw_chunks(TV p, TV m, TV v, TV g, TV weights, const AdamChunk* chunks, float lr, float b1, float b2,
                               float eps, float c1, float c2) {
    const AdamChunk c = chunks[blockIdx.x];
    for (int k = threadIdx.x; k < c.len; k += blockDim.x) {
        const i64 i = c.begin + k;
        const float gi = g[i];
        const float mi = b1 * m[i] + (1.0f - b1) * gi, vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float pi = p[i] - lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + c.wd * p[i]);
        p[i] = pi;
        if (weights) weights[i] = pi;
    }
}
__global__ void k_sum(double* out, TV p, i64 n) {
    __shared__ float sh[32];
    float s = 0;
    for (i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; i < n; i += static_cast<i64>(gridDim.x) * blockDim.x) s += p[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) atomicAdd(out, static_cast<double>(s));
}
