// The cpu backend measures the kernels the runtime runs (runtime/include/strata/runtime/
// cpu_kernels.hpp), single-threaded as a rank runs them: its causal attention forward and backward
// (attention points, FLOPs counted as the lowering counts them), and its memory-bound kernels
// (norms, activation, residual, forward and backward of one layer) as an achieved bandwidth,
// bytes counted as the lowering charges them. On a CPU those kernels are bound by arithmetic
// (tanh, exp, divisions), not by memory: a STREAM triad says nothing about them. Fit key
// "kernel/runtime", which the cost model's memory-bound class prefers to the triad's "hbm" (the
// GEMM roofline keeps the triad); docs/profiler.md.
#include <chrono>
#include <cmath>
#include <tuple>
#include <vector>

#include "host_bench.hpp"
#include "strata/runtime/cpu_kernels.hpp"
#include "strata/runtime/runtime.hpp"

namespace strata::profiler::host {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void fill(std::vector<float>& v, std::uint32_t seed) {
    for (std::size_t i = 0; i < v.size(); ++i) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = static_cast<float>((seed >> 8) & 0xFFFF) / 65536.0f - 0.5f;
    }
}
}  // namespace

void bench_runtime_attention_cpu(Context& ctx) {
    const bool quick = ctx.opt.quick;
    struct Shape {
        std::int64_t batch, heads, seq, d;
    };
    std::vector<Shape> shapes;
    if (ctx.opt.plan_shapes) {  // a plan's own
        for (const Options::AttentionShape& a : ctx.opt.attention_shapes) shapes.push_back({a.batch, a.heads, a.seq, a.head_dim});
    } else {
        for (int d : {16, 64})
            for (int s : quick ? std::vector<int>{16, 64, 256} : std::vector<int>{16, 64, 256, 1024}) shapes.push_back({1, 4, s, d});
    }
    const int reps = quick ? 3 : 5;
    int done = 0;
    for (const Shape& sh : shapes) {
        ctx.progress("attention", done++, static_cast<int>(shapes.size()));
        ctx.check();
        const std::int64_t s = sh.seq, d = sh.d, heads = sh.heads, T = sh.batch * s, row = 3LL * heads * d;
        std::vector<float> qkv(static_cast<std::size_t>(T * row)), out(static_cast<std::size_t>(T * heads * d)),
            lse(static_cast<std::size_t>(T * heads)), dout(out.size()), dqkv(qkv.size());
        fill(qkv, 7u + static_cast<std::uint32_t>(s));
        fill(dout, 11u);
        // The lowering's count: 2 b s^2 heads (dqk + dv) / 2 forward (causal), 2.5x that backward.
        const double fwd_flops = 2.0 * static_cast<double>(sh.batch) * s * s * heads * (2.0 * d) / 2.0;
        for (const bool backward : {false, true}) {
            std::vector<double> times;
            for (int r = 0; r < reps + 1; ++r) {
                const auto t0 = Clock::now();
                if (!backward) runtime::cpu::attention_forward(out.data(), lse.data(), qkv.data(), T, s, heads, heads, d);
                else runtime::cpu::attention_backward(dqkv.data(), qkv.data(), out.data(), lse.data(), dout.data(), T, s, heads, heads, d);
                if (r > 0) times.push_back(since(t0));
            }
            const double flops = (backward ? 2.5 : 1.0) * fwd_flops;
            std::vector<std::pair<std::string, double>> key{{"seq", static_cast<double>(s)}, {"head_dim", static_cast<double>(d)}};
            if (ctx.opt.plan_shapes) key.insert(key.end(), {{"batch", static_cast<double>(sh.batch)}, {"heads", static_cast<double>(heads)}});
            hwdb::Measurement m = point(ctx, "attention", make_key(backward ? "bwd" : "fwd", key), "flop/s", rate_summary(flops, times));
            m.params = {{"seq", static_cast<double>(s)}, {"head_dim", static_cast<double>(d)}, {"heads", static_cast<double>(heads)}, {"batch", static_cast<double>(sh.batch)}};
            m.labels = {{"dtype", "fp32"}, {"causal", "1"}, {"direction", backward ? "bwd" : "fwd"}, {"impl", "strata-runtime"}};
            if (ctx.opt.plan_shapes) m.labels["origin"] = "plan";
            ctx.add(std::move(m));
        }
    }
}

// The cuda backend's attention (exact, as batched GEMMs in causal row blocks, or the flash kernels
// for bf16 at head dims 64 and 128), in fp32 and bf16 (a plan's own shapes: in its dtype, fp16 too), as attention points of impl "strata-runtime": a plan of precision fp32 (only
// the runtime runs those on a GPU), and any plan `strata validate` runs, is priced by the kernel it
// runs (CostContext::runtime_kernels); frameworks' attention keeps the cuda profile's own points.
// Sequences x heads near the validation plans' (GPT-2 124M: 8 x 12 heads of 64; Llama 2 7B: 1 x 32
// of 128 at 4096). FLOPs counted as the lowering counts them (causal: half of 4 b s^2 h d).
void bench_runtime_attention_cuda(Context& ctx) {
    struct Shape {
        int batch, seq, heads, d;
    };
    std::vector<Shape> shapes{{8, 1024, 12, 64}, {4, 1024, 16, 128}, {1, 4096, 32, 128}, {2, 4096, 16, 64}};
    if (!ctx.opt.quick) {
        shapes.push_back({4, 2048, 16, 128});
        shapes.push_back({1, 8192, 16, 128});
    }
    if (ctx.opt.plan_shapes) {  // a plan's own
        shapes.clear();
        for (const Options::AttentionShape& a : ctx.opt.attention_shapes)
            shapes.push_back({static_cast<int>(a.batch), static_cast<int>(a.seq), static_cast<int>(a.heads), static_cast<int>(a.head_dim)});
    }
    const int reps = ctx.opt.quick ? 3 : 5;
    const std::vector<std::string> dtypes = ctx.opt.plan_shapes ? std::vector<std::string>{ctx.opt.plan_dtype} : std::vector<std::string>{"fp32", "bf16"};
    const int total = static_cast<int>(shapes.size() * dtypes.size());
    int done = 0;
    for (const std::string& dt : dtypes)
    for (const Shape& s : shapes) {
        ctx.progress("attention (runtime)", done++, total);
        ctx.check();
        const runtime::AttentionTiming t = runtime::time_cuda_attention(s.batch, s.seq, s.heads, s.d, reps, dt);
        const double fwd_flops = 2.0 * s.batch * static_cast<double>(s.seq) * s.seq * s.heads * s.d;
        for (const bool backward : {false, true}) {
            const double secs = backward ? t.backward_s : t.forward_s;
            if (secs <= 0) continue;
            hwdb::Measurement m = point(ctx, "attention",
                                        make_key(dt + (backward ? " runtime bwd" : " runtime fwd"),
                                                 {{"seq", s.seq}, {"head_dim", s.d}, {"batch", s.batch}, {"heads", s.heads}}),
                                        "flop/s", rate_summary((backward ? 2.5 : 1.0) * fwd_flops, {secs}));
            m.params = {{"seq", s.seq}, {"head_dim", s.d}, {"heads", s.heads}, {"batch", s.batch}};
            m.labels = {{"dtype", dt}, {"causal", "1"}, {"direction", backward ? "bwd" : "fwd"}, {"impl", "strata-runtime"}};
            if (ctx.opt.plan_shapes) m.labels["origin"] = "plan";
            ctx.add(std::move(m));
        }
    }
}

void bench_runtime_memory_bound_cpu(Context& ctx) {
    const bool quick = ctx.opt.quick;
    // (tokens, hidden): from the runtime's tiny test models to small real layers.
    const std::vector<std::pair<int, int>> shapes = quick ? std::vector<std::pair<int, int>>{{32, 64}, {256, 256}, {1024, 512}}
                                                          : std::vector<std::pair<int, int>>{{32, 64}, {256, 256}, {1024, 512}, {2048, 1024}};
    const int reps = quick ? 3 : 5;
    for (std::size_t si = 0; si < shapes.size(); ++si) {
        ctx.progress("memory-bound", static_cast<int>(si), static_cast<int>(shapes.size()));
        ctx.check();
        const std::int64_t T = shapes[si].first, h = shapes[si].second, f = 4 * h;
        std::vector<float> x(static_cast<std::size_t>(T * h)), y(x.size()), dy(x.size()), dx(x.size()), w(static_cast<std::size_t>(h), 1.0f),
            b(static_cast<std::size_t>(h)), dw(w.size()), db(w.size()), a(static_cast<std::size_t>(T * f)), ga(a.size()), da(a.size());
        fill(x, 3u);
        fill(dy, 5u);
        fill(a, 9u);
        // One GPT layer's memory-bound kernels, forward and backward, as the lowering emits them:
        // two norms, two residual adds and the activation each way.
        std::vector<double> times;
        for (int r = 0; r < reps + 1; ++r) {
            const auto t0 = Clock::now();
            for (int k = 0; k < 2; ++k) {
                runtime::cpu::norm_forward(y.data(), x.data(), w.data(), b.data(), T, h);
                runtime::cpu::add(dx.data(), x.data(), y.data(), b.data(), T, h);
            }
            runtime::cpu::gelu_forward(ga.data(), a.data(), T * f);
            for (int k = 0; k < 2; ++k) {
                runtime::cpu::norm_backward(dx.data(), dw.data(), db.data(), x.data(), dy.data(), w.data(), y.data(), true, T, h);
                runtime::cpu::bias_grad(db.data(), dy.data(), T, h);
            }
            runtime::cpu::gelu_backward(da.data(), a.data(), ga.data(), T * f);
            if (r > 0) times.push_back(since(t0));
        }
        // Bytes as the lowering charges these ops in an fp32 plan, the runtime's precision (4-byte
        // activations): forward 2 x 2Th (norms) + 2 x 3Th (residuals) + 2Tf (GELU), backward
        // 2 x 3Th + 2 x 2Th + 4Tf elements.
        const double bytes = 4.0 * (20.0 * T * h + 6.0 * T * f);
        hwdb::Measurement m = point(ctx, "membw", make_key("runtime", {{"bytes", bytes}}), "B/s", rate_summary(bytes, times));
        m.params = {{"bytes", bytes}, {"tokens", static_cast<double>(T)}, {"hidden", static_cast<double>(h)}};
        m.labels = {{"kernel", "runtime"}, {"impl", "strata-runtime"}};
        ctx.add(std::move(m));
    }
    // The runtime's fused AdamW over a flat range, bytes as the lowering charges Op::optimizer_gpu
    // in fp32 (PlanSpec::adam_gpu_bytes_per_param: 28 a parameter, read and written).
    for (const std::int64_t n : {std::int64_t{1} << 14, std::int64_t{1} << 18, std::int64_t{1} << 21}) {
        ctx.check();
        std::vector<float> p(static_cast<std::size_t>(n)), mo(p.size()), v(p.size()), g(p.size());
        fill(p, 13u);
        fill(g, 17u);
        std::vector<double> times;
        for (int r = 0; r < reps + 1; ++r) {
            const auto t0 = Clock::now();
            runtime::cpu::adamw(p.data(), mo.data(), v.data(), g.data(), nullptr, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, r + 1);
            if (r > 0) times.push_back(since(t0));
        }
        sim::PlanSpec fp32;
        fp32.precision = sim::Precision::fp32;
        const double bytes = fp32.adam_gpu_bytes_per_param() * static_cast<double>(n);
        hwdb::Measurement m = point(ctx, "membw", make_key("runtime_adam", {{"bytes", bytes}}), "B/s", rate_summary(bytes, times));
        m.params = {{"bytes", bytes}, {"params", static_cast<double>(n)}};
        m.labels = {{"kernel", "runtime_adam"}, {"impl", "strata-runtime"}};
        ctx.add(std::move(m));
    }
}

// The cuda backend's memory-bound kernels and AdamW, as the cpu backend's above (same kernel
// sequence, bytes as the lowering charges them), in membw rows of kernel "runtime_fp32",
// "runtime_bf16" (the layer on bf16 buffers) and "runtime_adam_fp32": they price fp32 plans (only
// this runtime runs those on a GPU) and what `strata validate` runs; frameworks' kernels keep the
// HBM fit (docs/profiler.md).
void bench_runtime_memory_bound_cuda(Context& ctx) {
    const bool quick = ctx.opt.quick;
    struct Shape {
        int tokens, hidden;
        std::int64_t adam;
    };
    // GPT-2 124M's and 1.5B's layers, a 4096-wide one; AdamW over 4 M to 64 M parameters.
    std::vector<Shape> shapes{{8192, 768, std::int64_t{1} << 22}, {4096, 1600, std::int64_t{1} << 24}, {4096, 4096, std::int64_t{1} << 26}};
    if (!quick) shapes.push_back({16384, 4096, std::int64_t{1} << 27});
    const int reps = quick ? 3 : 5;
    sim::PlanSpec fp32;
    fp32.precision = sim::Precision::fp32;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        ctx.progress("memory-bound (runtime)", static_cast<int>(i), static_cast<int>(shapes.size()));
        ctx.check();
        const Shape& s = shapes[i];
        const runtime::KernelTiming t = runtime::time_cuda_kernels(s.tokens, s.hidden, s.adam, reps);
        const runtime::KernelTiming th = runtime::time_cuda_kernels(s.tokens, s.hidden, 1, reps, true);
        const double T = s.tokens, h = s.hidden, f = 4.0 * h;
        const double layer_elems = 20.0 * T * h + 6.0 * T * f, adam_bytes = fp32.adam_gpu_bytes_per_param() * static_cast<double>(s.adam);
        for (const auto& [kern, bytes, secs] : {std::tuple<const char*, double, double>{"runtime_fp32", 4.0 * layer_elems, t.layer_s},
                                                 {"runtime_bf16", 2.0 * layer_elems, th.layer_s},
                                                 {"runtime_adam_fp32", adam_bytes, t.adamw_s}}) {
            if (secs <= 0) continue;
            hwdb::Measurement m = point(ctx, "membw", make_key(kern, {{"bytes", bytes}}), "B/s", rate_summary(bytes, {secs}));
            m.params = {{"bytes", bytes}, {"tokens", T}, {"hidden", h}};
            m.labels = {{"kernel", kern}, {"impl", "strata-runtime"}, {"dtype", std::string(kern) == "runtime_bf16" ? "bf16" : "fp32"}};
            ctx.add(std::move(m));
        }
    }
}

}  // namespace strata::profiler::host
