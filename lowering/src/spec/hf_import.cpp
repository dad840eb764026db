// Hugging Face config.json -> ModelSpec, for the decoder-only families Strata models: Llama,
// Mistral, Mixtral, Qwen2/3 (and MoE), DeepSeek-V2/V3, GPT-2, gpt-oss, Gemma 1/2/3, Phi-3/4,
// OLMo 2, and the 2022-23 families of the published runs (OPT, BLOOM, GPT-NeoX/Pythia). Only the keys that change the shape of the training job are read; the rest of a config
// (tokenizer ids, rope scaling, soft-capping, ...) is ignored. A sliding window shorter than the
// training sequence becomes model.sliding_window, with the layers that attend to the whole
// sequence as model.window_attn_skip_freq (HfImportOptions::windows_as_full costs them as full).
// The mapping table, with the defaults HF applies when a key is missing, is in docs/formats.md.
#include <algorithm>
#include <climits>
#include <filesystem>

#include "strata/common/json_reader.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::sim {

namespace {

using nlohmann::json;

// The pre-training sequence length of these families is at most 8192 tokens (Llama 3 pre-trained
// at 8192); configs advertise longer windows (32k-128k) reached by later long-context stages. A
// simulation of pre-training should not silently use 128k tokens; `import-hf --seq-len` overrides.
constexpr std::int64_t kMaxDefaultSeqLen = 8192;

const std::vector<std::string> kSupported = {"LlamaForCausalLM",    "MistralForCausalLM",    "MixtralForCausalLM",
                                             "Qwen2ForCausalLM",    "Qwen2MoeForCausalLM",   "Qwen3ForCausalLM",
                                             "Qwen3MoeForCausalLM", "GPT2LMHeadModel",
                                             "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
                                             "GptOssForCausalLM",   "Gemma2ForCausalLM",     "Gemma3ForCausalLM",
                                             "Gemma3ForConditionalGeneration", "Phi3ForCausalLM", "Olmo2ForCausalLM",
                                             "GemmaForCausalLM",    "OPTForCausalLM",        "BloomForCausalLM",
                                             "GPTNeoXForCausalLM"};

// BLOOM has no position table (ALiBi) and its config no length: it trained on 2048 tokens
// (Le Scao et al. 2022, Table 3); `import-hf --seq-len` overrides.
constexpr std::int64_t kBloomSeqLen = 2048;

// Typed access to HF keys with errors that name the HF key (the file is the user's config.json).
struct Hf {
    const json& j;
    const std::string& file;
    std::string prefix;  ///< "text_config." when reading a multimodal config's language model

    bool has(const char* k) const { return j.contains(k) && !j.at(k).is_null(); }
    [[noreturn]] void fail(const std::string& k, const std::string& rule) const { throw InputError(file, prefix + k, rule); }

    std::int64_t pos(const char* k) const {
        if (!has(k)) fail(k, "is required");
        const json& v = j.at(k);
        if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > INT_MAX)
            fail(k, "must be a positive integer (got " + describe_json(v) + ")");
        return v.get<std::int64_t>();
    }
    std::int64_t pos_or(const char* k, std::int64_t dflt) const { return has(k) ? pos(k) : dflt; }
    std::int64_t nonneg_or(const char* k, std::int64_t dflt) const {
        if (!has(k)) return dflt;
        const json& v = j.at(k);
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > INT_MAX)
            fail(k, "must be a non-negative integer (got " + describe_json(v) + ")");
        return v.get<std::int64_t>();
    }
    bool flag_or(const char* k, bool dflt) const {
        if (!has(k)) return dflt;
        if (!j.at(k).is_boolean()) fail(k, "must be true or false (got " + describe_json(j.at(k)) + ")");
        return j.at(k).get<bool>();
    }
    double prob_or(const char* k, double dflt) const {
        if (!has(k)) return dflt;
        const json& v = j.at(k);
        if (!v.is_number() || !(v.get<double>() >= 0.0 && v.get<double>() < 1.0))
            fail(k, "must be a probability in [0, 1) (got " + describe_json(v) + ")");
        return v.get<double>();
    }
    std::string str_or(const char* k, const std::string& dflt) const {
        if (!has(k)) return dflt;
        if (!j.at(k).is_string()) fail(k, "must be a string (got " + describe_json(j.at(k)) + ")");
        return j.at(k).get<std::string>();
    }
};

// A gated MLP's activation: SiLU makes SwiGLU, any of HF's GELU forms GeGLU (Gemma's
// gelu_pytorch_tanh). Gemma names it hidden_activation, and keeps hidden_act beside it.
FfnKind gated_ffn(const Hf& hf) {
    const char* key = hf.has("hidden_activation") ? "hidden_activation" : "hidden_act";
    const std::string act = hf.str_or(key, "silu");
    if (act == "silu" || act == "swish") return FfnKind::swiglu;
    if (act.rfind("gelu", 0) == 0) return FfnKind::geglu;  // gelu, gelu_new, gelu_pytorch_tanh, gelu_fast
    hf.fail(key, "must be silu or a gelu form for a gated MLP (got \"" + act + "\")");
}

std::string supported_list() {
    std::string s;
    for (const auto& a : kSupported) s += (s.empty() ? "" : ", ") + a;
    return s;
}

std::string default_name(const Hf& hf) {
    std::string n = hf.str_or("_name_or_path", "");
    while (!n.empty() && n.back() == '/') n.pop_back();
    if (auto slash = n.find_last_of('/'); slash != std::string::npos) n = n.substr(slash + 1);
    if (!n.empty()) return n;
    std::filesystem::path p(hf.file);
    std::string stem = p.stem().string();
    // A downloaded model folder holds "config.json": the folder names the model.
    if ((stem == "config" || stem.empty()) && p.has_parent_path()) stem = p.parent_path().filename().string();
    return stem.empty() ? "imported" : stem;
}

// Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3 and Qwen3-MoE share one layout: pre-norm
// RMSNorm, RoPE, gated SiLU MLP (SwiGLU), untied embeddings by default, no linear biases. Qwen3
// drops Qwen2's QKV biases and adds an RMSNorm over each head's query and key (q_norm, k_norm).
ModelSpec llama_like(const Hf& hf, const std::string& arch) {
    ModelSpec m;
    m.hidden = hf.pos("hidden_size");
    m.layers = static_cast<int>(hf.pos("num_hidden_layers"));
    m.heads = static_cast<int>(hf.pos("num_attention_heads"));
    m.kv_heads = static_cast<int>(hf.pos_or("num_key_value_heads", m.heads));
    m.head_dim = hf.pos_or("head_dim", m.hidden % m.heads == 0 ? m.hidden / m.heads : 0);
    if (m.head_dim == 0) hf.fail("num_attention_heads", "does not divide hidden_size and no head_dim is given");
    m.ffn_hidden = hf.pos("intermediate_size");
    m.vocab = hf.pos("vocab_size");
    m.max_position = hf.pos_or("max_position_embeddings", 4096);
    m.ffn = gated_ffn(hf);
    m.norm = NormKind::rmsnorm;
    m.position = PositionKind::rope;
    m.tied_embeddings = hf.flag_or("tie_word_embeddings", false);
    m.linear_bias = hf.flag_or("mlp_bias", false);
    // Llama's attention_bias puts biases on q, k, v (and o); Qwen2 always has q, k, v biases.
    m.qkv_bias = arch.rfind("Qwen2", 0) == 0 ? true : hf.flag_or("attention_bias", false);
    // Qwen3 and OLMo 2 normalise the query and key before RoPE (q_norm, k_norm; OLMo 2's span all
    // heads, a few thousand parameters more than Qwen3's per-head norms).
    m.qk_norm = arch.rfind("Qwen3", 0) == 0 || arch == "Olmo2ForCausalLM";
    m.dropout = hf.prob_or("attention_dropout", 0.0);
    if (arch == "MixtralForCausalLM") {
        MoeSpec e;
        e.experts = static_cast<int>(hf.pos_or("num_local_experts", 8));
        e.top_k = static_cast<int>(hf.pos_or("num_experts_per_tok", 2));
        e.expert_ffn_hidden = m.ffn_hidden;
        m.moe = e;
    } else if (arch == "Qwen2MoeForCausalLM" || arch == "Qwen3MoeForCausalLM") {
        MoeSpec e;
        e.experts = static_cast<int>(hf.pos_or("num_experts", 60));
        e.top_k = static_cast<int>(hf.pos_or("num_experts_per_tok", 4));
        e.expert_ffn_hidden = hf.pos_or("moe_intermediate_size", m.ffn_hidden);
        e.moe_every = static_cast<int>(hf.pos_or("decoder_sparse_step", 1));
        // Dense layers at arbitrary indices have no Strata equivalent (moe.first_k_dense and
        // moe.moe_every place them); every released Qwen MoE leaves the list empty.
        if (hf.has("mlp_only_layers") && !(hf.j.at("mlp_only_layers").is_array() && hf.j.at("mlp_only_layers").empty()))
            hf.fail("mlp_only_layers", "must be empty: dense layers at chosen indices are not supported (use moe.first_k_dense / moe.moe_every in the Strata model)");
        // Qwen2-MoE has one shared expert of shared_expert_intermediate_size; Strata counts shared
        // experts in units of expert_ffn_hidden (Qwen1.5-MoE-A2.7B: 5632 = 4 x 1408).
        std::int64_t shared = hf.nonneg_or("shared_expert_intermediate_size", 0);
        if (shared % e.expert_ffn_hidden != 0)
            hf.fail("shared_expert_intermediate_size", "= " + std::to_string(shared) +
                                                           " is not a multiple of moe_intermediate_size = " +
                                                           std::to_string(e.expert_ffn_hidden));
        e.shared_experts = static_cast<int>(shared / e.expert_ffn_hidden);
        m.moe = e;
    }
    return m;
}

// DeepSeek-V2/V3: the Llama layout with multi-head latent attention (q_lora_rank null = no query
// compression, DeepSeek-V2-Lite), the first first_k_dense_replace layers dense, then MoE layers of
// n_routed_experts (+ n_shared_experts) of moe_intermediate_size every moe_layer_freq layers.
// head_dim is stored as v_head_dim (MLA's widths live in model.mla).
ModelSpec deepseek(const Hf& hf) {
    ModelSpec m;
    m.hidden = hf.pos("hidden_size");
    m.layers = static_cast<int>(hf.pos("num_hidden_layers"));
    m.heads = static_cast<int>(hf.pos("num_attention_heads"));
    m.kv_heads = m.heads;  // MLA: one key and value per head
    MlaSpec a;
    a.q_lora_rank = hf.nonneg_or("q_lora_rank", 0);
    a.kv_lora_rank = hf.pos("kv_lora_rank");
    a.qk_nope_head_dim = hf.pos("qk_nope_head_dim");
    a.qk_rope_head_dim = hf.pos("qk_rope_head_dim");
    a.v_head_dim = hf.pos("v_head_dim");
    m.mla = a;
    m.head_dim = a.v_head_dim;
    m.ffn_hidden = hf.pos("intermediate_size");
    m.vocab = hf.pos("vocab_size");
    m.max_position = hf.pos_or("max_position_embeddings", 4096);
    m.ffn = gated_ffn(hf);
    m.norm = NormKind::rmsnorm;
    m.position = PositionKind::rope;
    m.tied_embeddings = hf.flag_or("tie_word_embeddings", false);
    if (hf.flag_or("attention_bias", false)) hf.fail("attention_bias", "must be false for multi-head latent attention");
    m.dropout = hf.prob_or("attention_dropout", 0.0);
    // DeepSeek-V3's multi-token prediction modules (0 in V2 configs, absent before).
    m.mtp_depth = static_cast<int>(hf.nonneg_or("num_nextn_predict_layers", 0));
    if (hf.has("n_routed_experts")) {
        MoeSpec e;
        e.experts = static_cast<int>(hf.pos("n_routed_experts"));
        e.top_k = static_cast<int>(hf.pos_or("num_experts_per_tok", 1));
        e.expert_ffn_hidden = hf.pos_or("moe_intermediate_size", m.ffn_hidden);
        e.shared_experts = static_cast<int>(hf.nonneg_or("n_shared_experts", 0));
        e.moe_every = static_cast<int>(hf.pos_or("moe_layer_freq", 1));
        e.first_k_dense = static_cast<int>(hf.nonneg_or("first_k_dense_replace", 0));
        // Group-limited routing (V2's device-limited "group_limited_greedy", V3's node-limited
        // "noaux_tc"): n_group groups, each token's experts from its topk_group best groups. One
        // group, or topk_method "greedy" (V2-Lite), routes without the limit.
        const std::int64_t groups = hf.pos_or("n_group", 1);
        if (groups > 1 && hf.str_or("topk_method", "") != "greedy") {
            e.router_groups = static_cast<int>(groups);
            e.router_group_topk = static_cast<int>(hf.pos("topk_group"));
        }
        m.moe = e;
    }
    return m;
}


// gpt-oss: the Llama layout with every layer a MoE of num_local_experts SwiGLU experts of
// intermediate_size (top num_experts_per_tok; the clamped SwiGLU costed as SwiGLU), biases on the
// attention projections and the experts (attention_bias; written as linear_bias, which also puts
// them on the MLP), per-head attention sinks (64 scalars a layer, not counted) and a router bias.
ModelSpec gpt_oss(const Hf& hf) {
    ModelSpec m = llama_like(hf, "GptOssForCausalLM");
    m.linear_bias = hf.flag_or("attention_bias", true);
    m.qkv_bias = false;
    MoeSpec e;
    e.experts = static_cast<int>(hf.pos("num_local_experts"));
    e.top_k = static_cast<int>(hf.has("num_experts_per_tok") ? hf.pos("num_experts_per_tok") : hf.pos_or("experts_per_token", 4));
    e.expert_ffn_hidden = m.ffn_hidden;
    m.moe = e;
    return m;
}

// Gemma 1, 2 and 3: a gated GELU MLP (GeGLU: hidden_activation gelu_pytorch_tanh, or Gemma 1's
// hidden_act "gelu", which HF runs in the tanh form), tied embeddings by default, explicit
// head_dim; Gemma 2 and 3 put RMSNorm before and after each sub-layer (four norms a layer; two
// are counted), Gemma 3 adds q_norm/k_norm. Logit soft-capping has no parameters
// and its elementwise cost is not modelled.
ModelSpec gemma(const Hf& hf, bool gemma3) {
    ModelSpec m = llama_like(hf, gemma3 ? "Gemma3" : "Gemma2");
    m.tied_embeddings = hf.flag_or("tie_word_embeddings", true);
    m.qkv_bias = hf.flag_or("attention_bias", false);
    m.qk_norm = gemma3;
    return m;
}

// Multi-head attention without KV groups, head_dim = hidden / heads (GPT-2, OPT, BLOOM, GPT-NeoX),
// LayerNorm and biases; `heads_key` is named when heads do not divide the width.
ModelSpec mha_layout(const Hf& hf, std::int64_t hidden, std::int64_t layers, std::int64_t heads, const char* heads_key) {
    ModelSpec m;
    m.hidden = hidden;
    m.layers = static_cast<int>(layers);
    m.heads = static_cast<int>(heads);
    m.kv_heads = m.heads;
    if (m.hidden % m.heads != 0) hf.fail(heads_key, "does not divide the hidden size");
    m.head_dim = m.hidden / m.heads;
    m.norm = NormKind::layernorm;
    m.linear_bias = true;
    return m;
}

// GPT-2: learned positions, LayerNorm, GELU MLP of n_inner (default 4 x n_embd), biases
// everywhere, tied embeddings (HF's default for GPT-2).
ModelSpec gpt2(const Hf& hf) {
    ModelSpec m = mha_layout(hf, hf.pos_or("n_embd", 768), hf.pos_or("n_layer", 12), hf.pos_or("n_head", 12), "n_head");
    m.ffn_hidden = hf.pos_or("n_inner", 4 * m.hidden);
    m.vocab = hf.pos_or("vocab_size", 50257);
    m.max_position = hf.pos_or("n_positions", hf.pos_or("n_ctx", 1024));
    m.ffn = FfnKind::gelu;
    m.position = PositionKind::learned;
    m.tied_embeddings = hf.flag_or("tie_word_embeddings", true);
    m.dropout = hf.prob_or("resid_pdrop", 0.1);
    return m;
}

// OPT (Zhang et al. 2022): learned positions with OPTLearnedPositionalEmbedding's two extra rows,
// pre-LayerNorm (do_layer_norm_before; OPT-350m's post-LN is costed the same), a ReLU MLP of
// ffn_dim, biases (enable_bias), tied embeddings, dropout. OPT-350m projects its 512-wide
// embeddings to the hidden size (word_embed_proj_dim): not modelled, refused.
ModelSpec opt(const Hf& hf) {
    ModelSpec m = mha_layout(hf, hf.pos("hidden_size"), hf.pos("num_hidden_layers"), hf.pos("num_attention_heads"), "num_attention_heads");
    m.ffn_hidden = hf.pos("ffn_dim");
    m.vocab = hf.pos("vocab_size");
    m.max_position = hf.pos_or("max_position_embeddings", 2048) + 2;
    if (hf.pos_or("word_embed_proj_dim", m.hidden) != m.hidden)
        hf.fail("word_embed_proj_dim", "must equal hidden_size (OPT-350m's embedding projections are not modelled)");
    const std::string act = hf.str_or("activation_function", "relu");
    if (act != "relu") hf.fail("activation_function", "must be relu, OPT's (got \"" + act + "\")");
    m.ffn = FfnKind::relu;
    m.position = PositionKind::learned;
    m.tied_embeddings = hf.flag_or("tie_word_embeddings", true);
    m.linear_bias = hf.flag_or("enable_bias", true);
    m.dropout = hf.prob_or("dropout", 0.1);
    return m;
}

// BLOOM (BigScience 2022): ALiBi (no position table: position "none"), LayerNorm, a GELU MLP of
// 4h, biases, tied embeddings. Its extra LayerNorm after the embedding (2h parameters and a pass)
// is not counted. Older configs name the width n_embed.
ModelSpec bloom(const Hf& hf) {
    ModelSpec m = mha_layout(hf, hf.has("hidden_size") ? hf.pos("hidden_size") : hf.pos("n_embed"), hf.pos("n_layer"), hf.pos("n_head"), "n_head");
    m.ffn_hidden = 4 * m.hidden;
    m.vocab = hf.pos("vocab_size");
    m.max_position = kBloomSeqLen;
    m.ffn = FfnKind::gelu;
    m.position = PositionKind::none;
    m.tied_embeddings = hf.flag_or("tie_word_embeddings", true);
    m.dropout = hf.prob_or("hidden_dropout", 0.0);
    return m;
}

// GPT-NeoX and Pythia (Black et al. 2022; Biderman et al. 2023): RoPE on rotary_pct of each
// head, LayerNorm, a GELU MLP of intermediate_size, biases, untied embeddings. The parallel
// residual (use_parallel_residual: attention and MLP both read the layer's input) has the same
// matmuls and norms as the sequential layer Strata costs.
ModelSpec gpt_neox(const Hf& hf) {
    ModelSpec m = mha_layout(hf, hf.pos("hidden_size"), hf.pos("num_hidden_layers"), hf.pos("num_attention_heads"), "num_attention_heads");
    m.ffn_hidden = hf.pos_or("intermediate_size", 4 * m.hidden);
    m.vocab = hf.pos("vocab_size");
    m.max_position = hf.pos_or("max_position_embeddings", 2048);
    const std::string act = hf.str_or("hidden_act", "gelu");
    if (act.rfind("gelu", 0) != 0) hf.fail("hidden_act", "must be a gelu form, GPT-NeoX's (got \"" + act + "\")");
    m.ffn = FfnKind::gelu;
    m.position = PositionKind::rope;
    m.tied_embeddings = hf.flag_or("tie_word_embeddings", false);
    m.linear_bias = hf.flag_or("attention_bias", true);
    m.dropout = hf.prob_or("hidden_dropout", 0.0);
    return m;
}

/// The attention window and which layers use it (model.sliding_window, window_attn_skip_freq).
struct Window {
    std::int64_t tokens = 0;  ///< 0: every layer attends to the whole sequence
    int skip_freq = 0;        ///< every skip_freq-th layer attends to the whole sequence; 0: none does
};
Window sliding_window(const Hf& hf, const std::string& arch, int layers) {
    Window w;
    if (!hf.has("sliding_window") || hf.j.at("sliding_window").is_null()) return w;
    // Qwen2/3 carry a window they use only with use_sliding_window; Llama, DeepSeek and GPT-2 none.
    if (arch.rfind("Qwen", 0) == 0 && !hf.flag_or("use_sliding_window", false)) return w;
    if (arch.rfind("Llama", 0) == 0 || arch.rfind("Deepseek", 0) == 0 || arch == "GPT2LMHeadModel" || arch == "Olmo2ForCausalLM") return w;
    if (hf.has("layer_types")) {
        // gpt-oss, newer Gemma configs: per-layer "sliding_attention" / "full_attention". Strata
        // (and Megatron-Core's window_attn_skip_freq) take every N-th layer as a full one.
        const json& types = hf.j.at("layer_types");
        if (!types.is_array() || static_cast<int>(types.size()) != layers)
            hf.fail("layer_types", "must list one attention kind per layer (" + std::to_string(layers) + ")");
        std::vector<bool> full;
        for (const json& t : types) {
            if (!t.is_string() || (t.get<std::string>() != "sliding_attention" && t.get<std::string>() != "full_attention"))
                hf.fail("layer_types", "must hold \"sliding_attention\" or \"full_attention\" for each layer");
            full.push_back(t.get<std::string>() == "full_attention");
        }
        if (std::all_of(full.begin(), full.end(), [](bool f) { return f; })) return w;
        int freq = 0;  // the first full layer's 1-based number, if the pattern repeats with it
        for (int l = 0; l < layers && freq == 0; ++l)
            if (full[static_cast<std::size_t>(l)]) freq = l + 1;
        for (int l = 0; l < layers; ++l)
            if (full[static_cast<std::size_t>(l)] != (freq > 0 && (l + 1) % freq == 0))
                hf.fail("layer_types", "is not a pattern of every N-th layer attending to the whole sequence (model.window_attn_skip_freq): "
                                       "layer " + std::to_string(l) + " breaks it");
        w.skip_freq = freq;
    } else if (hf.has("sliding_window_pattern")) {  // Gemma 3: every N-th layer global
        w.skip_freq = static_cast<int>(hf.pos("sliding_window_pattern"));
    } else if (arch.rfind("Gemma2", 0) == 0) {  // even layers (0-based) sliding, odd ones global
        w.skip_freq = 2;
    }
    w.tokens = hf.pos("sliding_window");
    return w;
}

}  // namespace

ModelSpec model_from_hf_config_text(const std::string& text, const std::string& file) { return model_from_hf_config_text(text, file, {}); }

ModelSpec model_from_hf_config_text(const std::string& text, const std::string& file, const HfImportOptions& options) {
    json j;
    try {
        j = parse_json_text(text, file);
    } catch (const nlohmann::json::exception& e) {  // e.g. a number beyond double range
        throw InputError(file, "", std::string("is not valid JSON: ") + e.what());
    }
    if (!j.is_object()) throw InputError(file, "", "must be a JSON object (a Hugging Face config.json)");
    Hf top{j, file, ""};
    if (!top.has("architectures") || !j.at("architectures").is_array() || j.at("architectures").empty() ||
        !j.at("architectures")[0].is_string())
        top.fail("architectures", "must be a non-empty list naming the model class (supported: " + supported_list() + ")");
    const std::string arch = j.at("architectures")[0].get<std::string>();
    if (std::find(kSupported.begin(), kSupported.end(), arch) == kSupported.end())
        top.fail("architectures", "= \"" + arch + "\" is not supported (supported: " + supported_list() + ")");
    // Gemma 3's multimodal checkpoints hold the language model in text_config (the vision tower
    // is not imported).
    const bool nested = arch == "Gemma3ForConditionalGeneration";
    if (nested && !(j.contains("text_config") && j.at("text_config").is_object())) top.fail("text_config", "is required (the language model's config)");
    Hf hf{nested ? j.at("text_config") : j, file, nested ? "text_config." : ""};

    ModelSpec m = arch == "GPT2LMHeadModel"            ? gpt2(hf)
                  : arch == "OPTForCausalLM"           ? opt(hf)
                  : arch == "BloomForCausalLM"         ? bloom(hf)
                  : arch == "GPTNeoXForCausalLM"       ? gpt_neox(hf)
                  : arch.rfind("Deepseek", 0) == 0     ? deepseek(hf)
                  : arch == "GptOssForCausalLM"        ? gpt_oss(hf)
                  : arch.rfind("Gemma", 0) == 0        ? gemma(hf, arch.rfind("Gemma3", 0) == 0)
                                                       : llama_like(hf, arch);
    m.name = default_name(top);
    // OPT's table holds two rows beyond its positions (OPTLearnedPositionalEmbedding's offset).
    const std::int64_t positions = arch == "OPTForCausalLM" ? m.max_position - 2 : m.max_position;
    m.seq_len = options.seq_len > 0 ? options.seq_len : std::min(positions, kMaxDefaultSeqLen);
    m.description = "Imported from a Hugging Face config.json (" + arch + ")";
    if (arch == "BloomForCausalLM") m.description += "; ALiBi costed as no position table, the embedding LayerNorm not counted";
    if (arch == "GPTNeoXForCausalLM" && hf.flag_or("use_parallel_residual", true))
        m.description += "; the parallel residual costed as a sequential layer (the same matmuls and norms)";
    if (nested) m.description += "; the language model only, without the vision encoder";
    const Window window = sliding_window(hf, arch, m.layers);
    if (window.tokens > 0 && window.tokens < m.seq_len) {
        if (options.windows_as_full) {
            m.description += "; its sliding-window layers (window " + std::to_string(window.tokens) + ") are costed as full attention, an overestimate";
        } else {
            m.sliding_window = window.tokens;
            m.window_attn_skip_freq = window.skip_freq;
        }
    }
    // Run the result through the strict reader: every ModelSpec rule (kv_heads divides heads,
    // top_k <= experts, ...) applies to imported models too.
    return model_from_json_text(to_json_text(m), file);
}

}  // namespace strata::sim
