// fp16 plans (Megatron-LM 2021's GPT-3-era runs): 2-byte values rounded to IEEE half, fp32 master
// weights, and Megatron's dynamic loss scaling (megatron/core/optimizer/grad_scaler.py
// DynamicGradScaler; optimizer.py MixedPrecisionOptimizer): the loss scaled before the backward,
// the gradients unscaled and checked for inf/NaN across every rank holding other gradients, a step
// that found one skipped, the scale halved once the hysteresis is spent and doubled after a window
// of clean steps.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/runtime/cpu_kernels.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

namespace {

PlanSpec fp16(PlanSpec p) {
    p.precision = Precision::fp16;
    return p;
}

std::vector<runtime::StepReport> reports(const ModelSpec& m, const PlanSpec& p, int steps, runtime::RunOptions o) {
    o.lr = 3e-3;
    runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
    std::vector<runtime::StepReport> out;
    for (int i = 0; i < steps; ++i) out.push_back(s.step());
    return out;
}

}  // namespace

TEST_CASE("fp16 rounding: to the nearest half, ties to even, subnormals and overflow", "[runtime][fp16]") {
    auto r = [](float x) {
        runtime::cpu::round_fp16(&x, 1);
        return x;
    };
    CHECK(r(1.0f) == 1.0f);
    CHECK(r(65504.0f) == 65504.0f);                              // the largest half
    CHECK(r(65519.0f) == 65504.0f);
    CHECK(std::isinf(r(65520.0f)));                               // halfway to the next step: infinity
    CHECK(r(-65520.0f) == -std::numeric_limits<float>::infinity());
    CHECK(r(1.0f + std::ldexp(1.0f, -11)) == 1.0f);               // a tie below an even mantissa
    CHECK(r(1.0f + 3 * std::ldexp(1.0f, -11)) == 1.0f + std::ldexp(1.0f, -9));  // and above an odd one
    CHECK(r(1.0f + std::ldexp(1.0f, -10)) == 1.0f + std::ldexp(1.0f, -10));      // a half itself
    CHECK(r(std::ldexp(1.0f, -24)) == std::ldexp(1.0f, -24));     // the smallest subnormal
    CHECK(r(std::ldexp(1.0f, -25)) == 0.0f);                      // halfway to it: to even, zero
    CHECK(r(3 * std::ldexp(1.0f, -26)) == std::ldexp(1.0f, -24));
    CHECK(r(1e-9f) == 0.0f);
    CHECK(std::isnan(r(std::numeric_limits<float>::quiet_NaN())));
    CHECK(r(0.1f) == 0.0999755859375f);                            // 0x2E66
}

TEST_CASE("fp16: dynamic loss scaling skips the steps that overflow", "[runtime][fp16]") {
    const ModelSpec m = tiny_llama();
    runtime::RunOptions o;
    o.data.fixed_batch = true;  // a skipped step leaves the weights, so the loss repeats
    // Megatron's initial scale, 2^32: the scaled gradients overflow fp16 (65504) at once. The
    // first overflow spends the hysteresis (2) and keeps the scale; each one after halves it.
    const auto big = reports(m, fp16(cpu_plan()), 4, o);
    for (const auto& r : big) CHECK(r.skipped);
    CHECK(big[0].loss_scale == 4294967296.0);
    CHECK(big[1].loss_scale == 4294967296.0);
    CHECK(big[2].loss_scale == 2147483648.0);
    CHECK(big[3].loss_scale == 1073741824.0);
    for (const auto& r : big) CHECK(r.loss == big[0].loss);  // bit for bit: nothing was updated
    // A scale the gradients fit under never skips, and the curve is fp32's to fp16's rounding.
    o.initial_loss_scale = 4096;
    o.data.fixed_batch = false;
    const auto fit = reports(m, fp16(cpu_plan()), 4, o);
    const std::vector<double> f32 = losses(m, cpu_plan(), 4);
    for (int i = 0; i < 4; ++i) {
        CHECK_FALSE(fit[static_cast<std::size_t>(i)].skipped);
        CHECK(fit[static_cast<std::size_t>(i)].loss == Approx(f32[static_cast<std::size_t>(i)]).epsilon(2e-3));
    }
    CHECK(fit[3].loss != f32[3]);  // fp16, not fp32
    // A window of 2 clean steps doubles the scale.
    o.loss_scale_window = 2;
    const auto grow = reports(m, fp16(cpu_plan()), 5, o);
    CHECK(grow[0].loss_scale == 4096);
    CHECK(grow[2].loss_scale == 8192);
    CHECK(grow[4].loss_scale == 16384);
}

TEST_CASE("fp16: parallel variants agree on every skip and follow the single-rank curve", "[runtime][fp16][parallel]") {
    // The overflow flag is summed over TP, PP and DP x CP, so every rank skips together; the
    // curves agree to fp16's rounding (values are rounded in another order: 1e-3 as for bf16).
    const ModelSpec m = tiny_llama();
    runtime::RunOptions o;
    o.initial_loss_scale = 65536;
    o.loss_scale_window = 1;  // doubling every clean step: overflows come and go
    o.hysteresis = 1;
    const auto ref = reports(m, fp16(cpu_plan()), 6, o);
    int skips = 0;
    for (const auto& r : ref) skips += r.skipped;
    REQUIRE(skips > 0);
    REQUIRE(skips < 6);
    PlanSpec sp = cpu_plan(2);
    sp.sequence_parallel = true;
    PlanSpec z1 = cpu_plan(1, 1, 2);
    z1.zero_stage = 1;
    PlanSpec z3 = z1;
    z3.zero_stage = 3;
    PlanSpec big = cpu_plan(2, 2, 2);
    big.sequence_parallel = true;
    big.zero_stage = 1;
    big.offload.optimizer = TierSplit{0, 1, 0};
    // ZeRO-Infinity's sub-groups stage the weights through the host each step: a skipped update
    // must still leave them there (they go to the GPU, and to the file when homed on the SSD).
    PlanSpec nvme = cpu_plan();
    nvme.offload.optimizer = TierSplit{0, 0, 1};
    PlanSpec nvme_params = z3;
    nvme_params.offload.optimizer = nvme_params.offload.params = TierSplit{0, 0, 1};
    // DeepSpeed's ZeRO-Offload: the overflow is found in the gradients streamed to the host.
    PlanSpec host_grads = z1;
    host_grads.zero_stage = 2;
    host_grads.offload.optimizer = host_grads.offload.grads = TierSplit{0, 1, 0};
    for (const Variant& v : {Variant{"tp 2 SP", sp}, Variant{"pp 2", cpu_plan(1, 2)}, Variant{"dp 2 ZeRO-1", z1}, Variant{"dp 2 ZeRO-3", z3},
                             Variant{"tp 2 pp 2 dp 2, SP, ZeRO-1, optimizer on the CPU", big}, Variant{"optimizer on the SSD", nvme},
                             Variant{"dp 2 ZeRO-3, parameters and optimizer on the SSD", nvme_params},
                             Variant{"dp 2 ZeRO-2, gradients streamed to the host", host_grads}}) {
        INFO(v.name);
        const auto got = reports(m, fp16(v.plan), 6, o);
        for (std::size_t i = 0; i < got.size(); ++i) {
            INFO("step " << i + 1);
            CHECK(got[i].skipped == ref[i].skipped);
            CHECK(got[i].loss_scale == ref[i].loss_scale);
            CHECK(got[i].loss == Approx(ref[i].loss).epsilon(1e-3));
        }
    }
}

TEST_CASE("fp16: a checkpoint keeps the loss scaler", "[runtime][fp16][checkpoint]") {
    // Scale 65536 doubling every clean step: steps 1-2 are clean, step 3 overflows, step 4 is
    // clean again at the halved scale. A resume that started the scaler afresh would run steps
    // 3 and 4 at 65536, cleanly, and part from the saved run.
    const std::string dir = (std::filesystem::temp_directory_path() / "strata-test-fp16-checkpoint").string();
    std::filesystem::remove_all(dir);
    runtime::RunOptions o;
    o.lr = 3e-3;
    o.initial_loss_scale = 65536;
    o.loss_scale_window = 1;
    o.hysteresis = 1;
    PlanSpec p = fp16(cpu_plan(1, 1, 2));
    p.zero_stage = 1;
    const Resumed r = save_and_resume(tiny_llama(2), p, o, dir);
    CHECK(r.steps_done == 2);
    CHECK(r.before == r.after);
    std::filesystem::remove_all(dir);
    // ... and the check has teeth: resumed without the scaler's state the losses part.
    const auto fresh = reports(tiny_llama(2), p, 4, o);
    CHECK(fresh[2].skipped);
}
