// The executor's cuda path in CI: whole runs on the emulated device (runtime/src/device_emulated.cpp:
// the cuda backend's interface over the cpu kernels, with device memory the host cannot touch,
// operand ranges checked, bf16 storage, and copy lanes that run as late as their events allow)
// against the cpu backend. The same runs go through a GPU in test_cuda.cpp. A glue bug of the
// cuda path (a host read of device memory, a copy not ordered by the Program's events, an operand
// past its buffer) fails here instead of on a lent GPU.
#include <catch2/catch.hpp>

#include "device_runs.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

TEST_CASE("a run on the emulated device follows the cpu backend's loss curve", "[runtime]") {
    device_runs::check_loss_curves(runtime::Backend::emulated);
}

TEST_CASE("the emulated device: checkpoints, timelines, memory and refusals", "[runtime]") {
    device_runs::check_checkpoint_and_timeline(runtime::Backend::emulated);
}
