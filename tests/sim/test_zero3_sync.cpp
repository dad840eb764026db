// plan.zero3_param_sync: ZeRO-3 as DeepSpeed v0.3-v0.5 ran it (partition_parameters.py
// _allgather_param: one all_gather per parameter, each after torch.cuda.synchronize(); gradients
// reduce-scattered per parameter). Checked from that source, not from Strata's output: a GPT
// layer's twelve tensors are twelve calls carrying its 12h^2 + 13h parameters, and no call runs
// beside a kernel, so the step is the kernels plus the calls.
#include <catch2/catch.hpp>

#include <algorithm>

#include "strata/common/error.hpp"
#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/sim/engine.hpp"
#include "support/gpt.hpp"

using namespace strata::sim;

namespace {

// Compute 1 us per GFLOP plus 2 us; transfers 1 ns per kB plus 20 us latency: the calls are worth
// seeing next to the kernels.
struct Costs : CostModel {
    Estimate compute(const Instr& in, const RankProgram&) const override {
        return Estimate{2000 + static_cast<std::int64_t>(in.flops * 1e-6 + in.bytes * 1e-3), strata::hwdb::Provenance::measured};
    }
    Demand transfer(const Instr& in, const RankProgram&) const override {
        Demand d;
        d.latency_ns = 20000;
        d.busy_s[static_cast<std::size_t>(in.kind == InstrKind::collective && in.group == Group::dp ? LinkClass::nic : LinkClass::nvlink)] =
            in.bytes * 1e-12;
        return d;
    }
};

// GPT-2-style: biases and LayerNorm, twelve tensors a layer.
ModelSpec gpt(int layers) {
    ModelSpec m = strata::test::gpt_shape("gpt", layers, 256, 8, 512, 128);
    m.max_position = 128;
    m.linear_bias = true;
    m.norm = NormKind::layernorm;
    return m;
}

PlanSpec zero3(bool sync) {
    PlanSpec p;
    p.dp = 8;
    p.zero_stage = 3;
    p.global_batch = 8;
    p.zero3_param_sync = sync;
    return p;
}

ClusterSpec cluster() {
    ClusterSpec c;
    c.gpus_per_node = 8;
    c.nodes = 1;
    return c;
}

struct Run {
    Program prog;
    SimResult r;
};

Run run(const ModelSpec& m, const PlanSpec& p) {
    Run out{lower(m, cluster(), p), {}};
    Costs costs;
    EngineOptions eo;
    eo.record_trace = true;
    eo.critical_path = false;
    eo.memory.caching_allocator = false;
    out.r = simulate_program(out.prog, costs, nullptr, eo);
    return out;
}

bool named(const Program& prog, const Instr& in, const char* name) { return prog.names.at(static_cast<std::size_t>(in.name)) == name; }

}  // namespace

TEST_CASE("ZeRO-3 of 2021: a call per parameter tensor, carrying the layer's parameters", "[lower][zero3]") {
    const ModelSpec m = gpt(2);
    const Run sync = run(m, zero3(true));
    const RankProgram& rp = sync.prog.ranks.at(0);
    // Layer 1's forward: QKV, projection, fc1, fc2 weights and biases, two LayerNorms' weights and
    // biases = 12 tensors, 12h^2 + 13h parameters in bf16.
    const double h = 256, params = 12 * h * h + 13 * h;
    int calls = 0, rs_calls = 0;
    double bytes = 0;
    for (const Instr& in : rp.instrs) {
        if (in.kind != InstrKind::collective || in.layer != 1) continue;
        if (named(sync.prog, in, "zero3.params") && in.phase == Phase::forward && in.microbatch == 0) ++calls, bytes += in.bytes;
        if (named(sync.prog, in, "zero3.grads") && in.microbatch == 0) ++rs_calls;
    }
    CHECK(calls == 12);
    CHECK(rs_calls == 12);
    CHECK(bytes == Approx(2 * params));
    // The same plan without it: one gather of the same bytes.
    const Run once = run(m, zero3(false));
    int one = 0;
    double one_bytes = 0;
    for (const Instr& in : once.prog.ranks.at(0).instrs)
        if (in.kind == InstrKind::collective && in.layer == 1 && named(once.prog, in, "zero3.params") && in.phase == Phase::forward &&
            in.microbatch == 0)
            ++one, one_bytes += in.bytes;
    CHECK(one == 1);
    CHECK(one_bytes == Approx(bytes));
}

TEST_CASE("ZeRO-3 of 2021: no call runs beside a kernel, so the step is the kernels plus the calls", "[lower][zero3]") {
    const ModelSpec m = gpt(4);
    auto overlap_and_sums = [&](const Run& run, double& kernels_ns, double& calls_ns) {
        const RankProgram& rp = run.prog.ranks.at(0);
        std::vector<std::pair<std::int64_t, std::int64_t>> k, c;
        for (const TraceSpan& s : run.r.spans) {
            if (s.rank != 0) continue;
            const Instr& in = rp.instrs.at(static_cast<std::size_t>(s.instr));
            if (in.kind == InstrKind::compute && in.stream == Stream::compute) k.push_back({s.start_ns, s.end_ns});
            if (in.kind == InstrKind::collective && in.group == Group::dp && in.layer >= 0) c.push_back({s.start_ns, s.end_ns});
        }
        kernels_ns = calls_ns = 0;
        for (auto [a, b] : k) kernels_ns += static_cast<double>(b - a);
        for (auto [a, b] : c) calls_ns += static_cast<double>(b - a);
        std::int64_t overlap = 0;
        for (auto [a, b] : c)
            for (auto [x, y] : k) overlap += std::max<std::int64_t>(0, std::min(b, y) - std::max(a, x));
        return overlap;
    };
    double k_sync = 0, c_sync = 0, k_pre = 0, c_pre = 0;
    const Run sync = run(m, zero3(true));
    const Run pre = run(m, zero3(false));
    REQUIRE_FALSE(sync.r.deadlock);
    CHECK(overlap_and_sums(sync, k_sync, c_sync) == 0);
    CHECK(overlap_and_sums(pre, k_pre, c_pre) > 0);  // prefetched a layer ahead, beside its kernels
    // Serial: the step holds every kernel and every layer call end to end.
    CHECK(static_cast<double>(sync.r.step_time_ns) >= k_sync + c_sync);
    CHECK(sync.r.step_time_ns > pre.r.step_time_ns);
}

TEST_CASE("ZeRO-3 of 2021 on host parameters: the swap-in is still prefetched, the gather is not", "[lower][zero3]") {
    // v0.4's prefetch_next_sub_modules(nvme=True) brings the next module's partitions up ahead;
    // only the all_gather waits behind the synchronize.
    PlanSpec p = zero3(true);
    p.offload.params = TierSplit{0, 1, 0};
    p.offload.optimizer = TierSplit{0, 1, 0};
    const Run r = run(gpt(4), p);
    REQUIRE_FALSE(r.r.deadlock);
    const RankProgram& rp = r.prog.ranks.at(0);
    std::vector<std::pair<std::int64_t, std::int64_t>> kernels, h2d, gathers;
    for (const TraceSpan& s : r.r.spans) {
        if (s.rank != 0) continue;
        const Instr& in = rp.instrs.at(static_cast<std::size_t>(s.instr));
        if (in.kind == InstrKind::compute && in.stream == Stream::compute) kernels.push_back({s.start_ns, s.end_ns});
        if (in.kind == InstrKind::copy && in.copy == CopyKind::h2d && in.layer >= 0) h2d.push_back({s.start_ns, s.end_ns});
        if (in.kind == InstrKind::collective && in.group == Group::dp && in.layer >= 0) gathers.push_back({s.start_ns, s.end_ns});
    }
    auto overlap = [&](const std::vector<std::pair<std::int64_t, std::int64_t>>& a) {
        std::int64_t o = 0;
        for (auto [x, y] : a)
            for (auto [u, v] : kernels) o += std::max<std::int64_t>(0, std::min(y, v) - std::max(x, u));
        return o;
    };
    REQUIRE_FALSE(h2d.empty());
    CHECK(overlap(h2d) > 0);
    CHECK(overlap(gathers) == 0);
}

TEST_CASE("the deepspeed-2021 preset runs ZeRO-3 that way, and only ZeRO-3", "[frameworks][zero3]") {
    auto plan = [](const std::string& fields) { return plan_from_json_text("{\"framework\": \"deepspeed-2021\", \"dp\": 8, " + fields + "}", "p.json"); };
    const PlanSpec z3 = plan(R"("zero_stage": 3, "global_batch": 8, "precision": "fp16")");
    CHECK(z3.zero3_param_sync);
    CHECK_FALSE(z3.flash_attention);  // 2021: no fused attention
    CHECK(z3.overlap_grad_reduce);    // overlap_comm's stage-3 default (it waits at the next fetch anyway)
    const PlanSpec z2 = plan(R"("zero_stage": 2, "global_batch": 8, "precision": "fp16")");
    CHECK_FALSE(z2.zero3_param_sync);
    CHECK_FALSE(z2.overlap_grad_reduce);  // overlap_comm off below stage 3
    // bf16 reached ZeRO-2/3 with v0.6 (PR #1453): refused under the 2021 preset, with the way out.
    const auto why = framework_refusal(plan(R"("zero_stage": 3, "global_batch": 8, "precision": "bf16")"));
    REQUIRE(why.has_value());
    CHECK(why->field == "plan.precision");
    // The knob needs ZeRO-3.
    CHECK_THROWS_AS(validate_plan(gpt(2), cluster(), plan(R"("zero_stage": 1, "global_batch": 8, "zero3_param_sync": true)"), "p.json"),
                    strata::InputError);
}
