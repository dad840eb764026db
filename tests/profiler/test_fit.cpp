// The profiler's fits recover known parameters from synthetic data, and busbw factors equal
// nccl-tests' formulas (NVIDIA/nccl-tests doc/PERFORMANCE.md): all_reduce 2(n-1)/n, all_gather,
// reduce_scatter, all_to_all (n-1)/n, send_recv 1.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>

#include "strata/profiler/busbw.hpp"
#include "strata/profiler/fit.hpp"
#include "strata/profiler/stats.hpp"

using namespace strata::profiler;

TEST_CASE("busbw factors match nccl-tests for n = 1..16", "[profiler][busbw]") {
    for (int n = 1; n <= 16; ++n) {
        const double nn = n;
        CHECK(busbw_factor(Collective::all_reduce, n) == Approx(2.0 * (nn - 1) / nn));
        CHECK(busbw_factor(Collective::all_gather, n) == Approx((nn - 1) / nn));
        CHECK(busbw_factor(Collective::reduce_scatter, n) == Approx((nn - 1) / nn));
        CHECK(busbw_factor(Collective::all_to_all, n) == Approx((nn - 1) / nn));
        CHECK(busbw_factor(Collective::send_recv, n) == 1.0);
    }
    // Hand example: 8 ranks all-reduce 1 GB in 10 ms -> algbw 100 GB/s, busbw 100 * 14/8 = 175 GB/s.
    CHECK(algbw_Bps(1e9, 0.01) == Approx(100e9));
    CHECK(busbw_Bps(Collective::all_reduce, 8, 1e9, 0.01) == Approx(175e9));
    // nccl-tests' S: all_gather / reduce_scatter count the whole (n x per-rank) buffer.
    CHECK(nccl_tests_bytes(Collective::all_gather, 1024, 2, 8) == 1024.0 * 2 * 8);
    CHECK(nccl_tests_bytes(Collective::all_reduce, 1024, 2, 8) == 1024.0 * 2);
}

TEST_CASE("alpha-beta fit recovers alpha and busbw from noisy synthetic data within 1%", "[profiler][fit]") {
    // t = alpha + S * 2(n-1)/n / B with alpha = 25 us, B = 180 GB/s, n = 8, sizes 8 B .. 1 GiB,
    // multiplicative noise of +-0.5% (uniform, fixed seed).
    const double alpha = 25e-6, B = 180e9;
    const int n = 8;
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> noise(-0.005, 0.005);
    std::vector<double> S, t;
    for (double s = 8; s <= double(1 << 30); s *= 2) {
        S.push_back(s);
        t.push_back((alpha + s * (2.0 * (n - 1) / n) / B) * (1.0 + noise(rng)));
    }
    const AlphaBetaFit f = fit_alpha_beta(Collective::all_reduce, n, S, t);
    REQUIRE(f.ok);
    CHECK(f.alpha_s == Approx(alpha).epsilon(0.01));
    CHECK(f.busbw_Bps == Approx(B).epsilon(0.01));
    CHECK(f.mape < 0.01);
    CHECK(f.n_points == static_cast<int>(S.size()));
    CHECK(f.min_bytes == 8);
    CHECK(f.max_bytes == double(1 << 30));
}

TEST_CASE("relative-error weighting keeps the small-size latency", "[profiler][fit]") {
    // Exact data t = 5 us + x / 20 GB/s over 4 KiB .. 1 GiB: an unweighted fit would let the 1 GiB
    // point dominate; the relative fit must return both parameters (almost) exactly.
    std::vector<double> x, t;
    for (double b = 4096; b <= double(1 << 30); b *= 4) {
        x.push_back(b);
        t.push_back(5e-6 + b / 20e9);
    }
    const BandwidthCurve c = fit_bandwidth(x, t);
    REQUIRE(c.ok);
    CHECK(c.latency_s == Approx(5e-6).epsilon(1e-6));
    CHECK(c.Bps == Approx(20e9).epsilon(1e-6));
    CHECK(c.mape == Approx(0).margin(1e-9));
}

TEST_CASE("a negative intercept is clamped to zero and the slope refitted", "[profiler][fit]") {
    // Pure bandwidth data t = x / 10 GB/s minus a constant larger than the smallest point's
    // latency would give a < 0; physical fits never have negative latency.
    std::vector<double> x{1e6, 2e6, 4e6, 8e6}, t;
    for (double b : x) t.push_back(b / 10e9 - 1e-6);
    const LineFit f = fit_line_relative(x, t);
    REQUIRE(f.ok);
    CHECK(f.intercept == 0.0);
    CHECK(f.slope > 0);
}

TEST_CASE("degenerate inputs give no fit", "[profiler][fit]") {
    CHECK_FALSE(fit_line_relative({1.0}, {1.0}).ok);
    CHECK_FALSE(fit_line_relative({2.0, 2.0}, {1.0, 3.0}).ok);
    // 1-rank all-reduce: factor 0, nothing to fit.
    CHECK_FALSE(fit_alpha_beta(Collective::all_reduce, 1, {8, 16}, {1e-6, 2e-6}).ok);
}

TEST_CASE("order statistics: median, p10, p90 by linear interpolation", "[profiler][stats]") {
    // 1..11: median 6, p10 at position 1.0 -> 2, p90 at position 9.0 -> 10.
    std::vector<double> v{11, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    const Summary s = summarize(v);
    CHECK(s.median == 6);
    CHECK(s.p10 == Approx(2));
    CHECK(s.p90 == Approx(10));
    // Rates invert: work 100 over times {1, 2, 4}: median rate 50, p10 rate = 100 / p90(t) = 100/3.6.
    const Summary r = rate_summary(100, {1, 2, 4});
    CHECK(r.median == Approx(50));
    CHECK(r.p10 == Approx(100 / 3.6));
    CHECK(r.p90 == Approx(100 / 1.2));
}

#include "strata/profiler/profiler.hpp"

namespace {
strata::hwdb::Measurement coll_row(const std::string& c, int n, double S, double t, const std::string& repr) {
    strata::hwdb::Measurement m;
    m.kind = "collective";
    m.device = "H100-SXM5-80GB";
    m.params = {{"bytes", S}, {"group", n}, {"time_s", t}};
    m.labels = {{"collective", c}, {"scope", "intra"}, {"representative", repr}};
    return m;
}
}  // namespace

TEST_CASE("fit_measurements: alpha-beta per collective/scope/group, never from 1-rank rows", "[profiler][fit]") {
    // Synthetic 8-rank all-gather: t = 12 us + S (7/8) / 150 GB/s, exact; plus 1-rank rows and rows
    // labelled unrepresentative, which must produce no fit.
    std::vector<strata::hwdb::Measurement> ms;
    for (double S = 1024; S <= 1 << 28; S *= 4) {
        ms.push_back(coll_row("all_gather", 8, S, 12e-6 + S * 7.0 / 8.0 / 150e9, "1"));
        ms.push_back(coll_row("all_reduce", 1, S, 5e-6 + S / 1e12, "0"));
        ms.push_back(coll_row("send_recv", 2, S, 5e-6 + S / 1e12, "0"));
    }
    const auto fits = fit_measurements(ms);
    REQUIRE(fits.size() == 1);
    const auto& f = fits[0];
    CHECK(f.kind == "collective");
    CHECK(f.key == "all_gather/intra/8");
    CHECK(f.model == "alpha_beta");
    CHECK(f.params.at("alpha_ns") == Approx(12000).epsilon(1e-6));
    CHECK(f.params.at("busbw_Bps") == Approx(150e9).epsilon(1e-6));
    // knee: alpha * busbw / f(n) = 12e-6 * 150e9 / (7/8) bytes
    CHECK(f.params.at("knee_bytes") == Approx(12e-6 * 150e9 * 8.0 / 7.0).epsilon(1e-6));
    CHECK(f.valid_min == 1024);
    CHECK(f.n_points == 10);
}

TEST_CASE("fit_measurements: copy bandwidth and the SSD rule", "[profiler][fit]") {
    std::vector<strata::hwdb::Measurement> ms;
    // Pinned H2D: t = 4 us + bytes / 50 GB/s, stored as B/s points (value = bytes / t).
    for (double b = 4096; b <= 1 << 30; b *= 4) {
        strata::hwdb::Measurement m;
        m.kind = "memcpy";
        m.device = "H100-SXM5-80GB";
        m.params = {{"bytes", b}};
        m.labels = {{"direction", "h2d"}, {"pinned", "1"}};
        m.value = b / (4e-6 + b / 50e9);
        ms.push_back(m);
    }
    // SSD reads: qd 1 request time = 100 us + block / 2 GB/s; qd 8 reaches 6 GB/s.
    for (double blk : {131072.0, 1048576.0, 4194304.0}) {
        strata::hwdb::Measurement m;
        m.kind = "ssd";
        m.device = "cpu";
        m.params = {{"block_bytes", blk}, {"queue_depth", 1}, {"bytes", 1e9}};
        m.labels = {{"op", "read"}};
        m.value = blk / (100e-6 + blk / 2e9);
        ms.push_back(m);
        m.params["queue_depth"] = 8;
        m.value = 6e9;
        ms.push_back(m);
    }
    const auto fits = fit_measurements(ms);
    REQUIRE(fits.size() == 2);
    const auto& copy = fits[0].kind == "memcpy" ? fits[0] : fits[1];
    const auto& ssd = fits[0].kind == "ssd" ? fits[0] : fits[1];
    CHECK(copy.key == "h2d/pinned");
    CHECK(copy.params.at("latency_ns") == Approx(4000).epsilon(1e-6));
    CHECK(copy.params.at("Bps") == Approx(50e9).epsilon(1e-6));
    CHECK(ssd.key == "read");
    CHECK(ssd.params.at("latency_ns") == Approx(100000).epsilon(1e-6));  // from the qd-1 line
    CHECK(ssd.params.at("Bps") == Approx(6e9));                          // the best sustained rate
}

TEST_CASE("fit_measurements: the runtime's own GPU kernels get fit keys of their own", "[profiler][fit]") {
    // membw rows of kernel runtime_fp32 / runtime_adam_fp32 (the cuda backend's): t = bytes / rate.
    std::vector<strata::hwdb::Measurement> ms;
    for (const auto& [kern, rate] : {std::pair<const char*, double>{"runtime_fp32", 1.6e12}, {"runtime_adam_fp32", 2.2e12}})
        for (double b : {1e8, 1e9, 1e10}) {
            strata::hwdb::Measurement m;
            m.kind = "membw";
            m.device = "H200-SXM-141GB";
            m.params = {{"bytes", b}};
            m.labels = {{"kernel", kern}, {"dtype", "fp32"}};
            m.value = rate;
            ms.push_back(m);
        }
    std::map<std::string, double> got;
    for (const auto& f : fit_measurements(ms)) got[f.key] = f.params.at("Bps");
    REQUIRE(got.count("kernel/runtime_fp32") == 1);
    REQUIRE(got.count("kernel/runtime_adam_fp32") == 1);
    CHECK(got["kernel/runtime_fp32"] == Approx(1.6e12).epsilon(1e-6));
    CHECK(got["kernel/runtime_adam_fp32"] == Approx(2.2e12).epsilon(1e-6));
}

TEST_CASE("noisy small sizes fall back to the two-segment alpha-beta reading", "[profiler][fit]") {
    // All-reduce over 2 ranks (factor 2(n-1)/n = 1): the small sizes are dominated by wake-up
    // noise, which tilts the one-line relative fit flat. The fallback takes alpha as the fastest
    // time at any size (12 us, at 32 KiB) and busbw from the largest: (8 MiB x 1) / (20e-3 - 12e-6).
    const std::vector<double> S{8, 64, 512, 4096, 32768, 8388608};
    const std::vector<double> t{20e-6, 90e-6, 15e-6, 60e-6, 12e-6, 20e-3};
    const LineFit line = fit_line_relative({8, 64, 512, 4096, 32768, 8388608}, t);
    INFO("one-line fit: intercept " << line.intercept << ", slope " << line.slope);
    auto f = fit_alpha_beta(Collective::all_reduce, 2, S, t);
    REQUIRE(f.ok);
    CHECK(f.busbw_Bps > 0);
    if (!(line.ok && line.slope > 0)) {
        CHECK(f.alpha_s == Approx(12e-6));
        CHECK(f.busbw_Bps == Approx(8388608.0 / (20e-3 - 12e-6)));
    }
}

TEST_CASE("the fallback survives a smallest message slower than the largest", "[profiler][fit]") {
    // Heavy load: the 8 B all-reduce took 30 ms, longer than the 16 MiB one (25 ms). Alpha = the
    // fastest point (10 us, at 4 KiB); busbw = 16 MiB / (25e-3 - 10e-6). Still one fit, positive.
    const std::vector<double> S{8, 4096, 16777216};
    const std::vector<double> t{30e-3, 10e-6, 25e-3};
    auto f = fit_alpha_beta(Collective::all_reduce, 2, S, t);
    REQUIRE(f.ok);
    CHECK(f.busbw_Bps > 0);
    const LineFit line = fit_line_relative({8, 4096, 16777216}, t);
    if (!(line.ok && line.slope > 0)) {
        CHECK(f.alpha_s == Approx(10e-6));
        CHECK(f.busbw_Bps == Approx(16777216.0 / (25e-3 - 10e-6)));
    }
}

TEST_CASE("when the largest message is the fastest, the best rate seen is the bandwidth", "[profiler][fit]") {
    // A loaded host: times fall with size, so neither the line nor the two-segment reading has a
    // positive slope. alpha = 0 and busbw = the highest S x factor / t: 1 MiB / 1 ms (factor 1).
    const std::vector<double> S{8, 4096, 1048576};
    const std::vector<double> t{5e-3, 4e-3, 1e-3};
    const auto f = fit_alpha_beta(Collective::all_reduce, 2, S, t);
    REQUIRE(f.ok);
    CHECK(f.alpha_s == 0.0);
    CHECK(f.busbw_Bps == Approx(1048576.0 / 1e-3));
    // The same for a bandwidth curve (an SSD read served from the page cache): 16 MB / 1 ms.
    const auto c = fit_bandwidth({1e6, 4e6, 16e6}, {3e-3, 2e-3, 1e-3});
    REQUIRE(c.ok);
    CHECK(c.latency_s == 0.0);
    CHECK(c.Bps == Approx(16e9));
    // Relative errors of t = bytes / 16 GB/s: (3 - 0.0625) / 3, (2 - 0.25) / 2, 0 (ms).
    CHECK(c.mape == Approx((2.9375 / 3 + 1.75 / 2 + 0.0) / 3));
    // Nothing valid: still no fit.
    CHECK_FALSE(fit_bandwidth({1e6, 2e6}, {0.0, -1.0}).ok);
}

TEST_CASE("fit_measurements: interference slope per stand-in, through the origin", "[profiler][fit]") {
    // Rows as bench_overlap writes them: value = slowdown, params.sm_fraction = S / SMs. The
    // `copy` rows lie exactly on 2 x share; the sm_target rows on 3 x share with +-0.01 noise of
    // zero sum over symmetric x pairs; a row without a share is ignored.
    auto row = [](const char* proxy, const char* gemm_sms, double share, double slowdown) {
        strata::hwdb::Measurement m;
        m.kind = "overlap";
        m.device = "H100-SXM5-80GB";
        m.value = slowdown;
        m.params = {{"sm_fraction", share}};
        m.labels = {{"proxy", proxy}, {"gemm_sms", gemm_sms}};
        return m;
    };
    std::vector<strata::hwdb::Measurement> ms;
    for (double s : {0.1, 0.2, 0.3}) ms.push_back(row("copy", "all", s, 2 * s));
    ms.push_back(row("copy", "target", 0.1, 0.3 + 0.01));
    ms.push_back(row("copy", "target", 0.2, 0.6 - 0.005));  // 0.1 x 0.01 = 0.2 x 0.005: the noise cancels in sum(x y)
    ms.push_back(row("copy", "all", 0.0, 5.0));             // no share: not a point
    const auto fits = fit_measurements(ms);
    REQUIRE(fits.size() == 2);
    CHECK(fits[0].key == "copy");
    CHECK(fits[0].model == "proportional");
    CHECK(fits[0].params.at("slowdown_per_sm_share") == Approx(2.0).epsilon(1e-12));
    CHECK(fits[0].n_points == 3);
    CHECK(fits[0].mape == Approx(0).margin(1e-12));  // mean absolute error, in slowdown units
    CHECK(fits[0].valid_min == Approx(0.1));
    CHECK(fits[0].valid_max == Approx(0.3));
    CHECK(fits[1].key == "copy sm_target");
    CHECK(fits[1].params.at("slowdown_per_sm_share") == Approx(3.0).epsilon(1e-12));
    CHECK(fits[1].mape == Approx((0.01 + 0.005) / 2).epsilon(1e-9));
}
