// CUDA backend, compute/communication interference: how much longer a BF16 GEMM takes while
// another kernel holds S of the GPU's SMs, as NCCL's and DeepEP's kernels do while they overlap
// compute (one CTA per channel, resident for the whole transfer). NCCL cannot show this with one
// rank, so two stand-ins play the communication kernel:
//   copy: S CTAs stream HBM (read + write), as a collective's CTAs move its chunks through local
//         memory; their solo rate is recorded with each point;
//   spin: S CTAs only occupy their SMs (no memory traffic): the SM share alone.
// Each stand-in CTA asks for more than half an SM's shared memory, so no two share an SM and the
// stand-in holds exactly S SMs. A third mode tells cuBLASLt the SMs left to it
// (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, what Transformer Engine does for the GEMMs it overlaps).
//
// Clocks: a 700 W H100 running GEMMs back to back is power-limited, so its clock depends on the
// recent load; a solo train measured after an idle gap runs 10-15 % faster than one measured under
// load. So the GPU is kept busy: everything of one point is enqueued without host gaps, the
// stand-in starts when the solo train before it ends (an event) and stops when the overlapped
// train ends (a flag set by a kernel on the GEMM stream), solo and overlapped trains alternate
// (ABBA), and each point starts after an untimed warm train. value = median over the pairs of
// t_with / t_alone - 1, the slowdown EngineOptions::overlap_slowdown models.
#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <vector>

#include "cuda_backend.hpp"
#include "cuda_common.cuh"
#include "cuda_lt.cuh"
#include "strata/profiler/stats.hpp"

namespace strata::profiler::cudab {

namespace {

constexpr int kProxyThreads = 512;  // NCCL's default CTA size is 512-640 threads

/// Device-side handshake, both counters only grow: `resident` counts stand-in CTAs that started,
/// `stop` is the epoch up to which stand-ins must end, `waits_timed_out` counts bounded waits that
/// gave up (reported as a warning, never a hang).
struct Flags {
    unsigned int resident;
    unsigned int stop;
    unsigned int waits_timed_out;
};

__global__ void proxy_copy(int4* a, int4* b, unsigned long long vec_per_cta, int max_rounds, Flags* f, unsigned int epoch) {
    extern __shared__ int4 reserve[];  // only reserved (one CTA per SM), never touched
    if (threadIdx.x == 0) atomicAdd(&f->resident, 1u);
    const volatile unsigned int* stop = &f->stop;
    int4* x = a + blockIdx.x * vec_per_cta;
    int4* y = b + blockIdx.x * vec_per_cta;
    constexpr unsigned long long kChunk = kProxyThreads * 32ull;  // 256 KiB per CTA between checks
    // Alternate the direction so no round's stores are dead. Each thread reads back only what it
    // wrote, so no barrier is needed and threads may leave independently.
    for (int r = 0; r < max_rounds; ++r) {
        const int4* src = (r & 1) ? y : x;
        int4* dst = (r & 1) ? x : y;
        for (unsigned long long base = 0; base < vec_per_cta; base += kChunk) {
            if (*stop >= epoch) return;
            const unsigned long long end = base + kChunk < vec_per_cta ? base + kChunk : vec_per_cta;
            for (unsigned long long i = base + threadIdx.x; i < end; i += blockDim.x) dst[i] = src[i];
        }
    }
    (void)reserve;
}

__global__ void proxy_spin(long long max_cycles, Flags* f, unsigned int epoch) {
    extern __shared__ int4 reserve[];
    if (threadIdx.x == 0) atomicAdd(&f->resident, 1u);
    const volatile unsigned int* stop = &f->stop;
    const long long t0 = clock64();
    while (*stop < epoch && clock64() - t0 < max_cycles) {
    }
    (void)reserve;
}

__global__ void wait_resident(Flags* f, unsigned int want, long long max_cycles) {
    const volatile unsigned int* resident = &f->resident;
    const long long t0 = clock64();
    while (*resident < want)
        if (clock64() - t0 > max_cycles) {
            atomicAdd(&f->waits_timed_out, 1u);
            return;
        }
}

__global__ void set_stop(Flags* f, unsigned int epoch) { atomicMax(&f->stop, epoch); }

class Events {
public:
    explicit Events(std::size_t n) : events_(n) {
        for (auto& e : events_) STRATA_CUDA(cudaEventCreate(&e));
    }
    ~Events() {
        for (auto e : events_)
            if (e) cudaEventDestroy(e);
    }
    Events(const Events&) = delete;
    Events& operator=(const Events&) = delete;
    cudaEvent_t operator[](std::size_t i) const { return events_[i]; }
    double seconds(std::size_t a, std::size_t b) const {
        STRATA_CUDA(cudaEventSynchronize(events_[b]));
        float ms = 0;
        STRATA_CUDA(cudaEventElapsedTime(&ms, events_[a], events_[b]));
        return static_cast<double>(ms) * 1e-3;
    }

private:
    std::vector<cudaEvent_t> events_;
};

}  // namespace

void bench_overlap(Context& ctx, const std::string& device) {
    const bool quick = ctx.opt.quick;
    int dev = 0, sms = 0, smem_per_sm = 0, clock_khz = 0;
    STRATA_CUDA(cudaGetDevice(&dev));
    STRATA_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    STRATA_CUDA(cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    STRATA_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
    const int reserve_bytes = smem_per_sm / 2 + 1024;
    STRATA_CUDA(cudaFuncSetAttribute(proxy_copy, cudaFuncAttributeMaxDynamicSharedMemorySize, reserve_bytes));
    STRATA_CUDA(cudaFuncSetAttribute(proxy_spin, cudaFuncAttributeMaxDynamicSharedMemorySize, reserve_bytes));
    const double cycles_per_s = clock_khz * 1e3;

    // GEMMs (tokens m, out n, in k): a dense square one, a Llama-70B MLP up-projection under TP 8,
    // and one expert of a fine-grained MoE (Qwen3-30B-A3B's 2048 -> 768 x 2) at 4096 tokens.
    const std::vector<std::array<long, 3>> shapes =
        quick ? std::vector<std::array<long, 3>>{{8192, 8192, 8192}}
              : std::vector<std::array<long, 3>>{{8192, 8192, 8192}, {16384, 7168, 8192}, {4096, 1536, 2048}};
    std::vector<int> holds = quick ? std::vector<int>{16, 32} : std::vector<int>{8, 16, 24, 32, 48, 66};
    holds.erase(std::remove_if(holds.begin(), holds.end(), [&](int s) { return s >= sms; }), holds.end());
    const int pairs = quick ? 1 : 3;  // ABBA blocks: 2 x pairs solo/overlapped pairs per point
    const double train_s = quick ? 0.02 : 0.04;

    LtHandle lt;
    Stream gs, ps;
    const cudaStream_t g = gs.get(), p = ps.get();
    DeviceBuffer ws(kWorkspaceBytes);
    DeviceBuffer flags_buf(sizeof(Flags));
    Flags* flags = flags_buf.get<Flags>();
    STRATA_CUDA(cudaMemset(flags, 0, sizeof(Flags)));
    unsigned int resident_total = 0, epoch = 0;
    // The copy stand-in's buffers: 2 x 256 MiB, far beyond L2, split evenly over its CTAs.
    const std::size_t proxy_bytes = 256u << 20;
    DeviceBuffer pa(proxy_bytes), pb(proxy_bytes);
    STRATA_CUDA(cudaMemsetAsync(pa.get(), 1, proxy_bytes, p));
    STRATA_CUDA(cudaMemsetAsync(pb.get(), 2, proxy_bytes, p));
    // Per pair: solo start/end, overlapped start/end (x2: ABBA), and the stand-in's go signal.
    Events ev(static_cast<std::size_t>(8 * pairs + 1));
    const std::size_t go = static_cast<std::size_t>(8 * pairs);
    const double l2 = l2_bytes();

    // Solo rate of the copy stand-in at each S (bytes read + written per second), 2 rounds.
    std::vector<double> proxy_Bps(holds.size());
    for (std::size_t i = 0; i < holds.size(); ++i) {
        const unsigned long long vec = proxy_bytes / sizeof(int4) / static_cast<unsigned>(holds[i]);
        std::vector<double> t;
        for (int r = 0; r < 4; ++r) {
            STRATA_CUDA(cudaEventRecord(ev[0], p));
            proxy_copy<<<holds[i], kProxyThreads, reserve_bytes, p>>>(pa.get<int4>(), pb.get<int4>(), vec, 2, flags, UINT_MAX);
            STRATA_CUDA_LAUNCHED();
            resident_total += static_cast<unsigned>(holds[i]);
            STRATA_CUDA(cudaEventRecord(ev[1], p));
            if (r > 0) t.push_back(ev.seconds(0, 1));  // the first is a warm-up
            else STRATA_CUDA(cudaEventSynchronize(ev[1]));
        }
        proxy_Bps[i] = 2.0 * 2.0 * static_cast<double>(vec * sizeof(int4) * holds[i]) / quantile(t, 0.5);
    }

    // Modes: the stand-in, and whether the GEMM is told how many SMs are left to it.
    struct Mode {
        const char* proxy;
        bool sm_target;
    };
    const std::vector<Mode> modes{{"copy", false}, {"spin", false}, {"copy", true}};
    const int total = static_cast<int>(shapes.size() * holds.size() * modes.size());
    int step = 0;
    for (const auto& [m, n, k] : shapes) {
        const std::size_t a_b = static_cast<std::size_t>(m) * k * 2, b_b = static_cast<std::size_t>(k) * n * 2;
        const std::size_t d_b = static_cast<std::size_t>(m) * n * 2;
        // Copies of A and B so consecutive launches read cold data (> 2x L2), as in bench_gemm.
        const std::size_t copies = std::max<std::size_t>(1, static_cast<std::size_t>(std::ceil(2.0 * l2 / static_cast<double>(a_b + b_b))));
        DeviceBuffer A(a_b * copies), B(b_b * copies), D(d_b);
        fill_dt(Dt::bf16, A.get(), a_b * copies / 2, 5, g);
        fill_dt(Dt::bf16, B.get(), b_b * copies / 2, 6, g);
        LtGemm full(lt.h, Dt::bf16, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, m, k, m);
        const cublasLtMatmulAlgo_t full_algo = full.algos(1).front();  // what a framework's default gets
        int launched = 0;
        auto gemm = [&](LtGemm& mm, const cublasLtMatmulAlgo_t& algo) {
            const std::size_t c = static_cast<std::size_t>(launched++) % copies;
            mm.run(algo, A.bytes_at(c * a_b), B.bytes_at(c * b_b), D.get(), 1.0f, 0.0f, ws.get(), g);
        };
        for (int w = 0; w < 3; ++w) gemm(full, full_algo);
        STRATA_CUDA(cudaEventRecord(ev[0], g));
        for (int w = 0; w < 5; ++w) gemm(full, full_algo);
        STRATA_CUDA(cudaEventRecord(ev[1], g));
        const double t_one = ev.seconds(0, 1) / 5;
        const int train = std::clamp(static_cast<int>(std::ceil(train_s / t_one)), 5, 20000);
        auto enqueue_train = [&](LtGemm& mm, const cublasLtMatmulAlgo_t& algo, std::size_t e0, std::size_t e1) {
            STRATA_CUDA(cudaEventRecord(ev[e0], g));
            for (int r = 0; r < train; ++r) gemm(mm, algo);
            STRATA_CUDA(cudaEventRecord(ev[e1], g));
        };
        // Warm: about 0.4 s of back-to-back GEMMs, so the first point is measured at the loaded
        // clock like the others.
        for (int w = 0; w < 10; ++w) enqueue_train(full, full_algo, 0, 1);
        STRATA_CUDA(cudaEventSynchronize(ev[1]));

        for (const Mode& mode : modes) {
            for (std::size_t hi = 0; hi < holds.size(); ++hi) {
                ctx.progress("overlap", step++, total);
                ctx.check();
                const int S = holds[hi];
                LtGemm target(lt.h, Dt::bf16, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, m, k, m);
                if (mode.sm_target) target.set_sm_count_target(sms - S);
                const cublasLtMatmulAlgo_t target_algo = target.algos(1).front();
                const unsigned long long vec = proxy_bytes / sizeof(int4) / static_cast<unsigned>(S);
                // Bounds that only matter if a flag never arrives: about 30 s of stand-in and 5 s
                // of waiting for it to be resident, far beyond a 40 ms train.
                const int max_rounds = std::max(2, static_cast<int>(30.0 * proxy_Bps[hi] / (2.0 * static_cast<double>(vec * sizeof(int4) * S))));
                enqueue_train(target, target_algo, 0, 1);  // untimed: warm, and the target's first launch
                for (int pr = 0; pr < 2 * pairs; ++pr) {
                    const std::size_t b = static_cast<std::size_t>(4 * pr);  // solo b, b+1; overlapped b+2, b+3
                    auto overlapped = [&] {
                        ++epoch;
                        STRATA_CUDA(cudaEventRecord(ev[go], g));
                        STRATA_CUDA(cudaStreamWaitEvent(p, ev[go], 0));
                        if (mode.proxy[0] == 'c')
                            proxy_copy<<<S, kProxyThreads, reserve_bytes, p>>>(pa.get<int4>(), pb.get<int4>(), vec, max_rounds, flags, epoch);
                        else
                            proxy_spin<<<S, kProxyThreads, reserve_bytes, p>>>(static_cast<long long>(30.0 * cycles_per_s), flags, epoch);
                        STRATA_CUDA_LAUNCHED();
                        resident_total += static_cast<unsigned>(S);
                        wait_resident<<<1, 1, 0, g>>>(flags, resident_total, static_cast<long long>(5.0 * cycles_per_s));
                        STRATA_CUDA_LAUNCHED();
                        enqueue_train(target, target_algo, b + 2, b + 3);
                        set_stop<<<1, 1, 0, g>>>(flags, epoch);
                        STRATA_CUDA_LAUNCHED();
                    };
                    // ABBA: solo first in even slots, overlapped first in odd ones.
                    if (pr % 2 == 0) {
                        enqueue_train(full, full_algo, b, b + 1);
                        overlapped();
                    } else {
                        overlapped();
                        enqueue_train(full, full_algo, b, b + 1);
                    }
                }
                STRATA_CUDA(cudaStreamSynchronize(g));
                STRATA_CUDA(cudaStreamSynchronize(p));
                std::vector<double> ratio, with, alone;
                for (int pr = 0; pr < 2 * pairs; ++pr) {
                    const std::size_t b = static_cast<std::size_t>(4 * pr);
                    alone.push_back(ev.seconds(b, b + 1));
                    with.push_back(ev.seconds(b + 2, b + 3));
                    ratio.push_back(with.back() / alone.back() - 1.0);
                }
                const Summary s = summarize(ratio);
                hwdb::Measurement row;
                row.kind = "overlap";
                row.device = device;
                row.key = make_key(std::string("bf16 ") + mode.proxy + (mode.sm_target ? " sm_target" : ""),
                                   {{"m", m}, {"n", n}, {"k", k}, {"sms", S}});
                row.unit = "ratio";
                row.value = s.median;
                row.p10 = s.p10;
                row.p90 = s.p90;
                row.samples = s.samples;
                const double t_alone = quantile(alone, 0.5);
                row.params = {{"m", m},
                              {"n", n},
                              {"k", k},
                              {"sms", S},
                              {"sm_count", sms},
                              {"sm_fraction", static_cast<double>(S) / sms},
                              {"train", train},
                              {"t_alone_s", t_alone},
                              {"t_with_s", quantile(with, 0.5)},
                              {"gemm_tflops", 2.0 * m * n * k * train / t_alone / 1e12}};
                if (mode.proxy[0] == 'c') row.params["proxy_Bps"] = proxy_Bps[hi];
                row.labels = {{"proxy", mode.proxy}, {"gemm_sms", mode.sm_target ? "target" : "all"}, {"dtype", "bf16"}};
                ctx.add(std::move(row));
            }
        }
    }
    Flags host{};
    STRATA_CUDA(cudaMemcpy(&host, flags, sizeof host, cudaMemcpyDeviceToHost));
    if (host.waits_timed_out > 0)
        ctx.warn("overlap: " + std::to_string(host.waits_timed_out) +
                 " waits for the stand-in's CTAs to be resident gave up after 5 s (those points are not overlapped)");
}

}  // namespace strata::profiler::cudab
