// Every input rule of the spec readers and of validate_plan, triggered once: the message must name
// the file, the JSON path and the rule (DESIGN.md: "every bad field is rejected with the JSON path
// and the rule it broke"). The expected numbers in the messages are worked out by hand.
#include <catch2/catch.hpp>

#include <functional>

#include <nlohmann/json.hpp>

#include "strata/common/error.hpp"
#include "strata/lowering/spec_io.hpp"
#include "support/gpt.hpp"

using namespace strata::sim;
using Catch::Matchers::Contains;

namespace {

// A small consistent triple: 8 layers, 8 heads (4 KV heads), FFN 1536, seq 256.
const char* kModel = R"({"name": "m", "layers": 8, "hidden": 512, "heads": 8, "kv_heads": 4, "ffn_hidden": 1536,
                         "vocab": 1000, "seq_len": 256, "position": "rope"})";
const char* kMoeModel = R"({"name": "moe", "layers": 8, "hidden": 512, "heads": 8, "ffn_hidden": 1536, "vocab": 1000,
                            "seq_len": 256, "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 1002}})";

ModelSpec model(const char* text = kModel) { return model_from_json_text(text, "m.json"); }
PlanSpec plan(const std::string& text) { return plan_from_json_text(text, "p.json"); }
// A cluster sized to the plan, so that only the rule under test can fire.
ClusterSpec cluster_for(const PlanSpec& p) {
    ClusterSpec c;
    c.name = "c";
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 1;
    c.gpus_per_node = p.tp * p.pp * p.dp * p.cp;
    return c;
}
void validate(const ModelSpec& m, const PlanSpec& p) { validate_plan(m, cluster_for(p), p, "p.json"); }

// `base` (an object's text) with the members of `extra` (", \"k\": v, ..."), which replace
// base's members of the same name: the readers refuse a key given twice, so overriding a field
// by appending it is not an option.
std::string merged(const std::string& base, const std::string& extra) {
    nlohmann::ordered_json b = nlohmann::ordered_json::parse(base);
    if (extra.empty()) return b.dump();
    const nlohmann::ordered_json e = nlohmann::ordered_json::parse("{" + extra.substr(extra.find(',') + 1) + "}");
    for (auto it = e.begin(); it != e.end(); ++it) b[it.key()] = it.value();
    return b.dump();
}

// The error must carry the file, the JSON path and the rule text.
void expect_error(const std::function<void()>& f, const std::string& file, const std::string& path, const std::string& rule) {
    try {
        f();
        FAIL("no InputError for " << path << " " << rule);
    } catch (const strata::InputError& e) {
        INFO(e.what());
        CHECK(e.file() == file);
        CHECK(e.path() == path);
        CHECK_THAT(e.rule(), Contains(rule));
        CHECK_THAT(std::string(e.what()), Contains(file + ": " + path));
    }
}

}  // namespace

TEST_CASE("the base triple is valid", "[spec][errors]") {
    PlanSpec p = plan(R"({"tp": 2, "pp": 2, "dp": 4, "global_batch": 32})");
    CHECK_NOTHROW(validate(model(), p));
    CHECK_NOTHROW(validate(model(kMoeModel), plan(R"({"tp": 2, "dp": 4, "ep": 4, "global_batch": 8})")));
}

TEST_CASE("validate_plan: GPU count", "[spec][errors]") {
    PlanSpec p = plan(R"({"tp": 2, "pp": 1, "dp": 4, "global_batch": 32})");
    ClusterSpec c = cluster_for(p);
    c.nodes = 2;  // 16 GPUs, but 2*1*4*1 = 8 are used
    expect_error([&] { validate_plan(model(), c, p, "p.json"); }, "p.json", "plan.tp x plan.pp x plan.dp x plan.cp",
                 "= 2*1*4*1 = 8 does not equal cluster GPUs = 16");
}

TEST_CASE("validate_plan: a programmatic plan's vocabulary padding in range", "[spec][errors]") {
    PlanSpec p = plan(R"({"global_batch": 8})");
    p.vocab_divisible_by = 0;  // the reader refuses it; a plan built in code reaches validate_plan
    expect_error([&] { validate(model(), p); }, "p.json", "plan.vocab_divisible_by", "must be an integer from 1 to 65536 (got 0)");
}

TEST_CASE("validate_plan: tensor parallel divisibility", "[spec][errors]") {
    expect_error([] { validate(model(), plan(R"({"tp": 3, "global_batch": 8})")); }, "p.json", "plan.tp",
                 "= 3 does not divide model.heads = 8");
    // 12 heads, 6 KV heads, tp 4: 4 divides 12, but neither of 6 and 4 divides the other.
    ModelSpec gqa = model(R"({"name": "g", "layers": 2, "hidden": 768, "heads": 12, "kv_heads": 6, "ffn_hidden": 3072,
                              "vocab": 100, "seq_len": 64})");
    expect_error([&] { validate(gqa, plan(R"({"tp": 4, "global_batch": 8})")); }, "p.json", "plan.tp",
                 "= 4 and model.kv_heads = 6: one must divide the other");
    // tp 8 > kv_heads 4 is allowed: Megatron replicates KV heads.
    CHECK_NOTHROW(validate(model(), plan(R"({"tp": 8, "global_batch": 8})")));
    ModelSpec odd_ffn = model();
    odd_ffn.ffn_hidden = 1530;
    expect_error([&] { validate(odd_ffn, plan(R"({"tp": 4, "global_batch": 8})")); }, "p.json", "plan.tp",
                 "= 4 does not divide model.ffn_hidden = 1530");
    expect_error([] { validate(model(kMoeModel), plan(R"({"tp": 4, "global_batch": 8})")); }, "p.json", "plan.tp",
                 "= 4 does not divide model.moe.expert_ffn_hidden = 1002");
    // The vocabulary (1000) need not divide by tp (Megatron pads it): tp 8 passes above.
}

TEST_CASE("validate_plan: pipeline", "[spec][errors]") {
    expect_error([] { validate(model(), plan(R"({"pp": 16, "global_batch": 16})")); }, "p.json", "plan.pp",
                 "= 16 exceeds model.layers = 8");
    expect_error([] { validate(model(), plan(R"({"pp": 2, "global_batch": 8, "layer_split": [8]})")); }, "p.json",
                 "plan.layer_split", "has 1 entries but plan.pp = 2");
    expect_error([] { validate(model(), plan(R"({"pp": 2, "global_batch": 8, "layer_split": [3, 4]})")); }, "p.json",
                 "plan.layer_split", "sums to 7 but model.layers = 8");
    CHECK_NOTHROW(validate(model(), plan(R"({"pp": 2, "global_batch": 8, "layer_split": [3, 5]})")));
    PlanSpec zero_stage_layer = plan(R"({"pp": 2, "global_batch": 8})");
    zero_stage_layer.layer_split = {0, 8};
    expect_error([&] { validate(model(), zero_stage_layer); }, "p.json", "plan.layer_split[0]", "must be a positive integer");
}

TEST_CASE("validate_plan: a split per virtual stage", "[spec][errors]") {
    // 8 layers, pp 2, vpp 2: four virtual stages, stage i on rank i mod 2.
    const std::string il = R"("pp": 2, "vpp": 2, "schedule": "interleaved-1f1b", "global_batch": 8, )";
    const PlanSpec ok = plan("{" + il + R"("virtual_layer_split": [1, 3, 4, 0]})");
    CHECK_NOTHROW(validate(model(), ok));
    CHECK(stage_layers(model(), ok) == std::vector<int>{5, 3});
    CHECK(virtual_stage_layers(model(), ok) == std::vector<int>{1, 3, 4, 0});
    expect_error([&] { validate(model(), plan("{" + il + R"("virtual_layer_split": [4, 4]})")); }, "p.json",
                 "plan.virtual_layer_split", "has 2 entries but plan.pp x plan.vpp = 4");
    expect_error([&] { validate(model(), plan("{" + il + R"("virtual_layer_split": [1, 3, 3, 0]})")); }, "p.json",
                 "plan.virtual_layer_split", "sums to 7 but model.layers = 8");
    expect_error([&] { validate(model(), plan("{" + il + R"("virtual_layer_split": [4, 0, 4, 0]})")); }, "p.json",
                 "plan.virtual_layer_split", "leaves pipeline rank 1 without a layer");
    expect_error([&] { validate(model(), plan("{" + il + R"("virtual_layer_split": [1, 3, 4, 0], "layer_split": [5, 3]})")); },
                 "p.json", "plan.virtual_layer_split", "both set the split");
    CHECK_THROWS_WITH(plan("{" + il + R"("virtual_layer_split": [1, -3, 4, 0]})"),
                      Catch::Contains("virtual_layer_split[1]") && Catch::Contains("non-negative"));
}

TEST_CASE("validate_plan: batch divisibility", "[spec][errors]") {
    // 30 sequences over micro-batches of 1 on 4 replicas: 30 % 4 = 2.
    expect_error([] { validate(model(), plan(R"({"dp": 4, "global_batch": 30})")); }, "p.json", "plan.global_batch",
                 "= 30 is not divisible by plan.micro_batch x plan.dp = 1*4 = 4");
}

TEST_CASE("validate_plan: interleaved schedule", "[spec][errors]") {
    expect_error([] { validate(model(), plan(R"({"pp": 2, "global_batch": 8, "schedule": "interleaved-1f1b"})")); },
                 "p.json", "plan.schedule", "needs plan.vpp >= 2");
    expect_error([] { validate(model(), plan(R"({"pp": 2, "vpp": 2, "global_batch": 8})")); }, "p.json", "plan.vpp",
                 "= 2 needs plan.schedule = interleaved-1f1b or dualpipev (got 1f1b)");
    expect_error([] { validate(model(), plan(R"({"vpp": 2, "global_batch": 8, "schedule": "interleaved-1f1b"})")); },
                 "p.json", "plan.vpp", "needs plan.pp >= 2");
    // 8 layers on 2 stages = 4 per stage: 5 virtual stages cannot each hold a layer.
    expect_error([] { validate(model(), plan(R"({"pp": 2, "vpp": 5, "global_batch": 8, "schedule": "interleaved-1f1b"})")); },
                 "p.json", "plan.vpp", "= 5 exceeds the 4 layers of pipeline stage 0");
    // 4 % 3 != 0 is allowed: chunks of 2, 1, 1 layers.
    CHECK_NOTHROW(validate(model(), plan(R"({"pp": 2, "vpp": 3, "global_batch": 8, "schedule": "interleaved-1f1b"})")));
    // 3 micro-batches (global 3, micro 1, dp 1) on pp 2: Megatron's interleaving needs a multiple of pp.
    expect_error([] { validate(model(), plan(R"({"pp": 2, "vpp": 2, "global_batch": 3, "schedule": "interleaved-1f1b"})")); },
                 "p.json", "plan.global_batch", "gives 3 micro-batches, not divisible by plan.pp = 2");
    CHECK_NOTHROW(validate(model(), plan(R"({"pp": 2, "vpp": 2, "global_batch": 4, "schedule": "interleaved-1f1b"})")));
    // The message names the group that would admit it: 3 micro-batches in one group of 3.
    expect_error([] { validate(model(), plan(R"({"pp": 2, "vpp": 2, "global_batch": 3, "schedule": "interleaved-1f1b"})")); },
                 "p.json", "plan.global_batch", "plan.microbatch_group = 3 would admit it");
}

TEST_CASE("validate_plan: micro-batch groups of the interleaved schedule", "[spec][errors]") {
    // Megatron-Core (schedules.py): pp <= N <= m, and m mod N is 0 or at least pp.
    const std::string il = R"("pp": 2, "vpp": 2, "schedule": "interleaved-1f1b", )";
    CHECK_NOTHROW(validate(model(), plan("{" + il + R"("global_batch": 5, "microbatch_group": 3})")));   // 3 + 2
    CHECK_NOTHROW(validate(model(), plan("{" + il + R"("global_batch": 5, "microbatch_group": 5})")));   // one group
    expect_error([&] { validate(model(), plan("{" + il + R"("global_batch": 7, "microbatch_group": 3})")); }, "p.json",
                 "plan.microbatch_group", "= 3 leaves a last group of 1 of the 7 micro-batches; it must be 0 or at least plan.pp = 2");
    expect_error([&] { validate(model(), plan("{" + il + R"("global_batch": 8, "microbatch_group": 9})")); }, "p.json",
                 "plan.microbatch_group", "= 9 must lie in [plan.pp, micro-batches] = [2, 8]");
    expect_error([] { validate(model(), plan(R"({"pp": 4, "vpp": 2, "schedule": "interleaved-1f1b", "global_batch": 8, "microbatch_group": 3})")); },
                 "p.json", "plan.microbatch_group", "= 3 must lie in [plan.pp, micro-batches] = [4, 8]");
    expect_error([] { validate(model(), plan(R"({"pp": 2, "global_batch": 8, "microbatch_group": 2})")); }, "p.json",
                 "plan.microbatch_group", "= 2 needs plan.schedule = interleaved-1f1b (got 1f1b)");
    CHECK_THROWS_WITH(plan(R"({"global_batch": 8, "microbatch_group": 0})"), Catch::Contains("plan.microbatch_group"));
    CHECK_THROWS_WITH(plan(R"({"global_batch": 8, "microbatch_group": "4"})"), Catch::Contains("plan.microbatch_group"));
}

TEST_CASE("validate_plan: context and sequence parallelism", "[spec][errors]") {
    // seq 256 is not a multiple of 2 x 3 = 6 (load-balanced causal CP cuts 2*cp chunks).
    expect_error([] { validate(model(), plan(R"({"cp": 3, "global_batch": 8})")); }, "p.json", "plan.cp",
                 "= 3: model.seq_len = 256 is not divisible by 2 x plan.cp = 6");
    ModelSpec m = model();
    m.seq_len = 100;
    expect_error([&] { validate(m, plan(R"({"tp": 8, "global_batch": 8, "sequence_parallel": true})")); }, "p.json",
                 "plan.sequence_parallel", "needs model.seq_len / plan.cp = 100 divisible by plan.tp = 8");
    // CP splits a fused kernel's softmax: no unfused attention under it.
    expect_error([] { validate(model(), plan(R"({"cp": 2, "global_batch": 8, "flash_attention": false})")); }, "p.json",
                 "plan.flash_attention", "= false with plan.cp = 2: context parallelism runs fused attention kernels");
    // Sequence parallelism with tp = 1 is allowed and has no effect (Megatron silently disables it).
    CHECK_NOTHROW(validate(m, plan(R"({"global_batch": 8, "sequence_parallel": true})")));
    // TP communication overlap needs TP and sequence parallelism.
    expect_error([] { validate(model(), plan(R"({"tp": 2, "global_batch": 8, "tp_comm_overlap": true})")); }, "p.json",
                 "plan.tp_comm_overlap", "needs plan.tp >= 2 and plan.sequence_parallel = true (got tp 2, no sequence parallelism)");
    expect_error([] { validate(model(), plan(R"({"global_batch": 8, "sequence_parallel": true, "tp_comm_overlap": true})")); },
                 "p.json", "plan.tp_comm_overlap", "(got tp 1, sequence parallel)");
    CHECK_NOTHROW(validate(model(), plan(R"({"tp": 2, "global_batch": 8, "sequence_parallel": true, "tp_comm_overlap": true})")));
    // MoE parallel folding: etp x ep tiles tp x cp x dp.
    const ModelSpec mm = [] {
        ModelSpec x = model();
        x.moe = strata::test::moe_spec(8, 2, x.ffn_hidden);
        return x;
    }();
    expect_error([&] { validate(mm, plan(R"({"tp": 2, "dp": 4, "ep": 8, "global_batch": 8, "sequence_parallel": true})")); }, "p.json",
                 "plan.ep", "(or set plan.expert_tp to fold experts over tp x cp x dp)");
    CHECK_NOTHROW(validate(mm, plan(R"({"tp": 2, "dp": 4, "ep": 8, "expert_tp": 1, "global_batch": 8, "sequence_parallel": true})")));
    expect_error([&] { validate(mm, plan(R"({"tp": 2, "dp": 4, "ep": 8, "expert_tp": 2, "global_batch": 8, "sequence_parallel": true})")); },
                 "p.json", "plan.expert_tp", "x plan.ep = 2*8 = 16 does not divide plan.tp x plan.cp x plan.dp = 8");
    expect_error([&] { validate(mm, plan(R"({"tp": 2, "dp": 4, "ep": 4, "expert_tp": 1, "global_batch": 8})")); }, "p.json",
                 "plan.expert_tp", "needs plan.sequence_parallel = true");
    expect_error([] { validate(model(), plan(R"({"tp": 2, "dp": 4, "expert_tp": 1, "global_batch": 8})")); }, "p.json",
                 "plan.expert_tp", "needs a MoE model");
    // Blocking pipeline p2p describes a pipeline.
    expect_error([] { validate(model(), plan(R"({"global_batch": 8, "p2p_blocking": true})")); }, "p.json", "plan.p2p_blocking",
                 "needs plan.pp >= 2 (got pp 1)");
    expect_error([] {
        validate(model(), plan(R"({"pp": 2, "vpp": 2, "schedule": "interleaved-1f1b", "global_batch": 8, "p2p_blocking": true})"));
    }, "p.json", "plan.p2p_blocking", "needs plan.schedule gpipe or 1f1b");
    // Pipeline scatter/gather splits a boundary tensor over TP: it needs both, and SP already splits it.
    const std::string cache = R"("global_batch": 8, "precision": "fp8", "recompute": "selective", "recompute_modules": ["moe_act"], "moe_act_fp8_cache": true)";
    ModelSpec swiglu_moe = model(kMoeModel);
    swiglu_moe.ffn = FfnKind::swiglu;
    CHECK_NOTHROW(validate(swiglu_moe, plan("{" + cache + "}")));
    expect_error([&] { validate(model(kMoeModel), plan("{" + cache + "}")); }, "p.json", "plan.moe_act_fp8_cache",
                 "needs a MoE model with SwiGLU experts");
    expect_error([&] { validate(swiglu_moe, plan(R"({"global_batch": 8, "recompute": "selective", "recompute_modules": ["moe_act"], "moe_act_fp8_cache": true})")); },
                 "p.json", "plan.moe_act_fp8_cache", "needs plan.precision = \"fp8\" (got \"bf16\")");
    expect_error([&] { validate(swiglu_moe, plan(R"({"global_batch": 8, "precision": "fp8", "moe_act_fp8_cache": true})")); },
                 "p.json", "plan.moe_act_fp8_cache", "needs moe_act in plan.recompute_modules");
    expect_error([] { validate(model(), plan(R"({"tp": 2, "global_batch": 8, "p2p_scatter_gather": true})")); },
                 "p.json", "plan.p2p_scatter_gather", "needs plan.pp >= 2 and plan.tp >= 2 (got pp 1, tp 2)");
    expect_error([] { validate(model(), plan(R"({"pp": 2, "global_batch": 8, "p2p_scatter_gather": true})")); },
                 "p.json", "plan.p2p_scatter_gather", "needs plan.pp >= 2 and plan.tp >= 2 (got pp 2, tp 1)");
    expect_error([] {
        validate(model(), plan(R"({"tp": 2, "pp": 2, "sequence_parallel": true, "global_batch": 8, "p2p_scatter_gather": true})"));
    }, "p.json", "plan.p2p_scatter_gather", "cannot be combined with plan.sequence_parallel");
    // FA2 names a fused kernel.
    expect_error([] { validate(model(), plan(R"({"global_batch": 8, "flash_attention": false, "attention_kernel": "fa2"})")); },
                 "p.json", "plan.attention_kernel", "needs plan.flash_attention = true");
    expect_error([] { validate(model(), plan(R"({"global_batch": 8, "flash_attention": false, "attention_kernel": "fa1"})")); },
                 "p.json", "plan.attention_kernel", "\"fa1\" needs plan.flash_attention = true");
}

TEST_CASE("validate_plan: expert parallelism", "[spec][errors]") {
    expect_error([] { validate(model(), plan(R"({"dp": 2, "ep": 2, "global_batch": 8})")); }, "p.json", "plan.ep",
                 "= 2 needs a MoE model");
    ModelSpec moe = model(kMoeModel);
    moe.moe->expert_ffn_hidden = 1536;
    expect_error([&] { validate(moe, plan(R"({"dp": 3, "ep": 3, "global_batch": 9})")); }, "p.json", "plan.ep",
                 "= 3 does not divide model.moe.experts = 8");
    expect_error([&] { validate(moe, plan(R"({"dp": 2, "ep": 4, "global_batch": 8})")); }, "p.json", "plan.ep",
                 "= 4 does not divide plan.dp x plan.cp = 2");
    // DeepEP dispatches between the GPUs of an EP group: it needs one of at least two ranks.
    CHECK_NOTHROW(validate(moe, plan(R"({"dp": 2, "ep": 2, "global_batch": 8, "moe_dispatcher": "deepep"})")));
    expect_error([&] { validate(moe, plan(R"({"dp": 2, "global_batch": 8, "moe_dispatcher": "deepep"})")); }, "p.json",
                 "plan.moe_dispatcher", "= \"deepep\" needs a MoE model with plan.ep >= 2 (got ep 1)");
    expect_error([] { validate(model(), plan(R"({"dp": 2, "global_batch": 8, "moe_dispatcher": "deepep"})")); }, "p.json",
                 "plan.moe_dispatcher", "needs a MoE model with plan.ep >= 2 (got ep 1, no model.moe)");
    expect_error([] { plan(R"({"global_batch": 8, "moe_dispatcher": "deep-ep"})"); }, "p.json", "plan.moe_dispatcher",
                 "(did you mean \"deepep\"?)");
    // Where the router's weights apply is a property of MoE layers only.
    CHECK_NOTHROW(validate(moe, plan(R"({"dp": 2, "global_batch": 8, "moe_probs_at": "fc2_output"})")));
    expect_error([] { validate(model(), plan(R"({"dp": 2, "global_batch": 8, "moe_probs_at": "fc2_output"})")); }, "p.json",
                 "plan.moe_probs_at", "needs a MoE model (model.moe)");
    expect_error([] { plan(R"({"global_batch": 8, "moe_probs_at": "fc2_out"})"); }, "p.json", "plan.moe_probs_at",
                 "is not one of: fc2_input, fc2_output");
    // Megatron-Core's combined 1F1B (overlap_moe_expert_parallel_comm): its own checks.
    CHECK_NOTHROW(validate(moe, plan(R"({"dp": 2, "ep": 2, "global_batch": 8, "moe_a2a_overlap": true})")));
    expect_error([&] { validate(moe, plan(R"({"pp": 2, "dp": 2, "ep": 2, "global_batch": 8, "moe_a2a_overlap": true})")); },
                 "p.json", "plan.moe_a2a_overlap", "with plan.pp = 2 needs virtual pipeline stages");
    expect_error([&] { validate(moe, plan(R"({"dp": 2, "ep": 2, "global_batch": 8, "recompute": "full", "moe_a2a_overlap": true})")); },
                 "p.json", "plan.moe_a2a_overlap", "disable full recomputation");
    expect_error([&] {
        validate(moe, plan(R"({"dp": 2, "ep": 2, "global_batch": 8, "recompute": "selective", "recompute_modules": ["moe"], "moe_a2a_overlap": true})"));
    }, "p.json", "plan.recompute_modules", "disable moe in recompute_modules");
    expect_error([&] { validate(moe, plan(R"({"dp": 2, "ep": 2, "global_batch": 8, "zero_stage": 2, "framework": "torchtitan", "moe_a2a_overlap": true})")); },
                 "p.json", "plan.moe_a2a_overlap", "must be false: the EP all-to-all overlap is Megatron-Core's combined 1F1B");
    CHECK_NOTHROW(validate(moe, plan(R"({"dp": 2, "ep": 2, "global_batch": 8, "framework": "megatron-bridge", "moe_a2a_overlap": true})")));
}

TEST_CASE("validate_plan: ZeRO and offload", "[spec][errors]") {
    // ZeRO-3 with a pipeline: FSDP runs it (torchtitan); DeepSpeed's PipelineEngine does not.
    CHECK_NOTHROW(validate(model(), plan(R"({"pp": 2, "dp": 2, "global_batch": 8, "zero_stage": 3})")));
    expect_error([] { validate(model(), plan(R"({"pp": 2, "global_batch": 8, "zero_stage": 3, "p2p_blocking": true})")); }, "p.json",
                 "plan.zero_stage", "= 3 cannot be combined with plan.pp = 2 > 1 under DeepSpeed's pipeline engine");
    expect_error([] { validate(model(), plan(R"({"pp": 2, "dp": 2, "global_batch": 8, "zero_stage": 2, "p2p_blocking": true})")); },
                 "p.json", "plan.zero_stage", "= 2 cannot be combined with plan.pp = 2 > 1 under DeepSpeed's pipeline engine");
    CHECK_NOTHROW(validate(model(), plan(R"({"pp": 2, "dp": 2, "global_batch": 8, "zero_stage": 1, "p2p_blocking": true})")));
    expect_error([] { validate(model(), plan(R"({"global_batch": 8, "offload": {"params": "cpu"}})")); }, "p.json",
                 "plan.offload.params", "needs plan.zero_stage >= 1");
    expect_error([] { validate(model(), plan(R"({"global_batch": 8, "offload": {"grads": {"gpu": 0.5, "ssd": 0.5}}})")); },
                 "p.json", "plan.offload.grads", "needs plan.zero_stage >= 1");
    // Optimizer offload needs no ZeRO (ZeRO-Offload keeps it on the host either way).
    CHECK_NOTHROW(validate(model(), plan(R"({"global_batch": 8, "offload": {"optimizer": "cpu"}})")));
}

TEST_CASE("validate_plan: recompute layers and programmatic plans", "[spec][errors]") {
    expect_error([] { validate(model(), plan(R"({"pp": 2, "global_batch": 8, "recompute": "full", "recompute_layers": 5})")); },
                 "p.json", "plan.recompute_layers", "= 5 exceeds the 4 layers of the largest pipeline stage");
    PlanSpec p = plan(R"({"global_batch": 8})");
    p.tp = 0;
    expect_error([&] { validate_plan(model(), cluster_for(plan(R"({"global_batch": 8})")), p, "p.json"); }, "p.json",
                 "plan.tp", "must be a positive integer (got 0)");
}

TEST_CASE("model reader rules", "[spec][errors]") {
    auto m = [](const std::string& extra) {
        return model_from_json_text(merged(R"({"name": "m", "layers": 8, "hidden": 512, "heads": 8, "vocab": 100, "seq_len": 64})", extra), "m.json");
    };
    CHECK_NOTHROW(m(""));
    expect_error([&] { m(R"(, "kv_heads": 3)"); }, "m.json", "model.kv_heads", "= 3 does not divide model.heads = 8");
    expect_error([&] { model_from_json_text(R"({"name": "m", "layers": 8, "hidden": 500, "heads": 8, "vocab": 100, "seq_len": 64})", "m.json"); },
                 "m.json", "model.heads", "= 8 does not divide model.hidden = 500");
    CHECK_NOTHROW(model_from_json_text(R"({"name": "m", "layers": 8, "hidden": 500, "heads": 8, "head_dim": 64, "vocab": 100, "seq_len": 64})", "m.json"));
    expect_error([&] { m(R"(, "layers": 0)"); }, "m.json", "model.layers", "must be a positive integer (got 0)");
    expect_error([&] { m(R"(, "hidden": 4294967296)"); }, "m.json", "model.hidden", "= 4294967296 exceeds the limit of 1048576");
    expect_error([&] { m(R"(, "seq_len": 1e9)"); }, "m.json", "model.seq_len", "= 1000000000 exceeds the limit of 16777216");
    expect_error([&] { m(R"(, "max_position": 32)"); }, "m.json", "model.max_position", "is shorter than model.seq_len = 64");
    CHECK_NOTHROW(m(R"(, "max_position": 32, "position": "rope")"));
    expect_error([&] { m(R"(, "dropout": 1.0)"); }, "m.json", "model.dropout", "must be in [0, 1)");
    expect_error([&] { m(R"(, "ffn": "swiglo")"); }, "m.json", "model.ffn", "is not one of: gelu, swiglu, relu2, relu, geglu (did you mean \"swiglu\"?)");
    // Names as the papers and Megatron spell them: any case; ALiBi has no position table.
    CHECK(m(R"(, "norm": "RMSNorm", "ffn": "SwiGLU", "position": "RoPE")").norm == NormKind::rmsnorm);
    CHECK(m(R"(, "ffn": "SwiGLU")").ffn == FfnKind::swiglu);
    CHECK(m(R"(, "position": "ALiBi")").position == PositionKind::none);
    expect_error([&] { m(R"(, "hiden": 4)"); }, "m.json", "model.hiden", "is not a known key (did you mean \"hidden\"?)");
    expect_error([&] { m(R"(, "tied_embeddings": 1)"); }, "m.json", "model.tied_embeddings", "must be true or false");
    expect_error([&] { m(R"(, "moe": {"experts": 4, "top_k": 5})"); }, "m.json", "model.moe.top_k", "= 5 exceeds moe.experts = 4");
    expect_error([&] { m(R"(, "moe": {"experts": 4, "moe_every": 9})"); }, "m.json", "model.moe.moe_every", "= 9 exceeds model.layers = 8");
    expect_error([&] { m(R"(, "moe": {"experts": 4, "capacity_factor": 0.5})"); }, "m.json", "model.moe.capacity_factor",
                 "must be 0 (dropless) or at least 1");
    expect_error([&] { m(R"(, "moe": {"experts": 4, "top_kk": 1})"); }, "m.json", "model.moe.top_kk", "is not a known key");
    expect_error([&] { model_from_json_text(R"({"layers": 8})", "m.json"); }, "m.json", "model.name", "is required");
    // Wrapped form {"model": {...}} reads the same; paths stay "model.*".
    expect_error([&] { model_from_json_text(R"({"model": {"name": "m", "layers": -2}})", "m.json"); }, "m.json", "model.layers",
                 "must be a positive integer (got -2)");
}

TEST_CASE("cluster reader rules", "[spec][errors]") {
    auto c = [](const std::string& extra) {
        return cluster_from_json_text(merged(R"({"name": "c", "gpu": "H100-SXM5-80GB", "nodes": 2})", extra), "c.json");
    };
    CHECK_NOTHROW(c(""));
    expect_error([&] { c(R"(, "gpu": "")"); }, "c.json", "cluster.gpu", "must name a GPU");
    expect_error([&] { c(R"(, "oversubscription": 0.5)"); }, "c.json", "cluster.oversubscription", "must be at least 1");
    expect_error([&] { c(R"(, "topology": "fat_tree")"); }, "c.json", "cluster.topology", "(did you mean \"fat-tree\"?)");
    expect_error([&] { c(R"(, "nic_gbit_per_s": -1)"); }, "c.json", "cluster.nic_gbit_per_s", "must be a non-negative number");
    expect_error([&] { c(R"(, "slow_gpus": [{"rank": 16, "factor": 2}])"); }, "c.json", "cluster.slow_gpus[0].rank",
                 "must be a GPU rank in [0, 15]");
    expect_error([&] { c(R"(, "slow_gpus": [{"rank": 1, "factor": 2}, {"rank": 1, "factor": 3}])"); }, "c.json",
                 "cluster.slow_gpus[1].rank", "= 1 is listed twice");
    expect_error([&] { c(R"(, "slow_gpus": [{"rank": 1, "factor": 0}])"); }, "c.json", "cluster.slow_gpus[0].factor",
                 "must be a positive slowdown factor");
    expect_error([&] { c(R"(, "slow_gpus": {"rank": 1})"); }, "c.json", "cluster.slow_gpus", "must be an array");
    expect_error([&] { c(R"(, "nic_gbps": 400)"); }, "c.json", "cluster.nic_gbps", "is not a known key");
}

TEST_CASE("plan reader rules", "[spec][errors]") {
    auto p = [](const std::string& extra) { return plan_from_json_text(merged(R"({"global_batch": 8})", extra), "p.json"); };
    CHECK_NOTHROW(p(""));
    expect_error([&] { plan_from_json_text("{}", "p.json"); }, "p.json", "plan.global_batch", "is required");
    expect_error([&] { p(R"(, "tp": -1)"); }, "p.json", "plan.tp", "must be a positive integer (got -1)");
    expect_error([&] { p(R"(, "tp": "2")"); }, "p.json", "plan.tp", "must be an integer");
    expect_error([&] { p(R"(, "zero_stage": 4)"); }, "p.json", "plan.zero_stage", "must be 0, 1, 2 or 3 (got 4)");
    expect_error([&] { p(R"(, "schedule": "1f1f")"); }, "p.json", "plan.schedule", "(did you mean \"1f1b\"?)");
    expect_error([&] { p(R"(, "recompute_layers": 2)"); }, "p.json", "plan.recompute_layers", "needs plan.recompute = \"full\"");
    expect_error([&] { p(R"(, "offload": {"optimizer": "disk"})"); }, "p.json", "plan.offload.optimizer", "is not one of: gpu, cpu, ssd");
    // DeepSpeed's device names are read as its users write them (offload_optimizer.device).
    CHECK(p(R"(, "offload": {"optimizer": "nvme"})").offload.optimizer.ssd == 1.0);
    CHECK(p(R"(, "offload": {"optimizer": "none"})").offload.optimizer.gpu == 1.0);
    // PyTorch's dtype names, any case, Megatron's "interleaved", the frameworks' own spelling.
    CHECK(p(R"(, "precision": "bfloat16")").precision == Precision::bf16);
    CHECK(p(R"(, "precision": "BF16")").precision == Precision::bf16);
    CHECK(p(R"(, "precision": "float16")").precision == Precision::fp16);
    CHECK(p(R"(, "schedule": "interleaved", "pp": 2, "vpp": 2)").schedule == Schedule::interleaved_1f1b);
    CHECK(p(R"(, "framework": "DeepSpeed")").framework == "deepspeed");
    // Megatron-Core's --cp-comm-type all_gather; the ring and Ulysses by their papers' names.
    CHECK(p(R"(, "cp_comm_type": "all_gather")").cp_comm_type == CpCommType::allgather);
    CHECK(p(R"(, "cp_comm_type": "ring")").cp_comm_type == CpCommType::p2p);
    CHECK(p(R"(, "cp_comm_type": "Ulysses")").cp_comm_type == CpCommType::a2a);
    expect_error([&] { p(R"(, "cp_comm_type": "a2a+p2p")"); }, "p.json", "plan.cp_comm_type", "is not one of: p2p, a2a, allgather");
    expect_error([&] { p(R"(, "precision": "bf17")"); }, "p.json", "plan.precision", "(did you mean \"bf16\"?)");
    expect_error([&] { p(R"(, "offload": {"optimizer": {"gpu": 0.5, "cpu": 0.4}})"); }, "p.json", "plan.offload.optimizer",
                 "must sum to 1");
    expect_error([&] { p(R"(, "offload": {"optimizer": {"cpu": 1.5}})"); }, "p.json", "plan.offload.optimizer.cpu",
                 "must be a fraction in [0, 1]");
    expect_error([&] { p(R"(, "offload": {"optimiser": "cpu"})"); }, "p.json", "plan.offload.optimiser",
                 "(did you mean \"optimizer\"?)");
    expect_error([&] { p(R"(, "layer_split": [4, 0])"); }, "p.json", "plan.layer_split[1]", "must be a positive integer");
    expect_error([&] { p(R"(, "layer_split": [4, 2.5])"); }, "p.json", "plan.layer_split[1]", "must be a positive integer");
    CHECK(p(R"(, "layer_split": [4.0, 4])").layer_split == std::vector<int>{4, 4});
    expect_error([&] { p(R"(, "layer_split": 4)"); }, "p.json", "plan.layer_split", "must be an array of layer counts");
    CHECK(p(R"(, "layer_split": [])").layer_split.empty());  // [] = even split
    expect_error([&] { p(R"(, "dp_bucket_mb": 0)"); }, "p.json", "plan.dp_bucket_mb", "must be a positive number of MB");
    CHECK(p(R"(, "vocab_divisible_by": 128)").vocab_divisible_by == 128);
    expect_error([&] { p(R"(, "vocab_divisible_by": 0)"); }, "p.json", "plan.vocab_divisible_by", "an integer from 1 to 65536");
    expect_error([&] { p(R"(, "vocab_divisible_by": 131072)"); }, "p.json", "plan.vocab_divisible_by", "an integer from 1 to 65536");
    expect_error([&] { p(R"(, "globl_batch": 8)"); }, "p.json", "plan.globl_batch", "(did you mean \"global_batch\"?)");
    // The documented bound on the batch (issue #32, defect 1): 2^20 sequences.
    CHECK(plan_from_json_text(R"({"global_batch": 1048576, "micro_batch": 1048576})", "p.json").global_batch == kMaxGlobalBatch);
    expect_error([&] { plan_from_json_text(R"({"global_batch": 1048577})", "p.json"); }, "p.json", "plan.global_batch",
                 "= 1048577 exceeds the limit of 1048576");
    expect_error([&] { plan_from_json_text(R"({"global_batch": 2147483647})", "p.json"); }, "p.json", "plan.global_batch",
                 "exceeds the limit");
    expect_error([&] { p(R"(, "micro_batch": 2097152)"); }, "p.json", "plan.micro_batch", "exceeds the limit of 1048576");
    // A key given twice: the reader does not keep the last one (defect 7).
    expect_error([&] { plan_from_json_text(R"({"tp": 2, "global_batch": 8, "tp": 8})", "p.json"); }, "p.json", "tp",
                 "is given twice, at line 1, column 2 and at line 1, column 30");
}

TEST_CASE("syntax errors and scenarios", "[spec][errors]") {
    expect_error([] { plan_from_json_text("{\n  \"tp\": 2,\n}", "p.json"); }, "p.json", "", "is not valid JSON at line 3");
    expect_error([] { plan_from_json_text("[1, 2]", "p.json"); }, "p.json", "plan", "must be a JSON object");
    // Well-formed but unrepresentable numbers (found by fuzz_plan): an InputError, not a crash.
    expect_error([] { plan_from_json_text(R"({"tp": 2e400})", "p.json"); }, "p.json", "", "is not valid JSON");
    expect_error([] { model_from_hf_config_text(R"({"hidden_size": -1e999})", "c.json"); }, "c.json", "", "is not valid JSON");
    expect_error([] { scenario_from_json_text(R"({"cluster": {}})", "s.json"); }, "s.json", "model", "is required");
    expect_error([] { scenario_from_json_text(R"({"model": "no/such/model.json", "cluster": {}})", "dir/s.json"); }, "dir/s.json",
                 "model", "names no file");
    expect_error([] { scenario_from_json_text(R"({"model": 3, "cluster": {}})", "s.json"); }, "s.json", "model",
                 "must be an object or a path to a JSON file");
    // An inline plan that does not fit its inline model: validate_plan runs on load.
    const std::string s = std::string(R"({"model": )") + kModel +
                          R"(, "cluster": {"name": "c", "gpu": "H100-SXM5-80GB", "nodes": 1, "gpus_per_node": 3},
                              "plan": {"tp": 3, "global_batch": 3}})";
    expect_error([&] { scenario_from_json_text(s, "s.json"); }, "s.json", "plan.tp", "= 3 does not divide model.heads = 8");
    expect_error([] { scenario_from_json_text(R"({"model": {}, "cluster": {}, "extra": 1})", "s.json"); }, "s.json", "model.name",
                 "is required");
}

TEST_CASE("model reader: latent attention and dense-first MoE layers", "[spec][errors]") {
    const std::string base = R"({"name": "d", "layers": 4, "hidden": 512, "heads": 8, "ffn_hidden": 1536, "vocab": 1000,
                                 "seq_len": 256, "position": "rope")";
    const std::string mla = R"("mla": {"q_lora_rank": 128, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32})";
    CHECK_NOTHROW(model((base + ", " + mla + "}").c_str()));
    expect_error([&] { model((base + R"(, "kv_heads": 4, )" + mla + "}").c_str()); }, "m.json", "model.kv_heads",
                 "with model.mla: latent attention has one key and value per head (kv_heads = heads = 8)");
    expect_error([&] { model((base + R"(, "qk_norm": true, )" + mla + "}").c_str()); }, "m.json", "model.qk_norm",
                 "must be false with model.mla");
    expect_error([&] { model((base + R"(, "qk_norm": 1})").c_str()); }, "m.json", "model.qk_norm", "true or false");
    expect_error([&] { model((base + R"(, "mla": {"q_lora_rank": 128, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32}})").c_str()); },
                 "m.json", "model.mla.kv_lora_rank", "is required");
    expect_error([&] { model((base + R"(, "moe": {"experts": 8, "top_k": 2, "first_k_dense": 4}})").c_str()); }, "m.json",
                 "model.moe.first_k_dense", "= 4 leaves no MoE layer of model.layers = 4");
}

TEST_CASE("model reader: group-limited routing", "[spec][errors]") {
    auto moe = [](const std::string& extra) {
        const std::string t = R"({"name": "g", "layers": 4, "hidden": 512, "heads": 8, "ffn_hidden": 1536, "vocab": 1000,
                                  "seq_len": 256, "moe": {"experts": 16, "top_k": 4)" + extra + "}}";
        return model_from_json_text(t, "m.json");
    };
    const ModelSpec ok = moe(R"(, "router_groups": 4, "router_group_topk": 2)");
    CHECK(ok.moe->router_groups == 4);
    CHECK(ok.moe->router_group_topk == 2);
    CHECK(moe("").moe->router_groups == 0);  // default: unrestricted routing
    expect_error([&] { moe(R"(, "router_groups": 3, "router_group_topk": 1)"); }, "m.json", "model.moe.router_groups",
                 "= 3 does not divide model.moe.experts = 16");
    expect_error([&] { moe(R"(, "router_groups": 4)"); }, "m.json", "model.moe.router_group_topk",
                 "must be in [1, model.moe.router_groups = 4] with group-limited routing (got 0)");
    expect_error([&] { moe(R"(, "router_group_topk": 2)"); }, "m.json", "model.moe.router_group_topk",
                 "= 2 needs model.moe.router_groups > 0 (group-limited routing sets both)");
    expect_error([&] { moe(R"(, "router_groups": 4, "router_group_topk": 5)"); }, "m.json", "model.moe.router_group_topk",
                 "= 5 exceeds model.moe.router_groups = 4");
    expect_error([&] { moe(R"(, "router_groups": -1, "router_group_topk": 1)"); }, "m.json", "model.moe.router_groups",
                 "must be 0 (no group-limited routing) or a positive number of groups (got -1)");
    // A token's top_k must fit in its chosen groups: one of 4 groups of 4 experts holds exactly
    // top-4; one of 8 groups of 2 holds only 2.
    CHECK_NOTHROW(moe(R"(, "router_groups": 4, "router_group_topk": 1)"));
    expect_error([&] { moe(R"(, "router_groups": 8, "router_group_topk": 1)"); }, "m.json", "model.moe.top_k",
                 "= 4 exceeds the 2 experts of the model.moe.router_group_topk = 1 groups a token may pick from");
}
