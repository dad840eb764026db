// The analytical memory model (memory.hpp): in-flight micro-batches per schedule (Megatron's
// warm-up counts), the GPT-3 175B on 1024 GPUs check against Korthikanti et al. and the 16
// bytes/param rule, tier placement under offload, the verdict and deterministic JSON.
#include <catch2/catch.hpp>

#include <cmath>

#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"
#include "support/gpt.hpp"

using namespace strata::sim;

namespace {

ModelSpec gpt3() {
    ModelSpec m = strata::test::gpt_shape("gpt-3-175b", 96, 12288, 96, 51200, 2048);
    m.max_position = 2048;
    m.tied_embeddings = true;
    m.linear_bias = true;
    m.dropout = 0.1;
    return m;
}

// 1024 A100-80GB: tp 8, pp 16, dp 8, micro-batch 1, global batch 1536, SP + selective recompute.
PlanSpec gpt3_plan() {
    PlanSpec p;
    p.tp = 8;
    p.pp = 16;
    p.dp = 8;
    p.micro_batch = 1;
    p.global_batch = 1536;
    p.sequence_parallel = true;
    p.recompute = Recompute::selective;
    p.flash_attention = false;
    p.schedule = Schedule::one_f_one_b;
    return p;
}

Capacities a100_80() {
    Capacities c;
    c.hbm_bytes = 80e9;
    c.cpu_bytes_per_node = 2e12;  // DGX A100: 2 TB
    c.ssd_bytes_per_node = 4 * kDefaultSsdDriveBytes;
    c.gpus_per_node = 8;
    return c;
}

// BLOOM's 181B candidate as searched in Feb 2022 (DeepSpeed, fp16): 72 layers of width 14336,
// 250680-token vocabulary (tied), tp 2, pp 6, full recompute, 64 micro-batches.
std::pair<ModelSpec, PlanSpec> bloom_search_tp2() {
    ModelSpec m = strata::test::gpt_shape("bloom-search", 72, 14336, 64, 250680, 2048);
    m.tied_embeddings = true;
    m.linear_bias = true;
    PlanSpec p;
    p.tp = 2;
    p.pp = 6;
    p.dp = 32;
    p.micro_batch = 1;
    p.global_batch = 2048;
    p.recompute = Recompute::full;
    p.flash_attention = false;
    p.precision = Precision::fp16;
    p.zero_stage = 1;
    p.schedule = Schedule::one_f_one_b;
    return {m, p};
}

double ws(const std::vector<TensorDesc>& v) {
    double b = 0;
    for (const auto& d : v) b += d.bytes;
    return b;
}

}  // namespace

TEST_CASE("In-flight micro-batches per schedule", "[memory]") {
    PlanSpec p;
    p.pp = 8;
    p.dp = 1;
    p.micro_batch = 1;
    p.global_batch = 32;  // m = 32
    p.schedule = Schedule::gpipe;
    CHECK(in_flight_microbatches(p, 0) == 32);
    CHECK(in_flight_microbatches(p, 7) == 32);
    p.schedule = Schedule::one_f_one_b;
    for (int s = 0; s < 8; ++s) CHECK(in_flight_microbatches(p, s) == 8 - s);
    p.global_batch = 4;  // fewer micro-batches than stages: capped at m
    CHECK(in_flight_microbatches(p, 0) == 4);
    // Interleaved, vpp = 2: stage 0 holds pp(1 + (pp-1)/(pp·vpp)) = 8 + 7/2 = 11.5 micro-batches
    // (Korthikanti §4.2.3); the last stage (vpp-1)·pp + 1 = 9 chunks = 4.5.
    p.global_batch = 32;
    p.schedule = Schedule::interleaved_1f1b;
    p.vpp = 2;
    CHECK(in_flight_microbatches(p, 0) == Approx(8.0 * (1 + 7.0 / 16)));
    CHECK(in_flight_microbatches(p, 7) == Approx(4.5));
    // Megatron-Core's groups of 16: warm-up 2·(pp - 1 - stage) + (vpp - 1)·16 chunks, one more at
    // the first backward: stage 0 (14 + 16 + 1) / 2 = 15.5, the last (16 + 1) / 2 = 8.5.
    p.microbatch_group = 16;
    CHECK(in_flight_microbatches(p, 0) == Approx(15.5));
    CHECK(in_flight_microbatches(p, 7) == Approx(8.5));
}

TEST_CASE("GPT-3 175B on 1024 A100-80GB: states and activations", "[memory]") {
    const ModelSpec m = gpt3();
    const PlanSpec p = gpt3_plan();
    const MemoryReport r = memory_estimate(m, p, a100_80());
    REQUIRE(r.stages.size() == 16);
    const double s = 2048, b = 1, h = 12288, t = 8;
    const double per_layer = 34 * s * b * h / t;  // Korthikanti: SP + selective recompute
    for (const StageMemory& st : r.stages) {
        CHECK(st.layers == 6);
        // ZeRO-0 mixed precision: 16 bytes per parameter on the stage (2 + 2 + 12).
        const double params = stage_params(m, p, st.stage).total();
        CHECK(st.weights_bytes + st.grads_bytes + st.optimizer_bytes == Approx(16 * params).epsilon(0.01));
        // 1F1B keeps pp - stage micro-batches.
        const double expect_act = (16 - st.stage) * 6 * per_layer;
        if (st.stage > 0 && st.stage < 15) CHECK(st.activations_bytes == Approx(expect_act).epsilon(1e-9));
        if (st.stage == 0) CHECK(st.activations_bytes == Approx(expect_act).epsilon(0.01));
    }
    // Independent check of a middle stage's parameters: 6 layers of (12h² + 13h)/t, within 1%
    // (norms and row-parallel biases are replicated, not divided by t).
    CHECK(stage_params(m, p, 5).total() == Approx(6 * 12 * h * h / t).epsilon(0.01));
    // Worst HBM is the first stage (most micro-batches in flight, plus the embedding), and it fits.
    CHECK(r.worst_hbm_stage == 0);
    CHECK(r.fits());
    CHECK(r.hbm_bytes < 80e9);
    CHECK(r.hbm_bytes > 16 * stage_params(m, p, 0).total() + 16 * 6 * per_layer);
}

TEST_CASE("fp32 gradients: Megatron's 18 and 6 + 12/dp bytes per parameter", "[memory]") {
    // Megatron-LM's own estimate (megatron/training/theoretical_memory_usage.py): bf16 weights with
    // fp32 gradient accumulation and reduction (its default for bf16) take 18 bytes per parameter,
    // 6 + 12/dp with the distributed optimizer; the ZeRO paper's 2-byte gradients 16 and 4 + 12/dp.
    const ModelSpec m = gpt3();
    PlanSpec p = gpt3_plan();
    auto bytes_per_param = [&](const PlanSpec& q) {
        const MemoryReport r = memory_estimate(m, q, a100_80());
        const StageMemory& st = r.stages[5];
        return (st.weights_bytes + st.grads_bytes + st.optimizer_bytes) / stage_params(m, q, 5).total();
    };
    CHECK(bytes_per_param(p) == Approx(16));
    p.fp32_grads = true;
    CHECK(bytes_per_param(p) == Approx(18));
    p.zero_stage = 1;
    CHECK(bytes_per_param(p) == Approx(6 + 12.0 / 8));
    p.fp32_grads = false;
    CHECK(bytes_per_param(p) == Approx(4 + 12.0 / 8));
    // The DP gradient buckets hold fp32 elements too: twice the bytes for the same bucket count.
    PlanSpec small = gpt3_plan();
    small.dp_bucket_bytes = 1'000'000'000'000;  // larger than the stage: the buckets are all its gradients
    small.overlap_grad_reduce = true;
    const double b16 = memory_estimate(m, small, a100_80()).stages[5].buffers_bytes;
    small.fp32_grads = true;
    const double b32 = memory_estimate(m, small, a100_80()).stages[5].buffers_bytes;
    CHECK(b32 - b16 == Approx(2 * 2.0 * stage_params(m, small, 5).total()));
}

TEST_CASE("pure bf16 (no fp32 master): 2 + 2 + the moments' bytes per parameter, and the update's traffic", "[memory]") {
    // A model loaded in bf16 under FSDP2's MixedPrecisionPolicy (NeMo AutoModel's default):
    // torch.optim.Adam keeps its moments in the parameters' type and updates them in place. Per
    // parameter: weights 2, gradients 2, m and v 2 each = 8 bytes, against mixed precision's 16
    // (2 + 2 + master 4 + m 4 + v 4).
    const ModelSpec m = gpt3();
    PlanSpec p = gpt3_plan();
    p.master_weights = false;
    p.exp_avg_dtype = p.exp_avg_sq_dtype = Precision::bf16;
    auto bytes_per_param = [&](const PlanSpec& q) {
        const MemoryReport r = memory_estimate(m, q, a100_80());
        const StageMemory& st = r.stages[5];
        return (st.weights_bytes + st.grads_bytes + st.optimizer_bytes) / stage_params(m, q, 5).total();
    };
    CHECK(bytes_per_param(p) == Approx(8));
    // ZeRO-3 over dp 8 under this plan's pipeline (FSDP's pipelined schedule keeps the step's
    // gradients unsharded): 2/8 + 2 + 4/8 = 2.75; a master adds 4/8.
    p.zero_stage = 3;
    CHECK(bytes_per_param(p) == Approx(2.0 / 8 + 2.0 + 4.0 / 8));
    p.master_weights = true;
    CHECK(bytes_per_param(p) == Approx(2.0 / 8 + 2.0 + 8.0 / 8));
    // The fused update reads the weights, the gradient and both moments and writes the weights and
    // both moments, each in its own 2 bytes: 2 + 2 + 2 x (2 + 2) + 2 = 14 bytes a parameter; with a
    // master 4 + 4 for it, 2 for the bf16 weights written, 2 for the gradient, 2 x 4 for the moments.
    p.master_weights = false;
    CHECK(p.adam_gpu_bytes_per_param() == 14.0);
    p.master_weights = true;
    CHECK(p.adam_gpu_bytes_per_param() == 8.0 + 2.0 + 2.0 + 8.0);
}

TEST_CASE("Offload moves bytes between tiers exactly", "[memory]") {
    const ModelSpec m = gpt3();
    PlanSpec p = gpt3_plan();
    const MemoryReport base = memory_estimate(m, p, a100_80());
    p.offload.optimizer = TierSplit{0.25, 0.5, 0.25};
    const MemoryReport off = memory_estimate(m, p, a100_80());
    // ZeRO-Offload (Ren et al. 2021, Fig. 2): the optimizer's 12 bytes a parameter move to the CPU,
    // and the fp16 gradients of the offloaded share are copied there for the update. ZeRO-Infinity
    // (DeepSpeed's sub_group_size, 1e9 parameters) stages the SSD share's 12 bytes a parameter
    // through host buffers, two sub-groups at once when there are several (read-ahead).
    auto extra_cpu = [&](int s) {
        const double params = stage_params(m, p, s).total();  // ZeRO 0: unsharded
        const double host_grads = 0.75 * p.grad_bytes() * params;
        const double ssd_params = 0.25 * params, groups = std::ceil(ssd_params / 1e9);
        const double staging = std::min(groups, 2.0) * ssd_params / groups * 12.0;
        return std::pair{host_grads, staging};
    };
    for (int s = 0; s < 16; ++s) {
        const StageMemory& a = base.stages[static_cast<std::size_t>(s)];
        const StageMemory& o = off.stages[static_cast<std::size_t>(s)];
        const auto [host_grads, staging] = extra_cpu(s);
        CHECK(o.optimizer_bytes == Approx(a.optimizer_bytes + staging));
        CHECK(a.tier_bytes[0] - o.tier_bytes[0] == Approx(0.75 * a.optimizer_bytes));
        CHECK(o.tier_bytes[1] == Approx(0.5 * a.optimizer_bytes + host_grads + staging));
        CHECK(o.tier_bytes[2] == Approx(0.25 * a.optimizer_bytes));
        CHECK(o.total_bytes() == Approx(a.total_bytes() + host_grads + staging));
    }
    // Host DRAM is per node: with tp = 8 a node holds 8 ranks of one stage.
    const auto [g0, s0] = extra_cpu(0);
    CHECK(off.cpu_bytes == Approx(8 * (0.5 * base.stages[0].optimizer_bytes + g0 + s0)));
    CHECK(base.cpu_bytes == 0);
}

TEST_CASE("An fp32 optimizer on the CPU holds weights, gradients and moments there", "[memory]") {
    // What the runtime's dataflow moves (the gradients down, the updated weights up): 16 bytes a
    // parameter on the host, 8 (weights and gradients) staying on the GPU.
    const ModelSpec m = gpt3();
    PlanSpec p = gpt3_plan();
    p.precision = Precision::fp32;
    p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
    const MemoryReport r = memory_estimate(m, p, a100_80());
    const double params = stage_params(m, p, 0).total() / (p.zero_stage >= 1 ? p.dp : 1);
    CHECK(r.stages[0].tier_bytes[1] == Approx(16.0 * params));
}

TEST_CASE("Verdict and JSON", "[memory]") {
    const ModelSpec m = gpt3();
    PlanSpec p = gpt3_plan();
    Capacities small = a100_80();
    small.hbm_bytes = 30e9;  // stage 0 needs ~35 GB: ~23.4 GB states + ~10.3 GB activations + buffers
    const MemoryReport r = memory_estimate(m, p, small);
    CHECK_FALSE(r.fits_hbm);
    CHECK_FALSE(r.fits());
    const std::string j1 = to_json_text(r), j2 = to_json_text(memory_estimate(m, p, small));
    CHECK(j1 == j2);
    for (const char* k : {"\"weights_bytes\"", "\"grads_bytes\"", "\"optimizer_bytes\"", "\"activations_bytes\"",
                          "\"buffers_bytes\"", "\"hbm_bytes\"", "\"cpu_bytes_per_node\"", "\"ssd_bytes_per_node\"",
                          "\"fits\""})
        CHECK(j1.find(k) != std::string::npos);

    // GPipe keeps all 192 micro-batches: far more activation memory than 1F1B.
    p.schedule = Schedule::gpipe;
    const MemoryReport g = memory_estimate(m, p, a100_80());
    CHECK(g.stages[5].activations_bytes == Approx(192.0 * 6 * 34 * 2048 * 12288 / 8));
    CHECK_FALSE(g.fits_hbm);
}

TEST_CASE("Partial full recompute and per-node sums across stages", "[memory]") {
    // 4 stages of 6 layers, tp 2, SP, full recompute of the first 2 layers of each stage: those
    // keep only their input 2sbh/t; the other 4 keep everything, sbh/t (34 + 5as/h) each.
    ModelSpec m = gpt3();
    m.layers = 24;
    PlanSpec p;
    p.tp = 2;
    p.pp = 4;
    p.dp = 1;
    p.micro_batch = 1;
    p.global_batch = 8;
    p.sequence_parallel = true;
    p.flash_attention = false;
    p.recompute = Recompute::full;
    p.recompute_layers = 2;
    p.offload.activations = TierSplit{0.0, 1.0, 0.0};
    Capacities caps = a100_80();
    const MemoryReport r = memory_estimate(m, p, caps);
    const double s = 2048, h = 12288, a = 96, t = 2;
    const double kept = 2 * (2 * s * h / t) + 4 * (s * h / t * (34 + 5 * a * s / h));
    CHECK(r.stages[2].activations_bytes == Approx(2 * kept));  // stage 2 of 4: 1F1B keeps 2
    CHECK(r.stages[2].tier_bytes[1] == Approx(2 * kept));       // all offloaded to host DRAM
    // A node of 8 GPUs holds ranks 0-7 = 4 stages x 2 TP ranks: its DRAM is the sum of all.
    double node = 0;
    for (const StageMemory& st : r.stages) node += 2 * st.tier_bytes[1];
    CHECK(r.cpu_bytes == Approx(node));
    // Offloading activations does not move the backward workspace off the GPU.
    for (const StageMemory& st : r.stages) CHECK(st.tier_bytes[0] >= st.workspace_bytes);
}

TEST_CASE("Backward transients: the embedding's dense gradient and unfused weight gradients", "[memory]") {
    const auto [m, p] = bloom_search_tp2();

    // Stage 0: the (V/tp, h) table's gradient, 2 B each, and the output gradient (s, b, h), less
    // the 12 layer inputs (s, b, h) the micro-batch released before the embedding's backward.
    const double row = 2048.0 * 14336 * 2;
    const double embedding = 250680.0 / 2 * 14336 * 2 + row - 12 * row;
    const MemoryReport fused = memory_estimate(m, p, a100_80());
    CHECK(ws(layer_backward_workspace(m, p, 0, true)) < embedding);
    CHECK(fused.stages[0].workspace_bytes == Approx(embedding));
    // Other stages keep the layer's workspace.
    CHECK(fused.stages[1].workspace_bytes == Approx(ws(layer_backward_workspace(m, p, 12, true))));

    // Unfused accumulation: the widest weight's gradient, fc1 (h x 4h / tp, 2 B), is a new tensor
    // before it is added into the sum.
    const double fc1 = 14336.0 * 57344 / 2 * 2;
    PlanSpec u = p;
    u.grad_accum_fusion = false;
    CHECK(ws(layer_backward_workspace(m, u, 12, true)) - ws(layer_backward_workspace(m, p, 12, true)) == Approx(fc1));
    // With one micro-batch and 16-bit sums there is nothing to add into.
    u.global_batch = 32;
    CHECK(ws(layer_backward_workspace(m, u, 12, true)) == Approx(ws(layer_backward_workspace(m, p, 12, true))));
}

TEST_CASE("Head transients: the loss's upcast and an unfused head gradient", "[memory]") {
    // BLOOM's candidate again; its last stage holds the tied embedding's copy (V/tp x h). Per
    // micro-batch the rank's logits are s x b x V/tp = 2048 x 125340 elements. Megatron's
    // vocab-parallel cross-entropy upcasts them (tensor_parallel/cross_entropy.py): the fp16
    // logits live beside their fp32 copy in the forward, and the fp32 gradient (the softmax, in
    // place) beside its fp16 cast in the backward: 2 B per logit over the stashed fp32 softmax.
    const auto [m, p] = bloom_search_tp2();
    const double logits = 2048.0 * 250680 / 2, weight = 250680.0 / 2 * 14336 * 2;
    CHECK(ws(head_workspace(m, p)) == Approx(2 * logits));
    // Unfused accumulation: the fresh (V/tp, h) gradient comes after the fp32 softmax is freed;
    // beside the fp16 logits gradient that is weight + 2 B per logit, 4 B per logit less than the
    // fp32 softmax the stash still counts (3.08 GB here).
    PlanSpec u = p;
    u.grad_accum_fusion = false;
    CHECK(ws(head_workspace(m, u)) == Approx(weight - 2 * logits));
    // With half the activations offloaded only half the fp32 softmax is on the GPU to make room:
    // 2 B per logit + weight - 2 B per logit.
    PlanSpec o = u;
    o.offload.activations = TierSplit{0.5, 0.5, 0};
    CHECK(ws(head_workspace(m, o)) == Approx(weight));
    // The last stage's workspace is the larger of the head's and a recomputed layer's backward.
    const MemoryReport r = memory_estimate(m, u, a100_80());
    CHECK(r.stages[5].workspace_bytes == Approx(std::max(weight - 2 * logits, ws(layer_backward_workspace(m, u, 60, true)))));
    CHECK(r.stages[5].workspace_bytes > r.stages[4].workspace_bytes);
    // Training in fp32 there is no cast (.float() returns the tensor itself), and the fp32
    // gradient is the one the weight gradient is formed beside.
    PlanSpec f = u;
    f.precision = Precision::fp32;
    CHECK(ws(head_workspace(m, f)) == Approx(weight * 2));
    f.grad_accum_fusion = true;
    CHECK(head_workspace(m, f).empty());
    // A loss that keeps the logits in their dtype (flash-attn's CrossEntropyLoss): 2 B stashed
    // instead of 4, and its backward writes a 2 B gradient.
    PlanSpec k = p;
    k.loss_upcast = false;
    CHECK(ws(head_workspace(m, k)) == Approx(2 * logits));
    CHECK(ws(logits_activations(m, p)) - ws(logits_activations(m, k)) == Approx(2 * logits));
}

TEST_CASE("The last stage's layers run their backward after the head's has freed its micro-batch's logits", "[memory]") {
    // With one chunk a rank, a micro-batch's backward on the last stage runs the loss and the head
    // first; autograd frees a node's saved tensors once it has run, so the layers' backward (a
    // recomputed layer's forward included) runs without that micro-batch's logits (their fp32
    // copy, the final norm's and the head's inputs). BLOOM's candidate shape at 4096 tokens with
    // a 32k vocabulary: a recomputed layer's workspace (its unfused attention's probabilities
    // among it) is larger than the logits and the head's transients together.
    auto [m, p] = bloom_search_tp2();
    m.seq_len = 4096;
    m.max_position = 4096;
    m.vocab = 32000;
    const double layer = ws(layer_backward_workspace(m, p, 60, true)), head = ws(head_workspace(m, p)), logits = ws(logits_activations(m, p));
    REQUIRE(layer - logits > head);
    CHECK(memory_estimate(m, p, a100_80()).stages[5].workspace_bytes == Approx(layer - logits));
    // Interleaved (Megatron's depth-first order), the last rank runs a head-chunk micro-batch's
    // backward right after its forward, and its warm-up forwards only chunk 0: no micro-batch's
    // logits wait beside another chunk's backward, and the fullest state is the one before a
    // head-chunk backward, whose layers find that micro-batch's logits freed, as with one chunk
    // (until stop 64 the model, and the lowering, kept them to the chunk's end: the whole layer
    // workspace beside them).
    PlanSpec v = p;
    v.vpp = 2;
    v.schedule = Schedule::interleaved_1f1b;
    v.global_batch = 32 * 60;  // 60 micro-batches: groups of pp = 6
    CHECK(memory_estimate(m, v, a100_80()).stages[5].workspace_bytes == Approx(layer - logits));
}
