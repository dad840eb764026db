// Internal to lowering: the per-rank builder shared by lower.cpp (steps, pipeline passes, data
// parallelism, optimizer, offload, memory) and layer_ops.cpp (one transformer layer's forward,
// backward and recomputation). Not a public API; nothing here outlives one lower() call.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "strata/lowering/lower.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/params.hpp"
#include "strata/lowering/tensors.hpp"
#include "lower_types.hpp"

namespace strata::sim::lower_detail {

/// Builds one RankProgram.
class RankLowering {
public:
    RankLowering(const ModelSpec& m, const ClusterSpec& cl, const PlanSpec& p, const LowerOptions& o,
                 Program& prog, RankProgram& rp, const Names& names, Coord coord, bool full,
                 std::int64_t& tensor_counter, TensorTable* table);
    void run(int steps);
    int events() const { return next_event_; }

    // ---- used by layer_ops.cpp ----
    void layer_forward(int layer, Phase phase);
    void layer_backward(int layer, int layer_in_stage);
    /// Pad the operand list to the instruction list (dataflow): instructions without operands.
    void finish_operands();

private:
    // instruction helpers (push and compute are defined here: every instruction goes through them)
    Instr& push(InstrKind k, Stream s, int name) {
        if (k != InstrKind::record) ++issued_[static_cast<std::size_t>(s)];
        if (k != InstrKind::record && k != InstrKind::wait) last_op_ = rp_.instrs.size();
        Instr& in = rp_.instrs.emplace_back();
        in.kind = k;
        in.stream = s;
        in.name = static_cast<std::int16_t>(name);
        in.phase = phase_;
        in.chunk = static_cast<std::int16_t>(chunk_);
        in.layer = static_cast<std::int16_t>(layer_);
        in.microbatch = mb_;
        in.dtype = dtype_;
        return in;
    }
    Instr& compute(Op op, int name, double flops, double bytes) {
        Instr& in = push(InstrKind::compute, Stream::compute, name);
        in.op = op;
        in.kernel = kernel_of(op, p_);
        in.flops = flops;
        in.bytes = bytes;
        return in;
    }
    Instr& gemm(int name, double m, double n, double k, double batch = 1);
    /// A GEMM whose m x k input is cast to FP8 first when the plan trains in FP8 (Transformer Engine
    /// quantises a linear layer's input unless a fused norm wrote it in FP8, and every dgrad's dY):
    /// Instr::count carries the elements cast, and the cost model charges the cast.
    Instr& gemm_cast(int name, double m, double n, double k, double batch = 1) {
        Instr& in = gemm(name, m, n, k, batch);
        if (in.dtype == DType::fp8) in.count = m * k * batch;
        return in;
    }
    /// A GEMM that stays in 16-bit under FP8 training (the output layer and the MoE router sit
    /// outside Megatron's fp8_autocast region).
    Instr& gemm_high(int name, double m, double n, double k, double batch = 1) {
        Instr& in = gemm(name, m, n, k, batch);
        if (in.dtype == DType::fp8) in.dtype = DType::bf16;
        return in;
    }
    /// Sets a compute instruction's shape (m, n, k, batch), checking that it fits Instr's fields.
    static void set_shape(Instr& in, double m, double n, double k, double batch);
    // ---- dataflow (every helper returns -1 / does nothing without LowerOptions::dataflow) ----
    /// Attach operands to the last instruction pushed that is not a record or wait (a collective
    /// or copy helper records its completion after it).
    void io(std::initializer_list<int> in, std::initializer_list<int> out);
    void io_lists(const std::vector<int>& in, const std::vector<int>& out);
    /// Names instruction `at`'s operands (-1s skipped); io_lists names the last one's.
    void set_operands(std::size_t at, const std::vector<int>& in, const std::vector<int>& out);
    /// An activation (or its gradient, role grad) of the current micro-batch on `layer`.
    int act(int name, int layer, double rows, double cols, TensorRole role = TensorRole::activation, int ring = 0);
    int grad(int name, int layer, double rows, double cols) { return act(name, layer, rows, cols, TensorRole::grad); }
    /// A parameter of this rank (params.hpp name) as a range of the flat buffer, or its gradient.
    int prm(const char* name, int layer);
    int prm_grad(const char* name, int layer);
    int opt(int id) const { return id; }  ///< an optional operand (-1: absent; io() skips it)
    /// What the activation's backward reads: its input (fc1's output), but ReLU's reads its output
    /// (threshold_backward), so fc1's output is not kept (tensors.cpp, mlp_intermediates).
    int act_grad_reads(int fc1_out, int act_out) const { return m_.ffn == FfnKind::relu ? act_out : fc1_out; }
    /// A flat range (role param, param_grad or optimizer_state) on a tier.
    int range(TensorRole role, double off, double count, Tier tier = Tier::gpu, bool expert = false, int version = -1, bool shard = false);
    /// The bias of `name` if the model has it, else -1.
    int bias(const char* name, int layer, bool grad_of);
    int tokens();  ///< the micro-batch's token ids and targets
    int record(Stream s);
    void wait(Stream s, int ev);
    void host_sync(Stream s, int name) { push(InstrKind::host_sync, s, name); }
    static constexpr int kAfterCompute = -2;
    /// A collective on `s` that first waits for `after` (kAfterCompute: compute's progress so
    /// far; -1: nothing); returns its completion event.
    int collective(Stream s, CollKind k, Group g, double bytes, int name, int after = kAfterCompute);
    /// The MoE dispatch or combine over EP: a collective all-to-all, marked as DeepEP's
    /// deduplicating one (Instr::a2a_rank_ppm, a2a_node_ppm) when plan.moe_dispatcher says so.
    int ep_all_to_all(double bytes, int name, int after = kAfterCompute);
    int copy(Stream s, CopyKind k, double bytes, int name, int after_ev);
    int group_size(Group g) const;
    std::int64_t coll_match(Group g);
    std::int64_t p2p_match(int mb_global, int sender_vstage, bool forward_dir, int lane) const;
    int program_of_stage(int stage) const;

    /// The dataflow tensors of one layer for the current micro-batch (all -1 without dataflow).
    /// With SP the gathered (".gathered") and reduce-scattered (".shard") forms are their own
    /// tensors; without, they are the same tensor as their source.
    struct LayerTensors {
        int x, ln1, ln1_g, qkv, attn, lse, proj, proj_s, x1, ln2, ln2_g, fc1, act, fc2, fc2_s, out;
        /// Unfused attention (plan.flash_attention off, cp 1): the softmax's probabilities kept for
        /// the backward, with attention dropout their mask and the dropped ones, and the transient
        /// gradient of the probabilities the value bmm's backward forms (else -1).
        int probs, pmask, pdrop, dprobs;
        int qkv_pre, dqkv_pre;  ///< QK-norm: the projection's output before the norms, and its gradient (else qkv, dqkv)
        int dout, dout_g, dx1, dx1_g, dln2, dln2_s, dact, dfc1, dattn, dqkv, dln1, dln1_s, dx;
        /// Hidden dropout (model.dropout > 0): the masks of the two residual branches, and the
        /// branches' gradients past them (shard, gathered); without dropout the masks are -1 and the
        /// branches' gradients are the residual stream's own (dx1, dout).
        int mask1, mask2, dbr1, dbr1_g, dbr2, dbr2_g;
    };
    LayerTensors layer_tensors(int layer);
    void qk_norm_and_rope(const LayerTensors& t, int layer);  ///< after the QKV projection
    /// The MoE block's dataflow tensors (tp = 1): routing, the tokens in expert order, and with
    /// ep > 1 what the all-to-alls deliver (disp: the rows for this rank's experts, comb: their
    /// outputs back in expert order; without EP they are `in` and `fc2` themselves).
    struct MoeTensors {
        int logits, routing, in, fc1, act, fc2, dlogits, dprobs, din, dfc1, dact, dfc2;
        int disp, gath, scat, comb, ddisp, dgath, dscat, dcomb;
        int sfc1, sact, sfc2, dsfc1, dsact, dsx;  ///< the shared experts' (-1: none)
        int sfc2_s, dsx_s;                        ///< with SP, their output and dX on the rank's shard
        /// moe_probs_at fc2_input: each row's router weight, travelling with it (and backward its
        /// gradient); -1 under fc2_output.
        int in_p, disp_p, gath_p, din_p, ddisp_p, dgath_p;
    };
    MoeTensors moe_tensors(int layer);
    bool round_robin() const { return m_.is_moe() && !m_.moe->has_router(); }
    void router_forward(const LayerTensors& lt, const MoeTensors& mt, int layer, double routed);
    void routed_experts_forward(const MoeTensors& mt, int layer);
    int shared_shard(int layer, bool grad_of);

    // layer pieces (layer_ops.cpp)
    /// SP: all-gather `in` (a sequence shard) into `out` over TP. -1: nothing to do.
    int tp_forward_in(bool wait_now, int in = -1, int out = -1);
    /// After a row-parallel GEMM: all-reduce `t` in place, or with SP reduce-scatter it into `shard`.
    int tp_out_collective(int t = -1, int shard = -1);
    void tp_forward_out(int t = -1, int shard = -1);
    bool tp_overlap() const { return p_.tp_comm_overlap && d_.tp > 1 && d_.sp; }
    /// TP communication overlap (layer_ops.cpp): the ring-exchange all-gather of `shard` into
    /// `full`, `block(j)` (block j's GEMM, pushed with its operands) run as each block lands; and
    /// the reduce-scatter side, `block(j, out)` computing the rows of the member j places back into
    /// `out`, sent to it at once, the rank's own block last, into `out_s`, with the sum received.
    void tp_ring_gather(int shard, int full, const std::function<void(int)>& block);
    void tp_ring_reduce(int out_s, const std::function<void(int, int)>& block);
    /// A GEMM behind SP's gather, and a row-parallel GEMM with its TP reduction, either way
    /// (TP overlap or not); `gemm_of` pushes the GEMM of `rows` rows with its operands.
    void sp_gather_gemm(int shard, int full, const std::function<Instr&(double)>& gemm_of);
    void sp_reduce_gemm(int out, int out_s, const std::function<Instr&(double, int)>& gemm_of);
    /// A TP-overlap ring step's block: FP8 under an FP8 plan (the reduce-scatter's unless
    /// plan.tp_overlap_rs_fp8 is off), else the activations' dtype.
    double tp_ring_block_bytes(bool reduce) const {
        const bool fp8 = dtype_ == DType::fp8 && (!reduce || p_.tp_overlap_rs_fp8);
        return d_.tokens_sp * d_.h * (fp8 ? 1.0 : d_.act_bytes);
    }
    /// FSDP (ZeRO-3) under a pipeline schedule: a layer's parameters are gathered at its first
    /// forward of the step and kept until its last backward, whose gradients alone are
    /// reduce-scattered (params.hpp: pipelined_fsdp).
    bool pipelined_fsdp() const { return p_.pipelined_fsdp(); }
    void attention_core_forward(Phase phase, int qkv = -1, int out = -1, int lse = -1, int probs = -1, int pmask = -1, int pdrop = -1);
    void mlp_forward(const LayerTensors& t);  ///< the dense MLP with its TP communication
    void moe_forward(int layer);
    void shared_experts_forward(int layer);
    void recompute_modules_before_mlp(int layer);
    void recompute_modules_before_attention();
    void op_sac_recompute(int layer);
    void mlp_backward(int layer, const LayerTensors& t);
    void moe_backward(int layer);
    void attention_core_backward(const LayerTensors& t);
    struct Windowed {
        double flops;  ///< share of the causal work (model.sliding_window)
        double seq;    ///< the query length the kernel's efficiency is looked up at
    };
    Windowed windowed(double sq) const;
    int cp_all_to_all(double cols, int name);
    struct UlyssesTensors {
        int qkv, out;
    };
    UlyssesTensors ulysses_tensors(bool grads);
    static double truncated(double x);
    double ring_step_bytes() const;
    double cp_kv_chunk_bytes() const;
    int cp_ring_block(int j, bool grad);           ///< kv.ring j of the layer (its gradient)
    std::vector<int> cp_ring_blocks(bool grads);  ///< kv.ring 1 .. cp - 1 of the layer (their gradients)
    /// MLA's dataflow tensors of the current micro-batch on `layer` (mla_ops.cpp): the latents
    /// (query's, and the key/value's with the shared RoPE key), normed, gathered under SP, the
    /// up-projections' outputs, and their gradients; the query's are -1 without q_lora_rank.
    struct MlaTensors {
        int q_lat, kv_lat, q_n, kv_n, k_rope, q_g, kv_g, k_rope_g, q, kv;
        int dq, dkv, dk_rope_g, dq_g, dkv_g, dq_n, dkv_n, dk_rope, dq_lat, dkv_lat;
    };
    MlaTensors mla_tensors(int layer);
    void mla_projections_forward(const LayerTensors& t);
    void mla_up_projections_forward(const MlaTensors& mt);
    void mla_projections_backward(const LayerTensors& t);
    double mla_rope_bytes() const;  ///< RoPE with the assembly of the attention's rows, each way
    double expert_tokens() const;
    void sort_by_local_expert(bool sort, std::initializer_list<int> tensors);  ///< Megatron's permutation 2 and its inverse
    double routed_rows_k(double tokens) const;
    void op_sac_recompute_moe(const char* shared_rerun, int layer);
    void op_sac_recompute_mla(const char* rerun);
    double expert_load() const;

    // passes and step (lower.cpp)
    void step(int s);
    void forward_pass(int mb, int chunk);
    void backward_pass(int mb, int chunk, bool defer_weights = false);
    /// plan.moe_a2a_overlap: a steady forward and the backward after it as one merged step
    /// (Megatron-Core's combined 1F1B): both lowered, then their segments interleaved.
    void merged_passes(const PipeSlot& f, const PipeSlot& b);
    void interleave_segments(std::size_t begin, std::size_t mid, std::size_t end, const std::vector<std::size_t>& f_cuts,
                             const std::vector<std::size_t>& b_cuts);
    /// Pipeline streams of a chunk's forward or backward pass: DualPipeV's up leg has its own pair;
    /// the other schedules put the gradients (the backward direction) on the second pair, as
    /// Megatron posts the two directions as separate operations (to different peers when pp > 2),
    /// so a gradient never queues behind an activation the peer will take later (interleaving with
    /// micro-batch groups larger than pp orders the two differently on the two ends). DeepSpeed's
    /// blocking p2p keeps one pair: it runs every transfer in line with compute.
    bool second_pair(int chunk, bool forward) const {
        if (p_.schedule == Schedule::dualpipe_v) return chunk == 1;
        return !forward && !p_.p2p_blocking;
    }
    Stream send_stream(int chunk, bool forward) const { return second_pair(chunk, forward) ? Stream::pp_p2p_b : Stream::pp_p2p; }
    Stream recv_stream(int chunk, bool forward) const { return second_pair(chunk, forward) ? Stream::pp_recv_b : Stream::pp_recv; }
    void embedding_forward();   ///< word (+ position) lookup, summed over TP
    void embedding_backward();
    int head_weight(bool grad_of);
    bool loss_cast() const;                  ///< the logits cast to fp32 for the loss (and back) by kernels of their own
    double loss_bytes(bool backward) const;  ///< HBM traffic of the cross-entropy's kernels, by implementation
    /// Final norm, vocab-parallel logits, cross-entropy: the model's (depth 0) or MTP module
    /// `depth`'s, on its shifted tokens.
    void head_forward(int depth = 0);
    void head_backward(int depth = 0);
    /// A head's layer numbers and norm: its tensors' (`key`), its input's, its norm weight's.
    struct HeadOf {
        int key, input, norm_layer;
        const char *norm_weight, *norm_bias;
    };
    HeadOf head_of(int depth) const;
    void release_logits(int chunk);  ///< the head's stash of this micro-batch (freed once)
    void mtp_forward(int k);    ///< multi-token prediction module k (1-based; model.mtp_depth), last stage
    void mtp_backward(int k);
    int mtp_tokens(int k);      ///< module k's tokens: each row's token k places on, its target k places on (-1 past the end)
    void block_on_send();       ///< plan.p2p_blocking: DeepSpeed's parity-ordered blocking send
    void post_blocking_recv();  ///< plan.p2p_blocking: a receive posted in line with compute
    double p2p_wire_bytes(double tensor_bytes) const;  ///< what one rank sends: 1/tp with plan.p2p_scatter_gather
    void gather_received(double tensor_bytes, int slice, int whole);  ///< plan.p2p_scatter_gather: rebuild the tensor over TP
    int received(int whole);
    /// What fetch_params issues: both parts, the offloaded slice's copies only, or ZeRO-3's gather only.
    enum class FetchPart { all, offloaded, gather };
    int fetch_params(int layer, int after_ev, FetchPart part = FetchPart::all);
    /// plan.zero3_param_sync in effect: ZeRO-3 over more than one rank, outside a pipeline's FSDP.
    bool zero3_sync() const { return p_.zero3_param_sync && p_.zero_stage == 3 && p_.dp * p_.cp > 1 && !pipelined_fsdp(); }
    /// Under zero3_sync, `bytes` of a layer's parameters (or gradients) as DeepSpeed's per-parameter
    /// calls: all but the last as data-less collectives of their tensors' sizes, chained on `s`
    /// after `after` (which then names the last of them); returns the bytes left for the caller's
    /// own last call, the one that carries the data.
    double zero3_calls_before(Stream s, CollKind k, Group g, int layer, double elements, double bytes_per, int name, int& after);
    /// Under zero3_sync in the dataflow, each layer unit's parameter tensors (zero3_pieces.cpp):
    /// what its gathers, reductions and shard are cut by. Built once the layout is known.
    void build_zero3_pieces();
    /// A layer unit's dense pieces: its tensors under zero3_sync in the dataflow, else its range.
    std::vector<std::pair<double, double>> layer_pieces(int unit) const;
    int zero3_gather_pieces(int unit, int after_ev);  ///< one all-gather per piece, chained
    void zero3_reduce_dense(int layer, double dense);  ///< a layer's ZeRO-3 reduction (and copies down)
    /// The offloaded parameters' copies up; `to_shard`: into the rank's GPU shard (a resident unit
    /// under ZeRO-3, gathered from there at each use).
    int fetch_offloaded(double params, const std::vector<std::pair<double, double>>& slices, int after_ev, bool to_shard = false);
    bool split_params() const { return p_.splits_weights_by_layer(); }
    bool resident(int unit) const { return unit >= 0 && static_cast<std::size_t>(unit) < resident_.size() && resident_[static_cast<std::size_t>(unit)]; }
    void build_resident_units();
    void fetch_edge(bool head);
    template <class DataflowH2D>
    int params_home(double params, int after_ev, DataflowH2D&& dataflow_h2d, bool sent);
    int fetch_activations(int mb, int chunk, int li, int after_ev);
    void layer_grads(int layer);
    void accumulate_grads(double dense_params, double expert_params);  ///< plan.grad_accum_fusion off
    /// Dataflow of unfused accumulation: while set, prm_grad names a fresh gradient tensor and
    /// remembers it with its range, for accumulate_grads to add in.
    bool unfused_capture_ = false;
    std::vector<std::pair<int, int>> unfused_grads_;  ///< (this micro-batch's gradient, the range it is added to)
    void begin_unfused_capture();
    /// The gradients of unit `u` are final: emit the overlapped reduction of every bucket it closes.
    void unit_ready(int u);
    void reduce_bucket(const Bucket& b);
    void reduce_buckets(int chunk);  ///< every bucket of `chunk` (-1: all), in buffer order
    /// Sharded gradients (DataTensor::version, shard_grads_): the reduced ranges, the value a
    /// gradient range belongs to, a reduce-scatter's operands, the rank's shard of a range.
    void build_grad_values();
    int grad_value_of(double off, double count) const;
    void reduce_scatter_operands(double off, double count, bool expert = false);
    /// PlanSpec::streams_grads_to_host: the rank's slice of a just-reduced range [off, off + count)
    /// (one address space: an expert range counts past the dense buffer) down to the host.
    void grads_to_host(double off, double count, bool expert);
    /// The last range's sum and copy down, left to follow the next range's backward (host_grads.cpp).
    std::function<void()> host_grads_tail_;
    void flush_host_grads();
    /// plan.cpu_grad_accumulation: a later micro-batch's slice down and added on the host (FSDP).
    void host_sum_on_cpu(double lo, double n, int reduced, int slice, int host, bool named);
    int grads_copy(int name, Tier tier, double lo, double n);
    std::vector<int> grad_shard(double off, double count);
    /// ZeRO-3's parameter gather; `from_shard`: from the rank's GPU shard, where the weights are
    /// otherwise homed off the GPU (a resident unit under split_params).
    void gather_operands(double off, double count, bool expert = false, bool from_shard = false);
    /// Lock-free with host-homed weights: host parameter ranges as the fp32 master the delayed
    /// update writes (DataTensor::version 1); unchanged otherwise.
    std::vector<int> lf_master(std::vector<int> ids);
    /// Units and buckets of this rank (buckets.cpp): the ranges every reduction and gather uses.
    void build_units();
    void build_buckets();
    int unit_of_layer(int layer) const;
    int head_unit(int chunk) const;   ///< first head unit of `chunk` (-1: none)
    int embedding_unit(int chunk) const;
    /// This rank's slices (dp group) of the ranges the optimizer updates, in buffer order.
    std::vector<std::pair<double, double>> owned_ranges() const;
    /// This rank's slice of elements [off, off + count) sharded over the dp group, or the expert
    /// buffer's over the edp group (as owned_ranges cuts them).
    std::pair<double, double> dp_slice(double off, double count, bool expert = false) const;
    /// The tensor ids of `ranges` split at element fractions [lo, hi) of their total.
    std::vector<int> ranges_part(const std::vector<std::pair<double, double>>& ranges, double lo, double hi,
                                 TensorRole role, Tier tier) const;
    void sp_grads_all_reduce();  ///< SP: sum the sequence-parallel parameters' gradients over TP
    void dp_collectives_at_end();
    void optimizer(int s);
    /// The host's share of the update (cpu, then ssd sub-groups) once `after_ev` has the gradients
    /// in host memory, over `owned` (owned_ranges(), dataflow only); each share's "parameters
    /// updated" event, -1 where it has none.
    void host_update(int after_ev, const std::vector<std::pair<double, double>>& owned, int& cpu_done, int& ssd_done);
    void enter_optimizer_phase();  ///< what follows is the optimizer's: no layer, micro-batch or chunk
    double optimizer_shard() const;  ///< parameters this rank updates (its ZeRO shard)
    void gather_params_overlapped();
    void gather_edges_zero3();
    void mark_ready(const Bucket& b, int ev);
    /// Index among this rank's layers of global layer `layer` (-1: not here).
    int layer_in_stage_of(int layer) const {
        int n = 0;
        for (int c = 0; c < vpp_; ++c) {
            if (layer >= chunk_first_layer(c) && layer < chunk_first_layer(c) + chunk_layers(c)) return n + layer - chunk_first_layer(c);
            n += chunk_layers(c);
        }
        return -1;
    }
    /// Allocations of a list of tensors are pushed back to back: a run of instruction indices.
    struct AllocRun {
        std::size_t first = 0, count = 0;
    };
    /// `ids` caches the interned names of `list` (filled on first use, in list order, so that names
    /// are interned in the same order as without the cache).
    AllocRun alloc_list(const std::vector<TensorDesc>& list, std::vector<int>& ids);
    void intern_names(const std::vector<TensorDesc>& list, std::vector<int>& ids);
    std::size_t alloc_tensor(const TensorDesc& t, int name);  ///< one Alloc per tier it occupies; how many
    void free_list(AllocRun run);
    /// Each tensor of `list` allocated in turn and freed once the next one is (a no_grad forward).
    void churn_list(const std::vector<TensorDesc>& list, std::vector<int>& ids);
    int chunk_first_layer(int chunk) const { return chunk_start_[static_cast<std::size_t>(chunk)]; }
    int chunk_layers(int chunk) const { return chunk_count_[static_cast<std::size_t>(chunk)]; }
    /// Index of a layer among this rank's layers (chunk-major): indexes act_desc_, ws_desc_.
    int layer_in_stage(int chunk, int li) const {
        int n = li;
        for (int c = 0; c < chunk; ++c) n += chunk_layers(c);
        return n;
    }

    const ModelSpec& m_;
    const ClusterSpec& cl_;
    const PlanSpec& p_;
    const LowerOptions& o_;
    Program& prog_;
    RankProgram& rp_;
    const Names& n_;
    Coord co_;
    bool full_;
    std::int64_t& tensor_counter_;
    Dims d_;
    /// A merged step's pass being lowered: where its segments end (after each EP all-to-all, and
    /// around a dense layer's MLP, which stands where a MoE layer's experts would).
    std::vector<std::size_t>* cuts_ = nullptr;
    void segment_cut() {
        if (cuts_) cuts_->push_back(rp_.instrs.size());
    }
    /// DualPipeV's zero-bubble split (PipeSlot::defer_weights; zero_bubble.cpp): while a split
    /// backward lowers its layers, what is emitted between weight_begin() and weight_end() (the
    /// weight-gradient GEMMs, then the layer's gradient handling and the frees of its activations)
    /// moves to the weight pass, which a later PipeSlot::weights slot appends.
    struct WeightPass {
        std::vector<Instr> instrs;
        std::vector<Operands> operands;
    };
    bool defer_weights_ = false;
    std::vector<std::pair<std::size_t, std::size_t>> weight_ranges_;
    std::deque<WeightPass> weight_queue_;
    std::size_t weight_begin();
    void weight_end(std::size_t begin);
    void split_weight_pass(std::size_t begin);
    void weight_pass();
    /// MLA's projections (attention_linears), resolved once per rank: the replicated
    /// down-projections and the column-parallel up-projections (the output projection is proj).
    struct MlaLinear {
        int name = 0;
        double in = 0, out = 0;
        bool cast = true;  ///< AttentionLinear::fp8_cast
    };
    std::vector<MlaLinear> mla_down_, mla_up_;
    DType dtype_ = DType::bf16;  ///< of the plan's precision, stamped on every instruction
    int micro_ = 1, pp_ = 1, vpp_ = 1, stage_ = 0, stage_first_layer_ = 0;
    std::vector<int> chunk_start_, chunk_count_;
    std::vector<PipeSlot> schedule_;
    std::vector<int> last_bwd_mb_;   ///< per chunk: micro-batch of its last backward in the step
    std::vector<int> first_bwd_mb_;  ///< per chunk: micro-batch of its first backward in the step
    double moe_factor_ = 1;         ///< token load of this rank's experts relative to the mean
    int a2a_rank_ppm_ = 0;          ///< DeepEP: GPUs a token reaches / top_k, in millionths (0: flat all-to-all)
    int a2a_node_ppm_ = 0;          ///< DeepEP: nodes a token reaches / top_k, in millionths
    std::size_t last_collective_ = 0;  ///< index in rp_.instrs of the last collective pushed
    int next_event_ = 0;
    // Record reuse: a record on a stream that has issued nothing since its last record returns
    // that record's event (waits count as issued: they extend what a record stands for).
    std::array<std::int64_t, kStreamCount> issued_{};
    std::array<std::int64_t, kStreamCount> last_record_at_{};
    std::array<int, kStreamCount> last_record_ev_{};
    std::array<std::int64_t, kGroupCount> coll_seq_{};

    // current context stamped on every instruction
    Phase phase_ = Phase::other;
    int chunk_ = 0, layer_ = -1, mb_ = -1, step_ = 0;

    // memory
    std::vector<std::vector<TensorDesc>> act_desc_, ws_desc_;  ///< per layer of the stage
    std::vector<std::vector<TensorDesc>> fwd_ws_desc_;  ///< per layer in stage: layer_forward_transients (recomputed only)
    std::vector<std::vector<int>> fwd_ws_ids_;
    std::vector<TensorDesc> out_slice_desc_, out_full_desc_;  ///< pipe_output_slice / _regathered
    std::vector<int> out_slice_ids_, out_full_ids_;
    std::vector<TensorDesc> emb_desc_, emb_ws_desc_, logits_desc_, head_ws_desc_, head_fwd_ws_desc_, mtp_ws_desc_;
    std::vector<std::vector<int>> act_ids_, ws_ids_;  ///< interned names of act_desc_, ws_desc_
    std::vector<int> emb_ids_, emb_ws_ids_, logits_ids_, head_ws_ids_, head_fwd_ws_ids_, mtp_ws_ids_;
    /// (mb, chunk, layer) -> allocs; layer -1: the embedding's, -2: the logits', -3: DeepSpeed's sent-output slice
    std::map<std::tuple<int, int, int>, AllocRun> stashed_;
    std::vector<TensorDesc> layer_phase_desc_;  ///< buffers of the layers' backward alone (Lifetime::layers_backward)
    std::vector<int> layer_phase_ids_;
    std::vector<TensorDesc> after_loss_desc_;  ///< buffers from the head's weight gradient on (Lifetime::after_loss)
    std::vector<int> after_loss_ids_;
    std::map<std::tuple<int, int, int>, int> act_offloaded_;  ///< (mb, chunk, layer) -> d2h event
    int found_inf_ = -1;  ///< fp16: the step's overflow flag every update reads (-1: none)
    /// Dataflow of activation offload: what a layer's forward touched, and the copies that take
    /// the part its backward reads down and back up (named once that backward is lowered).
    struct ActCopies {
        std::vector<int> touched;
        std::size_t d2h = 0, h2d = 0;
        bool fetched = false;
    };
    std::map<std::tuple<int, int, int>, ActCopies> act_copies_;
    std::vector<int>* touch_ = nullptr;  ///< io_lists adds the activations it names here (a layer's forward)
    void name_act_copies(int mb, int chunk, int li, std::size_t backward_begin);
    std::map<std::string, int> tensor_names_;

    // data-parallel gradient buckets
    std::vector<Unit> units_;
    std::vector<std::vector<std::pair<double, double>>> zero3_pieces_;  ///< per unit: build_zero3_pieces
    std::vector<char> resident_;  ///< per unit: homed on the GPU under split_params (build_resident_units)
    std::vector<Bucket> buckets_;
    double dense_elements_ = 0, expert_elements_ = 0;
    /// Sharded states over edp 1: nothing reduces or gathers the expert buffer, a rank's is its shard.
    bool expert_shard_whole() const { return group_size(Group::edp) <= 1; }
    /// The experts' gradients written straight into the rank's shard: a whole shard, not streamed to
    /// the host (where each bucket or layer is a value until its copy down).
    bool expert_grads_in_shard() const { return expert_shard_whole() && !p_.streams_grads_to_host(); }
    bool shard_grads_ = false;  ///< the rank keeps a shard of its gradients (DataTensor::version)
    bool shard_params_ = false;  ///< ZeRO-3 on the GPU: a shard of the parameters, layers gathered for use
    std::vector<std::pair<double, double>> grad_values_;  ///< ranges reduce-scattered, in buffer order
    std::vector<int> grad_version_;                        ///< per range: reductions emitted so far
    bool reduce_grads_ = false;    ///< this backward reduces its gradients (the last one, or every one under ZeRO-2)
    bool first_backward_ = false;  ///< this backward is its chunk's first in the step
    bool last_backward_ = false;   ///< ... and its last
    bool mtp_pass_ = false;     ///< lowering an MTP module's layer: never fully recomputed
    int optimizer_done_ev_ = -1;    ///< next step's forward waits for this (-1: nothing)
    int param_gather_ev_ = -1;
    int host_grads_ev_ = -1;                  ///< lock-free: the D2H of a step's gradients, for the next step's update
    int lf_cpu_done_ = -1, lf_ssd_done_ = -1;  ///< lock-free: the host update emitted at this step's start
    int pending_send_ = -1;  ///< p2p_blocking, odd stage: the send completed after the next receive
    std::vector<int> layer_ready_;  ///< per layer of the stage: dist-opt gather its first forward waits for
    int emb_ready_ = -1, head_ready_ = -1;  ///< likewise for the embedding's and the head's parameters

    // dataflow
    bool df_ = false;
    TensorTable* table_ = nullptr;
    ParamLayout layout_;
    int rank_ = 0;                 ///< global rank (full mode)
    std::size_t last_op_ = 0;      ///< the last instruction pushed that is not a record or wait: io() names its operands
};

}  // namespace strata::sim::lower_detail
