// torchtitan's activation checkpointing (torchtitan/distributed/activation_checkpoint.py, and
// models/llama3/infra/parallelize.py of the 2024-12 benchmarks, commit 9dec370): op-level SAC
// (plan.recompute_policy "op") and "every n-th layer" (plan.recompute_every). The expectations
// are derived by hand from that source, not read off Strata's output:
//  - the policy saves the outputs of aten.mm, SDPA (flash: output and fp32 logsumexp) and
//    reduce-scatters, except every second mm counted in forward order per layer
//    (mm_count % 2 == 0 -> PREFER_RECOMPUTE), and recomputes everything else;
//  - Llama's forward order is wq, wk, wv (xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)), wo,
//    then w1, w3, w2 (self.w2(F.silu(self.w1(x)) * self.w3(x))): kept wq, wv, w1, w2; rerun wk, wo, w3;
//  - the checkpoint also holds the block's input x.
#include <catch2/catch.hpp>

#include "strata/common/error.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/lowering/tensors.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;

namespace {

double stashed(const ModelSpec& m, const PlanSpec& p, int layer) {
    double b = 0;
    for (const TensorDesc& d : layer_activations(m, p, layer, false)) b += d.bytes;
    return b;
}

double recompute_gemm_flops(const Program& prog) {
    double f = 0;
    for (const auto& r : prog.ranks)
        for (const auto& in : r.instrs)
            if (in.kind == InstrKind::compute && in.phase == Phase::recompute) f += in.flops * static_cast<double>(r.multiplicity);
    return f;
}

ModelSpec llama3_8b() {
    ModelSpec m = strata::test::gpt_shape("llama-3-8b", 32, 4096, 32, 128256, 8192);
    m.kv_heads = 8;
    m.head_dim = 128;
    m.ffn_hidden = 14336;
    m.ffn = FfnKind::swiglu;
    m.norm = NormKind::rmsnorm;
    m.position = PositionKind::rope;
    return m;
}

// 2 layers, h = 64, 4 heads of 16, 2 KV heads, ffn 160, s = 32.
ModelSpec small_llama() {
    ModelSpec m = strata::test::gpt_shape("tiny-llama", 2, 64, 4, 128, 32);
    m.kv_heads = 2;
    m.ffn_hidden = 160;
    m.ffn = FfnKind::swiglu;
    m.norm = NormKind::rmsnorm;
    m.position = PositionKind::rope;
    m.max_position = 32;
    return m;
}

PlanSpec op_sac(int micro_batch) {
    PlanSpec p = strata::test::plan(1, 1, 8, 8 * micro_batch);
    p.micro_batch = micro_batch;
    p.zero_stage = 3;
    p.recompute = Recompute::selective;
    p.recompute_policy = RecomputePolicy::op;
    return p;
}

}  // namespace

TEST_CASE("op SAC: the matmul order and which are kept (Llama, GPT)", "[recompute][torchtitan]") {
    std::vector<std::string> kept, rerun;
    for (const SacMatmul& mm : op_sac_matmuls(llama3_8b())) (mm.saved ? kept : rerun).emplace_back(mm.name);
    CHECK(kept == std::vector<std::string>{"wq", "wv", "w1", "w2"});
    CHECK(rerun == std::vector<std::string>{"wk", "wo", "w3"});
    ModelSpec gpt = strata::test::small_gpt();
    gpt.ffn = FfnKind::gelu;
    kept.clear();
    rerun.clear();
    for (const SacMatmul& mm : op_sac_matmuls(gpt)) (mm.saved ? kept : rerun).emplace_back(mm.name);
    CHECK(kept == std::vector<std::string>{"wq", "wv", "fc1"});
    CHECK(rerun == std::vector<std::string>{"wk", "wo", "fc2"});
}

TEST_CASE("op SAC: Llama 3 8B saved bytes per layer, by hand", "[recompute][torchtitan][memory]") {
    // Per token, bf16 (h = 4096, 32 heads x 128, 8 KV heads x 128, ffn 14336):
    //   x (block input) 2h = 8192, wq out 2·4096 = 8192, wv out 2·1024 = 2048,
    //   SDPA out 2·4096 = 8192, logsumexp 4 B x 32 heads = 128, w1 out 2·14336 = 28672,
    //   w2 out 2h = 8192: 63 616 bytes.
    const double per_token = 8192 + 8192 + 2048 + 8192 + 128 + 28672 + 8192;
    REQUIRE(per_token == 63616);
    const ModelSpec m = llama3_8b();
    CHECK(stashed(m, op_sac(2), 0) == Approx(per_token * 2 * 8192));  // local batch 2, seq 8192
    CHECK(stashed(m, op_sac(1), 5) == Approx(per_token * 8192));
    // Against no recompute (the Megatron-style list: 139 392 B/token) and full (2h = 8192 B/token).
    PlanSpec none = op_sac(1);
    none.recompute = Recompute::none;
    CHECK(stashed(m, none, 0) / 8192 == Approx(2.0 * (4 * 4096 + 4096 + 2 * 1024 + 4096 + 3 * 14336) + 128));
    CHECK(stashed(m, op_sac(1), 0) < 0.46 * stashed(m, none, 0));
}

TEST_CASE("op SAC: the backward reruns the even matmuls, by hand", "[recompute][torchtitan][lower]") {
    // Small Llama: 2 layers, h = 64, 4 heads of 16, 2 KV heads, ffn 160, s = 32; 4 micro-batches.
    const ModelSpec m = small_llama();
    const ClusterSpec c = strata::test::cluster(1);
    PlanSpec p = strata::test::plan(1, 1, 1, 4);
    p.recompute = Recompute::selective;
    p.recompute_policy = RecomputePolicy::op;
    // wk (h -> 2·16), wo (64 -> h), w3 (h -> 160): 2 flops per multiply-add; no attention core.
    const double tokens = 4 * 32.0;
    const double per_layer = 2.0 * tokens * (64 * 32 + 64 * 64 + 64 * 160);
    CHECK(recompute_gemm_flops(lower(m, c, p)) == Approx(2 * per_layer));
    // GeLU: wk and wo; fc2 (the 6th) is past the checkpoint's early stop, nothing reads its output.
    ModelSpec g = m;
    g.ffn = FfnKind::gelu;
    CHECK(recompute_gemm_flops(lower(g, c, p)) == Approx(2 * 2.0 * tokens * (64 * 32 + 64 * 64)));
}

TEST_CASE("recompute_every: torchtitan's every n-th layer is full recompute of layers n, 2n, ...", "[recompute][torchtitan]") {
    ModelSpec m = strata::test::small_gpt();
    m.layers = 8;
    PlanSpec p = strata::test::plan(1, 1, 1, 4);
    p.recompute = Recompute::full;
    p.recompute_every = 3;
    // ptd_checkpoint_wrapper._count runs 1..8: layers 3 and 6 (0-based 2 and 5) are wrapped.
    std::vector<int> wrapped;
    for (int i = 0; i < 8; ++i)
        if (layer_recomputed(m, p, 0, i)) wrapped.push_back(i);
    CHECK(wrapped == std::vector<int>{2, 5});
    // Memory: 2 layers keep their input only, 6 keep everything.
    PlanSpec none = p;
    none.recompute = Recompute::none;
    none.recompute_every = 0;
    const double full_layer = stashed(m, none, 0);
    const double input_only = layer_activations(m, p, 0, true)[0].bytes;
    const MemoryReport mem = memory_estimate(m, p, {});
    const MemoryReport mem_none = memory_estimate(m, none, {});
    CHECK(mem_none.stages[0].activations_bytes - mem.stages[0].activations_bytes == Approx(2 * (full_layer - input_only)));
}

TEST_CASE("recompute_policy and recompute_every: spec rules and round trip", "[recompute][torchtitan][spec]") {
    auto parse = [](const std::string& text) { return plan_from_json_text(text, "plan.json"); };
    const PlanSpec p = parse(R"({"global_batch": 4, "recompute": "selective", "recompute_policy": "op"})");
    CHECK(p.op_sac());
    CHECK_FALSE(p.recomputes(RecomputeModule::core_attn));  // the Megatron modules are off
    CHECK(parse(to_json_text(p)).op_sac());
    const PlanSpec e = parse(R"({"global_batch": 4, "recompute": "full", "recompute_every": 2})");
    CHECK(e.recompute_every == 2);
    CHECK(parse(to_json_text(e)).recompute_every == 2);
    CHECK_FALSE(parse(to_json_text(e)).op_sac());
    auto rule = [&](const std::string& text) {
        try {
            parse(text);
        } catch (const strata::InputError& err) {
            return err.path() + ": " + err.rule();
        }
        return std::string("accepted");
    };
    CHECK(rule(R"({"global_batch": 4, "recompute": "full", "recompute_policy": "op"})").find("needs plan.recompute") != std::string::npos);
    CHECK(rule(R"({"global_batch": 4, "recompute": "selective", "recompute_policy": "op", "recompute_modules": ["mlp"]})")
              .find("no recompute_modules") != std::string::npos);
    CHECK(rule(R"({"global_batch": 4, "recompute": "selective", "recompute_every": 2})").find("needs plan.recompute") != std::string::npos);
    CHECK(rule(R"({"global_batch": 4, "recompute": "full", "recompute_every": 0})").find("positive") != std::string::npos);
    // Modelled without CP, and under TP for dense decoders with sequence parallelism (torchtitan's
    // 2D Llama always shards its norms).
    ClusterSpec c = strata::test::cluster(2);
    c.gpus_per_node = 2;
    ModelSpec gpt = strata::test::small_gpt();
    gpt.linear_bias = false;
    PlanSpec tp2 = p;
    tp2.tp = 2;
    tp2.global_batch = 4;
    CHECK_THROWS_WITH(validate_plan(gpt, c, tp2, "plan.json"), Catch::Contains("plan.sequence_parallel"));
    tp2.sequence_parallel = true;
    CHECK_NOTHROW(validate_plan(gpt, c, tp2, "plan.json"));
    PlanSpec cp2 = p;
    cp2.cp = 2;
    cp2.global_batch = 4;
    CHECK_THROWS_WITH(validate_plan(gpt, c, cp2, "plan.json"), Catch::Contains("cp = 1"));
}

TEST_CASE("op SAC under TP (torchtitan's 2D Llama): saved bytes and the rerun gathers, by hand", "[recompute][torchtitan][tp]") {
    // Llama 3 8B at tp 8 with sequence parallelism, per token of the micro-batch (bf16): the
    // block input's shard 2h/8 = 1024, wq's columns 2*4096/8 = 1024, wv's 2*1024/8 = 256, SDPA out
    // 2*4096/8 = 1024, logsumexp 4*32/8 = 16, w1's columns 2*14336/8 = 3584, w2's whole partial sum
    // (row-parallel, before its reduce-scatter) 2h = 8192, and both reduce-scatters' shards
    // 2 x 2h/8 = 2048: 17 168 bytes.
    const double per_token = 1024 + 1024 + 256 + 1024 + 16 + 3584 + 8192 + 2048;
    REQUIRE(per_token == 17168);
    const ModelSpec m = llama3_8b();
    PlanSpec p = op_sac(1);
    p.tp = 8;
    p.dp = 1;
    p.global_batch = 1;
    p.sequence_parallel = true;
    CHECK(stashed(m, p, 0) == Approx(per_token * 8192));

    // The recomputation under tp 2: wk, wo and w3 on each rank's columns (1/2 of tp 1's FLOPs a
    // rank, so the job's sum is tp 1's), and the two sequence-parallel all-gathers sent again
    // (2 x T x h bf16 per layer), which the backward then does not repeat: the step gathers as
    // often as without recomputation.
    const ModelSpec t = small_llama();
    ClusterSpec c = strata::test::cluster(2);
    c.gpus_per_node = 2;
    PlanSpec q = strata::test::plan(2, 1, 1, 4);
    q.sequence_parallel = true;
    q.recompute = Recompute::selective;
    q.recompute_policy = RecomputePolicy::op;
    const double tokens = 4 * 32.0;
    const Program sac = lower(t, c, q);
    CHECK(recompute_gemm_flops(sac) == Approx(2 * 2.0 * tokens * (64 * 32 + 64 * 64 + 64 * 160)));  // over both TP ranks
    CHECK(sac.ranks.size() * static_cast<std::size_t>(sac.ranks.front().multiplicity) == 2);
    auto gathers = [](const Program& prog, Phase ph) {
        int n = 0;
        for (const auto& in : prog.ranks.front().instrs)
            if (in.kind == InstrKind::collective && in.coll == CollKind::all_gather && in.group == Group::tp && in.phase == ph) ++n;
        return n;
    };
    CHECK(gathers(sac, Phase::recompute) == 2 * 2 * 4);  // 2 a layer, 2 layers, 4 micro-batches
    PlanSpec none = q;
    none.recompute = Recompute::none;
    const Program plain = lower(t, c, none);
    CHECK(gathers(sac, Phase::recompute) + gathers(sac, Phase::backward) + gathers(sac, Phase::forward) ==
          gathers(plain, Phase::backward) + gathers(plain, Phase::forward));
}

namespace {
// The loss's bytes of one micro-batch: the stashed log_softmax output, and the head's workspace in
// the backward and in the forward.
struct LossHeld {
    double held = 0, bwd = 0, fwd = 0;
};
LossHeld loss_held(const ModelSpec& m, const PlanSpec& p) {
    LossHeld b;
    for (const TensorDesc& d : logits_activations(m, p))
        if (d.name == "lm_head.logits") b.held += d.bytes;
    for (const TensorDesc& d : head_workspace(m, p)) b.bwd += d.bytes;
    for (const TensorDesc& d : head_workspace(m, p, false)) b.fwd += d.bytes;
    return b;
}
}  // namespace

TEST_CASE("eager cross-entropy: three fp32 logits-sized tensors in the loss backward, by hand", "[torchtitan][memory]") {
    // F.cross_entropy(pred.float(), labels) = log_softmax + nll_loss as eager ops: log_softmax's
    // fp32 output is saved; the backward allocates nll_loss's gradient (zeros, then the -1/N
    // scatter) and _log_softmax_backward_data's output while it is held.
    const ModelSpec m = llama3_8b();
    PlanSpec p = op_sac(2);
    p.eager_cross_entropy = true;
    const double tv = 2.0 * 8192 * 128256;  // tokens x vocab of one micro-batch
    const auto [held, bwd, fwd] = loss_held(m, p);
    CHECK(held == Approx(4 * tv));
    CHECK(held + bwd == Approx(12 * tv));
    CHECK(held + fwd == Approx((4 + 4 + 2) * tv));  // the bf16 head output, its fp32 copy, log_softmax's output
    // The fused loss (Megatron's): the fp32 softmax becomes the gradient in place, cast back to bf16.
    p.eager_cross_entropy = false;
    double fused = 0;
    for (const TensorDesc& d : head_workspace(m, p)) fused += d.bytes;
    CHECK(held + fused == Approx(6 * tv));
}

TEST_CASE("loss_parallel's cross-entropy under TP: four fp32 logits-sized tensors at its peaks, by hand", "[torchtitan][memory]") {
    // torch distributed/tensor/parallel/loss.py (torch 1963fc8, torchtitan's 2024-12 benchmarks):
    // _log_softmax computes shifted = x - max, sum(exp(shifted)) and result = shifted - log(sum),
    // each a new fp32 tensor of the rank's vocabulary shard; the result is saved. The backward,
    // _nll_loss_and_log_softmax_backward, returns (zeros_like(x) + exp(x)) * grad: the zeros, the
    // exponentials and their sum live at once, beside the saved result.
    const ModelSpec m = llama3_8b();
    PlanSpec p = op_sac(2);
    p.eager_cross_entropy = true;
    p.tp = 2;
    p.sequence_parallel = true;
    p.loss_parallel = true;
    const double tv = 2.0 * 8192 * 128256 / 2;  // tokens x the rank's half of the vocabulary
    const auto [held, bwd, fwd] = loss_held(m, p);
    CHECK(held == Approx(4 * tv));
    CHECK(held + bwd == Approx(16 * tv));
    // Forward, at the exponentials (no result yet) or at the result (exponentials freed): the bf16
    // head output, its fp32 copy, the shifted logits and one more fp32 tensor.
    CHECK(held + fwd == Approx((2 + 4 + 4 + 4) * tv));
    // Without loss_parallel (or without TP) the eager loss is the fused log_softmax: 12 and 10.
    p.loss_parallel = false;
    CHECK(held + loss_held(m, p).bwd == Approx(12 * tv));
    p.loss_parallel = true;
    p.tp = 1;
    p.sequence_parallel = false;
    CHECK_FALSE(p.eager_loss_parallel());
}

TEST_CASE("op SAC of a MoE layer (torchtitan's Qwen3 and DeepSeek-V3 default), by hand", "[recompute][torchtitan][moe]") {
    // torchtitan activation_checkpoint.py (SelectiveAC, 2025-26): the router's gate is forced to
    // recompute by its shape and not counted; the routed experts' torch._grouped_mm is not on the
    // save list (torch's compute_intensive_ops: mm, bmm, addmm, SDPA, _scaled_mm, ...);
    // all_to_all_single's outputs are; the shared experts' matmuls count on after wq wk wv wo:
    // kept wq, wv, shared w1, shared w2; rerun wk, wo, shared w3.
    ModelSpec m = strata::test::gpt_shape("tiny-moe", 2, 64, 4, 128, 32);
    m.kv_heads = 2;
    m.ffn = FfnKind::swiglu;
    m.norm = NormKind::rmsnorm;
    m.position = PositionKind::rope;
    m.linear_bias = false;
    m.max_position = 32;
    m.moe = strata::test::moe_spec(4, 2, 48);
    m.moe->shared_experts = 1;
    std::vector<std::string> kept, rerun;
    for (const SacMatmul& mm : op_sac_matmuls(m, true)) (mm.saved ? kept : rerun).emplace_back(mm.name);
    CHECK(kept == std::vector<std::string>{"wq", "wv", "shared.w1", "shared.w2"});
    CHECK(rerun == std::vector<std::string>{"wk", "wo", "shared.w3"});
    // The plan: one rank's micro-batch of 2 x 32 tokens, bf16, experts over ep 2.
    PlanSpec p = strata::test::plan(1, 1, 2, 4);
    p.micro_batch = 2;
    p.ep = 2;
    p.recompute = Recompute::selective;
    p.recompute_policy = RecomputePolicy::op;
    ClusterSpec c = strata::test::cluster(1);
    c.gpus_per_node = 2;
    validate_plan(m, c, p, "plan.json");  // MoE is modelled now; MLA is not
    // Per token, bf16: x 2 x 64, wq out 2 x 64, wv out 2 x 32, shared w1 out 2 x 48, shared w2 out
    // 2 x 64, SDPA out 2 x 64, logsumexp 4 x 4 heads; and the all-to-alls' outputs, top-2 rows of
    // 64 each way: 2 x (2 x 2 x 64).
    const double per_token = 128 + 128 + 64 + 96 + 128 + 128 + 16 + 2 * (2 * 2 * 64);
    CHECK(stashed(m, p, 0) == Approx(per_token * 2 * 32));
    // DeepSeek-V3's MLA (torchtitan models/deepseek_v3/model.py): wq (no query rank), wkv_a, wkv_b,
    // wo, then the shared experts: kept wq, wkv_b, shared w1; rerun wkv_a, wo, shared w3; kept w2.
    ModelSpec mla = m;
    mla.mla = MlaSpec{0, 32, 16, 8, 16};
    validate_plan(mla, c, p, "plan.json");
    kept.clear();
    rerun.clear();
    for (const SacMatmul& mm : op_sac_matmuls(mla, true)) (mm.saved ? kept : rerun).emplace_back(mm.name);
    CHECK(kept == std::vector<std::string>{"wq", "wkv_b", "shared.w1", "shared.w2"});
    CHECK(rerun == std::vector<std::string>{"wkv_a", "wo", "shared.w3"});
    // Per token: x 128, wq out 2 x 4 x (16 + 8), wkv_b out 2 x 4 x (16 + 16), shared w1 96, w2 128,
    // SDPA out 2 x 4 heads x v 16, logsumexp 16, the all-to-alls' 512.
    CHECK(stashed(mla, p, 0) == Approx((128 + 192 + 256 + 96 + 128 + 128 + 16 + 512) * 2.0 * 32));
    // With a query rank: wq_a, wq_b, wkv_a, wkv_b, wo: kept wq_a, wkv_a, wo.
    mla.mla->q_lora_rank = 24;
    kept.clear();
    for (const SacMatmul& mm : op_sac_matmuls(mla, false)) if (mm.saved) kept.emplace_back(mm.name);
    CHECK(kept == std::vector<std::string>{"wq_a", "wkv_a", "wo", "w3"});
    CHECK_NOTHROW(lower(mla, c, p));
    // The backward reruns the router's gate, both grouped GEMMs and shared w3, and sends nothing
    // again: no all-to-all in the recompute phase.
    const Program prog = lower(m, c, p);
    int router = 0, experts = 0, shared = 0, a2a = 0;
    for (const Instr& in : prog.ranks[0].instrs) {
        if (in.phase != Phase::recompute) continue;
        const std::string& name = prog.names[static_cast<std::size_t>(in.name)];
        router += name == "router.gemm";
        experts += name == "experts.fc1" || name == "experts.fc2";
        shared += name == "shared.fc1" || name == "shared.fc2";
        a2a += in.kind == InstrKind::collective && in.coll == CollKind::all_to_all;
    }
    const int micro_batches = 1, layers = 2;  // global batch 4 over dp 2 in micro-batches of 2
    CHECK(router == layers * micro_batches);
    CHECK(experts == 2 * layers * micro_batches);
    CHECK(shared == layers * micro_batches);  // w3 (w1's part of the fused gate/up is kept), not w2
    CHECK(a2a == 0);
}
