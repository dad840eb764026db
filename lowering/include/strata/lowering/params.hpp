// The model states of one rank as flat buffers (Megatron-Core's contiguous parameter and gradient
// buffers): where each parameter of a pipeline rank lives, as an element range, and how its piece
// is cut from the whole tensor under tensor parallelism. The order is the order gradients become
// final in the backward pass (per model chunk: the head, the layers from last to first, then the
// embedding), so every gradient bucket is a contiguous range. The lowering names its ranges; the
// runtime allocates, initialises and updates them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/lowering/program.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::sim {

/// How a rank's piece is cut from the whole tensor (tp ranks, in tp order).
enum class ParamSplit : std::uint8_t {
    replicated,  ///< every TP rank holds all of it (norms, row-parallel biases, positions)
    rows,        ///< rows t * rows/tp .. (column-parallel weight and bias; the vocabulary)
    cols,        ///< columns (row-parallel weight)
    qkv_rows,    ///< the rank's query heads, then its key heads, then its value heads
    gated_rows,  ///< SwiGLU's fc1: the rank's rows of the gate, then of the up projection
    /// Stacked experts' weights [experts x out, in]: the experts of the rank's EP group rank
    /// (experts/ep of them), each cut over the expert-TP group like the dense MLP: fc1's rows
    /// (per half for SwiGLU), fc2's columns.
    expert_rows,
    expert_cols
};

struct ParamEntry {
    std::string name;              ///< "qkv.weight", "ln1.bias", "word_embedding.weight", ...
    int layer = -1;                ///< global layer (-1: embedding, position table, head)
    int chunk = 0;                 ///< model chunk (virtual stage) of this rank holding it
    FlatBuffer buffer = FlatBuffer::dense;
    std::int64_t offset = 0;       ///< first element in the buffer
    std::int64_t rows = 0, cols = 0;            ///< this rank's piece
    std::int64_t full_rows = 0, full_cols = 0;  ///< the whole tensor
    ParamSplit split = ParamSplit::replicated;
    bool decay = false;            ///< weight decay applies (matrices; not norms, biases)
    /// Under sequence parallelism each TP rank sees only its tokens (QK-norm's weights: only its
    /// heads), so this gradient is partial and is summed over TP before the optimizer (Megatron's
    /// _allreduce_layernorm_grads).
    bool sequence_parallel = false;
    /// The word embedding (first stage) or its copy on the head stage: kept in step over the
    /// embedding group.
    bool shared_embedding = false;
    std::int64_t elements() const { return rows * cols; }
    std::int64_t end() const { return offset + rows * cols; }
};

/// One unit whose gradients become final together in the backward pass: a layer, the head, the
/// embedding. The lowering reduces gradients bucket by bucket over such units.
struct GradUnit {
    int chunk = 0;
    int layer = -1;          ///< global layer, or -1 for the head / embedding units
    bool head = false, embedding = false;
    std::int64_t offset = 0, count = 0;  ///< its range of the dense buffer
};

struct ParamLayout {
    std::vector<ParamEntry> entries;   ///< in buffer order
    std::vector<GradUnit> units;       ///< in buffer order
    /// The expert buffer's ranges, one per MoE layer and one for the MTP modules' experts on the
    /// head's chunk (offsets past the dense buffer): what ZeRO-3 gathers and reduces of a layer
    /// besides its dense unit.
    std::vector<GradUnit> expert_units;
    std::int64_t dense_elements = 0;
    /// The routed experts' parameters (Megatron-Core's expert-parallel buffer, reduced over the
    /// expert-data-parallel group). They follow the dense buffer in one address space: an expert
    /// entry's offset counts from the dense buffer's start, past its dense_elements.
    std::int64_t expert_elements = 0;
    std::int64_t elements() const { return dense_elements + expert_elements; }
    /// The entry of `name` on `layer` (nullptr if this rank holds none).
    const ParamEntry* find(const std::string& name, int layer = -1) const;
};

/// The layout of pipeline rank `stage`'s states under `p` (every chunk of it).
ParamLayout param_layout(const ModelSpec& m, const PlanSpec& p, int stage);

/// Why the dataflow lowering (and so the runtime) cannot execute this model and plan yet; empty
/// when it can. Names the field and the value.
std::string dataflow_unsupported(const ModelSpec& m, const PlanSpec& p);
/// MTP module k's (1-based) layer number: layers + 2k - 1. Its layer's input is x at that number
/// and its output x at the next, which its head's tensors take too: the modules' tensors and
/// weights stay apart from the decoder's and from each other's.
inline int mtp_layer_id(const ModelSpec& m, int k) { return m.layers + 2 * k - 1; }
/// The module a head tensor's layer number belongs to (its head's tensors take mtp_layer_id + 1);
/// 0 for the model's own head (layer -1) and every decoder layer.
inline int mtp_module_of_layer(const ModelSpec& m, int layer) { return layer > m.layers ? (layer - m.layers) / 2 : 0; }
/// The share of a sequence's rows MTP module k predicts from (Megatron-Core masks the last k).
inline double mtp_kept_fraction(const ModelSpec& m, int k) {
    return static_cast<double>(m.seq_len - k) / static_cast<double>(m.seq_len);
}

}  // namespace strata::sim
