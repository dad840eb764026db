// Parameters that reach the GPU a unit at a time: homed on the host (fetched by H2D) or ZeRO-3's
// shards (gathered), the dense buffer's units and each MoE layer's expert range alike. Which
// instruction fetches a unit and which read it, precomputed; each fetch's GPU copy held from the
// fetch to its last reader.
#include <algorithm>

#include "rank.hpp"
#include "strata/common/error.hpp"

namespace strata::runtime {

using namespace sim;

int RankState::unit_at(i64 offset) const {
    const auto& u = units_;
    auto it = std::upper_bound(u.begin(), u.end(), offset, [](i64 v, const GradUnit& g) { return v < g.offset; });
    STRATA_ASSERT(it != u.begin(), "runtime: no parameter unit holds an element");
    return static_cast<int>(it - u.begin()) - 1;
}

// Parameters homed on the host reach the GPU a unit at a time (lower's fetch_params/fetch_edge):
// a fetch writes the unit's range there, compute reads it. Reads are counted per fetch in program
// order, so a unit's GPU copy lives from its fetch to its fetch's last reader. A fetch that comes
// while an earlier one still has readers refills the same copy: the values do not change within a
// step, and the earlier readers' count carries over.
void RankState::precompute_fetches() {
    const Program& prog = w_.program;
    const std::size_t n_units = units_.size();
    fetched_.clear();
    fetched_.resize(n_units);
    unit_uses_.assign(rp_.instrs.size(), {});
    // reads: every reader of the current fetch, the in-place gathers that complete it included (a
    // fetch no kernel reads, as a pass that needs none of the unit, lives until its gathers are
    // done); uses: the kernels' reads alone, after which a write starts a new fetch.
    std::vector<int> reads(n_units, 0), uses(n_units, 0);
    std::vector<std::pair<std::size_t, std::size_t>> first_write(n_units, {SIZE_MAX, 0});  // instruction, use index
    auto close = [&](std::size_t u) {
        if (first_write[u].first != SIZE_MAX) unit_uses_[first_write[u].first][first_write[u].second].add = reads[u];
        first_write[u].first = SIZE_MAX;
        reads[u] = uses[u] = 0;
    };
    for (std::size_t i = 0; i < rp_.instrs.size(); ++i) {
        const Operands& o = rp_.operands[i];
        const auto* ids = rp_.operand_ids.data() + o.first;
        std::vector<int> written, read;
        for (int k = 0; k < o.n_in + o.n_out; ++k) {
            const DataTensor& t = prog.tensors[static_cast<std::size_t>(ids[k])];
            if (t.role != TensorRole::param || t.tier != Tier::gpu || t.shard) continue;
            const int u = unit_at(t.offset);
            const GradUnit& g = units_[static_cast<std::size_t>(u)];
            if (t.offset + t.elements() > g.offset + g.count)
                throw RuntimeError("runtime: rank " + std::to_string(rank_) + " instruction " + std::to_string(i) +
                                   " names parameters across two units, which are fetched apart");
            auto& list = k >= o.n_in ? written : read;
            if (std::find(list.begin(), list.end(), u) == list.end()) list.push_back(u);
        }
        for (int u : written) {
            const auto su = static_cast<std::size_t>(u);
            if (first_write[su].first == SIZE_MAX || uses[su] > 0) {  // a new fetch
                close(su);
                first_write[su] = {i, unit_uses_[i].size()};
                unit_uses_[i].push_back({u, 0, false});
            }
        }
        for (int u : read) {
            const bool gather = std::find(written.begin(), written.end(), u) != written.end();  // in place
            if (first_write[static_cast<std::size_t>(u)].first == SIZE_MAX)
                throw RuntimeError("runtime: rank " + std::to_string(rank_) + " instruction " + std::to_string(i) +
                                   " reads parameters no fetch or gather brought to the GPU whole");
            ++reads[static_cast<std::size_t>(u)];
            if (!gather) ++uses[static_cast<std::size_t>(u)];
            unit_uses_[i].push_back({u, 0, true});
        }
    }
    for (std::size_t u = 0; u < n_units; ++u) close(u);
}

// A fetch's reads are added when it starts: a gather runs while the rank goes on, and the last
// reader of the previous fetch must not free the buffer it is filling.
bool RankState::start_fetches(std::size_t i) {
    if (unit_uses_.empty()) return false;
    bool refill = false;
    for (const UnitUse& use : unit_uses_[i]) {
        if (use.read) continue;
        Live& f = fetched_[static_cast<std::size_t>(use.unit)];
        refill = refill || (!f.buf.empty() && f.pending > 0);
        f.pending += use.add;
    }
    return refill;
}

void RankState::finish_fetches(std::size_t i) {
    if (unit_uses_.empty()) return;
    for (const UnitUse& use : unit_uses_[i]) {
        Live& f = fetched_[static_cast<std::size_t>(use.unit)];
        if (use.read) --f.pending;
        if (f.pending <= 0 && !f.buf.empty()) {
            f.buf = TrackedBuffer{};
            f.pending = 0;
            sample_memory(Tier::gpu);
        }
    }
}

}  // namespace strata::runtime
