// A CPU emulation of the CUDA that runtime/cuda/flash.cuh uses, so that its kernels' schedule
// runs in CI, where no GPU is (test_flash_emulated.cpp): a block is 128 std::threads (one per
// lane) with barriers for __syncthreads and __syncwarp; __shfl_xor_sync goes through a per-warp
// array; a WMMA fragment is the whole 16x16 tile in every lane (loads by every lane, stores by
// lane 0, each between warp barriers, as the hardware runs them warp-synchronously); bf16 rounds
// to nearest even as the cpu backend does. It checks the indexing, the online softmax and the
// backward's accumulation, not speed, and not the real fragments' register layout (opaque to the
// kernels by WMMA's contract).
#pragma once

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "strata/runtime/cpu_kernels.hpp"
#include "strata/runtime/dropout.hpp"

namespace strata::runtime::emulated {
using i64 = std::int64_t;
struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
};
namespace emu {
thread_local Dim3 tid, bid;
thread_local unsigned char* sm = nullptr;
thread_local std::barrier<>* block_bar = nullptr;
thread_local std::barrier<>* warp_bar = nullptr;
thread_local float* warp_xchg = nullptr;
unsigned char* smem() { return sm; }
}  // namespace emu
#define threadIdx emu::tid
#define blockIdx emu::bid
static const Dim3 kBlockDim{128, 1, 1};
#define blockDim kBlockDim
#define __global__
#define __device__ inline
#define __host__
inline void __syncthreads() { emu::block_bar->arrive_and_wait(); }
inline void __syncwarp() { emu::warp_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    const int lane = threadIdx.x & 31;
    emu::warp_xchg[lane] = v;
    __syncwarp();
    const float r = emu::warp_xchg[lane ^ o];
    __syncwarp();
    return r;
}
struct __nv_bfloat16 {
    std::uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    float g = f;
    cpu::round_bf16(&g, 1);
    std::uint32_t u;
    std::memcpy(&u, &g, 4);
    return __nv_bfloat16{static_cast<std::uint16_t>(u >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 b) {
    std::uint32_t u = static_cast<std::uint32_t>(b.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
struct uint4 {
    std::uint32_t x, y, z, w;
};
inline uint4 make_uint4(std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d) { return {a, b, c, d}; }
inline void atomicAdd(float* p, float v) { std::atomic_ref<float>(*p).fetch_add(v); }

namespace nvcuda::wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class L = void>
struct fragment {
    float x[16][16];
};
template <class L>
constexpr bool is_col = std::is_same_v<L, col_major>;
template <class Use, class T, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ld) {  // reads: no barrier (stores have theirs)
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) f.x[r][c] = __bfloat162float(is_col<L> ? p[c * ld + r] : p[r * ld + c]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ld, layout_t l) {
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) f.x[r][c] = l == mem_col_major ? p[c * ld + r] : p[r * ld + c];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ld, layout_t l) {
    __syncwarp();
    if ((threadIdx.x & 31) == 0)
        for (int r = 0; r < 16; ++r)
            for (int c = 0; c < 16; ++c) (l == mem_col_major ? p[c * ld + r] : p[r * ld + c]) = f.x[r][c];
    __syncwarp();
}
template <class F>
void fill_fragment(F& f, float v) {
    for (auto& row : f.x)
        for (float& e : row) e = v;
}
template <class A, class B>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const A& a, const B& b, const fragment<accumulator, 16, 16, 16, float>& c) {
    float out[16][16];
    for (int r = 0; r < 16; ++r)
        for (int n = 0; n < 16; ++n) {
            float s = c.x[r][n];
            for (int k = 0; k < 16; ++k) s += a.x[r][k] * b.x[k][n];
            out[r][n] = s;
        }
    std::memcpy(d.x, out, sizeof out);
}
}  // namespace nvcuda::wmma

// kernels.cuh's TV (fp32 only here) and attn_drop.
struct TV {
    void* p = nullptr;
    int bf16 = 0;
    float& operator[](i64 i) const { return static_cast<float*>(p)[i]; }
};
inline float attn_drop(const Dropout& d, i64 item, i64 hq, i64 seq, i64 i, i64 j) {
    if (!(d.p > 0)) return 1.0f;
    return dropout_scale(d.key, dropout_attention_row(d, item / hq, item % hq, seq, i), static_cast<std::uint64_t>(j), d.p);
}


// Runs body() as every thread of every block of grid (x: blocks along, y: items), `smem_bytes` of
// 128-byte-aligned shared memory a block.
template <class F>
void launch(Dim3 grid, std::size_t smem_bytes, F body) {
    for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
            std::vector<unsigned char> shared(smem_bytes + 128);
            unsigned char* base = shared.data() + (128 - reinterpret_cast<std::uintptr_t>(shared.data()) % 128) % 128;
            std::barrier<> block(128);
            std::vector<std::unique_ptr<std::barrier<>>> warps;
            std::vector<std::vector<float>> xchg(4, std::vector<float>(32));
            for (int w = 0; w < 4; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
            std::vector<std::thread> ts;
            for (unsigned t = 0; t < 128; ++t)
                ts.emplace_back([&, t] {
                    emu::tid = {t, 0, 0};
                    emu::bid = {bx, by, 0};
                    emu::sm = base;
                    emu::block_bar = &block;
                    emu::warp_bar = warps[t / 32].get();
                    emu::warp_xchg = xchg[t / 32].data();
                    body();
                });
            for (auto& t : ts) t.join();
        }
}
}  // namespace strata::runtime::emulated

#define STRATA_FLASH_BOUNDS
#define STRATA_FLASH_SMEM(name) unsigned char* name = emu::smem()
