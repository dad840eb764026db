// Part of the cuda backend's one translation unit (device_cuda.cu includes it inside its unnamed
// namespace, after kernels.cuh; attention.cuh launches them): context parallelism's ring blocks,
// with the contract of cpu_kernels.hpp's attention_block_forward/backward. A thread walks one (query row, head)
// against the keys of its sequence in the block, in fp32. The ring runs only where several ranks
// share one GPU (RunOptions::ranks_share_gpu, a correctness check), so these kernels are written
// to be checked, not to be fast; a tiled kernel would follow flash.cuh.
#pragma once

constexpr i64 kRingMaxHeadDim = 256;  // a thread's output row in registers / local memory

__device__ bool ring_visible(const cpu::Positions& q, i64 qp, i64 kp) { return kp <= qp && (q.window <= 0 || qp - kp < q.window); }

__global__ void k_ring_block_fwd(TV out, TV lse, TV qkv, TV kv, i64 kv_stride, cpu::Positions qpos, cpu::Positions kpos, i64 T, i64 hq,
                                 i64 hkv, i64 d, bool merge, Dropout drop) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * hq) return;
    const i64 t = i / hq, h = i % hq, row = (hq + 2 * hkv) * d, group = hq / hkv, Ls = qpos.local();
    const i64 first = t - t % Ls, qp = qpos(t), kh = h / group, vh = hkv + h / group;
    const float scale = 1.0f / sqrtf(static_cast<float>(d));
    const TV q = qkv + t * row + h * d;
    float mx = -INFINITY;
    for (i64 j = first; j < first + Ls; ++j) {
        if (!ring_visible(qpos, qp, kpos(j))) continue;
        const TV k = kv + j * kv_stride + kh * d;
        float dot = 0;
        for (i64 c = 0; c < d; ++c) dot += q[c] * k[c];
        mx = fmaxf(mx, dot * scale);
    }
    if (mx == -INFINITY) return;  // nothing visible in this block
    float o[kRingMaxHeadDim];
    for (i64 c = 0; c < d; ++c) o[c] = 0.0f;
    float sum = 0;
    const std::uint64_t drow = (drop.p > 0) ? dropout_attention_row(drop, t / Ls, h, qpos.seq, qp) : 0;
    for (i64 j = first; j < first + Ls; ++j) {
        if (!ring_visible(qpos, qp, kpos(j))) continue;
        const TV k = kv + j * kv_stride + kh * d, v = kv + j * kv_stride + vh * d;
        float dot = 0;
        for (i64 c = 0; c < d; ++c) dot += q[c] * k[c];
        const float e = expf(dot * scale - mx);
        sum += e;  // the softmax's sum is of the undropped probabilities
        const float ez = (drop.p > 0) ? e * dropout_scale(drop.key, drow, static_cast<std::uint64_t>(kpos(j)), drop.p) : e;
        for (i64 c = 0; c < d; ++c) o[c] += ez * v[c];
    }
    const float lb = mx + logf(sum);
    const TV dst = out + t * hq * d + h * d;
    const float l = lse[t * hq + h];
    if (!merge || l == -INFINITY) {
        for (i64 c = 0; c < d; ++c) dst[c] = o[c] / sum;
        lse[t * hq + h] = lb;
        return;
    }
    const float ln = fmaxf(l, lb) + log1pf(expf(-fabsf(l - lb)));
    const float a = expf(l - ln), b = expf(lb - ln);
    for (i64 c = 0; c < d; ++c) dst[c] = a * dst[c] + b * o[c] / sum;
    lse[t * hq + h] = ln;
}

// The queries' gradient per thread; the block's key and value gradients (rows of keys that many
// queries read) summed with atomics into fp32 `dkv32` ([T][2 hkv d]), placed by k_ring_kv_out.
__global__ void k_ring_block_bwd(TV dqkv, float* dkv32, TV qkv, TV kv, i64 kv_stride, TV out, TV lse, TV dout, cpu::Positions qpos,
                                 cpu::Positions kpos, i64 T, i64 hq, i64 hkv, i64 d, Dropout drop) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * hq) return;
    const i64 t = i / hq, h = i % hq, row = (hq + 2 * hkv) * d, group = hq / hkv, Ls = qpos.local(), G = 2 * hkv * d;
    const i64 first = t - t % Ls, qp = qpos(t), kh = h / group, vh = hkv + h / group;
    const float scale = 1.0f / sqrtf(static_cast<float>(d));
    const TV q = qkv + t * row + h * d, o = out + t * hq * d + h * d, dO = dout + t * hq * d + h * d;
    float D = 0;
    for (i64 c = 0; c < d; ++c) D += dO[c] * o[c];
    const float l = lse[t * hq + h];
    float dq[kRingMaxHeadDim];
    for (i64 c = 0; c < d; ++c) dq[c] = 0.0f;
    const std::uint64_t drow = (drop.p > 0) ? dropout_attention_row(drop, t / Ls, h, qpos.seq, qp) : 0;
    for (i64 j = first; j < first + Ls; ++j) {
        if (!ring_visible(qpos, qp, kpos(j))) continue;
        const TV k = kv + j * kv_stride + kh * d, v = kv + j * kv_stride + vh * d;
        float sc = 0, dp = 0;
        for (i64 c = 0; c < d; ++c) {
            sc += q[c] * k[c];
            dp += dO[c] * v[c];
        }
        const float pr = expf(sc * scale - l);
        const float z = (drop.p > 0) ? dropout_scale(drop.key, drow, static_cast<std::uint64_t>(kpos(j)), drop.p) : 1.0f;
        const float ds = pr * (dp * z - D) * scale;
        float* dk = dkv32 + j * G + kh * d;
        float* dv = dkv32 + j * G + vh * d;
        for (i64 c = 0; c < d; ++c) {
            dq[c] += ds * k[c];
            atomicAdd(dk + c, ds * q[c]);
            atomicAdd(dv + c, pr * z * dO[c]);
        }
    }
    const TV dst = dqkv + t * row + h * d;
    for (i64 c = 0; c < d; ++c) dst[c] += dq[c];
}

// The key and value gradients to their place: written into the block's own buffer (`dkv`, stride
// kv_stride), or added into the rank's dqkv columns after the queries' (the local block).
__global__ void k_ring_kv_out(TV dqkv, TV dkv, i64 kv_stride, const float* dkv32, i64 T, i64 hq, i64 hkv, i64 d) {
    const i64 G = 2 * hkv * d, i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * G) return;
    const i64 j = i / G, c = i % G;
    if (dkv) dkv[j * kv_stride + c] = dkv32[i];
    else dqkv[j * (hq + 2 * hkv) * d + hq * d + c] += dkv32[i];
}

__global__ void k_add_columns(TV dst, i64 dst_cols, TV src, i64 src_cols, i64 rows) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= rows * src_cols) return;
    const i64 t = i / src_cols, c = i % src_cols;
    dst[t * dst_cols + (dst_cols - src_cols) + c] += src[i];
}
