// The plan explorer's models: the table and its filter pass Qt's model checks and show the
// planner's figures; a search runs in the background to the end with progress, a long one stops
// when cancelled, a superseded run's result is dropped; a what-if knob is checked by the library.
#include <catch2/catch.hpp>

#include <QAbstractItemModelTester>
#include <QCoreApplication>
#include <QElapsedTimer>
#include <QSignalSpy>

#include "gui_fixtures.hpp"
#include "strata/common/error.hpp"
#include "strata/gui/models/job.hpp"
#include "strata/gui/models/plan_table.hpp"
#include "strata/gui/models/whatif.hpp"
#include "strata/lowering/spec_io.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

using namespace strata;
using namespace strata::gui;

namespace {

/// Runs the event loop until `done` or the deadline; returns whether done.
template <class Pred>
bool spin_until(Pred done, int ms = 120000) {
    QElapsedTimer t;
    t.start();
    while (!done() && t.elapsed() < ms) QCoreApplication::processEvents(QEventLoop::AllEvents, 20);
    return done();
}

struct Small {
    sim::Scenario s = sim::load_scenario(test::kSrc + "/scenarios/llama-2-7b-8xh100-pp4.json");
    hwdb::HardwareView view = test::hardware().view(s.cluster, "t");
};

planner::SearchResult small_search() {
    static const planner::SearchResult r = [] {
        Small sm;
        planner::SearchOptions o;
        o.space.global_batch = 64;
        o.space.search_offload = false;
        o.max_simulated = 4;
        o.threads = 2;
        o.calibration = test::hardware().calibration(sm.view);
        return planner::search_plans(sm.s.model, sm.s.cluster, sm.view, o);
    }();
    return r;
}

}  // namespace

TEST_CASE("plans: the table passes Qt's model checks and shows the planner's figures", "[gui][plans]") {
    const auto r = small_search();
    REQUIRE(r.ranked.size() > 4);
    PlanTableModel table;
    PlanFilterModel filter;
    filter.setSourceModel(&table);
    QAbstractItemModelTester t1(&table, QAbstractItemModelTester::FailureReportingMode::Fatal);
    QAbstractItemModelTester t2(&filter, QAbstractItemModelTester::FailureReportingMode::Fatal);
    table.set_plans(r.ranked);
    REQUIRE(table.rowCount() == static_cast<int>(r.ranked.size()));
    const auto& best = r.ranked.front();
    CHECK(table.data(table.index(0, PlanTableModel::Tp)).toInt() == best.plan.tp);
    CHECK(table.data(table.index(0, PlanTableModel::Tp), PlanTableModel::EstimateRole).toBool() == !best.simulated);
    CHECK(table.data(table.index(0, PlanTableModel::StepTime), PlanTableModel::SortRole).toDouble() ==
          (best.simulated ? best.sim.step_time_s : best.estimate.step_time_s));
    CHECK(table.data(table.index(0, PlanTableModel::Why)).toString().toStdString() == (best.simulated && best.sim.oom ? "OOM (simulated)" : best.why));
    // The CP exchange as the CLI's table writes it: 4u with Ulysses' all-to-all, the number alone
    // with the ring; sorted by the degree either way.
    std::vector<planner::RankedPlan> cps(2, best);
    cps[0].plan.cp = cps[1].plan.cp = 4;
    cps[0].plan.cp_comm_type = sim::CpCommType::a2a;
    cps[1].plan.cp_comm_type = sim::CpCommType::p2p;
    PlanTableModel cp_table;
    cp_table.set_plans(cps);
    CHECK(cp_table.data(cp_table.index(0, PlanTableModel::Cp)).toString() == "4u");
    CHECK(cp_table.data(cp_table.index(1, PlanTableModel::Cp)).toString() == "4");
    CHECK(cp_table.data(cp_table.index(0, PlanTableModel::Cp), PlanTableModel::SortRole).toInt() == 4);

    // Sorted by step time, ascending, by the number (not the text).
    filter.sort(PlanTableModel::StepTime, Qt::AscendingOrder);
    double prev = -1;
    for (int row = 0; row < filter.rowCount(); ++row) {
        const double v = filter.data(filter.index(row, PlanTableModel::StepTime), PlanTableModel::SortRole).toDouble();
        CHECK(v >= prev);
        prev = v;
    }

    PlanFilter f;
    f.zero_stage = 1;
    f.fits_only = true;
    filter.set_filter(f);
    int expected = 0;
    for (const auto& rp : r.ranked) expected += f.accepts(rp) ? 1 : 0;
    CHECK(filter.rowCount() == expected);
    for (int row = 0; row < filter.rowCount(); ++row) {
        CHECK(filter.data(filter.index(row, PlanTableModel::Zero)).toInt() == 1);
        CHECK(filter.data(filter.index(row, PlanTableModel::Fits)).toString() == "fits");
    }
    f = {};
    f.schedule = "gpipe";
    filter.set_filter(f);
    for (int row = 0; row < filter.rowCount(); ++row) CHECK(filter.data(filter.index(row, PlanTableModel::Schedule)).toString() == "gpipe");
}

TEST_CASE("job: a small search runs to the end with progress, on the GUI thread's terms", "[gui][job]") {
    Small sm;
    Job job;
    QSignalSpy progress(&job, &Job::progressChanged);
    QSignalSpy running(&job, &Job::runningChanged);
    auto result = std::make_shared<planner::SearchResult>();
    int calls = 0;
    bool cancelled = true;
    job.start(
        [&, result](const JobControl& c) {
            planner::SearchOptions o;
            o.space.global_batch = 64;
            o.space.search_offload = false;
            o.max_simulated = 4;
            o.cancel = c.cancel;
            o.progress = [&](double f, const char* phase) { c.progress(f, phase); };
            *result = planner::search_plans(sm.s.model, sm.s.cluster, sm.view, o);
        },
        [&](bool was_cancelled, const QString& error) {
            ++calls;
            cancelled = was_cancelled;
            CHECK(error.isEmpty());
        });
    CHECK(job.running());
    REQUIRE(spin_until([&] { return calls == 1; }));
    CHECK_FALSE(cancelled);
    CHECK_FALSE(job.running());
    CHECK(progress.count() >= 1);
    CHECK(running.count() == 2);
    CHECK_FALSE(result->ranked.empty());
    CHECK_FALSE(result->cancelled);
}

TEST_CASE("job: cancel stops a long search; a superseded run's result is dropped", "[gui][job]") {
    // A search of several seconds (LLaMA-3 405B on 16,384 GPUs): LLaMA-3 70B on 64 took about a
    // second, and once under load it finished between its first progress report and the cancel.
    const sim::ModelSpec m = sim::load_model(test::kSrc + "/scenarios/models/llama-3-405b.json");
    const sim::ClusterSpec c = sim::load_cluster(test::kSrc + "/scenarios/clusters/dgx-h100-x2048.json");
    const auto view = test::hardware().view(c, "t");
    Job job;
    std::vector<std::string> seen;
    auto long_search = [&](const std::string& tag) {
        return [&, tag](const JobControl& ctl) {
            planner::SearchOptions o;
            o.space.global_batch = 2048;
            o.cancel = ctl.cancel;
            o.progress = [&](double f, const char* phase) { ctl.progress(f, phase); };
            planner::search_plans(m, c, view, o);
        };
    };
    job.start(long_search("first"), [&](bool, const QString&) { seen.push_back("first"); });
    job.start(long_search("second"), [&](bool was_cancelled, const QString&) { seen.push_back(was_cancelled ? "second cancelled" : "second"); });
    QSignalSpy progress(&job, &Job::progressChanged);
    REQUIRE(spin_until([&] { return progress.count() > 0; }, 60000));
    QElapsedTimer t;
    t.start();
    job.cancel();
    REQUIRE(spin_until([&] { return !job.running(); }));
    const auto stop_ms = t.elapsed();
    WARN("cancelled search stopped after " << stop_ms << " ms");
    CHECK(seen == std::vector<std::string>{"second cancelled"});
}

TEST_CASE("job: an error in the work comes back as the message", "[gui][job]") {
    Job job;
    QString error;
    bool done = false;
    job.start([](const JobControl&) { throw InputError("f.json", "plan.tp", "= 3 does not divide model.heads = 32"); },
              [&](bool, const QString& e) { error = e, done = true; });
    REQUIRE(spin_until([&] { return done; }));
    CHECK(error == "f.json: plan.tp = 3 does not divide model.heads = 32");
}

TEST_CASE("job: destroying a job mid-run joins its thread and drops the result", "[gui][job]") {
    bool called = false;
    std::atomic<bool> started{false};
    {
        Job job;
        job.start(
            [&](const JobControl& c) {
                started = true;
                while (!c.cancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            },
            [&](bool, const QString&) { called = true; });
        while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    QCoreApplication::processEvents();
    CHECK_FALSE(called);
}

TEST_CASE("what-if: a knob is read and validated as the CLI would, dp follows tp", "[gui][whatif]") {
    Small sm;
    const sim::PlanSpec& base = *sm.s.plan;  // tp 2 pp 4 dp 1 on 8 GPUs
    const WhatIfEdit e = apply_knob(sm.s.model, sm.s.cluster, base, Knob::pp, "2", true);
    CHECK(e.plan.pp == 2);
    CHECK(e.plan.dp == 2);
    CHECK(e.note == "dp 1 -> 2 (keeps 8 GPUs)");
    CHECK_THROWS_WITH(apply_knob(sm.s.model, sm.s.cluster, base, Knob::pp, "2", false),
                      Catch::Contains("what-if: plan.tp x plan.pp x plan.dp x plan.cp"));
    CHECK_THROWS_WITH(apply_knob(sm.s.model, sm.s.cluster, base, Knob::micro_batch, "0", true),
                      "what-if: plan.micro_batch must be a positive integer (got 0)");
    CHECK_THROWS_WITH(apply_knob(sm.s.model, sm.s.cluster, base, Knob::schedule, "zigzag", true), Catch::Contains("is not one of: gpipe"));
    const WhatIfEdit off = apply_knob(sm.s.model, sm.s.cluster, base, Knob::zero_stage, "1", true);
    const WhatIfEdit cpu = apply_knob(sm.s.model, sm.s.cluster, off.plan, Knob::offload, "opt->cpu", true);
    CHECK(cpu.plan.offload.optimizer.cpu == 1.0);
    CHECK(knob_value(cpu.plan, Knob::offload) == "opt->cpu");
    CHECK(knob_value(base, Knob::offload) == "gpu");
    // Under DeepSpeed's preset an offloaded optimizer at ZeRO-2 takes the gradients to the host
    // (docs/frameworks.md), and the explorer still names the variant.
    const WhatIfEdit flat = apply_knob(sm.s.model, sm.s.cluster, off.plan, Knob::pp, "1", true);  // DeepSpeed's ZeRO-2: no pipeline
    const WhatIfEdit ds = apply_knob(sm.s.model, sm.s.cluster, flat.plan, Knob::framework, "deepspeed", true);
    const WhatIfEdit ds2 = apply_knob(sm.s.model, sm.s.cluster, ds.plan, Knob::zero_stage, "2", true);
    const WhatIfEdit ds_cpu = apply_knob(sm.s.model, sm.s.cluster, ds2.plan, Knob::offload, "opt->cpu", true);
    CHECK(ds_cpu.plan.offload.grads.cpu == 1.0);
    CHECK(knob_value(ds_cpu.plan, Knob::offload) == "opt->cpu");
    CHECK(apply_knob(sm.s.model, sm.s.cluster, ds_cpu.plan, Knob::offload, "gpu", true).plan.offload.grads.all_gpu());
    for (const auto& k : whatif_knobs()) CHECK(knob_info(k.knob).key == k.key);
    // Values as the explorer shows them: the plan file's, unquoted.
    CHECK(knob_value(base, Knob::tp) == "2");
    CHECK(knob_value(base, Knob::pp) == "4");
    CHECK(knob_value(off.plan, Knob::zero_stage) == "1");
    CHECK(knob_value(base, Knob::schedule) == sim::to_string(base.schedule));
    CHECK(knob_value(base, Knob::recompute) == sim::to_string(base.recompute));
    CHECK(knob_value(base, Knob::sequence_parallel) == (base.sequence_parallel ? "true" : "false"));
    // The CP exchange and the selective policy, as the reader spells them; a rule they break is
    // the reader's message (op-level SAC needs recompute selective).
    CHECK(knob_value(base, Knob::cp_comm_type) == "p2p");
    CHECK(knob_info(Knob::cp_comm_type).choices == std::vector<std::string>{"p2p", "a2a", "allgather"});
    CHECK(knob_value(base, Knob::recompute_policy) == "modules");
    CHECK_THROWS_WITH(apply_knob(sm.s.model, sm.s.cluster, base, Knob::recompute_policy, "op", true), Catch::Contains("plan.recompute_policy"));
    // Each shown value is one the knob accepts back.
    for (const auto& k : whatif_knobs()) {
        if (k.knob == Knob::offload || k.knob == Knob::framework) continue;
        INFO(k.key);
        CHECK(knob_value(apply_knob(sm.s.model, sm.s.cluster, base, k.knob, knob_value(base, k.knob), true).plan, k.knob) == knob_value(base, k.knob));
    }
}

TEST_CASE("what-if: the delta says which way each figure moved", "[gui][whatif]") {
    Figures a{2.0, 1000, 0.40, 60e9, true}, b{1.5, 1333, 0.53, 70e9, false};
    const auto lines = delta_lines(a, b);
    REQUIRE(lines.size() == 5);
    CHECK(lines[0].change == "-25.0 %");
    CHECK(lines[0].better == 1);
    CHECK(lines[2].change == "+13.0 pt");
    CHECK(lines[3].better == -1);
    CHECK(lines[4].change == "now OOM");
    CHECK(lines[4].better == -1);
}

TEST_CASE("what-if: a framework applies its preset, gives way to another, and follows later edits", "[gui][whatif]") {
    Small sm;
    const sim::PlanSpec& base = *sm.s.plan;  // the file states tp, pp, dp, batch, SP, schedule, ZeRO, recompute, precision
    CHECK(knob_value(base, Knob::framework) == "none");
    // The reference: the plan file itself with plan.framework (and other stated fields) added, read as the CLI reads it.
    auto as_file = [&](const std::string& framework, int tp, int dp) {
        std::ifstream f(test::kSrc + "/scenarios/plans/llama-2-7b-8xh100-pp4.json");
        nlohmann::ordered_json j = nlohmann::ordered_json::parse(f);
        if (!framework.empty()) j["framework"] = framework;
        j["tp"] = tp;
        j["dp"] = dp;
        return sim::to_json_text(sim::plan_from_json_text(j.dump(), "t"));
    };
    const WhatIfEdit old = apply_knob(sm.s.model, sm.s.cluster, base, Knob::framework, "megatron-lm-2021", true);
    CHECK(knob_value(old.plan, Knob::framework) == "megatron-lm-2021");
    CHECK(sim::to_json_text(old.plan) == as_file("megatron-lm-2021", 2, 1));
    CHECK_FALSE(old.plan.flash_attention);  // the preset's: no fused attention in 2021
    CHECK(old.plan.fp32_grads);
    // Another framework replaces the first one's knobs; none brings the defaults back.
    const WhatIfEdit core = apply_knob(sm.s.model, sm.s.cluster, old.plan, Knob::framework, "megatron-core", true);
    CHECK(sim::to_json_text(core.plan) == as_file("megatron-core", 2, 1));
    const WhatIfEdit none = apply_knob(sm.s.model, sm.s.cluster, core.plan, Knob::framework, "none", true);
    CHECK(sim::to_json_text(none.plan) == sim::to_json_text(base));
    // A later edit re-derives what the preset supplied from the edited plan (tp 1: dp 2 keeps 8 GPUs).
    const WhatIfEdit tp1 = apply_knob(sm.s.model, sm.s.cluster, core.plan, Knob::tp, "1", true);
    CHECK(sim::to_json_text(tp1.plan) == as_file("megatron-core", 1, 2));
    // A framework that cannot run the plan is refused with the framework named, as the CLI does.
    sim::PlanSpec z2 = base;
    z2.zero_stage = 2;
    CHECK_THROWS_WITH(apply_knob(sm.s.model, sm.s.cluster, z2, Knob::framework, "megatron-lm-2021", true), Catch::Contains("plan.zero_stage"));
}
