#include "strata/gui/models/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "timeline_source.hpp"
#include "strata/hwdb/types.hpp"
#include "strata/sim/engine.hpp"
#include "strata/sim/simulate.hpp"

namespace strata::gui {

const char* to_string(BarClass c) {
    static const char* names[] = {"GEMM",   "attention",  "memory-bound", "GPU optimizer", "TP comm", "CP comm",
                                  "EP comm", "DP comm",   "PP p2p",       "H2D/D2H copy", "SSD I/O", "CPU optimizer",
                                  "waiting", "alloc/free, other"};
    const auto i = static_cast<int>(c);
    return i >= 0 && i < kBarClassCount ? names[i] : "?";
}

namespace {

BarClass compute_class(sim::Op op) {
    switch (op) {
        case sim::Op::gemm: return BarClass::gemm;
        case sim::Op::attention_fwd:
        case sim::Op::attention_bwd: return BarClass::attention;
        case sim::Op::optimizer_gpu: return BarClass::optimizer;
        case sim::Op::none: return BarClass::other;
        default: return BarClass::memory_bound;  // norms, element-wise, embedding, loss, router, grad adds
    }
}

BarClass group_class(sim::Group g) {
    switch (g) {
        case sim::Group::tp:
        case sim::Group::etp: return BarClass::tp_comm;
        case sim::Group::cp: return BarClass::cp_comm;
        case sim::Group::ep: return BarClass::ep_comm;
        case sim::Group::pp: return BarClass::pp_p2p;
        default: return BarClass::dp_comm;  // dp, edp, embedding, world: gradient and parameter traffic
    }
}

template <class E, int N>
bool enum_named(std::string_view name, E& out) {
    for (int i = 0; i < N; ++i)
        if (name == to_string(static_cast<E>(i))) return out = static_cast<E>(i), true;
    return false;
}

}  // namespace

BarClass classify(const sim::Instr& in) {
    switch (in.kind) {
        case sim::InstrKind::compute: return compute_class(in.op);
        case sim::InstrKind::collective: return group_class(in.group);
        case sim::InstrKind::send:
        case sim::InstrKind::recv: return BarClass::pp_p2p;
        case sim::InstrKind::copy:
            return in.copy == sim::CopyKind::ssd_read || in.copy == sim::CopyKind::ssd_write ? BarClass::ssd : BarClass::copy;
        case sim::InstrKind::optimizer: return BarClass::cpu_optimizer;
        case sim::InstrKind::wait: return BarClass::wait;
        default: return BarClass::other;
    }
}

BarClass classify(std::string_view kind, std::string_view label) {
    using sim::InstrKind;
    InstrKind k{};
    if (!enum_named<InstrKind, 11>(kind, k)) return BarClass::other;
    sim::Instr in;
    in.kind = k;
    switch (k) {
        case InstrKind::compute: enum_named<sim::Op, 11>(label, in.op); break;
        case InstrKind::collective: {  // "all_reduce(dp)": the group is in the parentheses
            const auto open = label.find('('), close = label.find(')');
            if (open == std::string_view::npos || close == std::string_view::npos || close < open) return BarClass::other;
            if (!enum_named<sim::Group, sim::kGroupCount>(label.substr(open + 1, close - open - 1), in.group)) return BarClass::other;
            break;
        }
        case InstrKind::copy: enum_named<sim::CopyKind, 4>(label, in.copy); break;
        default: break;
    }
    return classify(in);
}

double TimeWindow::x_of(std::int64_t t_ns, double width_px) const {
    return static_cast<double>(t_ns - start_ns) * width_px / static_cast<double>(std::max<std::int64_t>(1, length_ns()));
}

std::int64_t TimeWindow::t_of(double x_px, double width_px) const {
    return start_ns + std::llround(x_px * static_cast<double>(length_ns()) / std::max(1.0, width_px));
}

TimeWindow TimeWindow::zoomed(double factor, std::int64_t anchor_ns, std::int64_t limit_ns) const {
    const std::int64_t limit = std::max(limit_ns, kMinWindowNs);
    const auto len = std::clamp<std::int64_t>(std::llround(static_cast<double>(length_ns()) * factor), kMinWindowNs, limit);
    const double frac = static_cast<double>(anchor_ns - start_ns) / static_cast<double>(std::max<std::int64_t>(1, length_ns()));
    const std::int64_t start = std::clamp<std::int64_t>(anchor_ns - std::llround(frac * static_cast<double>(len)), 0, limit - len);
    return {start, start + len};
}

TimeWindow TimeWindow::panned(std::int64_t delta_ns, std::int64_t limit_ns) const {
    const std::int64_t limit = std::max(limit_ns, length_ns());
    const std::int64_t start = std::clamp<std::int64_t>(start_ns + delta_ns, 0, limit - length_ns());
    return {start, start + length_ns()};
}

Timeline Timeline::from_simulation(std::shared_ptr<const sim::SimOutput> out) {
    Timeline t;
    const sim::Program& p = out->program;
    const sim::SimResult& r = out->result;
    // Critical instructions per rank, looked up while the spans are placed.
    std::vector<std::vector<std::uint8_t>> critical(p.ranks.size());
    for (const auto& st : r.critical_path.steps) {
        auto& v = critical[static_cast<std::size_t>(st.rank)];
        if (v.empty()) v.assign(p.ranks[static_cast<std::size_t>(st.rank)].instrs.size(), 0);
        v[static_cast<std::size_t>(st.instr)] = 1;
    }
    std::vector<std::array<int, sim::kStreamCount>> row_of(p.ranks.size());
    for (auto& a : row_of) a.fill(-1);
    for (const auto& sp : r.spans) {
        const auto rk = static_cast<std::size_t>(sp.rank);
        const sim::Instr& in = p.ranks[rk].instrs[static_cast<std::size_t>(sp.instr)];
        int& row = row_of[rk][static_cast<std::size_t>(in.stream)];
        if (row < 0) {
            row = static_cast<int>(t.rows_.size());
            TimelineRow nr;
            nr.rank_label = rank_label(p.ranks[rk]);
            nr.stream = sim::to_string(in.stream);
            nr.rank = sp.rank;
            nr.stream_index = static_cast<int>(in.stream);
            t.rows_.push_back(std::move(nr));
        }
        std::uint8_t flags = in.phase == sim::Phase::backward ? kBackward : in.phase == sim::Phase::recompute ? kRecompute : 0;
        if (!critical[rk].empty() && critical[rk][static_cast<std::size_t>(sp.instr)]) flags |= kCritical;
        t.rows_[static_cast<std::size_t>(row)].spans.push_back(Span{sp.start_ns, sp.end_ns, sp.instr, classify(in), flags, sp.provenance});
    }
    std::stable_sort(t.rows_.begin(), t.rows_.end(), [](const TimelineRow& a, const TimelineRow& b) {
        return std::tie(a.rank, a.stream_index) < std::tie(b.rank, b.stream_index);
    });
    auto src = std::make_shared<Source>();
    src->sim = std::move(out);
    t.sources_.push_back(std::move(src));
    t.finish();
    return t;
}

Timeline Timeline::overlay(const Timeline& predicted, const Timeline& measured) {
    Timeline t;
    t.sources_ = predicted.sources_;
    const int offset = static_cast<int>(t.sources_.size());
    t.sources_.insert(t.sources_.end(), measured.sources_.begin(), measured.sources_.end());
    std::map<std::pair<int, int>, std::vector<TimelineRow>> by_key;  // (rank, stream) -> rows, predicted first
    for (TimelineRow r : predicted.rows_) {
        r.tag = "predicted";
        by_key[{r.rank, r.stream_index}].push_back(std::move(r));
    }
    for (TimelineRow r : measured.rows_) {
        r.tag = "measured";
        r.source += offset;
        by_key[{r.rank, r.stream_index}].push_back(std::move(r));
    }
    for (auto& [key, rows] : by_key)
        for (auto& r : rows) t.rows_.push_back(std::move(r));
    t.finish();
    return t;
}

void Timeline::finish() {
    end_ns_ = 0;
    for (auto& r : rows_) {
        if (!std::is_sorted(r.spans.begin(), r.spans.end(), [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; }))
            std::stable_sort(r.spans.begin(), r.spans.end(), [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
        r.reach_ns.resize(r.spans.size());
        r.critical.clear();
        std::int64_t reach = 0;
        for (std::size_t i = 0; i < r.spans.size(); ++i) {
            reach = std::max(reach, r.spans[i].end_ns);
            r.reach_ns[i] = reach;
            if (r.spans[i].flags & kCritical) r.critical.push_back(static_cast<std::uint32_t>(i));
        }
        end_ns_ = std::max(end_ns_, reach);
    }
}

std::vector<std::size_t> filtered_rows(const Timeline& t, RowFilter f) {
    std::vector<std::size_t> out;
    for (std::size_t r = 0; r < t.rows().size(); ++r) {
        const std::string& s = t.rows()[r].stream;
        const bool p2p = s.rfind("pp-", 0) == 0;  // pp-p2p, pp-recv and their -b twins
        if (f == RowFilter::all || (f == RowFilter::no_p2p && !p2p) || (f == RowFilter::compute_only && s == "compute")) out.push_back(r);
    }
    return out;
}

std::size_t Timeline::span_count() const {
    std::size_t n = 0;
    for (const auto& r : rows_) n += r.spans.size();
    return n;
}

std::size_t Timeline::first_reaching(std::size_t row, std::int64_t t_ns) const {
    const auto& reach = rows_[row].reach_ns;
    return static_cast<std::size_t>(std::upper_bound(reach.begin(), reach.end(), t_ns) - reach.begin());
}

std::optional<std::size_t> Timeline::span_at(std::size_t row, std::int64_t t_ns, std::int64_t tol_ns) const {
    const auto& spans = rows_[row].spans;
    std::optional<std::size_t> best;
    std::int64_t best_gap = tol_ns + 1;
    for (std::size_t i = first_reaching(row, t_ns - tol_ns); i < spans.size() && spans[i].start_ns <= t_ns + tol_ns; ++i) {
        const Span& s = spans[i];
        const std::int64_t gap = t_ns < s.start_ns ? s.start_ns - t_ns : t_ns > s.end_ns ? t_ns - s.end_ns : 0;
        // Inside beats near; between two inside (overlapping measured spans), the shorter one.
        if (gap < best_gap || (gap == 0 && best && best_gap == 0 &&
                               s.end_ns - s.start_ns < spans[*best].end_ns - spans[*best].start_ns))
            best = i, best_gap = gap;
    }
    return best;
}

namespace {

// Walks spans in start order (through `index` when given), merging neighbours and jumping over
// the rest of a pixel once it is painted: after a span narrower than a pixel, the next span
// drawn is the first that starts in a later pixel, or the one before it if that one reaches
// into the later pixel (on a stream, only the last span starting in a pixel can).
template <class At>
std::vector<Bar> walk(std::size_t first, std::size_t n, At&& at, const TimeWindow& w, double width_px, std::uint8_t flag_mask) {
    std::vector<Bar> out;
    if (width_px <= 0 || w.length_ns() <= 0) return out;
    const double ns_per_px = static_cast<double>(w.length_ns()) / width_px;
    std::size_t i = first;
    while (i < n) {
        const Span& s = at(i);
        if (s.start_ns >= w.end_ns) break;
        const double x0 = std::max(-1.0, static_cast<double>(s.start_ns - w.start_ns) / ns_per_px);
        const double x1 = std::min(width_px + 1.0, static_cast<double>(s.end_ns - w.start_ns) / ns_per_px);
        const std::uint8_t flags = s.flags & flag_mask;
        if (!out.empty() && out.back().cls == s.cls && out.back().flags == flags && x0 <= out.back().x1 + 1.0) {
            out.back().x1 = std::max(out.back().x1, x1);
            ++out.back().spans;
        } else {
            out.push_back(Bar{x0, x1, s.cls, flags, 1});
        }
        if (x1 - x0 >= 1.0) {
            ++i;
            continue;
        }
        const std::int64_t t_next = w.start_ns + static_cast<std::int64_t>(std::ceil((std::floor(x0) + 1.0) * ns_per_px));
        std::size_t lo = i + 1, hi = n;  // first index in (i, n) starting at or after t_next
        while (lo < hi) {
            const std::size_t mid = lo + (hi - lo) / 2;
            if (at(mid).start_ns < t_next) lo = mid + 1;
            else hi = mid;
        }
        if (lo - 1 > i && at(lo - 1).end_ns > t_next) {
            i = lo - 1;
        } else {
            // The skipped spans fill the pixel up to where the last of them ends.
            out.back().x1 = std::max(out.back().x1, static_cast<double>(at(lo - 1).end_ns - w.start_ns) / ns_per_px);
            i = lo;
        }
    }
    return out;
}

}  // namespace

std::vector<Bar> Timeline::bars(std::size_t row, const TimeWindow& w, double width_px) const {
    const auto& spans = rows_[row].spans;
    return walk(first_reaching(row, w.start_ns), spans.size(), [&](std::size_t i) -> const Span& { return spans[i]; }, w,
                width_px, static_cast<std::uint8_t>(kBackward | kRecompute));
}

std::vector<Bar> Timeline::critical_bars(std::size_t row, const TimeWindow& w, double width_px) const {
    const auto& r = rows_[row];
    const auto first = static_cast<std::size_t>(
        std::lower_bound(r.critical.begin(), r.critical.end(), w.start_ns,
                         [&](std::uint32_t i, std::int64_t t) { return r.spans[i].end_ns <= t; }) -
        r.critical.begin());
    return walk(first, r.critical.size(), [&](std::size_t k) -> const Span& { return r.spans[r.critical[k]]; }, w, width_px,
                kCritical);
}

std::array<std::int64_t, kBarClassCount> Timeline::busy_by_class() const {
    std::array<std::int64_t, kBarClassCount> busy{};
    for (const auto& r : rows_)
        for (const auto& s : r.spans) busy[static_cast<std::size_t>(s.cls)] += s.end_ns - s.start_ns;
    return busy;
}

SpanInfo Timeline::info(std::size_t row, std::size_t span) const {
    const TimelineRow& r = rows_[row];
    const Span& s = r.spans[span];
    SpanInfo i = sources_[static_cast<std::size_t>(r.source)]->describe(r, s);
    i.rank_label = r.rank_label;
    i.stream = r.stream;
    i.start_ns = s.start_ns;
    i.end_ns = s.end_ns;
    i.critical = (s.flags & kCritical) != 0;
    if (i.provenance.empty() && s.provenance >= 0) i.provenance = hwdb::to_string(static_cast<hwdb::Provenance>(s.provenance));
    return i;
}

}  // namespace strata::gui
