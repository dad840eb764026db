// A GPT-shaped ModelSpec for tests: the shape only (layers, hidden, heads of head_dim, FFN = 4h,
// vocab, sequence). Everything else keeps ModelSpec's defaults; each test sets what its reference
// needs (biases, tied embeddings, dropout) where it builds the model, so the expectation stays in view.
#pragma once
#include <cstdint>
#include <string>

#include "strata/lowering/spec.hpp"

namespace strata::test {

inline sim::ModelSpec gpt_shape(const std::string& name, int layers, std::int64_t hidden, int heads, std::int64_t vocab,
                                std::int64_t seq_len) {
    sim::ModelSpec m;
    m.name = name;
    m.layers = layers;
    m.hidden = hidden;
    m.heads = heads;
    m.kv_heads = heads;
    m.head_dim = hidden / heads;
    m.ffn_hidden = 4 * hidden;
    m.vocab = vocab;
    m.seq_len = seq_len;
    return m;
}

/// A MoE block for a test model: `experts` routed experts of width `expert_ffn_hidden` (0 = the
/// model's FFN width), top-`top_k` routing; every other field keeps MoeSpec's default.
inline sim::MoeSpec moe_spec(int experts, int top_k, std::int64_t expert_ffn_hidden = 0) {
    sim::MoeSpec moe;
    moe.experts = experts;
    moe.top_k = top_k;
    moe.expert_ffn_hidden = expert_ffn_hidden;
    return moe;
}

/// A Llama-style MoE model (SwiGLU, RMSNorm, RoPE) of `experts` experts of width `expert_ffn_hidden`,
/// top-`top_k`, every layer MoE; the vocabulary 32000.
inline sim::ModelSpec llama_moe(int layers, std::int64_t hidden, int heads, std::int64_t seq, int experts, int top_k,
                                std::int64_t expert_ffn_hidden) {
    sim::ModelSpec m = gpt_shape("moe", layers, hidden, heads, 32000, seq);
    m.ffn = sim::FfnKind::swiglu;
    m.norm = sim::NormKind::rmsnorm;
    m.position = sim::PositionKind::rope;
    m.moe = moe_spec(experts, top_k, expert_ffn_hidden);
    return m;
}

}  // namespace strata::test
