// Exports parse back: Megatron arguments round-trip into the same parallel plan; the DeepSpeed
// config is valid JSON with the keys DeepSpeed reads; what a format cannot express is reported.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "strata/common/error.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/planner/export.hpp"
#include "support/gpt.hpp"

using namespace strata;
using namespace strata::sim;

namespace {
// Does the export list `what` among the things the target framework does not do?
bool noted(const planner::ExportResult& r, const std::string& what) {
    for (const auto& u : r.unsupported)
        if (u.find(what) != std::string::npos) return true;
    return false;
}
}  // namespace

static ModelSpec gpt3() {
    ModelSpec m = test::gpt_shape("gpt3-175b", 96, 12288, 96, 51200, 2048);
    m.linear_bias = true;
    return m;
}

// GPT-3's 1536-sequence batch on 1024 GPUs (TP 8, PP 16, DP 8) with selective recomputation.
static PlanSpec gpt3_plan() {
    PlanSpec p;
    p.tp = 8;
    p.pp = 16;
    p.dp = 8;
    p.global_batch = 1536;
    p.recompute = Recompute::selective;
    return p;
}

TEST_CASE("Megatron arguments round-trip into the plan", "[planner][export]") {
    PlanSpec p = gpt3_plan();
    p.vpp = 3;
    p.schedule = Schedule::interleaved_1f1b;
    p.micro_batch = 1;
    p.sequence_parallel = true;
    p.zero_stage = 1;
    auto r = planner::export_megatron(gpt3(), p);
    CHECK(r.text.find("--tensor-model-parallel-size 8") != std::string::npos);
    CHECK(r.text.find("--num-layers-per-virtual-pipeline-stage 2") != std::string::npos);  // 96/16/3
    CHECK(r.unsupported.empty());
    PlanSpec q = planner::plan_from_megatron_args(r.text, 1024, "args");
    // Imported arguments name their framework, and the plan file written from them reads back whole.
    CHECK(q.framework == "megatron-core");
    CHECK(sim::to_json_text(sim::plan_from_json_text(sim::to_json_text(q), "imported.json")) == sim::to_json_text(q));
    CHECK(q.tp == 8);
    CHECK(q.pp == 16);
    CHECK(q.dp == 8);  // 1024 / (8*16)
    CHECK(q.vpp == 3);
    CHECK(q.schedule == Schedule::interleaved_1f1b);
    CHECK(q.micro_batch == 1);
    CHECK(q.global_batch == 1536);
    CHECK(q.sequence_parallel);
    CHECK(q.zero_stage == 1);
    CHECK(q.recompute == Recompute::selective);
    CHECK(q.precision == Precision::bf16);
}

TEST_CASE("Megatron export carries the precision-aware optimizer's moment types", "[planner][export]") {
    PlanSpec p = gpt3_plan();
    p.zero_stage = 1;
    p.exp_avg_dtype = Precision::bf16;
    p.exp_avg_sq_dtype = Precision::fp8;
    auto r = planner::export_megatron(gpt3(), p);
    CHECK(r.text.find("--use-precision-aware-optimizer") != std::string::npos);
    CHECK(r.text.find("--exp-avg-dtype bf16") != std::string::npos);
    CHECK(r.text.find("--exp-avg-sq-dtype fp8") != std::string::npos);
    for (const std::string& u : r.unsupported) CHECK(u.find("Adam") == std::string::npos);
    const PlanSpec q = planner::plan_from_megatron_args(r.text, 1024, "args");
    CHECK(q.exp_avg_dtype == Precision::bf16);
    CHECK(q.exp_avg_sq_dtype == Precision::fp8);
    CHECK_THROWS_AS(planner::plan_from_megatron_args("--exp-avg-dtype int4", 8, "args"), InputError);
    // DeepSpeed's config has no such switch: reported, not dropped silently.
    CHECK_FALSE(planner::export_deepspeed(gpt3(), p).unsupported.empty());
}

TEST_CASE("Megatron export carries selective recomputation by module", "[planner][export]") {
    PlanSpec p = gpt3_plan();
    p.recompute_modules = (1u << static_cast<unsigned>(RecomputeModule::core_attn)) | (1u << static_cast<unsigned>(RecomputeModule::mlp));
    auto r = planner::export_megatron(gpt3(), p);
    CHECK(r.text.find("--recompute-modules core_attn mlp\n") != std::string::npos);
    const PlanSpec q = planner::plan_from_megatron_args(r.text, 1024, "args");
    CHECK(q.recompute == Recompute::selective);
    CHECK(q.recompute_modules == p.recompute_modules);
    // Megatron's default list (core_attn alone) is not written out.
    p.recompute_modules = 1u << static_cast<unsigned>(RecomputeModule::core_attn);
    CHECK(planner::export_megatron(gpt3(), p).text.find("--recompute-modules") == std::string::npos);
    CHECK_THROWS_AS(planner::plan_from_megatron_args("--recompute-modules attn", 8, "a"), InputError);
}

TEST_CASE("Megatron export names what it cannot express", "[planner][export]") {
    PlanSpec p;
    p.dp = 8;
    p.zero_stage = 3;
    p.offload.optimizer = {0, 1, 0};
    p.lock_free_update = true;
    auto r = planner::export_megatron(gpt3(), p);
    CHECK(r.unsupported.size() >= 3);
    // Megatron-Core sends whole pipeline tensors: the 2022 scatter/gather has no flag to export.
    PlanSpec q;
    q.tp = 2;
    q.pp = 2;
    q.p2p_scatter_gather = true;
    bool noted = false;
    for (const auto& u : planner::export_megatron(gpt3(), q).unsupported) noted = noted || u.find("scatter/gather") != std::string::npos;
    CHECK(noted);
    q.p2p_scatter_gather = false;
    for (const auto& u : planner::export_megatron(gpt3(), q).unsupported) CHECK(u.find("scatter/gather") == std::string::npos);
}

TEST_CASE("Megatron export names the MoE SwiGLU FP8 cache as unsupported", "[planner][export]") {
    PlanSpec q = planner::plan_from_megatron_args("--tensor-model-parallel-size 8", 64, "args");
    q.precision = Precision::fp8;
    q.moe_act_fp8_cache = true;
    bool noted = false;
    for (const auto& u : planner::export_megatron(gpt3(), q).unsupported) noted = noted || u.find("SwiGLU inputs") != std::string::npos;
    CHECK(noted);
}

TEST_CASE("Megatron export names a loss that does not upcast the logits as unsupported", "[planner][export]") {
    PlanSpec q = planner::plan_from_megatron_args("--tensor-model-parallel-size 8", 64, "args");
    for (const auto& u : planner::export_megatron(gpt3(), q).unsupported) CHECK(u.find("logits") == std::string::npos);
    q.loss_upcast = false;
    bool noted = false;
    for (const auto& u : planner::export_megatron(gpt3(), q).unsupported) noted = noted || u.find("logits in their dtype") != std::string::npos;
    CHECK(noted);
}

TEST_CASE("each export names the router-weight placement its framework does not use", "[planner][export][moe]") {
    ModelSpec m = test::gpt_shape("moe", 4, 1024, 16, 1000, 512);
    m.moe = test::moe_spec(8, 2);
    PlanSpec q;
    q.dp = 8;
    q.ep = 8;
    // Megatron-Core weights inside the expert (before fc2); DeepSpeed-MoE at its combine.
    CHECK_FALSE(noted(planner::export_megatron(m, q), "router weights"));
    CHECK(noted(planner::export_deepspeed(m, q), "router weights applied before fc2"));
    q.moe_probs_at = MoeProbsAt::fc2_output;
    CHECK(noted(planner::export_megatron(m, q), "router weights applied to the expert outputs"));
    CHECK_FALSE(noted(planner::export_deepspeed(m, q), "router weights"));
    // A dense model has no router: neither export mentions one.
    PlanSpec d;
    d.dp = 8;
    CHECK_FALSE(noted(planner::export_deepspeed(gpt3(), d), "router weights"));
}

TEST_CASE("gradient precision survives export and import with Megatron's defaults", "[planner][export]") {
    auto has = [](const std::string& text, const std::string& flag) { return text.find(flag + "\n") != std::string::npos; };
    PlanSpec q;
    q.dp = 8;
    q.precision = Precision::bf16;
    // Simulated with 2-byte gradients: Megatron must be told, or it accumulates them in fp32.
    std::string text = planner::export_megatron(gpt3(), q).text;
    CHECK(has(text, "--grad-reduce-in-bf16"));
    CHECK_FALSE(planner::plan_from_megatron_args(text, 8, "args").fp32_grads);
    q.fp32_grads = true;
    text = planner::export_megatron(gpt3(), q).text;
    CHECK_FALSE(has(text, "--grad-reduce-in-bf16"));
    CHECK(planner::plan_from_megatron_args(text, 8, "args").fp32_grads);
    // Megatron's own defaults on import: fp32 for bf16 unless --grad-reduce-in-bf16; fp16 only on request.
    CHECK(planner::plan_from_megatron_args("--bf16", 8, "args").fp32_grads);
    CHECK_FALSE(planner::plan_from_megatron_args("--bf16 --grad-reduce-in-bf16", 8, "args").fp32_grads);
    CHECK_FALSE(planner::plan_from_megatron_args("--fp16", 8, "args").fp32_grads);
    CHECK(planner::plan_from_megatron_args("--fp16 --accumulate-allreduce-grads-in-fp32", 8, "args").fp32_grads);
    q.precision = Precision::fp16;
    CHECK(has(planner::export_megatron(gpt3(), q).text, "--accumulate-allreduce-grads-in-fp32"));
    // DeepSpeed: fp32 accumulation and communication named in the config.
    const auto j = nlohmann::json::parse(planner::export_deepspeed(gpt3(), q).text);
    CHECK(j.at("data_types").at("grad_accum_dtype") == "fp32");
    CHECK(j.at("communication_data_type") == "fp32");
}

TEST_CASE("gradient accumulation fusion survives export and import", "[planner][export]") {
    auto has = [](const std::string& text, const std::string& flag) { return text.find(flag + "\n") != std::string::npos; };
    PlanSpec q;
    q.dp = 8;
    q.micro_batch = 1;
    q.global_batch = 32;  // 4 micro-batches
    std::string text = planner::export_megatron(gpt3(), q).text;
    CHECK_FALSE(has(text, "--no-gradient-accumulation-fusion"));  // Megatron's default, as simulated
    CHECK(planner::plan_from_megatron_args(text, 8, "args").grad_accum_fusion);
    // DeepSpeed's engine cannot fuse it: a fused plan exported there says so.
    CHECK(noted(planner::export_deepspeed(gpt3(), q), "fused gradient accumulation"));
    q.grad_accum_fusion = false;
    text = planner::export_megatron(gpt3(), q).text;
    CHECK(has(text, "--no-gradient-accumulation-fusion"));
    CHECK_FALSE(planner::plan_from_megatron_args(text, 8, "args").grad_accum_fusion);
    CHECK_FALSE(noted(planner::export_deepspeed(gpt3(), q), "fused gradient accumulation"));
    // ZeRO-2 adds into its shard, still a separate kernel: noted. One micro-batch of 16-bit
    // gradients sums nothing: not noted.
    q.grad_accum_fusion = true;
    q.zero_stage = 2;
    CHECK(noted(planner::export_deepspeed(gpt3(), q), "fused gradient accumulation"));
    q.global_batch = 8;
    CHECK_FALSE(noted(planner::export_deepspeed(gpt3(), q), "fused gradient accumulation"));
}

TEST_CASE("Megatron argument parsing rejects bad values", "[planner][export]") {
    CHECK_THROWS_AS(planner::plan_from_megatron_args("--tensor-model-parallel-size x", 8, "a"), InputError);
    CHECK_THROWS_AS(planner::plan_from_megatron_args("--tensor-model-parallel-size 3", 8, "a"), InputError);
    CHECK_THROWS_WITH(planner::plan_from_megatron_args("--make-vocab-size-divisible-by 100000", 8, "a"),
                      Catch::Contains("--make-vocab-size-divisible-by") && Catch::Contains("1 to 65536"));
}

TEST_CASE("DeepSpeed config is valid JSON with the right keys", "[planner][export]") {
    PlanSpec p;
    p.dp = 64;
    p.micro_batch = 2;
    p.global_batch = 1024;
    p.zero_stage = 3;
    p.offload.optimizer = {0, 0, 1};
    p.offload.params = {0, 1, 0};
    auto r = planner::export_deepspeed(gpt3(), p);
    auto j = nlohmann::json::parse(r.text);
    CHECK(j["train_batch_size"] == 1024);
    CHECK(j["train_micro_batch_size_per_gpu"] == 2);
    CHECK(j["gradient_accumulation_steps"] == 8);  // 1024 / (2 * 64)
    CHECK(j["zero_optimization"]["stage"] == 3);
    CHECK(j["zero_optimization"]["offload_optimizer"]["device"] == "nvme");
    CHECK(j["zero_optimization"]["offload_param"]["device"] == "cpu");
    CHECK(j["bf16"]["enabled"] == true);
}

TEST_CASE("Megatron export of MLA, dense-first MoE layers and expert tensor parallelism", "[planner][export]") {
    ModelSpec m = test::gpt_shape("mla-moe", 6, 1024, 16, 1000, 512);
    m.head_dim = 128;  // 16 x 128 = 2048 != hidden: needs --kv-channels
    m.mla = MlaSpec{256, 128, 64, 32, 64};
    m.moe = strata::test::moe_spec(8, 2, 512);
    m.moe->first_k_dense = 2;
    PlanSpec p;
    p.tp = 2;
    p.dp = 4;
    p.ep = 8;
    p.expert_tp = 1;
    p.sequence_parallel = true;
    p.global_batch = 8;
    const auto r = planner::export_megatron(m, p);
    CHECK(r.text.find("--kv-channels 128") != std::string::npos);
    CHECK(r.text.find("--multi-latent-attention") != std::string::npos);
    CHECK(r.text.find("--q-lora-rank 256") != std::string::npos);
    CHECK(r.text.find("--kv-lora-rank 128") != std::string::npos);
    CHECK(r.text.find("--qk-head-dim 64") != std::string::npos);
    CHECK(r.text.find("--qk-pos-emb-head-dim 32") != std::string::npos);
    CHECK(r.text.find("--v-head-dim 64") != std::string::npos);
    CHECK(r.text.find("--moe-layer-freq \"[0,0,1,1,1,1]\"") != std::string::npos);
    CHECK(r.text.find("--expert-tensor-parallel-size 1") != std::string::npos);
    const PlanSpec q = planner::plan_from_megatron_args(r.text, 8, "args");
    CHECK(q.expert_tp == 1);
    CHECK(q.ep == 8);
}

TEST_CASE("Megatron export of Qwen-style attention: QKV-only biases, QK-norm", "[planner][export]") {
    ModelSpec m = test::gpt_shape("qwen", 4, 1024, 16, 1000, 512);
    m.norm = NormKind::rmsnorm;
    PlanSpec p;
    p.dp = 1;
    p.global_batch = 1;
    const auto plain = planner::export_megatron(m, p).text;
    CHECK(plain.find("--add-qkv-bias") == std::string::npos);
    CHECK(plain.find("--qk-layernorm") == std::string::npos);
    m.qkv_bias = true;  // Qwen2
    CHECK(planner::export_megatron(m, p).text.find("--add-qkv-bias") != std::string::npos);
    m.qkv_bias = false;
    m.qk_norm = true;   // Qwen3
    const auto q3 = planner::export_megatron(m, p).text;
    CHECK(q3.find("--qk-layernorm") != std::string::npos);
    CHECK(q3.find("--normalization RMSNorm") != std::string::npos);
    CHECK(planner::plan_from_megatron_args(q3, 1, "args").global_batch == 1);  // the model flags do not disturb the plan
    m.linear_bias = true;  // every linear has a bias already: no QKV-only flag on top
    m.qkv_bias = true;
    CHECK(planner::export_megatron(m, p).text.find("--add-qkv-bias") == std::string::npos);
}

TEST_CASE("Megatron export of sliding-window attention: the keys before the query, and the full layers", "[planner][export]") {
    ModelSpec m = test::gpt_shape("oss", 4, 1024, 16, 1000, 512);
    PlanSpec p;
    p.dp = 1;
    p.global_batch = 1;
    CHECK(planner::export_megatron(m, p).text.find("--window-size") == std::string::npos);
    m.sliding_window = 128;  // gpt-oss: HF's 128 counts the query itself, Megatron's (127, 0) does not
    m.window_attn_skip_freq = 2;
    const std::string t = planner::export_megatron(m, p).text;
    CHECK(t.find("--window-size 127,0\n") != std::string::npos);
    CHECK(t.find("--window-attn-skip-freq 2\n") != std::string::npos);
    m.sliding_window = 512;  // covers the sequence: full attention, no flag
    CHECK(planner::export_megatron(m, p).text.find("--window-size") == std::string::npos);
}

TEST_CASE("Megatron export names the MTP modules; DeepSpeed reports them", "[planner][export][mtp]") {
    ModelSpec m = gpt3();
    m.mtp_depth = 1;
    PlanSpec p = gpt3_plan();
    CHECK(planner::export_megatron(m, p).text.find("--mtp-num-layers 1") != std::string::npos);
    m.mtp_depth = 0;
    CHECK(planner::export_megatron(m, p).text.find("mtp") == std::string::npos);
    m.mtp_depth = 2;
    bool named = false;
    for (const std::string& u : planner::export_deepspeed(m, p).unsupported) named = named || u.find("multi-token") != std::string::npos;
    CHECK(named);
}

TEST_CASE("Megatron pipeline layouts: a per-virtual-stage split exports and parses back", "[planner][export][pipeline]") {
    // DeepSeek-V3's H100 recipe: "Et|(tt|)*30mL" over pp 8 x vpp 4 = 32 virtual stages.
    ModelSpec m = gpt3();
    m.layers = 61;
    m.mtp_depth = 1;
    const PlanSpec q = planner::plan_from_megatron_args("--pipeline-model-parallel-size 8 --pipeline-model-parallel-layout \"Et|(tt|)*30mL\"", 1024, "args");
    REQUIRE(q.virtual_layer_split.size() == 32);
    CHECK(q.vpp == 4);
    CHECK(q.schedule == Schedule::interleaved_1f1b);
    CHECK(q.virtual_layer_split.front() == 1);
    CHECK(q.virtual_layer_split[1] == 2);
    CHECK(q.virtual_layer_split[30] == 2);
    CHECK(q.virtual_layer_split.back() == 0);
    CHECK(stage_layers(m, q) == std::vector<int>{7, 8, 8, 8, 8, 8, 8, 6});
    // Written back out stage by stage, and read again to the same split.
    PlanSpec p = gpt3_plan();
    p.tp = 2, p.pp = 8, p.dp = 64, p.vpp = 4;
    p.schedule = Schedule::interleaved_1f1b;
    p.virtual_layer_split = q.virtual_layer_split;
    const auto r = planner::export_megatron(m, p);
    CHECK(r.text.find("--pipeline-model-parallel-layout \"Et|tt|") != std::string::npos);
    CHECK(r.text.find("|tt|mL\"") != std::string::npos);
    CHECK(r.text.find("--num-layers-per-virtual-pipeline-stage") == std::string::npos);
    CHECK(planner::plan_from_megatron_args(r.text, 1024, "args").virtual_layer_split == p.virtual_layer_split);
    CHECK_THROWS_AS(planner::plan_from_megatron_args("--pipeline-model-parallel-layout Et|tx|L", 8, "args"), InputError);
    CHECK_THROWS_AS(planner::plan_from_megatron_args("--pipeline-model-parallel-layout (tt|*3", 8, "args"), InputError);
    CHECK_THROWS_AS(planner::plan_from_megatron_args("--pipeline-model-parallel-size 3 --pipeline-model-parallel-layout Et|tL", 8, "args"), InputError);
}

TEST_CASE("Megatron-Core's micro-batch groups export and parse back", "[planner][export][pipeline]") {
    // 1536 sequences on dp 8: 192 micro-batches, a multiple of pp 16, so only a group that is
    // not pp needs the flag (192 = 8 x 24).
    PlanSpec p = gpt3_plan();
    p.vpp = 3;
    p.schedule = Schedule::interleaved_1f1b;
    CHECK(planner::export_megatron(gpt3(), p).text.find("microbatch-group") == std::string::npos);
    p.microbatch_group = 24;
    const auto r = planner::export_megatron(gpt3(), p);
    CHECK(r.text.find("--microbatch-group-size-per-virtual-pipeline-stage 24") != std::string::npos);
    CHECK(r.unsupported.empty());
    const PlanSpec q = planner::plan_from_megatron_args(r.text, 1024, "args");
    CHECK(q.microbatch_group == 24);
    CHECK(q.vpp == 3);
    // Without interleaving Megatron ignores the flag, and so does the import.
    CHECK(planner::plan_from_megatron_args("--pipeline-model-parallel-size 4 --microbatch-group-size-per-virtual-pipeline-stage 8", 8, "args")
              .microbatch_group == 0);
}

TEST_CASE("a layout with an embedding-only first and a loss-only last stage parses back", "[planner][export][pipeline]") {
    // Llama 3 405B's pipeline (arXiv 2407.21783 Sec. 3.3.2): 126 layers on pp 16 x vpp 8, one layer
    // per chunk, the first chunk holding only the embedding and the last only the loss.
    ModelSpec m = gpt3();
    m.layers = 126;
    const PlanSpec q = planner::plan_from_megatron_args("--pipeline-model-parallel-size 16 --pipeline-model-parallel-layout \"E|(t|)*126L\"", 1024, "args");
    REQUIRE(q.virtual_layer_split.size() == 128);
    CHECK(q.vpp == 8);
    CHECK(q.virtual_layer_split.front() == 0);
    CHECK(q.virtual_layer_split[1] == 1);
    CHECK(q.virtual_layer_split[126] == 1);
    CHECK(q.virtual_layer_split.back() == 0);
    CHECK(stage_layers(m, q).front() == 7);   // rank 0: chunks 0 (empty), 16, 32, ... 112
    CHECK(stage_layers(m, q).back() == 7);    // rank 15: chunk 127 (empty)
    CHECK(stage_layers(m, q)[1] == 8);
    PlanSpec p = q;
    p.tp = 8;
    p.dp = 8;
    p.global_batch = 1536;
    CHECK(planner::plan_from_megatron_args(planner::export_megatron(m, p).text, 1024, "args").virtual_layer_split == q.virtual_layer_split);
}

TEST_CASE("Megatron export of node-limited routing and the DeepEP dispatcher", "[planner][export][moe]") {
    ModelSpec m = test::gpt_shape("grouped-moe", 4, 1024, 16, 1000, 512);
    m.moe = strata::test::moe_spec(16, 4, 512);
    m.moe->router_groups = 4;
    m.moe->router_group_topk = 2;
    PlanSpec p;
    p.dp = 16;
    p.ep = 16;
    p.global_batch = 16;
    p.moe_dispatcher = MoeDispatcher::deepep;
    const auto r = planner::export_megatron(m, p);
    CHECK(r.text.find("--moe-router-num-groups 4\n") != std::string::npos);
    CHECK(r.text.find("--moe-router-group-topk 2\n") != std::string::npos);
    CHECK(r.text.find("--moe-token-dispatcher-type flex\n") != std::string::npos);
    CHECK(r.text.find("--moe-flex-dispatcher-backend deepep\n") != std::string::npos);
    CHECK(planner::plan_from_megatron_args(r.text, 16, "args").moe_dispatcher == MoeDispatcher::deepep);
    CHECK(planner::plan_from_megatron_args("--moe-enable-deepep", 8, "args").moe_dispatcher == MoeDispatcher::deepep);
    // The flat all-to-all is written too: Megatron's own default is the allgather dispatcher,
    // which Strata does not simulate. Unrestricted routing writes no group flags.
    p.moe_dispatcher = MoeDispatcher::alltoall;
    m.moe->router_groups = 0;
    m.moe->router_group_topk = 0;
    const auto plain = planner::export_megatron(m, p);
    CHECK(plain.text.find("--moe-token-dispatcher-type alltoall\n") != std::string::npos);
    CHECK(plain.text.find("--moe-flex-dispatcher-backend") == std::string::npos);
    CHECK(plain.text.find("--moe-router-num-groups") == std::string::npos);
    CHECK(planner::plan_from_megatron_args(plain.text, 16, "args").moe_dispatcher == MoeDispatcher::alltoall);
    // DeepSpeed has no such dispatcher: a valid config plus a note.
    p.moe_dispatcher = MoeDispatcher::deepep;
    const auto ds = planner::export_deepspeed(m, p);
    CHECK(nlohmann::json::parse(ds.text)["train_batch_size"] == 16);
    bool noted = false;
    for (const auto& u : ds.unsupported) noted = noted || u.find("DeepEP") != std::string::npos;
    CHECK(noted);
}

TEST_CASE("Megatron's context-parallel gather is written as Transformer Engine takes it", "[planner][export]") {
    // TE's attn_forward_func_with_cp accepts p2p, all_gather, a2a, a2a+p2p; Megatron passes the
    // argument through TransformerConfig.cp_comm_type (its help text's "allgather" would fail there).
    PlanSpec p = gpt3_plan();
    p.tp = 8;
    p.pp = 4;
    p.dp = 8;
    p.cp = 4;
    p.cp_comm_type = CpCommType::allgather;
    const auto r = planner::export_megatron(gpt3(), p);
    CHECK(r.text.find("--cp-comm-type all_gather\n") != std::string::npos);
    CHECK(planner::plan_from_megatron_args(r.text, 1024, "args").cp_comm_type == CpCommType::allgather);
    // Both spellings import; the hierarchical a2a+p2p is refused by name.
    CHECK(planner::plan_from_megatron_args("--context-parallel-size 2 --cp-comm-type allgather", 8, "a").cp_comm_type == CpCommType::allgather);
    CHECK_THROWS_WITH(planner::plan_from_megatron_args("--context-parallel-size 2 --cp-comm-type a2a+p2p", 8, "a"),
                      Catch::Matchers::Contains("a2a+p2p"));
}

TEST_CASE("Megatron export writes the MLP's activation", "[planner][export]") {
    // Megatron-LM: --swiglu for a gated SiLU MLP, --squared-relu for Nemotron-4's squared ReLU,
    // nothing for its GELU default.
    ModelSpec m = gpt3();
    CHECK(planner::export_megatron(m, gpt3_plan()).text.find("--squared-relu") == std::string::npos);
    CHECK(planner::export_megatron(m, gpt3_plan()).text.find("--swiglu") == std::string::npos);
    m.ffn = FfnKind::relu2;
    CHECK(planner::export_megatron(m, gpt3_plan()).text.find("--squared-relu\n") != std::string::npos);
    m.ffn = FfnKind::swiglu;
    CHECK(planner::export_megatron(m, gpt3_plan()).text.find("--swiglu\n") != std::string::npos);
    // Plain ReLU (OPT) has no flag: the export says so rather than leave GELU's default.
    m.ffn = FfnKind::relu;
    const planner::ExportResult r = planner::export_megatron(m, gpt3_plan());
    CHECK(r.text.find("--squared-relu") == std::string::npos);
    REQUIRE_FALSE(r.unsupported.empty());
    CHECK_THAT(r.unsupported.back(), Catch::Matchers::Contains("ReLU"));
    // Nor GeGLU (Gemma): --swiglu would put SiLU where GELU gates.
    m.ffn = FfnKind::geglu;
    const planner::ExportResult g = planner::export_megatron(m, gpt3_plan());
    CHECK(g.text.find("--swiglu") == std::string::npos);
    REQUIRE_FALSE(g.unsupported.empty());
    CHECK_THAT(g.unsupported.back(), Catch::Matchers::Contains("GeGLU"));
}
