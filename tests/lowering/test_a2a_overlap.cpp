// MoE all-to-all overlap (plan.moe_a2a_overlap) as Megatron-Core's combined 1F1B runs it: one more
// warm-up forward, then each steady forward merged with the backward after it, their layers
// paired in TransformerLayerSchedulePlan.run's order (model_chunk_schedule_plan.py): the backward's
// combine, the forward's attention and dispatch, the backward's experts and dispatch, the forward's
// experts and combine, the backward's attention. Orders written out by hand from that source; no
// race in the merged program; the engine runs it without deadlock and hides all-to-all time.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "strata/lowering/hazards.hpp"
#include "strata/lowering/lower.hpp"
#include "dataflow_checks.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;
using namespace strata::test;

namespace {

// L = 2, every layer MoE (4 experts, top 2, width 128), h = 64, s = 32.
ModelSpec moe2() {
    ModelSpec m = small_gpt();
    m.layers = 2;
    m.moe = moe_spec(4, 2, 128);
    return m;
}

// dp 2 = ep 2, pp 1: 3 micro-batches a rank.
PlanSpec ep_plan() {
    PlanSpec p = plan(1, 1, 2, 6);
    p.ep = 2;
    return p;
}

const std::string& name_of(const Program& p, const Instr& in) { return p.names[static_cast<std::size_t>(in.name)]; }

// "F1 dispatch": the pass (F/B), micro-batch and name of an instruction.
std::string tag(const Program& p, const Instr& in) {
    const char* pass = in.phase == Phase::forward ? "F" : "B";
    const std::string& n = name_of(p, in);
    return std::string(pass) + std::to_string(in.microbatch) + " " + (n == "ep.dispatch" ? "dispatch" : n == "ep.combine" ? "combine" : n);
}

}  // namespace

TEST_CASE("combined 1F1B: one more warm-up forward, so every merged pair is of two micro-batches", "[lower][moe][a2a_overlap]") {
    using S = PipeSlot;
    // pp 1 (combined_1f1b_schedule_for_no_pipelining): F0, then F(i+1) beside B(i) (steady-state
    // forwards, merged with the backward after them), then the last B.
    CHECK(pipeline_schedule(Schedule::one_f_one_b, 1, 0, 3, 1, 0, true) ==
          std::vector<S>{{0, 0, true}, {1, 0, true, false, false, true}, {0, 0, false}, {2, 0, true, false, false, true}, {1, 0, false},
                         {2, 0, false}});
    // Interleaved, pp 2, vpp 2, 4 micro-batches: stage 1's warm-up (vpp - 1) x group 2 = 2, then
    // the first steady forward before any backward; one more warm-up forward with the overlap.
    const auto s1 = pipeline_schedule(Schedule::interleaved_1f1b, 2, 1, 4, 2, 0, true);
    const auto plain = pipeline_schedule(Schedule::interleaved_1f1b, 2, 1, 4, 2, 0, false);
    auto leading = [](const std::vector<S>& v) {
        int n = 0;
        while (n < static_cast<int>(v.size()) && v[static_cast<std::size_t>(n)].forward) ++n;
        return n;
    };
    CHECK(leading(plain) == 3);
    CHECK(leading(s1) == 4);
}

TEST_CASE("combined 1F1B: a merged pair's layers interleave in Megatron-Core's order", "[lower][moe][a2a_overlap][dataflow]") {
    PlanSpec p = ep_plan();
    p.moe_a2a_overlap = true;
    const Program prog = lower_df(moe2(), p);
    const RankProgram& r = prog.ranks[0];
    // The all-to-alls of the first merged step (F1 beside B0), in stream order. The forward's
    // layers go up (0, 1), the backward's down (1, 0); pairs: (F1 layer 0, B0 layer 1), then
    // (F1 layer 1, B0 layer 0).
    std::vector<std::string> a2a;
    for (const Instr& in : r.instrs)
        if (in.kind == InstrKind::collective && in.group == Group::ep &&
            ((in.phase == Phase::forward && in.microbatch == 1) || (in.phase == Phase::backward && in.microbatch == 0)))
            a2a.push_back(tag(prog, in) + " l" + std::to_string(in.layer));
    CHECK(a2a == std::vector<std::string>{"B0 combine l1", "F1 dispatch l0", "B0 dispatch l1", "F1 combine l0",
                                          "B0 combine l0", "F1 dispatch l1", "B0 dispatch l0", "F1 combine l1"});
    // On the compute stream: F1's routed experts run after B0's (the backward's MLP first), and
    // B0's attention backward of layer 1 after F1's experts of layer 0.
    std::vector<std::string> compute;
    for (const Instr& in : r.instrs) {
        if (in.kind != InstrKind::compute || in.stream != Stream::compute) continue;
        const bool ours = (in.phase == Phase::forward && in.microbatch == 1) || (in.phase == Phase::backward && in.microbatch == 0);
        const std::string& n = name_of(prog, in);
        if (ours && (n == "experts.fc1" || n == "qkv") && (compute.empty() || compute.back() != tag(prog, in) + " l" + std::to_string(in.layer)))
            compute.push_back(tag(prog, in) + " l" + std::to_string(in.layer));
    }
    CHECK(compute == std::vector<std::string>{"F1 qkv l0", "B0 experts.fc1 l1", "F1 experts.fc1 l0", "B0 qkv l1",
                                              "F1 qkv l1", "B0 experts.fc1 l0", "F1 experts.fc1 l1", "B0 qkv l0"});
    CHECK(dataflow_hazards(prog).empty());
    check_def_before_use(prog);
}

TEST_CASE("combined 1F1B: a dense layer's MLP stands where the experts would", "[lower][moe][a2a_overlap]") {
    // first_k_dense 1: the forward's dense layer 0 pairs with the backward's MoE layer 1, whose
    // combine runs under the dense attention and whose dispatch under the dense MLP.
    ModelSpec m = moe2();
    m.moe->first_k_dense = 1;
    PlanSpec p = ep_plan();
    p.moe_a2a_overlap = true;
    const Program prog = lower_df(m, p);
    std::vector<std::string> seq;
    for (const Instr& in : prog.ranks[0].instrs) {
        const bool ours = (in.phase == Phase::forward && in.microbatch == 1) || (in.phase == Phase::backward && in.microbatch == 0);
        if (!ours || in.layer < 0) continue;
        const std::string& n = name_of(prog, in);
        std::string t;
        if (in.kind == InstrKind::collective && in.group == Group::ep) t = tag(prog, in);
        else if (in.kind == InstrKind::compute && (n == "fc1" || n == "qkv")) t = tag(prog, in);
        if (!t.empty() && (seq.empty() || seq.back() != t + " l" + std::to_string(in.layer))) seq.push_back(t + " l" + std::to_string(in.layer));
    }
    REQUIRE(seq.size() >= 5);
    CHECK(std::vector<std::string>(seq.begin(), seq.begin() + 5) ==
          std::vector<std::string>{"B0 combine l1", "F1 qkv l0", "B0 dispatch l1", "F1 fc1 l0", "B0 qkv l1"});
    CHECK(dataflow_hazards(prog).empty());
}

TEST_CASE("combined 1F1B: the engine runs the merged program and hides all-to-all time", "[lower][moe][a2a_overlap][hazards]") {
    // Interleaved pp 2 (vpp 2) x dp 2 = ep 2 and pp 1: hazard-free, and the step no longer than the
    // unmerged one's (the simulate tests time it).
    for (int pp : {1, 2}) {
        ModelSpec m = moe2();
        m.layers = 4;
        PlanSpec p = plan(1, pp, 2, 16);
        p.ep = 2;
        if (pp > 1) {
            p.schedule = Schedule::interleaved_1f1b;
            p.vpp = 2;
        }
        p.moe_a2a_overlap = true;
        INFO("pp " << pp);
        const Program prog = lower_df(m, p);
        CHECK(dataflow_hazards(prog).empty());
        check_def_before_use(prog);
        // Every micro-batch's forward and backward, each layer's two all-to-alls both ways.
        int a2a = 0;
        for (const Instr& in : prog.ranks[0].instrs) a2a += in.kind == InstrKind::collective && in.group == Group::ep;
        CHECK(a2a == 4 / pp * 4 * 8);
    }
}
