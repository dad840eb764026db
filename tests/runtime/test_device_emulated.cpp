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
    // The same kernels as the cpu backend's: bf16 curves to 1e-6 as well (5e-3 on a GPU), so that
    // a glue bug in a bf16 run shows (an EP copy-back left out passed 5e-3).
    device_runs::check_loss_curves(runtime::Backend::emulated, 1e-6);
}

TEST_CASE("the emulated device: checkpoints, timelines, memory and refusals", "[runtime]") {
    device_runs::check_checkpoint_and_timeline(runtime::Backend::emulated);
}
