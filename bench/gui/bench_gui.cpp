// The GUI's two responsiveness targets (issue #30), measured as a person meets them:
// - a what-if edit on LLaMA-3 70B on 64 H100: the knob read and validated, the plan re-simulated
//   with its trace, the timeline and memory data rebuilt, and both charts repainted at 1600 x 900
//   (target < 1 s);
// - a pan of the GPT-3 175B / 1024 A100 timeline (2.1 M instructions): the window moved by a tenth
//   and the chart repainted at 1600 x 900 (target < 50 ms), fully zoomed out and zoomed in.
// Wall time (UseRealTime): the simulation is single-threaded, the painting too.
#include <benchmark/benchmark.h>

#include <QApplication>
#include <QImage>
#include <QPainter>

#include "memory_charts.hpp"
#include "strata/gui/models/memory_view.hpp"
#include "strata/gui/models/whatif.hpp"
#include "strata/gui/models/workbench.hpp"
#include "strata/lowering/spec_io.hpp"
#include "timeline_widget.hpp"

using namespace strata;
using namespace strata::gui;

namespace {

const std::string kSrc = STRATA_SOURCE_DIR;
const QSize kSize(1600, 900);

const Hardware& hardware() {
    static const Hardware hw{Settings{}};
    return hw;
}

void paint(ChartWidget& w) {
    QImage img(kSize, QImage::Format_ARGB32_Premultiplied);
    QPainter p(&img);
    w.render_chart(p, QRect(QPoint(0, 0), kSize));
}

/// The planner's best plan for scripts/plan.sh's job (strata plan --model llama-3-70b --cluster
/// dgx-h100-x8 --global-batch 512: tp 1, cp 4, dp 16, ZeRO-3), and a deep interleaved pipeline
/// (tp 8, pp 4, vpp 5, 256 micro-batches) as the heavy case.
sim::PlanSpec llama_plan(bool pipelined) {
    sim::PlanSpec p;
    p.global_batch = 512;
    if (pipelined) {
        p.tp = 8, p.pp = 4, p.dp = 2, p.vpp = 5;
        p.schedule = sim::Schedule::interleaved_1f1b;
        p.sequence_parallel = true;
        p.zero_stage = 1;
    } else {
        p.tp = 1, p.cp = 4, p.dp = 16;
        p.zero_stage = 3;
    }
    return p;
}

void BM_WhatIfEdit_Llama3_70B_64xH100(benchmark::State& state) {
    const auto m = sim::load_model(kSrc + "/scenarios/models/llama-3-70b.json");
    const auto c = sim::load_cluster(kSrc + "/scenarios/clusters/dgx-h100-x8.json");
    const auto view = hardware().view(c, "dgx-h100-x8");
    const auto cal = hardware().calibration(view);
    sim::PlanSpec plan = llama_plan(state.range(0) != 0);
    const Knob knob = state.range(1) == 0 ? Knob::micro_batch : Knob::tp;
    TimelineWidget timeline;
    MemoryTimeChart memory;
    timeline.resize(kSize);
    memory.resize(kSize);
    std::int64_t spans = 0;
    double simulate_s = 0;
    const std::string values[2] = {knob_value(plan, knob), "2"};
    int k = 0;
    for (auto _ : state) {
        k = 1 - k;  // back and forth between two values: every edit is a new plan
        const WhatIfEdit e = apply_knob(m, c, plan, knob, values[k], true);
        const Snapshot s = simulate_snapshot(m, c, e.plan, view, cal, "what-if");
        simulate_s += s.wall_s;  // the library's share: lower, engine, critical path, trace
        auto t = std::make_shared<const Timeline>(Timeline::from_simulation(s.out));
        spans = static_cast<std::int64_t>(t->span_count());
        timeline.set_timeline(t, true);
        const MemoryView mv = memory_view(*s.out);
        memory.set_data(mv.tiers, mv.step_ns);
        paint(timeline);
        paint(memory);
    }
    state.counters["spans"] = static_cast<double>(spans);
    state.counters["simulate_ms"] = 1e3 * simulate_s / static_cast<double>(state.iterations());
}
// Args: the plan (0: the planner's best, 1: the deep pipeline), the knob (0: micro-batch 1 <-> 2,
// 1: tp 1 <-> 2 with dp following).
BENCHMARK(BM_WhatIfEdit_Llama3_70B_64xH100)
    ->Args({0, 0})->Args({0, 1})->Args({1, 0})->ArgNames({"pipelined", "knob_tp"})->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(6);

struct Gpt3 {
    std::shared_ptr<const Timeline> timeline;
    Gpt3() {
        const auto s = sim::load_scenario(kSrc + "/scenarios/gpt3-175b-1024xa100.json");
        const auto view = hardware().view(s.cluster, "gpt3");
        const Snapshot snap = simulate_snapshot(s.model, s.cluster, *s.plan, view, hardware().calibration(view), "gpt3");
        timeline = std::make_shared<const Timeline>(Timeline::from_simulation(snap.out));
    }
};
const Gpt3& gpt3() {
    static const Gpt3 g;
    return g;
}

/// Pan by a tenth of the window each frame, at 1 / 2^range(0) of the step.
void BM_TimelinePan_Gpt3_1024(benchmark::State& state) {
    const auto& t = gpt3().timeline;
    TimelineWidget w;
    w.resize(kSize);
    w.set_timeline(t);
    const std::int64_t len = std::max<std::int64_t>(TimeWindow::kMinWindowNs, t->end_ns() >> state.range(0));
    TimeWindow win{t->end_ns() / 3, t->end_ns() / 3 + len};
    std::int64_t step = len / 10;
    for (auto _ : state) {
        win = win.panned(step, t->end_ns());
        if (win.end_ns >= t->end_ns() || win.start_ns <= 0) step = -step;
        w.set_window(win);
        paint(w);
    }
    state.counters["spans"] = static_cast<double>(t->span_count());
    state.counters["rows"] = static_cast<double>(t->rows().size());
    state.counters["window_ms"] = static_cast<double>(len) * 1e-6;
}
BENCHMARK(BM_TimelinePan_Gpt3_1024)->Arg(0)->Arg(4)->Arg(10)->Arg(16)->ArgName("zoom_log2")->Unit(benchmark::kMillisecond)->UseRealTime();

/// Opening the GPT-3 timeline once: spans placed in rows from the simulation's trace.
void BM_TimelineBuild_Gpt3_1024(benchmark::State& state) {
    const auto s = sim::load_scenario(kSrc + "/scenarios/gpt3-175b-1024xa100.json");
    const auto view = hardware().view(s.cluster, "gpt3");
    const Snapshot snap = simulate_snapshot(s.model, s.cluster, *s.plan, view, hardware().calibration(view), "gpt3");
    for (auto _ : state) benchmark::DoNotOptimize(Timeline::from_simulation(snap.out));
    state.counters["spans"] = static_cast<double>(snap.out->result.spans.size());
}
BENCHMARK(BM_TimelineBuild_Gpt3_1024)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

}  // namespace

int main(int argc, char** argv) {
    qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
