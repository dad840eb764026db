// The instructions that move values on the cpu backend and around the cuda backend's device:
// collectives and pipeline transfers through the transport (device buffers staged through the
// host, where the ranks have no communicators: comms.cpp), and copies between tiers (the ssd tier
// is a file).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>
#include <unistd.h>

#include "rank.hpp"
#include "strata/common/error.hpp"
#include "strata/lowering/model.hpp"

namespace strata::runtime {

using namespace sim;
using Args = OperandView;

bool RankState::collective(std::size_t i, bool first, bool refill) {
    const Instr& in = rp_.instrs[i];
    const Transport::Key key{w_.step, in.match_id};
    if (!first) {
        if (comm_of(i)) return moe_collective(in) ? comm_moe(i, false) : comm_done(i);
        std::chrono::steady_clock::time_point at;
        if (!w_.transport.collective_done(key, &at)) return false;
        ended_ns_[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(at - w_.step_start).count();
        if (moe_collective(in)) finish_moe_collective(i);
        if (dev_) unstage(i);
        return true;
    }
    if (in.match_id == 0) fail(i, "an unmatched collective (the runtime needs a full-mode Program)");
    if (moe_collective(in) && comm_of(i)) return comm_moe(i, true);
    if (moe_collective(in)) {  // rows that vary with the routing, exchanged as an all-to-all
        const bool done = w_.transport.collective(key, CollKind::all_to_all, in.group_size, moe_collective_part(i));
        if (done) {
            ended_ns_[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w_.step_start).count();
            finish_moe_collective(i);
        }
        return done;
    }
    if (dev_ && in.group_size == 1) {  // a group of one only moves its data in place
        const Args a{w_.program, rp_, rp_.operands[i]};
        for (int k = 0; k < a.o.n_in && k < a.o.n_out; ++k)
            dev_->copy(tensor(a.id(a.o.n_in + k), true, i), tensor(a.id(k), false, i), std::min(elements(a.id(k)), elements(a.id(a.o.n_in + k))));
        ended_ns_[i] = -1;
        return true;
    }
    const Args a{w_.program, rp_, rp_.operands[i]};
    const auto& members = rp_.groups[static_cast<std::size_t>(in.group)];
    if (static_cast<int>(members.size()) != in.group_size) fail(i, "its group's rank list and size disagree");
    CollPart part;
    part.group_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    part.waker = &waker_;
    for (int k = 0; k < a.o.n_in; ++k) {
        part.in.push_back(tensor(a.id(k), false, i));
        part.in_n.push_back(elements(a.id(k)));
    }
    for (int k = 0; k < a.o.n_out; ++k) {
        part.out.push_back(tensor(a.id(a.o.n_in + k), true, i));
        part.out_n.push_back(elements(a.id(a.o.n_in + k)));
    }
    if (part.in.empty()) fail(i, "has no operands: the dataflow lowering did not name them");
    const TensorRole role = a.in(0).role;
    part.ring = in.ring_step >= 0 ? in.ring_step : in.coll == CollKind::all_gather ? a.out(0).ring : a.in(0).ring;
    if (in.ring_step > 0 && in.coll == CollKind::all_gather) {  // TP overlap: into the block of the member ring_step back
        part.out[0] += ring_block_at(i, a.out(0), a.in(0).rows);
        part.out_n[0] = part.in_n[0];
    }
    part.in_cols = a.in(0).cols;
    part.out_cols = a.out(0).cols;
    part.accumulate = a.o.n_in > 1;  // a ring return adds into what came before
    if (in.group == Group::cp && (in.coll == CollKind::all_gather || in.coll == CollKind::reduce_scatter)) {
        const std::string& cname = w_.program.names[static_cast<std::size_t>(in.name)];
        if (cname == "cp.kv_allgather" || cname == "cp.dkv_reduce_scatter_all") {  // every remote block at once
            const bool gather = in.coll == CollKind::all_gather;
            for (int k = 0; k < (gather ? a.o.n_out : a.o.n_in); ++k) part.rings.push_back(gather ? a.out(k).ring : a.in(k).ring);
            if (gather ? a.o.n_in != 1 : a.o.n_out != 1) fail(i, "an all-gather of K/V blocks reads one tensor, their return writes one");
            part.ring = 0;
            part.accumulate = false;
        }
    }
    part.ranges = (role == TensorRole::param || role == TensorRole::param_grad) && a.id(0) == a.id(a.o.n_in);
    part.zero_rest = part.ranges && role == TensorRole::param_grad && in.coll == CollKind::reduce_scatter;
    // ZeRO-3's gather from the rank's parameter shard (DataTensor::shard) into the whole range.
    if (role == TensorRole::param && in.coll == CollKind::all_gather && a.in(0).shard) {
        if (a.o.n_in != a.o.n_out) fail(i, "a gather from the parameter shard pairs each slice with its range");
        part.ranges = part.from_slice = true;
    }
    // A refetch while the unit's earlier copy is still read: the copy holds these values already
    // (weights change only at the update), and another rank's thread must not write under a
    // kernel reading it (FSDP's fp32 shards would land unrounded until this rank's finish).
    part.keep_out = refill && part.ranges && role == TensorRole::param && in.coll == CollKind::all_gather;
    // A reduction into the rank's gradient shard (DataTensor::shard) adds its slice there.
    if (role == TensorRole::param_grad && in.coll == CollKind::reduce_scatter && a.out(0).shard) {
        if (a.o.n_in != a.o.n_out) fail(i, "a reduce-scatter into the gradient shard pairs each range with its slice");
        part.ranges = part.into_slice = true;
    }
    if (in.coll == CollKind::all_to_all) {  // Ulysses: the head split of Q/K/V or the gradient of the output, and back
        if (in.group != Group::cp || a.o.n_in != 1 || a.o.n_out != 1) fail(i, "an all-to-all outside MoE moves one tensor over the CP group");
        const std::string& name = w_.program.names[static_cast<std::size_t>(in.name)];
        const ModelSpec& m = w_.model;
        const i64 hd = head_dim_of(m), hq = m.heads / tp_size_, hkv = (m.kv_heads > 0 ? m.kv_heads : m.heads) / tp_size_;
        part.ulysses = a.out(0).rows > a.in(0).rows ? 1 : 2;
        // MLA: queries and keys of qk_head_dim, values of v_head_dim, every head its own.
        const i64 dk = m.mla ? qk_head_dim_of(m) : hd, dv = m.mla ? v_head_dim_of(m) : hd;
        part.segments = name == "cp.qkv_all_to_all" ? std::vector<i64>{hq * dk, hkv * dk, hkv * dv} : std::vector<i64>{hq * dv};
        part.seq = m.seq_len;
    }
    if (DeviceComm* c = comm_of(i)) {  // on the device's communicator (comms.cpp)
        comm_collective(i, *c, part, in.coll);
        return comm_done(i);
    }
    if (dev_) {  // staged through host copies; every operand read, the outputs written back
        for (std::size_t k = 0; k < part.in.size(); ++k) part.in[k] = stage(i, part.in[k], part.in_n[k], true, false);
        for (std::size_t k = 0; k < part.out.size(); ++k) part.out[k] = stage(i, part.out[k], part.out_n[k], true, true);
    }
    const bool done = w_.transport.collective(key, in.coll, in.group_size, std::move(part));
    if (done) ended_ns_[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w_.step_start).count();
    if (done && dev_) unstage(i);
    return done;
}

bool RankState::p2p(std::size_t i, bool first) {
    const Instr& in = rp_.instrs[i];
    const bool send = in.kind == InstrKind::send;
    const Transport::Key key{w_.step, in.match_id};
    if (!first) {
        if (comm_of(i)) return comm_done(i);
        std::chrono::steady_clock::time_point at;
        if (!w_.transport.p2p_done(key, send, &at)) return false;
        ended_ns_[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(at - w_.step_start).count();
        if (dev_) unstage(i);
        return true;
    }
    const Args a{w_.program, rp_, rp_.operands[i]};
    const int id = send ? a.id(0) : a.id(a.o.n_in);
    if (a.o.n_in + a.o.n_out != 1) fail(i, "a transfer names one tensor");
    float* data = tensor(id, !send, i);
    i64 n = elements(id);
    if (send && w_.plan.p2p_scatter_gather && tp_size_ > 1) {  // this TP rank's 1/tp of the rows; the receivers gather them
        if (n % tp_size_ != 0) fail(i, "a scatter/gather transfer must split into tp equal slices");
        n /= tp_size_;
        data += static_cast<i64>(tp_rank_) * n;
    }
    if (DeviceComm* c = comm_of(i)) {  // member 0 of a direction's communicator sends, member 1 receives
        if (send) c->send(data, n, 1, in.match_id);
        else c->recv(data, n, 0, in.match_id);
        return comm_done(i);
    }
    if (dev_) data = stage(i, data, n, send, !send);  // a send's values out; a receive's back in
    const bool done = w_.transport.p2p(key, send, data, n, &waker_);
    if (done) ended_ns_[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w_.step_start).count();
    if (done && dev_) unstage(i);
    return done;
}

void RankState::copy(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const Args a{w_.program, rp_, rp_.operands[i]};
    if (a.o.n_in != a.o.n_out || a.o.n_in == 0) fail(i, "a copy pairs each input with an output");
    for (int k = 0; k < a.o.n_in; ++k) {
        const DataTensor &src = a.in(k), &dst = a.out(k);
        if (src.elements() != dst.elements()) fail(i, "copy sizes disagree");
        const i64 n = elements(a.id(k));
        if (in.copy == CopyKind::ssd_read || in.copy == CopyKind::ssd_write) {
            const int fd = ssd_fd();
            const bool read = in.copy == CopyKind::ssd_read;
            const DataTensor& ssd = read ? src : dst;
            float* host = tensor(a.id(read ? a.o.n_in + k : k), read, i);
            if (ssd.role == TensorRole::param) {  // the weights' region (plan.offload.params = ssd)
                try {
                    param_file_io(ssd.offset, ssd.elements(), host, read);
                } catch (const RuntimeError& e) {
                    fail(i, e.what());
                }
                continue;
            }
            const i64 at = ssd_slot(ssd);
            if (reinterpret_cast<std::uintptr_t>(host) % kSsdAlign != 0) fail(i, "a host buffer of the ssd tier is not page-aligned");
            // Whole pages (the slot and the host buffer are padded to them), in the request shape
            // of ZeRO-Infinity's asynchronous I/O (state.cpp ssd_io).
            const bool ok = ssd_io(fd, reinterpret_cast<char*>(host), ssd_padded_bytes(n), at, read);
            if (!ok) fail(i, std::string("the ssd file ") + (read ? "read" : "write") + " failed: " + ssd_path_);
            continue;
        }
        // Rows sized by what arrived (MoE's routed rows) go with their values to the copy.
        if (rows_of(a.id(k)) != src.rows) dyn_rows_[a.id(a.o.n_in + k)] = rows_of(a.id(k));
        float* to = tensor(a.id(a.o.n_in + k), true, i);
        const float* from = tensor(a.id(k), false, i);
        // On a copy lane the copy runs beside the kernels; its readers wait for the Program's events.
        if (dev_ && lane(in.stream) > Device::lane_compute) dev_->copy_async(to, from, n);
        else if (dev_) dev_->copy(to, from, n);
        else std::memcpy(to, from, static_cast<std::size_t>(n) * sizeof(float));
    }
}

void RankState::optimizer(std::size_t i, bool cpu_stream) { optimizer_job(i, cpu_stream)(); }

// Lock-free (plan.lock_free_update): the host's update at a step's start is the previous step's,
// so it is update number w_.step, and the first step has none (0).
int RankState::update_number(bool cpu_stream) const { return cpu_stream && w_.plan.lock_free_update ? w_.step : adam_step_ - w_.skipped; }

}  // namespace strata::runtime
