// Collectives and pipeline transfers on the devices' communicators (device.hpp's DeviceComm: NCCL
// on the cuda backend, its emulation on the emulated device), for ranks on devices of their own.
// The Program's plain collectives map onto NCCL's: an all-reduce per tensor; an all-gather of
// row blocks or of a flat range's slices (in place, or from the rank's shard); a reduce-scatter
// of row blocks, of a range in place (zeroing what the rank does not keep) or into the rank's
// gradient shard (added there). Each (group, stream) has its own communicator, and each
// pipeline direction its own, so that operations are posted to a communicator in one order on
// every member, the order NCCL pairs them in. MoE's exchanges send their row counts through the
// host first (the transport), then the rows on the communicator. Context parallelism's ring moves
// a block (packed columns) to the member `ring` places on; Ulysses packs a block per member,
// exchanges them and unpacks.
#include <algorithm>
#include <array>
#include <map>

#include "rank.hpp"
#include "strata/common/error.hpp"

namespace strata::runtime {

using namespace sim;
using Args = OperandView;

bool RankState::comm_key(std::size_t i, std::vector<int>& members, int& stream) const {
    const Instr& in = rp_.instrs[i];
    if (in.kind == InstrKind::send || in.kind == InstrKind::recv) {
        if (in.peer < 0 || in.peer >= static_cast<int>(w_.program.ranks.size())) return false;
        const int peer = w_.program.ranks[static_cast<std::size_t>(in.peer)].global_rank;
        members = in.kind == InstrKind::send ? std::vector<int>{rank_, peer} : std::vector<int>{peer, rank_};
        stream = in.stream == Stream::pp_p2p_b || in.stream == Stream::pp_recv_b ? -2 : -1;
        return true;
    }
    if (in.kind != InstrKind::collective || in.group_size <= 1 || rp_.operands.empty()) return false;
    if (moe_collective(in)) {
        members = rp_.groups[static_cast<std::size_t>(in.group)];
        stream = static_cast<int>(in.stream);
        return true;
    }
    const bool ulysses = in.coll == CollKind::all_to_all && in.group == Group::cp;
    if (in.coll != CollKind::all_reduce && in.coll != CollKind::all_gather && in.coll != CollKind::reduce_scatter && !ulysses) return false;
    const Args a{w_.program, rp_, rp_.operands[i]};
    if (a.o.n_in == 0 || a.o.n_out == 0) return false;
    members = rp_.groups[static_cast<std::size_t>(in.group)];
    stream = static_cast<int>(in.stream);
    return true;
}

void RankState::set_comm(const std::vector<int>& members, int stream, DeviceComm* c) {
    comms_[{members, stream}] = c;
    c->set_notify([this] { waker_.notify(); });
    comm_lanes_ = true;
}

// Looked up once (connect_comms), not at every poll of the instruction.
void RankState::index_comms() {
    comm_at_.assign(rp_.instrs.size(), nullptr);
    for (std::size_t i = 0; i < rp_.instrs.size(); ++i) {
        std::vector<int> members;
        int stream = 0;
        if (!comm_key(i, members, stream)) continue;
        if (auto it = comms_.find({members, stream}); it != comms_.end()) comm_at_[i] = it->second;
    }
}

DeviceComm* RankState::comm_of(std::size_t i) const { return comm_at_.empty() ? nullptr : comm_at_[i]; }

// The communication streams on lanes of their own, in the Stream enum's order.
int RankState::lane(Stream s) const {
    if (!comm_lanes_) return lane_of(s);
    switch (s) {
        case Stream::tp_comm: return Device::lane_comm + 0;
        case Stream::cp_comm: return Device::lane_comm + 1;
        case Stream::ep_comm: return Device::lane_comm + 2;
        case Stream::dp_comm: return Device::lane_comm + 3;
        case Stream::pp_p2p: return Device::lane_comm + 4;
        case Stream::pp_recv: return Device::lane_comm + 5;
        case Stream::pp_p2p_b: return Device::lane_comm + 6;
        case Stream::pp_recv_b: return Device::lane_comm + 7;
        default: return lane_of(s);
    }
}

void RankState::comm_collective(std::size_t i, DeviceComm& c, const CollPart& part, CollKind kind) {
    const int n = c.size(), r = part.group_rank;
    if (r != c.rank() || n != rp_.instrs[i].group_size) fail(i, "its communicator is not its group");
    const std::int64_t tag = rp_.instrs[i].match_id;
    // The lowering's slices of a flat range (transport.cpp), and equal row blocks.
    const auto slices = [n](i64 len) {
        std::vector<i64> off(static_cast<std::size_t>(n) + 1);
        for (int q = 0; q <= n; ++q) off[static_cast<std::size_t>(q)] = len * q / n;
        return off;
    };
    const auto blocks = [n](i64 len) {
        std::vector<i64> off(static_cast<std::size_t>(n) + 1);
        for (int q = 0; q <= n; ++q) off[static_cast<std::size_t>(q)] = len * q;
        return off;
    };
    const Args a{w_.program, rp_, rp_.operands[i]};
    if (!part.rings.empty()) {  // context parallelism by all-gather: a ring shift per block (transport.cpp)
        if (part.in_cols <= 0 || part.in_n[0] % part.in_cols != 0) fail(i, "a K/V block is not whole rows");
        const i64 rows = part.in_n[0] / part.in_cols;
        for (std::size_t k = 0; k < part.rings.size(); ++k) {
            if (kind == CollKind::all_gather)
                c.ring_shift(part.out[k], part.in[0], rows, part.in_cols, part.in_cols - part.out_cols, part.out_cols, part.rings[k], false, tag);
            else
                c.ring_shift(part.out[0], part.in[k], rows, part.in_cols, 0, part.out_cols, -part.rings[k], k > 0, tag);
        }
        return;
    }
    if (part.ring != 0) {  // context parallelism's ring: a K/V block one way, its gradient back (transport.cpp)
        if (part.in_cols <= 0 || part.in_n[0] % part.in_cols != 0) fail(i, "a ring block is not whole rows");
        const i64 rows = part.in_n[0] / part.in_cols;
        if (kind == CollKind::all_gather) c.ring_shift(part.out[0], part.in[0], rows, part.in_cols, part.in_cols - part.out_cols, part.out_cols, part.ring, false, tag);
        else c.ring_shift(part.out[0], part.in[0], rows, part.in_cols, 0, part.out_cols, -part.ring, part.accumulate, tag);
        return;
    }
    if (part.ulysses != 0) {
        i64 W = 0;
        for (i64 g : part.segments) W += g;
        const i64 rows = (part.ulysses == 1 ? part.in_n[0] : part.out_n[0]) / std::max<i64>(W, 1);
        c.ulysses(part.out[0], part.in[0], rows, part.segments, part.seq, part.ulysses == 1, tag);
        return;
    }
    for (std::size_t k = 0; k < part.in.size(); ++k) {
        switch (kind) {
            case CollKind::all_reduce:
                if (part.out.size() != part.in.size() || part.in_n[k] != part.out_n[k]) fail(i, "an all-reduce pairs inputs and outputs of one size");
                c.all_reduce(part.out[k], part.in[k], part.in_n[k], tag);
                break;
            case CollKind::all_gather:
                if (part.ranges) {
                    const i64 len = part.from_slice ? part.out_n[k] : part.in_n[k];
                    const std::vector<i64> off = slices(len);
                    const float* src = part.from_slice ? part.in[k] : part.in[k] + off[static_cast<std::size_t>(r)];
                    float* dst = part.out[k];
                    if (part.keep_out) {  // the copy still being read holds these values: receive beside it
                        const bool half = elem_bytes(a.out(static_cast<int>(k))) == 2.0;
                        const Storage s = !half ? Storage::fp32 : w_.plan.precision == Precision::fp16 ? Storage::fp16 : Storage::bf16;
                        if (!(dst = dev_->alloc(len, s))) fail(i, "no device memory for a refetch's scratch");
                        comm_scratch_[i].push_back({dst, len});
                    }
                    c.all_gather(dst, src, off, tag);
                } else {
                    const i64 len = part.in_n[k];
                    if (part.out_n[k] != len * n) fail(i, "an all-gather's output is not members x its input");
                    c.all_gather(part.out[k], part.in[k], blocks(len), tag);
                }
                break;
            case CollKind::reduce_scatter: {
                const i64 len = part.in_n[k];
                const std::vector<i64> off = slices(len);
                if (part.into_slice) {
                    c.reduce_scatter(part.out[k], part.in[k], off, DeviceComm::Reduce::accumulate, tag);
                } else if (part.zero_rest) {
                    if (part.out_n[k] != len) fail(i, "a reduce-scatter of a range writes the whole range");
                    c.reduce_scatter(part.out[k], part.in[k], off, DeviceComm::Reduce::zero_rest, tag);
                } else if (part.ranges) {
                    c.reduce_scatter(part.out[k] + off[static_cast<std::size_t>(r)], part.in[k], off, DeviceComm::Reduce::write, tag);
                } else {
                    if (part.out_n[k] * n != len) fail(i, "a reduce-scatter's output is not its input over the members");
                    c.reduce_scatter(part.out[k], part.in[k], blocks(part.out_n[k]), DeviceComm::Reduce::write, tag);
                }
                break;
            }
            default: fail(i, "is no collective of a communicator");
        }
    }
}

bool RankState::comm_done(std::size_t i) {
    DeviceComm* c = comm_of(i);
    if (!c || !c->done()) return false;
    ended_ns_[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w_.step_start).count();
    if (auto it = comm_scratch_.find(i); it != comm_scratch_.end()) {
        for (auto [p, n] : it->second) dev_->release(p, n);  // fenced behind the operation on the cuda backend
        comm_scratch_.erase(it);
    }
    return true;
}

bool RankState::comm_moe(std::size_t i, bool first) {
    const Instr& in = rp_.instrs[i];
    const Transport::Key key{w_.step, in.match_id};
    if (moe_rows_posted_.count(i)) {
        if (!comm_done(i)) return false;
        moe_rows_posted_.erase(i);
        return true;
    }
    if (first) {  // the counts (and the routing's host copy) through the transport; the rows stay
        CollPart part = moe_collective_part(i, false);
        moe_send_rows_[i] = part.send_rows;
        if (!w_.transport.collective(key, CollKind::all_to_all, in.group_size, std::move(part))) return false;
    } else if (!w_.transport.collective_done(key)) {
        return false;
    }
    post_moe_rows(i);
    moe_rows_posted_.insert(i);
    return comm_moe(i, false);
}

// finish_moe_collective's bookkeeping (moe_ops.cpp), the rows then moved by the communicator: each
// member's rows to their experts' ranks and back (an all-to-all of the exchanged counts), the
// expert-TP gather of rows that vary per member, and its reduce-scatter of the partial sums.
void RankState::post_moe_rows(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const Operands& o = rp_.operands[i];
    A2aReceived got = std::move(a2a_.at(i));
    a2a_.erase(i);
    const std::vector<i64> sent = std::move(moe_send_rows_.at(i));
    moe_send_rows_.erase(i);
    const std::pair<int, int> key{in.layer, in.microbatch};
    const bool a2a = in.coll == CollKind::all_to_all, reduce = in.coll == CollKind::reduce_scatter;
    const auto n = static_cast<i64>(in.group_size);
    const i64 rows = reduce ? got.rows / n : got.rows;
    if (in.coll == CollKind::all_gather) moe_gath_[key] = got.counts;
    if (a2a && o.n_in == o.n_out + 1) moe_recv_[key] = got.counts;
    const bool home = a2a && o.n_in == o.n_out;
    DeviceComm& c = *comm_of(i);
    const int r = c.rank();
    const OperandView a{w_.program, rp_, o};
    for (int q = 0; q < o.n_out; ++q) {
        const int out = a.id(o.n_in + q);
        const DataTensor& y = a.out(q);
        const auto kept = moe_kept_.find(key);
        const i64 routed = kept != moe_kept_.end() ? kept->second : y.rows;
        if (home && rows != routed) fail(i, "got back " + std::to_string(rows) + " rows of its " + std::to_string(routed) + " routed tokens");
        if (!home || rows != y.rows) dyn_rows_[out] = rows;
        auto offsets = [&](const std::vector<i64>& per_member) {  // rows per member -> element offsets
            std::vector<i64> off(per_member.size() + 1, 0);
            for (std::size_t m = 0; m < per_member.size(); ++m) off[m + 1] = off[m] + per_member[m] * y.cols;
            return off;
        };
        const float* from = tensor(a.id(q), false, i);
        float* to = tensor(out, true, i);
        if (a2a) {
            c.all_to_all(to, from, offsets(sent), offsets(got.from_rows), in.match_id);
        } else if (in.coll == CollKind::all_gather) {
            if (got.from_rows[static_cast<std::size_t>(r)] != rows_of(a.id(q))) fail(i, "gathers other than the rows it holds");
            c.all_gather(to, from, offsets(got.from_rows), in.match_id);
        } else {
            if (sent[static_cast<std::size_t>(r)] != rows) fail(i, "its block of the partial sums is not its rows");
            c.reduce_scatter(to, from, offsets(sent), DeviceComm::Reduce::write, in.match_id);
        }
    }
    unstage(i);  // the routing's host copy
}

void connect_comms(World& w, const std::vector<std::unique_ptr<RankState>>& ranks, std::vector<std::unique_ptr<DeviceComm>>& owned) {
    std::map<int, RankState*> by_rank;
    for (const auto& r : ranks) by_rank[r->rank()] = r.get();
    std::map<std::pair<std::vector<int>, int>, std::array<long, 2>> keys;  // a direction's sends and receives
    for (const auto& r : ranks)
        for (std::size_t i = 0; i < r->instructions(); ++i) {
            std::vector<int> members;
            int stream = 0;
            if (!r->comm_key(i, members, stream)) continue;
            auto& count = keys[{members, stream}];
            if (stream < 0) ++count[members[0] == r->rank() ? 0 : 1];
        }
    for (const auto& [key, count] : keys) {
        const auto& [members, stream] = key;
        if (stream < 0 && count[0] != count[1])
            throw RuntimeError("the Program's pipeline transfers from rank " + std::to_string(members[0]) + " to rank " +
                               std::to_string(members[1]) + " do not pair one to one on their streams (" + std::to_string(count[0]) +
                               " sends, " + std::to_string(count[1]) + " receives)");
        std::vector<Device*> devs;
        for (int m : members) {
            if (!by_rank.count(m) || !w.device_of(m)) throw RuntimeError("a communicator's member rank " + std::to_string(m) + " has no device here");
            devs.push_back(w.device_of(m));
        }
        std::vector<std::unique_ptr<DeviceComm>> ends = devs[0]->comms_with(devs);
        for (std::size_t j = 0; j < ends.size(); ++j) {
            by_rank[members[j]]->set_comm(members, stream, ends[j].get());
            owned.push_back(std::move(ends[j]));
        }
    }
    for (const auto& r : ranks) r->index_comms();
}

}  // namespace strata::runtime
