// Private to the CUDA backend: what the compute and overlap benchmarks share: random fills (real
// data, not constants), the dtypes, one cuBLASLt matmul with its heuristic's algorithms, and the
// device's L2 and free memory. C++17 (nvcc dialect); included only by profiler/cuda/*.cu.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <vector>

#include "cuda_common.cuh"

namespace strata::profiler::cudab {

// ------------------------------------------------------------------------- random fill kernels
__device__ inline float hash_normal(unsigned long long i, unsigned long long seed) {
    // splitmix64 of (seed, i) -> two uniforms -> Box-Muller. Random data, not constants: constant
    // inputs draw less power and run faster than real weights (profiler-notes §8).
    auto mix = [](unsigned long long z) {
        z += 0x9e3779b97f4a7c15ULL;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
    };
    const unsigned long long a = mix(seed * 0x100000001b3ULL + 2 * i), b = mix(seed * 0x100000001b3ULL + 2 * i + 1);
    const float u1 = (static_cast<float>(a >> 40) + 1.0f) * (1.0f / 16777217.0f);
    const float u2 = static_cast<float>(b >> 40) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}

template <class T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) { return x; }
template <>
__device__ inline __half from_float<__half>(float x) { return __float2half(x); }
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ inline __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float x) { return __nv_fp8_e4m3(x); }

template <class T>
__global__ void fill_normal(T* p, unsigned long long n, unsigned long long seed, float scale) {
    for (unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<unsigned long long>(gridDim.x) * blockDim.x)
        p[i] = from_float<T>(scale * hash_normal(i, seed));
}

template <class T>
void fill(void* p, std::size_t n, unsigned long long seed, float scale, cudaStream_t s) {
    if (n == 0) return;
    fill_normal<T><<<1024, 256, 0, s>>>(static_cast<T*>(p), n, seed, scale);
    STRATA_CUDA_LAUNCHED();
}

// --------------------------------------------------------------------------------- dtypes
enum class Dt { bf16, fp16, tf32, fp32, fp8 };
inline const char* dt_name(Dt d) {
    switch (d) {
        case Dt::bf16: return "bf16";
        case Dt::fp16: return "fp16";
        case Dt::tf32: return "tf32";
        case Dt::fp32: return "fp32";
        case Dt::fp8: return "fp8";
    }
    return "?";
}
inline std::size_t in_bytes(Dt d) { return d == Dt::fp8 ? 1 : (d == Dt::bf16 || d == Dt::fp16) ? 2 : 4; }
// fp8 GEMMs write bf16 (the common training setup: fp8 inputs, higher-precision output).
inline std::size_t out_bytes(Dt d) { return d == Dt::fp8 ? 2 : in_bytes(d); }
inline cudaDataType_t in_type(Dt d) {
    switch (d) {
        case Dt::bf16: return CUDA_R_16BF;
        case Dt::fp16: return CUDA_R_16F;
        case Dt::fp8: return CUDA_R_8F_E4M3;
        default: return CUDA_R_32F;
    }
}
inline cudaDataType_t out_type(Dt d) { return d == Dt::fp8 ? CUDA_R_16BF : in_type(d); }
inline cublasComputeType_t compute_type(Dt d) { return d == Dt::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; }

inline void fill_dt(Dt d, void* p, std::size_t n, unsigned long long seed, cudaStream_t s) {
    switch (d) {
        case Dt::bf16: fill<__nv_bfloat16>(p, n, seed, 1.0f, s); break;
        case Dt::fp16: fill<__half>(p, n, seed, 1.0f, s); break;
        case Dt::fp8: fill<__nv_fp8_e4m3>(p, n, seed, 1.0f, s); break;
        default: fill<float>(p, n, seed, 1.0f, s); break;
    }
}

// -------------------------------------------------------------------------- cuBLASLt GEMM
inline constexpr std::size_t kWorkspaceBytes = 32u << 20;  // NVIDIA's recommendation for Hopper

/// One (strided-batched) matmul D = alpha op(A) op(B) + beta C in column-major terms, with C = D.
class LtGemm {
public:
    LtGemm(cublasLtHandle_t h, Dt dt, cublasOperation_t ta, cublasOperation_t tb, long m, long n, long k, long lda, long ldb,
           long ldd, int batch = 1, long long sa = 0, long long sb = 0, long long sd = 0)
        : h_(h) {
        STRATA_CUBLAS(cublasLtMatmulDescCreate(&desc_, compute_type(dt), CUDA_R_32F));
        STRATA_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        STRATA_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        const long ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
        const long br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
        STRATA_CUBLAS(cublasLtMatrixLayoutCreate(&a_, in_type(dt), ar, ac, lda));
        STRATA_CUBLAS(cublasLtMatrixLayoutCreate(&b_, in_type(dt), br, bc, ldb));
        STRATA_CUBLAS(cublasLtMatrixLayoutCreate(&d_, out_type(dt), m, n, ldd));
        if (batch > 1) {
            const int32_t bc32 = batch;
            for (auto [l, st] : {std::pair{a_, sa}, std::pair{b_, sb}, std::pair{d_, sd}}) {
                const int64_t s64 = st;
                STRATA_CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc32, sizeof bc32));
                STRATA_CUBLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s64, sizeof s64));
            }
        }
        STRATA_CUBLAS(cublasLtMatmulPreferenceCreate(&pref_));
        const uint64_t ws = kWorkspaceBytes;
        STRATA_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    }
    ~LtGemm() {
        cublasLtMatmulPreferenceDestroy(pref_);
        cublasLtMatrixLayoutDestroy(a_);
        cublasLtMatrixLayoutDestroy(b_);
        cublasLtMatrixLayoutDestroy(d_);
        cublasLtMatmulDescDestroy(desc_);
    }
    LtGemm(const LtGemm&) = delete;
    LtGemm& operator=(const LtGemm&) = delete;

    /// Tell cuBLASLt how many SMs the matmul may use (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET), as
    /// Transformer Engine does for GEMMs it overlaps with communication kernels. 0 = all.
    void set_sm_count_target(int sms) {
        const int32_t v = sms;
        STRATA_CUBLAS(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &v, sizeof v));
    }
    /// The heuristic's top `want` algorithms (may be fewer; none is an error).
    std::vector<cublasLtMatmulAlgo_t> algos(int want) {
        std::vector<cublasLtMatmulHeuristicResult_t> r(static_cast<std::size_t>(want));
        int got = 0;
        STRATA_CUBLAS(cublasLtMatmulAlgoGetHeuristic(h_, desc_, a_, b_, d_, d_, pref_, want, r.data(), &got));
        std::vector<cublasLtMatmulAlgo_t> out;
        for (int i = 0; i < got; ++i)
            if (r[static_cast<std::size_t>(i)].state == CUBLAS_STATUS_SUCCESS) out.push_back(r[static_cast<std::size_t>(i)].algo);
        if (out.empty()) throw RuntimeError("cuBLASLt: no algorithm for this matmul");
        return out;
    }
    void run(const cublasLtMatmulAlgo_t& algo, const void* A, const void* B, void* D, float alpha, float beta, void* ws,
             cudaStream_t s) {
        STRATA_CUBLAS(cublasLtMatmul(h_, desc_, &alpha, A, a_, B, b_, &beta, D, d_, D, d_, &algo, ws, kWorkspaceBytes, s));
    }

private:
    cublasLtHandle_t h_;
    cublasLtMatmulDesc_t desc_{};
    cublasLtMatrixLayout_t a_{}, b_{}, d_{};
    cublasLtMatmulPreference_t pref_{};
};

struct LtHandle {
    cublasLtHandle_t h{};
    LtHandle() { STRATA_CUBLAS(cublasLtCreate(&h)); }
    ~LtHandle() { cublasLtDestroy(h); }
};

inline int l2_bytes() {
    int dev = 0, l2 = 0;
    STRATA_CUDA(cudaGetDevice(&dev));
    STRATA_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    return std::max(l2, 1 << 20);
}

inline std::size_t free_bytes() {
    std::size_t f = 0, t = 0;
    STRATA_CUDA(cudaMemGetInfo(&f, &t));
    return f;
}

}  // namespace strata::profiler::cudab
