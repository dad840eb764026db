// DeepSpeed export and import: the config holds only keys DeepSpeed reads, with their types, and
// passes DeepSpeed's own checks (tests/planner/data/deepspeed_config.json, written from DeepSpeed's
// sources at the commit it names); what DeepSpeed takes from the model code is listed apart; a
// config imports back into the plan it came from.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "strata/common/error.hpp"
#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/planner/export.hpp"
#include "support/rule_expr.hpp"

using namespace strata;
using strata::test::RuleExpr;
using strata::test::RuleValue;

namespace {

nlohmann::json load_data() {
    std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/tests/planner/data/deepspeed_config.json");
    REQUIRE(in.good());
    return nlohmann::json::parse(in);
}

/// Keys and types against the schema; `path` is the dotted key path so far.
void check_schema(const nlohmann::json& v, const nlohmann::json& schema, const std::string& path, std::vector<std::string>& problems) {
    const std::string type = schema.at("type");
    const std::string where = path.empty() ? "the config" : path;
    if (type == "object") {
        if (!v.is_object()) return problems.push_back(where + " is not an object");
        for (const auto& [key, value] : v.items()) {
            const std::string sub = path.empty() ? key : path + "." + key;
            if (!schema.at("keys").contains(key)) problems.push_back("unknown key " + sub);
            else check_schema(value, schema.at("keys").at(key), sub, problems);
        }
        return;
    }
    if (type == "bool" && !v.is_boolean()) problems.push_back(where + " is not a bool");
    if (type == "int" && !v.is_number_integer()) problems.push_back(where + " is not an integer");
    if (type == "number" && !v.is_number()) problems.push_back(where + " is not a number");
    if (type == "string") {
        if (!v.is_string()) problems.push_back(where + " is not a string");
        else if (schema.contains("choices") && std::find(schema.at("choices").begin(), schema.at("choices").end(), v) == schema.at("choices").end())
            problems.push_back(where + " = " + v.dump() + " is not a choice");
    }
    if (v.is_number() && schema.contains("min") && v.get<double>() < schema.at("min").get<double>()) problems.push_back(where + " is below its minimum");
    if (v.is_number() && schema.contains("max") && v.get<double>() > schema.at("max").get<double>()) problems.push_back(where + " is above its maximum");
}

std::vector<std::string> deepspeed_problems(const std::string& text, int data_parallel_size, const nlohmann::json& data, int pipeline_stages = 1) {
    std::vector<std::string> problems;
    const nlohmann::json config = nlohmann::json::parse(text);
    check_schema(config, data.at("schema"), "", problems);
    auto lookup = [&](const std::string& name) -> RuleValue {
        if (name == "data_parallel_size") return RuleValue::of(static_cast<double>(data_parallel_size));
        if (name == "pipeline_stages") return RuleValue::of(static_cast<double>(pipeline_stages));
        const nlohmann::json* at = &config;
        for (std::size_t start = 0; start <= name.size();) {
            const std::size_t dot = std::min(name.find('.', start), name.size());
            const std::string key = name.substr(start, dot - start);
            if (!at->is_object() || !at->contains(key)) return {};
            at = &at->at(key);
            start = dot + 1;
        }
        if (at->is_boolean()) return RuleValue::of(at->get<bool>());
        if (at->is_number()) return RuleValue::of(at->get<double>());
        if (at->is_string()) return RuleValue::of(at->get<std::string>());
        return {};
    };
    for (const auto& rule : data.at("rules")) {
        const std::string id = rule.at("id");
        try {
            if (rule.contains("when") && !RuleExpr(rule.at("when"), lookup).eval().truthy()) continue;
            if (!RuleExpr(rule.at("require"), lookup).eval().truthy()) problems.push_back("rule " + id + ": " + rule.at("require").get<std::string>());
        } catch (const std::exception& e) {
            problems.push_back("rule " + id + " could not be evaluated: " + e.what());
        }
    }
    return problems;
}

bool has_problem(const std::vector<std::string>& problems, const std::string& what) {
    return std::any_of(problems.begin(), problems.end(), [&](const std::string& p) { return p.find(what) != std::string::npos; });
}

}  // namespace

TEST_CASE("the DeepSpeed conformance checker rejects what DeepSpeed rejects or ignores", "[planner][export][conformance]") {
    const auto data = load_data();
    const std::string ok = R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
                               "zero_optimization": {"stage": 1}, "bf16": {"enabled": true}})";
    REQUIRE(deepspeed_problems(ok, 8, data).empty());
    CHECK(has_problem(deepspeed_problems(ok, 4, data), "rule batch"));
    // the keys of issue #33: never read by DeepSpeed
    CHECK(has_problem(deepspeed_problems(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                                            "pipeline": {"stages": 4, "partition": "parameters"}})", 8, data),
                      "unknown key pipeline.stages"));
    CHECK(has_problem(deepspeed_problems(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                                            "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})", 8, data),
                      "rule partial-offload"));
    CHECK(has_problem(deepspeed_problems(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                                            "zero_optimization": {"stage": "3"}})", 8, data),
                      "zero_optimization.stage is not an integer"));
    CHECK(has_problem(deepspeed_problems(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                                            "bf16": {"enabled": true}, "fp16": {"enabled": true}})", 8, data),
                      "rule precision"));
    CHECK(has_problem(deepspeed_problems(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                                            "zero_optimization": {"stage": 2}})", 8, data, 4),
                      "rule pipeline-zero"));
}

TEST_CASE("a pipelined ZeRO-2/3 plan exports as stage 1, with a note", "[planner][export]") {
    const sim::Scenario s = sim::load_scenario(std::string(STRATA_SOURCE_DIR) + "/scenarios/llama-2-70b-512xa100.json");
    sim::PlanSpec p = *s.plan;
    REQUIRE(p.pp > 1);
    p.zero_stage = 2;
    const auto r = planner::export_deepspeed(s.model, p);
    CHECK(nlohmann::json::parse(r.text).at("zero_optimization").at("stage") == 1);
    CHECK(std::any_of(r.unsupported.begin(), r.unsupported.end(), [](const std::string& u) { return u.find("ZeRO stage 2") != std::string::npos; }));
    planner::DeepSpeedModelCode code;
    code.tp = p.tp;
    code.pp = p.pp;
    const std::string bad = "{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": 2}}";
    CHECK_THROWS_AS(planner::plan_from_deepspeed_config(bad, s.cluster.gpu_count(), code, "ds.json"), InputError);
}

TEST_CASE("the missing bucket barrier is named only where DeepSpeed would wait: ZeRO-2 under overlap_comm", "[planner][export]") {
    // DeepSpeed's average_tensor waits for the earlier buckets' reductions (ZeRO-2, overlap_comm);
    // a plan without plan.bucket_reduce_barrier leaves that out there, and nowhere else.
    const sim::Scenario s = sim::load_scenario(std::string(STRATA_SOURCE_DIR) + "/scenarios/llama-2-13b-angel-ptm.json");
    auto named = [&](int zero, bool overlap) {
        sim::PlanSpec p = *s.plan;
        p.zero_stage = zero;
        p.overlap_grad_reduce = overlap;
        p.bucket_reduce_barrier = false;
        const auto r = planner::export_deepspeed(s.model, p);
        return std::any_of(r.unsupported.begin(), r.unsupported.end(), [](const std::string& u) { return u.find("without a wait") != std::string::npos; });
    };
    CHECK(named(2, true));
    CHECK_FALSE(named(2, false));
    CHECK_FALSE(named(3, true));  // the bundled Angel-PTM plan: noted before stop 67
    CHECK_FALSE(named(1, true));
}

TEST_CASE("every bundled scenario's DeepSpeed export holds only what DeepSpeed reads and passes its checks", "[planner][export][conformance]") {
    const auto data = load_data();
    int checked = 0;
    for (const auto& e : std::filesystem::directory_iterator(std::string(STRATA_SOURCE_DIR) + "/scenarios")) {
        if (e.path().extension() != ".json") continue;
        const sim::Scenario s = sim::load_scenario(e.path().string());
        if (!s.plan) continue;
        INFO(e.path().stem().string());
        const planner::ExportResult r = planner::export_deepspeed(s.model, *s.plan);
        // DeepSpeed's data-parallel world: the GPUs over the model code's tp x pp x cp groups.
        const int dp = s.cluster.gpu_count() / (s.plan->tp * s.plan->pp * s.plan->cp);
        std::string all;
        for (const auto& p : deepspeed_problems(r.text, dp, data, s.plan->pp)) all += p + "\n";
        INFO(all);
        CHECK(all.empty());
        // A pipelined plan names its stage count where DeepSpeed takes it from: the model code.
        if (s.plan->pp > 1) {
            const bool named = std::any_of(r.model_code.begin(), r.model_code.end(), [&](const std::string& c) {
                return c.find("PipelineModule(num_stages=" + std::to_string(s.plan->pp)) != std::string::npos;
            });
            CHECK(named);
        }
        ++checked;
    }
    CHECK(checked >= 12);
}

TEST_CASE("a DeepSpeed config imports back into the plan it was exported from", "[planner][export][import]") {
    const sim::Scenario s = sim::load_scenario(std::string(STRATA_SOURCE_DIR) + "/scenarios/llama-2-13b-angel-ptm.json");
    const planner::ExportResult r = planner::export_deepspeed(s.model, *s.plan);
    planner::DeepSpeedModelCode code;
    code.tp = s.plan->tp;
    code.pp = s.plan->pp;
    const sim::PlanSpec q = planner::plan_from_deepspeed_config(r.text, s.cluster.gpu_count(), code, "ds.json");
    CHECK(q.dp == s.plan->dp);
    CHECK(q.micro_batch == s.plan->micro_batch);
    CHECK(q.global_batch == s.plan->global_batch);
    CHECK(q.zero_stage == s.plan->zero_stage);
    CHECK(q.precision == s.plan->precision);
    CHECK(q.offload.optimizer.cpu == Approx(s.plan->offload.optimizer.cpu));
    // the imported plan is a valid plan for the same model and cluster
    CHECK_NOTHROW(sim::validate_plan(s.model, s.cluster, q, "ds.json"));

    // A pipelined, recomputing plan: the PipelineEngine's checkpoint interval brings recompute back.
    const sim::Scenario h = sim::load_scenario(std::string(STRATA_SOURCE_DIR) + "/scenarios/hunyuan-1t-moe-512xh100.json");
    const auto rh = planner::export_deepspeed(h.model, *h.plan);
    code.tp = h.plan->tp;
    code.pp = h.plan->pp;
    code.ep = h.plan->ep;
    const sim::PlanSpec qh = planner::plan_from_deepspeed_config(rh.text, h.cluster.gpu_count(), code, "ds.json");
    CHECK(qh.recompute == sim::Recompute::full);
    CHECK(qh.dp == h.plan->dp);
    CHECK(qh.global_batch == h.plan->global_batch);

    // Bad input names the file and the key.
    CHECK_THROWS_AS(planner::plan_from_deepspeed_config("{\"train_micro_batch_size_per_gpu\": 0}", 8, {}, "ds.json"), InputError);
    CHECK_THROWS_AS(planner::plan_from_deepspeed_config("{\"train_batch_size\": 10, \"train_micro_batch_size_per_gpu\": 1, "
                                                        "\"gradient_accumulation_steps\": 1}", 8, {}, "ds.json"),
                    InputError);
    CHECK_THROWS_AS(planner::plan_from_deepspeed_config("{\"train_micro_batch_size_per_gpu\": 1, \"zero_optimization\": {\"stage\": \"3\"}}", 8, {},
                                                        "ds.json"),
                    InputError);
    try {
        planner::plan_from_deepspeed_config("{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true}, \"fp16\": {\"enabled\": true}}", 8,
                                            {}, "ds.json");
        FAIL("both precisions accepted");
    } catch (const InputError& e) {
        CHECK(std::string(e.what()).find("ds.json") != std::string::npos);
        CHECK(std::string(e.what()).find("bf16.enabled") != std::string::npos);
    }
}

TEST_CASE("Megatron arguments of a user's launch line import into a plan", "[planner][export][import]") {
    // Megatron's uneven split by first and last stage, a launch script's line continuations and --k=v
    const std::string args = "torchrun --nproc-per-node 8 pretrain_gpt.py \\\n --num-layers 30 --tensor-model-parallel-size=2 \\\n"
                             " --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 6 --decoder-last-pipeline-num-layers 6 \\\n"
                             " --micro-batch-size 1 --global-batch-size 64 --attention-backend flash --bf16\n";
    const sim::PlanSpec p = planner::plan_from_megatron_args(args, 64, "run.sh");
    CHECK(p.tp == 2);
    CHECK(p.pp == 4);
    CHECK(p.dp == 8);
    CHECK(p.layer_split == std::vector<int>{6, 9, 9, 6});
    CHECK(p.flash_attention);
    CHECK(p.attention_kernel == sim::AttentionKernel::fa2);
    CHECK_FALSE(planner::plan_from_megatron_args("--attention-backend unfused", 8, "a").flash_attention);
    CHECK_THROWS_AS(planner::plan_from_megatron_args("--num-layers 30 --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 5", 8, "a"),
                    InputError);
    // x*N in a layout, as Megatron-Core's parser unrolls it
    const sim::PlanSpec q = planner::plan_from_megatron_args("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout \"Et*3|t*2,mL\"", 8, "a");
    CHECK(q.layer_split == std::vector<int>{3, 2});
    CHECK(q.virtual_layer_split.empty());
}

TEST_CASE("below ZeRO-3 DeepSpeed runs an NVMe optimizer offload as CPU offload", "[planner][export][import][offload]") {
    // stage_1_and_2.py sets cpu_offload for any offload_optimizer device but none and takes no
    // ratio; only stage3.py swaps the optimizer to NVMe (swap_optimizer = device == nvme).
    auto import = [](int stage, const char* device, double ratio) {
        const std::string text = R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": )" +
                                 std::to_string(stage) + R"(, "offload_optimizer": {"device": ")" + device + R"(", "ratio": )" +
                                 std::to_string(ratio) + "}}}";
        return planner::plan_from_deepspeed_config(text, 8, {}, "ds.json").offload.optimizer;
    };
    for (int stage : {1, 2}) {
        const sim::TierSplit nvme = import(stage, "nvme", 1.0), part = import(stage, "cpu", 0.5);
        INFO("stage " << stage);
        CHECK(nvme.cpu == 1.0);
        CHECK(nvme.ssd == 0.0);
        CHECK(part.cpu == 1.0);
        CHECK(part.gpu == 0.0);
    }
    CHECK(import(3, "nvme", 1.0).ssd == 1.0);
    CHECK(import(3, "cpu", 0.5).cpu == Approx(0.5));
    // A plan that says SSD below ZeRO-3 is refused under DeepSpeed (naming what runs instead), and
    // a DeepSpeed export of one (no framework named) says what DeepSpeed will do with it.
    sim::PlanSpec p;
    p.dp = 8;
    p.global_batch = 64;
    p.precision = sim::Precision::bf16;
    p.zero_stage = 2;
    p.offload.optimizer = sim::TierSplit{0, 0, 1};
    p.framework = "deepspeed";
    const auto why = sim::framework_refusal(p);
    REQUIRE(why.has_value());
    CHECK(why->field == "plan.offload.optimizer");
    CHECK_THAT(why->rule, Catch::Matchers::Contains("stage_1_and_2") && Catch::Matchers::Contains("\"cpu\""));
    p.zero_stage = 3;
    CHECK_FALSE(sim::framework_refusal(p).has_value());
    p.zero_stage = 2;
    p.framework.clear();
    const sim::ModelSpec m = sim::load_scenario(std::string(STRATA_SOURCE_DIR) + "/scenarios/llama-2-13b-angel-ptm.json").model;
    const planner::ExportResult r = planner::export_deepspeed(m, p);
    bool named = false;
    for (const std::string& u : r.unsupported) named = named || u.find("below ZeRO-3") != std::string::npos;
    CHECK(named);
}

TEST_CASE("DeepSpeed's optimizer offload takes the gradient partition to the host under ZeRO-2 and 3", "[planner][export][import][offload]") {
    // ZeRO-Offload (Ren et al., USENIX ATC'21) trains 13B parameters on one 32 GB V100: fp16
    // weights (26 GB) stay on the GPU, the gradients go to the CPU as they are reduced, the fp32
    // master and Adam's moments live there. A GPT of 13B (40 layers of 5120) as that config runs it.
    const std::string text = R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "fp16": {"enabled": true},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})";
    planner::DeepSpeedModelCode code;
    code.checkpoint_layers = true;
    const sim::PlanSpec p = planner::plan_from_deepspeed_config(text, 1, code, "zo.json");
    CHECK(p.offload.optimizer.cpu == 1.0);
    CHECK(p.offload.grads.cpu == 1.0);
    sim::ModelSpec m = sim::model_from_json_text(R"({"name": "gpt-13b", "layers": 40, "hidden": 5120, "heads": 40, "ffn_hidden": 20480,
        "vocab": 50257, "seq_len": 1024, "tied_embeddings": true, "linear_bias": true})", "m.json");
    const double params = static_cast<double>(sim::param_counts(m).total);
    sim::Capacities v100;
    v100.hbm_bytes = 34.09e9;
    v100.gpus_per_node = 1;
    v100.cpu_bytes_per_node = 1.5e12;
    const sim::MemoryReport r = sim::memory_estimate(m, p, v100);
    const double gpu = r.stages[0].tier_bytes[0], host = r.stages[0].tier_bytes[1];
    INFO(gpu << " B on the GPU, " << host << " B on the host");
    // On the GPU: the fp16 weights (2 B a parameter) and the activations, no gradient buffer (26 GB
    // more, which did not fit); on the host: the fp32 gradient partition (stage_1_and_2.py pins an
    // fp32 .grad beside each fp32 partition) and the optimizer's 12 B.
    CHECK(r.fits_hbm);
    CHECK(gpu < 2 * params + 6e9);
    CHECK(host >= 16 * params);
    // ZeRO-1 accumulates whole gradients on the GPU: they stay there.
    const sim::PlanSpec z1 = planner::plan_from_deepspeed_config(
        R"({"train_micro_batch_size_per_gpu": 4, "fp16": {"enabled": true}, "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}})",
        1, code, "zo1.json");
    CHECK(z1.offload.grads.all_gpu());
    // ZeRO-3's partial offload (ratio): the offloaded sub-groups' gradients, the same share.
    const sim::PlanSpec z3 = planner::plan_from_deepspeed_config(
        R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true}, "zero_optimization": {"stage": 3,
            "offload_optimizer": {"device": "nvme", "ratio": 0.25}}})", 8, code, "zo3.json");
    CHECK(z3.offload.grads.cpu == Approx(0.25));
    CHECK(z3.offload.grads.gpu == Approx(0.75));
}
