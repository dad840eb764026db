// The one list of every tensor (llm.c's fill_in_*_sizes): what a layer keeps from forward to
// backward for one micro-batch, and what model state a pipeline stage holds. The analytical memory
// model, the lowering's Alloc/Free instructions and the runtime's arenas all read these lists, so
// predicted and allocated bytes agree by construction. Sizes are per rank, after TP/SP/CP/EP/ZeRO.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "strata/lowering/spec.hpp"

namespace strata::sim {

/// What a tensor is, for breakdowns by tag (matches the memory JSON's *_bytes fields).
enum class TensorTag : std::int32_t { weights = 0, grads, optimizer, activations, buffers, count };
constexpr int kTensorTagCount = static_cast<int>(TensorTag::count);
const char* to_string(TensorTag);

/// How long a tensor lives.
enum class Lifetime : std::uint8_t {
    persistent,  ///< whole run (model states)
    stashed,     ///< from a layer's forward to its backward, per micro-batch (activations)
    transient,   ///< during one op or one layer's backward (workspace, recompute, gathered params)
    /// from the first layer's backward to the last's: absent at the head's backward, which runs
    /// before (values of the layers' gradients on their way to the host)
    layers_backward,
    /// from the head's weight gradient to the backward's end (ZeRO-3's whole head gradients):
    /// absent at the loss's peak, whose stashed logits are freed before the head's weight gradient
    after_loss
};

struct TensorDesc {
    std::string name;     ///< e.g. "attn.qkv_in", "mlp.fc1_out", "weights", "optimizer.m"
    TensorTag tag = TensorTag::activations;
    Lifetime lifetime = Lifetime::stashed;
    double bytes = 0;     ///< per rank, on all tiers together
    TierSplit tiers;      ///< where it lives (from plan.offload)
    std::string shape;    ///< human shape, e.g. "(s/tp, b, h)" for docs and traces
};

/// Activations one transformer layer stashes for backward, for one micro-batch on one rank,
/// honouring TP/SP, CP, recompute (none/selective/full), flash attention, dropout, GQA, SwiGLU and
/// MoE (top-k tokens per expert, with load skew). `recomputed` = this layer is fully recomputed:
/// only its input is kept. Reference: Korthikanti et al., "Reducing Activation Recomputation in
/// Large Transformer Models" (MLSys 2023), Table 2 / Eqs. 1-5.
std::vector<TensorDesc> layer_activations(const ModelSpec& m, const PlanSpec& p, int layer, bool recomputed);

/// What a fully recomputed (checkpointed) layer's forward creates and drops at once under
/// no_grad, in forward order: its activations but the stashed input. The lowering allocates each
/// one and frees it after the next, as autograd-free PyTorch frees an op's input once its consumer
/// has run; only the allocator replay sees the difference.
std::vector<TensorDesc> layer_forward_transients(const ModelSpec& m, const PlanSpec& p, int layer);

/// Transient peak of a layer's backward (recomputed activations, gradient of the layer's widest
/// intermediate) on one rank: held only while that layer's backward runs.
std::vector<TensorDesc> layer_backward_workspace(const ModelSpec& m, const PlanSpec& p, int layer, bool recomputed);

/// Transient of the embedding's backward on the first stage, one micro-batch: PyTorch's dense
/// embedding backward writes a zeroed (V/tp, h) gradient table that is then added into the
/// accumulated gradient (Megatron's main_grad hook, DeepSpeed's .grad), plus the gradient arriving
/// at the embedding output. Held while the embedding's backward runs, after the micro-batch's
/// layers have released their activations.
std::vector<TensorDesc> embedding_backward_workspace(const ModelSpec& m, const PlanSpec& p);

/// Transient of the output head (last stage), forward and backward, one micro-batch: the logits
/// in the activation dtype beside the cross-entropy's fp32 copy (Megatron's vocab-parallel loss
/// upcasts them, and casts the gradient back), and under unfused gradient accumulation what the
/// head's fresh weight gradient exceeds the freed fp32 logits by. Beside the stashed logits.
/// `backward` false: the forward's part only (the upcast's input beside its copy).
std::vector<TensorDesc> head_workspace(const ModelSpec& m, const PlanSpec& p, bool backward = true);

/// Activations of the embedding (first stage) and of logits/loss (last stage) per micro-batch;
/// the last stage's list includes the MTP modules (model.mtp_depth), which live just as long.
std::vector<TensorDesc> embedding_activations(const ModelSpec& m, const PlanSpec& p);
std::vector<TensorDesc> logits_activations(const ModelSpec& m, const PlanSpec& p);

/// DeepSpeed's PipelineEngine with partitioned pipe tensors (plan.p2p_blocking and
/// plan.p2p_scatter_gather), on every stage but the last: it frees a sent output's data but keeps
/// its local 1/tp slice until that micro-batch's backward (`pipe_buffers['outputs']`), and for the
/// backward all-gathers the whole output again, held until the backward pass returns. Empty for
/// any other plan.
std::vector<TensorDesc> pipe_output_slice(const ModelSpec& m, const PlanSpec& p);
std::vector<TensorDesc> pipe_output_regathered(const ModelSpec& m, const PlanSpec& p);

/// Parameters held by one rank of pipeline stage `stage` (before ZeRO sharding), split into dense
/// (replicated over dp) and expert (sharded over ep, replicated over dp/ep) counts.
struct StageParams {
    double dense = 0;
    double expert = 0;
    double total() const { return dense + expert; }
};
StageParams stage_params(const ModelSpec& m, const PlanSpec& p, int stage);
/// Of those, the parameters one rank of `stage` holds outside its layers: the embedding (first
/// stage: word and position tables) and the head (head stage: final norm, untied head or the
/// tied table's copy, MTP modules). Homed on the host they come up apart from the layers.
struct StageEdgeParams {
    double embedding = 0, head = 0;
    double head_expert = 0;  ///< the MTP modules' experts (reduced over edp, not dp)
    double total() const { return embedding + head + head_expert; }
};
StageEdgeParams stage_edge_params(const ModelSpec& m, const PlanSpec& p, int stage);
/// The head's stage keeps its own copy of the word embedding (Megatron: tied embeddings across
/// stages, or MTP looking the next tokens up), kept in step with the first stage's over the
/// embedding group; not when the head sits beside the embedding (pp 1, DualPipeV's rank 0).
bool head_stage_embedding_copy(const ModelSpec& m, const PlanSpec& p);
/// The output layer reads the embedding's own table (tied, with no copy on the head's stage): where
/// parameters are fetched, the head's fetch brings the embedding's unit too (the lowering's
/// fetch_edge, the planner's estimate).
bool head_reads_embedding_table(const ModelSpec& m, const PlanSpec& p);
/// The MTP modules' parameters on one rank of the last stage (their layers, projections, norms).
StageParams mtp_params_local(const ModelSpec& m, const PlanSpec& p);

/// Model states of one rank of `stage`: weights, grads, optimizer states (mixed-precision Adam:
/// 2 + 2 + 12 bytes/param split by ZeRO stage over dp, as in the ZeRO paper), each with its tiers.
std::vector<TensorDesc> stage_model_states(const ModelSpec& m, const PlanSpec& p, int stage);

/// Communication and runtime buffers of one rank (DP buckets, ZeRO-3 gathered layer, PP p2p
/// buffers, framework reserve).
std::vector<TensorDesc> stage_buffers(const ModelSpec& m, const PlanSpec& p, int stage);

/// A tensor's size and place without its name or shape: the planner's fast path sums these.
struct TensorBytes {
    TensorTag tag = TensorTag::buffers;
    double bytes = 0;
    TierSplit tiers;
    Lifetime lifetime = Lifetime::persistent;
};
/// stage_model_states followed by stage_buffers, byte counts only and in the same order (no
/// strings, no allocation): the planner's memory estimate runs this for every stage of every plan.
struct StageTensorBytes {
    std::array<TensorBytes, 20> items{};
    int count = 0;
};
/// One rank's parameters of a dense and of an MoE layer under one plan, each worked out once: a
/// layer's local parameters depend on the layer only through which kind it is. One per plan.
class LayerParamsByKind {
public:
    const StageParams& get(const ModelSpec& m, const PlanSpec& p, int layer);

private:
    StageParams kinds_[2];
    bool known_[2] = {false, false};
};
/// `layer_ids`: stage_layer_ids(m, p, stage), which the caller has at hand; `layers`: this plan's.
void stage_tensor_bytes(const ModelSpec& m, const PlanSpec& p, int stage, const std::vector<int>& layer_ids, LayerParamsByKind& layers,
                        StageTensorBytes& out);

/// Layers of `stage` that full recompute applies to: plan.recompute_layers of them (the first
/// ones), or every plan.recompute_every-th counted across the rank's chunks.
bool layer_recomputed(const ModelSpec& m, const PlanSpec& p, int stage, int layer_in_stage);

}  // namespace strata::sim
