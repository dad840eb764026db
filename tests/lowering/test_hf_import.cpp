// Hugging Face config.json import: the configs under tests/data/hf/ are copies of the published
// config.json files; the expected fields are read off those configs and the model papers by hand,
// and where a bundled scenario model exists the import must agree with it.
#include <catch2/catch.hpp>

#include <filesystem>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/spec_io.hpp"

using namespace strata::sim;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const fs::path kHf = fs::path(STRATA_SOURCE_DIR) / "tests" / "data" / "hf";

ModelSpec import(const std::string& name) {
    const std::string path = (kHf / (name + ".json")).string();
    return model_from_hf_config_text(strata::read_text_file(path), path);
}

}  // namespace

TEST_CASE("Llama-2-7b config", "[hf]") {
    ModelSpec m = import("llama-2-7b");
    CHECK(m.name == "Llama-2-7b-hf");  // last component of _name_or_path
    CHECK(m.layers == 32);
    CHECK(m.hidden == 4096);
    CHECK(m.heads == 32);
    CHECK(m.kv_heads == 32);
    CHECK(m.head_dim == 128);
    CHECK(m.ffn_hidden == 11008);
    CHECK(m.ffn == FfnKind::swiglu);  // hidden_act silu, gated MLP
    CHECK(m.norm == NormKind::rmsnorm);
    CHECK(m.position == PositionKind::rope);
    CHECK(m.vocab == 32000);
    CHECK(m.seq_len == 4096);
    CHECK(m.max_position == 4096);
    CHECK_FALSE(m.tied_embeddings);
    CHECK_FALSE(m.linear_bias);
    CHECK_FALSE(m.qkv_bias);
    CHECK_FALSE(m.is_moe());
    // Same shape as the bundled scenario model.
    ModelSpec b = load_model((fs::path(STRATA_SOURCE_DIR) / "scenarios" / "models" / "llama-2-7b.json").string());
    CHECK(b.layers == m.layers);
    CHECK(b.hidden == m.hidden);
    CHECK(b.ffn_hidden == m.ffn_hidden);
    CHECK(b.kv_heads == m.kv_heads);
    CHECK(b.vocab == m.vocab);
}

TEST_CASE("Mistral-7B and Mixtral-8x7B configs", "[hf]") {
    // Its 4096-token sliding window is shorter than the default sequence: accepted only when the
    // windowed layers may be costed as full attention (test_hf_import_families.cpp).
    HfImportOptions full;
    full.windows_as_full = true;
    const std::string mistral = (kHf / "mistral-7b.json").string();
    ModelSpec mi = model_from_hf_config_text(strata::read_text_file(mistral), mistral, full);
    CHECK(mi.name == "mistral-7b");  // no _name_or_path: the file's stem
    CHECK(mi.kv_heads == 8);         // GQA
    CHECK(mi.ffn_hidden == 14336);
    CHECK(mi.max_position == 32768);
    CHECK(mi.seq_len == 8192);       // capped at 8192 by default (docs/formats.md)

    ModelSpec mx = import("mixtral-8x7b");
    REQUIRE(mx.is_moe());
    CHECK(mx.moe->experts == 8);      // num_local_experts
    CHECK(mx.moe->top_k == 2);        // num_experts_per_tok
    CHECK(mx.moe->expert_ffn_hidden == 14336);
    CHECK(mx.moe->moe_every == 1);
    CHECK(mx.moe->shared_experts == 0);
    CHECK(mx.layers == 32);
    CHECK(mx.vocab == 32000);
}

TEST_CASE("Qwen2-7B and Qwen1.5-MoE configs", "[hf]") {
    ModelSpec q = import("qwen2-7b");
    CHECK(q.hidden == 3584);
    CHECK(q.heads == 28);
    CHECK(q.kv_heads == 4);
    CHECK(q.head_dim == 128);  // 3584 / 28
    CHECK(q.ffn_hidden == 18944);
    CHECK(q.vocab == 152064);
    CHECK(q.qkv_bias);         // Qwen2 always has q/k/v biases
    CHECK_FALSE(q.linear_bias);
    CHECK(q.max_position == 131072);
    CHECK(q.seq_len == 8192);

    ModelSpec qm = import("qwen1.5-moe-a2.7b");
    REQUIRE(qm.is_moe());
    CHECK(qm.moe->experts == 60);
    CHECK(qm.moe->top_k == 4);
    CHECK(qm.moe->expert_ffn_hidden == 1408);
    CHECK(qm.moe->shared_experts == 4);  // shared_expert_intermediate_size 5632 = 4 x 1408
}

TEST_CASE("Qwen3-235B-A22B config: QK-norm, no QKV bias, 128 experts", "[hf]") {
    // Qwen/Qwen3-235B-A22B config.json (a verbatim copy found in public code).
    ModelSpec m = import("qwen3-235b-a22b");
    CHECK(m.layers == 94);
    CHECK(m.hidden == 4096);
    CHECK(m.heads == 64);
    CHECK(m.kv_heads == 4);
    CHECK(m.head_dim == 128);  // not 4096 / 64
    CHECK(m.qk_norm);          // every Qwen3 normalises each head's query and key
    CHECK_FALSE(m.qkv_bias);   // attention_bias false: Qwen2's biases are gone
    REQUIRE(m.is_moe());
    CHECK(m.moe->experts == 128);
    CHECK(m.moe->top_k == 8);
    CHECK(m.moe->expert_ffn_hidden == 1536);
    CHECK(m.moe->shared_experts == 0);
    CHECK_FALSE(m.tied_embeddings);
    // Parameters by hand from the config's shapes: per layer Q 4096·8192, K and V 4096·512 each,
    // O 8192·4096, q_norm and k_norm 128 each, two RMSNorms 4096 each, router 4096·128, experts
    // 128·3·4096·1536 = 2,487,755,008; times 94, plus two 151936·4096 tables and the final norm:
    // 235,093,634,560 ("235B in total"). Active: 8 of the 128 experts, 22,190,763,520 ("22B").
    const ParamCounts c = param_counts(m);
    CHECK(c.total == 235'093'634'560LL);
    CHECK(c.active == 22'190'763'520LL);
    // Dense Qwen3 shares the layout; Qwen2 keeps its biases and has no QK-norm.
    const std::string dense = R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
        "vocab_size": 151936, "attention_bias": false})";
    ModelSpec d = model_from_hf_config_text(dense, "qwen3-8b/config.json");
    CHECK(d.qk_norm);
    CHECK_FALSE(d.is_moe());
    CHECK_FALSE(import("qwen2-7b").qk_norm);
    // Dense layers at chosen indices have no Strata form: refused, naming the key.
    const std::string odd = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 4,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
        "vocab_size": 151936, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 768,
        "mlp_only_layers": [1]})";
    CHECK_THROWS_WITH(model_from_hf_config_text(odd, "config.json"), Contains("mlp_only_layers"));
}

TEST_CASE("DeepSeek-V3 config: latent attention and dense-first MoE", "[hf][mla]") {
    // deepseek-ai/DeepSeek-V3 config.json (quantisation and RoPE-scaling blocks left out).
    ModelSpec m = import("deepseek-v3");
    CHECK(m.name == "deepseek-v3");  // no _name_or_path: the file's stem
    CHECK(m.layers == 61);
    CHECK(m.hidden == 7168);
    CHECK(m.heads == 128);
    CHECK(m.kv_heads == 128);
    REQUIRE(m.mla.has_value());
    CHECK(m.mla->q_lora_rank == 1536);
    CHECK(m.mla->kv_lora_rank == 512);
    CHECK(m.mla->qk_nope_head_dim == 128);
    CHECK(m.mla->qk_rope_head_dim == 64);
    CHECK(m.mla->v_head_dim == 128);
    REQUIRE(m.is_moe());
    CHECK(m.moe->experts == 256);
    CHECK(m.moe->top_k == 8);
    CHECK(m.moe->expert_ffn_hidden == 2048);
    CHECK(m.moe->shared_experts == 1);
    CHECK(m.moe->first_k_dense == 3);
    CHECK(m.moe->router_groups == 8);      // n_group: node-limited routing
    CHECK(m.moe->router_group_topk == 4);  // topk_group
    CHECK(m.ffn_hidden == 18432);
    CHECK(m.vocab == 129280);
    CHECK_FALSE(m.tied_embeddings);
    CHECK(m.mtp_depth == 1);  // num_nextn_predict_layers
}

TEST_CASE("DeepSeek group-limited routing: n_group > 1 and topk_group, unless the method is greedy", "[hf][moe]") {
    const std::string base = R"({"architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "kv_lora_rank": 64, "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16, "v_head_dim": 32, "n_routed_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 128)";
    auto imp = [&](const std::string& extra) { return model_from_hf_config_text(base + extra + "}", "c.json"); };
    // DeepSeek-V2: 8 device groups, 3 per token (topk_method group_limited_greedy).
    const ModelSpec v2 = imp(R"(, "n_group": 8, "topk_group": 3, "topk_method": "group_limited_greedy")");
    CHECK(v2.moe->router_groups == 8);
    CHECK(v2.moe->router_group_topk == 3);
    // DeepSeek-V2-Lite: one group, greedy: no limit. A greedy method ignores the groups too.
    CHECK(imp(R"(, "n_group": 1, "topk_group": 1, "topk_method": "greedy")").moe->router_groups == 0);
    CHECK(imp(R"(, "n_group": 8, "topk_group": 3, "topk_method": "greedy")").moe->router_groups == 0);
    CHECK(imp("").moe->router_groups == 0);
    CHECK_THROWS_WITH(imp(R"(, "n_group": 8)"), Contains("c.json: topk_group is required"));
    // The strict reader's rules apply: 3 groups do not divide 16 experts.
    CHECK_THROWS_WITH(imp(R"(, "n_group": 3, "topk_group": 1)"), Contains("model.moe.router_groups = 3 does not divide model.moe.experts = 16"));
}

TEST_CASE("GPT-2 config", "[hf]") {
    ModelSpec g = import("gpt2");
    CHECK(g.layers == 12);       // n_layer
    CHECK(g.hidden == 768);      // n_embd
    CHECK(g.heads == 12);        // n_head
    CHECK(g.ffn_hidden == 3072); // n_inner absent -> 4 x n_embd
    CHECK(g.ffn == FfnKind::gelu);
    CHECK(g.norm == NormKind::layernorm);
    CHECK(g.position == PositionKind::learned);
    CHECK(g.max_position == 1024);
    CHECK(g.seq_len == 1024);
    CHECK(g.tied_embeddings);    // GPT-2 ties by default
    CHECK(g.linear_bias);
    CHECK(g.dropout == Approx(0.1));  // resid_pdrop
    CHECK(g.vocab == 50257);
    // Same shape as the bundled gpt2-124m.
    ModelSpec b = load_model((fs::path(STRATA_SOURCE_DIR) / "scenarios" / "models" / "gpt2-124m.json").string());
    CHECK(b.hidden == g.hidden);
    CHECK(b.layers == g.layers);
    CHECK(b.max_position == g.max_position);
}

TEST_CASE("import errors name the HF key", "[hf]") {
    const std::string bad = (kHf / "bert-unsupported.json").string();
    try {
        model_from_hf_config_text(strata::read_text_file(bad), bad);
        FAIL("no error");
    } catch (const strata::InputError& e) {
        CHECK(e.path() == "architectures");
        CHECK_THAT(e.rule(), Contains("BertForMaskedLM") && Contains("LlamaForCausalLM") && Contains("GPT2LMHeadModel"));
    }
    CHECK_THROWS_WITH(model_from_hf_config_text(R"({"hidden_size": 4})", "c.json"), Contains("c.json: architectures"));
    CHECK_THROWS_WITH(model_from_hf_config_text(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": -4})", "c.json"),
                      Contains("c.json: hidden_size must be a positive integer"));
    CHECK_THROWS_WITH(model_from_hf_config_text(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128})", "c.json"),
                      Contains("c.json: vocab_size is required"));
    // Rules of the strict model reader apply to imports too: 4 heads, 3 KV heads.
    CHECK_THROWS_WITH(model_from_hf_config_text(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 128, "vocab_size": 10})", "c.json"),
                      Contains("kv_heads = 3 does not divide model.heads = 4"));
    CHECK_THROWS_AS(model_from_hf_config_text("not json", "c.json"), strata::InputError);
}
