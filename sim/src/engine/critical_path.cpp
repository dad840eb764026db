// The critical path of an executed step: the executed instructions as a DAG (stream order,
// record -> wait, matched transfer groups through a join vertex; waiting for a shared resource is
// not an edge, it is already in the durations), its longest path, summarised. It reads the
// engine's timings; it does not re-simulate.
//
// The DAG is held as a compressed sparse row (out-edges of a vertex in the order they are
// generated) and ordered by a depth-first search that visits vertices and out-edges in index order,
// exactly as Boost.Graph's topological_sort does on such a graph; longest-path ties are broken by
// that order, so the path (not only its length) is the one Boost's traversal would pick. Built
// directly, without an edge list or Boost's per-frame DFS stack: programs have millions of
// instructions and this pass was a fifth of a simulation's time.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <tuple>

#include "engine_internal.hpp"
#include "strata/common/error.hpp"
#include "strata/sim/engine.hpp"

namespace strata::sim::detail {

namespace {

std::string percent(double share) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f%%", share * 100.0);
    return buf;
}

/// Calls emit(u, v) for every edge of the executed-instruction DAG, rank-major then instruction
/// order; per instruction: stream predecessor -> it, its event's record -> it (waits), and for a
/// member of a matched group: stream predecessor -> join, join -> it. `record_of[r * events + e]`
/// is the vertex of the (last) record of event e in rank r, 0 if none.
template <typename Emit>
void for_each_edge(const Program& p, const Timings& t, const std::vector<std::uint32_t>& base, std::uint32_t n_instr_end,
                   const BigVector<std::uint32_t>& record_of, Emit&& emit) {
    const auto events = static_cast<std::size_t>(std::max(0, p.events));
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        const auto& rp = p.ranks[r];
        const std::uint32_t* rec = record_of.data() + r * events;
        std::array<std::uint32_t, kStreamCount> prev{};  // 0 = root
        for (std::size_t i = 0; i < rp.instrs.size(); ++i) {
            const auto& tm = t[r][i];
            if (tm.end < 0) continue;
            const auto& in = rp.instrs[i];
            const std::uint32_t v = base[r] + static_cast<std::uint32_t>(i);
            auto& pv = prev[static_cast<std::size_t>(in.stream)];
            emit(pv, v);
            if (in.kind == InstrKind::wait && in.event >= 0 && in.event < p.events && rec[in.event] != 0)
                emit(rec[in.event], v);
            if (tm.group >= 0) {
                const std::uint32_t j = n_instr_end + static_cast<std::uint32_t>(tm.group);
                emit(pv, j);  // the member's arrival gates the group
                emit(j, v);   // the group's start gates the member
            }
            pv = v;
        }
    }
}

}  // namespace

CriticalPath critical_path(const Program& p, const Timings& t, int groups, std::int64_t step_time_ns) {
    CriticalPath out;
    // Vertex numbering: 0 = root, then every instruction (rank-major), then one join per group.
    std::vector<std::uint32_t> base(p.ranks.size() + 1, 1);
    for (std::size_t r = 0; r < p.ranks.size(); ++r) base[r + 1] = base[r] + static_cast<std::uint32_t>(p.ranks[r].instrs.size());
    const std::uint32_t n_instr_end = base[p.ranks.size()];
    const std::uint32_t n = n_instr_end + static_cast<std::uint32_t>(groups);

    // A vertex's own time: end - exec for an executed instruction, 0 for the root and the joins.
    // Computed when needed rather than stored (one array less of millions of entries).
    auto weight_in = [&](std::size_t r, std::uint32_t v) -> std::int64_t {
        const Timing& tm = t[r][v - base[r]];
        return tm.end >= 0 ? tm.end - std::max<std::int64_t>(0, tm.exec) : 0;
    };
    // Rank of an instruction vertex: a table by blocks of 2^16 vertices gives the rank holding the
    // block's first vertex; a step or two forward finds the one holding v (ranks are contiguous).
    constexpr unsigned kBlockBits = 16;
    std::vector<std::uint32_t> block_rank((n_instr_end >> kBlockBits) + 1, 0);
    for (std::size_t b = 0, r = 0; b < block_rank.size(); ++b) {
        const auto v = static_cast<std::uint32_t>(b << kBlockBits);
        while (r + 1 < p.ranks.size() && base[r + 1] <= v) ++r;
        block_rank[b] = static_cast<std::uint32_t>(r);
    }
    auto rank_of = [&](std::uint32_t v) {
        std::size_t r = block_rank[v >> kBlockBits];
        while (base[r + 1] <= v) ++r;
        return r;
    };
    auto weight = [&](std::uint32_t v) -> std::int64_t {
        if (v == 0 || v >= n_instr_end) return 0;
        return weight_in(rank_of(v), v);
    };

    // CSR in two passes over the edges (count, then place): out-edges keep generation order, as the
    // stable counting sort of Boost's CSR constructor leaves them. Counting into start[u + 2] and
    // placing at start[u + 1]++ leaves start[u] = the first out-edge of u.
    const auto events = static_cast<std::size_t>(std::max(0, p.events));
    BigVector<std::uint32_t> record_of(p.ranks.size() * events, 0);
    for (std::size_t r = 0; r < p.ranks.size(); ++r)
        for (std::size_t i = 0; i < p.ranks[r].instrs.size(); ++i) {
            const auto& in = p.ranks[r].instrs[i];
            if (in.kind == InstrKind::record && in.event >= 0 && in.event < p.events)
                record_of[r * events + static_cast<std::size_t>(in.event)] = base[r] + static_cast<std::uint32_t>(i);
        }
    BigVector<std::uint32_t> start(static_cast<std::size_t>(n) + 2, 0);
    for_each_edge(p, t, base, n_instr_end, record_of, [&](std::uint32_t u, std::uint32_t) { ++start[u + 2]; });
    for (std::size_t k = 2; k < start.size(); ++k) start[k] += start[k - 1];
    BigVector<std::uint32_t> target(start.back());
    for_each_edge(p, t, base, n_instr_end, record_of, [&](std::uint32_t u, std::uint32_t v) { target[start[u + 1]++] = v; });
    start.pop_back();  // start[u] .. start[u + 1]: u's out-edges
    record_of = {};  // frees it

    // Depth-first search from every unvisited vertex in index order, out-edges in order; the
    // finishing order reversed is the topological order.
    BigVector<std::uint32_t> order;  // finishing order
    order.reserve(n);
    {
        enum : std::uint8_t { white, gray, black };
        BigVector<std::uint8_t> color(n, white);
        BigVector<std::pair<std::uint32_t, std::uint32_t>> stack;  // (vertex, next out-edge)
        for (std::uint32_t s = 0; s < n; ++s) {
            if (color[s] != white) continue;
            color[s] = gray;
            stack.emplace_back(s, start[s]);
            while (!stack.empty()) {
                const std::uint32_t u = stack.back().first;
                const std::uint32_t e = stack.back().second;
                if (e == start[u + 1]) {
                    color[u] = black;
                    order.push_back(u);
                    stack.pop_back();
                    continue;
                }
                stack.back().second = e + 1;
                const std::uint32_t v = target[e];
                STRATA_ASSERT(color[v] != gray, "critical_path: the executed instructions form a cycle");
                if (color[v] == white) {
                    color[v] = gray;
                    stack.emplace_back(v, start[v]);
                }
            }
        }
    }
    // Longest path in topological order. `head[v]` is the longest path ending just before v (its
    // length without v's own time): relaxing u -> v compares head[u] + weight(u) with head[v],
    // which orders candidates exactly as comparing full lengths would (v's weight is on both
    // sides), so ties resolve to the same predecessor as the textbook form.
    constexpr std::int64_t kUnreached = std::numeric_limits<std::int64_t>::min();
    BigVector<std::int64_t> head(n, kUnreached);
    BigVector<std::uint32_t> pred(n, 0);
    head[0] = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        const std::uint32_t u = *it;
        if (head[u] == kUnreached) continue;
        const std::int64_t d = head[u] + weight(u);
        for (std::uint32_t e = start[u]; e < start[u + 1]; ++e) {
            const std::uint32_t v = target[e];
            if (d > head[v]) head[v] = d, pred[v] = u;
        }
    }
    auto dist = [&](std::size_t r, std::uint32_t v) { return head[v] == kUnreached ? -1 : head[v] + weight_in(r, v); };
    std::uint32_t last = 0;
    std::int64_t last_dist = 0;  // the root's
    for (std::size_t r = 0; r < p.ranks.size(); ++r)
        for (std::uint32_t v = base[r]; v < base[r + 1]; ++v)
            if (const std::int64_t d = dist(r, v); d > last_dist) last = v, last_dist = d;
    out.length_ns = last_dist;

    // Walk back and group by (rank, stream, label, link).
    std::map<std::tuple<int, int, std::string, int>, std::int64_t> groups_time;
    for (std::uint32_t v = last; v != 0; v = pred[v]) {
        if (v >= n_instr_end) continue;
        const std::size_t r = rank_of(v);
        const std::int64_t w = weight_in(r, v);
        if (w <= 0) continue;
        const auto i = v - base[r];
        const auto& in = p.ranks[r].instrs[i];
        groups_time[{static_cast<int>(r), static_cast<int>(in.stream), instr_label(in), t[r][i].link}] += w;
        out.steps.push_back(CriticalStep{static_cast<int>(r), static_cast<int>(i)});
    }
    std::reverse(out.steps.begin(), out.steps.end());  // walked from the end: put it in time order
    const double total = static_cast<double>(std::max<std::int64_t>(1, step_time_ns));
    for (const auto& [key, ns] : groups_time) {
        CriticalSegment s;
        s.rank = p.ranks[static_cast<std::size_t>(std::get<0>(key))].id;
        s.pp_stage = p.ranks[static_cast<std::size_t>(std::get<0>(key))].pp_stage;
        s.stream = static_cast<Stream>(std::get<1>(key));
        s.label = std::get<2>(key);
        s.link = std::get<3>(key) == kNoLink ? "" : to_string(static_cast<LinkClass>(std::get<3>(key)));
        s.duration_ns = ns;
        s.share = static_cast<double>(ns) / total;
        out.segments.push_back(std::move(s));
    }
    std::stable_sort(out.segments.begin(), out.segments.end(),
                     [](const CriticalSegment& a, const CriticalSegment& b) { return a.duration_ns > b.duration_ns; });

    out.summary = critical_path_summary(out.segments, step_time_ns, out.length_ns);
    return out;
}

}  // namespace strata::sim::detail

namespace strata::sim {

std::string critical_path_summary(const std::vector<CriticalSegment>& segments, std::int64_t step_time_ns, std::int64_t length_ns) {
    const double total = static_cast<double>(std::max<std::int64_t>(1, step_time_ns));
    // One line: the heaviest streams (summed over stages), each with the stages it spans and its
    // heaviest label (summed over stages too).
    std::map<int, std::int64_t> by_stream;
    std::map<int, std::pair<int, int>> stage_span;  // stream -> (min stage, max stage)
    std::map<std::tuple<int, std::string, std::string>, std::int64_t> by_label;
    for (const auto& s : segments) {
        const int st = static_cast<int>(s.stream);
        by_stream[st] += s.duration_ns;
        auto it = stage_span.find(st);
        if (it == stage_span.end()) stage_span[st] = {s.pp_stage, s.pp_stage};
        else it->second = {std::min(it->second.first, s.pp_stage), std::max(it->second.second, s.pp_stage)};
        by_label[{st, s.label, s.link}] += s.duration_ns;
    }
    std::vector<std::pair<int, std::int64_t>> ranked(by_stream.begin(), by_stream.end());
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string line;
    for (std::size_t k = 0; k < ranked.size() && k < 4; ++k) {
        const auto [st, ns] = ranked[k];
        const auto [lo, hi] = stage_span[st];
        if (!line.empty()) line += ", ";
        line += (lo == hi ? "stage " + std::to_string(lo) : "stages " + std::to_string(lo) + "-" + std::to_string(hi)) + " " +
                to_string(static_cast<Stream>(st)) + " " + detail::percent(static_cast<double>(ns) / total);
        const std::tuple<int, std::string, std::string>* top = nullptr;
        std::int64_t top_ns = -1;
        for (const auto& [key, lns] : by_label)
            if (std::get<0>(key) == st && lns > top_ns) top = &key, top_ns = lns;
        if (top) {
            line += " (" + std::get<1>(*top);
            if (!std::get<2>(*top).empty()) line += " on " + std::get<2>(*top);
            line += " " + detail::percent(static_cast<double>(top_ns) / total) + ")";
        }
    }
    const std::int64_t rest = step_time_ns - length_ns;
    if (rest > 0) line += (line.empty() ? "" : ", ") + std::string("unexplained ") + detail::percent(static_cast<double>(rest) / total);
    return line.empty() ? "empty step" : line;
}

}  // namespace strata::sim
