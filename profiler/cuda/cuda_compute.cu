// CUDA backend, compute side: cuBLASLt GEMMs over a Transformer layer's shapes and dtypes
// (heuristic top algorithms, the best kept), unfused attention (cuBLASLt strided-batched GEMMs +
// our softmax kernels; no cuDNN/FlashAttention dependency), and memory-bound kernels (copy, triad,
// layernorm-like) as achieved bandwidth. Device time from CUDA events on the stream that runs the
// work; warm-ups first; medians and p10/p90 of the timed launches; random inputs; buffers rotated
// over more than 2x L2 so each launch reads cold data.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <vector>

#include "cuda_backend.hpp"
#include "cuda_common.cuh"
#include "cuda_lt.cuh"
#include "strata/profiler/stats.hpp"

namespace strata::profiler::cudab {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

hwdb::Measurement rate_point(const std::string& kind, const std::string& device, const std::string& key, const std::string& unit,
                             double work, const std::vector<double>& times) {
    const Summary s = rate_summary(work, times);
    hwdb::Measurement m;
    m.kind = kind;
    m.device = device;
    m.key = key;
    m.unit = unit;
    m.value = s.median;
    m.p10 = s.p10;
    m.p90 = s.p90;
    m.samples = s.samples;
    return m;
}

// Sustained: one large bf16 GEMM back to back for seconds, as a training step keeps the tensor
// cores busy. The grid's timings are short and run at boost clocks; a GPU held at its power limit
// clocks down. The rate of the first ten launches and of the last second, kind "gemm_sustained",
// stored for the model to come (docs/profiler.md, "Sustained GEMMs").
void bench_gemm_sustained(Context& ctx, const std::string& device, LtHandle& lt, void* ws, cudaStream_t s) {
    const long n = 8192;
    const double seconds = ctx.opt.quick ? 3.0 : 10.0;
    const std::size_t bytes = static_cast<std::size_t>(n) * n * 2;
    if (3 * bytes > free_bytes() * 8 / 10) return;
    DeviceBuffer A(bytes), B(bytes), D(bytes);
    fill_dt(Dt::bf16, A.get(), bytes / 2, 5, s);
    fill_dt(Dt::bf16, B.get(), bytes / 2, 7, s);
    LtGemm g(lt.h, Dt::bf16, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, n, n, n);
    const auto algo = g.algos(1)[0];
    EventTimer ev;
    std::vector<std::pair<double, double>> batches;  // (device seconds so far, seconds a launch)
    double t = 0;
    while (t < seconds) {
        ctx.check();
        ev.start(s);
        for (int r = 0; r < 10; ++r) g.run(algo, A.get(), B.get(), D.get(), 1.0f, 0.0f, ws, s);
        ev.stop(s);
        const double b = ev.seconds();
        t += b;
        batches.push_back({t, b / 10});
    }
    double last = 0;
    int counted = 0;
    for (const auto& [end, per] : batches)
        if (end >= t - 1.0) last += per, ++counted;
    last /= std::max(counted, 1);
    const double flops = 2.0 * static_cast<double>(n) * n * n, burst = flops / batches.front().second, sustained = flops / last;
    hwdb::Measurement m = rate_point("gemm_sustained", device, make_key("bf16", {{"m", double(n)}, {"n", double(n)}, {"k", double(n)}}),
                                     "flop/s", flops, {last});
    m.params = {{"m", double(n)}, {"n", double(n)}, {"k", double(n)}, {"seconds", t}, {"burst_flop_s", burst}, {"sustained_over_burst", sustained / burst}};
    m.labels = {{"dtype", "bf16"}, {"impl", "cublaslt"}};
    ctx.add(std::move(m));
}

}  // namespace

// ----------------------------------------------------------------------------------- GEMM
void bench_gemm(Context& ctx, const std::string& device) {
    const bool quick = ctx.opt.quick;
    int dev = 0, major = 0, minor = 0;
    STRATA_CUDA(cudaGetDevice(&dev));
    STRATA_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    STRATA_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    const bool has_fp8 = major * 10 + minor >= 89;

    // Shapes (tokens m, out n, in k) of one Transformer layer (Megatron-LM's TP split: column-
    // parallel QKV/up/gate split n, row-parallel out/down split k), and the logits GEMM.
    const std::vector<long> hiddens = quick ? std::vector<long>{4096} : std::vector<long>{2048, 4096, 8192, 16384};
    const std::vector<long> tokens = quick ? std::vector<long>{4096} : std::vector<long>{1024, 4096, 16384};
    const std::vector<long> tps = quick ? std::vector<long>{1, 8} : std::vector<long>{1, 2, 4, 8};
    const long vocab = 128256;  // Llama-3's vocabulary (divisible by 8 x 16)
    std::vector<std::array<long, 3>> shapes;
    for (long h : hiddens)
        for (long T : tokens)
            for (long tp : tps) {
                const long swiglu = 2 * ((8 * h / 3 + 255) / 256 * 256);  // gate+up, 8h/3 rounded like Llama
                const std::vector<std::pair<long, long>> nk{{3 * h / tp, h}, {h, h / tp}, {4 * h / tp, h},
                                                            {h, 4 * h / tp}, {swiglu / tp, h}, {vocab / tp, h}};
                for (auto [n, k] : nk) shapes.push_back({T, n, k});
            }
    std::sort(shapes.begin(), shapes.end());
    shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
    // Smallest first: a dtype that runs out of its time budget loses its largest shapes, not a
    // whole region of the grid.
    std::stable_sort(shapes.begin(), shapes.end(), [](const auto& a, const auto& b) {
        return static_cast<double>(a[0]) * a[1] * a[2] < static_cast<double>(b[0]) * b[1] * b[2];
    });

    // Seconds per dtype (measured on one H100: bf16 and fp8 finish the full grid well inside
    // theirs; fp32/tf32 lose their largest shapes). Keeps scripts/gpu-profile.sh under 8 minutes.
    struct DtBudget {
        Dt dt;
        double budget_s;
    };
    std::vector<DtBudget> dts = quick ? std::vector<DtBudget>{{Dt::bf16, 6}, {Dt::fp16, 3}, {Dt::tf32, 3}, {Dt::fp32, 3}, {Dt::fp8, 4}}
                                      : std::vector<DtBudget>{{Dt::bf16, 60}, {Dt::fp16, 40}, {Dt::tf32, 45}, {Dt::fp32, 60}, {Dt::fp8, 45}};
    if (!has_fp8) {
        dts.pop_back();
        ctx.warn("gemm: fp8 skipped (needs sm_89 or newer)");
    }
    if (ctx.opt.plan_shapes) {  // a plan's own GEMMs, in the dtype the runtime runs them
        shapes.clear();
        for (const Options::GemmShape& g : ctx.opt.gemm_shapes) shapes.push_back({g.m, g.n, g.k});
        dts = {{ctx.opt.plan_dtype == "bf16" ? Dt::bf16 : ctx.opt.plan_dtype == "fp16" ? Dt::fp16 : Dt::fp32, 60}};
    }
    const int top_algos = quick ? 2 : 3;
    const int min_timed = quick ? 10 : 10, max_timed = quick ? 10 : 20;
    const double l2 = l2_bytes();

    LtHandle lt;
    Stream stream;
    const cudaStream_t s = stream.get();
    DeviceBuffer ws(kWorkspaceBytes);
    EventTimer ev;
    const int total = static_cast<int>(shapes.size() * dts.size());
    int step = 0;
    for (const auto& [dt, budget] : dts) {
        const auto t_dtype = Clock::now();
        int skipped = 0;
        for (const auto& shp : shapes) {
            ctx.progress(std::string("gemm ") + dt_name(dt), step++, total);
            ctx.check();
            const long m = shp[0], n = shp[1], k = shp[2];
            if (since(t_dtype) > budget) {
                ++skipped;
                continue;
            }
            const std::size_t a_b = static_cast<std::size_t>(m) * k * in_bytes(dt), b_b = static_cast<std::size_t>(k) * n * in_bytes(dt);
            const std::size_t d_b = static_cast<std::size_t>(m) * n * out_bytes(dt);
            // Copies of A and B so consecutive launches read different memory: > 2x L2 in all.
            std::size_t copies = static_cast<std::size_t>(std::ceil(2.0 * l2 / static_cast<double>(a_b + b_b)));
            copies = std::clamp<std::size_t>(copies, 1, std::max<std::size_t>(1, (1ull << 30) / (a_b + b_b)));
            if ((a_b + b_b) * copies + d_b > free_bytes() * 8 / 10) {
                ++skipped;
                continue;
            }
            DeviceBuffer A(a_b * copies), B(b_b * copies), D(d_b);
            fill_dt(dt, A.get(), a_b * copies / in_bytes(dt), 11 + step, s);
            fill_dt(dt, B.get(), b_b * copies / in_bytes(dt), 97 + step, s);
            // TN layout (A stored k x m, B k x n, column-major): the layout fp8 requires, used for
            // every dtype so they are comparable.
            LtGemm g(lt.h, dt, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, k, k, m);
            const auto algos = g.algos(top_algos);
            std::size_t it = 0;
            auto launch = [&](const cublasLtMatmulAlgo_t& al) {
                const std::size_t c = it++ % copies;
                g.run(al, A.bytes_at(c * a_b), B.bytes_at(c * b_b), D.get(), 1.0f, 0.0f, ws.get(), s);
            };
            // Auto-tune over the heuristic's top algorithms (cuBLASLt sample LtSgemmSimpleAutoTuning):
            // one warm-up and three timed launches each; keep the fastest median.
            std::size_t best = 0;
            double best_t = 1e30;
            for (std::size_t ai = 0; ai < algos.size(); ++ai) {
                launch(algos[ai]);
                std::vector<double> t;
                for (int r = 0; r < 3; ++r) {
                    ev.start(s);
                    launch(algos[ai]);
                    ev.stop(s);
                    t.push_back(ev.seconds());
                }
                const double med = quantile(t, 0.5);
                if (med < best_t) best_t = med, best = ai;
            }
            const int timed = std::clamp(static_cast<int>(0.1 / std::max(best_t, 1e-9)), min_timed, max_timed);
            std::vector<double> times;
            for (int r = 0; r < timed; ++r) {
                ev.start(s);
                launch(algos[best]);
                ev.stop(s);
                times.push_back(ev.seconds());
            }
            const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
            hwdb::Measurement mm = rate_point("gemm", device, make_key(dt_name(dt), {{"m", double(m)}, {"n", double(n)}, {"k", double(k)}}),
                                              "flop/s", flops, times);
            mm.params = {{"m", double(m)}, {"n", double(n)}, {"k", double(k)}, {"algos_tried", double(algos.size())}};
            mm.labels = {{"dtype", dt_name(dt)}, {"layout", "TN"}, {"cache", "cold"}, {"impl", "cublaslt"}};
            if (ctx.opt.plan_shapes) mm.labels["origin"] = "plan";
            ctx.add(std::move(mm));
        }
        if (skipped > 0)
            ctx.warn(std::string("gemm ") + dt_name(dt) + ": " + std::to_string(skipped) + " largest shapes skipped (time budget " +
                     std::to_string(static_cast<int>(budget)) + " s or memory)");
    }
    if (!ctx.opt.plan_shapes) {
        ctx.progress("gemm sustained", 0, 1);
        bench_gemm_sustained(ctx, device, lt, ws.get(), s);
    }
}

// ------------------------------------------------------------------------------- attention
namespace {

__device__ inline float block_reduce(float v, bool is_max, float* sh) {
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    const int nw = (blockDim.x + 31) / 32;
    v = threadIdx.x < nw ? sh[threadIdx.x] : (is_max ? -INFINITY : 0.0f);
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) {
            const float w = __shfl_xor_sync(0xffffffffu, v, o);
            v = is_max ? fmaxf(v, w) : v + w;
        }
    if (threadIdx.x == 0) sh[32] = v;
    __syncthreads();
    const float r = sh[32];
    __syncthreads();
    return r;
}

// One block per score row (query q of one (batch, head)): P = softmax(S) over keys, keys after q
// masked when causal. S is already scaled by 1/sqrt(d) in the GEMM. fp32 arithmetic, bf16 storage.
__global__ void softmax_rows(const __nv_bfloat16* S, __nv_bfloat16* P, int len, int seq_q, int causal) {
    __shared__ float sh[33];
    const long long row = blockIdx.x;
    const __nv_bfloat16* s = S + row * len;
    __nv_bfloat16* p = P + row * len;
    const int q = static_cast<int>(row % seq_q);
    const int limit = causal ? min(q + 1, len) : len;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < limit; j += blockDim.x) mx = fmaxf(mx, __bfloat162float(s[j]));
    mx = block_reduce(mx, true, sh);
    float sum = 0;
    for (int j = threadIdx.x; j < limit; j += blockDim.x) sum += __expf(__bfloat162float(s[j]) - mx);
    sum = block_reduce(sum, false, sh);
    const float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < len; j += blockDim.x)
        p[j] = __float2bfloat16(j < limit ? __expf(__bfloat162float(s[j]) - mx) * inv : 0.0f);
}

// Softmax backward in place: dS = P * (dP - sum_j P_j dP_j), one block per row.
__global__ void softmax_rows_bwd(const __nv_bfloat16* P, __nv_bfloat16* dP, int len) {
    __shared__ float sh[33];
    const long long row = blockIdx.x;
    const __nv_bfloat16* p = P + row * len;
    __nv_bfloat16* d = dP + row * len;
    float dot = 0;
    for (int j = threadIdx.x; j < len; j += blockDim.x) dot += __bfloat162float(p[j]) * __bfloat162float(d[j]);
    dot = block_reduce(dot, false, sh);
    for (int j = threadIdx.x; j < len; j += blockDim.x)
        d[j] = __float2bfloat16(__bfloat162float(p[j]) * (__bfloat162float(d[j]) - dot));
}

}  // namespace

void bench_attention(Context& ctx, const std::string& device) {
    const bool quick = ctx.opt.quick;
    const std::vector<long> seqs = quick ? std::vector<long>{1024, 4096} : std::vector<long>{512, 1024, 2048, 4096, 8192, 16384};
    const std::vector<long> dims = quick ? std::vector<long>{128} : std::vector<long>{64, 128};
    const int timed = quick ? 5 : 10;
    LtHandle lt;
    Stream stream;
    const cudaStream_t st = stream.get();
    DeviceBuffer ws(kWorkspaceBytes);
    EventTimer ev;
    const int total = static_cast<int>(seqs.size() * dims.size());
    int step = 0;
    for (long d : dims)
        for (long s : seqs) {
            ctx.progress("attention", step++, total);
            ctx.check();
            // Hidden 2048 worth of heads; tokens per batch 16k (batch = 16384 / seq, at least 1).
            const long h = 2048 / d, b = std::max(1L, 16384 / s), bh = b * h;
            const std::size_t qkv = static_cast<std::size_t>(bh * s * d) * 2, sc = static_cast<std::size_t>(bh) * s * s * 2;
            if (7 * qkv + 2 * sc > free_bytes() * 8 / 10) {
                ctx.warn("attention: seq " + std::to_string(s) + " head_dim " + std::to_string(d) + " skipped (memory)");
                continue;
            }
            DeviceBuffer Q(qkv), K(qkv), V(qkv), O(qkv), dO(qkv), dQ(qkv), dK(qkv), dV(qkv), S(sc), dP(sc);
            for (auto* buf : {&Q, &K, &V, &dO}) fill<__nv_bfloat16>(buf->get(), qkv / 2, 5 + step, 1.0f, st);
            const long long sq = static_cast<long long>(s) * d, ss = static_cast<long long>(s) * s;
            const int B = static_cast<int>(bh);
            // Row-major (s x d) per head, viewed column-major as (d x s); derivations in docs/profiler.md.
            LtGemm scores(lt.h, Dt::bf16, CUBLAS_OP_T, CUBLAS_OP_N, s, s, d, d, d, s, B, sq, sq, ss);   // S^T = K Q^T
            LtGemm pv(lt.h, Dt::bf16, CUBLAS_OP_N, CUBLAS_OP_N, d, s, s, d, s, d, B, sq, ss, sq);       // O^T = V^T P^T
            LtGemm dv(lt.h, Dt::bf16, CUBLAS_OP_N, CUBLAS_OP_T, d, s, s, d, s, d, B, sq, ss, sq);       // dV^T = dO^T P
            LtGemm dp(lt.h, Dt::bf16, CUBLAS_OP_T, CUBLAS_OP_N, s, s, d, d, d, s, B, sq, sq, ss);       // dP^T = V dO^T
            LtGemm dq(lt.h, Dt::bf16, CUBLAS_OP_N, CUBLAS_OP_N, d, s, s, d, s, d, B, sq, ss, sq);       // dQ^T = K^T dS^T
            LtGemm dk(lt.h, Dt::bf16, CUBLAS_OP_N, CUBLAS_OP_T, d, s, s, d, s, d, B, sq, ss, sq);       // dK^T = Q^T dS
            const auto a_sc = scores.algos(1)[0], a_pv = pv.algos(1)[0], a_dv = dv.algos(1)[0], a_dp = dp.algos(1)[0],
                       a_dq = dq.algos(1)[0], a_dk = dk.algos(1)[0];
            const float scale = 1.0f / std::sqrt(static_cast<float>(d));
            const auto rows = static_cast<unsigned>(bh * s);
            for (int causal : {0, 1}) {
                auto fwd = [&] {
                    scores.run(a_sc, K.get(), Q.get(), S.get(), scale, 0.0f, ws.get(), st);
                    softmax_rows<<<rows, 256, 0, st>>>(S.get<__nv_bfloat16>(), S.get<__nv_bfloat16>(), static_cast<int>(s),
                                                       static_cast<int>(s), causal);
                    STRATA_CUDA_LAUNCHED();
                    pv.run(a_pv, V.get(), S.get(), O.get(), 1.0f, 0.0f, ws.get(), st);
                };
                auto bwd = [&] {  // S holds P from the forward pass
                    dv.run(a_dv, dO.get(), S.get(), dV.get(), 1.0f, 0.0f, ws.get(), st);
                    dp.run(a_dp, V.get(), dO.get(), dP.get(), 1.0f, 0.0f, ws.get(), st);
                    softmax_rows_bwd<<<rows, 256, 0, st>>>(S.get<__nv_bfloat16>(), dP.get<__nv_bfloat16>(), static_cast<int>(s));
                    STRATA_CUDA_LAUNCHED();
                    dq.run(a_dq, K.get(), dP.get(), dQ.get(), scale, 0.0f, ws.get(), st);
                    dk.run(a_dk, Q.get(), dP.get(), dK.get(), scale, 0.0f, ws.get(), st);
                };
                // FLOP convention (FlashAttention papers): fwd 4*b*h*s^2*d, halved when causal;
                // bwd 2.5 x fwd. Our unfused kernels compute the full s x s scores even when
                // causal, so causal rows show the useful-FLOP rate.
                const double fwd_flops = 4.0 * static_cast<double>(bh) * static_cast<double>(s) * static_cast<double>(s) *
                                         static_cast<double>(d) * (causal ? 0.5 : 1.0);
                for (const char* dir : {"fwd", "bwd"}) {
                    const bool is_bwd = dir[0] == 'b';
                    fwd();
                    if (is_bwd) bwd();
                    std::vector<double> times;
                    for (int r = 0; r < timed; ++r) {
                        if (is_bwd) fwd();  // refresh P, untimed
                        ev.start(st);
                        if (is_bwd)
                            bwd();
                        else
                            fwd();
                        ev.stop(st);
                        times.push_back(ev.seconds());
                    }
                    const double flops = is_bwd ? 2.5 * fwd_flops : fwd_flops;
                    hwdb::Measurement m = rate_point("attention", device,
                                                     make_key(std::string("bf16 ") + dir + (causal ? " causal" : ""),
                                                              {{"seq", double(s)}, {"head_dim", double(d)}, {"batch", double(b)}, {"heads", double(h)}}),
                                                     "flop/s", flops, times);
                    m.params = {{"seq", double(s)}, {"head_dim", double(d)}, {"batch", double(b)}, {"heads", double(h)}};
                    m.labels = {{"dtype", "bf16"}, {"causal", causal ? "1" : "0"}, {"direction", dir}, {"impl", "unfused"}};
                    ctx.add(std::move(m));
                }
            }
        }
}

// ----------------------------------------------------------------------- memory-bound kernels
namespace {

__global__ void k_copy(const float4* __restrict__ b, float4* __restrict__ a, long long n4) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n4; i += static_cast<long long>(gridDim.x) * blockDim.x)
        a[i] = b[i];
}
__global__ void k_triad(const float4* __restrict__ b, const float4* __restrict__ c, float4* __restrict__ a, float s, long long n4) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n4; i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const float4 x = b[i], y = c[i];
        a[i] = make_float4(x.x + s * y.x, x.y + s * y.y, x.z + s * y.z, x.w + s * y.w);
    }
}
// Layernorm-like: one block per row of `cols` floats; mean and variance in one pass (sum, sum of
// squares), then normalise. Reads the row twice (the second time mostly from L1/L2) and writes it.
__global__ void k_layernorm(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float sh[33];
    const float* r = x + static_cast<long long>(blockIdx.x) * cols;
    float* o = y + static_cast<long long>(blockIdx.x) * cols;
    float s1 = 0, s2 = 0;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float v = r[j];
        s1 += v;
        s2 += v * v;
    }
    s1 = block_reduce(s1, false, sh);
    s2 = block_reduce(s2, false, sh);
    const float mean = s1 / cols, inv = rsqrtf(fmaxf(s2 / cols - mean * mean, 0.0f) + 1e-5f);
    for (int j = threadIdx.x; j < cols; j += blockDim.x) o[j] = (r[j] - mean) * inv;
}

}  // namespace

void bench_membw(Context& ctx, const std::string& device) {
    const bool quick = ctx.opt.quick;
    const double l2 = l2_bytes();
    int dev = 0, sms = 0;
    STRATA_CUDA(cudaGetDevice(&dev));
    STRATA_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    // Total bytes moved per launch (all arrays), 4 KiB .. 1 GiB (quick: .. 64 MiB), x4 steps.
    std::vector<double> sizes;
    for (double b = 4096; b <= (quick ? 64.0 : 1024.0) * (1 << 20) * 1.0001; b *= 4) sizes.push_back(b);
    // Each array lives in a pool of >= 4x L2 and successive launches use different offsets, so
    // small sizes are not served from L2 (nccl-tests shifts its buffers the same way).
    const std::size_t pool = static_cast<std::size_t>(std::max(4.0 * l2, sizes.back() / 2)) + 4096;
    Stream stream;
    const cudaStream_t st = stream.get();
    DeviceBuffer A(pool), B(pool), C(pool);
    fill<float>(B.get(), pool / 4, 1, 1.0f, st);
    fill<float>(C.get(), pool / 4, 2, 1.0f, st);
    EventTimer ev;
    const int timed = quick ? 10 : 20;
    const int total = static_cast<int>(sizes.size() * 3);
    int step = 0;
    for (const char* kernel : {"copy", "triad", "layernorm"}) {
        const int arrays = kernel[0] == 't' ? 3 : 2;  // triad reads b, c and writes a
        for (double bytes : sizes) {
            ctx.progress("membw", step++, total);
            ctx.check();
            const std::size_t per = static_cast<std::size_t>(bytes / arrays) / 256 * 256;  // bytes per array, 256-aligned
            if (per < 1024) continue;
            const std::size_t slots = std::max<std::size_t>(1, (pool - 4096) / per);
            const long long n4 = static_cast<long long>(per / 16);
            const int cols = 4096, rows = static_cast<int>(per / 4 / cols);
            if (kernel[0] == 'l' && rows < 1) continue;
            const unsigned grid = static_cast<unsigned>(std::min<long long>((n4 + 255) / 256, 4LL * sms * 8));
            auto launch = [&](int it) {
                const std::size_t off = (static_cast<std::size_t>(it) % slots) * per;
                if (kernel[0] == 'c')
                    k_copy<<<grid, 256, 0, st>>>(reinterpret_cast<const float4*>(B.bytes_at(off)), reinterpret_cast<float4*>(A.bytes_at(off)), n4);
                else if (kernel[0] == 't')
                    k_triad<<<grid, 256, 0, st>>>(reinterpret_cast<const float4*>(B.bytes_at(off)), reinterpret_cast<const float4*>(C.bytes_at(off)),
                                                  reinterpret_cast<float4*>(A.bytes_at(off)), 0.5f, n4);
                else
                    k_layernorm<<<static_cast<unsigned>(rows), 256, 0, st>>>(reinterpret_cast<const float*>(B.bytes_at(off)),
                                                                             reinterpret_cast<float*>(A.bytes_at(off)), cols);
                STRATA_CUDA_LAUNCHED();
            };
            for (int w = 0; w < 3; ++w) launch(w);
            std::vector<double> times;
            for (int r = 0; r < timed; ++r) {
                ev.start(st);
                launch(r + 3);
                ev.stop(st);
                times.push_back(ev.seconds());
            }
            const double moved = kernel[0] == 'l' ? 2.0 * rows * cols * 4 : static_cast<double>(per) * arrays;
            hwdb::Measurement m = rate_point("membw", device, make_key(kernel, {{"bytes", moved}}), "B/s", moved, times);
            m.params = {{"bytes", moved}};
            m.labels = {{"kernel", kernel}, {"cache", "cold"}};
            ctx.add(std::move(m));
        }
    }
}

}  // namespace strata::profiler::cudab
