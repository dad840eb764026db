// Times the cuda backend's own kernels for the profiler (runtime.hpp: time_cuda_attention), with
// the device's stream events, on random inputs.
#include <algorithm>
#include <random>
#include <vector>

#include "device.hpp"
#include "strata/common/error.hpp"
#include "strata/runtime/runtime.hpp"

namespace strata::runtime {

namespace {
using i64 = std::int64_t;

/// A device buffer of n elements (fp32, or bf16) for one timing, given back at scope end.
struct Buf {
    Device& d;
    float* p;
    i64 n;
    Buf(Device& dev, i64 count, const char* who, Storage fmt = Storage::fp32) : d(dev), p(dev.alloc(count, fmt)), n(count) {
        if (!p) throw RuntimeError(std::string(who) + ": the device refused " + std::to_string(count * (fmt == Storage::fp32 ? 4 : 2)) + " bytes");
    }
    ~Buf() { d.release(p, n); }
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
}  // namespace

AttentionTiming time_cuda_attention(int batch, int seq, int heads, int head_dim, int reps, const std::string& dtype) {
    if (batch < 1 || seq < 1 || heads < 1 || head_dim < 1 || reps < 1) throw InputError("time_cuda_attention", "shape", "must be positive");
    if (dtype != "fp32" && dtype != "bf16" && dtype != "fp16") throw InputError("time_cuda_attention", "dtype", "must be fp32, bf16 or fp16 (got " + dtype + ")");
    std::unique_ptr<Device> dev = open_cuda_device();
    const i64 T = static_cast<i64>(batch) * seq, row = 3LL * heads * head_dim, od = static_cast<i64>(heads) * head_dim;
    std::vector<float> h(static_cast<std::size_t>(T * row));
    std::mt19937 g(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : h) x = u(g);
    const char* who = "time_cuda_attention";
    const Storage H = dtype == "bf16" ? Storage::bf16 : dtype == "fp16" ? Storage::fp16 : Storage::fp32;
    Buf qkv(*dev, T * row, who, H), out(*dev, T * od, who, H), lse(*dev, T * heads, who), dout(*dev, T * od, who, H),
        dqkv(*dev, T * row, who, H);
    dev->copy(qkv.p, h.data(), T * row);
    dev->copy(dout.p, h.data(), T * od);
    std::vector<double> fwd, bwd;
    std::vector<std::int64_t> t;
    for (int r = 0; r < reps + 1; ++r) {
        dev->timing_reset(3);
        dev->mark(0);
        dev->attention_forward(out.p, lse.p, qkv.p, T, seq, heads, heads, head_dim, {}, 0);
        dev->mark(1);
        dev->attention_backward(dqkv.p, qkv.p, out.p, lse.p, dout.p, T, seq, heads, heads, head_dim, {}, 0);
        dev->mark(2);
        dev->sync();
        dev->times(t);
        if (r == 0) continue;  // warm-up: the workspace is allocated on the first call
        fwd.push_back(static_cast<double>(t[1] - t[0]) * 1e-9);
        bwd.push_back(static_cast<double>(t[2] - t[1]) * 1e-9);
    }
    return {median(fwd), median(bwd)};
}

KernelTiming time_cuda_kernels(int tokens, int hidden, std::int64_t adam_params, int reps, bool bf16) {
    if (tokens < 1 || hidden < 1 || adam_params < 1 || reps < 1) throw InputError("time_cuda_kernels", "shape", "must be positive");
    std::unique_ptr<Device> dev = open_cuda_device();
    const i64 T = tokens, h = hidden, f = 4 * h, n = adam_params;
    const char* who = "time_cuda_kernels";
    const Storage H = bf16 ? Storage::bf16 : Storage::fp32;
    Buf x(*dev, T * h, who, H), y(*dev, T * h, who, H), dy(*dev, T * h, who, H), dx(*dev, T * h, who, H), w(*dev, h, who, H),
        b(*dev, h, who, H), dw(*dev, h, who), db(*dev, h, who), a(*dev, T * f, who, H), ga(*dev, T * f, who, H), da(*dev, T * f, who, H),
        p(*dev, n, who), m(*dev, n, who), v(*dev, n, who), g(*dev, n, who);
    std::vector<float> host(static_cast<std::size_t>(std::max(T * f, n)));
    std::mt19937 gen(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& e : host) e = u(gen);
    dev->copy(x.p, host.data(), T * h);
    dev->copy(dy.p, host.data(), T * h);
    dev->copy(a.p, host.data(), T * f);
    dev->copy(w.p, host.data(), h);
    dev->copy(g.p, host.data(), n);
    std::vector<double> layer, adam;
    std::vector<std::int64_t> t;
    for (int r = 0; r < reps + 1; ++r) {
        dev->timing_reset(3);
        dev->mark(0);
        for (int k = 0; k < 2; ++k) {
            dev->norm_forward(y.p, x.p, w.p, b.p, T, h);
            dev->add(dx.p, x.p, y.p, b.p, T, h);
        }
        dev->gelu_forward(ga.p, a.p, T * f);
        for (int k = 0; k < 2; ++k) {
            dev->norm_backward(dx.p, dw.p, db.p, x.p, dy.p, w.p, y.p, true, T, h);
            dev->bias_grad(db.p, dy.p, T, h);
        }
        dev->gelu_backward(da.p, a.p, ga.p, T * f);
        dev->mark(1);
        dev->adamw(p.p, m.p, v.p, g.p, nullptr, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, r + 1);
        dev->mark(2);
        dev->sync();
        dev->times(t);
        if (r == 0) continue;  // warm-up
        layer.push_back(static_cast<double>(t[1] - t[0]) * 1e-9);
        adam.push_back(static_cast<double>(t[2] - t[1]) * 1e-9);
    }
    return {median(layer), median(adam)};
}

}  // namespace strata::runtime
