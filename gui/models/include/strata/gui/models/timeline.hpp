// The timeline's data: one row per (rank, stream), each a list of spans sorted by start, built
// from a simulation (SimOutput with its trace) or from a Chrome trace file (what `strata simulate
// --trace` writes and the runtime will write). Painting asks only for the visible range: a binary
// search finds its first span, and spans narrower than a pixel are skipped a pixel at a time, so
// a frame costs O(pixels x log spans) per row whatever the zoom (GPT-3 on 1024 GPUs: 2.1 M spans).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "strata/lowering/program.hpp"

namespace strata::sim {
struct SimOutput;
}

namespace strata::gui {

/// What a bar is, at the granularity a person scans for (the legend's entries).
enum class BarClass : std::uint8_t {
    gemm, attention, memory_bound, optimizer, tp_comm, cp_comm, ep_comm, dp_comm, pp_p2p, copy, ssd, cpu_optimizer,
    wait, other, count
};
constexpr int kBarClassCount = static_cast<int>(BarClass::count);
const char* to_string(BarClass c);
BarClass classify(const sim::Instr& in);
/// The same from a trace event: `kind` is args.kind ("compute", "collective", ...), `label` the
/// second part of "cat" ("gemm", "all_reduce(dp)", "h2d") as trace.cpp writes them.
BarClass classify(std::string_view kind, std::string_view label);

enum SpanFlags : std::uint8_t { kBackward = 1, kRecompute = 2, kCritical = 4 };

struct Span {
    std::int64_t start_ns = 0, end_ns = 0;
    std::int32_t item = 0;  ///< the source's index: instruction (simulation) or event (trace)
    BarClass cls = BarClass::other;
    std::uint8_t flags = 0;
    std::int8_t provenance = -1;  ///< hwdb::Provenance of its cost (-1: none)
};

struct TimelineRow {
    std::string rank_label;  ///< "stage 3 (ranks 24..31)"
    std::string stream;      ///< "compute", "dp-comm"
    std::string tag;         ///< "" or, in an overlay, "predicted" / "measured"
    int rank = 0, stream_index = 0;
    int source = 0;          ///< which source the spans' items index
    std::vector<Span> spans;           ///< sorted by start
    std::vector<std::int64_t> reach_ns;  ///< running max of end: monotone even where spans overlap
    std::vector<std::uint32_t> critical; ///< indices of the spans on the critical path, in order
};

/// A counter track of a Chrome trace ("C" events), e.g. "memory gpu" of one process.
struct CounterTrack {
    int pid = 0;
    std::string name;
    std::vector<std::pair<std::int64_t, double>> points;  ///< (time ns, value), in file order
};

/// Everything the hover shows about one span.
struct SpanInfo {
    std::string name, label, phase, kind, provenance, rank_label, stream;
    int layer = -1, microbatch = -1;
    double flops = 0, bytes = 0;
    std::int64_t start_ns = 0, end_ns = 0;
    bool critical = false;
};

/// A contiguous run of spans drawn as one rectangle (x in pixels from the window's left edge).
struct Bar {
    double x0 = 0, x1 = 0;
    BarClass cls = BarClass::other;
    std::uint8_t flags = 0;
    std::uint32_t spans = 1;  ///< how many spans it stands for
};

/// The visible time range and the pixel mapping. Zoom stops at kMinWindowNs across the view.
struct TimeWindow {
    static constexpr std::int64_t kMinWindowNs = 1000;
    std::int64_t start_ns = 0, end_ns = 1;
    std::int64_t length_ns() const { return end_ns - start_ns; }
    double x_of(std::int64_t t_ns, double width_px) const;
    std::int64_t t_of(double x_px, double width_px) const;
    /// factor < 1 zooms in around anchor_ns (which keeps its pixel); clamped to [0, limit_ns].
    TimeWindow zoomed(double factor, std::int64_t anchor_ns, std::int64_t limit_ns) const;
    TimeWindow panned(std::int64_t delta_ns, std::int64_t limit_ns) const;
};

/// Which rows a view shows: all of them, all but the pipeline's send/receive streams (whose
/// waits fill a deep pipeline's rows), or the compute streams only.
enum class RowFilter { all, no_p2p, compute_only };

class Timeline;
/// Indices of the rows the filter keeps, in order.
std::vector<std::size_t> filtered_rows(const Timeline& t, RowFilter f);

class Timeline {
public:
    Timeline() = default;
    /// Needs SimOptions::trace; critical-path spans carry kCritical.
    static Timeline from_simulation(std::shared_ptr<const sim::SimOutput> out);
    /// A Chrome Trace Event file ("X" events; "M" names processes and threads). InputError names
    /// the file and the event that is malformed.
    /// Counter tracks go to `counters` when given.
    static Timeline from_chrome_trace(const std::string& text, const std::string& file,
                                      std::vector<CounterTrack>* counters = nullptr);
    /// The rows of both, a predicted row above its measured twin (rows matched by rank and stream).
    static Timeline overlay(const Timeline& predicted, const Timeline& measured);

    const std::vector<TimelineRow>& rows() const { return rows_; }
    std::int64_t end_ns() const { return end_ns_; }
    std::size_t span_count() const;
    SpanInfo info(std::size_t row, std::size_t span) const;

    /// First span of the row that ends after t_ns (rows().spans.size() if none).
    std::size_t first_reaching(std::size_t row, std::int64_t t_ns) const;
    /// The span under t_ns, or one within tol_ns of it (the nearest).
    std::optional<std::size_t> span_at(std::size_t row, std::int64_t t_ns, std::int64_t tol_ns) const;
    /// The rectangles to paint for a row in the window at this width: adjacent spans of one class
    /// closer than a pixel merge, and a pixel holds at most two bar starts (its first span, and the
    /// one reaching into the next pixel).
    std::vector<Bar> bars(std::size_t row, const TimeWindow& w, double width_px) const;
    /// The same for the row's critical-path spans only (painted over the others, never skipped).
    std::vector<Bar> critical_bars(std::size_t row, const TimeWindow& w, double width_px) const;
    /// Busy time per class over the whole timeline (the legend's totals).
    std::array<std::int64_t, kBarClassCount> busy_by_class() const;

    struct Source;  ///< a simulation or a parsed trace (what an item indexes)

private:
    void finish();  // sorts rows' spans, fills reach_ns and end_ns_
    std::vector<TimelineRow> rows_;
    std::vector<std::shared_ptr<const Source>> sources_;
    std::int64_t end_ns_ = 0;
};

}  // namespace strata::gui
