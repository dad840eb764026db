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
// db[n] += sum over rows; one thread per column, rows in order (coalesced across threads).
__global__ void k_col_sum(float* db, const float* d, i64 T, i64 N) {
    const i64 n = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (n >= N) return;
    float s = 0;
    for (i64 t = 0; t < T; ++t) s += d[t * N + n];
    db[n] += s;
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
// dw[c] += sum_t dy * xhat; db[c] += sum_t dy: a thread per column, rows in order.
__global__ void k_norm_bwd_dw(float* dw, float* db, const float* x, const float* dy, const float* stats, i64 T, i64 C) {
    const i64 c = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (c >= C) return;
    float sw = 0, sb = 0;
    for (i64 t = 0; t < T; ++t) {
        const float g = dy[t * C + c];
        sw += g * (x[t * C + c] - stats[2 * t]) * stats[2 * t + 1];
        sb += g;
    }
    dw[c] += sw;
    if (db) db[c] += sb;
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

// ---- attention: scores of one head for `batch` sequences, [batch][seq][seq] ----
// In place: S -> P = exp(S * scale - lse), masked above the diagonal; lse[(b*seq + i)*hq + h].
__global__ void k_softmax_causal(float* S, float* lse, i64 seq, i64 hq, i64 h, i64 b0, float scale) {
    __shared__ float sh[32];
    const i64 r = blockIdx.x;  // b * seq + i within the chunk
    const i64 i = r % seq;
    float* row = S + r * seq;
    float mx = -INFINITY;
    for (i64 j = threadIdx.x; j <= i; j += blockDim.x) mx = fmaxf(mx, row[j] * scale);
    mx = block_max(mx, sh);
    float s = 0;
    for (i64 j = threadIdx.x; j <= i; j += blockDim.x) s += expf(row[j] * scale - mx);
    s = block_sum(s, sh);
    const float l = mx + logf(s);
    for (i64 j = threadIdx.x; j < seq; j += blockDim.x) row[j] = j <= i ? expf(row[j] * scale - l) : 0.0f;
    if (threadIdx.x == 0) lse[((b0 * seq) + r) * hq + h] = l;
}
// Backward: S -> P from the saved lse (as above), and dP -> dS = P (dP - D) scale with
// D = dout . out over the head's columns (in a block per row).
__global__ void k_softmax_causal_bwd(float* S, float* dP, const float* lse, const float* out, const float* dout, i64 seq, i64 hq,
                                     i64 h, i64 d, i64 b0, float scale) {
    __shared__ float sh[32];
    const i64 r = blockIdx.x;
    const i64 i = r % seq, g = b0 * seq + r;  // g: the row of the whole tensor
    const float l = lse[g * hq + h];
    float D = 0;
    for (i64 c = threadIdx.x; c < d; c += blockDim.x) D += dout[g * hq * d + h * d + c] * out[g * hq * d + h * d + c];
    D = block_sum(D, sh);
    float* prow = S + r * seq;
    float* drow = dP + r * seq;
    for (i64 j = threadIdx.x; j < seq; j += blockDim.x) {
        const float p = j <= i ? expf(prow[j] * scale - l) : 0.0f;
        prow[j] = p;
        drow[j] = p * (drow[j] - D) * scale;
    }
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
        k_col_sum<<<blocks_for(N), kThreads, 0, stream_>>>(db, d, T, N);
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
        k_norm_bwd_dw<<<blocks_for(C), kThreads, 0, stream_>>>(dw, db, x, dy, stats, T, C);
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

    // Sequences per chunk so that the seq x seq scores (two buffers in the backward) stay under
    // 1 GiB of scratch.
    i64 chunk_for(i64 B, i64 seq) const {
        const i64 per = 2 * seq * seq * static_cast<i64>(sizeof(float));
        return std::max<i64>(1, std::min<i64>(B, (i64{1} << 30) / std::max<i64>(per, 1)));
    }
    void attention_forward(float* out, float* lse, const float* qkv, i64 T, i64 seq, i64 hq, i64 hkv, i64 d) override {
        const i64 R = (hq + 2 * hkv) * d, B = T / seq, group = hq / hkv, chunk = chunk_for(B, seq);
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        float* S = scratch(chunk * seq * seq);
        for (i64 b0 = 0; b0 < B; b0 += chunk) {
            const i64 nb = std::min(chunk, B - b0);
            const float* base = qkv + b0 * seq * R;
            for (i64 h = 0; h < hq; ++h) {
                const float* q = base + h * d;
                const float* k = base + hq * d + (h / group) * d;
                const float* v = base + (hq + hkv) * d + (h / group) * d;
                gemm(false, true, seq, seq, d, q, R, seq * R, k, R, seq * R, S, seq, seq * seq, nb, 1.0f, 0.0f);
                k_softmax_causal<<<static_cast<unsigned>(nb * seq), kThreads, 0, stream_>>>(S, lse, seq, hq, h, b0, scale);
                LAUNCHED();
                gemm(false, false, seq, d, seq, S, seq, seq * seq, v, R, seq * R, out + b0 * seq * hq * d + h * d, hq * d, seq * hq * d,
                     nb, 1.0f, 0.0f);
            }
        }
    }
    void attention_backward(float* dqkv, const float* qkv, const float* out, const float* lse, const float* dout, i64 T, i64 seq,
                            i64 hq, i64 hkv, i64 d) override {
        const i64 R = (hq + 2 * hkv) * d, B = T / seq, group = hq / hkv, chunk = chunk_for(B, seq);
        const float scale = 1.0f / std::sqrt(static_cast<float>(d));
        float* S = scratch(2 * chunk * seq * seq);
        float* dP = S + chunk * seq * seq;
        zero(dqkv, T * R);  // key and value gradients accumulate over a group's query heads
        for (i64 b0 = 0; b0 < B; b0 += chunk) {
            const i64 nb = std::min(chunk, B - b0);
            const i64 off = b0 * seq * R, ooff = b0 * seq * hq * d;
            for (i64 h = 0; h < hq; ++h) {
                const i64 qc = h * d, kc = hq * d + (h / group) * d, vc = (hq + hkv) * d + (h / group) * d;
                const float* dO = dout + ooff + h * d;
                gemm(false, true, seq, seq, d, qkv + off + qc, R, seq * R, qkv + off + kc, R, seq * R, S, seq, seq * seq, nb, 1.0f, 0.0f);
                gemm(false, true, seq, seq, d, dO, hq * d, seq * hq * d, qkv + off + vc, R, seq * R, dP, seq, seq * seq, nb, 1.0f, 0.0f);
                k_softmax_causal_bwd<<<static_cast<unsigned>(nb * seq), kThreads, 0, stream_>>>(S, dP, lse, out, dout, seq, hq, h, d, b0,
                                                                                                 scale);
                LAUNCHED();
                // dV += P^T dO; dQ = dS K; dK += dS^T Q.
                gemm(true, false, seq, d, seq, S, seq, seq * seq, dO, hq * d, seq * hq * d, dqkv + off + vc, R, seq * R, nb, 1.0f, 1.0f);
                gemm(false, false, seq, d, seq, dP, seq, seq * seq, qkv + off + kc, R, seq * R, dqkv + off + qc, R, seq * R, nb, 1.0f,
                     0.0f);
                gemm(true, false, seq, d, seq, dP, seq, seq * seq, qkv + off + qc, R, seq * R, dqkv + off + kc, R, seq * R, nb, 1.0f, 1.0f);
            }
        }
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
