// The cpu backend's kernels: fp32, single-threaded (each rank is a thread), deterministic for a
// given shape. Row-major tensors: activations [tokens, features], weights [out, in] as the flat
// parameter buffer holds them. Formulas follow llm.c's reference kernels; their gradients are
// checked against finite differences through the whole model (tests/runtime/test_runtime.cpp).
// Public so that the profiler measures the kernels the runtime runs (profiler/src/host_bench.cpp).
#pragma once
#include <cstdint>

#include "strata/runtime/dropout.hpp"

namespace strata::runtime::cpu {

using i64 = std::int64_t;
struct Positions;

// y[T, N] = x[T, K] w[N, K]^T (+ b[N])
void matmul_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 K, i64 N);
// dx[T, K] = dy[T, N] w[N, K]
void matmul_dgrad(float* dx, const float* dy, const float* w, i64 T, i64 K, i64 N);
// dw[N, K] += dy[T, N]^T x[T, K]; db[N] += sum_t dy[t, :] (db may be null)
void matmul_wgrad(float* dw, float* db, const float* x, const float* dy, i64 T, i64 K, i64 N);
// db[N] += sum over rows of d[T, N]
void bias_grad(float* db, const float* d, i64 T, i64 N);

// LayerNorm (b != null) or RMSNorm (b == null) over rows of width C, eps 1e-5.
void norm_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 C);
// dx = residual (may be null) + the norm's input gradient; dw += ..., db += ... (db may be null).
void norm_backward(float* dx, float* dw, float* db, const float* x, const float* dy, const float* w,
                   const float* residual, bool layernorm, i64 T, i64 C);

// GELU (tanh form, GPT-2) and a gated MLP's act(gate) * up over [gate | up] halves of width F:
// SwiGLU's SiLU gate, GeGLU's GELU (tanh form, Gemma's gelu_pytorch_tanh).
enum class Gate { silu, gelu };
void gelu_forward(float* y, const float* x, i64 n);
void gelu_backward(float* dx, const float* x, const float* dy, i64 n);
void glu_forward(float* y, const float* x, i64 T, i64 F, Gate gate);
/// Squared ReLU (Nemotron-4): max(x, 0)^2.
void relu2_forward(float* y, const float* x, i64 n);
void relu2_backward(float* dx, const float* x, const float* dy, i64 n);
/// ReLU; its backward reads the output y (the lowering keeps y, not x).
void relu_forward(float* y, const float* x, i64 n);
void relu_backward(float* dx, const float* y, const float* dy, i64 n);
void glu_backward(float* dx, const float* x, const float* dy, i64 T, i64 F, Gate gate);

// out = a + b (+ bias broadcast over rows of width C)
void add(float* out, const float* a, const float* b, const float* bias, i64 T, i64 C);

/// Rotary position embedding in place on the query and key heads of a qkv row
/// [q: hq x d | k: hkv x d | v: hkv x d], rotate-half form, base 10000, at where(row).
/// inverse = the backward (rotation by -theta).
void rope(float* qkv, i64 T, const Positions& where, i64 hq, i64 hkv, i64 d, bool inverse);

/// cols columns of rows rows: dst[r * dst_stride + c] = src[r * src_stride + c] (a column block
/// split off a wider row, or placed into one).
void copy_columns(float* dst, i64 dst_stride, const float* src, i64 src_stride, i64 cols, i64 rows);
/// Multi-head latent attention's RoPE with the assembly of the attention's rows (mla_kernels.cpp):
/// from the query projection q [T, heads x (nope + rope)], the key/value projection kv
/// [T, heads x (nope + dv)] (a head's key part, then its value) and the rope key k_rope [T, rope]
/// that all heads share, the rows qkv [T, heads x (nope + rope) | heads x (nope + rope) | heads x dv]
/// with the query's and the key's rope parts rotated (rope's form and frequencies, d = rope).
void mla_rope_forward(float* qkv, const float* q, const float* kv, const float* k_rope, i64 T, const Positions& where, i64 heads, i64 nope,
                      i64 rope, i64 dv);
/// Its backward: the rows' gradient back to the three, the rope parts rotated back and the shared
/// key's gradient summed over the heads.
void mla_rope_backward(float* dq, float* dkv, float* dk_rope, const float* dqkv, i64 T, const Positions& where, i64 heads, i64 nope,
                       i64 rope, i64 dv);

/// Causal attention over sequences of `seq` tokens (T = batch x seq rows), GQA by head groups.
/// out [T, hq x d], lse [T, hq]. With dropout on, the probabilities are dropped after the softmax
/// (lse stays the undropped one), as FlashAttention does; the backward redraws the same mask.
/// window > 0 (model.sliding_window): a query sees itself and the window - 1 keys before it.
void attention_forward(float* out, float* lse, const float* qkv, i64 T, i64 seq, i64 hq, i64 hkv, i64 d, const Dropout& drop = {},
                       i64 window = 0);
void attention_backward(float* dqkv, const float* qkv, const float* out, const float* lse, const float* dout, i64 T,
                        i64 seq, i64 hq, i64 hkv, i64 d, const Dropout& drop = {}, i64 window = 0);
/// Unfused attention's probabilities, as Megatron's CoreAttention keeps them for its backward:
/// probs [T / seq x hq x seq, seq] (sequence, head, query, key), softmax(q k / sqrt(d)) from the
/// forward's log-sum-exp, 0 where a key is not visible; with dropout on (mask and dropped not
/// null) each element's dropout factor (0 or 1 / (1 - p), the attention kernels' own draw) and
/// the dropped probability.
void attention_probs(float* probs, float* mask, float* dropped, const float* qkv, const float* lse, i64 T, i64 seq, i64 hq, i64 hkv,
                     i64 d, const Dropout& drop = {}, i64 window = 0);
/// The gradient of the probabilities the value bmm read (its backward's dO V^T), laid out as
/// attention_probs: dprobs[seq, head, query, key] = dout[query, head] . v[key, head's group], for
/// every key (the bmm does not know the mask). Unfused attention's backward forms it for the
/// softmax's; the fused kernels here recompute what they need and leave it as the record of that
/// transient (its size is what the memory model counts).
void attention_probs_grad(float* dprobs, const float* qkv, const float* dout, i64 T, i64 seq, i64 hq, i64 hkv, i64 d);

/// Where a rank's rows sit in their sequences. Without context parallelism row t is at position
/// t % seq. With it (cp ranks, load-balanced as Megatron splits them) a sequence is cut into 2 cp
/// chunks and rank c holds chunks c and 2cp - 1 - c: its seq / cp rows of a sequence start with
/// chunk c's.
struct Positions {
    i64 seq = 0;           ///< whole sequence length
    int cp = 1, rank = 0;  ///< context-parallel size and this block's owner
    /// Attention's queries (the block kernels read it from qpos): a query at position p sees the
    /// keys at p - window + 1 .. p (model.sliding_window); 0: every key up to p.
    i64 window = 0;
    STRATA_HD i64 local() const { return seq / cp; }  ///< rows of one sequence on a rank
    STRATA_HD i64 operator()(i64 row) const {
        if (cp == 1) return row % seq;
        const i64 L = seq / (2 * cp), i = row % local();
        return (i < L ? rank : 2 * cp - 1 - rank) * L + i % L;
    }
};

/// Context parallelism: causal attention of a rank's queries against one block of keys and values
/// (its own, or a block from `kpos.rank` passed along the ring). q rows live in qkv (stride row);
/// kv rows hold [k: hkv x d | v: hkv x d] at `kv` with stride kv_stride. merge = false writes out
/// and lse; true folds this block into them (online softmax). Queries with no visible key in the
/// block are left as they are.
void attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, i64 kv_stride, const Positions& qpos,
                             const Positions& kpos, i64 T, i64 hq, i64 hkv, i64 d, bool merge, const Dropout& drop = {});
/// Its backward against the final out and lse: dq added into dqkv's query columns (accumulate) or
/// written (with the block's own dk, dv into dqkv's key and value columns when dkv is null);
/// dkv (stride kv_stride) receives the block's key and value gradients otherwise.
void attention_block_backward(float* dqkv, float* dkv, i64 kv_stride, const float* qkv, const float* kv, const float* out,
                              const float* lse, const float* dout, const Positions& qpos, const Positions& kpos, i64 T, i64 hq,
                              i64 hkv, i64 d, bool accumulate, const Dropout& drop = {});

/// Hidden-state dropout over rows of width C (dropout.hpp): row r is token where(drop.row0 + r)
/// of sequence drop.sample0 + (drop.row0 + r) / where.local(). mask receives each element's
/// factor (0 or 1 / (1 - p)), kept for the backward.
/// y = x * mask (the embedding's dropout; y may be x).
void dropout_forward(float* y, float* mask, const float* x, i64 T, i64 C, const Dropout& drop, const Positions& where);
/// out = a + mask * (b + bias): Megatron's bias-dropout-add of a residual branch (bias may be null).
void dropout_add(float* out, float* mask, const float* a, const float* b, const float* bias, i64 T, i64 C, const Dropout& drop,
                 const Positions& where);
/// out = a * b, elementwise (a gradient through a kept mask; out may be a).
void mul(float* out, const float* a, const float* b, i64 n);

/// Vocab-parallel embedding: rows of `table` hold token ids [first, first + rows).
void embedding_forward(float* out, const float* tokens, const float* table, i64 first, i64 rows, i64 T, i64 C);
void embedding_backward(float* dtable, const float* tokens, const float* dout, i64 first, i64 rows, i64 T, i64 C);
/// out[t] = e[row0 + t] + pos[where(row0 + t)] for t < rows_out; dpos[where(t)] += d[t].
void position_forward(float* out, const float* e, const float* pos, i64 row0, i64 rows_out, const Positions& where, i64 C);
void position_backward(float* dpos, const float* d, i64 T, const Positions& where, i64 C);

/// Vocab-parallel cross-entropy. stats[t] = {max logit, sum exp(logit - max), target logit if this
/// shard holds the target else 0}; tokens[t] = {input, target}.
void loss_stats(float* stats, const float* logits, const float* tokens, i64 first, i64 T, i64 V);
/// From `n` shards' stats (shard-major [n][T][3]): per-token loss, and log-sum-exp into lse (may be null).
void loss_combine(float* loss, float* lse, const float* stats, i64 n, i64 T);
/// dlogits = (softmax - onehot) * scale, with lse per token.
void loss_backward(float* dlogits, const float* logits, const float* tokens, const float* lse, i64 first, i64 T, i64 V,
                   float scale);

// Mixture of experts (moe_kernels.cpp). routing [T, 2k] holds each token's top_k choices: the
// expert ids (exact in a float), then their weights.
/// The top k of each token's E logits (ties to the lower id), best first, and the softmax over
/// the chosen logits (Mixtral's; Megatron-Core's default router, softmax after top-k). With
/// `groups` > 0 (DeepSeek's group-limited routing, Megatron-Core's group_limited_topk) the E
/// experts form equal groups, each scored by the sum of its best k / group_topk logits, and the
/// top k come from the token's group_topk best groups only.
void moe_route(float* routing, const float* logits, i64 T, i64 E, i64 k, i64 groups = 0, i64 group_topk = 0);
/// NeMo AutoModel's FakeBalancedGate (model.moe.routing round_robin): token t takes experts
/// (t k + j) mod E, j < k, each at weight 1/k; no logits.
void moe_route_round_robin(float* routing, i64 T, i64 E, i64 k);
/// Token dropping (GShard, Switch; Megatron-Core's capacity factor with its "probs" policy): an
/// expert keeps the `capacity` choices of highest weight (ties to the earlier token); a dropped
/// choice's id becomes -(id + 1), its weight stays (the router's backward needs it).
void moe_drop(float* routing, i64 T, i64 E, i64 k, i64 capacity);
/// Megatron-Core's get_capacity: ceil(T k / E x factor); 0 without a factor (dropless).
i64 moe_capacity(i64 T, i64 E, i64 k, double capacity_factor);
/// dlogits [T, E] from the weights' gradient dprobs [T, k]; zero off the chosen experts.
void moe_route_backward(float* dlogits, const float* routing, const float* dprobs, i64 T, i64 E, i64 k);
/// Expert order (by expert, then token): the row of each (token, choice) in pos [T k], and the
/// rows of each expert in counts [E]; a dropped choice's row is -1. With a capacity every expert
/// has exactly `capacity` rows (padded, GShard's [E, C] dispatch); without, the kept ones.
/// Throws std::out_of_range on an id outside [0, E).
void moe_order(i64* pos, i64* counts, const float* routing, i64 T, i64 E, i64 k, i64 capacity = 0);
/// xp[pos[t k + j]] = x[t]: each token copied to the rows of its choices (row -1: dropped). The
/// moves leave rows no choice names (a capacity's padding) as they are: the caller zeroes them.
void moe_permute(float* xp, const float* x, const i64* pos, i64 T, i64 k, i64 C);
/// dx[t] = the sum of its k rows of dxp.
void moe_permute_backward(float* dx, const float* dxp, const i64* pos, i64 T, i64 k, i64 C);
/// y[t] = sum_j weight_j ye[pos[t k + j]].
void moe_unpermute(float* y, const float* ye, const float* routing, const i64* pos, i64 T, i64 k, i64 C);
/// dye[pos[t k + j]] = weight_j dy[t]; dprobs[t, j] = dy[t] . ye[pos[t k + j]] (dprobs null: constant weights).
void moe_unpermute_backward(float* dye, float* dprobs, const float* dy, const float* ye, const float* routing, const i64* pos, i64 T,
                            i64 k, i64 C);

/// Each of n floats to the nearest bfloat16 (ties to even; NaN stays NaN, infinities stay): how
/// the cpu backend holds a 2-byte tensor of a bf16 plan, computing on it in fp32 as a GPU does.
void round_bf16(float* p, i64 n);
/// Each of n floats to the nearest IEEE half (binary16: ties to even, subnormals down to 2^-24,
/// beyond 65504 +-infinity; NaN stays NaN): a 2-byte tensor of an fp16 plan.
void round_fp16(float* p, i64 n);
/// x as an IEEE half's bit pattern, rounded as round_fp16 rounds (the ssd file's fp16 weights).
std::uint16_t fp16_bits(float x);
/// The float an IEEE half's bit pattern holds (exact: every half is a float).
float from_fp16_bits(std::uint16_t h);

/// FP8 training's two formats (OCP FP8, as Transformer Engine's HYBRID recipe uses them): E4M3
/// (bias 7, 3 mantissa bits, largest 448, no infinities) for forward GEMM operands, E5M2 (bias 15,
/// 2 mantissa bits, largest 57344) for the gradients a backward GEMM reads.
enum class Fp8 { e4m3, e5m2 };
/// The largest finite value of the format.
float fp8_max(Fp8 f);
/// Each of n floats to the nearest value of the format (ties to even, subnormals included),
/// saturating beyond its largest value as the hardware's satfinite conversion does; NaN stays NaN.
void round_fp8(float* p, i64 n, Fp8 f);
/// Per-tensor current scaling (Transformer Engine's Float8CurrentScaling, torchao's tensorwise
/// recipe): scale = fp8_max / amax over the n values (1 for an all-zero or non-finite amax), and
/// dst = round(src x scale) / scale, the value an FP8 GEMM multiplies after its scale_inv. dst may
/// be src. Returns the scale.
float fp8_quantize(float* dst, const float* src, i64 n, Fp8 f);

/// AdamW on n elements; step counts from 1. decay: per-element flag (null: none decays).
void adamw(float* p, float* m, float* v, const float* g, const unsigned char* decay, i64 n, float lr, float b1, float b2,
           float eps, float wd, int step);

}  // namespace strata::runtime::cpu
