// CUDA backend, MoE side: the routed experts' GEMMs at the token counts MoE recipes give each
// expert (issue 31, item 5). The cost model prices a layer's expert GEMMs as one GEMM of
// experts x tokens-per-expert rows (sim/src/cost/compute.cpp), which is what a perfectly balanced
// batched GEMM could reach; these rows say what cuBLAS reaches instead, three ways:
//   batched:    one strided-batched GEMM over the experts, every expert the same token count;
//   grouped:    cublasGemmGroupedBatchedEx with the token counts spread from 0.5x to 1.5x the mean
//               (a router's imbalance), one problem per expert (grouped GEMM kernels);
//   sequential: one GEMM per expert, back to back (Megatron-Core's SequentialMLP).
// Kind "grouped_gemm": stored, not yet read by the cost model (docs/profiler.md).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cuda_backend.hpp"
#include "cuda_common.cuh"
#include "cuda_lt.cuh"
#include "strata/profiler/stats.hpp"

namespace strata::profiler::cudab {

namespace {

struct BlasHandle {
    cublasHandle_t h{};
    explicit BlasHandle(cudaStream_t s) {
        STRATA_CUBLAS(cublasCreate(&h));
        STRATA_CUBLAS(cublasSetStream(h, s));
    }
    ~BlasHandle() { cublasDestroy(h); }
    BlasHandle(const BlasHandle&) = delete;
    BlasHandle& operator=(const BlasHandle&) = delete;
};

// Per expert e: C_e (m_e x n) = X_e (m_e x k) W_e (k x n), column-major as the grid's TN layout:
// A = X_e^T stored k x m_e (lda k), B = W_e stored k x n (ldb k), C m_e x n (ldc m_e).
struct Experts {
    std::vector<int> m;  ///< tokens per expert
    long n = 0, k = 0;
    DeviceBuffer X, W, C;
    std::vector<long long> x_off, c_off;  ///< elements
};

Experts make_experts(const std::vector<int>& m, long n, long k, cudaStream_t s) {
    Experts e;
    e.m = m, e.n = n, e.k = k;
    long long xs = 0, cs = 0;
    for (int mi : m) {
        e.x_off.push_back(xs);
        e.c_off.push_back(cs);
        xs += static_cast<long long>(mi) * k;
        cs += static_cast<long long>(mi) * n;
    }
    const auto E = static_cast<long long>(m.size());
    e.X = DeviceBuffer(static_cast<std::size_t>(xs) * 2);
    e.W = DeviceBuffer(static_cast<std::size_t>(E * k * n) * 2);
    e.C = DeviceBuffer(static_cast<std::size_t>(cs) * 2);
    fill<__nv_bfloat16>(e.X.get(), static_cast<std::size_t>(xs), 31, 1.0f, s);
    fill<__nv_bfloat16>(e.W.get(), static_cast<std::size_t>(E * k * n), 37, 1.0f, s);
    return e;
}

}  // namespace

void bench_grouped_gemm(Context& ctx, const std::string& device) {
    const bool quick = ctx.opt.quick;
    struct Shape {
        const char* what;
        long n, k;
        int experts;  ///< experts on one rank
    };
    // Fine-grained experts (Qwen3-30B-A3B: hidden 2048, expert ffn 768, 128 experts over EP 8)
    // and DeepSeek-V3's (7168, 2048; 256 over EP 32); Mixtral's coarse ones (4096, 14336; 8 over EP 4).
    std::vector<Shape> shapes{{"qwen3-30b-a3b fc1", 1536, 2048, 16}, {"qwen3-30b-a3b fc2", 2048, 768, 16}, {"deepseek-v3 fc1", 4096, 7168, 8}};
    if (!quick) {
        shapes.push_back({"deepseek-v3 fc2", 7168, 2048, 8});
        shapes.push_back({"mixtral-8x7b fc1", 28672, 4096, 2});
    }
    const std::vector<int> per_expert = quick ? std::vector<int>{64, 256, 1024} : std::vector<int>{32, 64, 128, 256, 512, 1024, 2048, 4096};
    const int timed = quick ? 5 : 10;
    Stream stream;
    const cudaStream_t s = stream.get();
    BlasHandle blas(s);
    EventTimer ev;
    const float one = 1.0f, zero = 0.0f;
    const int total = static_cast<int>(shapes.size() * per_expert.size());
    int step = 0;
    for (const Shape& sh : shapes)
        for (int me : per_expert) {
            ctx.progress("grouped gemm", step++, total);
            ctx.check();
            const int E = sh.experts;
            const long n = sh.n, k = sh.k;
            // Token counts: all equal, or spread linearly from 0.5x to 1.5x the mean (rounded to 8).
            std::vector<int> even(static_cast<std::size_t>(E), me), spread;
            for (int e = 0; e < E; ++e) {
                const double f = E > 1 ? 0.5 + static_cast<double>(e) / (E - 1) : 1.0;
                spread.push_back(std::max(8, static_cast<int>(me * f / 8 + 0.5) * 8));
            }
            const double need = 2.0 * (static_cast<double>(E) * 1.5 * me * (k + n) + static_cast<double>(E) * k * n);
            if (need > static_cast<double>(free_bytes()) * 0.7) {
                ctx.warn(std::string("grouped gemm: ") + sh.what + " at " + std::to_string(me) + " tokens an expert skipped (memory)");
                continue;
            }
            for (const char* variant : {"batched", "grouped", "sequential"}) {
                const bool ragged = std::string(variant) == "grouped";
                Experts x = make_experts(ragged ? spread : even, n, k, s);
                auto* X = x.X.get<__nv_bfloat16>();
                auto* W = x.W.get<__nv_bfloat16>();
                auto* C = x.C.get<__nv_bfloat16>();
                // The grouped call's per-problem tables: host arrays of shapes, device arrays of pointers.
                std::vector<cublasOperation_t> ta(static_cast<std::size_t>(E), CUBLAS_OP_T), tb(static_cast<std::size_t>(E), CUBLAS_OP_N);
                std::vector<int> ms = x.m, ns(static_cast<std::size_t>(E), static_cast<int>(n)), ks(static_cast<std::size_t>(E), static_cast<int>(k)),
                                 lda(static_cast<std::size_t>(E), static_cast<int>(k)), ldb = lda, ldc = x.m, sizes(static_cast<std::size_t>(E), 1);
                std::vector<float> alphas(static_cast<std::size_t>(E), 1.0f), betas(static_cast<std::size_t>(E), 0.0f);
                std::vector<const void*> ha, hb;
                std::vector<void*> hc;
                for (int e = 0; e < E; ++e) {
                    ha.push_back(X + x.x_off[static_cast<std::size_t>(e)]);
                    hb.push_back(W + static_cast<long long>(e) * k * n);
                    hc.push_back(C + x.c_off[static_cast<std::size_t>(e)]);
                }
                DeviceBuffer pa(ha.size() * sizeof(void*)), pb(hb.size() * sizeof(void*)), pc(hc.size() * sizeof(void*));
                STRATA_CUDA(cudaMemcpy(pa.get(), ha.data(), ha.size() * sizeof(void*), cudaMemcpyHostToDevice));
                STRATA_CUDA(cudaMemcpy(pb.get(), hb.data(), hb.size() * sizeof(void*), cudaMemcpyHostToDevice));
                STRATA_CUDA(cudaMemcpy(pc.get(), hc.data(), hc.size() * sizeof(void*), cudaMemcpyHostToDevice));
                auto run = [&] {
                    if (std::string(variant) == "batched") {
                        STRATA_CUBLAS(cublasGemmStridedBatchedEx(blas.h, CUBLAS_OP_T, CUBLAS_OP_N, me, static_cast<int>(n), static_cast<int>(k), &one, X,
                                                                 CUDA_R_16BF, static_cast<int>(k), static_cast<long long>(me) * k, W, CUDA_R_16BF,
                                                                 static_cast<int>(k), static_cast<long long>(k) * n, &zero, C, CUDA_R_16BF, me,
                                                                 static_cast<long long>(me) * n, E, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                    } else if (ragged) {
                        STRATA_CUBLAS(cublasGemmGroupedBatchedEx(blas.h, ta.data(), tb.data(), ms.data(), ns.data(), ks.data(), alphas.data(),
                                                                 pa.get<const void*>(), CUDA_R_16BF, lda.data(), pb.get<const void*>(), CUDA_R_16BF,
                                                                 ldb.data(), betas.data(), pc.get<void*>(), CUDA_R_16BF, ldc.data(), E, sizes.data(),
                                                                 CUBLAS_COMPUTE_32F));
                    } else {
                        for (int e = 0; e < E; ++e)
                            STRATA_CUBLAS(cublasGemmEx(blas.h, CUBLAS_OP_T, CUBLAS_OP_N, me, static_cast<int>(n), static_cast<int>(k), &one, ha[static_cast<std::size_t>(e)],
                                                       CUDA_R_16BF, static_cast<int>(k), hb[static_cast<std::size_t>(e)], CUDA_R_16BF, static_cast<int>(k), &zero,
                                                       hc[static_cast<std::size_t>(e)], CUDA_R_16BF, me, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                    }
                };
                run();  // warm-up
                std::vector<double> times;
                for (int r = 0; r < timed; ++r) {
                    ev.start(s);
                    run();
                    ev.stop(s);
                    times.push_back(ev.seconds());
                }
                double rows = 0;
                for (int mi : x.m) rows += mi;
                const double flops = 2.0 * rows * static_cast<double>(n) * static_cast<double>(k);
                const Summary sm = rate_summary(flops, times);
                hwdb::Measurement m;
                m.kind = "grouped_gemm";
                m.device = device;
                m.key = make_key(std::string("bf16 ") + variant, {{"experts", double(E)}, {"m", double(me)}, {"n", double(n)}, {"k", double(k)}});
                m.unit = "flop/s";
                m.value = sm.median, m.p10 = sm.p10, m.p90 = sm.p90, m.samples = sm.samples;
                m.params = {{"experts", double(E)}, {"m", double(me)}, {"n", double(n)}, {"k", double(k)}, {"rows", rows}};
                m.labels = {{"dtype", "bf16"}, {"variant", variant}, {"imbalance", ragged ? "0.5-1.5" : "none"}, {"shape", sh.what},
                            {"impl", "cublas"}};
                ctx.add(std::move(m));
            }
        }
}

}  // namespace strata::profiler::cudab
