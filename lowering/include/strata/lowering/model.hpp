// Model maths: exact parameter counts and FLOP counts of a decoder-only Transformer (ModelSpec).
// Pure functions of the spec; no parallelism here (per-rank splits live in tensors.hpp) and no
// hardware. Formulas and their sources: docs/formulas.md (Narayanan et al. SC21 §5.1 for the
// Megatron-LM FLOP and parameter formulas, which this counting reproduces for GPT models).
#pragma once
#include <cstdint>
#include <vector>

#include "strata/lowering/spec.hpp"

namespace strata::sim {

/// Parameters of one transformer layer, by block (exact counts, biases included).
struct LayerParams {
    std::int64_t attention = 0;  ///< Q, K, V, output projection (+ biases)
    std::int64_t mlp = 0;        ///< dense MLP of a non-MoE layer (+ biases)
    std::int64_t norms = 0;      ///< the two norms (layernorm: weight+bias; rmsnorm: weight)
    std::int64_t router = 0;     ///< MoE gate (h x experts, no bias)
    std::int64_t experts = 0;    ///< routed experts, all of them
    std::int64_t shared_experts = 0;
    std::int64_t expert_one = 0; ///< one routed expert
    std::int64_t total() const { return attention + mlp + norms + router + experts + shared_experts; }
};

/// Whole-model parameter counts. `active` = parameters one token touches (MoE: top_k routed
/// experts instead of all of them); equals `total` for dense models.
struct ParamCounts {
    std::int64_t embedding = 0;   ///< token embedding, vocab x hidden
    std::int64_t position = 0;    ///< learned position table, max_position x hidden (0 for RoPE)
    std::int64_t layers = 0;      ///< all transformer layers
    std::int64_t attention = 0, mlp = 0, norms = 0, router = 0, experts = 0, shared_experts = 0;
    std::int64_t final_norm = 0;
    std::int64_t lm_head = 0;     ///< 0 when tied to the embedding
    std::int64_t mtp = 0;         ///< multi-token prediction modules (embedding and head are shared)
    std::int64_t total = 0;
    std::int64_t active = 0;
    std::int64_t non_embedding() const { return total - embedding - position - lm_head; }
};

/// Parameters of layer `layer` (0-based; decides dense vs MoE through ModelSpec::layer_is_moe).
LayerParams layer_params(const ModelSpec& m, int layer);

/// The decoder layer an MTP module's transformer layer is built like: the last one (Megatron-Core
/// builds the MTP block from the decoder's layer spec; DeepSeek-V3's is an MoE layer).
inline int mtp_layer_kind(const ModelSpec& m) { return m.layers - 1; }
/// One MTP module's own weights besides its layer: the 2h -> h projection and three norms (the
/// embedding's, the hidden state's and the module's final norm).
std::int64_t mtp_extra_params(const ModelSpec& m);
ParamCounts param_counts(const ModelSpec& m);
/// Only the parameters outside the layers (embedding, position table, final norm, lm head; the
/// layer fields and totals stay 0): what a pipeline stage adds to its layers, without a walk over them.
ParamCounts edge_param_counts(const ModelSpec& m);
/// The same with the vocabulary padded as the plan lays it out (padded_vocab): what a rank holds.
ParamCounts edge_param_counts(const ModelSpec& m, const PlanSpec& p);

/// Rows of the embedding table and the output layer under plan `p`: model.vocab rounded up to a
/// multiple of p.vocab_divisible_by x p.tp (Megatron-LM's _vocab_size_with_padding; Megatron-Bridge's
/// calculate_padded_vocab_size). The padded rows are trained and take part in the softmax, but no
/// token is ever one of them (the data stay within model.vocab).
std::int64_t padded_vocab(const ModelSpec& m, const PlanSpec& p);

/// Width of the attention projection: heads x head_dim (head_dim 0 = hidden / heads).
std::int64_t q_width(const ModelSpec& m);
std::int64_t kv_width(const ModelSpec& m);
std::int64_t head_dim_of(const ModelSpec& m);
std::int64_t expert_ffn_of(const ModelSpec& m);
int kv_heads_of(const ModelSpec& m);

/// Per-head widths of the attention scores (q.k) and values: head_dim for MHA/GQA; MLA
/// qk_nope_head_dim + qk_rope_head_dim and v_head_dim.
std::int64_t qk_head_dim_of(const ModelSpec& m);
std::int64_t v_head_dim_of(const ModelSpec& m);

/// One linear layer of the attention block (whole model, before TP): in x out weights.
struct AttentionLinear {
    const char* name = "";
    std::int64_t in = 0, out = 0;
    bool tp_split = true;    ///< false: replicated on every TP rank, fed the sequence shard (MLA's down-projections)
    bool fp8_cast = true;    ///< its input is cast to FP8 on its own (false: a fused norm writes it in FP8)
};
/// The attention block's linears in forward order; the output projection is the last. MHA/GQA:
/// qkv, proj. MLA (Megatron-Core MLASelfAttention): q_down (or q without a query rank), kv_down
/// (latent + the shared RoPE key), q_up, kv_up (keys' no-RoPE part and values), proj.
std::vector<AttentionLinear> attention_linears(const ModelSpec& m);
/// One matmul of a dense layer's forward as torchtitan's op-level SAC counts them (aten.mm in
/// forward order, torchtitan models/llama3/model.py: wq, wk, wv, wo, then w1, w3, w2 for SwiGLU,
/// or fc1, fc2): in x out weights. saved = odd position (1st, 3rd, ...), whose output the policy
/// keeps; the even ones are rerun in the backward (activation_checkpoint.py, mm_count % 2 == 0).
struct SacMatmul {
    const char* name = "";
    std::int64_t in = 0, out = 0;
    bool saved = false;
};
/// The matmuls of a layer's checkpoint in call order, the odd ones kept (torchtitan's op-level
/// SAC); a MoE layer's are its attention's and its shared experts'.
std::vector<SacMatmul> op_sac_matmuls(const ModelSpec& m, bool moe_layer = false);
/// A row-parallel one under TP (wo, w2 / fc2, the shared experts' w2 / fc2): its output is the
/// whole partial sum, reduce-scattered after.
bool sac_row_parallel(const SacMatmul& mm);
/// The attention block's own norms, replicated over TP: MLA's latent norms (q_layernorm over
/// q_lora_rank, kv_layernorm over kv_lora_rank), or QK-norm's two head_dim-wide norms, one for all
/// query heads and one for all key heads (model.qk_norm).
std::int64_t attention_norm_params(const ModelSpec& m);

/// Score and value matmuls of attention (QK^T and PV) of one layer for one sequence of `seq`
/// tokens: 2 flops x seq^2 x heads x (qk_head_dim + v_head_dim). `causal_halved`:
/// count only the lower triangle (what a causal flash kernel executes); Megatron's formula counts
/// the full square (causal_halved = false).
double attention_flops(const ModelSpec& m, std::int64_t seq, bool causal_halved);

/// Forward FLOPs of one layer for `seqs` sequences of m.seq_len tokens.
struct LayerFlops {
    double qkv = 0, attention = 0, proj = 0, mlp = 0, router = 0;
    double other = 0;  ///< non-matmul work: norms, softmax, activation, bias, residual (estimate)
    double matmul() const { return qkv + attention + proj + mlp + router; }
    double total() const { return matmul() + other; }
};
LayerFlops layer_forward_flops(const ModelSpec& m, int layer, double seqs, bool causal_halved = false);

/// Forward FLOPs of the whole model for `seqs` sequences.
struct ForwardFlops {
    double layers_matmul = 0;  ///< all layers' matmuls (incl. attention scores/values, router)
    double attention_core = 0; ///< the QK^T and PV part of layers_matmul
    double router = 0;         ///< the routers' GEMMs, in layers_matmul and mtp
    double logits = 0;         ///< lm head: 2 x tokens x hidden x vocab
    double mtp = 0;            ///< MTP modules' matmuls: layer (incl. its attention core), projection, head
    double mtp_other = 0;      ///< their non-matmul part (also counted in `other`)
    double other = 0;          ///< non-matmul estimate (norms, softmax, activations, biases, residuals)
    double matmul() const { return layers_matmul + logits + mtp; }
    double total() const { return matmul() + other; }
};
ForwardFlops forward_flops(const ModelSpec& m, double seqs, bool causal_halved = false);
/// The share of a whole-context causal layer's attention scores that layer `layer` computes under
/// model.sliding_window (1 for an unwindowed layer): (2w - w(w-1)/s) / s.
double window_fraction(const ModelSpec& m, int layer);

/// One training step's FLOPs (forward + backward = 2 x forward + recomputation) for `batch_seqs`
/// sequences. Recompute::full re-runs each layer's forward (not the logits); selective re-runs the
/// attention core. `matmul_only` reproduces Megatron's formula (which counts only matmuls).
struct StepFlops {
    double forward = 0, backward = 0, recompute = 0;
    double total() const { return forward + backward + recompute; }
};
StepFlops step_flops(const ModelSpec& m, double batch_seqs, Recompute r, bool causal_halved = false,
                     bool matmul_only = false);
double flops_per_step(const ModelSpec& m, double batch_seqs, Recompute r, bool causal_halved = false);

/// Model FLOPs per token for MFU (forward+backward, no recomputation, matmuls only).
double model_flops_per_token(const ModelSpec& m, bool causal_halved = false);

/// Megatron-LM's closed forms (Narayanan et al., SC21, §5.1), for GPT models (4h MLP, tied
/// embedding): F = 72 B s l h^2 (1 + s/6h + V/12lh) without recompute, 96 B s l h^2 (1 + s/6h +
/// V/16lh) with full recompute; P = 12 l h^2 (1 + 13/12h + (V+s)/12lh).
double megatron_flops_per_step(const ModelSpec& m, double batch_seqs, bool full_recompute);
double megatron_param_count(const ModelSpec& m);
/// Megatron-Core's and Megatron-Bridge's "model TFLOP/s" count (2025-): three times the forward
/// matmuls with the causal attention core halved, the top-k routed and the shared experts, the
/// logits and MTP modules, but not the router's GEMM; no recomputation.
double megatron_core_flops_per_step(const ModelSpec& m, double batch_seqs);

}  // namespace strata::sim
