// Collectives and pipeline transfers on the devices' communicators (device.hpp's DeviceComm: NCCL
// on the cuda backend, its emulation on the emulated device), for ranks on devices of their own.
// The Program's plain collectives map onto NCCL's: an all-reduce per tensor; an all-gather of
// row blocks or of a flat range's slices (in place, or from the rank's shard); a reduce-scatter
// of row blocks, of a range in place (zeroing what the rank does not keep) or into the rank's
// gradient shard (added there). Each (group, stream) has its own communicator, and each
// pipeline direction its own, so that operations are posted to a communicator in one order on
// every member, the order NCCL pairs them in. MoE's all-to-alls and context parallelism's ring
// and Ulysses exchanges stay staged through the host (transfers.cpp).
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
    if (in.kind != InstrKind::collective || in.group_size <= 1 || moe_collective(in) || rp_.operands.empty()) return false;
    if (in.coll != CollKind::all_reduce && in.coll != CollKind::all_gather && in.coll != CollKind::reduce_scatter) return false;
    const Args a{w_.program, rp_, rp_.operands[i]};
    if (a.o.n_in == 0 || a.o.n_out == 0) return false;
    if ((in.coll == CollKind::all_gather ? a.out(0).ring : a.in(0).ring) != 0) return false;  // CP's ring: staged
    members = rp_.groups[static_cast<std::size_t>(in.group)];
    stream = static_cast<int>(in.stream);
    return true;
}

void RankState::set_comm(const std::vector<int>& members, int stream, DeviceComm* c) {
    comms_[{members, stream}] = c;
    c->set_notify([this] { waker_.notify(); });
    comm_lanes_ = true;
}

DeviceComm* RankState::comm_of(std::size_t i) const {
    if (comms_.empty()) return nullptr;
    std::vector<int> members;
    int stream = 0;
    if (!comm_key(i, members, stream)) return nullptr;
    auto it = comms_.find({members, stream});
    return it == comms_.end() ? nullptr : it->second;
}

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
}

}  // namespace strata::runtime
