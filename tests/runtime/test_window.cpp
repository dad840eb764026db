// Sliding-window attention on the cpu backend: the kernels against a softmax over the window
// written out here, gradients against finite differences, and every parallel split (context
// parallelism's ring blocks included) against one rank's curve. The device path's windows:
// device_runs.hpp (whole runs), test_flash_emulated.cpp and test_cuda_emulated.cpp (kernels).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/common/error.hpp"
#include "strata/runtime/cpu_kernels.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;
namespace cpu = strata::runtime::cpu;

namespace {

// The tiny Llama (4 layers, 8 positions) with a 3-token window on layers 0 and 2.
ModelSpec windowed_llama() {
    ModelSpec m = tiny_llama(4);
    m.name = "tiny-windowed";
    m.sliding_window = 3;
    m.window_attn_skip_freq = 2;
    return m;
}

}  // namespace

TEST_CASE("windowed attention: each query's softmax over itself and the window - 1 keys before it", "[runtime][window]") {
    using i64 = std::int64_t;
    const i64 seq = 6, T = 2 * seq, hq = 2, hkv = 1, d = 4, W = (hq + 2 * hkv) * d, window = 2;
    const std::vector<float> qkv = uniform_floats(static_cast<std::size_t>(T * W), 3);
    std::vector<float> out(static_cast<std::size_t>(T * hq * d)), lse(static_cast<std::size_t>(T * hq));
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), T, seq, hq, hkv, d, {}, window);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    for (i64 t = 0; t < T; ++t)
        for (i64 h = 0; h < hq; ++h) {
            const i64 pos = t % seq, first = std::max<i64>(t - pos, t - window + 1);  // same sequence, inside the window
            std::vector<double> sc;
            double mx = -1e30;
            for (i64 j = first; j <= t; ++j) {
                double dot = 0;
                for (i64 i = 0; i < d; ++i) dot += qkv[t * W + h * d + i] * qkv[j * W + hq * d + i];  // one K head (GQA)
                sc.push_back(dot * scale);
                mx = std::max(mx, sc.back());
            }
            double sum = 0;
            for (double s : sc) sum += std::exp(s - mx);
            INFO("row " << t << ", head " << h);
            CHECK(lse[t * hq + h] == Approx(mx + std::log(sum)).epsilon(1e-5));
            for (i64 i = 0; i < d; ++i) {
                double o = 0;
                for (i64 j = first; j <= t; ++j) o += std::exp(sc[static_cast<std::size_t>(j - first)] - mx) / sum * qkv[j * W + (hq + hkv) * d + i];
                CHECK(out[t * hq * d + h * d + i] == Approx(o).epsilon(1e-5).margin(1e-6));
            }
        }
}

TEST_CASE("windowed attention: gradients, and every split on one rank's curve", "[runtime][window]") {
    const ModelSpec m = windowed_llama();
    // Layer 0 windowed, layer 1 whole: the weights before and after the attention of each.
    check_gradients(m, cpu_plan(), 0, {{"qkv.weight", 0}, {"qkv.weight", 1}, {"proj.weight", 2}, {"word_embedding.weight", -1}});
    // The window changes the function: a 3-token window trains another curve than full attention,
    // and a window as long as the sequence is full attention exactly.
    const std::vector<double> windowed = losses(m, cpu_plan(), 3);
    ModelSpec full = m;
    full.sliding_window = 0;
    full.window_attn_skip_freq = 0;
    const std::vector<double> whole = losses(full, cpu_plan(), 3);
    CHECK(windowed.back() != whole.back());
    ModelSpec covering = m;
    covering.sliding_window = m.seq_len;
    CHECK(losses(covering, cpu_plan(), 3) == whole);
    PlanSpec cp = cpu_plan();
    cp.cp = 2;  // the ring's blocks see the window across the two ranks' chunks
    PlanSpec sp = cpu_plan(2);
    sp.sequence_parallel = true;
    PlanSpec rc = cpu_plan(1, 2);
    rc.recompute = Recompute::full;
    check_against_single_rank(m, {{"tp 2 with SP", sp}, {"pp 2, full recompute", rc}, {"dp 2", cpu_plan(1, 1, 2)}, {"cp 2", cp}});
}
