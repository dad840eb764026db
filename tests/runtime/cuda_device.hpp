// The cuda backend's tests' fixture (test_cuda.cpp): the device, or null where there is none
// (then every case returns at once and ctest reports the test skipped), device copies of host
// vectors, and the comparison of a cuda result with the cpu kernels' reference.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "device.hpp"
#include "runtime_fixtures.hpp"

namespace strata::test::cuda {

using runtime::Device;

// The device, or null where there is none (then every case returns at once; the message makes
// ctest report the test as skipped).
inline Device* device() {
    static std::unique_ptr<Device> dev;
    static bool tried = false;
    if (!tried) {
        tried = true;
        try {
            // STRATA_TEST_EMULATED: the kernel cases against the emulated device (CI's check of the
            // suite itself, which otherwise runs only on a lent GPU).
            dev = std::getenv("STRATA_TEST_EMULATED") ? runtime::make_emulated_device() : runtime::open_cuda_device();
        } catch (const std::exception& e) {
            const std::string why = e.what();
            if (why.find("no CUDA device") != std::string::npos || why.find("built without CUDA") != std::string::npos) {
                std::printf("skipped: no CUDA device (%s)\n", why.c_str());
                return nullptr;
            }
            FAIL("the cuda backend did not open: " << why);
        }
        std::printf("device: %s\n", dev->describe().c_str());
    }
    return dev.get();
}

inline std::vector<float> randoms(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) { return uniform_floats(n, seed, lo, hi); }

// A device copy of a host vector, freed with the test.
struct Dev {
    Device& d;
    float* p = nullptr;
    std::int64_t n = 0;
    Dev(Device& dev, const std::vector<float>& h, runtime::Storage fmt = runtime::Storage::fp32) : d(dev), n(static_cast<std::int64_t>(h.size())) {
        p = d.alloc(std::max<std::int64_t>(n, 1), fmt);
        REQUIRE(p != nullptr);
        d.copy(p, h.data(), n);
    }
    ~Dev() { d.release(p, std::max<std::int64_t>(n, 1)); }
    std::vector<float> get() const {
        std::vector<float> h(static_cast<std::size_t>(n));
        d.copy(h.data(), p, n);
        return h;
    }
};

// Largest difference, relative to the reference's largest magnitude.
inline void same(const std::vector<float>& ref, const std::vector<float>& got, const char* what, double tol = 2e-5) {
    REQUIRE(ref.size() == got.size());
    double worst = 0, scale = 1e-30;
    std::size_t at = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
        const double d = std::fabs(static_cast<double>(ref[i]) - got[i]);
        if (d > worst) worst = d, at = i;
    }
    INFO(what << ": largest difference " << worst << " at " << at << " (cpu " << ref[at] << ", cuda " << got[at] << "), scale " << scale);
    CHECK(worst <= tol * scale);
}

}  // namespace strata::test::cuda
