// Orchestration of one profile: pick the backend, run its benchmarks in a fixed order, fit the
// curves, and fill the Run row. Returns values only; the caller writes them to hwdb in one
// transaction (so a cancelled profile writes nothing). Tables and JSON live in report.cpp.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <tuple>

#include "context.hpp"
#include "host_bench.hpp"
#include "strata/profiler/fit.hpp"
#include "strata/profiler/profiler.hpp"
#include "strata/common/text.hpp"
#ifdef STRATA_HAVE_CUDA
#include "cuda_backend.hpp"
#include "strata/common/error.hpp"
#include "strata/common/module.hpp"
#endif

namespace strata::profiler {

const std::vector<std::string>& all_kinds() {
    static const std::vector<std::string> k{"gemm",    "attention", "membw", "memcpy",   "collective",  "overlap",
                                            "grouped_gemm", "ssd",  "cpu_adam", "host_mem"};
    return k;
}

bool has_cuda_backend() {
#ifdef STRATA_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

std::string gpu_id_for_name(const std::string& name) {
    auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
    // Ids as in the hwdb seed (hwdb-seed.json); the CUDA names are what cudaGetDeviceProperties
    // reports on those boards.
    if (has("H100") && (has("PCIe") || has("PCIE"))) return "H100-PCIe-80GB";
    if (has("H100")) return "H100-SXM5-80GB";
    if (has("H800")) return "H800-SXM5-80GB";
    if (has("H200")) return "H200-SXM-141GB";
    if (has("GB200")) return "GB200-GPU";
    if (has("B200")) return "B200-SXM-180GB";
    if (has("A100") && has("80GB")) return "A100-SXM4-80GB";
    if (has("A100")) return "A100-SXM4-40GB";
    if (has("A800")) return "A800-SXM4-80GB";
    if (has("V100")) return "V100-SXM2-32GB";
    if (has("L40S")) return "L40S";
    if (has("RTX 4090")) return "RTX-4090";
    if (has("MI300X")) return "MI300X";
    return name;
}

namespace {

#ifdef STRATA_HAVE_CUDA
// The CUDA module, opened on first use and kept for the life of the process: $STRATA_PROFILER_CUDA,
// beside the running executable, or this build's own folder (common/module.hpp).
const cudab::Api& cuda_api() {
    static const cudab::Api* api = [] {
        std::string path;
        using Entry = const cudab::Api* (*)();
        auto entry = reinterpret_cast<Entry>(load_module_symbol(cudab::kModuleFile, "STRATA_PROFILER_CUDA", STRATA_PROFILER_CUDA_BUILD_DIR,
                                                                cudab::kApiSymbol, "the CUDA profiler backend", &path));
        const cudab::Api* a = entry();
        if (a == nullptr || a->version != cudab::kApiVersion)
            throw RuntimeError("the CUDA profiler backend could not be loaded: " + path +
                               " is not this build's module (its entry point is of another version; rebuild)");
        return a;
    }();
    return *api;
}
#endif

std::string iso_utc_now() {
    const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

std::string hostname() {
    char buf[256] = {0};
    if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
    return buf;
}

std::string label(const hwdb::Measurement& m, const std::string& k) {
    auto it = m.labels.find(k);
    return it == m.labels.end() ? "" : it->second;
}
double param(const hwdb::Measurement& m, const std::string& k) {
    auto it = m.params.find(k);
    return it == m.params.end() ? 0 : it->second;
}

hwdb::Fit bandwidth_fit(const std::string& kind, const std::string& device, const std::string& key, const BandwidthCurve& c) {
    hwdb::Fit f;
    f.kind = kind;
    f.device = device;
    f.key = key;
    f.model = "bandwidth";
    f.params = {{"latency_ns", c.latency_s * 1e9}, {"Bps", c.Bps}};
    f.valid_min = c.min_bytes;
    f.valid_max = c.max_bytes;
    f.n_points = c.n_points;
    f.mape = c.mape;
    return f;
}

// Time of one transfer from a bandwidth point: bytes / (B/s).
double time_of(const hwdb::Measurement& m, double bytes) { return m.value > 0 ? bytes / m.value : 0; }

}  // namespace

std::vector<hwdb::Fit> fit_measurements(const std::vector<hwdb::Measurement>& ms) {
    std::vector<hwdb::Fit> out;
    // Group rows by (device, fit key) in sorted maps, so the fits come out in a fixed order.
    struct Pts {
        std::vector<double> x, t;
    };
    std::map<std::tuple<std::string, std::string>, Pts> coll, copy, hbm, ssd_qd1;
    std::map<std::tuple<std::string, std::string>, double> ssd_best;
    std::map<std::string, std::pair<double, double>> adam;  // device -> (params, best rate)
    std::map<std::string, double> dram;                     // device -> best host copy B/s
    std::map<std::tuple<std::string, std::string>, Pts> interference;  // (device, proxy): x = SM share, t = slowdown
    for (const auto& m : ms) {
        if (m.kind == "collective") {
            const int n = static_cast<int>(param(m, "group"));
            // Never fit link models from 1-rank or several-ranks-per-GPU rows (notes §3).
            if (n < 2 || label(m, "representative") == "0") continue;
            const std::string key = label(m, "collective") + "/" + label(m, "scope") + "/" + std::to_string(n);
            auto& p = coll[{m.device, key}];
            p.x.push_back(param(m, "bytes"));
            p.t.push_back(param(m, "time_s"));
        } else if (m.kind == "memcpy") {
            const std::string key = label(m, "direction") + "/" + (label(m, "pinned") == "1" ? "pinned" : "pageable");
            auto& p = copy[{m.device, key}];
            p.x.push_back(param(m, "bytes"));
            p.t.push_back(time_of(m, param(m, "bytes")));
        } else if (m.kind == "membw") {
            const std::string kern = label(m, "kernel");
            const std::string key = kern == "triad" ? "hbm" : "kernel/" + kern;  // the runtime's own: kernel/runtime
            auto& p = hbm[{m.device, key}];
            p.x.push_back(param(m, "bytes"));
            p.t.push_back(time_of(m, param(m, "bytes")));
        } else if (m.kind == "ssd") {
            const std::string op = label(m, "op");
            double& best = ssd_best[{m.device, op}];
            best = std::max(best, m.value);
            if (param(m, "queue_depth") == 1) {
                auto& p = ssd_qd1[{m.device, op}];
                p.x.push_back(param(m, "block_bytes"));
                p.t.push_back(time_of(m, param(m, "block_bytes")));
            }
        } else if (m.kind == "overlap") {
            const double share = param(m, "sm_fraction");
            if (share <= 0 || !std::isfinite(m.value)) continue;
            auto& p = interference[{m.device, label(m, "proxy") + (label(m, "gemm_sms") == "target" ? " sm_target" : "")}];
            p.x.push_back(share);
            p.t.push_back(m.value);
        } else if (m.kind == "host_mem") {
            double& best = dram[m.device];
            best = std::max(best, m.value);
        } else if (m.kind == "cpu_adam") {
            auto& [P, rate] = adam[m.device];
            const double np = param(m, "params");
            if (np > P) rate = 0, P = np;  // the largest problem size is the representative one
            if (np == P) rate = std::max(rate, m.value);
        }
    }
    for (const auto& [k, p] : coll) {
        const auto& [device, key] = k;
        const std::string cname = key.substr(0, key.find('/'));
        const int n = std::stoi(key.substr(key.rfind('/') + 1));
        Collective c{};
        if (!collective_from_string(cname, c)) continue;
        const AlphaBetaFit ab = fit_alpha_beta(c, n, p.x, p.t);
        if (!ab.ok) continue;
        hwdb::Fit f;
        f.kind = "collective";
        f.device = device;
        f.key = key;
        f.model = "alpha_beta";
        // knee_bytes: the S at which latency and bandwidth terms are equal (alpha * busbw / f(n)):
        // below it a collective is latency-bound, the point where gradient bucketing starts to pay.
        f.params = {{"alpha_ns", ab.alpha_s * 1e9}, {"busbw_Bps", ab.busbw_Bps},
                    {"knee_bytes", ab.alpha_s * ab.busbw_Bps / busbw_factor(c, n)}};
        f.valid_min = ab.min_bytes;
        f.valid_max = ab.max_bytes;
        f.n_points = ab.n_points;
        f.mape = ab.mape;
        out.push_back(std::move(f));
    }
    for (const auto& [k, p] : copy) {
        const BandwidthCurve c = fit_bandwidth(p.x, p.t);
        if (c.ok) out.push_back(bandwidth_fit("memcpy", std::get<0>(k), std::get<1>(k), c));
    }
    for (const auto& [k, p] : hbm) {
        const BandwidthCurve c = fit_bandwidth(p.x, p.t);
        if (c.ok) out.push_back(bandwidth_fit("membw", std::get<0>(k), std::get<1>(k), c));
    }
    for (const auto& [k, p] : ssd_qd1) {
        // latency_ns: intercept of the queue-depth-1 request time over block sizes; Bps: the best
        // sustained throughput over all (block, queue depth) points, i.e. what a deep queue reaches.
        BandwidthCurve c = fit_bandwidth(p.x, p.t);
        if (!c.ok) continue;
        c.Bps = std::max(c.Bps, ssd_best[k]);
        out.push_back(bandwidth_fit("ssd", std::get<0>(k), std::get<1>(k), c));
    }
    for (const auto& [k, p] : interference) {
        // slowdown = c * (SMs held / SMs), least squares through the origin: no SMs held, no
        // loss. The error is absolute (slowdowns near 0 make relative errors meaningless).
        double sxy = 0, sxx = 0;
        for (std::size_t i = 0; i < p.x.size(); ++i) sxy += p.x[i] * p.t[i], sxx += p.x[i] * p.x[i];
        if (p.x.size() < 2 || sxx <= 0) continue;
        const double c = sxy / sxx;
        double err = 0;
        for (std::size_t i = 0; i < p.x.size(); ++i) err += std::abs(c * p.x[i] - p.t[i]);
        hwdb::Fit f;
        f.kind = "overlap";
        f.device = std::get<0>(k);
        f.key = std::get<1>(k);
        f.model = "proportional";
        f.params = {{"slowdown_per_sm_share", c}};
        f.valid_min = *std::min_element(p.x.begin(), p.x.end());
        f.valid_max = *std::max_element(p.x.begin(), p.x.end());
        f.n_points = static_cast<int>(p.x.size());
        f.mape = err / static_cast<double>(p.x.size());
        out.push_back(std::move(f));
    }
    for (const auto& [device, Bps] : dram) {
        // The best over thread counts: what the memory system gives when the cores are free.
        hwdb::Fit f;
        f.kind = "host_mem";
        f.device = device;
        f.key = "dram";
        f.model = "bandwidth";
        f.params = {{"Bps", Bps}, {"latency_ns", 0.0}};
        f.n_points = 1;
        out.push_back(std::move(f));
    }
    for (const auto& [device, pr] : adam) {
        hwdb::Fit f;
        f.kind = "cpu_adam";
        f.device = device;
        f.key = "adam";
        f.model = "rate";
        f.params = {{"params_per_s", pr.second}};
        f.valid_min = f.valid_max = pr.first;
        f.n_points = 1;
        out.push_back(std::move(f));
    }
    return out;
}

Profile run_profile(const Options& o) {
    if (o.backend != "cpu" && o.backend != "cuda")
        throw InputError("--backend", "", "must be cpu or cuda (got \"" + o.backend + "\")");
    for (const auto& k : o.only)
        if (std::find(all_kinds().begin(), all_kinds().end(), k) == all_kinds().end()) {
            std::string hint = did_you_mean(k, all_kinds());
            throw InputError("--only", "", "unknown kind \"" + k + "\"" + (hint.empty() ? "" : " (did you mean " + hint + "?)"));
        }
    if (o.backend == "cuda" && !has_cuda_backend())
        throw RuntimeError("this build has no CUDA backend (configure with -DSTRATA_CUDA=ON where nvcc and NCCL exist)");

    Context ctx(o);
    Profile p;
    p.run.host = hostname();
    p.run.backend = o.backend;
    p.run.tool_version = std::string("strata-profiler ") + STRATA_PROFILER_VERSION + (o.quick ? " (quick)" : "");
    p.run.started_at = iso_utc_now();
    p.run.representative = true;

    if (o.backend == "cpu") {
        p.run.devices = "cpu (" + std::to_string(host::thread_count(o)) + " threads)";
        p.run.driver = "none";
        ctx.device = "cpu";
        if (ctx.want("gemm")) host::bench_gemm_cpu(ctx);
        if (ctx.want("attention")) host::bench_runtime_attention_cpu(ctx);
        if (ctx.want("membw")) {
            host::bench_membw_cpu(ctx);
            host::bench_runtime_memory_bound_cpu(ctx);
        }
        if (ctx.want("memcpy")) host::bench_memcpy_cpu(ctx);
        if (ctx.want("collective")) host::bench_collectives_cpu(ctx);
        for (const char* gpu_only : {"overlap", "grouped_gemm"})
            if (ctx.want(gpu_only) && !o.only.empty()) ctx.warn(std::string(gpu_only) + ": not measured by the cpu backend");
    } else {
#ifdef STRATA_HAVE_CUDA
        const cudab::Api& cu = cuda_api();
        const cudab::DeviceInfo di = cu.query_devices();
        ctx.device = gpu_id_for_name(di.name);
        p.run.devices = di.names;
        p.run.driver = "driver " + di.driver + "; cuda runtime " + di.runtime + "; cublasLt " + di.cublaslt + "; nccl " + di.nccl +
                       "; sm " + std::to_string(di.cc_major) + "." + std::to_string(di.cc_minor) + "; SMs " +
                       std::to_string(di.sm_count) + "; sm_clock_mhz " + fmt_fixed(di.sm_clock_mhz, 0) + "; mem_clock_mhz " +
                       fmt_fixed(di.mem_clock_mhz, 0) + "; l2_bytes " + fmt_fixed(di.l2_bytes, 0);
        if (ctx.want("gemm")) cu.bench_gemm(ctx, ctx.device);
        if (ctx.want("attention") && !o.plan_shapes) cu.bench_attention(ctx, ctx.device);  // a plan's shapes: the runtime's kernel only
        if (ctx.want("membw")) cu.bench_membw(ctx, ctx.device);
        if (ctx.want("memcpy")) cu.bench_memcpy(ctx, ctx.device);
        if (ctx.want("collective")) cu.bench_collectives(ctx, ctx.device);
        if (ctx.want("overlap")) cu.bench_overlap(ctx, ctx.device);
        if (ctx.want("grouped_gemm")) cu.bench_grouped_gemm(ctx, ctx.device);
        // The runtime's own kernels, last: they load its cuda module, and a build without it, a
        // module of another build or a kernel that faults (a CUDA context does not recover from
        // that) loses these rows only, warned, not the profile's others.
        auto runtime_rows = [&](const char* kind, void (*bench)(Context&)) {
            try {
                bench(ctx);
            } catch (const Cancelled&) {
                throw;
            } catch (const std::exception& e) {
                if (o.plan_shapes && std::string(kind) == "attention") throw;  // validate reports it and predicts from the grid
                ctx.warn(std::string(kind) + ": the runtime's kernels not timed (" + e.what() + ")");
            }
        };
        if (ctx.want("attention")) runtime_rows("attention", host::bench_runtime_attention_cuda);
        if (ctx.want("membw")) runtime_rows("membw", host::bench_runtime_memory_bound_cuda);
        if (di.count < 2 && ctx.want("collective"))
            p.run.notes += "collectives ran with 1 rank (one visible GPU): rows labelled representative=0, no collective fits. ";
#endif
    }
    if (ctx.want("ssd")) host::bench_ssd(ctx);
    if (ctx.want("cpu_adam")) host::bench_cpu_adam(ctx);
    if (ctx.want("host_mem")) host::bench_host_dram(ctx);
    ctx.check();

    p.measurements = std::move(ctx.ms);
    p.warnings = std::move(ctx.warnings);
    p.fits = fit_measurements(p.measurements);
    for (const auto& w : p.warnings) p.run.notes += w + ". ";
    p.run.finished_at = iso_utc_now();
    return p;
}

}  // namespace strata::profiler
