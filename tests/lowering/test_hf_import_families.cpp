// Hugging Face import of the 2024-25 families (issue #33): gpt-oss, Gemma 2, Phi-3/4, OLMo 2, and
// the sliding windows Strata does not model, refused unless the caller accepts full attention.
// The configs in tests/data/hf/ are the published config.json files' shape keys:
//   gpt-oss-120b.json, gpt-oss-20b.json   huggingface.co/openai/gpt-oss-{120b,20b}/blob/main/config.json
//   gemma-2-9b.json, gemma-2-27b.json     huggingface.co/google/gemma-2-{9b,27b}/blob/main/config.json
//   phi-4.json                            huggingface.co/microsoft/phi-4/blob/main/config.json
//   phi-3-mini-4k.json                    huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/config.json
//   olmo-2-1124-7b.json                   huggingface.co/allenai/OLMo-2-1124-7B/blob/main/config.json
//   gemma-7b.json, gemma-2b.json          huggingface.co/google/gemma-{7b,2b}/blob/main/config.json
//   opt-13b.json                          huggingface.co/facebook/opt-13b/blob/main/config.json
//   bloom.json                            huggingface.co/bigscience/bloom/blob/main/config.json
//   pythia-6.9b.json, gpt-neox-20b.json   huggingface.co/EleutherAI/{pythia-6.9b,gpt-neox-20b}/blob/main/config.json
// The parameter totals they are checked against are the publishers' own, cited per case.
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

ModelSpec import(const std::string& name, HfImportOptions o = {}) {
    const std::string path = (kHf / (name + ".json")).string();
    return model_from_hf_config_text(strata::read_text_file(path), path, o);
}

/// The model's total parameters as Strata counts them, against a published total: within 0.5 %.
void check_total(const ModelSpec& m, double published) {
    INFO(m.name << ": " << param_counts(m).total << " against " << published);
    CHECK(static_cast<double>(param_counts(m).total) == Approx(published).epsilon(0.005));
}

HfImportOptions full_attention() {
    HfImportOptions o;
    o.windows_as_full = true;
    return o;
}

}  // namespace

TEST_CASE("gpt-oss imports as a MoE with biases, and its 128-token window on every other layer", "[hf]") {
    // layer_types alternates sliding and full attention from layer 0 (sliding): every 2nd layer
    // (1-based) attends to the whole sequence, Megatron-Bridge's window_attn_skip_freq = 2.
    const ModelSpec w = import("gpt-oss-120b");
    CHECK(w.sliding_window == 128);
    CHECK(w.window_attn_skip_freq == 2);
    CHECK(w.window_of(0) == 128);
    CHECK(w.window_of(1) == 0);
    CHECK(w.window_of(34) == 128);
    CHECK(w.window_of(35) == 0);
    const ModelSpec m = import("gpt-oss-120b", full_attention());
    CHECK(m.layers == 36);
    CHECK(m.heads == 64);
    CHECK(m.kv_heads == 8);
    CHECK(m.head_dim == 64);
    CHECK(m.linear_bias);
    CHECK_FALSE(m.tied_embeddings);
    REQUIRE(m.is_moe());
    CHECK(m.moe->experts == 128);
    CHECK(m.moe->top_k == 4);
    CHECK(m.moe->expert_ffn_hidden == 2880);
    CHECK_THAT(m.description, Contains("costed as full attention"));
    // OpenAI's gpt-oss model card (2025-08), Table 1: 116.83B total, 5.13B active; 20.91B / 3.61B.
    check_total(m, 116.83e9);
    // OpenAI's active count leaves out the embedding table (a lookup, no FLOPs); Strata's keeps it.
    const ParamCounts c = param_counts(m);
    CHECK(static_cast<double>(c.active - c.embedding) == Approx(5.13e9).epsilon(0.005));
    check_total(import("gpt-oss-20b", full_attention()), 20.91e9);
    // At a sequence inside the window, attention is full anyway: no option needed.
    HfImportOptions short_seq;
    short_seq.seq_len = 128;
    CHECK(import("gpt-oss-20b", short_seq).seq_len == 128);
}

TEST_CASE("Gemma 2 imports with tied embeddings and a gated MLP; its window on every other layer", "[hf]") {
    // HF's Gemma2: layer_idx % 2 == 0 slides (4096 tokens), the odd ones are global.
    const ModelSpec g = import("gemma-2-9b");
    CHECK(g.sliding_window == 4096);
    CHECK(g.window_attn_skip_freq == 2);
    CHECK(g.window_of(0) == 4096);
    CHECK(g.window_of(1) == 0);
    HfImportOptions at_window;
    at_window.seq_len = 4096;  // the local layers' window covers the whole sequence
    const ModelSpec m = import("gemma-2-9b", at_window);
    CHECK(m.tied_embeddings);
    CHECK(m.ffn == FfnKind::geglu);   // hidden_activation gelu_pytorch_tanh gates the MLP
    CHECK(m.head_dim == 256);         // 16 heads x 256 = 4096 != hidden 3584
    CHECK(m.kv_heads == 8);
    // Gemma 2 report (arXiv:2408.00118), Table 1: embedding + non-embedding parameters,
    // 917,504,000 + 8,324,201,984 (9B) and 1,179,648,000 + 26,047,480,320 (27B).
    check_total(m, 917'504'000.0 + 8'324'201'984.0);
    check_total(import("gemma-2-27b", full_attention()), 1'179'648'000.0 + 26'047'480'320.0);
}

TEST_CASE("a gated MLP's activation is read from hidden_act / hidden_activation", "[hf]") {
    const auto with_act = [](const std::string& key_value) {
        return R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
            "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 256, )" + key_value + "}";
    };
    const auto ffn_of = [&](const std::string& kv) { return model_from_hf_config_text(with_act(kv), "c.json", HfImportOptions{}).ffn; };
    CHECK(ffn_of(R"("hidden_act": "silu")") == FfnKind::swiglu);
    CHECK(ffn_of(R"("rms_norm_eps": 1e-5)") == FfnKind::swiglu);  // HF's LlamaConfig default is silu
    CHECK(ffn_of(R"("hidden_act": "gelu")") == FfnKind::geglu);
    // Gemma 1 configs say "gelu" in hidden_act and the tanh form in hidden_activation: the latter wins.
    CHECK(ffn_of(R"("hidden_act": "relu", "hidden_activation": "gelu_pytorch_tanh")") == FfnKind::geglu);
    CHECK_THROWS_WITH(model_from_hf_config_text(with_act(R"("hidden_act": "relu")"), "c.json", HfImportOptions{}),
                      Contains("c.json") && Contains("hidden_act") && Contains("relu"));
    // The parameter count of a gated MLP does not depend on its gate: 3 h f, as SwiGLU.
    const ModelSpec s = model_from_hf_config_text(with_act(R"("hidden_act": "silu")"), "c.json", HfImportOptions{});
    const ModelSpec g = model_from_hf_config_text(with_act(R"("hidden_act": "gelu")"), "c.json", HfImportOptions{});
    CHECK(param_counts(g).total == param_counts(s).total);
}

TEST_CASE("Phi-4 and OLMo 2 import as Llama-like models", "[hf]") {
    const ModelSpec phi = import("phi-4");  // sliding_window null: nothing to refuse
    CHECK(phi.name == "phi-4");
    CHECK(phi.kv_heads == 10);
    CHECK(phi.vocab == 100352);
    CHECK_FALSE(phi.tied_embeddings);
    // microsoft/phi-4 model card: 14.7B parameters (its safetensors index: 14,659,507,200).
    check_total(phi, 14.7e9);
    const ModelSpec olmo = import("olmo-2-1124-7b");
    CHECK(olmo.qk_norm);  // OLMo 2's q_norm / k_norm
    CHECK(olmo.kv_heads == 32);
    // allenai/OLMo-2-1124-7B model card: 7.30B parameters (Table "Model Details": 7B, 4T tokens).
    check_total(olmo, 7.30e9);
}

TEST_CASE("a sliding window shorter than the sequence is imported, never dropped", "[hf]") {
    // Mistral-7B v0.1: every layer windowed at 4096; Phi-3-mini-4k at 2047.
    const ModelSpec mi = import("mistral-7b");
    CHECK(mi.seq_len == 8192);
    CHECK(mi.sliding_window == 4096);
    CHECK(mi.window_attn_skip_freq == 0);  // no layer attends to the whole sequence
    CHECK(mi.window_of(31) == 4096);
    HfImportOptions at_window;
    at_window.seq_len = 4096;
    CHECK(import("mistral-7b", at_window).window_of(0) == 0);  // the window covers the sequence
    CHECK(import("phi-3-mini-4k").sliding_window == 2047);
    // Costed as full attention on request: no window, and the description says so.
    const ModelSpec f = import("mistral-7b", full_attention());
    CHECK(f.sliding_window == 0);
    CHECK_THAT(f.description, Contains("costed as full attention"));
    // Qwen2 carries a window it uses only with use_sliding_window (false in Qwen2-7B).
    CHECK_NOTHROW(import("qwen2-7b"));
    // A layer_types list that is no every-N-th pattern is refused, naming the layer.
    const std::string odd = R"({"architectures": ["GptOssForCausalLM"], "num_hidden_layers": 3, "hidden_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 32, "vocab_size": 128,
        "max_position_embeddings": 512, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 16,
        "layer_types": ["sliding_attention", "full_attention", "full_attention"]})";
    CHECK_THROWS_WITH(model_from_hf_config_text(odd, "odd.json", HfImportOptions{}), Contains("odd.json") && Contains("layer_types") && Contains("layer 2"));
}

TEST_CASE("the published runs' older families import: OPT, BLOOM, GPT-NeoX and Pythia, Gemma 1", "[hf]") {
    // Pythia (Biderman et al. 2023, Table 1): 6,857,302,016 parameters, 6,444,163,072 of them
    // outside the (untied) embedding and unembedding. By hand: 32 layers of QKV 3h^2 + 3h, dense
    // h^2 + h, MLP 8h^2 + 5h, two LayerNorms 4h (201,379,840 each), a final LayerNorm 2h, and two
    // 50432 x 4096 tables.
    const ModelSpec py = import("pythia-6.9b");
    CHECK(param_counts(py).total == 6'857'302'016LL);
    CHECK(param_counts(py).non_embedding() == 6'444'163'072LL);
    CHECK(py.position == PositionKind::rope);
    CHECK(py.ffn == FfnKind::gelu);
    CHECK(py.linear_bias);
    CHECK_FALSE(py.tied_embeddings);
    CHECK(py.seq_len == 2048);
    CHECK_THAT(py.description, Contains("parallel residual"));
    // GPT-NeoX-20B (Black et al. 2022): 20,554,567,680 parameters; its gelu_fast is a GELU.
    CHECK(param_counts(import("gpt-neox-20b")).total == 20'554'567'680LL);
    // BLOOM's model card: 176,247,271,424 parameters, of which Strata leaves out the LayerNorm
    // after the embedding (2 x 14336). ALiBi: no position table; the 2048 tokens it trained on.
    const ModelSpec bl = import("bloom");
    CHECK(param_counts(bl).total == 176'247'271'424LL - 2 * 14336);
    CHECK(bl.position == PositionKind::none);
    CHECK(param_counts(bl).position == 0);
    CHECK(bl.seq_len == 2048);
    CHECK(bl.tied_embeddings);
    CHECK_THAT(bl.description, Contains("ALiBi"));
    // OPT-13B by hand: 40 layers of QKV 3h^2 + 3h, out h^2 + h, fc1 4h^2 + 4h, fc2 4h^2 + h and
    // two LayerNorms 4h; the tied 50272 x 5120 table, 2050 position rows (2048 and the
    // embedding's offset of 2), the final LayerNorm: 12,853,473,280 (the paper's "13B").
    const ModelSpec op = import("opt-13b");
    CHECK(param_counts(op).total == 12'853'473'280LL);
    CHECK(op.max_position == 2050);
    CHECK(op.seq_len == 2048);
    CHECK(op.ffn == FfnKind::relu);
    CHECK(op.dropout == Approx(0.1));
    CHECK(op.name == "opt-13b");
    // Gemma report (arXiv:2403.08295), Table 2: non-embedding parameters 7,751,248,896 (7B) and
    // 1,981,884,416 (2B, multi-query: one KV head); its embedding counts 256,128 rows where the
    // config's vocabulary is 256,000. Gemma 1 says "gelu", which gates a GeGLU.
    const ModelSpec g7 = import("gemma-7b");
    CHECK(param_counts(g7).non_embedding() == 7'751'248'896LL);
    CHECK(g7.ffn == FfnKind::geglu);
    CHECK(g7.tied_embeddings);
    CHECK(g7.head_dim == 256);
    const ModelSpec g2 = import("gemma-2b");
    CHECK(param_counts(g2).non_embedding() == 1'981'884'416LL);
    CHECK(g2.kv_heads == 1);
    // What Strata does not model is refused by its key: OPT-350m's 512-wide embedding projections.
    const std::string opt350 = R"({"architectures": ["OPTForCausalLM"], "hidden_size": 1024, "num_hidden_layers": 24,
        "num_attention_heads": 16, "ffn_dim": 4096, "vocab_size": 50272, "word_embed_proj_dim": 512})";
    CHECK_THROWS_WITH(model_from_hf_config_text(opt350, "opt-350m.json", HfImportOptions{}),
                      Contains("opt-350m.json") && Contains("word_embed_proj_dim"));
}
