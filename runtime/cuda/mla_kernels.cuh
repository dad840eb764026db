// The cuda backend's kernels for multi-head latent attention's RoPE with the assembly of the
// attention's rows, and the column copies that split its latents (cpu_kernels.hpp's contract;
// mla_kernels.cpp is the reference). One thread an output element. Included by device_cuda.cu
// inside its unnamed namespace, after kernels.cuh, and by tests/runtime/test_cuda_emulated.cpp.
#pragma once

__global__ void k_copy_columns(TV dst, i64 dst_stride, TV src, i64 src_stride, i64 cols, i64 n) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= n) return;
    const i64 r = i / cols, c = i % cols;
    dst[r * dst_stride + c] = static_cast<float>(src[r * src_stride + c]);
}

// Element k of a rope-wide vector x rotated at position pos (rope()'s rotate-half form; sign -1:
// the inverse).
__device__ float mla_rotated(TV x, i64 k, i64 rope, double pos, float sign) {
    const i64 half = rope / 2, j = k < half ? k : k - half;
    const double theta = pos * pow(10000.0, -2.0 * static_cast<double>(j) / static_cast<double>(rope));
    const float c = static_cast<float>(cos(theta)), s = sign * static_cast<float>(sin(theta));
    const float a = x[j], b = x[j + half];
    return k < half ? a * c - b * s : b * c + a * s;
}

__global__ void k_mla_rope_fwd(TV qkv, TV q, TV kv, TV k_rope, i64 T, cpu::Positions w, i64 heads, i64 nope, i64 rope, i64 dv) {
    const i64 dqk = nope + rope, Wq = heads * dqk, W = 2 * Wq + heads * dv, Wkv = heads * (nope + dv);
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * W) return;
    const i64 t = i / W, c = i % W;
    const double pos = static_cast<double>(w(t));
    float v;
    if (c < Wq) {  // a query head: its nope part, then its rope part rotated
        const i64 h = c / dqk, k = c % dqk;
        const TV qh = q + t * Wq + h * dqk;
        v = k < nope ? static_cast<float>(qh[k]) : mla_rotated(qh + nope, k - nope, rope, pos, 1.0f);
    } else if (c < 2 * Wq) {  // a key head: the projection's nope part, then the shared key rotated
        const i64 h = (c - Wq) / dqk, k = (c - Wq) % dqk;
        v = k < nope ? static_cast<float>(kv[t * Wkv + h * (nope + dv) + k]) : mla_rotated(k_rope + t * rope, k - nope, rope, pos, 1.0f);
    } else {  // a value head
        const i64 h = (c - 2 * Wq) / dv, k = (c - 2 * Wq) % dv;
        v = static_cast<float>(kv[t * Wkv + h * (nope + dv) + nope + k]);
    }
    qkv[i] = v;
}

// The query's and the key/value projection's gradients, one thread an element of theirs.
__global__ void k_mla_rope_bwd(TV dq, TV dkv, TV dqkv, i64 T, cpu::Positions w, i64 heads, i64 nope, i64 rope, i64 dv) {
    const i64 dqk = nope + rope, Wq = heads * dqk, W = 2 * Wq + heads * dv, Wkv = heads * (nope + dv);
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * (Wq + Wkv)) return;
    const i64 t = i / (Wq + Wkv), c = i % (Wq + Wkv);
    const TV row = dqkv + t * W;
    if (c < Wq) {
        const i64 h = c / dqk, k = c % dqk;
        dq[t * Wq + c] = k < nope ? static_cast<float>(row[h * dqk + k]) : mla_rotated(row + h * dqk + nope, k - nope, rope, static_cast<double>(w(t)), -1.0f);
    } else {
        const i64 e = c - Wq, h = e / (nope + dv), k = e % (nope + dv);
        dkv[t * Wkv + e] = static_cast<float>(k < nope ? row[Wq + h * dqk + k] : row[2 * Wq + h * dv + (k - nope)]);
    }
}

// The shared key's gradient: each head's key rope part summed, then rotated back (the rotation is
// linear), one thread a (row, element).
__global__ void k_mla_rope_bwd_key(TV dk_rope, TV dqkv, i64 T, cpu::Positions w, i64 heads, i64 nope, i64 rope, i64 dv) {
    const i64 dqk = nope + rope, Wq = heads * dqk, W = 2 * Wq + heads * dv, half = rope / 2;
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * rope) return;
    const i64 t = i / rope, k = i % rope, j = k < half ? k : k - half;
    float a = 0, b = 0;
    for (i64 h = 0; h < heads; ++h) {
        const TV kr = dqkv + t * W + Wq + h * dqk + nope;
        a += static_cast<float>(kr[j]);
        b += static_cast<float>(kr[j + half]);
    }
    const double theta = static_cast<double>(w(t)) * pow(10000.0, -2.0 * static_cast<double>(j) / static_cast<double>(rope));
    const float c = static_cast<float>(cos(theta)), s = -static_cast<float>(sin(theta));
    dk_rope[i] = k < half ? a * c - b * s : b * c + a * s;
}

