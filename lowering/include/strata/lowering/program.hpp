// The Program: what one training step does, per representative rank, as ordered instructions on
// named streams. Lowering (lower.hpp) writes it once; the simulator's engine and the runtime both
// execute the same Program, so predictions and measurements pair up instruction by instruction.
//
// Semantics (CUDA-like): instructions of one stream run in order, one at a time. Record{event}
// completes when everything before it on its stream has; Wait{event} blocks its stream until that
// event has been recorded. Collectives whose peers all share this RankProgram (symmetric DP/TP/CP/EP
// peers) start when this rank reaches them; a collective or p2p with a match_id also waits for its
// counterpart(s) in other RankPrograms.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "strata/lowering/spec.hpp"

namespace strata::sim {

/// pp_p2p carries pipeline sends, pp_recv the matching receives (posted in consumption order on
/// their own stream, so that rendezvous send/recv pairs never block each other; lower.hpp).
/// pp_p2p_b / pp_recv_b: a second pair, for DualPipeV's up leg (chunk 1, which sends the other
/// way) or, in the other schedules, the gradients of the backward pass; it keeps the two
/// directions' rendezvous from queueing behind each other (DualPipe batches them; Megatron posts
/// them as separate operations).
enum class Stream : std::uint8_t { compute, tp_comm, cp_comm, ep_comm, dp_comm, pp_p2p, h2d, d2h, ssd, cpu, pp_recv, pp_p2p_b, pp_recv_b, count };
constexpr int kStreamCount = static_cast<int>(Stream::count);
const char* to_string(Stream);

enum class InstrKind : std::uint8_t {
    compute,     ///< a kernel: gemm, attention, memory-bound op, optimizer on GPU
    collective,  ///< all-reduce/all-gather/reduce-scatter/all-to-all among group peers
    send,        ///< p2p send to another RankProgram (pipeline)
    recv,        ///< p2p receive; completes when the matching send's data has arrived
    copy,        ///< h2d, d2h, ssd read/write
    alloc,       ///< memory allocation on a tier (instant)
    free,        ///< memory release (instant)
    optimizer,   ///< optimizer step on the CPU (CPU Adam) over `count` parameters
    record,      ///< record event `event` on this stream
    wait,        ///< block this stream until event `event` is recorded
    host_sync    ///< the host thread blocks until everything before it on its stream has finished
                 ///< (a device-to-host read the CPU needs: .item(), .cpu(), cudaStreamSynchronize)
};
const char* to_string(InstrKind);

/// What a compute instruction does (drives the cost model and the runtime kernel choice).
enum class Op : std::uint8_t {
    none,
    gemm,            ///< m x n x k matmul (batch > 1: batched, e.g. experts)
    attention_fwd,   ///< flash-style attention core forward
    attention_bwd,
    norm,            ///< layernorm / rmsnorm (memory-bound)
    elementwise,     ///< activation, residual, dropout, rope, softmax ... (memory-bound)
    embedding,       ///< token (+ position) embedding lookup / its gradient
    loss,            ///< softmax cross-entropy over the vocabulary
    optimizer_gpu,   ///< fused Adam on the GPU (memory-bound)
    router,          ///< MoE gate + top-k
    grad_accum       ///< unfused weight-gradient accumulation (memory-bound, one kernel)
};
const char* to_string(Op);

enum class Phase : std::uint8_t { forward, backward, recompute, optimizer, other };
const char* to_string(Phase);

enum class CollKind : std::uint8_t { all_reduce, all_gather, reduce_scatter, all_to_all, broadcast };
const char* to_string(CollKind);

/// Which parallel group a collective runs over.
enum class Group : std::uint8_t { tp, cp, ep, dp, edp, pp, embedding, world, etp, count };
constexpr int kGroupCount = static_cast<int>(Group::count);  ///< coll_match packs the group in 4 bits: keep it below 15
const char* to_string(Group);

enum class CopyKind : std::uint8_t { h2d, d2h, ssd_read, ssd_write };
const char* to_string(CopyKind);

/// Data type of a compute instruction's inputs.
enum class DType : std::uint8_t { fp32, tf32, fp16, bf16, fp8 };

/// Which kernel a compute instruction is: what the runtime launches and what the cost model
/// prices. Stamped by the lowering from the plan (kernel_of), so neither executor reads plan fields
/// to choose one. fused: Megatron-Core / Transformer Engine's fused memory-bound kernels (and every
/// GEMM, embedding, loss, optimizer); eager: a norm or elementwise op as separate eager PyTorch
/// kernels; flash_fa3/fa2/fa1: a fused attention family (docs/costs.md); unfused_attention: the
/// score, softmax and value kernels of attention before flash.
enum class Kernel : std::uint8_t { fused, eager, flash_fa3, flash_fa2, flash_fa1, unfused_attention };
const char* to_string(Kernel);

/// One instruction. A flat struct (not a variant) so programs of millions of instructions stay
/// compact and cache-friendly: 64 bytes, one cache line (GPT-3 175B on 1024 GPUs lowers to 2.1M of
/// them). Fields a kind does not use keep their defaults; fields of kinds that never meet share
/// storage (anonymous unions, each noted below), so set only the fields of the instruction's kind.
/// Index-like fields are narrowed to the range they need; lowering checks the ranges.
struct Instr {
    InstrKind kind = InstrKind::compute;
    Stream stream = Stream::compute;
    Op op = Op::none;
    Phase phase = Phase::other;
    CollKind coll = CollKind::all_reduce;
    Group group = Group::tp;
    CopyKind copy = CopyKind::h2d;
    DType dtype = DType::bf16;
    Tier tier : 4 = Tier::gpu;        ///< alloc/free: which pool
    std::int32_t tag : 4 = 0;         ///< alloc/free: TensorTag (tensors.hpp)
    Kernel kernel : 8 = Kernel::fused;  ///< compute: which kernel (kernel_of)
    std::int16_t chunk = 0;           ///< virtual pipeline stage of this rank
    std::int16_t layer = -1;          ///< global layer index (-1: not per layer)
    std::int16_t name = 0;            ///< index into Program::names (human label, e.g. "qkv")
    std::int32_t microbatch = -1;
    union {                           // one per kind: record/wait, send/recv, alloc/free
        std::int32_t event = -1;      ///< record/wait
        std::int32_t peer;            ///< send/recv: the other RankProgram (-1 = unknown)
        std::int32_t tensor;          ///< alloc/free: tensor instance id (pairs alloc with free; -1 = none)
        /// compute and collective under TP communication overlap (plan.tp_comm_overlap): the
        /// instruction touches one row block of its blocked operands (ring_blocked), the block of
        /// the TP member ring_step places back along the ring (-1: whole tensors)
        std::int32_t ring_step;
    };
    double flops = 0;                 ///< compute: floating-point operations
    double bytes = 0;                 ///< compute: HBM bytes moved; comm/copy: payload bytes; alloc: size
    union {                           // compute (optimizer_gpu) and optimizer vs. collective, send/recv
        double count = 0;             ///< optimizer (and compute optimizer_gpu): parameters updated;
                                      ///< fp8 gemm: input elements cast to FP8 first (0 = none)
        std::int64_t match_id;        ///< cross-program matching key for send/recv/collective (0 = none)
    };
    union {                           // compute vs. collective
        std::int32_t m = 0;           ///< gemm shape (per batch); attention: m = seq, n = kv seq, k = head_dim
        std::int32_t a2a_rank_ppm;    ///< MoE all-to-all of a deduplicating (DeepEP) dispatcher: the GPUs a
                                      ///< token reaches over its top_k copies in `bytes`, in millionths
                                      ///< (a copy per GPU, not per expert); 0 = a flat all-to-all
    };
    union {                           // compute vs. collective
        std::int32_t n = 0;
        std::int32_t a2a_node_ppm;    ///< deduplicating MoE all-to-all: the nodes a token reaches over its
                                      ///< top_k copies, in millionths (an RDMA copy per node)
    };
    union {                           // compute vs. collective
        std::int32_t k = 0;
        std::int32_t participants;    ///< matched collective: RankPrograms taking part (engine waits for
                                      ///< all); <= 1 = not matched (0 by default, 1 as lowered)
    };
    union {                           // compute vs. collective
        std::int32_t batch = 1;       ///< gemm batch (experts, heads, ...)
        std::int32_t group_size;      ///< collective: ranks in the group (1 by default)
    };
};
static_assert(sizeof(Instr) == 64, "Instr is one cache line: programs hold millions of them");

// ---- Dataflow (LowerOptions::dataflow) ------------------------------------------------------
// What each instruction reads and writes, so an executor that computes real numbers needs no
// schedule or model knowledge of its own. Tensors are descriptors shared by all RankPrograms: the
// same id on two ranks names each rank's own copy (a pipeline send and its receive carry the same
// id). Model states are not separate tensors but ranges of a rank's flat buffers (Megatron's
// contiguous parameter and gradient buffers, laid out by params.hpp), so a gradient bucket, a
// ZeRO shard or a layer's weight is an (offset, count) range, and any bucketing is expressible.

/// What a dataflow tensor holds.
enum class TensorRole : std::uint8_t {
    activation,  ///< a forward value of one micro-batch (rows = tokens on this rank)
    grad,        ///< the gradient of an activation
    param,       ///< a range of the flat parameter buffer
    param_grad,  ///< a range of the flat gradient buffer (accumulated over micro-batches)
    tokens,      ///< the micro-batch's input token ids and targets (rows = tokens, cols = 2)
    stats,       ///< per-token statistics a kernel keeps (attention's log-sum-exp, the loss's)
    optimizer_state,  ///< a flat range's optimizer state (fp32 master, m, v per parameter)
    weight_grad,      ///< one micro-batch's gradient of a parameter, before it is accumulated (plan.grad_accum_fusion off)
    mask              ///< a dropout mask kept for the backward (a byte an element in the frameworks)
};
const char* to_string(TensorRole);

/// The flat buffers of a rank's model states (params.hpp lays them out).
enum class FlatBuffer : std::uint8_t { none, dense, expert };

struct DataTensor {
    std::int32_t name = 0;         ///< Program::tensor_names: what it is ("ln1", "qkv.out", "grads", ...)
    TensorRole role = TensorRole::activation;
    FlatBuffer buffer = FlatBuffer::none;  ///< param / param_grad: which flat buffer
    Tier tier = Tier::gpu;         ///< where it lives (an offloaded optimizer's host copy: cpu)
    std::int16_t layer = -1;       ///< global layer index (-1: none)
    std::int32_t microbatch = -1;  ///< step * micro_batches + mb (-1: none)
    std::int64_t rows = 0;         ///< elements per rank: rows x cols (a flat range: 1 x count)
    std::int64_t cols = 0;
    std::int64_t offset = 0;       ///< param / param_grad: first element of the range
    /// Context parallelism's ring: this value is what the rank `ring` places back along the CP
    /// ring holds (a K/V block received, or a K/V gradient block to return); 0 = its own.
    std::int16_t ring = 0;
    /// param_grad where the rank keeps only its shard of the gradients (ZeRO 2/3 over dp x cp > 1,
    /// pipelined FSDP aside; DeepSpeed's and FSDP's layout): a whole range is one micro-batch's
    /// (or, reduced once a step, one step's) gradients of a bucket, a value of its own that the
    /// bucket's reduce-scatter consumes. `version` counts the bucket's earlier reductions on this
    /// rank, so two micro-batches' gradients are two values (-1: gradients kept whole). `shard`:
    /// the range is of the rank's persistent shard, where the reduce-scatters add their slices
    /// and the optimizer reads; for param (ZeRO-3 on the GPU, the same plans), the shard the
    /// update writes and the gathers read, each gather's whole range held only while it is read.
    /// A param range on the cpu tier with version 1: the fp32 master a lock-free update writes
    /// while the step reads the homed weights (published to them at the step's end).
    std::int32_t version = -1;
    bool shard = false;
    std::int64_t elements() const { return rows * cols; }
};

/// TP communication overlap's row blocks (Instr::ring_step): an activation or gradient of more
/// rows than the instruction's block holds every TP member's block, of which the instruction
/// touches one. A block has the GEMM's m rows, or those of the first input (the rank's shard) of a
/// ring step or block copy.
std::int64_t ring_block_rows(const Instr& in, const DataTensor& first_in);
inline bool ring_blocked(const Instr& in, std::int64_t block_rows, const DataTensor& t) {
    return in.ring_step >= 0 && (t.role == TensorRole::activation || t.role == TensorRole::grad) && t.rows > block_rows;
}

/// An instruction's operands: ids into Program::tensors, inputs then outputs, at
/// RankProgram::operand_ids[first, first + n_in + n_out). A tensor both read and written (an
/// all-reduce, an accumulation) appears on both sides.
struct Operands {
    std::uint32_t first = 0;
    std::uint16_t n_in = 0;
    std::uint16_t n_out = 0;
};

/// The instructions of one representative rank (a pipeline stage; in full mode, one global rank).
struct RankProgram {
    int id = 0;
    int pp_stage = 0;
    int global_rank = 0;              ///< first global rank it stands for
    std::int64_t multiplicity = 1;    ///< how many global ranks behave identically (DP x TP x CP peers)
    int node = 0;                     ///< node index of global_rank
    std::vector<Instr> instrs;
    /// Dataflow only: operands[i] belongs to instrs[i] (empty without LowerOptions::dataflow).
    std::vector<Operands> operands;
    std::vector<std::int32_t> operand_ids;
    /// Dataflow only: the rank's place in each parallel group (group_ranks of groups.hpp, by Group).
    std::array<std::vector<int>, kGroupCount> groups;
};

struct Program {
    std::vector<RankProgram> ranks;
    std::vector<std::string> names;   ///< labels referenced by Instr::name
    int events = 0;                   ///< event ids are 0..events-1, per RankProgram
    bool full_mode = false;
    int gpus = 0;                     ///< GPUs of the whole job
    double tokens_per_step = 0;
    double model_flops_per_step = 0;  ///< useful FLOPs (no recompute), for MFU
    std::vector<DataTensor> tensors;  ///< dataflow only: the tensors operands name
    std::vector<std::string> tensor_names;  ///< labels referenced by DataTensor::name
    int steps = 1;                    ///< training steps lowered (LowerOptions::steps)

    int name_id(const std::string& s);   ///< intern a label
    bool has_dataflow() const { return !tensors.empty(); }
};

}  // namespace strata::sim
