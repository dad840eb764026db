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
    Tier tier : 8 = Tier::gpu;        ///< alloc/free: which pool
    std::int32_t tag : 8 = 0;         ///< alloc/free: TensorTag (tensors.hpp)
    std::int16_t chunk = 0;           ///< virtual pipeline stage of this rank
    std::int16_t layer = -1;          ///< global layer index (-1: not per layer)
    std::int16_t name = 0;            ///< index into Program::names (human label, e.g. "qkv")
    std::int32_t microbatch = -1;
    union {                           // one per kind: record/wait, send/recv, alloc/free
        std::int32_t event = -1;      ///< record/wait
        std::int32_t peer;            ///< send/recv: the other RankProgram (-1 = unknown)
        std::int32_t tensor;          ///< alloc/free: tensor instance id (pairs alloc with free; -1 = none)
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
        std::int32_t a2a_copies;      ///< MoE all-to-all of a hierarchical (DeepEP) dispatcher: copies per
                                      ///< token (top_k) in `bytes`; 0 = a flat all-to-all
    };
    union {                           // compute vs. collective
        std::int32_t n = 0;
        std::int32_t a2a_node_limit;  ///< hierarchical MoE all-to-all: most nodes one token's experts lie on
                                      ///< (node-limited routing); 0 = no limit
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

/// The instructions of one representative rank (a pipeline stage; in full mode, one global rank).
struct RankProgram {
    int id = 0;
    int pp_stage = 0;
    int global_rank = 0;              ///< first global rank it stands for
    std::int64_t multiplicity = 1;    ///< how many global ranks behave identically (DP x TP x CP peers)
    int node = 0;                     ///< node index of global_rank
    std::vector<Instr> instrs;
};

struct Program {
    std::vector<RankProgram> ranks;
    std::vector<std::string> names;   ///< labels referenced by Instr::name
    int events = 0;                   ///< event ids are 0..events-1, per RankProgram
    bool full_mode = false;
    int gpus = 0;                     ///< GPUs of the whole job
    double tokens_per_step = 0;
    double model_flops_per_step = 0;  ///< useful FLOPs (no recompute), for MFU

    int name_id(const std::string& s);   ///< intern a label
};

}  // namespace strata::sim
