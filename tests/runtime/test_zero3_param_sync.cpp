// DeepSpeed's ZeRO-3 of 2021 (plan.zero3_param_sync, the deepspeed-2021 preset) executed: each
// parameter tensor partitioned over the data-parallel ranks on its own, gathered one call per
// tensor and reduce-scattered a tensor at a time (partition_parameters.py _allgather_param,
// v0.3-v0.5). The calls carry their tensors' bytes, each rank keeps its slice of every tensor, and
// the loss follows one rank's curve.
#include <catch2/catch.hpp>

#include <cstdint>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/hazards.hpp"
#include "strata/lowering/params.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

namespace {

PlanSpec synced(PlanSpec p) {
    p.zero_stage = 3;
    p.zero3_param_sync = true;
    return p;
}

// Of a Program's rank, the payload bytes of each collective named `name` that layer `layer` issues
// in the first micro-batch's pass of `phase`, in program order.
std::vector<double> layer_calls(const Program& prog, int rank, const char* name, int layer, Phase phase) {
    std::vector<double> out;
    for (const Instr& in : prog.ranks[static_cast<std::size_t>(rank)].instrs)
        if (in.kind == InstrKind::collective && in.layer == layer && in.phase == phase && in.microbatch == 0 &&
            prog.names[static_cast<std::size_t>(in.name)] == name)
            out.push_back(in.bytes);
    return out;
}

}  // namespace

TEST_CASE("ZeRO-3 as DeepSpeed ran it in 2021: every variant follows the single-rank loss curve", "[runtime][zero3_sync]") {
    std::vector<Variant> v;
    v.push_back({"dp 2", synced(cpu_plan(1, 1, 2))});
    v.push_back({"dp 4 (ln1's 32 weights cut four ways)", synced(cpu_plan(1, 1, 4))});
    v.push_back({"tp 2 x dp 2", synced(cpu_plan(2, 1, 2))});
    PlanSpec p = synced(cpu_plan(1, 1, 2));
    p.overlap_param_gather = false;
    p.grad_accum_fusion = false;
    v.push_back({"dp 2, no prefetch, unfused accumulation", p});
    // ZeRO-3 Offload: the weights homed on the host (each rank's slice of every tensor comes up a
    // layer ahead), the optimizer there too, the gradients streamed down a tensor at a time.
    p = synced(cpu_plan(1, 1, 2));
    p.offload.params = p.offload.optimizer = p.offload.grads = TierSplit{0, 1, 0};
    v.push_back({"dp 2, ZeRO-3 Offload (parameters, gradients and optimizer on the host)", p});
    // As a user writes it: the preset sets zero3_param_sync under ZeRO-3.
    p = cpu_plan(1, 1, 2);
    p.framework = "deepspeed-2021";
    p.zero_stage = 3;
    apply_framework(p);
    REQUIRE(p.zero3_param_sync);
    v.push_back({"dp 2, the deepspeed-2021 preset", p});
    check_against_single_rank(tiny_gpt(), v);
    check_against_single_rank(tiny_llama(2), {{"dp 2", synced(cpu_plan(1, 1, 2))}, {"tp 2 x dp 2", synced(cpu_plan(2, 1, 2))}});
}

TEST_CASE("ZeRO-3 as DeepSpeed ran it in 2021: a call per tensor, of its bytes, and a slice of every tensor a rank",
          "[runtime][zero3_sync]") {
    // The tiny GPT's layer: ln1 (weight, bias), QKV (weight, bias), the projection (weight, bias),
    // ln2, fc1, fc2: twelve tensors, so twelve gathers before each pass and twelve reduce-scatters
    // after the backward, each of its tensor's fp32 bytes, in the layout's order.
    const ModelSpec m = tiny_gpt();
    const PlanSpec p = synced(cpu_plan(1, 1, 2));
    runtime::RunOptions o;
    o.memory_only = true;
    runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
    std::vector<double> tensors;
    double layer_elements = 0;
    const ParamLayout layout = param_layout(m, p, 0);
    std::map<std::int64_t, const ParamEntry*> by_offset;
    for (const ParamEntry& e : layout.entries)
        if (e.layer == 1) by_offset[e.offset] = &e;
    for (const auto& [off, e] : by_offset) {
        tensors.push_back(4.0 * static_cast<double>(e->rows * e->cols));
        layer_elements += static_cast<double>(e->rows * e->cols);
    }
    REQUIRE(tensors.size() == 12);
    const double h = m.hidden, f = m.ffn_hidden;
    CHECK(layer_elements == 4 * h * h + 2 * h * f + 9 * h + f);  // 12h^2 + 13h at f = 4h
    for (int rank = 0; rank < 2; ++rank) {
        CHECK(layer_calls(s.program(), rank, "zero3.params", 1, Phase::forward) == tensors);
        CHECK(layer_calls(s.program(), rank, "zero3.grads", 1, Phase::backward) == tensors);
    }
    // Each rank keeps half of each tensor (a slice of the layer's range would hold some tensors
    // whole and others not at all): ln1's 32 weights and fc2's matrix alike.
    const runtime::Session run(m, cpu_cluster(p.gpus()), p, {});
    for (const char* name : {"ln1.weight", "qkv.bias", "fc2.weight"})
        for (int rank = 0; rank < 2; ++rank) {
            const std::int64_t n = run.param_elements(rank, name, 1);
            std::int64_t held = 0;
            for (std::int64_t i = 0; i < n; ++i) {
                try {
                    run.param(rank, name, 1, i);
                    ++held;
                } catch (const std::exception&) {  // the other rank's half
                }
            }
            INFO(name << " on rank " << rank);
            CHECK(held == n / 2);
        }
}

TEST_CASE("ZeRO-3 as DeepSpeed ran it in 2021: the per-tensor calls are race-free, MoE refused by name", "[runtime][zero3_sync]") {
    std::vector<PlanSpec> plans{synced(cpu_plan(1, 1, 2)), synced(cpu_plan(2, 1, 2))};
    PlanSpec off = synced(cpu_plan(1, 1, 2));
    off.offload.params = off.offload.optimizer = off.offload.grads = TierSplit{0, 1, 0};
    plans.push_back(off);
    for (const PlanSpec& p : plans) {
        runtime::RunOptions o;
        o.memory_only = true;
        runtime::Session s(tiny_gpt(), cpu_cluster(p.gpus()), p, o);
        const std::vector<std::string> h = dataflow_hazards(s.program(), 3);
        INFO("tp " << p.tp << " params on the host " << !p.offload.params.all_gpu() << (h.empty() ? "" : ": " + h[0]));
        CHECK(h.empty());
    }
    PlanSpec moe = synced(cpu_plan(1, 1, 2));
    moe.ep = 2;
    CHECK_THROWS_WITH(runtime::Session(tiny_moe(), cpu_cluster(2), moe, {}), Catch::Contains("plan.zero3_param_sync") && Catch::Contains("MoE"));
}
