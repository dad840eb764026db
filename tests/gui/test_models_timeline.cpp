// The timeline's data and its visible-range queries: built from a simulation or from the Chrome
// trace of the same simulation it is the same timeline; the painter's bars cover every span wider
// than a pixel and never number more than about one per pixel; zoom keeps the anchor under the
// cursor and stops at a microsecond.
#include <catch2/catch.hpp>

#include <random>

#include "gui_fixtures.hpp"
#include "strata/common/error.hpp"
#include "strata/gui/models/timeline.hpp"
#include "strata/sim/engine.hpp"

using namespace strata;
using namespace strata::gui;

namespace {

/// A trace of one stream: back-to-back spans given as (duration ns, label) in microsecond units.
std::string stream_trace(const std::vector<std::pair<std::int64_t, std::string>>& spans, std::int64_t gap_ns = 0) {
    std::string s = R"({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "stage 0"}})";
    std::int64_t t = 0;
    for (const auto& [dur, label] : spans) {
        const std::string kind = label.find('(') != std::string::npos ? "collective" : "compute";
        s += ",\n{\"ph\": \"X\", \"name\": \"" + label + "\", \"cat\": \"forward," + label + "\", \"pid\": 0, \"tid\": 0, \"ts\": " +
             std::to_string(static_cast<double>(t) / 1000.0) + ", \"dur\": " + std::to_string(static_cast<double>(dur) / 1000.0) +
             ", \"args\": {\"kind\": \"" + kind + "\"}}";
        t += dur + gap_ns;
    }
    return s + "]}";
}

}  // namespace

TEST_CASE("timeline: classes from an instruction and from its trace event agree", "[gui][timeline]") {
    const auto snap = test::tiny_snapshot();
    const auto& p = snap.out->program;
    int n = 0;
    for (const auto& rp : p.ranks)
        for (const auto& in : rp.instrs) {
            if (in.kind == sim::InstrKind::alloc || in.kind == sim::InstrKind::free) continue;
            CHECK(classify(in) == classify(sim::to_string(in.kind), sim::instr_label(in)));
            ++n;
        }
    CHECK(n > 100);
    CHECK(classify("collective", "reduce_scatter(dp)") == BarClass::dp_comm);
    CHECK(classify("collective", "all_to_all(ep)") == BarClass::ep_comm);
    CHECK(classify("copy", "ssd_write") == BarClass::ssd);
    CHECK(classify("nonsense", "gemm") == BarClass::other);
}

TEST_CASE("timeline: a simulation and its Chrome trace give the same rows and spans", "[gui][timeline]") {
    const auto snap = test::tiny_snapshot();
    const Timeline a = Timeline::from_simulation(snap.out);
    const Timeline b = Timeline::from_chrome_trace(sim::trace_text(*snap.out), "trace.json");
    REQUIRE(a.rows().size() == b.rows().size());
    CHECK(a.span_count() == snap.out->result.spans.size());
    CHECK(a.span_count() == b.span_count());
    CHECK(a.end_ns() == snap.out->result.step_time_ns);
    for (std::size_t r = 0; r < a.rows().size(); ++r) {
        const auto& ra = a.rows()[r];
        const auto& rb = b.rows()[r];
        CHECK(ra.rank_label == rb.rank_label);
        CHECK(ra.stream == rb.stream);
        REQUIRE(ra.spans.size() == rb.spans.size());
        for (std::size_t i = 0; i < ra.spans.size(); ++i) {
            CHECK(ra.spans[i].start_ns == rb.spans[i].start_ns);
            CHECK(ra.spans[i].end_ns == rb.spans[i].end_ns);
            CHECK(ra.spans[i].cls == rb.spans[i].cls);
            CHECK((ra.spans[i].flags & kBackward) == (rb.spans[i].flags & kBackward));
        }
        const SpanInfo ia = a.info(r, 0), ib = b.info(r, 0);
        CHECK(ia.name == ib.name);
        CHECK(ia.layer == ib.layer);
        CHECK(ia.microbatch == ib.microbatch);
        CHECK(ia.flops == Approx(ib.flops));
        CHECK(ia.provenance == ib.provenance);
    }
}

TEST_CASE("timeline: the critical path's instructions are flagged, in time order", "[gui][timeline]") {
    const auto snap = test::tiny_snapshot();
    const Timeline t = Timeline::from_simulation(snap.out);
    std::size_t flagged = 0;
    std::int64_t on_path_ns = 0;
    for (const auto& r : t.rows()) {
        flagged += r.critical.size();
        for (std::size_t k = 1; k < r.critical.size(); ++k) CHECK(r.critical[k - 1] < r.critical[k]);
        for (auto i : r.critical) on_path_ns += r.spans[i].end_ns - r.spans[i].start_ns;
    }
    CHECK(flagged == snap.out->result.critical_path.steps.size());
    // The path's instructions account for its length (the rest is zero-time records and waits).
    CHECK(on_path_ns <= snap.out->result.critical_path.length_ns);
    CHECK(on_path_ns >= snap.out->result.critical_path.length_ns * 9 / 10);
}

TEST_CASE("timeline: adjacent spans of one class merge into one bar", "[gui][timeline]") {
    std::vector<std::pair<std::int64_t, std::string>> spans(1000, {10, "gemm"});
    const Timeline t = Timeline::from_chrome_trace(stream_trace(spans), "t.json");
    const auto bars = t.bars(0, TimeWindow{0, 10000}, 100);
    REQUIRE(bars.size() == 1);
    CHECK(bars[0].x0 == Approx(0));
    CHECK(bars[0].x1 == Approx(100));
    CHECK(bars[0].cls == BarClass::gemm);
}

TEST_CASE("timeline: a long span after tiny ones in the same pixel is drawn", "[gui][timeline]") {
    // 10 ns spans then a 5000 ns GEMM, at 100 ns a pixel: the GEMM starts inside pixel 0.
    std::vector<std::pair<std::int64_t, std::string>> spans{{10, "norm"}, {10, "elementwise"}, {10, "all_reduce(tp)"}, {5000, "gemm"}};
    const Timeline t = Timeline::from_chrome_trace(stream_trace(spans), "t.json");
    const auto bars = t.bars(0, TimeWindow{0, 10000}, 100);
    bool gemm = false;
    for (const auto& b : bars)
        if (b.cls == BarClass::gemm) gemm = b.x1 == Approx(50.3);
    CHECK(gemm);
}

TEST_CASE("timeline: bars cover every span wider than a pixel, at most two bars start in a pixel", "[gui][timeline]") {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> dur(1, 400), gap(0, 60), cls(0, 3);
    const char* labels[] = {"gemm", "norm", "all_reduce(dp)", "attention_fwd"};
    std::vector<std::pair<std::int64_t, std::string>> spans;
    for (int i = 0; i < 20000; ++i) spans.emplace_back(dur(rng), labels[cls(rng)]);
    const Timeline t = Timeline::from_chrome_trace(stream_trace(spans, 7), "t.json");
    const auto& row = t.rows()[0];
    for (const TimeWindow w : {TimeWindow{0, t.end_ns()}, TimeWindow{123456, 223456}, TimeWindow{500000, 501000}}) {
        const double width = 800;
        const auto bars = t.bars(0, w, width);
        CHECK(bars.size() <= 2 * static_cast<std::size_t>(width) + 2);
        for (std::size_t i = t.first_reaching(0, w.start_ns); i < row.spans.size() && row.spans[i].start_ns < w.end_ns; ++i) {
            const double x0 = std::max(0.0, w.x_of(row.spans[i].start_ns, width)), x1 = std::min(width, w.x_of(row.spans[i].end_ns, width));
            if (x1 - x0 < 2.0) continue;
            // Its middle pixel lies inside some bar.
            const double mid = (x0 + x1) / 2;
            bool covered = false;
            for (const auto& b : bars) covered = covered || (b.x0 <= mid && mid <= b.x1);
            CHECK(covered);
        }
    }
}

TEST_CASE("timeline: first_reaching and span_at hold where measured spans overlap", "[gui][timeline]") {
    const std::string text = R"({"traceEvents": [
        {"ph": "X", "name": "a", "pid": 0, "tid": 0, "ts": 0, "dur": 10},
        {"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": 1, "dur": 2},
        {"ph": "X", "name": "c", "pid": 0, "tid": 0, "ts": 4, "dur": 1},
        {"ph": "X", "name": "d", "pid": 0, "tid": 0, "ts": 20, "dur": 1}]})";
    const Timeline t = Timeline::from_chrome_trace(text, "t.json");
    CHECK(t.first_reaching(0, 5000) == 0);   // "a" (0..10 us) still runs at 5 us though b and c ended
    CHECK(t.first_reaching(0, 10000) == 3);  // only "d" reaches past 10 us
    CHECK(t.first_reaching(0, 30000) == 4);
    CHECK(t.info(0, *t.span_at(0, 4500, 0)).name == "c");   // inside both a and c: the shorter
    CHECK(t.info(0, *t.span_at(0, 16000, 6000)).name == "d");  // nearest within tolerance
    CHECK_FALSE(t.span_at(0, 15000, 100));
}

TEST_CASE("timeline: zoom keeps the anchor's pixel, clamps, and stops at a microsecond", "[gui][timeline]") {
    const TimeWindow w{1000000, 2000000};
    const TimeWindow z = w.zoomed(0.5, 1250000, 10000000);
    CHECK(z.length_ns() == 500000);
    CHECK(z.x_of(1250000, 1000) == Approx(w.x_of(1250000, 1000)).margin(1e-6));
    const TimeWindow tiny = w.zoomed(1e-9, 1500000, 10000000);
    CHECK(tiny.length_ns() == TimeWindow::kMinWindowNs);
    const TimeWindow out = w.zoomed(100, 1500000, 10000000);
    CHECK(out.start_ns == 0);
    CHECK(out.end_ns == 10000000);
    CHECK(w.panned(-5000000, 10000000).start_ns == 0);
    CHECK(w.panned(50000000, 10000000).end_ns == 10000000);
    CHECK(w.t_of(w.x_of(1337000, 640), 640) == Approx(1337000).margin(w.length_ns() / 640.0));
}

TEST_CASE("timeline: a malformed trace names the file, the event and the rule", "[gui][timeline]") {
    auto message = [](const std::string& text) {
        try {
            Timeline::from_chrome_trace(text, "bad.json");
        } catch (const InputError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(message(R"({"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "dur": 1}]})") == "bad.json: traceEvents[0].ts is required");
    CHECK(message(R"({"traceEvents": [{"ph": "M"}, {"ph": "X", "pid": 0, "tid": 0, "ts": "7", "dur": 1}]})") ==
          "bad.json: traceEvents[1].ts must be a time in microseconds (got \"7\")");
    CHECK(message(R"({"events": []})") == "bad.json: traceEvents is required (a Chrome Trace Event file)");
    CHECK(message("[1, 2") .find("bad.json: is not valid JSON") == 0);
}

TEST_CASE("timeline: the row filters keep what they say", "[gui][timeline]") {
    const Timeline t = Timeline::from_simulation(test::tiny_snapshot().out);
    const auto all = filtered_rows(t, RowFilter::all);
    const auto no_p2p = filtered_rows(t, RowFilter::no_p2p);
    const auto compute = filtered_rows(t, RowFilter::compute_only);
    CHECK(all.size() == t.rows().size());
    CHECK(compute.size() == test::tiny_snapshot().out->program.ranks.size());  // one compute row per rank program
    CHECK(no_p2p.size() < all.size());
    CHECK(no_p2p.size() > compute.size());
    for (auto r : no_p2p) CHECK(t.rows()[r].stream.rfind("pp-", 0) != 0);
    for (auto r : compute) CHECK(t.rows()[r].stream == "compute");
    CHECK(std::is_sorted(no_p2p.begin(), no_p2p.end()));
}
