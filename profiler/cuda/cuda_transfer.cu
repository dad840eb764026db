// CUDA backend, data movement: device inventory and versions, memcpy H2D/D2H (pinned and
// pageable) and D2D over sizes, and NCCL collectives (all-reduce, all-gather, reduce-scatter,
// all-to-all, send/recv) over sizes and group sizes with nccl-tests' algbw/busbw. One process,
// one thread per GPU, communicators from ncclCommInitAll. With one visible GPU the collectives run
// with nranks = 1 (a local copy): the rows are labelled representative=0 and never fitted.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "cuda_backend.hpp"
#include "cuda_common.cuh"
#include "strata/profiler/busbw.hpp"
#include "strata/profiler/stats.hpp"

namespace strata::profiler::cudab {

namespace {
std::string dotted(long v, long major_div, long minor_div, long minor_mod) {
    return std::to_string(v / major_div) + "." + std::to_string((v / minor_div) % minor_mod);
}
}  // namespace

DeviceInfo query_devices() {
    DeviceInfo di;
    STRATA_CUDA(cudaGetDeviceCount(&di.count));
    if (di.count < 1) throw RuntimeError("cuda backend: no CUDA device visible");
    for (int d = 0; d < di.count; ++d) {
        cudaDeviceProp p{};
        STRATA_CUDA(cudaGetDeviceProperties(&p, d));
        di.names += (d ? ", " : "") + std::string(p.name);
        if (d == 0) {
            di.name = p.name;
            di.sm_count = p.multiProcessorCount;
            di.cc_major = p.major;
            di.cc_minor = p.minor;
            di.l2_bytes = p.l2CacheSize;
            di.hbm_bytes = static_cast<double>(p.totalGlobalMem);
            int khz = 0;
            STRATA_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, d));
            di.sm_clock_mhz = khz / 1e3;
            STRATA_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, d));
            di.mem_clock_mhz = khz / 1e3;
        }
    }
    int v = 0;
    STRATA_CUDA(cudaDriverGetVersion(&v));
    di.driver = dotted(v, 1000, 10, 100);  // e.g. 13000 -> 13.0 (the CUDA version the driver supports)
    STRATA_CUDA(cudaRuntimeGetVersion(&v));
    di.runtime = dotted(v, 1000, 10, 100);
    const long lt = static_cast<long>(cublasLtGetVersion());
    di.cublaslt = std::to_string(lt / 10000) + "." + std::to_string((lt / 100) % 100) + "." + std::to_string(lt % 100);
    STRATA_NCCL(ncclGetVersion(&v));
    di.nccl = std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
    // NCCL tuning variables change what a collective measures: record them with the run.
    for (const char* e : {"NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MAX_CTAS",
                          "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_HCA", "NCCL_NET_GDR_LEVEL"})
        if (const char* val = std::getenv(e)) di.nccl += std::string(" ") + e + "=" + val;
    return di;
}

// --------------------------------------------------------------------------------- memcpy
void bench_memcpy(Context& ctx, const std::string& device) {
    const bool quick = ctx.opt.quick;
    std::vector<double> sizes;
    for (double b = 4096; b <= (quick ? 64.0 : 1024.0) * (1 << 20) * 1.0001; b *= 4) sizes.push_back(b);
    const auto maxb = static_cast<std::size_t>(sizes.back());
    Stream stream;
    const cudaStream_t st = stream.get();
    DeviceBuffer d0(maxb), d1(maxb);
    STRATA_CUDA(cudaMemsetAsync(d0.get(), 1, maxb, st));
    void* pinned = nullptr;
    STRATA_CUDA(cudaMallocHost(&pinned, maxb));
    std::unique_ptr<void, void (*)(void*)> pinned_guard(pinned, [](void* p) { cudaFreeHost(p); });
    std::unique_ptr<char[]> pageable(new char[maxb]);
    std::memset(pageable.get(), 1, maxb);  // touch every page: first-touch faults are not a copy cost
    std::memset(pinned, 1, maxb);
    EventTimer ev;
    struct Path {
        const char* dir;
        bool pinned;
    };
    const std::vector<Path> paths{{"h2d", true}, {"d2h", true}, {"h2d", false}, {"d2h", false}, {"d2d", true}};
    const int total = static_cast<int>(paths.size() * sizes.size());
    int step = 0;
    for (const auto& path : paths) {
        for (double bytes : sizes) {
            ctx.progress("memcpy", step++, total);
            ctx.check();
            const auto n = static_cast<std::size_t>(bytes);
            void* host = path.pinned ? pinned : static_cast<void*>(pageable.get());
            auto copy = [&] {
                if (path.dir[0] == 'h') STRATA_CUDA(cudaMemcpyAsync(d0.get(), host, n, cudaMemcpyHostToDevice, st));
                else if (path.dir[1] == '2' && path.dir[2] == 'h') STRATA_CUDA(cudaMemcpyAsync(host, d0.get(), n, cudaMemcpyDeviceToHost, st));
                else STRATA_CUDA(cudaMemcpyAsync(d1.get(), d0.get(), n, cudaMemcpyDeviceToDevice, st));
            };
            copy();
            copy();
            const int timed = quick ? 5 : (bytes >= 256.0 * (1 << 20) ? 5 : 10);
            std::vector<double> times;
            for (int r = 0; r < timed; ++r) {
                ev.start(st);
                copy();
                ev.stop(st);
                times.push_back(ev.seconds());
            }
            const Summary s = rate_summary(bytes, times);
            hwdb::Measurement m;
            m.kind = "memcpy";
            m.device = device;
            // D2D counts the bytes copied once (nvbandwidth's convention), although HBM sees a read and a write.
            m.key = make_key(std::string(path.dir) + (path.dir[0] == 'd' && path.dir[2] == 'd' ? "" : path.pinned ? " pinned" : " pageable"),
                             {{"bytes", bytes}});
            m.unit = "B/s";
            m.value = s.median;
            m.p10 = s.p10;
            m.p90 = s.p90;
            m.samples = s.samples;
            m.params = {{"bytes", bytes}};
            m.labels = {{"direction", path.dir}, {"pinned", path.pinned ? "1" : "0"}};
            ctx.add(std::move(m));
        }
    }
}

// ------------------------------------------------------------------------------ collectives
namespace {

struct Rank {
    int dev = 0;
    ncclComm_t comm{};
    cudaStream_t stream{};
    void* send = nullptr;
    void* recv = nullptr;
    cudaEvent_t a{}, b{};
};

// Enqueue one collective of nccl-tests size S on rank r. Returns false if S is too small to give
// every rank at least one element.
void enqueue(Collective c, Rank& r, int rank, int n, std::size_t elems_per_rank_chunk, std::size_t elems_total) {
    const ncclDataType_t t = ncclBfloat16;
    const std::size_t es = 2;
    switch (c) {
        case Collective::all_reduce:
            STRATA_NCCL(ncclAllReduce(r.send, r.recv, elems_total, t, ncclSum, r.comm, r.stream));
            break;
        case Collective::all_gather:
            STRATA_NCCL(ncclAllGather(r.send, r.recv, elems_per_rank_chunk, t, r.comm, r.stream));
            break;
        case Collective::reduce_scatter:
            STRATA_NCCL(ncclReduceScatter(r.send, r.recv, elems_per_rank_chunk, t, ncclSum, r.comm, r.stream));
            break;
        case Collective::all_to_all:
            // As nccl-tests' alltoall: grouped point-to-point, one block of the buffer per peer.
            STRATA_NCCL(ncclGroupStart());
            for (int p = 0; p < n; ++p) {
                STRATA_NCCL(ncclSend(static_cast<char*>(r.send) + p * elems_per_rank_chunk * es, elems_per_rank_chunk, t, p, r.comm, r.stream));
                STRATA_NCCL(ncclRecv(static_cast<char*>(r.recv) + p * elems_per_rank_chunk * es, elems_per_rank_chunk, t, p, r.comm, r.stream));
            }
            STRATA_NCCL(ncclGroupEnd());
            break;
        case Collective::send_recv:
            STRATA_NCCL(ncclGroupStart());
            STRATA_NCCL(ncclSend(r.send, elems_total, t, (rank + 1) % n, r.comm, r.stream));
            STRATA_NCCL(ncclRecv(r.recv, elems_total, t, (rank + n - 1) % n, r.comm, r.stream));
            STRATA_NCCL(ncclGroupEnd());
            break;
    }
}

}  // namespace

void bench_collectives(Context& ctx, const std::string& device) {
    const bool quick = ctx.opt.quick;
    int ndev = 0;
    STRATA_CUDA(cudaGetDeviceCount(&ndev));
    std::vector<int> groups;
    for (int g = 2; g <= ndev; g *= 2) groups.push_back(g);
    if (ndev > 1 && groups.back() != ndev) groups.push_back(ndev);
    if (ndev == 1) groups.push_back(1);  // exercise the path; rows marked unrepresentative
    // nccl-tests sweep: 8 B .. 1 GiB in x2 steps (quick: 8 B .. 16 MiB in x8 steps).
    std::vector<double> sizes;
    for (double b = 8; b <= (quick ? 16.0 : 1024.0) * (1 << 20) * 1.0001; b *= quick ? 8 : 2) sizes.push_back(b);
    const auto maxb = static_cast<std::size_t>(sizes.back());
    const int samples = quick ? 3 : 5;
    const std::vector<Collective> colls{Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                                        Collective::all_to_all, Collective::send_recv};
    int step = 0;
    const int total = static_cast<int>(groups.size() * colls.size());
    for (int n : groups) {
        std::vector<Rank> ranks(static_cast<std::size_t>(n));
        std::vector<int> devs(static_cast<std::size_t>(n));
        std::vector<ncclComm_t> comms(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r) devs[static_cast<std::size_t>(r)] = r;
        STRATA_NCCL(ncclCommInitAll(comms.data(), n, devs.data()));
        struct Cleanup {
            std::vector<Rank>& rs;
            ~Cleanup() {
                for (auto& r : rs) {
                    cudaSetDevice(r.dev);
                    if (r.send) cudaFree(r.send);
                    if (r.recv) cudaFree(r.recv);
                    if (r.a) cudaEventDestroy(r.a);
                    if (r.b) cudaEventDestroy(r.b);
                    if (r.stream) cudaStreamDestroy(r.stream);
                    if (r.comm) ncclCommDestroy(r.comm);
                }
            }
        } cleanup{ranks};
        for (int r = 0; r < n; ++r) {
            Rank& rk = ranks[static_cast<std::size_t>(r)];
            rk.dev = r;
            rk.comm = comms[static_cast<std::size_t>(r)];
            STRATA_CUDA(cudaSetDevice(r));
            STRATA_CUDA(cudaStreamCreateWithFlags(&rk.stream, cudaStreamNonBlocking));
            STRATA_CUDA(cudaMalloc(&rk.send, maxb));
            STRATA_CUDA(cudaMalloc(&rk.recv, maxb));
            STRATA_CUDA(cudaMemset(rk.send, 0, maxb));
            STRATA_CUDA(cudaEventCreate(&rk.a));
            STRATA_CUDA(cudaEventCreate(&rk.b));
        }
        for (Collective c : colls) {
            ctx.progress(std::string("nccl ") + to_string(c), step++, total);
            ctx.check();
            // times[size][sample][rank]; the sample's time is the slowest rank (nccl-tests -a 3 style max).
            std::vector<std::vector<std::vector<double>>> times(sizes.size(),
                                                                std::vector<std::vector<double>>(static_cast<std::size_t>(samples),
                                                                                                 std::vector<double>(static_cast<std::size_t>(n), 0)));
            std::vector<int> iters_of(sizes.size());
            ThreadBarrier bar(n);
            std::atomic<bool> stop{false};
            std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
            auto body = [&](int rank) {
                try {
                    Rank& rk = ranks[static_cast<std::size_t>(rank)];
                    STRATA_CUDA(cudaSetDevice(rk.dev));
                    for (std::size_t si = 0; si < sizes.size(); ++si) {
                        if (rank == 0) stop = ctx.cancelled();
                        bar.wait();
                        if (stop) return;
                        const auto S = static_cast<std::size_t>(sizes[si]);
                        const std::size_t elems = S / 2, chunk = elems / static_cast<std::size_t>(n);
                        const bool chunked = c == Collective::all_gather || c == Collective::reduce_scatter || c == Collective::all_to_all;
                        if ((chunked ? chunk : elems) == 0) continue;  // same decision on every rank
                        const int iters = S <= (1u << 20) ? 20 : S <= (64u << 20) ? 10 : 4;
                        if (rank == 0) iters_of[si] = iters;
                        enqueue(c, rk, rank, n, chunk, elems);  // warm-up (connection setup for this size)
                        STRATA_CUDA(cudaStreamSynchronize(rk.stream));
                        for (int smp = 0; smp < samples; ++smp) {
                            bar.wait();
                            // nccl-tests' timing: `iters` back-to-back ops between two points,
                            // divided by iters; device events on the communicator's stream.
                            STRATA_CUDA(cudaEventRecord(rk.a, rk.stream));
                            for (int it = 0; it < iters; ++it) enqueue(c, rk, rank, n, chunk, elems);
                            STRATA_CUDA(cudaEventRecord(rk.b, rk.stream));
                            STRATA_CUDA(cudaEventSynchronize(rk.b));
                            float ms = 0;
                            STRATA_CUDA(cudaEventElapsedTime(&ms, rk.a, rk.b));
                            times[si][static_cast<std::size_t>(smp)][static_cast<std::size_t>(rank)] = ms * 1e-3 / iters;
                        }
                    }
                } catch (...) {
                    // A failed rank cannot rejoin the barrier: NCCL errors here are fatal for the
                    // group; the exception is rethrown on the calling thread.
                    errors[static_cast<std::size_t>(rank)] = std::current_exception();
                }
            };
            {
                std::vector<std::thread> th;
                for (int r = 0; r < n; ++r) th.emplace_back(body, r);
                for (auto& t : th) t.join();
            }
            for (auto& e : errors)
                if (e) std::rethrow_exception(e);
            ctx.check();
            for (std::size_t si = 0; si < sizes.size(); ++si) {
                if (iters_of[si] == 0) continue;
                const auto S = static_cast<std::size_t>(sizes[si]);
                const std::size_t elems = S / 2, chunk = elems / static_cast<std::size_t>(n);
                const bool chunked = c == Collective::all_gather || c == Collective::reduce_scatter || c == Collective::all_to_all;
                const double S_eff = chunked ? 2.0 * static_cast<double>(chunk) * n : 2.0 * static_cast<double>(elems);
                std::vector<double> t;
                for (const auto& smp : times[si]) t.push_back(*std::max_element(smp.begin(), smp.end()));
                const Summary ts = summarize(t);
                hwdb::Measurement m;
                m.kind = "collective";
                m.device = device;
                m.key = make_key(std::string(to_string(c)) + " intra", {{"group", n}, {"bytes", S_eff}});
                m.unit = "B/s";
                m.value = busbw_Bps(c, n, S_eff, ts.median);
                m.p10 = busbw_Bps(c, n, S_eff, ts.p90);
                m.p90 = busbw_Bps(c, n, S_eff, ts.p10);
                m.samples = ts.samples;
                m.params = {{"bytes", S_eff},
                            {"group", n},
                            {"time_s", ts.median},
                            {"algbw_Bps", algbw_Bps(S_eff, ts.median)},
                            {"busbw_Bps", m.value},
                            {"count", chunked ? static_cast<double>(chunk) : static_cast<double>(elems)},
                            {"iters", iters_of[si]}};
                m.labels = {{"collective", to_string(c)}, {"scope", "intra"}, {"dtype", "bf16"}, {"impl", "nccl"},
                            {"representative", n > 1 ? "1" : "0"}};
                ctx.add(std::move(m));
            }
        }
    }
    STRATA_CUDA(cudaSetDevice(0));
}

}  // namespace strata::profiler::cudab
