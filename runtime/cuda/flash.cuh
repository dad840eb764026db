// The cuda backend's flash attention for bf16 Q, K, V (FlashAttention-2's schedule, Dao 2023,
// arXiv:2307.08691, Algorithms 1 and 2), on the tensor cores through WMMA 16x16x16 bf16 fragments
// with fp32 accumulation. Scores never reach global memory: a block of 64 queries (forward) or 64
// keys (backward), one warp per 16 of them, walks the other side's blocks in 64-row tiles held in
// shared memory. Q, K and V are read, and the output written, in the executor's row layouts
// ([tokens][(hq + 2 hkv) d], [tokens][hq d]: no per-head copies), a GQA head's keys and values
// from its group's columns; dQ, dK and dV go to per-head [item][seq][d] fp32 buffers that
// k_attn_merge_grads sums over each group. Same contract as the exact kernels (attention.cuh: the
// executor's lse layout, dropout.hpp's masks), so the cpu kernels stay the reference.
// Included by device_cuda.cu inside its unnamed namespace, after kernels.cuh; and by
// tests/runtime/test_flash_emulated.cpp, which runs these kernels' schedule on the CPU (threads
// for lanes, WMMA on whole 16x16 tiles) against the cpu kernels in CI, where no GPU is.
#pragma once

#ifdef __CUDACC__
#include <mma.h>
#define STRATA_FLASH_BOUNDS __launch_bounds__(128)
#define STRATA_FLASH_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

constexpr int kFlashTile = 64;  ///< queries or keys per block and per tile: 4 warps of 16
constexpr int kFlashThreads = 128;
using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragAT = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBT = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// Shared memory of the forward kernel: Q, K, V tiles, then per warp scores (fp32), probabilities
/// (bf16) and the output accumulator (fp32).
template <int D>
constexpr std::size_t flash_fwd_smem() {
    return 3 * kFlashTile * D * sizeof(bf16) + 4 * 16 * (kFlashTile * (sizeof(float) + sizeof(bf16)) + D * sizeof(float));
}
/// Backward: K, V, Q, dO tiles; per warp S^T, dP^T (fp32), P^T, dS^T (bf16) and a 16x16 scratch;
/// the query tile's lse and D.
template <int D>
constexpr std::size_t flash_bwd_smem() {
    return 4 * kFlashTile * D * sizeof(bf16) + 4 * (16 * kFlashTile * (2 * sizeof(float) + 2 * sizeof(bf16)) + 256 * sizeof(float)) +
           2 * kFlashTile * sizeof(float);
}

// Rows [row0, row0 + 64) of a head (D columns from `src`, rows `stride` elements apart) into
// shared memory, zeros past seq; 16 bytes a thread (16-byte-aligned rows: flash_for checks).
template <int D>
__device__ void flash_load(bf16* dst, const bf16* src, i64 row0, i64 seq, i64 stride) {
    constexpr int per_row = D / 8;
    for (int e = threadIdx.x; e < kFlashTile * per_row; e += blockDim.x) {
        const int r = e / per_row, c = (e % per_row) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (row0 + r < seq) v = *reinterpret_cast<const uint4*>(src + (row0 + r) * stride + c);
        *reinterpret_cast<uint4*>(dst + r * D + c) = v;
    }
}

__device__ i64 lse_at(i64 item, i64 hq, i64 seq, i64 i) { return ((item / hq) * seq + i) * hq + item % hq; }

// acc = A B^T for 16 rows of A and 16 rows of B, D wide each (row-major in shared memory): a
// 16 x 16 tile of scores, or of their gradients.
template <int D>
__device__ void tile_abt(FragC& acc, const bf16* a_rows, const bf16* b_rows) {
    wmma::fill_fragment(acc, 0.0f);
    for (int ks = 0; ks < D / 16; ++ks) {
        FragA a;
        FragBT b;
        wmma::load_matrix_sync(a, a_rows + ks * 16, D);
        wmma::load_matrix_sync(b, b_rows + ks * 16, D);
        wmma::mma_sync(acc, a, b, acc);
    }
}

// Where item (sequence b, query head h) finds its Q, K and V columns in the rows of its sequence.
struct FlashHead {
    const bf16 *q, *k, *v;
    i64 row;  ///< elements from one token's row to the next: (hq + 2 hkv) D
};
template <int D>
__device__ FlashHead flash_head(const bf16* qkv, i64 item, i64 seq, i64 hq, i64 hkv) {
    const i64 b = item / hq, h = item % hq, kvh = h / (hq / hkv), row = (hq + 2 * hkv) * D;
    const bf16* s = qkv + b * seq * row;
    return FlashHead{s + h * D, s + (hq + kvh) * D, s + (hq + hkv + kvh) * D, row};
}

// Whether query qi sees key kj: causal, and within the window where there is one (window > 0:
// the query itself and the window - 1 keys before it; model.sliding_window).
__device__ bool flash_sees(i64 qi, i64 kj, i64 window) { return kj <= qi && (window <= 0 || qi - kj < window); }

// Forward: O = softmax(Q K^T scale, causal) (x dropout) V and the log-sum-exp, online over key
// tiles. A lane pair owns one query row of its warp's 16 (lane / 2), each lane half of its columns.
// A window starts the walk at the tile of the block's first query's first key.
template <int D>
__global__ void STRATA_FLASH_BOUNDS k_flash_fwd(const bf16* qkv, bf16* out, TV lse, i64 seq, i64 hq, i64 hkv, float scale, Dropout drop,
                                                i64 window) {
    constexpr int B = kFlashTile;
    STRATA_FLASH_SMEM(smem);
    bf16* Qs = reinterpret_cast<bf16*>(smem);
    bf16* Ks = Qs + B * D;
    bf16* Vs = Ks + B * D;
    float* Ss = reinterpret_cast<float*>(Vs + B * D);
    bf16* Ps = reinterpret_cast<bf16*>(Ss + 4 * 16 * B);
    float* Os = reinterpret_cast<float*>(Ps + 4 * 16 * B);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
    const i64 item = blockIdx.y, q0 = static_cast<i64>(blockIdx.x) * B, qi = q0 + warp * 16 + r;
    const FlashHead hd = flash_head<D>(qkv, item, seq, hq, hkv);
    float* Sw = Ss + warp * 16 * B;
    bf16* Pw = Ps + warp * 16 * B;
    float* Ow = Os + warp * 16 * D;
    flash_load<D>(Qs, hd.q, q0, seq, hd.row);
    for (int e = lane; e < 16 * D; e += 32) Ow[e] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const i64 kt0 = window > 0 && q0 - window + 1 > 0 ? (q0 - window + 1) / B : 0;
    for (i64 kt = kt0; kt <= static_cast<i64>(blockIdx.x); ++kt) {  // causal: key tiles up to the query tile
        __syncthreads();  // every warp is done with the previous K and V
        flash_load<D>(Ks, hd.k, kt * B, seq, hd.row);
        flash_load<D>(Vs, hd.v, kt * B, seq, hd.row);
        __syncthreads();
        for (int nt = 0; nt < B / 16; ++nt) {  // S_w = Q_w K^T
            FragC acc;
            tile_abt<D>(acc, Qs + warp * 16 * D, Ks + nt * 16 * D);
            wmma::store_matrix_sync(Sw + nt * 16, acc, B, wmma::mem_row_major);
        }
        __syncwarp();
        float mt = -INFINITY;
        for (int c = half * 32; c < half * 32 + 32; ++c) {
            const i64 kj = kt * B + c;
            if (flash_sees(qi, kj, window) && qi < seq) mt = fmaxf(mt, Sw[r * B + c] * scale);
        }
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        const float mn = fmaxf(m, mt);
        const float alpha = mn == -INFINITY ? 1.0f : expf(m - mn);
        float rs = 0.0f;
        for (int c = half * 32; c < half * 32 + 32; ++c) {
            const i64 kj = kt * B + c;
            const bool ok = flash_sees(qi, kj, window) && qi < seq;
            const float p = ok ? expf(Sw[r * B + c] * scale - mn) : 0.0f;
            rs += p;
            Pw[r * B + c] = __float2bfloat16_rn(ok ? p * attn_drop(drop, item, hq, seq, qi, kj) : 0.0f);
        }
        rs += __shfl_xor_sync(0xffffffffu, rs, 1);
        l = l * alpha + rs;
        m = mn;
        for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) Ow[r * D + c] *= alpha;
        __syncwarp();
        for (int dt = 0; dt < D / 16; ++dt) {  // O_w = O_w alpha + P_w V
            FragC acc;
            wmma::load_matrix_sync(acc, Ow + dt * 16, D, wmma::mem_row_major);
            for (int ks = 0; ks < B / 16; ++ks) {
                FragA a;
                FragB b;
                wmma::load_matrix_sync(a, Pw + ks * 16, B);
                wmma::load_matrix_sync(b, Vs + ks * 16 * D + dt * 16, D);
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(Ow + dt * 16, acc, D, wmma::mem_row_major);
        }
        __syncwarp();
    }
    if (qi >= seq) return;
    const float inv = 1.0f / l;  // key 0 is always seen: l > 0
    bf16* o = out + ((item / hq) * seq + qi) * hq * D + (item % hq) * D;  // [tokens][hq D]
    for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) o[c] = __float2bfloat16_rn(Ow[r * D + c] * inv);
    if (half == 0) lse[lse_at(item, hq, seq, qi)] = m + logf(l);
}

// Backward (FlashAttention-2's Algorithm 2): a block owns 64 keys, a warp 16 of them, and walks the
// query tiles that see them (causal: from its own). P is recomputed from the saved lse; dK and dV
// stay in fragments for the whole walk; dQ is added atomically (fp32). Dd[item][i] = dO . O.
template <int D>
__global__ void STRATA_FLASH_BOUNDS k_flash_bwd(const bf16* qkv, const bf16* dout, TV lse, const float* Dd, float* dQ, float* dK, float* dV,
                                                i64 seq, i64 hq, i64 hkv, float scale, Dropout drop, i64 window) {
    constexpr int B = kFlashTile;
    STRATA_FLASH_SMEM(smem);
    bf16* Ks = reinterpret_cast<bf16*>(smem);
    bf16* Vs = Ks + B * D;
    bf16* Qs = Vs + B * D;
    bf16* dOs = Qs + B * D;
    float* region = reinterpret_cast<float*>(dOs + B * D);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, half = lane & 1;
    // Per warp: S^T, dP^T (fp32 16 x B), scratch (16 x 16 fp32), P^T, dS^T (bf16 16 x B).
    float* STw = region + warp * (2 * 16 * B + 256);
    float* dPTw = STw + 16 * B;
    float* scr = dPTw + 16 * B;
    bf16* PTw = reinterpret_cast<bf16*>(region + 4 * (2 * 16 * B + 256)) + warp * 2 * 16 * B;
    bf16* dSTw = PTw + 16 * B;
    float* Ls = reinterpret_cast<float*>(reinterpret_cast<bf16*>(region + 4 * (2 * 16 * B + 256)) + 4 * 2 * 16 * B);
    float* Ds = Ls + B;
    const i64 item = blockIdx.y, k0 = static_cast<i64>(blockIdx.x) * B, kj = k0 + warp * 16 + r;
    const i64 head = item * seq * D;  // of the per-head gradients
    const FlashHead hd = flash_head<D>(qkv, item, seq, hq, hkv);
    const bf16* dOh = dout + (item / hq) * seq * hq * D + (item % hq) * D;
    flash_load<D>(Ks, hd.k, k0, seq, hd.row);
    flash_load<D>(Vs, hd.v, k0, seq, hd.row);
    FragC dk[D / 16], dv[D / 16];
    for (int dt = 0; dt < D / 16; ++dt) {
        wmma::fill_fragment(dk[dt], 0.0f);
        wmma::fill_fragment(dv[dt], 0.0f);
    }
    // The query tiles that see a key of this block: from its own to the last key's window's end.
    const i64 all_tiles = (seq + B - 1) / B, seen = (k0 + B - 1 + window - 1) / B + 1;
    const i64 tiles = window > 0 && seen < all_tiles ? seen : all_tiles;
    for (i64 qt = blockIdx.x; qt < tiles; ++qt) {
        __syncthreads();  // every warp is done with the previous Q and dO
        flash_load<D>(Qs, hd.q, qt * B, seq, hd.row);
        flash_load<D>(dOs, dOh, qt * B, seq, hq * D);
        for (int e = threadIdx.x; e < B; e += blockDim.x) {
            const i64 i = qt * B + e;
            Ls[e] = i < seq ? static_cast<float>(lse[lse_at(item, hq, seq, i)]) : 0.0f;
            Ds[e] = i < seq ? Dd[item * seq + i] : 0.0f;
        }
        __syncthreads();
        for (int nt = 0; nt < B / 16; ++nt) {  // S^T_w = K_w Q^T, dP^T_w = V_w dO^T
            FragC s, dp;
            tile_abt<D>(s, Ks + warp * 16 * D, Qs + nt * 16 * D);
            tile_abt<D>(dp, Vs + warp * 16 * D, dOs + nt * 16 * D);
            wmma::store_matrix_sync(STw + nt * 16, s, B, wmma::mem_row_major);
            wmma::store_matrix_sync(dPTw + nt * 16, dp, B, wmma::mem_row_major);
        }
        __syncwarp();
        for (int c = half * 32; c < half * 32 + 32; ++c) {  // row r: key kj; column c: query qt B + c
            const i64 qi = qt * B + c;
            const bool ok = flash_sees(qi, kj, window) && qi < seq && kj < seq;
            const float p = ok ? expf(STw[r * B + c] * scale - Ls[c]) : 0.0f;
            const float z = ok ? attn_drop(drop, item, hq, seq, qi, kj) : 1.0f;
            PTw[r * B + c] = __float2bfloat16_rn(p * z);
            dSTw[r * B + c] = __float2bfloat16_rn(ok ? p * (dPTw[r * B + c] * z - Ds[c]) * scale : 0.0f);
        }
        __syncwarp();
        for (int dt = 0; dt < D / 16; ++dt)  // dV_w += P^T_w dO, dK_w += dS^T_w Q
            for (int ks = 0; ks < B / 16; ++ks) {
                FragA a;
                FragB b;
                wmma::load_matrix_sync(a, PTw + ks * 16, B);
                wmma::load_matrix_sync(b, dOs + ks * 16 * D + dt * 16, D);
                wmma::mma_sync(dv[dt], a, b, dv[dt]);
                wmma::load_matrix_sync(a, dSTw + ks * 16, B);
                wmma::load_matrix_sync(b, Qs + ks * 16 * D + dt * 16, D);
                wmma::mma_sync(dk[dt], a, b, dk[dt]);
            }
        for (int mt = 0; mt < B / 16; ++mt)  // dQ[queries] += dS (queries x the warp's 16 keys) K_w
            for (int dt = 0; dt < D / 16; ++dt) {
                FragC acc;
                wmma::fill_fragment(acc, 0.0f);
                FragAT a;
                FragB b;
                wmma::load_matrix_sync(a, dSTw + mt * 16, B);
                wmma::load_matrix_sync(b, Ks + warp * 16 * D + dt * 16, D);
                wmma::mma_sync(acc, a, b, acc);
                wmma::store_matrix_sync(scr, acc, 16, wmma::mem_row_major);
                __syncwarp();
                for (int e = lane; e < 256; e += 32) {
                    const i64 q = qt * B + mt * 16 + e / 16;
                    if (q < seq) atomicAdd(dQ + head + q * D + dt * 16 + e % 16, scr[e]);
                }
                __syncwarp();
            }
    }
    for (int dt = 0; dt < D / 16; ++dt)
        for (int which = 0; which < 2; ++which) {
            wmma::store_matrix_sync(scr, which ? dv[dt] : dk[dt], 16, wmma::mem_row_major);
            __syncwarp();
            // A named pointer, not (which ? dV : dK)[i]: GCC 12 under -fsanitize=undefined
            // miscompiles a subscript of a conditional (the CPU emulation's sanitizer build).
            float* to = which ? dV : dK;
            for (int e = lane; e < 256; e += 32) {
                const i64 key = k0 + warp * 16 + e / 16;
                if (key < seq) to[head + key * D + dt * 16 + e % 16] = scr[e];
            }
            __syncwarp();
        }
}
