// MoE lowering against Megatron-Core's all-to-all token dispatcher: with sequence parallelism
// each TP rank routes and dispatches only its sequence shard, the received assignments are
// all-gathered over TP and reduce-scattered back; hidden states are not gathered around the MoE
// block. Byte counts derived by hand in the comments.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "strata/lowering/lower.hpp"
#include "strata/lowering/tensors.hpp"
#include "support/gpt.hpp"

using namespace strata::sim;

namespace {

// L = 2, h = 64, 4 heads of 16, s = 32, 4 experts (top-2) of width 128; every layer MoE.
ModelSpec moe_model() {
    ModelSpec m = strata::test::gpt_shape("tiny-moe", 2, 64, 4, 128, 32);
    m.max_position = 32;
    m.moe = strata::test::moe_spec(4, 2, 128);
    return m;
}

ClusterSpec node() {
    ClusterSpec c;
    c.gpu = "H100-SXM5-80GB";
    c.gpus_per_node = 8;
    c.nodes = 1;
    return c;
}

struct LayerComm {
    double a2a_bytes = 0;  // per all-to-all
    int a2a = 0, tp_ag = 0, tp_rs = 0, tp_ar = 0;
    double tp_ag_bytes = 0;
};

// Collectives of layer 0's forward on the single rank program (pp = 1).
LayerComm forward_comm(const Program& prog) {
    LayerComm c;
    for (const Instr& in : prog.ranks[0].instrs) {
        if (in.kind != InstrKind::collective || in.layer != 0 || in.phase != Phase::forward) continue;
        if (in.group == Group::ep && in.coll == CollKind::all_to_all) ++c.a2a, c.a2a_bytes = in.bytes;
        const bool tp_group = in.group == Group::tp || in.group == Group::etp;  // etp = tp by default
        if (tp_group && in.coll == CollKind::all_gather) ++c.tp_ag, c.tp_ag_bytes = std::max(c.tp_ag_bytes, in.bytes);
        if (tp_group && in.coll == CollKind::reduce_scatter) ++c.tp_rs;
        if (in.group == Group::tp && in.coll == CollKind::all_reduce) ++c.tp_ar;
    }
    return c;
}

// One micro-batch of one sequence per data-parallel rank, experts over `ep` ranks.
PlanSpec moe_plan(int tp, int dp, int ep) {
    PlanSpec p;
    p.tp = tp;
    p.dp = dp;
    p.ep = ep;
    p.micro_batch = 1;
    p.global_batch = dp;
    return p;
}

}  // namespace

TEST_CASE("MoE with TP and SP dispatches each rank's sequence shard", "[lower][moe]") {
    PlanSpec p = moe_plan(2, 2, 2);
    p.sequence_parallel = true;
    const LayerComm sp = forward_comm(lower(moe_model(), node(), p));
    // Tokens per micro-batch 32; per TP rank 16 with SP. Dispatch and combine each move
    // 16 tokens x top-2 x h 64 x 2 bytes = 4096 bytes.
    CHECK(sp.a2a == 2);
    CHECK(sp.a2a_bytes == Approx(16.0 * 2 * 64 * 2));
    // TP traffic of the layer: the attention block's all-gather (before QKV) and reduce-scatter
    // (after proj), plus the MoE's gather of received assignments and its reduce-scatter:
    // 2 all-gathers, 2 reduce-scatters, the MoE one carrying all 32 tokens x top-2 x 64 x 2 bytes.
    CHECK(sp.tp_ag == 2);
    CHECK(sp.tp_rs == 2);
    CHECK(sp.tp_ar == 0);
    CHECK(sp.tp_ag_bytes == Approx(32.0 * 2 * 64 * 2));

    // Without SP every TP rank holds all 32 tokens and dispatches them; the MoE output is
    // all-reduced like a row-parallel GEMM's (attention's all-reduce + MoE's = 2).
    p.sequence_parallel = false;
    const LayerComm nosp = forward_comm(lower(moe_model(), node(), p));
    CHECK(nosp.a2a_bytes == Approx(32.0 * 2 * 64 * 2));
    CHECK(nosp.tp_ag == 0);
    CHECK(nosp.tp_ar == 2);
}

TEST_CASE("MoE layers stop the host for the token counts and permute tokens around the dispatch", "[lower][moe]") {
    PlanSpec p = moe_plan(1, 2, 2);
    const Program prog = lower(moe_model(), node(), p);
    const auto& names = prog.names;
    int syncs = 0, permutes = 0, unpermutes = 0;
    double permute_bytes = 0;
    for (const Instr& in : prog.ranks[0].instrs) {
        if (in.layer != 0) continue;
        if (in.kind == InstrKind::host_sync) {
            ++syncs;
            CHECK(in.phase == Phase::forward);  // the backward reuses the forward's split sizes
        }
        if (in.kind != InstrKind::compute || in.name < 0) continue;
        const std::string& n = names[static_cast<std::size_t>(in.name)];
        if (n == "moe.permute") ++permutes, permute_bytes = in.bytes;
        if (n == "moe.unpermute") ++unpermutes;
    }
    // One micro-batch per rank: one forward (one sync), the backward mirrors both copies.
    CHECK(syncs == 1);
    CHECK(permutes == 2);
    CHECK(unpermutes == 2);
    // 32 tokens read once and written top-2 times, h 64, 2 bytes: 32 x 3 x 64 x 2 = 12288.
    CHECK(permute_bytes == Approx(32.0 * 3 * 64 * 2));
}

TEST_CASE("All-to-all dispatcher: rows sorted by local expert after the dispatch and back before the combine", "[lower][moe]") {
    // Megatron-Core's sort_chunks_by_idxs ("permutation 2"): with EP 2 each rank holds 2 of the 4
    // experts and receives 2 senders' rows per expert; it sorts them into expert order for the
    // grouped GEMM (forward: the input, and the output back; backward: fc2's gradient, and the
    // input's gradient back). A rank's expert-side rows: 2 ranks x 32 tokens x top-2 / 2 = 64.
    // Each sort reads and writes them, h 64, 2 bytes, plus each row's router weight (fp32) under
    // fc2_input (Megatron-Core's default): 2 x 64 x (64 x 2 + 4) = 16896 bytes.
    auto sorts = [](const Program& prog) {
        std::map<std::string, std::map<Phase, double>> n;  // name -> phase -> bytes, layer 0
        for (const Instr& in : prog.ranks[0].instrs) {
            if (in.kind != InstrKind::compute || in.layer != 0 || in.name < 0) continue;
            const std::string& name = prog.names[static_cast<std::size_t>(in.name)];
            if (name == "moe.sort_by_expert" || name == "moe.unsort_by_expert") n[name][in.phase] += in.bytes;
        }
        return n;
    };
    PlanSpec p = moe_plan(1, 2, 2);
    REQUIRE(p.moe_probs_at == MoeProbsAt::fc2_input);
    auto n = sorts(lower(moe_model(), node(), p));
    const double rows = 64, with_weights = 2 * rows * (64 * 2 + 4), plain = 2 * rows * 64 * 2;
    CHECK(n["moe.sort_by_expert"][Phase::forward] == Approx(with_weights));  // the input and its weights
    CHECK(n["moe.unsort_by_expert"][Phase::forward] == Approx(plain));       // the experts' output
    CHECK(n["moe.sort_by_expert"][Phase::backward] == Approx(plain));        // dY
    CHECK(n["moe.unsort_by_expert"][Phase::backward] == Approx(with_weights));  // dX and the weights' gradient
    // DeepEP's dispatch hands over tokens that the receiver permutes once: no second sort. One
    // expert a rank (EP 4) has nothing to sort either.
    p.moe_dispatcher = MoeDispatcher::deepep;
    CHECK(sorts(lower(moe_model(), node(), p)).empty());
    p = moe_plan(1, 4, 4);
    CHECK(sorts(lower(moe_model(), node(), p)).empty());
}

TEST_CASE("FP8 plans: inputs cast before unfused linears and every dgrad; head and router in BF16", "[lower][fp8]") {
    PlanSpec p = moe_plan(1, 2, 2);
    p.precision = Precision::fp8;
    const Program prog = lower(moe_model(), node(), p);
    const auto& names = prog.names;
    std::map<std::string, double> cast_fwd, cast_bwd;
    std::map<std::string, DType> dtype;
    for (const Instr& in : prog.ranks[0].instrs) {
        if (in.kind != InstrKind::compute || in.op != Op::gemm || in.name < 0) continue;
        const std::string& n = names[static_cast<std::size_t>(in.name)];
        dtype[n] = in.dtype;
        if (in.layer != 0) continue;
        (in.phase == Phase::forward ? cast_fwd : cast_bwd)[n] += in.count;
    }
    CHECK(dtype["logits"] == DType::bf16);
    CHECK(dtype["router.gemm"] == DType::bf16);
    CHECK(dtype["experts.fc1"] == DType::fp8);
    // Forward (h 64, 4 experts of 128, top-2, ep 2: each rank's 2 experts get 2 x 32 x 2 / 4 = 32
    // tokens): qkv's input comes FP8 from the fused norm (0); proj casts 32 x 64; experts fc1 casts
    // 2 x 32 x 64 and fc2 (after the SwiGLU-free GELU, 128 wide) 2 x 32 x 128.
    CHECK(cast_fwd["qkv"] == 0);
    CHECK(cast_fwd["proj"] == Approx(32.0 * 64));
    CHECK(cast_fwd["experts.fc1"] == Approx(2.0 * 32 * 64));
    CHECK(cast_fwd["experts.fc2"] == Approx(2.0 * 32 * 128));
    // Backward: each dgrad casts dY (tokens x the layer's output width), the wgrads nothing.
    CHECK(cast_bwd["qkv"] == Approx(32.0 * 3 * 64));
    CHECK(cast_bwd["proj"] == Approx(32.0 * 64));
    CHECK(cast_bwd["experts.fc2"] == Approx(2.0 * 32 * 64));
    CHECK(cast_bwd["experts.fc1"] == Approx(2.0 * 32 * 128));
}

TEST_CASE("MoE parallel folding: expert_tp 1 keeps whole experts and drops the TP traffic around them", "[lower][moe]") {
    PlanSpec p = moe_plan(2, 2, 4);  // ep 4 over tp x dp = 4 ranks: only possible with expert_tp 1
    p.expert_tp = 1;
    p.sequence_parallel = true;
    const Program prog = lower(moe_model(), node(), p);
    const LayerComm c = forward_comm(prog);
    // Each TP rank dispatches its 16-token shard: 16 x top-2 x 64 x 2 bytes each way; the only TP
    // collectives left are the attention block's all-gather and reduce-scatter.
    CHECK(c.a2a == 2);
    CHECK(c.a2a_bytes == Approx(16.0 * 2 * 64 * 2));
    CHECK(c.tp_ag == 1);
    CHECK(c.tp_rs == 1);
    // One expert per rank (4 / ep 4) receives ep x 16 x top-2 / 4 = 32 rows, at the full width 128.
    bool seen = false;
    for (const Instr& in : prog.ranks[0].instrs) {
        if (in.kind != InstrKind::compute || in.layer != 0 || in.phase != Phase::forward) continue;
        if (prog.names[static_cast<std::size_t>(in.name)] != "experts.fc1") continue;
        seen = true;
        CHECK(in.batch == 1);
        CHECK(in.m == 32);
        CHECK(in.n == 128);
    }
    CHECK(seen);
    // Expert weights per rank: 1 expert x (64x128 + 128x64) per layer, 2 layers, not split;
    // edp = 4 / (1 x 4) = 1.
    CHECK(stage_params(moe_model(), p, 0).expert == Approx(2 * 2.0 * 64 * 128));
    CHECK(p.edp() == 1);
    // The same ranks with the default (experts split over tp 2, ep 2 inside dp): the same expert
    // FLOPs and weights per rank, plus the TP gather and scatter of the routed tokens.
    PlanSpec d = p;
    d.ep = 2;
    d.expert_tp = 0;
    const LayerComm cd = forward_comm(lower(moe_model(), node(), d));
    CHECK(cd.tp_ag == 2);
    CHECK(stage_params(moe_model(), d, 0).expert == Approx(2 * 2.0 * 64 * 128));
}

TEST_CASE("Expert load skew: the hottest rank's all-to-alls carry (1 + skew) x the mean in symmetric mode", "[lower][moe]") {
    // Symmetric mode models every EP rank as the hottest: with load_skew 0.5 it receives (and
    // returns) 1.5 x the uniform 32 tokens x top-2 x h 64 x 2 bytes, so the all-to-all that waits
    // for its busiest receiver carries 1.5 x 8192 bytes.
    PlanSpec p = moe_plan(1, 2, 2);
    ModelSpec m = moe_model();
    const LayerComm even = forward_comm(lower(m, node(), p));
    m.moe->load_skew = 0.5;
    const LayerComm hot = forward_comm(lower(m, node(), p));
    CHECK(even.a2a_bytes == Approx(32.0 * 2 * 64 * 2));
    CHECK(hot.a2a_bytes == Approx(1.5 * 32.0 * 2 * 64 * 2));
}

TEST_CASE("Token dropping: padded experts take their capacity, unpadded at most the factor times the mean", "[lower][moe]") {
    // 32 tokens x top-2 over 4 experts: 16 a expert on average; the hottest rank takes 1.5 x that
    // (load_skew 0.5). A capacity factor of 1.1 caps it at 17.6 rows (Megatron-Core's default,
    // dropped choices leave); padded, every expert takes exactly ceil(17.6) = 18 (GShard,
    // DeepSpeed-MoE, --moe-pad-expert-input-to-capacity), whatever the skew.
    PlanSpec p = moe_plan(1, 2, 2);
    ModelSpec m = moe_model();
    m.moe->load_skew = 0.5;
    auto experts_m = [](const Program& prog) {
        for (const Instr& in : prog.ranks[0].instrs)
            if (in.kind == InstrKind::compute && in.op == Op::gemm && in.layer == 0 && in.phase == Phase::forward &&
                prog.names[static_cast<std::size_t>(in.name)] == "experts.fc1")
                return static_cast<double>(in.m);
        return -1.0;
    };
    const double mean_bytes = 32.0 * 2 * 64 * 2;
    const Program dropless = lower(m, node(), p);
    CHECK(forward_comm(dropless).a2a_bytes == Approx(1.5 * mean_bytes));
    CHECK(experts_m(dropless) == 2 * 16 * 1.5);  // from each of the 2 EP ranks
    m.moe->capacity_factor = 1.1;
    const Program capped = lower(m, node(), p);
    CHECK(forward_comm(capped).a2a_bytes == Approx(1.1 * mean_bytes));
    CHECK(experts_m(capped) == Approx(2 * 16 * 1.1).margin(1));  // the GEMM's m is whole rows
    p.moe_pad_to_capacity = true;
    const Program padded = lower(m, node(), p);
    CHECK(forward_comm(padded).a2a_bytes == Approx(4 * 18 * 64 * 2));
    CHECK(experts_m(padded) == 2 * 18);
    // The memory model holds the padded rows too (the experts' fc1 output).
    m.moe->load_skew = 0;
    const PlanSpec none = [&] {
        PlanSpec q = p;
        q.moe_pad_to_capacity = false;
        return q;
    }();
    auto fc1_bytes = [&](const PlanSpec& q) {
        for (const TensorDesc& t : layer_activations(m, q, 0, false))
            if (t.name == "moe.experts.fc1_out") return t.bytes;
        return -1.0;
    };
    INFO("padded " << fc1_bytes(p) << " B, unpadded " << fc1_bytes(none) << " B");
    CHECK(fc1_bytes(p) / fc1_bytes(none) == Approx(72.0 / 64.0));  // E x 18 rows against 32 x 2
}
