// The executor's cuda path in CI: whole runs on the emulated device (runtime/src/device_emulated.cpp:
// the cuda backend's interface over the cpu kernels, with device memory the host cannot touch,
// operand ranges checked, bf16 storage, and copy lanes that run as late as their events allow)
// against the cpu backend. The same runs go through a GPU in test_cuda.cpp. A glue bug of the
// cuda path (a host read of device memory, a copy not ordered by the Program's events, an operand
// past its buffer) fails here instead of on a lent GPU.
#include <catch2/catch.hpp>

#include "device.hpp"
#include "device_runs.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

TEST_CASE("a run on the emulated device follows the cpu backend's loss curve", "[runtime]") {
    // The same kernels as the cpu backend's: bf16 curves to 1e-6 as well (5e-3 on a GPU), so that
    // a glue bug in a bf16 run shows (an EP copy-back left out passed 5e-3).
    device_runs::check_loss_curves(runtime::Backend::emulated, 1e-6, device_runs::Curves::fp32_bf16);
}

// [slow]: the release build runs them, the sanitizer stage leaves them out (with them this was its
// longest test, 152 s under ASan); scripts/tsan.sh runs them under ThreadSanitizer.
TEST_CASE("fp16 and parallel runs on the emulated device follow the cpu backend's loss curve", "[runtime][slow]") {
    device_runs::check_loss_curves(runtime::Backend::emulated, 1e-6, device_runs::Curves::fp16_parallel);
}

TEST_CASE("the emulated device: checkpoints, timelines, memory and refusals", "[runtime]") {
    device_runs::check_checkpoint_and_timeline(runtime::Backend::emulated);
}

TEST_CASE("the emulated device enforces the cuda device's rules", "[runtime]") {
    using runtime::Device;
    std::unique_ptr<Device> d = runtime::make_emulated_device();
    float* a = d->alloc(8, runtime::Storage::fp32);
    float* b = d->alloc(8, runtime::Storage::fp32);
    std::vector<float> host{1, 2, 3, 4, 5, 6, 7, 8}, out(8);
    d->copy(a, host.data(), 8);
    // An operand past its buffer, and a kernel handed host memory, are errors naming the call.
    CHECK_THROWS_WITH(d->mul(b, a, a, 9), Catch::Contains("mul") && Catch::Contains("past its end"));
    CHECK_THROWS_WITH(d->mul(b, a, host.data(), 8), Catch::Contains("host address"));
    CHECK_THROWS_WITH(d->wait(7), Catch::Contains("never recorded"));
    CHECK_THROWS_WITH(d->release(a, 4), Catch::Contains("released as 4"));
    // A copy on the h2d lane runs as late as the events allow: a kernel that does not wait for
    // it reads the buffer's old values (zeros); one that waits reads the copy.
    std::vector<float> twos(8, 2.0f);
    d->set_lane(Device::lane_h2d);
    d->copy_async(b, twos.data(), 8);
    d->record(0);
    d->set_lane(Device::lane_compute);
    float* c = d->alloc(8, runtime::Storage::fp32);
    d->mul(c, a, b, 8);  // no wait: b is still zero here
    d->copy(out.data(), c, 8);
    CHECK(out == std::vector<float>(8, 0.0f));
    d->wait(0);
    d->mul(c, a, b, 8);
    d->copy(out.data(), c, 8);
    CHECK(out == std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16});
    CHECK(d->reached(0));
    // A bf16 buffer holds what it is given rounded to bf16.
    float* h = d->alloc(1, runtime::Storage::bf16);
    const float third = 1.0f / 3.0f;
    d->copy(h, &third, 1);
    float back = 0;
    d->copy(&back, h, 1);
    CHECK(back == 0.333984375f);  // 1/3 to 8 significant bits, ties to even
    for (float* p : {a, b, c}) d->release(p, 8);
    d->release(h, 1);
}
