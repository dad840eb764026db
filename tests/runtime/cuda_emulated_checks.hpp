// Helpers of the tests that run runtime/cuda's kernels on the CPU (cuda_emulation.hpp): "device"
// buffers of any width, device_cuda.cu's one-dimensional launch, and the comparison with the cpu
// kernels. Include inside namespace strata::runtime::emulated, after kernels.cuh.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

using strata::test::uniform_floats;
std::vector<float> randoms(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) { return uniform_floats(n, seed, lo, hi); }
/// fmt as TV's: 0 fp32, 1 bf16, 2 fp16.
std::vector<float> rounded(std::vector<float> v, int fmt) {
    if (fmt == 1) cpu::round_bf16(v.data(), static_cast<i64>(v.size()));
    if (fmt == 2) cpu::round_fp16(v.data(), static_cast<i64>(v.size()));
    return v;
}
const char* fmt_name(int fmt) { return fmt == 1 ? "bf16" : fmt == 2 ? "fp16" : "fp32"; }

/// "Device" memory of any width, filled from floats (rounded to a 2-byte one).
struct Buf {
    int fmt;
    std::vector<float> f;
    std::vector<std::uint16_t> h;  ///< bf16 or half bits
    Buf(const std::vector<float>& v, int w) : fmt(w) {
        if (w == 0) f = v;
        for (float x : w ? v : std::vector<float>{}) h.push_back(w == 1 ? __float2bfloat16_rn(x).bits : __float2half_rn(x).bits);
    }
    TV tv() { return fmt ? TV{h.data(), fmt} : TV{f.data(), 0}; }
    std::vector<float> get() const {
        if (!fmt) return f;
        std::vector<float> out;
        for (auto b : h) out.push_back(fmt == 1 ? __bfloat162float(__nv_bfloat16{b}) : __half2float(__half{b}));
        return out;
    }
};

template <class Body>
void run1(i64 n, Body body) {  // device_cuda.cu's launch1
    launch(dim3(blocks_for(n)), dim3(kThreads), 0, body);
}

void same(const std::vector<float>& ref, const std::vector<float>& got, const char* what, double tol) {
    REQUIRE(ref.size() == got.size());
    double worst = 0, scale = 1e-30;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
        worst = std::max(worst, std::fabs(static_cast<double>(ref[i]) - got[i]));
    }
    INFO(what << ": largest difference " << worst << ", scale " << scale);
    CHECK(worst <= tol * scale);
}

}  // namespace
