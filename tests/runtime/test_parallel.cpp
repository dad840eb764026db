// Every parallel variant the runtime executes gives the single-rank loss curve. The variants differ
// only in the order floating-point sums are taken (TP splits GEMM reductions, DP and ZeRO sum
// gradients across ranks), so the curves agree to rounding: the tolerance is 1e-4 relative per
// step over 4 steps of AdamW, where rounding differences measured about 1e-6.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "runtime_fixtures.hpp"
#include "strata/common/error.hpp"
#include "strata/lowering/groups.hpp"
#include "strata/lowering/params.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

namespace {

constexpr int kSteps = 4;
constexpr double kTol = 1e-4;

struct Variant {
    const char* name;
    PlanSpec plan;
    runtime::RunOptions options{};
};

void check_against_single_rank(const ModelSpec& m, const std::vector<Variant>& variants) {
    const std::vector<double> ref = losses(m, cpu_plan(), kSteps);
    REQUIRE(ref.front() == Approx(std::log(static_cast<double>(m.vocab))).epsilon(0.02));  // starts at chance
    REQUIRE(ref.back() < ref.front());
    for (const Variant& v : variants) {
        INFO(m.name << ", " << v.name);
        const std::vector<double> got = losses(m, v.plan, kSteps, v.options);
        for (int i = 0; i < kSteps; ++i) {
            INFO("step " << i + 1 << ": " << got[static_cast<std::size_t>(i)] << " against " << ref[static_cast<std::size_t>(i)]);
            CHECK(got[static_cast<std::size_t>(i)] == Approx(ref[static_cast<std::size_t>(i)]).epsilon(kTol));
        }
    }
}

std::vector<Variant> variants() {
    std::vector<Variant> v;
    v.push_back({"tp 2", cpu_plan(2)});
    {
        PlanSpec p = cpu_plan(2);
        p.sequence_parallel = true;
        v.push_back({"tp 2 + sequence parallel", p});
    }
    v.push_back({"dp 2", cpu_plan(1, 1, 2)});
    for (int z : {1, 2, 3}) {
        PlanSpec p = cpu_plan(1, 1, 2);
        p.zero_stage = z;
        if (z == 2) p.micro_batch = 4;  // one micro-batch a rank: ZeRO-2's overlapped reduction is safe
        v.push_back({z == 1 ? "dp 2, ZeRO-1" : z == 2 ? "dp 2, ZeRO-2 (one micro-batch)" : "dp 2, ZeRO-3", p});
        p.micro_batch = 2;
        p.overlap_grad_reduce = p.overlap_param_gather = false;
        p.dp_bucket_bytes = 4096;  // several buckets, cut through tensors
        v.push_back({z == 1 ? "dp 2, ZeRO-1, 4 kB buckets, no overlap" : z == 2 ? "dp 2, ZeRO-2, 4 kB buckets, no overlap"
                                                                                : "dp 2, ZeRO-3, 4 kB buckets, no overlap", p});
    }
    {
        // ZeRO-2 with overlapped reduction over several micro-batches (DeepSpeed's default): each
        // micro-batch's buckets are their own values, reduce-scattered into the rank's gradient
        // shard while the next micro-batch's backward fills new ones.
        PlanSpec p = cpu_plan(1, 1, 2);
        p.zero_stage = 2;
        v.push_back({"dp 2, ZeRO-2, overlapped, 2 micro-batches", p});
        p.dp_bucket_bytes = 4096;
        v.push_back({"dp 2, ZeRO-2, overlapped, 2 micro-batches, 4 kB buckets", p});
        p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
        v.push_back({"dp 2, ZeRO-2, overlapped, optimizer on the CPU", p});
        p = cpu_plan(2, 1, 2);
        p.sequence_parallel = true;
        p.zero_stage = 2;
        v.push_back({"tp 2 dp 2, SP, ZeRO-2, overlapped (SP gradients summed over TP in the shard)", p});
        p = cpu_plan(1, 2, 2);
        p.zero_stage = 2;
        v.push_back({"pp 2 dp 2, ZeRO-2, overlapped (tied embedding summed in the shard)", p});
    }
    v.push_back({"pp 2, 1F1B", cpu_plan(1, 2)});
    {
        PlanSpec p = cpu_plan(1, 2);
        p.schedule = Schedule::gpipe;
        v.push_back({"pp 2, GPipe", p});
    }
    {
        PlanSpec p = cpu_plan();
        p.recompute = Recompute::full;
        v.push_back({"full recompute", p});
        p.recompute = Recompute::selective;
        v.push_back({"selective recompute (core_attn)", p});
    }
    {
        PlanSpec p = cpu_plan(1, 1, 2);
        p.zero_stage = 1;
        p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
        v.push_back({"dp 2, ZeRO-1, optimizer on the CPU", p});
        p.offload.optimizer = TierSplit{0.0, 0.0, 1.0};
        v.push_back({"dp 2, ZeRO-1, optimizer on SSD", p});
        p.offload.optimizer = TierSplit{0.5, 0.25, 0.25};
        v.push_back({"dp 2, ZeRO-1, optimizer split GPU/CPU/SSD", p});
    }
    {
        // Megatron-LM 2021 and DeepSpeed's pipeline: each TP rank sends 1/tp of the boundary
        // tensor, the receivers all-gather it over TP (SC21 Sec. 4.1).
        PlanSpec p = cpu_plan(2, 2);
        p.p2p_scatter_gather = true;
        v.push_back({"tp 2 pp 2, scatter/gather pipeline transfers", p});
        p = cpu_plan(2, 2, 2);
        p.p2p_scatter_gather = true;
        p.grad_accum_fusion = false;
        p.zero_stage = 1;
        p.overlap_grad_reduce = false;
        v.push_back({"tp 2 pp 2 dp 2, scatter/gather, unfused accumulation, ZeRO-1 (DeepSpeed's pipeline)", p});
    }
    {
        // Autograd's unfused accumulation (DeepSpeed, torchtitan, Hugging Face): each micro-batch's
        // weight gradients are fresh tensors, added into the accumulated ones after the layer.
        PlanSpec p = cpu_plan();
        p.grad_accum_fusion = false;
        v.push_back({"unfused gradient accumulation", p});
        p = cpu_plan(2, 2, 2);
        p.sequence_parallel = true;
        p.zero_stage = 1;
        p.grad_accum_fusion = false;
        v.push_back({"tp 2 pp 2 dp 2, SP, ZeRO-1, unfused gradient accumulation", p});
        p = cpu_plan(2, 1, 2);
        p.zero_stage = 3;
        p.grad_accum_fusion = false;
        v.push_back({"tp 2 dp 2, ZeRO-3, unfused gradient accumulation (torchtitan's FSDP)", p});
        p.zero_stage = 2;
        p.overlap_grad_reduce = false;
        v.push_back({"tp 2 dp 2, ZeRO-2 without overlap, unfused gradient accumulation", p});
        p = cpu_plan(1, 2, 2);
        p.zero_stage = 3;
        p.grad_accum_fusion = false;
        v.push_back({"pp 2 dp 2, ZeRO-3 (pipelined FSDP), unfused gradient accumulation", p});
    }
    {
        // Parameters homed in host memory, fetched to the GPU a unit at a time (ZeRO-Offload's
        // offload_param), with the update on the host (or on SSD): on one data-parallel rank, and
        // sharded over data-parallel ranks (ZeRO-Infinity's offload_param with ZeRO-3: each rank
        // homes its slice, brings it up and gathers the rest, layer by layer and for the edges).
        auto homed = [](PlanSpec p, int zero, TierSplit optimizer = TierSplit{0.0, 1.0, 0.0}) {
            p.zero_stage = zero;
            p.offload.params = TierSplit{0.0, 1.0, 0.0};
            p.offload.optimizer = optimizer;
            return p;
        };
        PlanSpec sp = cpu_plan(2, 2);
        sp.sequence_parallel = true;
        sp.recompute = Recompute::full;
        PlanSpec sp_dp = cpu_plan(2, 1, 2);
        sp_dp.sequence_parallel = true;
        sp_dp.recompute = Recompute::full;
        v.push_back({"parameters and optimizer on the CPU", homed(cpu_plan(), 3)});
        v.push_back({"parameters on the CPU, optimizer on SSD", homed(cpu_plan(), 3, TierSplit{0.0, 0.0, 1.0})});
        v.push_back({"tp 2 pp 2, SP, full recompute, parameters and optimizer on the CPU", homed(sp, 1)});
        v.push_back({"dp 2, ZeRO-3, parameters and optimizer on the CPU", homed(cpu_plan(1, 1, 2), 3)});
        v.push_back({"dp 2, ZeRO-3, parameters on the CPU, optimizer on SSD", homed(cpu_plan(1, 1, 2), 3, TierSplit{0.0, 0.0, 1.0})});
        v.push_back({"tp 2 dp 2, SP, ZeRO-3, full recompute, parameters and optimizer on the CPU", homed(sp_dp, 3)});
        // Pipelined FSDP: a layer's slice comes up for its one gather a step.
        v.push_back({"pp 2 dp 2, ZeRO-3 (pipelined FSDP), parameters and optimizer on the CPU", homed(cpu_plan(1, 2, 2), 3)});
    }
    {
        // Context parallelism: sequences in 2 cp load-balanced chunks, K/V blocks around the ring.
        PlanSpec p = cpu_plan();
        p.cp = 2;
        v.push_back({"cp 2", p});
        p.cp = 4;
        v.push_back({"cp 4", p});
        p = cpu_plan(2);
        p.cp = 2;
        p.sequence_parallel = true;
        v.push_back({"tp 2 cp 2, SP", p});
        p = cpu_plan(1, 1, 2);
        p.cp = 2;
        p.zero_stage = 1;
        v.push_back({"cp 2 dp 2, ZeRO-1 (gradients over dp x cp)", p});
        p.zero_stage = 3;  // the README's top plan's shape: shards of weights and gradients over dp x cp
        v.push_back({"cp 2 dp 2, ZeRO-3 (shards over dp x cp)", p});
        p.zero_stage = 2;
        v.push_back({"cp 2 dp 2, ZeRO-2, overlapped", p});
        p = cpu_plan(1, 2);
        p.cp = 2;
        p.recompute = Recompute::full;
        v.push_back({"cp 2 pp 2, full recompute", p});
    }
    {
        PlanSpec p = cpu_plan(1, 2);
        p.recompute = Recompute::full;  // a chunk's last layer recomputes the output it sent
        v.push_back({"pp 2, full recompute", p});
    }
    {
        PlanSpec p = cpu_plan(2, 2, 2);
        p.sequence_parallel = true;
        p.zero_stage = 1;
        v.push_back({"tp 2 pp 2 dp 2, SP, ZeRO-1 (8 ranks)", p});
        p.zero_stage = 2;
        p.micro_batch = 1;  // 4 micro-batches a rank, each reduced (after its backward: no overlap)
        p.dp_bucket_bytes = 4096;
        p.overlap_grad_reduce = false;
        v.push_back({"tp 2 pp 2 dp 2, SP, ZeRO-2, 4 micro-batches, 4 kB buckets", p});
    }
    {
        // FSDP under a pipeline: gathered at the first forward, reduced at the last backward.
        PlanSpec p = cpu_plan(1, 2, 2);
        p.zero_stage = 3;
        v.push_back({"pp 2 dp 2, ZeRO-3 (pipelined FSDP)", p});
        p.overlap_grad_reduce = p.overlap_param_gather = false;
        p.dp_bucket_bytes = 4096;
        v.push_back({"pp 2 dp 2, ZeRO-3 (pipelined FSDP), 4 kB buckets, no overlap", p});
    }
    return v;
}

}  // namespace

TEST_CASE("GPT: every parallel variant follows the single-rank loss curve", "[runtime][parallel]") {
    check_against_single_rank(tiny_gpt(), variants());
}

TEST_CASE("lock-free update: every parallel variant follows the single-rank lock-free curve", "[runtime][parallel][lockfree]") {
    // The host's share of the update is one step stale (test_runtime.cpp pins that on one rank);
    // split over ranks it must stay the same update.
    const ModelSpec m = tiny_llama(), moe = tiny_moe();
    struct Case {
        const char* name;
        PlanSpec plan;
    };
    std::vector<Case> cases;
    // (A split over tiers cuts each rank's ZeRO shard, not the whole buffer: other elements would
    // be delayed than on one rank, so only whole tiers compare.)
    for (const TierSplit& t : {TierSplit{0, 1, 0}, TierSplit{0, 0, 1}}) {
        PlanSpec p = cpu_plan(2, 2, 2);
        p.sequence_parallel = true;
        p.zero_stage = 1;
        p.offload.optimizer = t;
        p.lock_free_update = true;
        cases.push_back({t.cpu > 0 ? "tp 2 pp 2 dp 2, SP, ZeRO-1, optimizer on the CPU" : "tp 2 pp 2 dp 2, SP, ZeRO-1, optimizer on SSD", p});
    }
    PlanSpec p = cpu_plan(1, 1, 2);
    p.offload.optimizer = TierSplit{0, 1, 0};
    p.lock_free_update = true;
    cases.push_back({"dp 2, ZeRO-0, optimizer on the CPU", p});
    p.zero_stage = 2;  // the gradients copied down from the rank's shard
    cases.push_back({"dp 2, ZeRO-2 overlapped, optimizer on the CPU", p});
    p = cpu_plan(1, 1, 2);
    p.ep = 2;
    p.offload.optimizer = TierSplit{0, 1, 0};
    p.lock_free_update = true;
    cases.push_back({"MoE: dp 2 ep 2, ZeRO-0, optimizer on the CPU", p});
    for (const Case& c : cases) {
        INFO(c.name);
        PlanSpec single = cpu_plan();
        single.offload.optimizer = c.plan.offload.optimizer;
        single.lock_free_update = true;
        const ModelSpec& model = c.plan.ep > 1 ? moe : m;
        const std::vector<double> ref = losses(model, single, kSteps), got = losses(model, c.plan, kSteps);
        for (int i = 0; i < kSteps; ++i) {
            INFO("step " << i + 1 << ": " << got[static_cast<std::size_t>(i)] << " against " << ref[static_cast<std::size_t>(i)]);
            CHECK(got[static_cast<std::size_t>(i)] == Approx(ref[static_cast<std::size_t>(i)]).epsilon(kTol));
        }
    }
}

TEST_CASE("bf16: parallel variants follow the single-rank bf16 curve", "[runtime][parallel][bf16]") {
    // A split sums in another order, and bf16 rounds each value written to 8 mantissa bits, so a
    // last-bit difference of fp32 can move a bf16 value by one spacing (2^-8 relative): the curves
    // agree to bf16's rounding, not to fp32's. Tolerance 1e-3 relative per step; measured up to
    // 1e-4 (fp32's variants: 1e-6).
    const ModelSpec m = tiny_llama();
    auto bf16 = [](PlanSpec p) {
        p.precision = Precision::bf16;
        return p;
    };
    std::vector<Variant> v;
    {
        PlanSpec p = cpu_plan(2);
        p.sequence_parallel = true;
        v.push_back({"tp 2 + SP", bf16(p)});
        v.push_back({"pp 2", bf16(cpu_plan(1, 2))});
        p = cpu_plan(1, 1, 2);
        p.zero_stage = 1;
        v.push_back({"dp 2, ZeRO-1", bf16(p)});
        p.zero_stage = 3;
        v.push_back({"dp 2, ZeRO-3", bf16(p)});
        p = cpu_plan();
        p.cp = 2;
        v.push_back({"cp 2", bf16(p)});
        p = cpu_plan(2, 2, 2);
        p.sequence_parallel = true;
        p.zero_stage = 1;
        p.recompute = Recompute::full;
        v.push_back({"tp 2 pp 2 dp 2, SP, ZeRO-1, full recompute", bf16(p)});
        p.offload.optimizer = TierSplit{0, 1, 0};
        v.push_back({"tp 2 pp 2 dp 2, SP, ZeRO-1, full recompute, optimizer on the CPU", bf16(p)});
        p.offload.optimizer = TierSplit{0, 0, 1};
        v.push_back({"tp 2 pp 2 dp 2, SP, ZeRO-1, full recompute, optimizer on SSD", bf16(p)});
    }
    const std::vector<double> ref = losses(m, bf16(cpu_plan()), kSteps);
    for (const Variant& x : v) {
        INFO(x.name);
        const std::vector<double> got = losses(m, x.plan, kSteps);
        for (int i = 0; i < kSteps; ++i) {
            INFO("step " << i + 1 << ": " << got[static_cast<std::size_t>(i)] << " against " << ref[static_cast<std::size_t>(i)]);
            CHECK(got[static_cast<std::size_t>(i)] == Approx(ref[static_cast<std::size_t>(i)]).epsilon(1e-3));
        }
    }
    // MoE in bf16: the router's logits and weights stay fp32, the rows the experts see are bf16.
    const ModelSpec moe = tiny_moe();
    const std::vector<double> moe_ref = losses(moe, bf16(cpu_plan()), kSteps);
    PlanSpec q = cpu_plan(1, 1, 2);
    q.ep = 2;
    q.zero_stage = 1;
    PlanSpec t = cpu_plan(2);
    t.sequence_parallel = true;
    for (const Variant& x : {Variant{"MoE, dp 2 ep 2, ZeRO-1", bf16(q)}, Variant{"MoE, tp 2 SP", bf16(t)}}) {
        INFO(x.name);
        const std::vector<double> got = losses(moe, x.plan, kSteps);
        for (int i = 0; i < kSteps; ++i) CHECK(got[static_cast<std::size_t>(i)] == Approx(moe_ref[static_cast<std::size_t>(i)]).epsilon(1e-3));
    }
}

TEST_CASE("QK-norm: parallel variants follow the single-rank loss curve", "[runtime][parallel]") {
    ModelSpec m = tiny_llama();
    m.qk_norm = true;
    std::vector<Variant> v;
    PlanSpec p = cpu_plan(1, 1, 2);
    p.zero_stage = 1;
    v.push_back({"dp 2, ZeRO-1", p});
    p.zero_stage = 3;
    v.push_back({"dp 2, ZeRO-3", p});
    v.push_back({"pp 2", cpu_plan(1, 2)});
    p = cpu_plan();
    p.cp = 2;
    p.recompute = Recompute::full;
    v.push_back({"cp 2, full recompute", p});
    check_against_single_rank(m, v);
}

TEST_CASE("Llama: every parallel variant follows the single-rank loss curve", "[runtime][parallel]") {
    std::vector<Variant> v = variants();
    PlanSpec p = cpu_plan(1, 2);
    p.schedule = Schedule::interleaved_1f1b;
    p.vpp = 2;
    v.push_back({"pp 2, interleaved 1F1B, vpp 2", p});
    p.micro_batch = 1;  // 8 micro-batches: a group of 2 passes a chunk at a time
    p.microbatch_group = 2;
    v.push_back({"pp 2, interleaved, 8 micro-batches", p});
    check_against_single_rank(tiny_llama(), v);
}

namespace {

// Where element (r, c) of a rank's piece of a MoE layer's weight sits in the whole tensor, for EP
// group rank e and TP rank t of tp, written from Megatron-Core's layout (not the runtime's): the
// rank holds experts e x E/ep ..; each expert's fc1 is cut over TP by rows, SwiGLU's gate and up
// halves each in tp parts, its fc2 by columns; the router is whole on every rank.
std::int64_t whole_of(const ModelSpec& m, const std::string& name, std::int64_t rows, std::int64_t cols, std::int64_t r, std::int64_t c,
                      std::int64_t e, std::int64_t t, std::int64_t tp) {
    const std::int64_t E = m.moe->experts, h = m.hidden, fe = m.moe->expert_ffn_hidden;
    if (name == "router.weight") return r * cols + c;
    if (name == "experts.fc2.weight") return (e * rows + r) * (fe) + t * cols + c;  // [E h, fe]
    const std::int64_t out = 2 * fe, out_local = out / tp, half = out_local / 2, local = rows / out_local;  // SwiGLU fc1 [E 2fe, h]
    const std::int64_t j = r / out_local, q = r % out_local;
    const std::int64_t row = q < half ? t * half + q : fe + t * half + (q - half);
    (void)E;
    (void)h;
    return ((e * local + j) * out + row) * cols + c;
}

// A MoE layer's weights after `steps` steps, whole, as each data-parallel replica holds them.
// Under ZeRO-1 a replica holds the last update only for its own slice until the next step's
// gather, so the caller takes, element by element, the replica that holds it fresh.
std::vector<std::vector<float>> replicas_after(const ModelSpec& m, const PlanSpec& p, int steps, const std::string& name, int layer) {
    runtime::RunOptions o;
    o.lr = 3e-3;
    runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
    for (int i = 0; i < steps; ++i) s.step();
    const std::int64_t whole = param_layout(m, cpu_plan(), 0).find(name, layer)->elements();
    std::vector<std::vector<float>> out;
    std::map<std::pair<std::int64_t, std::int64_t>, int> seen;  // (EP rank, TP rank) -> replicas read
    for (int r = 0; r < p.gpus(); ++r) {
        std::int64_t n = 0;
        try {
            n = s.param_elements(r, name, layer);
        } catch (const InputError&) {
            continue;  // another stage's layer
        }
        const std::vector<int> ep = group_ranks(Group::ep, p, r), tp = group_ranks(Group::tp, p, r);
        const std::int64_t e = std::find(ep.begin(), ep.end(), r) - ep.begin(), t = std::find(tp.begin(), tp.end(), r) - tp.begin();
        const std::vector<int> pp = group_ranks(Group::pp, p, r);
        const auto stage = static_cast<int>(std::find(pp.begin(), pp.end(), r) - pp.begin());
        const ParamLayout layout = param_layout(m, p, stage);
        const ParamEntry& piece = *layout.find(name, layer);
        const auto replica = static_cast<std::size_t>(seen[{name == "router.weight" ? 0 : e, name == "router.weight" ? 0 : t}]++);
        if (out.size() <= replica) out.emplace_back(static_cast<std::size_t>(whole), NAN);
        for (std::int64_t i = 0; i < n; ++i)
            out[replica][static_cast<std::size_t>(whole_of(m, name, piece.rows, piece.cols, i / piece.cols, i % piece.cols, e, t, p.tp))] =
                s.param(r, name, layer, i);
    }
    return out;
}

}  // namespace

TEST_CASE("MoE: every parallel variant follows the single-rank loss curve", "[runtime][parallel][moe]") {
    // The routed experts live in their own buffer, reduced over the expert-data-parallel group
    // (with ep = 1 the same ranks as dp x cp, but its own collectives and ZeRO-1 slices). At
    // initialisation the experts add little to the loss (their output projections start small),
    // so the curve alone would hardly see a token sent to the wrong expert: each expert's weights
    // after the steps are compared too. An update moves a weight by ~lr = 3e-3, and a misrouted
    // expert is that far off (checked by breaking the expert index). Adam divides each update by
    // the gradient's own scale, so where a gradient is near zero the rounding of a split that sums
    // tokens in another order (cp, tp) shows at up to ~1e-5 (dp alone: ~4e-7): tolerance 1e-4.
    std::vector<Variant> v;
    v.push_back({"dp 2", cpu_plan(1, 1, 2)});
    {
        PlanSpec p = cpu_plan(1, 1, 2);
        p.zero_stage = 1;
        v.push_back({"dp 2, ZeRO-1", p});
        p.overlap_grad_reduce = p.overlap_param_gather = false;
        p.dp_bucket_bytes = 4096;  // several buckets of each buffer, cut through tensors
        v.push_back({"dp 2, ZeRO-1, 4 kB buckets, no overlap", p});
        p.grad_accum_fusion = false;  // autograd's accumulation of each micro-batch's gradients
        v.push_back({"dp 2, ZeRO-1, unfused gradient accumulation", p});
    }
    v.push_back({"pp 2", cpu_plan(1, 2)});
    {
        PlanSpec p = cpu_plan();
        p.cp = 2;
        v.push_back({"cp 2", p});
        p = cpu_plan(1, 2, 2);
        p.recompute = Recompute::full;
        p.zero_stage = 1;
        v.push_back({"pp 2 dp 2, ZeRO-1, full recompute", p});
        p = cpu_plan(1, 1, 2);
        p.recompute = Recompute::selective;
        p.recompute_modules = recompute_bit(RecomputeModule::moe_act) | recompute_bit(RecomputeModule::layernorm);
        v.push_back({"dp 2, selective recompute of moe_act and layernorm", p});
        p.recompute_modules = recompute_bit(RecomputeModule::moe);
        v.push_back({"dp 2, selective recompute of the whole MoE block", p});
    }
    {
        // Expert parallelism: each rank holds 2 of the 4 experts; tokens go to them and back by
        // all-to-all, as many as the routing sends.
        PlanSpec p = cpu_plan(1, 1, 2);
        p.ep = 2;
        v.push_back({"dp 2, ep 2", p});
        p.recompute = Recompute::full;
        v.push_back({"dp 2, ep 2, full recompute (the dispatch runs again)", p});
        p = cpu_plan(1, 1, 4);
        p.ep = 2;
        p.zero_stage = 1;
        p.micro_batch = 1;  // 2 micro-batches a rank
        v.push_back({"dp 4, ep 2 (experts reduced over 2 ranks), ZeRO-1", p});
        p = cpu_plan(1, 2, 2);
        p.ep = 2;
        p.zero_stage = 1;
        v.push_back({"pp 2 dp 2, ep 2, ZeRO-1", p});
        p = cpu_plan();
        p.cp = 2;
        p.ep = 2;
        v.push_back({"cp 2, ep 2 (experts over the halves of each sequence)", p});
        p = cpu_plan(1, 1, 4);
        p.ep = 4;
        p.recompute = Recompute::selective;
        p.recompute_modules = recompute_bit(RecomputeModule::moe);
        v.push_back({"dp 4, ep 4 (one expert a rank), selective recompute of the MoE block", p});
    }
    const ModelSpec m = tiny_moe();
    check_against_single_rank(m, v);
    {
        // With a shared expert beside the routed ones (DeepSeek's, Qwen's).
        ModelSpec shared = m;
        shared.moe->shared_experts = 1;
        std::vector<Variant> s;
        PlanSpec p = cpu_plan(1, 1, 2);
        p.zero_stage = 1;
        s.push_back({"shared expert, dp 2, ZeRO-1", p});
        p.ep = 2;
        s.push_back({"shared expert, dp 2, ep 2, ZeRO-1", p});
        p.recompute = Recompute::selective;
        p.recompute_modules = recompute_bit(RecomputeModule::shared_experts) | recompute_bit(RecomputeModule::moe_act);
        s.push_back({"shared expert, dp 2, ep 2, selective recompute of the shared experts and moe_act", p});
        s.push_back({"shared expert, pp 2", cpu_plan(1, 2)});
        // Under TP with SP the shared experts' output and dX reach the rank's shard by a
        // reduce-scatter: the residual add and the norm's backward take them.
        p = cpu_plan(2);
        p.sequence_parallel = true;
        s.push_back({"shared expert, tp 2 SP", p});
        p.dp = 2;
        p.ep = 2;
        p.recompute = Recompute::selective;
        p.recompute_modules = recompute_bit(RecomputeModule::shared_experts);
        s.push_back({"shared expert, tp 2 SP, dp 2 ep 2, selective recompute of the shared experts", p});
        check_against_single_rank(shared, s);
    }
    {
        // Under TP with SP (Megatron-Core requires it for MoE): each TP rank routes its own tokens,
        // the expert-TP group gathers its rows for the experts' split GEMMs and reduce-scatters
        // their partial outputs back.
        PlanSpec p = cpu_plan(2);
        p.sequence_parallel = true;
        v.push_back({"tp 2 SP", p});
        p.dp = 2;
        p.ep = 2;
        v.push_back({"tp 2 SP, dp 2 ep 2", p});
        p.zero_stage = 1;
        p.ep = 1;
        p.recompute = Recompute::full;
        v.push_back({"tp 2 SP, dp 2 (experts reduced over 2 ranks), ZeRO-1, full recompute", p});
        p = cpu_plan(2, 2);
        p.sequence_parallel = true;
        v.push_back({"tp 2 SP, pp 2", p});
        p = cpu_plan(2);
        p.sequence_parallel = true;
        p.cp = 2;
        p.ep = 2;
        v.push_back({"tp 2 SP, cp 2 ep 2", p});
        check_against_single_rank(m, {v.end() - 5, v.end()});
    }
    {
        // ZeRO-2: each rank keeps a shard of the gradients, the expert buffer's too (over edp;
        // with ep = dp, edp 1, a rank's expert gradients are its shard already).
        std::vector<Variant> s;
        PlanSpec p = cpu_plan(1, 1, 2);
        p.zero_stage = 2;
        p.micro_batch = 4;  // one micro-batch a rank: the overlapped reduction
        s.push_back({"ZeRO-2, dp 2", p});
        p.ep = 2;
        s.push_back({"ZeRO-2, dp 2 ep 2 (edp 1)", p});
        p = cpu_plan(1, 1, 4);
        p.zero_stage = 2;
        p.ep = 2;
        p.micro_batch = 1;  // 2 micro-batches a rank, each reduced (DeepSpeed's separate partition)
        s.push_back({"ZeRO-2, dp 4 ep 2 (edp 2), 2 micro-batches", p});
        p.overlap_grad_reduce = false;
        p.dp_bucket_bytes = 4096;
        s.push_back({"ZeRO-2, dp 4 ep 2, 4 kB buckets, no overlap", p});
        p = cpu_plan(2, 1, 2);
        p.sequence_parallel = true;
        p.zero_stage = 2;
        p.ep = 2;
        s.push_back({"ZeRO-2, tp 2 SP, dp 2 ep 2", p});
        check_against_single_rank(m, s);
    }
    {
        // The optimizer off the GPU (ZeRO-Offload, ZeRO-Infinity): the expert buffer's host copies
        // and SSD state beside the dense ones.
        std::vector<Variant> s;
        PlanSpec p = cpu_plan(1, 1, 2);
        p.ep = 2;
        p.zero_stage = 1;
        p.offload.optimizer = TierSplit{0, 1, 0};
        s.push_back({"optimizer on the CPU, dp 2 ep 2, ZeRO-1", p});
        p.zero_stage = 2;
        p.micro_batch = 4;
        s.push_back({"optimizer on the CPU, dp 2 ep 2, ZeRO-2", p});
        p = cpu_plan();
        p.offload.optimizer = TierSplit{0.5, 0.25, 0.25};
        s.push_back({"optimizer on GPU, CPU and SSD, one rank", p});
        check_against_single_rank(m, s);
    }
    {
        // Group-limited routing (DeepSeek's): 2 groups of 2 experts, one group a token.
        ModelSpec g = m;
        g.moe->router_groups = 2;
        g.moe->router_group_topk = 1;
        std::vector<Variant> s;
        PlanSpec p = cpu_plan(1, 1, 2);
        p.ep = 2;
        s.push_back({"group-limited, dp 2 ep 2", p});
        p = cpu_plan(2);
        p.sequence_parallel = true;
        s.push_back({"group-limited, tp 2 SP", p});
        check_against_single_rank(g, s);
    }
    {
        // The router's weights at the experts' output (fc2_output) rather than inside them.
        std::vector<Variant> s;
        PlanSpec p = cpu_plan(1, 1, 2);
        p.ep = 2;
        p.moe_probs_at = MoeProbsAt::fc2_output;
        s.push_back({"fc2_output, dp 2 ep 2", p});
        p = cpu_plan(2);
        p.sequence_parallel = true;
        p.moe_probs_at = MoeProbsAt::fc2_output;
        s.push_back({"fc2_output, tp 2 SP", p});
        check_against_single_rank(m, s);
    }
    const char* names[] = {"experts.fc1.weight", "experts.fc2.weight", "router.weight"};
    for (const char* name : names) {
        const std::vector<float> ref = replicas_after(m, cpu_plan(), kSteps, name, 2).at(0);
        REQUIRE(ref.size() == static_cast<std::size_t>(param_layout(m, cpu_plan(), 0).find(name, 2)->elements()));
        for (const Variant& x : v) {
            const std::vector<std::vector<float>> got = replicas_after(m, x.plan, kSteps, name, 2);
            INFO(x.name << ", " << name);
            REQUIRE_FALSE(got.empty());
            for (const std::vector<float>& g : got) REQUIRE(g.size() == ref.size());
            double worst = 0;
            for (std::size_t i = 0; i < ref.size(); ++i) {
                double best = INFINITY;
                for (const std::vector<float>& g : got) {
                    if (!std::isnan(g[i])) best = std::min(best, static_cast<double>(std::fabs(g[i] - ref[i])));
                }
                worst = std::max(worst, best);
            }
            CHECK(worst < 1e-4);
        }
    }
}
