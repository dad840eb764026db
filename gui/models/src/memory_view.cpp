#include "strata/gui/models/memory_view.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "strata/common/text.hpp"
#include "strata/sim/simulate.hpp"
#include "timeline_source.hpp"

namespace strata::gui {

const char* StageBreakdown::part_name(int i) {
    static const char* names[] = {"weights", "grads", "optimizer", "activations", "buffers", "allocator slack"};
    return i >= 0 && i < kParts ? names[i] : "?";
}

double StageBreakdown::total() const {
    double s = 0;
    for (double b : bytes) s += b;
    return s;
}

namespace {

constexpr int kGpu = static_cast<int>(sim::Tier::gpu);

void push_sample(MemoryCurve& c, std::int64_t t, double b) {
    // Several allocations at one instant: the curve keeps the last value (what the pool held after
    // the instant) but the peak sees every one.
    if (!c.t_ns.empty() && c.t_ns.back() == t) c.bytes.back() = b;
    else c.t_ns.push_back(t), c.bytes.push_back(b);
    c.peak_bytes = std::max(c.peak_bytes, b);
}

void mark_worst(TierMemory& tier) {
    auto it = std::max_element(tier.curves.begin(), tier.curves.end(),
                               [](const MemoryCurve& a, const MemoryCurve& b) { return a.peak_bytes < b.peak_bytes; });
    if (it != tier.curves.end()) it->worst = true;
}

}  // namespace

MemoryView memory_view(const sim::SimOutput& out) {
    MemoryView v;
    const sim::Program& p = out.program;
    const sim::SimResult& r = out.result;
    v.step_ns = r.step_time_ns;
    v.gpu_capacity_bytes = out.capacities.gpu_bytes;

    // Curves: a GPU pool per rank program; DRAM and SSD per node.
    std::array<TierMemory, sim::kTierCount> tiers;
    std::array<std::map<int, std::size_t>, sim::kTierCount> curve_of;
    const double caps[] = {out.capacities.gpu_bytes, out.capacities.cpu_bytes, out.capacities.ssd_bytes};
    for (int t = 0; t < sim::kTierCount; ++t) {
        tiers[static_cast<std::size_t>(t)].tier = static_cast<sim::Tier>(t);
        tiers[static_cast<std::size_t>(t)].capacity_bytes = caps[t];
    }
    for (const auto& m : r.memory_samples) {
        const auto t = static_cast<std::size_t>(m.tier);
        const int key = m.tier == sim::Tier::gpu ? m.rank : m.node;
        auto [it, added] = curve_of[t].try_emplace(key, tiers[t].curves.size());
        if (added) {
            MemoryCurve c;
            c.label = m.tier == sim::Tier::gpu ? rank_label(p.ranks[static_cast<std::size_t>(m.rank)]) : "node " + std::to_string(m.node);
            tiers[t].curves.push_back(std::move(c));
        }
        push_sample(tiers[t].curves[it->second], m.time_ns, m.bytes);
    }
    for (const auto& o : r.ooms) {
        auto& slot = tiers[static_cast<std::size_t>(o.tier)].oom;
        if (slot && slot->time_ns <= o.time_ns) continue;
        OomMark mk;
        mk.time_ns = o.time_ns;
        mk.in_use_bytes = o.in_use_bytes;
        mk.request_bytes = o.request_bytes;
        mk.capacity_bytes = o.capacity_bytes;
        const auto& rp = p.ranks[static_cast<std::size_t>(o.rank)];
        mk.where = rank_label(rp) + ", '" + o.name + "' asks " + human_bytes(o.request_bytes) + " with " +
                   human_bytes(o.in_use_bytes - o.request_bytes) + " of " + human_bytes(o.capacity_bytes) + " in use";
        slot = mk;
    }
    for (auto& t : tiers) {
        if (t.curves.empty() && !t.oom) continue;
        mark_worst(t);
        v.tiers.push_back(std::move(t));
    }

    // Breakdown of each rank program's GPU peak, worst marked.
    double worst = -1;
    for (const auto& rs : r.ranks) {
        StageBreakdown b;
        b.label = rank_label(p.ranks[static_cast<std::size_t>(rs.id)]);
        double tagged = 0;
        for (int k = 0; k < sim::kTensorTagCount && k < StageBreakdown::kParts - 1; ++k) {
            b.bytes[static_cast<std::size_t>(k)] = rs.peak_breakdown[kGpu][static_cast<std::size_t>(k)];
            tagged += b.bytes[static_cast<std::size_t>(k)];
        }
        b.bytes[StageBreakdown::kParts - 1] = std::max(0.0, rs.peak_bytes[kGpu] - tagged);
        for (const auto& sm : out.memory.stages)
            if (sm.stage == rs.pp_stage) b.analytical_bytes = sm.tier_bytes[kGpu];
        if (rs.peak_bytes[kGpu] > worst) worst = rs.peak_bytes[kGpu], v.worst_stage = static_cast<int>(v.stages.size());
        v.stages.push_back(std::move(b));
    }
    if (!v.stages.empty()) v.stages[static_cast<std::size_t>(v.worst_stage)].worst = true;
    return v;
}

std::vector<TierMemory> memory_from_counters(const std::vector<CounterTrack>& tracks, const Timeline& names) {
    std::array<TierMemory, sim::kTierCount> tiers;
    for (const auto& tr : tracks) {
        int t = -1;
        for (int k = 0; k < sim::kTierCount; ++k)
            if (tr.name.rfind(std::string("memory ") + sim::to_string(static_cast<sim::Tier>(k)), 0) == 0) t = k;
        if (t < 0) continue;
        MemoryCurve c;
        c.label = "process " + std::to_string(tr.pid);
        for (const auto& row : names.rows())
            if (row.rank == tr.pid) c.label = row.rank_label;
        if (t != kGpu) c.label = tr.name.substr(tr.name.find('(') == std::string::npos ? 0 : tr.name.find('('));
        auto pts = tr.points;
        std::stable_sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        for (const auto& [ts, b] : pts) push_sample(c, ts, b);
        tiers[static_cast<std::size_t>(t)].tier = static_cast<sim::Tier>(t);
        tiers[static_cast<std::size_t>(t)].curves.push_back(std::move(c));
    }
    std::vector<TierMemory> out;
    for (auto& t : tiers)
        if (!t.curves.empty()) mark_worst(t), out.push_back(std::move(t));
    return out;
}

Envelope envelope(const MemoryCurve& c, const TimeWindow& w, int columns) {
    Envelope e;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    e.lo.assign(static_cast<std::size_t>(std::max(0, columns)), nan);
    e.hi = e.lo;
    if (columns <= 0 || c.t_ns.empty()) return e;
    const double ns_per_col = static_cast<double>(w.length_ns()) / columns;
    // The value held when the window opens, then every sample inside it.
    auto i = static_cast<std::size_t>(std::upper_bound(c.t_ns.begin(), c.t_ns.end(), w.start_ns) - c.t_ns.begin());
    double held = i > 0 ? c.bytes[i - 1] : nan;
    for (int col = 0; col < columns; ++col) {
        const auto col_end = w.start_ns + static_cast<std::int64_t>(std::ceil((col + 1) * ns_per_col));
        double lo = held, hi = held;
        for (; i < c.t_ns.size() && c.t_ns[i] < col_end; ++i) {
            held = c.bytes[i];
            lo = std::isnan(lo) ? held : std::min(lo, held);
            hi = std::isnan(hi) ? held : std::max(hi, held);
        }
        e.lo[static_cast<std::size_t>(col)] = lo;
        e.hi[static_cast<std::size_t>(col)] = hi;
    }
    return e;
}

}  // namespace strata::gui
