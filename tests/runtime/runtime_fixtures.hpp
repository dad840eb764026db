// Tiny models and plans for the runtime's tests: a GPT (learned positions, LayerNorm, GELU,
// biases, tied embeddings) and a Llama (RoPE, RMSNorm, SwiGLU, GQA, untied, no biases), small
// enough that every parallel variant runs on two cores in a second.
#pragma once
#include <random>
#include <string>
#include <vector>

#include "strata/lowering/spec.hpp"
#include "strata/runtime/runtime.hpp"

namespace strata::test {

/// n floats drawn uniformly from [lo, hi) by a seeded Mersenne twister: a kernel test's inputs.
inline std::vector<float> uniform_floats(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = u(g);
    return v;
}

inline sim::ModelSpec tiny_gpt(int layers = 2) {
    sim::ModelSpec m;
    m.name = "tiny-gpt";
    m.layers = layers;
    m.hidden = 32;
    m.heads = 4;
    m.kv_heads = 4;
    m.head_dim = 8;
    m.ffn_hidden = 64;
    m.ffn = sim::FfnKind::gelu;
    m.vocab = 64;
    m.seq_len = 8;
    m.max_position = 8;
    m.norm = sim::NormKind::layernorm;
    m.position = sim::PositionKind::learned;
    m.tied_embeddings = true;
    m.linear_bias = true;
    return m;
}

inline sim::ModelSpec tiny_llama(int layers = 4) {
    sim::ModelSpec m;
    m.name = "tiny-llama";
    m.layers = layers;
    m.hidden = 32;
    m.heads = 4;
    m.kv_heads = 2;
    m.head_dim = 8;
    m.ffn_hidden = 48;
    m.ffn = sim::FfnKind::swiglu;
    m.vocab = 64;
    m.seq_len = 8;
    m.norm = sim::NormKind::rmsnorm;
    m.position = sim::PositionKind::rope;
    m.tied_embeddings = false;
    return m;
}

/// The tiny Llama with routed experts (Mixtral-style: 4 experts, top 2, no shared expert) in
/// every layer but the first (DeepSeek's first_k_dense).
inline sim::ModelSpec tiny_moe(int layers = 3) {
    sim::ModelSpec m = tiny_llama(layers);
    m.name = "tiny-moe";
    sim::MoeSpec e;
    e.experts = 4;
    e.top_k = 2;
    e.expert_ffn_hidden = 24;
    e.first_k_dense = 1;
    m.moe = e;
    return m;
}

/// A tiny DeepSeek-style model: query and key/value latents (without q_lora the query projection
/// reads the hidden states), a decoupled RoPE key of 4, value heads (6) narrower than the query's
/// and key's (8 + 4).
inline sim::ModelSpec tiny_mla(bool q_lora, int layers = 2) {
    sim::ModelSpec m = tiny_llama(layers);
    m.name = q_lora ? "tiny-mla" : "tiny-mla-q";
    sim::MlaSpec a;
    a.q_lora_rank = q_lora ? 24 : 0;
    a.kv_lora_rank = 16;
    a.qk_nope_head_dim = 8;
    a.qk_rope_head_dim = 4;
    a.v_head_dim = 6;
    m.mla = a;
    m.kv_heads = m.heads;
    return m;
}

/// DeepSeek's layer in small: MLA, then after a dense first layer 4 routed experts (top 2) and a
/// shared one.
inline sim::ModelSpec tiny_mla_moe() {
    sim::ModelSpec m = tiny_mla(true);
    m.name = "tiny-mla-moe";
    m.moe = tiny_moe().moe;
    m.moe->shared_experts = 1;
    return m;
}

inline sim::ClusterSpec cpu_cluster(int ranks) {
    sim::ClusterSpec c;
    c.name = "test-cpu";
    c.gpu = "cpu";
    c.nodes = 1;
    c.gpus_per_node = ranks;
    return c;
}

/// fp32, micro-batches of 2 sequences, 8 sequences a step.
inline sim::PlanSpec cpu_plan(int tp = 1, int pp = 1, int dp = 1) {
    sim::PlanSpec p;
    p.tp = tp;
    p.pp = pp;
    p.dp = dp;
    p.micro_batch = 2;
    p.global_batch = 8;
    p.precision = sim::Precision::fp32;
    p.flash_attention = true;
    return p;
}

/// cp 2 by the given exchange (the ring, the K/V all-gather, Ulysses), over tp ranks with SP.
inline sim::PlanSpec cp2_plan(sim::CpCommType exchange, int tp = 1) {
    sim::PlanSpec p = cpu_plan(tp);
    p.cp = 2;
    p.cp_comm_type = exchange;
    p.sequence_parallel = tp > 1;
    return p;
}

/// The loss of each of `steps` steps.
inline std::vector<double> losses(const sim::ModelSpec& m, const sim::PlanSpec& p, int steps, runtime::RunOptions o = {}) {
    o.lr = 3e-3;
    runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
    std::vector<double> out;
    for (int i = 0; i < steps; ++i) out.push_back(s.step().loss);
    return out;
}

// Two steps, a checkpoint, two more; then a session resumed from the checkpoint: the losses of
// its two steps against those of the first session's last two (bitwise), and its step count.
struct Resumed {
    std::vector<double> before, after;
    int steps_done = 0;
};
inline Resumed save_and_resume(const sim::ModelSpec& m, const sim::PlanSpec& p, runtime::RunOptions o, const std::string& dir) {
    Resumed out;
    {
        runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
        s.step();
        s.step();
        s.save(dir);
        out.before.push_back(s.step().loss);
        out.before.push_back(s.step().loss);
    }
    o.resume_dir = dir;
    runtime::Session r(m, cpu_cluster(p.gpus()), p, o);
    out.steps_done = r.steps_done();
    out.after.push_back(r.step().loss);
    out.after.push_back(r.step().loss);
    return out;
}

}  // namespace strata::test
