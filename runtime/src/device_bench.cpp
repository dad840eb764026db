// Times the cuda backend's own kernels for the profiler (runtime.hpp: time_cuda_attention), with
// the device's stream events, on random inputs.
#include <algorithm>
#include <random>
#include <vector>

#include "device.hpp"
#include "strata/common/error.hpp"
#include "strata/runtime/runtime.hpp"

namespace strata::runtime {

AttentionTiming time_cuda_attention(int batch, int seq, int heads, int head_dim, int reps) {
    if (batch < 1 || seq < 1 || heads < 1 || head_dim < 1 || reps < 1) throw InputError("time_cuda_attention", "shape", "must be positive");
    std::unique_ptr<Device> dev = open_cuda_device();
    using i64 = std::int64_t;
    const i64 T = static_cast<i64>(batch) * seq, row = 3LL * heads * head_dim, od = static_cast<i64>(heads) * head_dim;
    std::vector<float> h(static_cast<std::size_t>(T * row));
    std::mt19937 g(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : h) x = u(g);
    struct Buf {
        Device& d;
        float* p;
        i64 n;
        ~Buf() { d.release(p, n); }
    };
    auto make = [&](i64 n) {
        float* p = dev->alloc(n);
        if (!p) throw RuntimeError("time_cuda_attention: the device refused " + std::to_string(n * 4) + " bytes");
        return p;
    };
    Buf qkv{*dev, make(T * row), T * row}, out{*dev, make(T * od), T * od}, lse{*dev, make(T * heads), T * heads},
        dout{*dev, make(T * od), T * od}, dqkv{*dev, make(T * row), T * row};
    dev->copy(qkv.p, h.data(), T * row);
    dev->copy(dout.p, h.data(), T * od);
    std::vector<double> fwd, bwd;
    std::vector<std::int64_t> t;
    for (int r = 0; r < reps + 1; ++r) {
        dev->timing_reset(3);
        dev->mark(0);
        dev->attention_forward(out.p, lse.p, qkv.p, T, seq, heads, heads, head_dim, {});
        dev->mark(1);
        dev->attention_backward(dqkv.p, qkv.p, out.p, lse.p, dout.p, T, seq, heads, heads, head_dim, {});
        dev->mark(2);
        dev->sync();
        dev->times(t);
        if (r == 0) continue;  // warm-up: the workspace is allocated on the first call
        fwd.push_back(static_cast<double>(t[1] - t[0]) * 1e-9);
        bwd.push_back(static_cast<double>(t[2] - t[1]) * 1e-9);
    }
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    return {median(fwd), median(bwd)};
}

}  // namespace strata::runtime
