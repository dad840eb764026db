// The critical path of an executed step: the executed instructions as a DAG (stream order,
// record -> wait, matched transfer groups through a join vertex; waiting for a shared resource is
// not an edge, it is already in the durations), its longest path by Boost.Graph, summarised.
// It reads the engine's timings; it does not re-simulate.
#include <boost/graph/compressed_sparse_row_graph.hpp>
#include <boost/graph/topological_sort.hpp>
#include <boost/range/iterator_range.hpp>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <tuple>

#include "engine_internal.hpp"
#include "strata/sim/engine.hpp"

namespace strata::sim::detail {

namespace {
using Graph = boost::compressed_sparse_row_graph<boost::directedS, boost::no_property, boost::no_property,
                                                 boost::no_property, std::uint32_t, std::uint32_t>;

std::string percent(double share) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f%%", share * 100.0);
    return buf;
}
}  // namespace

CriticalPath critical_path(const Program& p, const Timings& t, std::int64_t step_time_ns) {
    CriticalPath out;
    // Vertex numbering: 0 = root, then every instruction (rank-major), then one join per group.
    std::vector<std::uint32_t> base(p.ranks.size() + 1, 1);
    int groups = 0;
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        base[r + 1] = base[r] + static_cast<std::uint32_t>(p.ranks[r].instrs.size());
        for (const auto& tm : t[r]) groups = std::max(groups, tm.group + 1);
    }
    const std::uint32_t n_instr_end = base[p.ranks.size()];
    const std::uint32_t n = n_instr_end + static_cast<std::uint32_t>(groups);

    std::vector<std::int64_t> weight(n, 0);  // a vertex's own time: end - exec
    std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
    edges.reserve(static_cast<std::size_t>(n) * 2);
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        const auto& rp = p.ranks[r];
        std::array<std::uint32_t, kStreamCount> prev{};  // 0 = root
        std::vector<std::uint32_t> record_of(static_cast<std::size_t>(std::max(0, p.events)), 0);
        for (std::size_t i = 0; i < rp.instrs.size(); ++i) {
            const auto& in = rp.instrs[i];
            if (in.kind == InstrKind::record && in.event >= 0 && in.event < p.events)
                record_of[static_cast<std::size_t>(in.event)] = base[r] + static_cast<std::uint32_t>(i);
        }
        for (std::size_t i = 0; i < rp.instrs.size(); ++i) {
            const auto& in = rp.instrs[i];
            const auto& tm = t[r][i];
            const std::uint32_t v = base[r] + static_cast<std::uint32_t>(i);
            if (tm.end < 0) continue;
            weight[v] = tm.end - std::max<std::int64_t>(0, tm.exec);
            auto& pv = prev[static_cast<std::size_t>(in.stream)];
            edges.emplace_back(pv, v);
            if (in.kind == InstrKind::wait && in.event >= 0 && in.event < p.events && record_of[static_cast<std::size_t>(in.event)] != 0)
                edges.emplace_back(record_of[static_cast<std::size_t>(in.event)], v);
            if (tm.group >= 0) {
                const std::uint32_t j = n_instr_end + static_cast<std::uint32_t>(tm.group);
                edges.emplace_back(pv, j);  // the member's arrival gates the group
                edges.emplace_back(j, v);   // the group's start gates the member
            }
            pv = v;
        }
    }
    // Counting sort by source inside the CSR constructor (O(E)); duplicate edges are harmless.
    Graph g(boost::edges_are_unsorted_multi_pass, edges.begin(), edges.end(), n);
    edges.clear();
    edges.shrink_to_fit();

    std::vector<std::uint32_t> order;
    order.reserve(n);
    boost::topological_sort(g, std::back_inserter(order));  // reverse topological order
    std::vector<std::int64_t> dist(n, -1);
    std::vector<std::uint32_t> pred(n, 0);
    dist[0] = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
        const std::uint32_t u = *it;
        if (dist[u] < 0) continue;
        for (auto e : boost::make_iterator_range(boost::out_edges(u, g))) {
            const std::uint32_t v = static_cast<std::uint32_t>(boost::target(e, g));
            const std::int64_t d = dist[u] + weight[v];
            if (d > dist[v]) dist[v] = d, pred[v] = u;
        }
    }
    std::uint32_t last = 0;
    for (std::uint32_t v = 1; v < n_instr_end; ++v)
        if (dist[v] > dist[last]) last = v;
    out.length_ns = dist[last];

    // Walk back and group by (rank, stream, label, link).
    std::map<std::tuple<int, int, std::string, int>, std::int64_t> groups_time;
    for (std::uint32_t v = last; v != 0; v = pred[v]) {
        if (v >= n_instr_end || weight[v] <= 0) continue;
        const auto r = static_cast<std::size_t>(std::upper_bound(base.begin(), base.end(), v) - base.begin() - 1);
        const auto i = v - base[r];
        const auto& in = p.ranks[r].instrs[i];
        groups_time[{static_cast<int>(r), static_cast<int>(in.stream), instr_label(in), t[r][i].link}] += weight[v];
    }
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

    // One line: the heaviest streams (summed over stages), each with the stages it spans and its
    // heaviest label (summed over stages too).
    std::map<int, std::int64_t> by_stream;
    std::map<int, std::pair<int, int>> stage_span;  // stream -> (min stage, max stage)
    std::map<std::tuple<int, std::string, std::string>, std::int64_t> by_label;
    for (const auto& s : out.segments) {
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
                to_string(static_cast<Stream>(st)) + " " + percent(static_cast<double>(ns) / total);
        const std::tuple<int, std::string, std::string>* top = nullptr;
        std::int64_t top_ns = -1;
        for (const auto& [key, lns] : by_label)
            if (std::get<0>(key) == st && lns > top_ns) top = &key, top_ns = lns;
        if (top) {
            line += " (" + std::get<1>(*top);
            if (!std::get<2>(*top).empty()) line += " on " + std::get<2>(*top);
            line += " " + percent(static_cast<double>(top_ns) / total) + ")";
        }
    }
    const std::int64_t rest = step_time_ns - out.length_ns;
    if (rest > 0) line += (line.empty() ? "" : ", ") + std::string("unexplained ") + percent(static_cast<double>(rest) / total);
    out.summary = line.empty() ? "empty step" : line;
    return out;
}

}  // namespace strata::sim::detail
