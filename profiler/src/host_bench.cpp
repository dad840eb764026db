// Host-side benchmarks: SSD sequential I/O (O_DIRECT, threads as the queue depth), CPU AdamW
// throughput, and the CPU backend's versions of GEMM (Eigen), memcpy, triad bandwidth and
// ranks-as-threads collectives. Host work is timed with steady_clock; every point is a median of
// repeats after a warm-up. Not a GPU benchmark: nothing here touches CUDA.
#include "host_bench.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <Eigen/Dense>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "strata/profiler/busbw.hpp"
#include "strata/profiler/cpu_collectives.hpp"
#include "strata/profiler/stats.hpp"

namespace strata::profiler::host {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }



// f(t, lo, hi) on `threads` threads at once, thread t over its contiguous slice of [0, n); returns
// when all are done.
template <class F>
void on_slices(std::size_t n, int threads, F f) {
    std::vector<std::jthread> th;
    const auto k = static_cast<std::size_t>(threads);
    for (std::size_t t = 0; t < k; ++t) th.emplace_back([&f, n, k, t] { f(static_cast<int>(t), n * t / k, n * (t + 1) / k); });
}

std::vector<double> geometric(double lo, double hi, double factor) {
    std::vector<double> v;
    for (double x = lo; x <= hi * 1.0000001; x *= factor) v.push_back(std::round(x));
    return v;
}

struct AlignedFree {
    void operator()(void* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<char, AlignedFree>;
AlignedBuf aligned_buffer(std::size_t bytes) {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (p == nullptr) throw RuntimeError("profiler: out of host memory allocating " + std::to_string(bytes) + " bytes");
    return AlignedBuf(static_cast<char*>(p));
}

// Deterministic pseudo-random fill (splitmix64), so GEMM inputs are not constants (notes §8).
void fill_random(float* p, std::size_t n, std::uint64_t seed) {
    std::uint64_t s = seed;
    for (std::size_t i = 0; i < n; ++i) {
        s += 0x9e3779b97f4a7c15ULL;
        std::uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        p[i] = static_cast<float>(static_cast<double>(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
}
}  // namespace

int thread_count(const Options& o) {
    if (o.threads > 0) return o.threads;
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// ---------------------------------------------------------------------------------------- SSD
void bench_ssd(Context& ctx) {
    const bool quick = ctx.opt.quick;
    const double grid_total = quick ? 32.0 * (1 << 20) : 512.0 * (1 << 20);
    const std::vector<double> blocks = quick ? std::vector<double>{128.0 * 1024, 1024.0 * 1024}
                                             : std::vector<double>{128.0 * 1024, 1024.0 * 1024, 4096.0 * 1024};
    const std::vector<int> depths = quick ? std::vector<int>{1, 4} : std::vector<int>{1, 4, 16};
    struct Shape {
        double block, total;
        int qd, reps;
        bool sync = true;  ///< fdatasync after the writes: durable throughput
    };
    std::vector<Shape> shapes;
    for (double block : blocks)
        for (int qd : depths) shapes.push_back({block, grid_total, qd, 2, true});
    // DeepSpeed's aio default and the runtime's request shape (ssd_io): 1 MiB at queue depth 8,
    // over enough bytes that each thread keeps many requests in turn, rewritten in place (the
    // median of 3 passes: the first allocates the blocks, a swapped state rewrites them), and not
    // synced: a swapper does not wait for the device's write cache to drain.
    shapes.push_back({1024.0 * 1024, quick ? 128.0 * (1 << 20) : 1024.0 * (1 << 20), 8, 3, false});
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(ctx.opt.ssd_dir, ec))
        throw InputError("--ssd-dir", "", "\"" + ctx.opt.ssd_dir + "\" is not a directory");
    const std::string path = (fs::path(ctx.opt.ssd_dir) / ("strata-profile-" + std::to_string(::getpid()) + ".bin")).string();
    bool direct = true;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) {  // tmpfs and some overlay filesystems refuse O_DIRECT
        direct = false;
        fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
        ctx.warn("ssd: O_DIRECT unsupported in " + ctx.opt.ssd_dir + "; reads may come from the page cache");
    }
    if (fd < 0) throw RuntimeError("ssd: cannot open " + path + ": " + std::strerror(errno));
    struct Closer {
        int fd;
        std::string path;
        ~Closer() {
            ::close(fd);
            std::error_code e;
            std::filesystem::remove(path, e);
        }
    } closer{fd, path};

    const int steps = static_cast<int>(shapes.size() * 2);
    int step = 0;
    for (const char* op : {"write", "read"}) {
        const bool is_write = std::strcmp(op, "write") == 0;
        for (const Shape& shape : shapes) {
            {
                const double block = shape.block, total = shape.total;
                const int qd = shape.qd, reps = shape.reps;
                ctx.progress("ssd", step++, steps);
                const auto bs = static_cast<std::size_t>(block);
                const auto nblocks = static_cast<std::size_t>(total / block);
                std::vector<AlignedBuf> bufs;
                for (int t = 0; t < qd; ++t) {
                    bufs.push_back(aligned_buffer(bs));
                    std::memset(bufs.back().get(), 0x5a + t, bs);
                }
                std::vector<double> times;
                for (int r = 0; r < reps; ++r) {
                    ctx.check();
                    std::atomic<bool> failed{false};
                    std::atomic<int> err{0};
                    const auto t0 = Clock::now();
                    {
                        std::vector<std::jthread> th;
                        for (int t = 0; t < qd; ++t)
                            th.emplace_back([&, t] {
                                // Thread t owns blocks t, t+qd, ...: qd requests in flight, in order.
                                for (std::size_t b = static_cast<std::size_t>(t); b < nblocks; b += static_cast<std::size_t>(qd)) {
                                    const auto off = static_cast<off_t>(b * bs);
                                    const ssize_t n = is_write ? ::pwrite(fd, bufs[static_cast<std::size_t>(t)].get(), bs, off)
                                                               : ::pread(fd, bufs[static_cast<std::size_t>(t)].get(), bs, off);
                                    if (n != static_cast<ssize_t>(bs)) {
                                        err = n < 0 ? errno : EIO;
                                        failed = true;
                                        return;
                                    }
                                }
                            });
                    }
                    if (is_write && shape.sync && ::fdatasync(fd) != 0) failed = true;
                    const double dt = since(t0);
                    if (failed) throw RuntimeError(std::string("ssd: ") + op + " failed on " + path + ": " + std::strerror(err.load()));
                    times.push_back(dt);
                }
                const double bytes = static_cast<double>(nblocks * bs);
                hwdb::Measurement m = point(ctx, "ssd", make_key(op, {{"block", block}, {"qd", qd}}), "B/s", rate_summary(bytes, times));
                m.params = {{"block_bytes", block}, {"queue_depth", qd}, {"bytes", bytes}};
                m.labels = {{"op", op}, {"direct", direct ? "1" : "0"}, {"synced", is_write && shape.sync ? "1" : "0"}};
                ctx.add(std::move(m));
            }
        }
    }
}

// ----------------------------------------------------------------------------------- CPU Adam
void bench_cpu_adam(Context& ctx) {
    const bool quick = ctx.opt.quick;
    // Large enough that the threads' start-up does not count: at 2 M parameters (quick, before)
    // 16 threads measured 1.77 G params/s where the runtime updated 6.7 B at 3.1 G/s.
    const std::size_t P = quick ? (std::size_t{16} << 20) : (std::size_t{64} << 20);
    const int reps = quick ? 4 : 6;
    const int T = thread_count(ctx.opt);
    std::vector<int> configs{1};
    if (T > 1) configs.push_back(T);
    // fp32 master weights, gradients, and both moments (ZeRO-Offload's CPU Adam layout).
    std::vector<float> p(P), g(P), m(P, 0.f), v(P, 0.f);
    fill_random(p.data(), P, 1);
    fill_random(g.data(), P, 2);
    int step_no = 0;
    for (std::size_t ci = 0; ci < configs.size(); ++ci) {
        const int threads = configs[ci];
        ctx.progress("cpu_adam", static_cast<int>(ci), static_cast<int>(configs.size()));
        std::vector<double> times;
        for (int r = 0; r < reps + 1; ++r) {
            ctx.check();
            ++step_no;
            // AdamW (Loshchilov & Hutter 2019, Algorithm 2) with bias correction.
            const float b1 = 0.9f, b2 = 0.95f, lr = 1e-4f, eps = 1e-8f, wd = 0.1f;
            const float c1 = 1.f / (1.f - std::pow(b1, static_cast<float>(step_no)));
            const float c2 = 1.f / (1.f - std::pow(b2, static_cast<float>(step_no)));
            const auto t0 = Clock::now();
            on_slices(P, threads, [&](int, std::size_t b, std::size_t e) {
                for (std::size_t i = b; i < e; ++i) {
                    const float gi = g[i];
                    const float mi = b1 * m[i] + (1.f - b1) * gi;
                    const float vi = b2 * v[i] + (1.f - b2) * gi * gi;
                    m[i] = mi;
                    v[i] = vi;
                    p[i] -= lr * ((mi * c1) / (std::sqrt(vi * c2) + eps) + wd * p[i]);
                }
            });
            if (r > 0) times.push_back(since(t0));  // the first step is the warm-up (page faults)
        }
        hwdb::Measurement mm = point(ctx, "cpu_adam", make_key("adamw", {{"params", static_cast<double>(P)}, {"threads", threads}}),
                                     "params/s", rate_summary(static_cast<double>(P), times));
        mm.params = {{"params", static_cast<double>(P)}, {"threads", threads}};
        mm.labels = {{"dtype", "fp32"}};
        ctx.add(std::move(mm));
    }
}

// ---------------------------------------------------------------------------- host DRAM bandwidth
// What host memory sustains when every core streams (McCalpin's STREAM copy): the bound on a
// DMA copy between GPU and host beside CPU Adam, which the cost model charges to host_mem. Arrays
// far beyond any last-level cache; bytes count the read and the write, as STREAM does.
void bench_host_dram(Context& ctx) {
    const bool quick = ctx.opt.quick;
    const std::size_t bytes = quick ? (std::size_t{256} << 20) : (std::size_t{1} << 30);
    const int reps = quick ? 3 : 5;
    const int T = thread_count(ctx.opt);
    std::vector<int> configs{1};
    if (T > 1) configs.push_back(T);
    AlignedBuf src = aligned_buffer(bytes), dst = aligned_buffer(bytes);
    for (std::size_t ci = 0; ci < configs.size(); ++ci) {
        const int threads = configs[ci];
        ctx.progress("host_mem", static_cast<int>(ci), static_cast<int>(configs.size()));
        std::vector<double> times;
        for (int r = 0; r < reps + 1; ++r) {
            ctx.check();
            const auto t0 = Clock::now();
            // Each thread first-touches its slice (r == 0, the warm-up), then copies it.
            on_slices(bytes, threads, [&](int t, std::size_t b, std::size_t e) {
                if (r == 0) std::memset(src.get() + b, 1 + t, e - b);
                std::memcpy(dst.get() + b, src.get() + b, e - b);
            });
            const double dt = since(t0);
            if (static_cast<unsigned char>(dst.get()[bytes - 1]) != static_cast<unsigned char>(threads)) std::abort();  // observable
            if (r > 0) times.push_back(dt);
        }
        hwdb::Measurement m = point(ctx, "host_mem", make_key("copy", {{"bytes", static_cast<double>(bytes)}, {"threads", threads}}),
                                    "B/s", rate_summary(2.0 * static_cast<double>(bytes), times));
        m.params = {{"bytes", static_cast<double>(bytes)}, {"threads", threads}};
        m.labels = {{"kernel", "copy"}};
        ctx.add(std::move(m));
    }
}

// ------------------------------------------------------------------------------- CPU GEMM (Eigen)
void bench_gemm_cpu(Context& ctx) {
    const bool quick = ctx.opt.quick;
    // The Transformer layer's GEMMs (tokens x out x in), scaled down for a CPU: QKV, attention
    // output, MLP up/down (4h), SwiGLU gate+up (2 x 8h/3), logits (vocab), each split by TP.
    const std::vector<int> hiddens = quick ? std::vector<int>{64, 256} : std::vector<int>{64, 256, 512, 1024};
    const std::vector<int> tokens = quick ? std::vector<int>{32, 256} : std::vector<int>{32, 256, 1024};
    const std::vector<int> tps = quick ? std::vector<int>{1} : std::vector<int>{1, 2};
    const int vocab = 4096;
    const int reps = quick ? 4 : 8;
    std::vector<std::array<long, 3>> shapes;
    for (int h : hiddens)
        for (int T : tokens)
            for (int tp : tps) {
                const long ffn = 4L * h, swiglu = 2L * ((8L * h / 3 + 63) / 64 * 64);
                for (auto [n, k] : std::vector<std::pair<long, long>>{
                         {3L * h / tp, h}, {h, h / tp}, {ffn / tp, h}, {h, ffn / tp}, {swiglu / tp, h}, {vocab / tp, h}})
                    shapes.push_back({T, n, k});
            }
    if (ctx.opt.plan_shapes) {  // a plan's own GEMMs instead of the grid
        shapes.clear();
        for (const Options::GemmShape& g : ctx.opt.gemm_shapes) shapes.push_back({g.m, g.n, g.k});
    }
    std::sort(shapes.begin(), shapes.end());
    shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
    for (std::size_t si = 0; si < shapes.size(); ++si) {
        ctx.progress("gemm", static_cast<int>(si), static_cast<int>(shapes.size()));
        ctx.check();
        const auto [m, n, k] = shapes[si];
        Eigen::MatrixXf A(m, k), B(k, n), C(m, n);
        fill_random(A.data(), static_cast<std::size_t>(A.size()), 3 + si);
        fill_random(B.data(), static_cast<std::size_t>(B.size()), 7 + si);
        std::vector<double> times;
        for (int r = 0; r < reps + 1; ++r) {
            const auto t0 = Clock::now();
            C.noalias() = A * B;
            if (r > 0) times.push_back(since(t0));
        }
        const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
        hwdb::Measurement mm = point(ctx, "gemm", make_key("fp32", {{"m", m}, {"n", n}, {"k", k}}), "flop/s", rate_summary(flops, times));
        mm.params = {{"m", m}, {"n", n}, {"k", k}};
        mm.labels = {{"dtype", "fp32"}, {"impl", "eigen"}};
        if (ctx.opt.plan_shapes) mm.labels["origin"] = "plan";
        ctx.add(std::move(mm));
    }
}

// ----------------------------------------------------------------------- CPU memory bandwidth
void bench_membw_cpu(Context& ctx) {
    const bool quick = ctx.opt.quick;
    const auto sizes = geometric(64.0 * 1024, quick ? 16.0 * (1 << 20) : 256.0 * (1 << 20), 4);
    for (std::size_t si = 0; si < sizes.size(); ++si) {
        ctx.progress("membw", static_cast<int>(si), static_cast<int>(sizes.size()));
        ctx.check();
        // Triad a = b + s*c (McCalpin's STREAM); `bytes` = the three arrays (2 reads + 1 write).
        const auto N = static_cast<std::size_t>(sizes[si] / 12);
        std::vector<float> a(N), b(N, 1.f), c(N, 2.f);
        const int reps = std::clamp(static_cast<int>(64.0 * (1 << 20) / sizes[si]), 5, 50);
        std::vector<double> times;
        for (int r = 0; r < reps + 1; ++r) {
            const auto t0 = Clock::now();
            const float s = 1.0f + static_cast<float>(r) * 1e-7f;
            for (std::size_t i = 0; i < N; ++i) a[i] = b[i] + s * c[i];
            const double dt = since(t0);
            if (a[N / 2] < 0) std::abort();  // keeps the loop observable
            if (r > 0) times.push_back(dt);
        }
        const double bytes = 12.0 * static_cast<double>(N);
        hwdb::Measurement m = point(ctx, "membw", make_key("triad", {{"bytes", bytes}}), "B/s", rate_summary(bytes, times));
        m.params = {{"bytes", bytes}};
        m.labels = {{"kernel", "triad"}};
        ctx.add(std::move(m));
    }
}

void bench_memcpy_cpu(Context& ctx) {
    const bool quick = ctx.opt.quick;
    const auto sizes = geometric(4096, quick ? 16.0 * (1 << 20) : 256.0 * (1 << 20), 4);
    const std::size_t maxb = static_cast<std::size_t>(sizes.back());
    std::vector<char> src(maxb, 1), dst(maxb, 0);
    for (std::size_t si = 0; si < sizes.size(); ++si) {
        ctx.progress("memcpy", static_cast<int>(si), static_cast<int>(sizes.size()));
        ctx.check();
        const auto bs = static_cast<std::size_t>(sizes[si]);
        const int reps = std::clamp(static_cast<int>(64.0 * (1 << 20) / sizes[si]), 5, 200);
        std::vector<double> times;
        for (int r = 0; r < reps + 1; ++r) {
            const auto t0 = Clock::now();
            std::memcpy(dst.data(), src.data(), bs);
            const double dt = since(t0);
            if (dst[bs - 1] != 1) std::abort();
            if (r > 0) times.push_back(dt);
        }
        hwdb::Measurement m = point(ctx, "memcpy", make_key("h2h", {{"bytes", sizes[si]}}), "B/s", rate_summary(sizes[si], times));
        m.params = {{"bytes", sizes[si]}};
        m.labels = {{"direction", "h2h"}, {"pinned", "0"}};
        ctx.add(std::move(m));
    }
}

// ------------------------------------------------------------------- CPU thread collectives
void bench_collectives_cpu(Context& ctx) {
    const bool quick = ctx.opt.quick;
    const std::vector<int> groups = quick ? std::vector<int>{2} : std::vector<int>{2, 4};
    const auto sizes = geometric(quick ? 4096 : 1024, quick ? 4.0 * (1 << 20) : 64.0 * (1 << 20), 4);
    const int samples = quick ? 5 : 10;
    const std::vector<Collective> colls{Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                                        Collective::all_to_all, Collective::send_recv};
    const auto maxe = static_cast<std::size_t>(sizes.back() / 4);
    int step = 0;
    const int steps = static_cast<int>(groups.size() * colls.size());
    for (int n : groups) {
        std::vector<std::vector<float>> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
        for (int r = 0; r < n; ++r) {
            a[static_cast<std::size_t>(r)].assign(maxe, 1e-3f * static_cast<float>(r + 1));
            b[static_cast<std::size_t>(r)].assign(maxe, 0.f);
        }
        std::vector<float*> pa, pb;
        std::vector<const float*> ca;
        for (int r = 0; r < n; ++r) {
            pa.push_back(a[static_cast<std::size_t>(r)].data());
            pb.push_back(b[static_cast<std::size_t>(r)].data());
            ca.push_back(a[static_cast<std::size_t>(r)].data());
        }
        for (Collective c : colls) {
            ctx.progress("collective", step++, steps);
            ctx.check();
            for (double S : sizes) {
                // Element counts per nccl-tests' definition of S (busbw.hpp).
                const auto total = static_cast<std::size_t>(S / 4);
                const std::size_t per = (c == Collective::all_gather || c == Collective::reduce_scatter || c == Collective::all_to_all)
                                            ? total / static_cast<std::size_t>(n)
                                            : total;
                if (per == 0) continue;
                const double S_eff = (c == Collective::all_gather || c == Collective::reduce_scatter || c == Collective::all_to_all)
                                         ? 4.0 * static_cast<double>(per) * n
                                         : 4.0 * static_cast<double>(per);
                cpu::Barrier bar(n);
                std::vector<double> times;
                std::atomic<bool> stop{false};
                auto body = [&](int rank) {
                    for (int it = 0; it < samples + 1; ++it) {
                        // Rank 0 decides for everyone, so all ranks leave the loop at the same step.
                        if (rank == 0) stop = ctx.cancelled();
                        bar.arrive_and_wait();
                        if (stop) return;
                        const auto t0 = Clock::now();
                        switch (c) {
                            case Collective::all_reduce: cpu::ring_all_reduce(rank, n, pa, per, bar); break;
                            case Collective::reduce_scatter: cpu::ring_reduce_scatter(rank, n, pa, pb, per, bar); break;
                            case Collective::all_gather: cpu::ring_all_gather(rank, n, ca, pb, per, bar); break;
                            case Collective::all_to_all: cpu::all_to_all(rank, n, ca, pb, per, bar); break;
                            case Collective::send_recv: cpu::ring_send_recv(rank, n, ca, pb, per, bar); break;
                        }
                        bar.arrive_and_wait();
                        if (rank == 0 && it > 0) times.push_back(since(t0));
                    }
                };
                {
                    std::vector<std::jthread> th;
                    for (int r = 1; r < n; ++r) th.emplace_back(body, r);
                    body(0);
                }
                ctx.check();
                // Keep the in-place sums finite across repeats (values grow by n per all-reduce).
                for (auto& v : a) std::fill(v.begin(), v.end(), 1e-3f);
                const Summary t = summarize(times);
                hwdb::Measurement m;
                m.kind = "collective";
                m.device = ctx.device;
                m.key = make_key(std::string(to_string(c)) + " intra", {{"group", n}, {"bytes", S_eff}});
                m.unit = "B/s";
                m.value = busbw_Bps(c, n, S_eff, t.median);
                m.p10 = busbw_Bps(c, n, S_eff, t.p90);
                m.p90 = busbw_Bps(c, n, S_eff, t.p10);
                m.samples = t.samples;
                m.params = {{"bytes", S_eff}, {"group", n}, {"time_s", t.median},
                            {"algbw_Bps", algbw_Bps(S_eff, t.median)}, {"busbw_Bps", m.value}, {"count", static_cast<double>(per)}};
                m.labels = {{"collective", to_string(c)}, {"scope", "intra"}, {"dtype", "fp32"}, {"impl", "threads"},
                            {"representative", n > 1 ? "1" : "0"}};
                ctx.add(std::move(m));
            }
        }
    }
}

}  // namespace strata::profiler::host
