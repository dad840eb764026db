// A CPU emulation of the CUDA that runtime/cuda/kernels.cuh and flash.cuh use, so that the cuda
// backend's kernels run in CI, where no GPU is (test_cuda_emulated.cpp, test_flash_emulated.cpp):
// a block's threads are kept std::threads (BlockThreads), with barriers for __syncthreads and
// __syncwarp; blocks run one after another, so a kernel's __shared__ arrays can be function statics;
// __shfl_xor_sync goes through a per-warp array; a WMMA fragment is the whole 16x16 tile in every
// lane (loaded by every lane, stored by lane 0 between warp barriers, as the hardware runs WMMA
// warp-synchronously); bf16 and fp16 round to nearest even as the cpu backend does. It checks indexing,
// reductions, widths and the kernels' arithmetic, not speed, and not the real fragments' register
// layout (opaque to the kernels by WMMA's contract). Include it, then the .cuh files inside
// namespace strata::runtime::emulated, as device_cuda.cu includes them.
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <semaphore>
#include <thread>
#include <type_traits>
#include <vector>

#include "strata/runtime/cpu_kernels.hpp"
#include "strata/runtime/dropout.hpp"

namespace strata::runtime::emulated {
using i64 = std::int64_t;
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
namespace emu {
inline thread_local dim3 tid, bid, bdim, gdim;
inline thread_local int lane = 0;
inline thread_local unsigned char* sm = nullptr;
inline thread_local std::barrier<>* block_bar = nullptr;
inline thread_local std::barrier<>* warp_bar = nullptr;
inline thread_local float* warp_xchg = nullptr;
inline unsigned char* smem() { return sm; }
}  // namespace emu
}  // namespace strata::runtime::emulated

#define threadIdx emu::tid
#define blockIdx emu::bid
#define blockDim emu::bdim
#define gridDim emu::gdim
#define __global__
#define __device__ inline
#define __host__
#define __shared__ static  // blocks run one at a time (launch below)
#define STRATA_FLASH_BOUNDS
#define STRATA_FLASH_SMEM(name) unsigned char* name = emu::smem()
#define STRATA_DYNAMIC_SMEM(name) float* name = reinterpret_cast<float*>(emu::smem())

namespace strata::runtime::emulated {

inline void __syncthreads() { emu::block_bar->arrive_and_wait(); }
inline void __syncwarp() { emu::warp_bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    emu::warp_xchg[emu::lane] = v;
    __syncwarp();
    const float r = emu::warp_xchg[emu::lane ^ o];
    __syncwarp();
    return r;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <class T>
T min(T a, T b) {
    return b < a ? b : a;
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
struct __half {
    std::uint16_t bits;
};
inline __half __float2half_rn(float f) { return __half{cpu::fp16_bits(f)}; }
inline float __half2float(__half h) { return cpu::from_fp16_bits(h.bits); }
using std::isfinite;
struct uint4 {
    std::uint32_t x, y, z, w;
};
inline uint4 make_uint4(std::uint32_t a, std::uint32_t b, std::uint32_t c, std::uint32_t d) { return {a, b, c, d}; }
inline void atomicAdd(float* p, float v) { std::atomic_ref<float>(*p).fetch_add(v); }
inline void atomicAdd(double* p, double v) { std::atomic_ref<double>(*p).fetch_add(v); }
inline void atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {  // compare-and-swap on the 16 bits, rounding the sum
    std::atomic_ref<std::uint16_t> a(p->bits);
    std::uint16_t old = a.load();
    for (;;) {
        const float sum = __bfloat162float(__nv_bfloat16{old}) + __bfloat162float(v);
        if (a.compare_exchange_weak(old, __float2bfloat16_rn(sum).bits)) return;
    }
}
inline void atomicAdd(__half* p, __half v) {
    std::atomic_ref<std::uint16_t> a(p->bits);
    std::uint16_t old = a.load();
    for (;;) {
        const float sum = __half2float(__half{old}) + __half2float(v);
        if (a.compare_exchange_weak(old, __float2half_rn(sum).bits)) return;
    }
}

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
template <class Use, class T, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const T* p, unsigned ld) {  // reads: no barrier (stores have theirs)
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) f.x[r][c] = __bfloat162float(std::is_same_v<L, col_major> ? p[c * ld + r] : p[r * ld + c]);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p, unsigned ld, layout_t l) {
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) f.x[r][c] = l == mem_col_major ? p[c * ld + r] : p[r * ld + c];
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ld, layout_t l) {
    __syncwarp();
    if (emu::lane == 0)
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

/// Threads kept for the blocks: a block's threads must all run at once (they meet at barriers),
/// and creating them afresh for every block was most of the emulated tests' time (the more so
/// under AddressSanitizer, which maps a shadow for each new thread's stack).
class BlockThreads {
public:
    ~BlockThreads() {
        stop_ = true;
        for (auto& w : workers_) w->go.release();
        for (auto& w : workers_) w->thread.join();
    }
    /// fn(t) for t in [0, n), each on its own thread, all at once; returns when every one has.
    /// A semaphore a thread: waking only the n a block needs.
    void run(unsigned n, const std::function<void(unsigned)>& fn) {
        std::lock_guard<std::mutex> one_launch_at_a_time(run_mu_);
        while (workers_.size() < n) {
            workers_.push_back(std::make_unique<Worker>());
            Worker* w = workers_.back().get();  // stable while the vector grows
            w->thread = std::thread([this, w, t = static_cast<unsigned>(workers_.size() - 1)] { work(*w, t); });
        }
        fn_ = &fn;
        left_ = n;
        for (unsigned t = 0; t < n; ++t) workers_[t]->go.release();
        done_.acquire();
    }

private:
    struct Worker {
        std::thread thread;
        std::binary_semaphore go{0};
    };
    void work(Worker& w, unsigned t) {
        for (;;) {
            w.go.acquire();
            if (stop_) return;
            (*fn_)(t);
            if (left_.fetch_sub(1) == 1) done_.release();
        }
    }
    std::vector<std::unique_ptr<Worker>> workers_;
    std::mutex run_mu_;
    std::binary_semaphore done_{0};
    std::atomic<unsigned> left_{0};
    const std::function<void(unsigned)>* fn_ = nullptr;
    bool stop_ = false;
};
inline BlockThreads& block_threads() {
    static BlockThreads pool;
    return pool;
}

/// Runs body() as every thread of every block of `grid` (block after block), with `smem_bytes` of
/// 128-byte-aligned dynamic shared memory a block.
template <class F>
void launch(dim3 grid, dim3 block, std::size_t smem_bytes, F body) {
    const unsigned threads = block.x * block.y * block.z, warps = (threads + 31) / 32;
    std::vector<unsigned char> shared(smem_bytes + 128);
    unsigned char* base = shared.data() + (128 - reinterpret_cast<std::uintptr_t>(shared.data()) % 128) % 128;
    std::vector<std::vector<float>> xchg(warps, std::vector<float>(32));
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                std::fill(shared.begin(), shared.end(), static_cast<unsigned char>(0));  // each block's shared memory starts fresh
                std::barrier<> bar(threads);
                std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
                for (unsigned w = 0; w < warps; ++w) warp_bars.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - 32 * w)));
                const std::function<void(unsigned)> one = [&](unsigned t) {
                    emu::tid = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
                    emu::bid = dim3(bx, by, bz);
                    emu::bdim = block;
                    emu::gdim = grid;
                    emu::lane = static_cast<int>(t % 32);
                    emu::sm = base;
                    emu::block_bar = &bar;
                    emu::warp_bar = warp_bars[t / 32].get();
                    emu::warp_xchg = xchg[t / 32].data();
                    body();
                };
                block_threads().run(threads, one);
            }
}

}  // namespace strata::runtime::emulated
