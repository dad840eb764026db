// dataflow_hazards (hazards.hpp): vector clocks over one rank's streams, built in program order
// (a wait takes the clock its event was recorded with), then every access checked against the
// conflicting accesses before it.
#include "strata/lowering/hazards.hpp"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace strata::sim {

namespace {

using Clock = std::array<std::int64_t, kStreamCount>;

struct Access {
    std::size_t instr = 0;
    bool write = false;
    int block = -1;  ///< TP overlap's row block (Instr::ring_step) of a blocked operand; -1: whole
};

struct RangeAccess {
    int key = 0;  ///< role, buffer, tier and shard packed
    std::int32_t version = -1;  ///< a sharded gradient's value (DataTensor::version): versions are apart
    std::int64_t lo = 0, hi = 0;
    std::size_t instr = 0;
    bool write = false;
};

bool is_range(TensorRole r) { return r == TensorRole::param || r == TensorRole::param_grad || r == TensorRole::optimizer_state; }

class RankCheck {
public:
    RankCheck(const Program& p, const RankProgram& r, std::vector<std::string>& out, std::size_t limit)
        : p_(p), r_(r), out_(out), limit_(limit) {
        clock_.resize(r.instrs.size());
        pos_.resize(r.instrs.size());
        std::array<Clock, kStreamCount> cur{};
        std::vector<Clock> recorded(static_cast<std::size_t>(std::max(1, p.events)));
        std::vector<char> has(recorded.size(), 0);
        for (std::size_t i = 0; i < r.instrs.size(); ++i) {
            const Instr& in = r.instrs[i];
            const auto s = static_cast<std::size_t>(in.stream);
            if (in.kind == InstrKind::record) {
                recorded[static_cast<std::size_t>(in.event)] = cur[s];
                has[static_cast<std::size_t>(in.event)] = 1;
            } else if (in.kind == InstrKind::wait) {
                if (has[static_cast<std::size_t>(in.event)])
                    for (int k = 0; k < kStreamCount; ++k) cur[s][static_cast<std::size_t>(k)] = std::max(cur[s][static_cast<std::size_t>(k)], recorded[static_cast<std::size_t>(in.event)][static_cast<std::size_t>(k)]);
            } else {
                pos_[i] = ++cur[s][s];
            }
            clock_[i] = cur[s];
        }
    }

    void run() {
        for (std::size_t i = 0; i < r_.instrs.size() && out_.size() < limit_; ++i) {
            if (r_.operands.empty()) return;
            const Operands& o = r_.operands[i];
            const auto* ids = r_.operand_ids.data() + o.first;
            const Instr& in = r_.instrs[i];
            const std::int64_t block_rows = in.ring_step >= 0 && o.n_in > 0 ? ring_block_rows(in, p_.tensors[static_cast<std::size_t>(ids[0])]) : 0;
            for (int k = 0; k < o.n_in + o.n_out; ++k) {
                const bool write = k >= o.n_in;
                const DataTensor& t = p_.tensors[static_cast<std::size_t>(ids[k])];
                if (t.role == TensorRole::tokens) continue;
                if (is_range(t.role)) range_access(i, t, write || in_out(o, ids, ids[k]));
                else tensor_access(i, ids[k], write, ring_blocked(in, block_rows, t) ? in.ring_step : -1);
            }
        }
    }

private:
    static bool in_out(const Operands& o, const std::int32_t* ids, int id) {
        for (int j = 0; j < o.n_out; ++j)
            if (ids[o.n_in + j] == id) return true;
        return false;
    }
    bool before(std::size_t j, std::size_t i) const {
        if (j == i) return true;
        return clock_[i][static_cast<std::size_t>(r_.instrs[j].stream)] >= pos_[j];
    }
    std::string label(std::size_t i) const {
        const Instr& in = r_.instrs[i];
        return "instruction " + std::to_string(i) + " (" + p_.names[static_cast<std::size_t>(in.name)] + ", " + to_string(in.stream) +
               ", layer " + std::to_string(in.layer) + ", micro-batch " + std::to_string(in.microbatch) + ")";
    }
    void report(std::size_t j, std::size_t i, const DataTensor& t, const char* what) {
        if (out_.size() >= limit_) return;
        out_.push_back("rank " + std::to_string(r_.id) + ": " + label(i) + " " + what + " " +
                       p_.tensor_names[static_cast<std::size_t>(t.name)] + " (layer " + std::to_string(t.layer) + ", offset " +
                       std::to_string(t.offset) + ") without waiting for " + label(j));
    }
    // Two row blocks of one tensor (TP overlap's ring steps) are apart.
    void tensor_access(std::size_t i, int id, bool write, int block) {
        auto& acc = tensors_[id];
        const DataTensor& t = p_.tensors[static_cast<std::size_t>(id)];
        const auto overlaps = [block](const Access& a) { return a.block < 0 || block < 0 || a.block == block; };
        for (const Access& a : acc)
            if ((a.write || write) && overlaps(a) && !before(a.instr, i)) report(a.instr, i, t, write ? "writes" : "reads");
        // Later accesses conflict with this write, which comes after the ones it covers.
        if (write) acc.erase(std::remove_if(acc.begin(), acc.end(), [&](const Access& a) { return block < 0 || a.block == block; }), acc.end());
        acc.push_back({i, write, block});
    }
    // A parameter all-gather inside a step rewrites the values earlier readers saw (ZeRO-3 gathers a
    // layer again for its backward; a real implementation gathers into a fresh buffer), so it
    // conflicts with earlier writes but not with earlier reads. So does the fetch of offloaded
    // parameters to the GPU (the runtime gives each fetch its own buffer).
    bool regather(std::size_t i, const DataTensor& t) const {
        const Instr& in = r_.instrs[i];
        if (t.role != TensorRole::param) return false;
        return (in.kind == InstrKind::collective && in.coll == CollKind::all_gather) ||
               (in.kind == InstrKind::copy && in.copy == CopyKind::h2d && t.tier == Tier::gpu);
    }
    void range_access(std::size_t i, const DataTensor& t, bool write) {
        const int key = (static_cast<int>(t.role) * 64 + static_cast<int>(t.buffer) * 8 + static_cast<int>(t.tier)) * 2 + (t.shard ? 1 : 0);
        const std::int64_t lo = t.offset, hi = t.offset + t.elements();
        const bool gather = write && regather(i, t);
        for (const RangeAccess& a : ranges_)
            if (a.key == key && a.version == t.version && a.lo < hi && lo < a.hi && (a.write || (write && !gather)) && !before(a.instr, i))
                report(a.instr, i, t, write ? "writes" : "reads");
        ranges_.push_back({key, t.version, lo, hi, i, write});
    }

    const Program& p_;
    const RankProgram& r_;
    std::vector<std::string>& out_;
    std::size_t limit_;
    std::vector<Clock> clock_;
    std::vector<std::int64_t> pos_;
    std::unordered_map<int, std::vector<Access>> tensors_;
    std::vector<RangeAccess> ranges_;
};

}  // namespace

std::vector<std::string> dataflow_hazards(const Program& p, std::size_t limit) {
    std::vector<std::string> out;
    for (const RankProgram& r : p.ranks) {
        if (out.size() >= limit) break;
        RankCheck(p, r, out, limit).run();
    }
    return out;
}

}  // namespace strata::sim
