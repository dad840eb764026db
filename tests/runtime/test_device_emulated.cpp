// The executor's cuda path in CI: whole runs on the emulated device (runtime/src/device_emulated.cpp:
// the cuda backend's interface over the cpu kernels, with device memory the host cannot touch,
// operand ranges checked, bf16 storage, and copy lanes that run as late as their events allow)
// against the cpu backend. The same runs go through a GPU in test_cuda.cpp. A glue bug of the
// cuda path (a host read of device memory, a copy not ordered by the Program's events, an operand
// past its buffer) fails here instead of on a lent GPU.
#include <catch2/catch.hpp>

#include <tuple>

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

// A device a rank, as on a machine of several GPUs: the plain collectives and the pipeline's
// transfers on communicators (NCCL's semantics emulated: paired by the order each member posts
// in, which the emulation checks against the Program's match ids), the rest staged.
TEST_CASE("parallel runs on emulated devices of their own, through communicators, follow the cpu backend's curve", "[runtime]") {
    device_runs::check_curves(runtime::Backend::emulated, device_runs::parallel_variants(), 1e-6, false);
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

// The communicators' emulation against sums by hand: uneven slices (7 elements over 2 members cut
// at 7 q / 2, as the lowering cuts a flat range), the three reduce-scatter modes, a bf16 output,
// and members that post in different orders stopped by name, where NCCL would pair them wrongly.
TEST_CASE("the emulated device's communicators: NCCL's operations and its pairing by order", "[runtime]") {
    using runtime::Device;
    using runtime::DeviceComm;
    std::unique_ptr<Device> d0 = runtime::make_emulated_device(), d1 = runtime::make_emulated_device();
    auto comms = d0->comms_with({d0.get(), d1.get()});
    REQUIRE(comms.size() == 2);
    CHECK(comms[1]->rank() == 1);
    CHECK(comms[0]->size() == 2);
    int woken = 0;
    comms[0]->set_notify([&] { ++woken; });
    Device* dev[2] = {d0.get(), d1.get()};
    auto upload = [&](int m, const std::vector<float>& v, runtime::Storage s = runtime::Storage::fp32) {
        float* p = dev[m]->alloc(static_cast<std::int64_t>(v.size()), s);
        dev[m]->copy(p, v.data(), static_cast<std::int64_t>(v.size()));
        return p;
    };
    auto read = [&](int m, const float* p, std::size_t n) {
        std::vector<float> v(n);
        dev[m]->copy(v.data(), p, static_cast<std::int64_t>(n));
        return v;
    };
    const std::vector<std::int64_t> off{0, 3, 7};  // 7 * 1 / 2 = 3
    // all-reduce: both get the sum once both have posted.
    float* x0 = upload(0, {1, 2, 3, 4, 5, 6, 7});
    float* x1 = upload(1, {10, 20, 30, 40, 50, 60, 70});
    comms[0]->all_reduce(x0, x0, 7, 11);
    CHECK_FALSE(comms[0]->done());  // member 1 has not posted
    comms[1]->all_reduce(x1, x1, 7, 11);
    CHECK(comms[0]->done());
    CHECK(woken == 1);
    CHECK(read(0, x0, 7) == std::vector<float>{11, 22, 33, 44, 55, 66, 77});
    CHECK(read(1, x1, 7) == read(0, x0, 7));
    // all-gather of uneven slices in place: member 0 owns [0, 3), member 1 [3, 7).
    float* g0 = upload(0, {1, 2, 3, 0, 0, 0, 0});
    float* g1 = upload(1, {0, 0, 0, 4, 5, 6, 7});
    comms[0]->all_gather(g0, g0, off, 12);
    comms[1]->all_gather(g1, g1 + 3, off, 12);
    CHECK(read(0, g0, 7) == std::vector<float>{1, 2, 3, 4, 5, 6, 7});
    CHECK(read(1, g1, 7) == read(0, g0, 7));
    // reduce-scatter: into a slice (written, then accumulated), and in place zeroing the rest.
    float* r0 = upload(0, {1, 1, 1, 1, 1, 1, 1});
    float* r1 = upload(1, {2, 2, 2, 2, 2, 2, 2});
    float* s0 = upload(0, {100, 100, 100});
    float* s1 = upload(1, {0, 0, 0, 0});
    comms[0]->reduce_scatter(s0, r0, off, DeviceComm::Reduce::accumulate, 13);
    comms[1]->reduce_scatter(s1, r1, off, DeviceComm::Reduce::write, 13);
    CHECK(read(0, s0, 3) == std::vector<float>{103, 103, 103});
    CHECK(read(1, s1, 4) == std::vector<float>{3, 3, 3, 3});
    comms[0]->reduce_scatter(r0, r0, off, DeviceComm::Reduce::zero_rest, 14);
    comms[1]->reduce_scatter(r1, r1, off, DeviceComm::Reduce::zero_rest, 14);
    CHECK(read(0, r0, 7) == std::vector<float>{3, 3, 3, 0, 0, 0, 0});
    CHECK(read(1, r1, 7) == std::vector<float>{0, 0, 0, 3, 3, 3, 3});
    // A send into a bf16 buffer lands rounded to bf16.
    float* t0 = upload(0, {1.0f / 3.0f});
    float* t1 = dev[1]->alloc(1, runtime::Storage::bf16);
    float* t2 = dev[0]->alloc(1, runtime::Storage::bf16);
    CHECK_THROWS_WITH(comms[0]->all_reduce(t2, t0, 1, 15), Catch::Contains("stored differently"));
    comms[0]->send(t0, 1, 1, 16);
    comms[1]->recv(t1, 1, 0, 16);
    CHECK(read(1, t1, 1) == std::vector<float>{0.333984375f});
    // MoE's all-to-all: member 0 keeps 1 row and sends 2, member 1 sends 1 and keeps 0 (rows of 1).
    float* a0 = upload(0, {1, 2, 3});
    float* a1 = upload(1, {9});
    float* b0 = upload(0, {0, 0});
    float* b1 = upload(1, {0, 0});
    comms[0]->all_to_all(b0, a0, {0, 1, 3}, {0, 1, 2}, 19);
    comms[1]->all_to_all(b1, a1, {0, 1, 1}, {0, 2, 2}, 19);
    CHECK(read(0, b0, 2) == std::vector<float>{1, 9});
    CHECK(read(1, b1, 2) == std::vector<float>{2, 3});
    // Context parallelism's ring: the last 2 of 3 columns of 2 rows to the next member, added.
    float* k0 = upload(0, {1, 2, 3, 4, 5, 6});
    float* k1 = upload(1, {10, 20, 30, 40, 50, 60});
    float* m0 = upload(0, {100, 100, 100, 100});
    float* m1 = upload(1, {0, 0, 0, 0});
    comms[0]->ring_shift(m0, k0, 2, 3, 1, 2, 1, true, 20);
    comms[1]->ring_shift(m1, k1, 2, 3, 1, 2, 1, false, 20);
    CHECK(read(0, m0, 4) == std::vector<float>{120, 130, 150, 160});
    CHECK(read(1, m1, 4) == std::vector<float>{2, 3, 5, 6});
    // Members posting in different orders: NCCL would pair the two; the emulation names both.
    comms[0]->all_reduce(x0, x0, 7, 17);
    CHECK_THROWS_WITH(comms[1]->all_reduce(x1, x1, 7, 18),
                      Catch::Contains("member 0 posted all_reduce of match 17") && Catch::Contains("member 1 posted all_reduce of match 18"));
    for (float* p : {x0, g0, r0, t0}) dev[0]->release(p, p == t0 ? 1 : 7);
    for (float* p : {x1, g1, r1}) dev[1]->release(p, 7);
    for (auto [m, p, n] : {std::tuple<int, float*, int>{0, a0, 3}, {1, a1, 1}, {0, b0, 2}, {1, b1, 2}, {0, k0, 6}, {1, k1, 6}, {0, m0, 4}, {1, m1, 4}})
        dev[m]->release(p, n);
    dev[0]->release(s0, 3);
    dev[1]->release(s1, 4);
    dev[1]->release(t1, 1);
    dev[0]->release(t2, 1);
}

// A rank that runs out of memory mid-step on devices with communicators: its peers, waiting on
// operations it will never post, are released (the communicators aborted, as NCCL's must be) and
// the failure is the one reported, without a hang; the session refuses to go on.
TEST_CASE("the emulated device: a rank out of memory mid-step stops its peers' communicators", "[runtime]") {
    runtime::RunOptions o;
    o.backend = runtime::Backend::emulated;
    o.check_fit = false;
    o.capacity_bytes[0] = 1.4e5;  // stage 0 runs out in its second micro-batch's forward; stage 1 waits for it
    runtime::Session s(tiny_gpt(), cpu_cluster(2), cpu_plan(1, 2, 1), o);
    CHECK_THROWS_WITH(s.step(), Catch::Contains("out of memory at rank 0") && Catch::Contains("micro-batch 1"));
    CHECK_THROWS_WITH(s.step(), Catch::Contains("cannot continue") && Catch::Contains("tier gpu"));
}
