// The runtime's MoE layers: the router, the token moves and the grouped experts against central
// differences and by hand, and every parallel variant (DP, ZeRO, PP, CP, recompute, EP, expert TP
// under SP, shared experts, the router's weights at either end, the optimizer off the GPU) against
// the single rank: its loss curve, and each expert's weights after the steps.
#include <array>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/common/error.hpp"
#include "strata/lowering/groups.hpp"
#include "strata/lowering/params.hpp"
#include "strata/runtime/cpu_kernels.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

TEST_CASE("MoE gradients match finite differences", "[runtime][grad][moe]") {
    // Top-k is piecewise constant: a difference that moves a token across a tie of its k-th
    // and (k+1)-th logits measures a jump, not the gradient. Choosing every expert leaves the
    // softmax, the token moves, the grouped GEMMs and the router's dgrad, all differentiable.
    // Router weights 10x the initial scale make the weights uneven, so the router's own
    // gradient is not lost in the differences' noise.
    ModelSpec m = tiny_moe();
    m.moe->top_k = m.moe->experts;
    auto spread = [&](double by) {
        return [&m, by](runtime::Session& s) {
            for (int l = 1; l < m.layers; ++l)
                for (std::int64_t i = 0; i < s.param_elements(0, "router.weight", l); ++i)
                    s.set_param(0, "router.weight", l, i, static_cast<float>(by * s.param(0, "router.weight", l, i)));
        };
    };
    check_gradients(m, cpu_plan(), 0,
                    {{"router.weight", 1}, {"router.weight", 2}, {"experts.fc1.weight", 1}, {"experts.fc2.weight", 2},
                     {"ln2.weight", 2}, {"qkv.weight", 1}, {"fc1.weight", 0}, {"word_embedding.weight", -1}},
                    spread(10), true);
    // A shared expert (DeepSeek's, Qwen's): an MLP beside the routed ones, added in.
    ModelSpec shared = m;
    shared.moe->shared_experts = 1;
    check_gradients(shared, cpu_plan(), 0,
                    {{"shared.fc1.weight", 1}, {"shared.fc2.weight", 2}, {"router.weight", 2}, {"experts.fc1.weight", 2},
                     {"ln2.weight", 1}, {"qkv.weight", 1}},
                    spread(10), true);
    // The router's weights at the experts' output (plan.moe_probs_at fc2_output): the weights'
    // gradient at the un-permute instead of inside the experts.
    PlanSpec out = cpu_plan();
    out.moe_probs_at = MoeProbsAt::fc2_output;
    check_gradients(m, out, 0, {{"router.weight", 1}, {"experts.fc2.weight", 2}, {"qkv.weight", 1}}, spread(10), true);
    // TP 2 with SP: rank 1's halves of every expert (the gathered rows through split GEMMs).
    PlanSpec tp = cpu_plan(2);
    tp.sequence_parallel = true;
    check_gradients(m, tp, 1, {{"experts.fc1.weight", 1}, {"experts.fc2.weight", 2}}, spread(10), true);
    check_gradients(shared, tp, 1, {{"shared.fc1.weight", 1}, {"shared.fc2.weight", 2}, {"experts.fc2.weight", 1}}, spread(10), true);
    // Top 2 of 4: router weights 40x part the logits by ~4 while a perturbation of the
    // router or of an expert moves them by ~0.03 at most, so no token changes experts.
    m.moe->top_k = 2;
    check_gradients(m, cpu_plan(), 0, {{"router.weight", 1}, {"experts.fc1.weight", 1}, {"experts.fc2.weight", 2}, {"router.weight", 2}},
                    spread(40), true);
}

TEST_CASE("MoE routing by hand: top-k, the softmax over the chosen, group-limited choice", "[runtime][moe]") {
    // Two tokens, 4 experts, top 2. Token 0's best are experts 0 (3.0) and 2 (2.5): weights
    // softmax(3.0, 2.5). Token 1 ties experts 1 and 3 at 1.0 behind expert 2: the lower id wins.
    const float logits[] = {3.0f, -5.0f, 2.5f, 2.4f, 0.0f, 1.0f, 2.0f, 1.0f};
    float r[8];
    runtime::cpu::moe_route(r, logits, 2, 4, 2);
    const double w0 = 1 / (1 + std::exp(-0.5)), w1 = 1 / (1 + std::exp(-1.0));
    CHECK(r[0] == 0);
    CHECK(r[1] == 2);
    CHECK(r[2] == Approx(w0));
    CHECK(r[3] == Approx(1 - w0));
    CHECK(r[4] == 2);
    CHECK(r[5] == 1);
    CHECK(r[6] == Approx(w1));
    // Group-limited (groups {0, 1} and {2, 3}, one group a token): a group scores the sum of its
    // best k / group_topk = 2 logits. Token 0: group 0 scores 3.0 - 5.0 = -2.0, group 1 4.9, so
    // experts 2 and 3 although expert 0 is the best; token 1: 1.0 against 3.0, experts 2 and 3.
    runtime::cpu::moe_route(r, logits, 2, 4, 2, 2, 1);
    CHECK(r[0] == 2);
    CHECK(r[1] == 3);
    CHECK(r[2] == Approx(1 / (1 + std::exp(-0.1))));
    CHECK(r[4] == 2);
    CHECK(r[5] == 3);
    CHECK(r[6] == Approx(w1));
    // The weights' gradient through the softmax over the chosen: dl_j = p_j (dp_j - sum p_i dp_i),
    // zero for the others.
    const float dp[] = {1.0f, 0.0f, 0.0f, 0.0f};
    float dl[8];
    runtime::cpu::moe_route_backward(dl, r, dp, 2, 4, 2);
    const double p = 1 / (1 + std::exp(-0.1));
    CHECK(dl[0] == 0);
    CHECK(dl[1] == 0);
    CHECK(dl[2] == Approx(p * (1 - p)));
    CHECK(dl[3] == Approx(-(1 - p) * p));
    for (int j = 4; j < 8; ++j) CHECK(dl[j] == 0);
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
    PlanSpec one = cpu_plan();  // the whole tensors' layout
    one.moe_pad_to_capacity = p.moe_pad_to_capacity;
    const std::int64_t whole = param_layout(m, one, 0).find(name, layer)->elements();
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

// The largest distance of a weight from the reference, each element taken from the replica that
// holds it fresh (NaN: a replica that does not hold it).
double weight_gap(const std::vector<float>& ref, const std::vector<std::vector<float>>& got) {
    double worst = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        double best = INFINITY;
        for (const std::vector<float>& g : got)
            if (!std::isnan(g[i])) best = std::min(best, static_cast<double>(std::fabs(g[i] - ref[i])));
        worst = std::max(worst, best);
    }
    return worst;
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
        // Activations on the host: the routed rows go down and come back with their row counts.
        p.offload.activations = TierSplit{0.0, 1.0, 0.0};
        v.push_back({"dp 2, ep 2, full recompute, activations on the CPU", p});
        p.recompute = Recompute::none;
        v.push_back({"dp 2, ep 2, activations on the CPU", p});
        p.offload.activations = TierSplit{};
        // torchtitan's op-level SAC: the router, the token moves and the grouped GEMMs rerun, the
        // all-to-alls' rows are kept (nothing is sent again).
        PlanSpec sac = cpu_plan(1, 1, 2);
        sac.ep = 2;
        sac.recompute = Recompute::selective;
        sac.recompute_policy = RecomputePolicy::op;
        v.push_back({"dp 2, ep 2, op-level SAC", sac});
        sac.pp = 2;
        v.push_back({"pp 2 dp 2, ep 2, op-level SAC", sac});
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
        PlanSpec sac = cpu_plan(1, 1, 2);
        sac.ep = 2;
        sac.recompute = Recompute::selective;
        sac.recompute_policy = RecomputePolicy::op;  // shared w3 reruns, w1 and w2 are kept
        s.push_back({"shared expert, dp 2, ep 2, op-level SAC", sac});
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
        // MoE parallel folding (plan.expert_tp other than tp): attention under tp 2 with SP, the
        // experts whole (etp 1) and spread over EP groups that take in the TP ranks.
        std::vector<Variant> s;
        PlanSpec p = cpu_plan(2);
        p.sequence_parallel = true;
        p.expert_tp = 1;
        p.ep = 2;
        s.push_back({"tp 2 SP, etp 1, ep 2 (over the TP ranks)", p});
        p.dp = 2;
        p.ep = 4;
        s.push_back({"tp 2 SP dp 2, etp 1, ep 4", p});
        p.ep = 1;
        p.zero_stage = 1;
        s.push_back({"tp 2 SP dp 2, etp 1, ep 1 (experts reduced over 4 ranks), ZeRO-1", p});
        check_against_single_rank(m, s);
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
        // The parameters homed on the host too, fetched a layer at a time, the experts with it.
        p.offload.optimizer = p.offload.params = TierSplit{0, 1, 0};
        p.zero_stage = 3;  // DeepSpeed's offload_param is ZeRO-3's (validate_plan)
        s.push_back({"parameters and optimizer on the CPU, one rank", p});
        p.offload.optimizer = TierSplit{0, 0, 1};
        s.push_back({"parameters on the CPU, optimizer on SSD, one rank", p});
        p = cpu_plan(1, 1, 2);
        p.zero_stage = 3;
        p.offload.optimizer = p.offload.params = TierSplit{0, 1, 0};
        s.push_back({"ZeRO-3 offload_param, dp 2 (edp 2)", p});
        p.ep = 2;
        s.push_back({"ZeRO-3 offload_param, dp 2 ep 2 (edp 1)", p});
        check_against_single_rank(m, s);
    }
    {
        // ZeRO-3 (FSDP's sharded parameters): each layer's expert range is gathered over edp and
        // reduce-scattered back like its dense unit; with edp 1 a rank's experts are its shard.
        std::vector<Variant> s;
        PlanSpec p = cpu_plan(1, 1, 2);
        p.zero_stage = 3;
        s.push_back({"ZeRO-3, dp 2 (edp 2)", p});
        p.ep = 2;
        s.push_back({"ZeRO-3, dp 2 ep 2 (edp 1)", p});
        p = cpu_plan(1, 1, 4);
        p.zero_stage = 3;
        p.ep = 2;
        p.micro_batch = 1;
        s.push_back({"ZeRO-3, dp 4 ep 2 (edp 2), 2 micro-batches", p});
        p.overlap_grad_reduce = p.overlap_param_gather = false;
        s.push_back({"ZeRO-3, dp 4 ep 2, no overlap", p});
        p = cpu_plan(1, 2, 2);
        p.zero_stage = 3;
        s.push_back({"ZeRO-3 under a pipeline (pipelined FSDP), pp 2 dp 2", p});
        // With edp 1 the experts' weights are a whole shard while their gradients stay whole
        // (found by plan_sweep.py's losses, seed 65: a gradient took its weight's shard flag).
        p.ep = 2;
        s.push_back({"pipelined FSDP, pp 2 dp 2 ep 2 (edp 1)", p});
        p = cpu_plan(2, 1, 2);
        p.sequence_parallel = true;
        p.zero_stage = 3;
        s.push_back({"ZeRO-3, tp 2 SP, dp 2", p});
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
            CHECK(weight_gap(ref, got) < 1e-4);
        }
    }
}

TEST_CASE("MoE token dropping: capacity, the probs policy, padding, and its gradients", "[runtime][moe]") {
    namespace cpu = runtime::cpu;
    // Megatron-Core's get_capacity: ceil(T k / E x factor).
    CHECK(cpu::moe_capacity(4, 2, 1, 1.0) == 2);
    CHECK(cpu::moe_capacity(5, 4, 2, 1.25) == 4);  // ceil(3.125)
    CHECK(cpu::moe_capacity(16, 4, 2, 1.0) == 8);
    CHECK(cpu::moe_capacity(16, 4, 2, 0.0) == 0);  // dropless
    // By hand, top-1 of 2 experts, capacity 2: expert 0 is chosen by tokens 0, 1, 2 with weights
    // 0.9, 0.6, 0.9; it keeps 0 and 2 (highest weights, ties to the earlier token) and drops 1.
    float r[4 * 2] = {0, 0.9f, 0, 0.6f, 0, 0.9f, 1, 0.7f};
    cpu::moe_drop(r, 4, 2, 1, 2);
    CHECK(r[0] == 0);
    CHECK(r[2] == -1);  // -(0 + 1): dropped, its weight kept for the router's backward
    CHECK(r[3] == 0.6f);
    CHECK(r[4] == 0);
    CHECK(r[6] == 1);
    std::int64_t pos[4], counts[2];
    cpu::moe_order(pos, counts, r, 4, 2, 1, 2);
    CHECK(counts[0] == 2);
    CHECK(counts[1] == 2);  // one token and a padding row
    CHECK(pos[0] == 0);
    CHECK(pos[1] == -1);
    CHECK(pos[2] == 1);
    CHECK(pos[3] == 2);
    // The dropped token's output is zero; the others carry their weighted expert rows.
    const float ye[4 * 1] = {10, 20, 30, 40};
    float y[4];
    cpu::moe_unpermute(y, ye, r, pos, 4, 1, 1);
    CHECK(y[0] == Approx(9.0));
    CHECK(y[1] == 0);
    CHECK(y[2] == Approx(18.0));
    CHECK(y[3] == Approx(21.0));
    // Its weight's gradient is 0, and the router's gradient still sees its softmax: with one
    // choice a token's softmax is constant, so every logit's gradient is 0.
    float dye[4], dprobs[4];
    const float dy[4] = {1, 1, 1, 1};
    cpu::moe_unpermute_backward(dye, dprobs, dy, ye, r, pos, 4, 1, 1);
    CHECK(dprobs[1] == 0);
    CHECK(dprobs[0] == Approx(10.0));
    {
        // Top 2 with the second choice dropped: its weight was multiplied by 0 after the softmax
        // over both, so dl = p (dp - sum p dp) with dp = 0 for it: the dropped logit still moves.
        const float route[4] = {2, -(3 + 1), 0.75f, 0.25f}, dp[2] = {2.0f, 0.0f};
        float dl[4];
        cpu::moe_route_backward(dl, route, dp, 1, 4, 2);
        const double dot = 0.75 * 2.0;
        CHECK(dl[2] == Approx(0.75 * (2.0 - dot)));
        CHECK(dl[3] == Approx(0.25 * (0.0 - dot)));
        CHECK(dl[0] == 0);
        CHECK(dl[1] == 0);
    }

    // Gradients through a layer that drops: a capacity factor of 1 with top 2 of 4 drops
    // choices from the first step. Router weights 40x keep every choice and every drop where it
    // is under the differences' small moves (as for the dropless top 2 above).
    ModelSpec m = tiny_moe();
    m.moe->capacity_factor = 1.0;
    auto padded = [](PlanSpec p) {
        p.moe_pad_to_capacity = true;  // GShard's and DeepSpeed-MoE's dispatch (the runtime's)
        return p;
    };
    const PlanSpec one = padded(cpu_plan());
    auto spread = [&m](runtime::Session& s) {
        for (int l = 1; l < m.layers; ++l)
            for (std::int64_t i = 0; i < s.param_elements(0, "router.weight", l); ++i)
                s.set_param(0, "router.weight", l, i, static_cast<float>(40 * s.param(0, "router.weight", l, i)));
    };
    check_gradients(m, one, 0, {{"router.weight", 1}, {"experts.fc1.weight", 1}, {"experts.fc2.weight", 2}, {"router.weight", 2}},
                    spread, true);
    {
        // The drops change the run: the experts' weights move apart by about an update (lr 3e-3);
        // the loss, to which the experts add little at initialisation, by 2e-4 only.
        const std::vector<float> a = replicas_after(tiny_moe(), cpu_plan(), kSteps, "experts.fc1.weight", 2).at(0),
                                 b = replicas_after(m, one, kSteps, "experts.fc1.weight", 2).at(0);
        double apart = 0;
        for (std::size_t i = 0; i < a.size(); ++i) apart = std::max(apart, static_cast<double>(std::fabs(a[i] - b[i])));
        INFO("the experts' weights with and without drops differ by up to " << apart);
        CHECK(apart > 1e-3);
    }
    // Splits that route the same tokens follow the single rank's curve and end on its experts'
    // weights: data and expert parallelism and pipelines. (TP with SP and CP route a shard of the
    // tokens each, so their capacities and drops differ, as Megatron-Core's do.)
    // The same four splits, padded or not: dp 2 with ZeRO-1, then ep 2 (with full recompute), then pp 2.
    auto splits = [](const std::array<const char*, 4>& names, PlanSpec (*make)(PlanSpec)) {
        std::vector<Variant> out;
        PlanSpec p = make(cpu_plan(1, 1, 2));
        p.zero_stage = 1;
        out.push_back({names[0], p});
        p.ep = 2;
        out.push_back({names[1], p});
        p.recompute = Recompute::full;
        out.push_back({names[2], p});
        p = make(cpu_plan(1, 2, 2));
        p.ep = 2;
        out.push_back({names[3], p});
        return out;
    };
    const std::vector<Variant> v = splits({"capacity 1.0, dp 2, ZeRO-1", "capacity 1.0, dp 2 ep 2, ZeRO-1 (padded rows over the all-to-all)",
                                           "capacity 1.0, dp 2 ep 2, full recompute", "capacity 1.0, pp 2 dp 2 ep 2"},
                                          padded);
    check_against(m, one, v);
    for (const char* name : {"experts.fc1.weight", "router.weight"}) {
        const std::vector<float> w = replicas_after(m, one, kSteps, name, 2).at(0);
        for (const Variant& x : v) {
            INFO(x.name << ", " << name);
            CHECK(weight_gap(w, replicas_after(m, x.plan, kSteps, name, 2)) < 1e-4);
        }
    }
    // The router's weights at the experts' output, against its own single rank.
    PlanSpec out = one;
    out.moe_probs_at = MoeProbsAt::fc2_output;
    PlanSpec out_ep = padded(cpu_plan(1, 1, 2));
    out_ep.ep = 2;
    out_ep.moe_probs_at = MoeProbsAt::fc2_output;
    check_against(m, out, {{"capacity 1.0, fc2_output, dp 2 ep 2", out_ep}});
    // Without padding (Megatron-Core's default) the dropped choices leave: the experts see the kept
    // rows only, however many, and the all-to-alls carry them; the same splits follow the single
    // rank's unpadded curve, which differs from the padded one only where padding changes sums
    // (it adds zero rows), so the two agree closely too.
    std::vector<Variant> u{{"padded, one rank", one}};
    for (const Variant& x : splits({"unpadded, dp 2, ZeRO-1", "unpadded, dp 2 ep 2, ZeRO-1", "unpadded, dp 2 ep 2, full recompute",
                                    "unpadded, pp 2 dp 2 ep 2"},
                                   [](PlanSpec p) { return p; }))
        u.push_back(x);
    check_against(m, cpu_plan(), u);
    // By hand: unpadded, the expert order holds the kept choices only.
    float r2[4 * 2] = {0, 0.9f, 0, 0.6f, 0, 0.9f, 1, 0.7f};
    cpu::moe_drop(r2, 4, 2, 1, 2);
    cpu::moe_order(pos, counts, r2, 4, 2, 1, 0);
    CHECK(counts[0] == 2);
    CHECK(counts[1] == 1);
    CHECK(pos[1] == -1);
    CHECK(pos[3] == 2);
}
