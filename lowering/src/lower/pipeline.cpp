// The step of one rank: pipeline passes in schedule order (with send/recv, embedding, logits and
// loss, per-layer prefetch of parameters and offloaded activations), then gradient reduction and
// the optimizer on its tiers; and lower() itself, which builds every RankProgram. What one layer
// does lives in layer_ops.cpp; the update in optimizer.cpp; buckets, fetches and memory helpers in lower.cpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "strata/common/huge_pages.hpp"
#include "lower_impl.hpp"
#include "strata/common/error.hpp"

namespace strata::sim {
namespace lower_detail {

void RankLowering::run(int steps) {
    phase_ = Phase::other;
    if (o_.emit_memory) {
        std::vector<int> ids;
        alloc_list(stage_model_states(m_, p_, stage_), ids);
        ids.clear();
        // Buffers of the layers' backward alone come and go with each backward pass's layers
        // (backward_pass), so the head's backward runs without them, as the memory model counts.
        std::vector<TensorDesc> always;
        for (TensorDesc& d : stage_buffers(m_, p_, stage_))
            (d.lifetime == Lifetime::layers_backward ? layer_phase_desc_ : d.lifetime == Lifetime::after_loss ? after_loss_desc_ : always).push_back(std::move(d));
        alloc_list(always, ids);
    }
    for (int s = 0; s < steps; ++s) step(s);
}

void RankLowering::step(int s) {
    step_ = s;
    // Lock-free (Angel-PTM, as DeepSpeed's one-step-delayed update): the host's update of the
    // previous step's gradients runs under this step's forward and backward, which read the
    // parameters it has not yet changed; its result goes up at this step's end (optimizer()).
    if (p_.lock_free_update && p_.offload.optimizer.gpu < 1.0) {
        wait(Stream::cpu, optimizer_done_ev_);  // the host parameters it overwrites have gone up
        host_update(host_grads_ev_, df_ ? owned_ranges() : std::vector<std::pair<double, double>>{}, lf_cpu_done_, lf_ssd_done_);
        wait(Stream::compute, host_grads_ev_);  // the gradients this step accumulates anew are out
    }
    host_grads_ev_ = -1;
    phase_ = Phase::forward;
    chunk_ = 0;
    layer_ = -1;
    mb_ = s * micro_;
    // The previous step's parameters must be in place: the dist-opt all-gather and the host
    // optimizer's H2D (lock-free too: what it copies up at a step's end is the update before).
    wait(Stream::compute, param_gather_ev_);
    param_gather_ev_ = -1;
    if ((p_.zero_stage == 1 || p_.zero_stage == 2) && p_.overlap_param_gather) gather_params_overlapped();
    wait(Stream::compute, optimizer_done_ev_);
    optimizer_done_ev_ = -1;
    if (p_.zero_stage == 3) gather_edges_zero3();
    for (std::size_t k = 0; k < schedule_.size(); ++k) {
        const PipeSlot& sl = schedule_[k];
        if (k + 1 < schedule_.size() && merged_pair(p_, sl, schedule_[k + 1])) {
            merged_passes(sl, schedule_[k + 1]);
            ++k;
        } else if (sl.weights) {
            if (o_.zero_bubble) weight_pass();
        } else if (sl.forward) {
            forward_pass(sl.microbatch, sl.chunk);
        } else {
            backward_pass(sl.microbatch, sl.chunk, sl.defer_weights && o_.zero_bubble);
        }
    }
    wait(Stream::compute, pending_send_);  // an odd stage's last send
    pending_send_ = -1;
    dp_collectives_at_end();
    optimizer(s);
}

// plan.moe_a2a_overlap, as Megatron-Core's combined 1F1B (combined_1f1b.py,
// model_chunk_schedule_plan.py) and DeepSeek's DualPipe run it: a steady forward and the backward
// after it, of another micro-batch, as one step whose layers pair up (forward layer i with the
// backward's i-th from the top), each EP all-to-all of one running under the other's compute. The
// schedule's extra warm-up forward (pipeline_schedule) keeps the two independent; merged_pair
// (schedule.cpp) says which slots merge.

// Both passes are lowered whole, each cut after its all-to-alls, then their segments interleaved
// in Megatron's per-layer order (TransformerLayerSchedulePlan.run): the backward's combine first,
// then the forward's attention and dispatch, the backward's experts and dispatch, the forward's
// experts and combine, the backward's attention. Each stream keeps its own pass's order; events
// order the rest, so the engine and the runtime execute the result as lowered.
void RankLowering::merged_passes(const PipeSlot& f, const PipeSlot& b) {
    std::vector<std::size_t> f_cuts, b_cuts;
    const std::size_t begin = rp_.instrs.size();
    cuts_ = &f_cuts;
    forward_pass(f.microbatch, f.chunk);
    const std::size_t mid = rp_.instrs.size();
    // The backward must not take a record of the forward's as its own: the forward's may end up
    // after it.
    last_record_ev_.fill(-1);
    cuts_ = &b_cuts;
    backward_pass(b.microbatch, b.chunk);
    cuts_ = nullptr;
    last_record_ev_.fill(-1);  // after the merge a stream's last record is no longer its last instruction
    interleave_segments(begin, mid, rp_.instrs.size(), f_cuts, b_cuts);
}

void RankLowering::interleave_segments(std::size_t begin, std::size_t mid, std::size_t end, const std::vector<std::size_t>& f_cuts,
                                       const std::vector<std::size_t>& b_cuts) {
    auto bounds = [](std::size_t from, std::size_t to, const std::vector<std::size_t>& cuts) {
        std::vector<std::size_t> out{from};
        for (std::size_t c : cuts)
            if (c > out.back() && c < to) out.push_back(c);
        out.push_back(to);
        return out;
    };
    const std::vector<std::size_t> fb = bounds(begin, mid, f_cuts), bb = bounds(mid, end, b_cuts);
    if (df_) rp_.operands.resize(rp_.instrs.size());
    std::vector<Instr> instrs;
    std::vector<Operands> operands;
    instrs.reserve(end - begin);
    std::vector<std::size_t> moved(end - begin);  // old index - begin -> new index
    auto take = [&](const std::vector<std::size_t>& v, std::size_t seg) {
        if (seg + 1 >= v.size()) return;
        for (std::size_t i = v[seg]; i < v[seg + 1]; ++i) {
            moved[i - begin] = begin + instrs.size();
            instrs.push_back(rp_.instrs[i]);
            if (df_) operands.push_back(rp_.operands[i]);
        }
    };
    for (std::size_t seg = 0; seg + 1 < std::max(fb.size(), bb.size()); ++seg) {
        take(bb, seg);
        take(fb, seg);
    }
    std::copy(instrs.begin(), instrs.end(), rp_.instrs.begin() + static_cast<std::ptrdiff_t>(begin));
    if (df_) std::copy(operands.begin(), operands.end(), rp_.operands.begin() + static_cast<std::ptrdiff_t>(begin));
    // What still names instructions of the range: the stashed allocation runs (a run never spans a
    // cut, so it stays contiguous), activation offload's copies, the last op and collective.
    auto remap = [&](std::size_t& i) {
        if (i >= begin && i < end) i = moved[i - begin];
    };
    for (auto& [key, run] : stashed_) {
        if (run.count == 0 || run.first < begin || run.first >= end) continue;
        STRATA_ASSERT(moved[run.first + run.count - 1 - begin] == moved[run.first - begin] + run.count - 1,
                      "lower: an allocation run split by a merged step's segments");
        remap(run.first);
    }
    for (auto& [key, c] : act_copies_) remap(c.d2h), remap(c.h2d);
    remap(last_op_);
    remap(last_collective_);
}

// DeepSpeed's pipeline engine (plan.p2p_blocking) runs its sends and receives on the compute
// stream, each blocking until its peer's matching call runs, and orders them by stage parity to
// avoid the 1F1B deadlock of two neighbours both sending first: an even stage finishes its send
// before it posts the next receive; an odd stage posts the receive first and finishes the send
// after it (deepspeed/runtime/pipe/schedule.py, TrainSchedule). Megatron pre-posts its receives
// on a communication stream: there the receive is ready whenever the sender is.
void RankLowering::block_on_send() {
    const int sent = record(Stream::pp_p2p);
    if (stage_ % 2 == 0) wait(Stream::compute, sent);
    else pending_send_ = sent;
}

void RankLowering::post_blocking_recv() {
    if (!p_.p2p_blocking) return;
    wait(Stream::pp_recv, record(Stream::compute));  // posted when the compute stream reaches it
    wait(Stream::compute, pending_send_);            // an odd stage's previous send completes after it
    pending_send_ = -1;
}

// Megatron's distributed optimizer with overlap_param_gather: the all-gather of the updated
// parameters is dispatched at the start of the next step's forward, bucket by bucket in forward
// order (the gradient buckets, last first: Megatron shares them between the two), and a layer's
// first forward waits only for the bucket holding its first parameters (the embedding and the head
// wait for theirs). Emitted at the start of every step (standing for the previous step's update),
// so one lowered step carries one gather.
void RankLowering::gather_params_overlapped() {
    layer_ready_.assign(act_desc_.size(), -1);
    emb_ready_ = head_ready_ = -1;
    if (group_size(Group::dp) <= 1 && group_size(Group::edp) <= 1) return;
    int after = record(Stream::compute);  // the previous step's GPU optimizer is done
    wait(Stream::dp_comm, optimizer_done_ev_);
    for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
        const Bucket& b = *it;
        const Group g = b.expert ? Group::edp : Group::dp;
        if (group_size(g) <= 1) continue;
        const int ev = collective(Stream::dp_comm, CollKind::all_gather, g, b.count * d_.act_bytes,
                                  b.expert ? n_.edp_params : n_.dp_params, after);
        after = -1;  // later buckets follow on the same stream
        if (df_) {
            const int r = range(TensorRole::param, b.off, b.count, Tier::gpu, b.expert);
            io({r}, {r});
        }
        mark_ready(b, ev);
    }
}

// The units whose first element a gathered bucket holds are ready once it arrives (buckets go out
// last-first, so a unit's lower part is the last of it to arrive).
void RankLowering::mark_ready(const Bucket& b, int ev) {
    for (const Unit& u : units_) {
        const double first = b.expert ? u.expert_off : u.dense_off, n = b.expert ? u.expert : u.dense;
        if (n <= 0 || first < b.off || first >= b.off + b.count) continue;
        if (u.layer >= 0) {
            const int lis = layer_in_stage_of(u.layer);
            if (lis >= 0) layer_ready_[static_cast<std::size_t>(lis)] = ev;
        } else if (u.embedding) {
            emb_ready_ = ev;
        } else if (u.head) {
            head_ready_ = ev;
        }
    }
}

// ZeRO-3 holds the embedding and the head sharded like every layer: gather them before the step's
// forward uses them (DeepSpeed's parameter fetch; the layers fetch their own, fetch_params).
void RankLowering::gather_edges_zero3() {
    layer_ready_.assign(act_desc_.size(), -1);
    emb_ready_ = head_ready_ = -1;
    // Homed off the GPU they are fetched and gathered before each use instead (fetch_edge).
    if (group_size(Group::dp) <= 1 || !p_.offload.params.all_gpu()) return;
    int after = record(Stream::compute);
    for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {  // last first, as mark_ready assumes
        const Bucket& b = *it;
        // An edge's experts (the MTP modules' layers, in the head's unit) are sharded over the
        // expert-data-parallel group, as a layer's are (fetch_params); with edp 1 a rank holds them whole.
        if (b.expert && group_size(Group::edp) <= 1) continue;
        const int ev = collective(Stream::dp_comm, CollKind::all_gather, b.expert ? Group::edp : Group::dp, b.count * d_.act_bytes,
                                  b.expert ? n_.zero3_ag_expert : n_.zero3_edges, after);
        after = -1;
        gather_operands(b.off + (b.expert ? dense_elements_ : 0), b.count, b.expert);
        mark_ready(b, ev);  // on the one dp_comm stream: the dense gathers after it imply it
    }
}

// Megatron-LM's scatter/gather (SC21 Sec. 4.1) and DeepSpeed's partitioned pipe buffers: each TP
// rank sends its 1/tp slice over its own NIC, and the receivers rebuild the tensor over NVLink
// before the stage can use it. The gather is on the critical path; the wire carries tp times less.
double RankLowering::p2p_wire_bytes(double tensor_bytes) const {
    return p_.p2p_scatter_gather ? tensor_bytes / d_.tp : tensor_bytes;
}

// In the dataflow the receive wrote this rank's slice (`slice`, 1/tp of the rows) and the gather
// rebuilds the whole tensor (`whole`); the sender sent its TP rank's slice of its whole tensor.
void RankLowering::gather_received(double tensor_bytes, int slice, int whole) {
    if (!p_.p2p_scatter_gather) return;
    wait(Stream::compute, collective(Stream::tp_comm, CollKind::all_gather, Group::tp, tensor_bytes, n_.pp_gather));
    if (df_) io({slice}, {whole});
}

// The tensor a receive writes: the whole one, or with the scatter/gather this rank's slice of it.
int RankLowering::received(int whole) {
    if (!df_ || !p_.p2p_scatter_gather || d_.tp <= 1) return whole;
    DataTensor t = prog_.tensors[static_cast<std::size_t>(whole)];
    t.rows /= static_cast<std::int64_t>(d_.tp);
    return table_->intern(t);
}

void RankLowering::release_logits(int chunk) {
    if (auto it = stashed_.find({mb_, chunk, -2}); it != stashed_.end()) {
        free_list(it->second);
        stashed_.erase(it);
    }
}

void RankLowering::forward_pass(int mb, int chunk) {
    mb_ = step_ * micro_ + mb;
    chunk_ = chunk;
    layer_ = -1;
    phase_ = Phase::forward;
    const int v = virtual_stage_of(p_, stage_, chunk), vlast = pp_ * vpp_ - 1;
    // Neighbouring virtual stages' ranks (-1 past the ends); at the turn of DualPipeV's V the
    // neighbour is this rank and nothing moves.
    const int prev = v > 0 ? rank_of_virtual_stage(p_, v - 1) : -1, next = v < vlast ? rank_of_virtual_stage(p_, v + 1) : -1;
    const bool sends = chunk_sends_to_other_rank(p_, stage_, chunk);
    const int lane = full_ ? co_.t + p_.tp * (co_.c + p_.cp * co_.d) : 0;
    const double p2p_bytes = d_.tokens_sp * d_.h * d_.act_bytes;  // b*s/cp*h*2 (/tp with SP)
    const int first_layer = chunk_first_layer(chunk);
    if (v > 0) {
        if (prev != stage_) {
            post_blocking_recv();
            Instr& in = push(InstrKind::recv, recv_stream(chunk, true), n_.pp_act);
            in.bytes = p2p_wire_bytes(p2p_bytes);
            in.peer = program_of_stage(prev);
            in.match_id = p2p_match(mb_, v - 1, true, lane);
            const int x = act(n_.t_x, first_layer, d_.tokens_sp, d_.h), slice = received(x);
            if (df_) io({}, {slice});
            wait(Stream::compute, record(recv_stream(chunk, true)));
            gather_received(p2p_bytes, slice, x);
        }
    } else {
        stashed_[{mb_, chunk, -1}] = alloc_list(emb_desc_, emb_ids_);
        embedding_forward();
    }
    const int count = chunk_layers(chunk);
    int pending = -1, pending_off = -1;
    for (int li = 0; li < count; ++li) {
        const int layer = chunk_first_layer(chunk) + li;
        // DeepSpeed's ZeRO-3 of 2021 gathered a layer only when it ran, after the kernels before it
        // (its NVMe/host swap-in was still prefetched a layer ahead).
        const bool sync = zero3_sync();
        if (sync) {
            if (li == 0) pending_off = fetch_params(layer, -1, FetchPart::offloaded);
            wait(Stream::dp_comm, pending_off);
            pending = fetch_params(layer, record(Stream::compute), FetchPart::gather);
            pending_off = -1;
        } else if (li == 0) {
            pending = fetch_params(layer, -1);
        }
        wait(Stream::compute, pending);
        pending = -1;
        if (li + 1 < count && (p_.zero_stage == 3 || !p_.offload.params.all_gpu())) {
            layer_ = layer;
            if (sync) pending_off = fetch_params(layer + 1, record(Stream::compute), FetchPart::offloaded);
            else pending = fetch_params(layer + 1, record(Stream::compute));
        }
        layer_ = layer;
        const int lis = layer_in_stage(chunk, li);
        if (!layer_ready_.empty() && layer_ready_[static_cast<std::size_t>(lis)] >= 0) {
            wait(Stream::compute, layer_ready_[static_cast<std::size_t>(lis)]);  // its bucket's gather
            layer_ready_[static_cast<std::size_t>(lis)] = -1;
        }
        stashed_[{mb_, chunk, li}] = alloc_list(act_desc_[static_cast<std::size_t>(lis)], act_ids_[static_cast<std::size_t>(lis)]);
        // torch's kept output, to the end of its backward, with the first layer's stash (the memory
        // model's bound: from the chunk's forward to its backward's end).
        if (li == 0 && sends && p_.torch_pipelining && !out_slice_desc_.empty())
            stashed_[{mb_, chunk, -3}] = alloc_list(out_slice_desc_, out_slice_ids_);
        churn_list(fwd_ws_desc_[static_cast<std::size_t>(lis)], fwd_ws_ids_[static_cast<std::size_t>(lis)]);
        const TierSplit& af = p_.offload.activations;
        const bool offload = af.cpu + af.ssd > 0;
        ActCopies* copies = offload && df_ ? &act_copies_[{mb_, chunk, li}] : nullptr;
        if (copies) touch_ = &copies->touched;
        layer_forward(layer, Phase::forward);
        touch_ = nullptr;
        if (offload) {
            double bytes = 0;
            for (const TensorDesc& t : act_desc_[static_cast<std::size_t>(lis)]) bytes += t.bytes;
            int ev = copy(Stream::d2h, CopyKind::d2h, bytes * (af.cpu + af.ssd), n_.act_d2h, record(Stream::compute));
            if (copies) copies->d2h = last_op_;  // its operands: once the layer's backward is lowered
            if (af.ssd > 0) ev = copy(Stream::ssd, CopyKind::ssd_write, bytes * af.ssd, n_.act_ssd_write, ev);
            act_offloaded_[{mb_, chunk, li}] = ev;
        }
    }
    layer_ = -1;
    const int out_layer = first_layer + count;  // the chunk's output is the next layer's input
    if (v == vlast) {
        stashed_[{mb_, chunk, -2}] = alloc_list(logits_desc_, logits_ids_);  // incl. the MTP modules'
        head_forward();
        for (int k = 1; k <= m_.mtp_depth; ++k) mtp_forward(k);
    } else if (next != stage_) {
        wait(send_stream(chunk, true), record(Stream::compute));
        Instr& in = push(InstrKind::send, send_stream(chunk, true), n_.pp_act);
        in.bytes = p2p_wire_bytes(p2p_bytes);
        in.peer = program_of_stage(next);
        in.match_id = p2p_match(mb_, v, true, lane);
        if (df_) io({act(n_.t_x, out_layer, d_.tokens_sp, d_.h)}, {});
        if (p_.p2p_blocking) block_on_send();
        // DeepSpeed partitions the output it sent and keeps its slice.
        if (!p_.torch_pipelining && !out_slice_desc_.empty()) stashed_[{mb_, chunk, -3}] = alloc_list(out_slice_desc_, out_slice_ids_);
    }
}

void RankLowering::backward_pass(int mb, int chunk, bool defer_weights) {
    const std::size_t pass_begin = rp_.instrs.size();
    mb_ = step_ * micro_ + mb;
    chunk_ = chunk;
    layer_ = -1;
    phase_ = Phase::backward;
    const bool last_backward = mb == last_bwd_mb_[static_cast<std::size_t>(chunk)];
    first_backward_ = mb == first_bwd_mb_[static_cast<std::size_t>(chunk)];
    last_backward_ = last_backward;
    // ZeRO-2 (DeepSpeed) keeps only its shard of the gradients, so every micro-batch's backward
    // reduces into it; the distributed optimizer and ZeRO 0 reduce once, in the last backward.
    const bool every_mb = p_.zero_stage == 2;
    reduce_grads_ = p_.zero_stage != 3 && (last_backward || every_mb);
    const bool bucketed = (p_.overlap_grad_reduce || every_mb) && reduce_grads_;
    const int v = virtual_stage_of(p_, stage_, chunk), vlast = pp_ * vpp_ - 1;
    const int prev = v > 0 ? rank_of_virtual_stage(p_, v - 1) : -1, next = v < vlast ? rank_of_virtual_stage(p_, v + 1) : -1;
    const int lane = full_ ? co_.t + p_.tp * (co_.c + p_.cp * co_.d) : 0;
    const double p2p_bytes = d_.tokens_sp * d_.h * d_.act_bytes;
    AllocRun regathered{};  // DeepSpeed's whole output again, for this backward
    AllocRun after_loss{};  // the head chunk's: below
    if (v < vlast) {
        if (next != stage_) {
            post_blocking_recv();
            Instr& in = push(InstrKind::recv, recv_stream(chunk, false), n_.pp_grad);
            in.bytes = p2p_wire_bytes(p2p_bytes);
            in.peer = program_of_stage(next);
            in.match_id = p2p_match(mb_, v + 1, false, lane);
            const int g = grad(n_.g_x, chunk_first_layer(chunk) + chunk_layers(chunk), d_.tokens_sp, d_.h), slice = received(g);
            if (df_) io({}, {slice});
            wait(Stream::compute, record(recv_stream(chunk, false)));
            gather_received(p2p_bytes, slice, g);
        }
        if (!out_full_desc_.empty()) regathered = alloc_list(out_full_desc_, out_full_ids_);
    } else {
        begin_unfused_capture();
        for (int k = m_.mtp_depth; k >= 1; --k) mtp_backward(k);  // the deepest first: its hidden state's gradient feeds the one below
        head_backward();
        // The loss's and the head's saved tensors go with their backward (autograd frees a node's
        // saved tensors when it has run), before the layers' backward, with one chunk a rank or
        // several (memory.hpp's held states; until stop 64 kept to the chunk's end with several).
        release_logits(chunk);
        // ZeRO-3's whole head gradients, from the head's weight gradient to the pass's end: after
        // the loss's stash is gone (the memory model's bound; here once the logits are released).
        after_loss = alloc_list(after_loss_desc_, after_loss_ids_);
        const StageParams mtp = mtp_params_local(m_, p_);
        const double head_dense = output_params_rank(m_, p_) + mtp.dense;
        accumulate_grads(head_dense, mtp.expert);
        if (bucketed)
            for (std::size_t u = 0; u < units_.size(); ++u)
                if (units_[u].chunk == chunk && units_[u].head) unit_ready(static_cast<int>(u));
    }
    const AllocRun layer_phase = alloc_list(layer_phase_desc_, layer_phase_ids_);
    const int count = chunk_layers(chunk);
    int pending_p = -1, pending_a = -1, pending_off = -1;
    for (int li = count - 1; li >= 0; --li) {
        const int layer = chunk_first_layer(chunk) + li;
        const bool sync = zero3_sync();
        if (sync) {
            if (li == count - 1) pending_off = fetch_params(layer, -1, FetchPart::offloaded);
            wait(Stream::dp_comm, pending_off);
            pending_p = fetch_params(layer, record(Stream::compute), FetchPart::gather);
            pending_off = -1;
        } else if (li == count - 1) {
            pending_p = fetch_params(layer, -1);
        }
        if (li == count - 1) pending_a = fetch_activations(mb_, chunk, li, -1);
        wait(Stream::compute, pending_p);
        wait(Stream::compute, pending_a);
        pending_p = pending_a = -1;
        layer_ = layer;
        const bool prefetch = p_.zero_stage == 3 || !p_.offload.params.all_gpu() || !p_.offload.activations.all_gpu();
        if (li > 0 && prefetch) {
            const int start = record(Stream::compute);
            if (sync) pending_off = fetch_params(layer - 1, start, FetchPart::offloaded);
            else pending_p = fetch_params(layer - 1, start);
            pending_a = fetch_activations(mb_, chunk, li - 1, start);
        }
        const int lis = layer_in_stage(chunk, li);
        const AllocRun ws = alloc_list(ws_desc_[static_cast<std::size_t>(lis)], ws_ids_[static_cast<std::size_t>(lis)]);
        begin_unfused_capture();
        const std::size_t backward_begin = rp_.instrs.size();
        defer_weights_ = defer_weights;  // the decoder layers' weight gradients (not the head's, MTP's or embedding's)
        layer_backward(layer, lis);
        if (df_) name_act_copies(mb_, chunk, li, backward_begin);
        layer_ = layer;
        free_list(ws);
        const std::size_t w = weight_begin();
        auto it = stashed_.find({mb_, chunk, li});
        if (it != stashed_.end()) {
            free_list(it->second);
            stashed_.erase(it);
        }
        layer_grads(layer);
        weight_end(w);
        defer_weights_ = false;
    }
    layer_ = -1;
    if (v == 0) {
        const AllocRun ws = alloc_list(emb_ws_desc_, emb_ws_ids_);
        begin_unfused_capture();
        embedding_backward();
        free_list(ws);
        auto it = stashed_.find({mb_, chunk, -1});
        if (it != stashed_.end()) {
            free_list(it->second);
            stashed_.erase(it);
        }
        // Its bucket may hold layers whose deferred weight gradients it must wait for.
        defer_weights_ = defer_weights;
        const std::size_t w = weight_begin();
        accumulate_grads(embedding_params_rank(m_, p_), 0);
        if (bucketed)
            for (std::size_t u = 0; u < units_.size(); ++u)
                if (units_[u].chunk == chunk && units_[u].embedding) unit_ready(static_cast<int>(u));
        // ZeRO-3 without a pipeline reduce-scatters the edges' gradients at the end of every
        // micro-batch's backward, as it does a layer's (FSDP's root unit in its post-backward,
        // DeepSpeed's buckets as they fill): the whole head and embedding gradients live only
        // through that backward.
        if (p_.zero_stage == 3 && !pipelined_fsdp()) reduce_buckets(chunk);
        weight_end(w);
        defer_weights_ = false;
    } else if (prev != stage_) {
        wait(send_stream(chunk, false), record(Stream::compute));
        Instr& in = push(InstrKind::send, send_stream(chunk, false), n_.pp_grad);
        in.bytes = p2p_wire_bytes(p2p_bytes);
        in.peer = program_of_stage(prev);
        in.match_id = p2p_match(mb_, v, false, lane);
        if (df_) io({grad(n_.g_x, chunk_first_layer(chunk), d_.tokens_sp, d_.h)}, {});
        if (p_.p2p_blocking) block_on_send();
    }
    flush_host_grads();  // the pass's last range down to the host (host_grads.cpp)
    free_list(layer_phase);
    free_list(after_loss);
    free_list(regathered);
    if (auto it = stashed_.find({mb_, chunk, -3}); it != stashed_.end()) {
        free_list(it->second);
        stashed_.erase(it);
    }
    if (defer_weights) split_weight_pass(pass_begin);
}

}  // namespace lower_detail

Program lower(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const LowerOptions& o) {
    using namespace lower_detail;
    STRATA_ASSERT(p.tp >= 1 && p.pp >= 1 && p.dp >= 1 && p.cp >= 1 && p.ep >= 1 && p.vpp >= 1, "lower: bad plan degrees");
    STRATA_ASSERT(p.micro_batches() >= 1, "lower: global_batch smaller than micro_batch * dp");
    // A hand-laid split may leave a virtual stage empty (Megatron-Core's layouts give the embedding
    // or the loss a chunk of their own); every rank still holds a layer (validated).
    STRATA_ASSERT(m.layers >= p.pp, "lower: fewer layers than pipeline stages");
    STRATA_ASSERT(m.layers <= std::numeric_limits<std::int16_t>::max(), "lower: more layers than Instr::layer holds");
    Program prog;
    prog.full_mode = o.full_mode;
    prog.gpus = p.gpus();
    prog.tokens_per_step = static_cast<double>(p.global_batch) * static_cast<double>(m.seq_len);
    prog.model_flops_per_step = 3 * forward_flops_per_step(m, p);
    Names names{};
    names.intern(prog);
    const int steps = std::max(o.steps, 1);
    prog.steps = steps;
    const int gpn = std::max(1, c.gpus_per_node);
    std::int64_t tensor_counter = 0;
    TensorTable table{prog, {}};
    if (o.dataflow) {
        STRATA_ASSERT(o.full_mode, "lower: dataflow needs full mode (one program per rank)");
        const std::string why = dataflow_unsupported(m, p);
        STRATA_ASSERT(why.empty(), "lower: " + why);
    }

    std::vector<Coord> coords;
    if (o.full_mode) {
        coords.reserve(static_cast<std::size_t>(p.gpus()));
        for (int s = 0; s < p.pp; ++s)
            for (int d = 0; d < p.dp; ++d)
                for (int cc = 0; cc < p.cp; ++cc)
                    for (int t = 0; t < p.tp; ++t) {
                        const int g = t + p.tp * (cc + p.cp * (d + p.dp * s));
                        if (o.ranks.empty() || std::binary_search(o.ranks.begin(), o.ranks.end(), g)) coords.push_back({t, cc, d, s});
                    }
        STRATA_ASSERT(std::is_sorted(o.ranks.begin(), o.ranks.end()) && (o.ranks.empty() || o.ranks.back() < p.gpus()),
                      "lower: LowerOptions::ranks must be ascending global ranks of the plan");
    } else {
        for (int s = 0; s < p.pp; ++s) coords.push_back({0, 0, 0, s});
    }
    prog.ranks.resize(coords.size());
    // Rough size: ~40 instructions per layer and micro-batch each way, to avoid regrowth.
    const std::size_t per_rank = static_cast<std::size_t>(steps) * static_cast<std::size_t>(p.micro_batches()) *
                                 static_cast<std::size_t>(m.layers / p.pp + 2) * 90 + 256;
    for (std::size_t i = 0; i < coords.size(); ++i) {
        const Coord& co = coords[i];
        RankProgram& rp = prog.ranks[i];
        rp.id = static_cast<int>(i);
        rp.pp_stage = co.s;
        rp.global_rank = co.t + p.tp * (co.c + p.cp * (co.d + p.dp * co.s));
        rp.multiplicity = o.full_mode ? 1 : static_cast<std::int64_t>(p.tp) * p.cp * p.dp;
        rp.node = rp.global_rank / gpn;
        rp.instrs.reserve(per_rank);
        prepare_write_once(rp.instrs.data(), rp.instrs.capacity() * sizeof(Instr));  // before the first write
        RankLowering rl(m, c, p, o, prog, rp, names, co, o.full_mode, tensor_counter, o.dataflow ? &table : nullptr);
        rl.run(steps);
        rl.finish_operands();
        prog.events = std::max(prog.events, rl.events());
    }
    return prog;
}

}  // namespace strata::sim
