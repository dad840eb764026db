// Spec readers and the canonical writer: documented defaults, human units converted to SI once,
// wrapped files, and parse(to_json(x)) == x field by field for every bundled file. Expected values
// are the documented defaults (docs/formats.md) and unit conversions done by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include "strata/common/json_reader.hpp"
#include "strata/lowering/spec_io.hpp"

using namespace strata::sim;
namespace fs = std::filesystem;

namespace {

const fs::path kScenarios = fs::path(STRATA_SOURCE_DIR) / "scenarios";

std::vector<fs::path> json_files(const fs::path& dir) {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

void same_tier(const TierSplit& a, const TierSplit& b) {
    CHECK(a.gpu == Approx(b.gpu));
    CHECK(a.cpu == Approx(b.cpu));
    CHECK(a.ssd == Approx(b.ssd));
}

void same(const ModelSpec& a, const ModelSpec& b) {
    CHECK(a.name == b.name);
    CHECK(a.description == b.description);
    CHECK(a.layers == b.layers);
    CHECK(a.hidden == b.hidden);
    CHECK(a.heads == b.heads);
    CHECK(a.kv_heads == b.kv_heads);
    CHECK(a.head_dim == b.head_dim);
    CHECK(a.ffn_hidden == b.ffn_hidden);
    CHECK(a.ffn == b.ffn);
    CHECK(a.vocab == b.vocab);
    CHECK(a.seq_len == b.seq_len);
    CHECK(a.max_position == b.max_position);
    CHECK(a.norm == b.norm);
    CHECK(a.position == b.position);
    CHECK(a.tied_embeddings == b.tied_embeddings);
    CHECK(a.linear_bias == b.linear_bias);
    CHECK(a.qkv_bias == b.qkv_bias);
    CHECK(a.qk_norm == b.qk_norm);
    CHECK(a.dropout == Approx(b.dropout));
    REQUIRE(a.moe.has_value() == b.moe.has_value());
    if (a.moe) {
        CHECK(a.moe->experts == b.moe->experts);
        CHECK(a.moe->top_k == b.moe->top_k);
        CHECK(a.moe->expert_ffn_hidden == b.moe->expert_ffn_hidden);
        CHECK(a.moe->moe_every == b.moe->moe_every);
        CHECK(a.moe->shared_experts == b.moe->shared_experts);
        CHECK(a.moe->capacity_factor == Approx(b.moe->capacity_factor));
        CHECK(a.moe->load_skew == Approx(b.moe->load_skew));
        CHECK(a.moe->router_groups == b.moe->router_groups);
        CHECK(a.moe->router_group_topk == b.moe->router_group_topk);
    }
}

void same(const ClusterSpec& a, const ClusterSpec& b) {
    CHECK(a.name == b.name);
    CHECK(a.description == b.description);
    CHECK(a.gpu == b.gpu);
    CHECK(a.nodes == b.nodes);
    CHECK(a.gpus_per_node == b.gpus_per_node);
    CHECK(a.node == b.node);
    CHECK(a.intra_link == b.intra_link);
    CHECK(a.nic == b.nic);
    CHECK(a.nics_per_node == b.nics_per_node);
    CHECK(a.nic_Bps == Approx(b.nic_Bps));
    CHECK(a.topology == b.topology);
    CHECK(a.oversubscription == Approx(b.oversubscription));
    CHECK(a.nodes_per_leaf == b.nodes_per_leaf);
    CHECK(a.gpus_per_pcie_switch == b.gpus_per_pcie_switch);
    CHECK(a.host_dram_bytes == Approx(b.host_dram_bytes));
    CHECK(a.cpu == b.cpu);
    CHECK(a.ssd == b.ssd);
    CHECK(a.ssds_per_node == b.ssds_per_node);
    CHECK(a.price_per_gpu_hour == Approx(b.price_per_gpu_hour));
    CHECK(a.slow_gpus == b.slow_gpus);
}

void same(const PlanSpec& a, const PlanSpec& b) {
    CHECK(a.name == b.name);
    CHECK(a.description == b.description);
    CHECK(a.tp == b.tp);
    CHECK(a.pp == b.pp);
    CHECK(a.dp == b.dp);
    CHECK(a.cp == b.cp);
    CHECK(a.ep == b.ep);
    CHECK(a.vpp == b.vpp);
    CHECK(a.micro_batch == b.micro_batch);
    CHECK(a.global_batch == b.global_batch);
    CHECK(a.sequence_parallel == b.sequence_parallel);
    CHECK(a.flash_attention == b.flash_attention);
    CHECK(a.schedule == b.schedule);
    CHECK(a.zero_stage == b.zero_stage);
    CHECK(a.recompute == b.recompute);
    CHECK(a.recompute_layers == b.recompute_layers);
    CHECK(a.precision == b.precision);
    same_tier(a.offload.optimizer, b.offload.optimizer);
    same_tier(a.offload.params, b.offload.params);
    same_tier(a.offload.grads, b.offload.grads);
    same_tier(a.offload.activations, b.offload.activations);
    CHECK(a.lock_free_update == b.lock_free_update);
    CHECK(a.overlap_grad_reduce == b.overlap_grad_reduce);
    CHECK(a.overlap_param_gather == b.overlap_param_gather);
    CHECK(a.moe_a2a_overlap == b.moe_a2a_overlap);
    CHECK(a.moe_dispatcher == b.moe_dispatcher);
    CHECK(a.moe_probs_at == b.moe_probs_at);
    CHECK(a.fp32_grads == b.fp32_grads);
    CHECK(a.grad_accum_fusion == b.grad_accum_fusion);
    CHECK(a.loss_upcast == b.loss_upcast);
    CHECK(a.microbatch_group == b.microbatch_group);
    CHECK(a.tp_comm_overlap == b.tp_comm_overlap);
    CHECK(a.p2p_blocking == b.p2p_blocking);
    CHECK(a.p2p_scatter_gather == b.p2p_scatter_gather);
    CHECK(a.expandable_segments == b.expandable_segments);
    CHECK(a.moe_act_fp8_cache == b.moe_act_fp8_cache);
    CHECK(a.eager_elementwise == b.eager_elementwise);
    CHECK(a.attention_kernel == b.attention_kernel);
    CHECK(a.dp_bucket_bytes == b.dp_bucket_bytes);
    CHECK(a.layer_split == b.layer_split);
}

}  // namespace

TEST_CASE("model defaults follow docs/formats.md", "[spec][io]") {
    ModelSpec m = model_from_json_text(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 16})", "x.json");
    CHECK(m.kv_heads == 4);        // = heads (MHA)
    CHECK(m.head_dim == 16);       // = hidden / heads = 64 / 4
    CHECK(m.ffn_hidden == 256);    // = 4 x hidden (Megatron's default)
    CHECK(m.max_position == 16);   // = seq_len
    CHECK(m.ffn == FfnKind::gelu);
    CHECK(m.norm == NormKind::layernorm);
    CHECK(m.position == PositionKind::learned);
    CHECK_FALSE(m.tied_embeddings);
    CHECK_FALSE(m.moe.has_value());
    CHECK(m.dropout == 0.0);

    ModelSpec e = model_from_json_text(R"({"model": {"name": "e", "layers": 4, "hidden": 64, "heads": 4, "ffn_hidden": 96,
        "vocab": 256, "seq_len": 16, "moe": {"experts": 8}}})", "e.json");
    REQUIRE(e.is_moe());
    CHECK(e.moe->top_k == 1);
    CHECK(e.moe->expert_ffn_hidden == 96);  // 0/absent = model.ffn_hidden
    CHECK(e.moe->moe_every == 1);
    CHECK(e.moe->capacity_factor == 0.0);   // dropless

    // Squared ReLU (Nemotron-4) reads, writes back and round-trips; an unknown activation is named.
    const ModelSpec r = model_from_json_text(R"({"name": "r", "layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 16,
        "ffn": "relu2"})", "r.json");
    CHECK(r.ffn == FfnKind::relu2);
    CHECK(model_from_json_text(to_json_text(r), "r2.json").ffn == FfnKind::relu2);
    // GeGLU (Gemma) too.
    const ModelSpec g = model_from_json_text(R"({"name": "g", "layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 16,
        "ffn": "geglu", "ffn_hidden": 96})", "g.json");
    CHECK(g.ffn == FfnKind::geglu);
    CHECK(model_from_json_text(to_json_text(g), "g2.json").ffn == FfnKind::geglu);
    CHECK_THROWS_WITH(model_from_json_text(R"({"name": "x", "layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 16,
        "ffn": "relu3"})", "x.json"), Catch::Contains("model.ffn"));
}

TEST_CASE("cluster and plan units are converted once, at the edge", "[spec][io]") {
    ClusterSpec c = cluster_from_json_text(R"({"name": "c", "gpu": "A100-SXM4-80GB", "nodes": 4, "nic_gbit_per_s": 200,
        "host_dram_gb": 2048, "slow_gpus": [{"rank": 3, "factor": 1.25}]})", "c.json");
    CHECK(c.nic_Bps == Approx(25e9));             // 200 Gbit/s / 8 = 25 GB/s
    CHECK(c.host_dram_bytes == Approx(2.048e12)); // 2048 GB x 1e9
    CHECK(c.gpus_per_node == 8);
    CHECK(c.gpu_count() == 32);
    CHECK(c.topology == NetTopology::rail_optimized);
    REQUIRE(c.slow_gpus.size() == 1);
    CHECK(c.slow_gpus[0] == std::pair<int, double>(3, 1.25));

    PlanSpec p = plan_from_json_text(R"({"plan": {"tp": 2, "global_batch": 8, "dp_bucket_mb": 25,
        "offload": {"optimizer": "cpu", "params": {"gpu": 0.2, "cpu": 0.5, "ssd": 0.3}}}})", "p.json");
    CHECK(p.dp_bucket_bytes == 25'000'000);
    CHECK(p.offload.optimizer.cpu == 1.0);
    CHECK(p.offload.optimizer.gpu == 0.0);
    CHECK(p.offload.params.ssd == Approx(0.3));
    CHECK(p.offload.grads.all_gpu());
    CHECK(p.schedule == Schedule::one_f_one_b);
    CHECK(p.zero_stage == 0);
    CHECK(p.precision == Precision::bf16);
    CHECK(p.flash_attention);
    CHECK(p.recompute_layers == -1);
    CHECK(p.micro_batches() == 8);  // 8 / (1 x 1)

    // Round trip through the canonical text keeps the non-trivial tier split and the units.
    PlanSpec p2 = plan_from_json_text(to_json_text(p), "p2.json");
    same(p, p2);
    ClusterSpec c2 = cluster_from_json_text(to_json_text(c), "c2.json");
    same(c, c2);
}

TEST_CASE("canonical JSON is deterministic and starts with the documented keys", "[spec][io]") {
    ModelSpec m = load_model((kScenarios / "models" / "gpt-tiny.json").string());
    const std::string a = to_json_text(m), b = to_json_text(m);
    CHECK(a == b);
    CHECK(a.rfind("{\n  \"name\": \"gpt-tiny\",\n  \"description\"", 0) == 0);
    CHECK(a.back() == '\n');
    // Writing what was read gives the same bytes again (a fixed point).
    CHECK(to_json_text(model_from_json_text(a, "a.json")) == a);
}

TEST_CASE("every bundled model, cluster and plan round-trips field by field", "[spec][io]") {
    for (const auto& f : json_files(kScenarios / "models")) {
        INFO(f.string());
        ModelSpec m = load_model(f.string());
        same(m, model_from_json_text(to_json_text(m), "rt.json"));
        CHECK(m.name == f.stem().string());  // file name = name, so the CLI finds it by name
    }
    for (const auto& f : json_files(kScenarios / "clusters")) {
        INFO(f.string());
        ClusterSpec c = load_cluster(f.string());
        same(c, cluster_from_json_text(to_json_text(c), "rt.json"));
        CHECK(c.name == f.stem().string());
    }
    for (const auto& f : json_files(kScenarios / "plans")) {
        INFO(f.string());
        PlanSpec p = load_plan(f.string());
        same(p, plan_from_json_text(to_json_text(p), "rt.json"));
        CHECK(p.name == f.stem().string());
    }
}

TEST_CASE("every bundled scenario loads, validates and round-trips", "[spec][io]") {
    const auto files = json_files(kScenarios);
    REQUIRE(files.size() >= 4);
    for (const auto& f : files) {
        INFO(f.string());
        Scenario s = load_scenario(f.string());  // validate_plan runs inside
        REQUIRE(s.plan.has_value());
        CHECK(s.name == f.stem().string());
        Scenario r = scenario_from_json_text(to_json_text(s), (kScenarios / "rt.json").string());
        same(s.model, r.model);
        same(s.cluster, r.cluster);
        REQUIRE(r.plan.has_value());
        same(*s.plan, *r.plan);
        CHECK(s.description == r.description);
    }
}

TEST_CASE("scenario parts may be inline, paths, or wrapped files", "[spec][io]") {
    const fs::path dir = fs::temp_directory_path() / "strata_test_spec_io";
    fs::create_directories(dir / "sub");
    strata::write_file_atomic((dir / "sub" / "m.json").string(),
                              R"({"model": {"name": "w", "layers": 2, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 16}})");
    const std::string text = R"({"model": "sub/m.json",
        "cluster": {"name": "c", "gpu": "cpu", "gpus_per_node": 2},
        "plan": {"dp": 2, "global_batch": 4}})";
    Scenario s = scenario_from_json_text(text, (dir / "scen.json").string());
    CHECK(s.name == "scen");  // default: the file's stem
    CHECK(s.model.name == "w");
    CHECK(s.cluster.gpu_count() == 2);
    REQUIRE(s.plan.has_value());
    CHECK(s.plan->dp == 2);
    // An error inside the referenced file names that file, not the scenario.
    strata::write_file_atomic((dir / "sub" / "bad.json").string(), R"({"name": "b", "layers": 0})");
    try {
        scenario_from_json_text(R"({"model": "sub/bad.json", "cluster": {"name": "c", "gpu": "cpu"}})", (dir / "scen.json").string());
        FAIL("no error");
    } catch (const strata::InputError& e) {
        CHECK_THAT(e.file(), Catch::Matchers::EndsWith("bad.json"));
        CHECK(e.path() == "model.layers");
    }
    fs::remove_all(dir);
}

TEST_CASE("a plan that does not state dp takes what its cluster leaves; a stated one is kept", "[spec][io]") {
    // A paper states tp, pp and the GPU count: 64 GPUs with tp 4 and pp 2 leave dp = 64 / 8 = 8.
    const std::string model = R"({"name": "w", "layers": 4, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 16})";
    const std::string cluster = R"({"name": "c", "gpu": "H100-SXM5-80GB", "nodes": 8, "gpus_per_node": 8})";
    Scenario s = scenario_from_json_text(R"({"model": )" + model + R"(, "cluster": )" + cluster +
                                             R"(, "plan": {"tp": 4, "pp": 2, "global_batch": 64}})",
                                         "s.json");
    REQUIRE(s.plan.has_value());
    CHECK(s.plan->dp == 8);
    bool explained = false;
    for (const PlanValueOrigin& v : explain_plan(*s.plan))
        if (v.key == "dp") explained = v.value_json == "8" && v.origin.rfind("cluster", 0) == 0;
    CHECK(explained);
    // Stated, it is the user's: a mismatch is named, not repaired.
    CHECK_THROWS_AS(scenario_from_json_text(R"({"model": )" + model + R"(, "cluster": )" + cluster +
                                                R"(, "plan": {"tp": 4, "pp": 2, "dp": 4, "global_batch": 64}})",
                                            "s.json"),
                    strata::InputError);
    // GPUs that tp x pp x cp does not divide: left to validate_plan's message.
    CHECK_THROWS_AS(scenario_from_json_text(R"({"model": )" + model + R"(, "cluster": )" + cluster +
                                                R"(, "plan": {"tp": 4, "pp": 3, "global_batch": 64}})",
                                            "s.json"),
                    strata::InputError);
}

TEST_CASE("group-limited routing and the DeepEP dispatcher round-trip through the canonical text", "[spec][io][moe]") {
    const ModelSpec m = model_from_json_text(R"({"name": "g", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16,
        "moe": {"experts": 16, "top_k": 4, "router_groups": 4, "router_group_topk": 2}})", "m.json");
    const std::string text = to_json_text(m);
    CHECK(text.find("\"router_groups\": 4") != std::string::npos);
    CHECK(text.find("\"router_group_topk\": 2") != std::string::npos);
    same(m, model_from_json_text(text, "rt.json"));
    const PlanSpec p = plan_from_json_text(R"({"dp": 4, "ep": 4, "global_batch": 4, "moe_dispatcher": "deepep"})", "p.json");
    CHECK(p.moe_dispatcher == MoeDispatcher::deepep);
    CHECK(to_json_text(p).find("\"moe_dispatcher\": \"deepep\"") != std::string::npos);
    same(p, plan_from_json_text(to_json_text(p), "rt.json"));
    // Defaults: unrestricted routing, Megatron's flat all-to-all dispatcher.
    CHECK(plan_from_json_text(R"({"global_batch": 4})", "p.json").moe_dispatcher == MoeDispatcher::alltoall);
}

TEST_CASE("QK-norm round-trips; off by default and left out of the canonical text then", "[spec][io]") {
    const ModelSpec m = model_from_json_text(R"({"name": "q", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16,
        "qk_norm": true})", "m.json");
    CHECK(m.qk_norm);
    CHECK(to_json_text(m).find("\"qk_norm\": true") != std::string::npos);
    same(m, model_from_json_text(to_json_text(m), "rt.json"));
    const ModelSpec d = model_from_json_text(R"({"name": "q", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16})", "m.json");
    CHECK_FALSE(d.qk_norm);
    CHECK(to_json_text(d).find("qk_norm") == std::string::npos);
}

TEST_CASE("fp32 gradients round-trip; they need mixed precision", "[spec][io]") {
    const PlanSpec p = plan_from_json_text(R"({"global_batch": 4, "fp32_grads": true})", "p.json");
    CHECK(p.fp32_grads);
    CHECK(p.grad_bytes() == 4);
    CHECK(to_json_text(p).find("\"fp32_grads\": true") != std::string::npos);
    same(p, plan_from_json_text(to_json_text(p), "rt.json"));
    CHECK(plan_from_json_text(R"({"global_batch": 4})", "p.json").grad_bytes() == 2);
    CHECK(plan_from_json_text(R"({"global_batch": 4, "precision": "fp32"})", "p.json").grad_bytes() == 4);
    try {
        plan_from_json_text(R"({"global_batch": 4, "precision": "fp32", "fp32_grads": true})", "p.json");
        FAIL("accepted fp32_grads with fp32 weights");
    } catch (const strata::InputError& e) {
        CHECK(e.path() == "plan.fp32_grads");
        CHECK_THAT(e.rule(), Catch::Contains("needs mixed precision"));
    }
}

TEST_CASE("a loss that keeps the logits in their dtype round-trips; upcasting is the default", "[spec][io]") {
    CHECK(plan_from_json_text(R"({"global_batch": 4})", "p.json").loss_upcast);
    const PlanSpec nl = plan_from_json_text(R"({"global_batch": 4, "loss_upcast": false})", "p.json");
    CHECK_FALSE(nl.loss_upcast);
    CHECK(to_json_text(nl).find("\"loss_upcast\": false") != std::string::npos);
    same(nl, plan_from_json_text(to_json_text(nl), "rt.json"));
    try {
        plan_from_json_text(R"({"global_batch": 4, "loss_upcast": 0})", "p.json");
        FAIL("a non-bool loss_upcast was accepted");
    } catch (const strata::InputError& e) {
        CHECK(e.path() == "plan.loss_upcast");
    }
}

TEST_CASE("an interleaved micro-batch group round-trips; pp is the default", "[spec][io]") {
    const PlanSpec d = plan_from_json_text(R"({"pp": 4, "global_batch": 4})", "p.json");
    CHECK(d.microbatch_group == 0);
    CHECK(d.vpp_group() == 4);
    CHECK(to_json_text(d).find("microbatch_group") == std::string::npos);
    const PlanSpec g = plan_from_json_text(R"({"pp": 4, "vpp": 2, "schedule": "interleaved-1f1b", "global_batch": 10, "microbatch_group": 5})", "p.json");
    CHECK(g.vpp_group() == 5);
    CHECK(to_json_text(g).find("\"microbatch_group\": 5") != std::string::npos);
    same(g, plan_from_json_text(to_json_text(g), "rt.json"));
}

TEST_CASE("unfused gradient accumulation round-trips; fused is the default", "[spec][io]") {
    CHECK(plan_from_json_text(R"({"global_batch": 4})", "p.json").grad_accum_fusion);
    const PlanSpec p = plan_from_json_text(R"({"global_batch": 4, "grad_accum_fusion": false})", "p.json");
    CHECK_FALSE(p.grad_accum_fusion);
    CHECK(to_json_text(p).find("\"grad_accum_fusion\": false") != std::string::npos);
    same(p, plan_from_json_text(to_json_text(p), "rt.json"));
    try {
        plan_from_json_text(R"({"global_batch": 4, "grad_accum_fusion": "no"})", "p.json");
        FAIL("accepted a string for a bool");
    } catch (const strata::InputError& e) {
        CHECK(e.path() == "plan.grad_accum_fusion");
    }
}

TEST_CASE("expandable allocator segments round-trip; off by default", "[spec][io]") {
    CHECK_FALSE(plan_from_json_text(R"({"global_batch": 4})", "p.json").expandable_segments);
    const PlanSpec p = plan_from_json_text(R"({"global_batch": 4, "expandable_segments": true})", "p.json");
    CHECK(p.expandable_segments);
    same(p, plan_from_json_text(to_json_text(p), "rt.json"));
    try {
        plan_from_json_text(R"({"global_batch": 4, "expandable_segments": "True"})", "p.json");
        FAIL("accepted a string for a bool");
    } catch (const strata::InputError& e) {
        CHECK(e.path() == "plan.expandable_segments");
    }
}

TEST_CASE("the router weights' placement round-trips; Megatron-Core's (before fc2) is the default", "[spec][io][moe]") {
    const PlanSpec p = plan_from_json_text(R"({"global_batch": 4, "moe_probs_at": "fc2_output"})", "p.json");
    CHECK(p.moe_probs_at == MoeProbsAt::fc2_output);
    CHECK(to_json_text(p).find("\"moe_probs_at\": \"fc2_output\"") != std::string::npos);
    same(p, plan_from_json_text(to_json_text(p), "rt.json"));
    CHECK(plan_from_json_text(R"({"global_batch": 4})", "p.json").moe_probs_at == MoeProbsAt::fc2_input);
}

TEST_CASE("the attention kernel family round-trips; FA3-class is the default", "[spec][io]") {
    const PlanSpec p = plan_from_json_text(R"({"global_batch": 4, "attention_kernel": "fa2"})", "p.json");
    CHECK(p.attention_kernel == AttentionKernel::fa2);
    CHECK(to_json_text(p).find("\"attention_kernel\": \"fa2\"") != std::string::npos);
    same(p, plan_from_json_text(to_json_text(p), "rt.json"));
    CHECK(plan_from_json_text(R"({"global_batch": 4})", "p.json").attention_kernel == AttentionKernel::fa3);
    const PlanSpec p1 = plan_from_json_text(R"({"global_batch": 4, "attention_kernel": "fa1"})", "p.json");
    CHECK(p1.attention_kernel == AttentionKernel::fa1);
    CHECK(plan_from_json_text(to_json_text(p1), "p.json").attention_kernel == AttentionKernel::fa1);
    CHECK_THROWS_WITH(plan_from_json_text(R"({"global_batch": 4, "attention_kernel": "fa4"})", "p.json"),
                      Catch::Contains("p.json") && Catch::Contains("attention_kernel"));
}

// A boolean plan field: `on` (a plan JSON setting it true) parses to true and writes it back,
// the round trip is exact, the default is false, and `bad` (a non-boolean) names the file and field.
static void bool_field_round_trips(const char* on, const char* bad, const std::string& key, bool PlanSpec::*field) {
    const PlanSpec p = plan_from_json_text(on, "p.json");
    CHECK(p.*field);
    CHECK(to_json_text(p).find("\"" + key + "\": true") != std::string::npos);
    same(p, plan_from_json_text(to_json_text(p), "rt.json"));
    CHECK_FALSE(plan_from_json_text(R"({"global_batch": 4})", "p.json").*field);
    CHECK_THROWS_WITH(plan_from_json_text(bad, "p.json"), Catch::Contains("p.json") && Catch::Contains(key));
}

TEST_CASE("eager elementwise ops round-trip; fused is the default", "[spec][io]") {
    bool_field_round_trips(R"({"dp": 2, "global_batch": 4, "eager_elementwise": true})",
                           R"({"global_batch": 4, "eager_elementwise": 1})", "eager_elementwise", &PlanSpec::eager_elementwise);
}

TEST_CASE("pipeline scatter/gather round-trips; whole tensors (Megatron-Core) are the default", "[spec][io]") {
    bool_field_round_trips(R"({"tp": 2, "pp": 2, "global_batch": 4, "p2p_scatter_gather": true})",
                           R"({"global_batch": 4, "p2p_scatter_gather": "yes"})", "p2p_scatter_gather",
                           &PlanSpec::p2p_scatter_gather);
}

TEST_CASE("the MoE SwiGLU FP8 cache round-trips and is off by default", "[spec][io]") {
    bool_field_round_trips(
        R"({"global_batch": 4, "precision": "fp8", "recompute": "selective", "recompute_modules": ["moe_act"], "moe_act_fp8_cache": true})",
        R"({"global_batch": 4, "moe_act_fp8_cache": 1})", "moe_act_fp8_cache", &PlanSpec::moe_act_fp8_cache);
}

TEST_CASE("Adam moment types round-trip; fp32 is the default; fp32 training rejects them", "[spec][io]") {
    const PlanSpec p = plan_from_json_text(R"({"global_batch": 4, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "fp8"})", "p.json");
    CHECK(p.exp_avg_dtype == Precision::bf16);
    CHECK(p.exp_avg_sq_dtype == Precision::fp8);
    const PlanSpec q = plan_from_json_text(to_json_text(p), "rt.json");
    CHECK(q.exp_avg_dtype == Precision::bf16);
    CHECK(q.exp_avg_sq_dtype == Precision::fp8);
    const PlanSpec d = plan_from_json_text(R"({"global_batch": 4})", "p.json");
    CHECK(d.exp_avg_dtype == Precision::fp32);
    CHECK(d.adam_moment_bytes() == 8.0);
    CHECK_THROWS_WITH(plan_from_json_text(R"({"global_batch": 4, "exp_avg_dtype": "int8"})", "p.json"),
                      Catch::Contains("p.json") && Catch::Contains("exp_avg_dtype"));
    CHECK_THROWS_WITH(plan_from_json_text(R"({"global_batch": 4, "precision": "fp32", "exp_avg_sq_dtype": "bf16"})", "p.json"),
                      Catch::Contains("exp_avg_sq_dtype") && Catch::Contains("mixed precision"));
}

TEST_CASE("mtp_depth round-trips, is 0 by default and bounded", "[spec][io][mtp]") {
    const std::string base = R"({"name": "m", "layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq_len": 16)";
    const ModelSpec m = model_from_json_text(base + R"(, "mtp_depth": 2})", "m.json");
    CHECK(m.mtp_depth == 2);
    CHECK(model_from_json_text(to_json_text(m), "rt.json").mtp_depth == 2);
    CHECK(model_from_json_text(base + "}", "m.json").mtp_depth == 0);
    CHECK_THROWS_WITH(model_from_json_text(base + R"(, "mtp_depth": -1})", "m.json"), Catch::Contains("m.json") && Catch::Contains("mtp_depth"));
    CHECK_THROWS_WITH(model_from_json_text(base + R"(, "mtp_depth": 17})", "m.json"), Catch::Contains("mtp_depth"));
}

TEST_CASE("virtual_layer_split round-trips and allows empty virtual stages", "[spec][io][pipeline]") {
    const PlanSpec p = plan_from_json_text(R"({"pp": 2, "vpp": 2, "schedule": "interleaved-1f1b", "global_batch": 4,
                                              "virtual_layer_split": [1, 2, 3, 0]})", "p.json");
    CHECK(p.virtual_layer_split == std::vector<int>{1, 2, 3, 0});
    CHECK(plan_from_json_text(to_json_text(p), "rt.json").virtual_layer_split == p.virtual_layer_split);
    CHECK(plan_from_json_text(R"({"global_batch": 4})", "p.json").virtual_layer_split.empty());
    CHECK_THROWS_WITH(plan_from_json_text(R"({"global_batch": 4, "virtual_layer_split": 3})", "p.json"),
                      Catch::Contains("virtual_layer_split") && Catch::Contains("array"));
    CHECK_THROWS_WITH(plan_from_json_text(R"({"global_batch": 4, "virtual_layer_split": [1.5]})", "p.json"),
                      Catch::Contains("virtual_layer_split[0]"));
}
