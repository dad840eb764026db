// strata-gui: explore plans, timelines, memory and capacity in a window; or, with --screenshot,
// render one view with no person present (docs, tests). Exit codes as the CLI's: 0 ok, 2 bad
// input (the message names the file, the field and the rule), 1 anything else. Files are only
// ever written whole.
#include <QApplication>
#include <QCommandLineParser>
#include <QSize>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "strata/common/error.hpp"
#include "strata/gui/models/scenario_document.hpp"
#include "strata/gui/widgets/main_window.hpp"

using namespace strata;
using namespace strata::gui;

namespace {

struct Failure {
    int code;
    QString message;
};

[[noreturn]] void fail(int code, const QString& message) { throw Failure{code, message}; }

QSize parse_size(const QString& s) {
    const QStringList wh = s.split('x');
    bool ok1 = false, ok2 = false;
    const int w = wh.size() == 2 ? wh[0].toInt(&ok1) : 0, h = wh.size() == 2 ? wh[1].toInt(&ok2) : 0;
    if (!ok1 || !ok2 || w < 320 || h < 240 || w > 8000 || h > 8000) fail(2, "--size: \"" + s + "\" must be WIDTHxHEIGHT, e.g. 1600x1000");
    return {w, h};
}

/// --time 1200:3400 (microseconds) -> nanoseconds.
std::pair<std::int64_t, std::int64_t> parse_time(const QString& s) {
    const QStringList ab = s.split(':');
    bool ok1 = false, ok2 = false;
    const double a = ab.size() == 2 ? ab[0].toDouble(&ok1) : 0, b = ab.size() == 2 ? ab[1].toDouble(&ok2) : 0;
    if (!ok1 || !ok2 || !(a >= 0) || !(b > a)) fail(2, "--time: \"" + s + "\" must be START:END in microseconds, START < END");
    return {static_cast<std::int64_t>(a * 1000), static_cast<std::int64_t>(b * 1000)};
}

Knob parse_knob(const QString& name) {
    for (const auto& k : whatif_knobs())
        if (name.toStdString() == k.key) return k.knob;
    QStringList keys;
    for (const auto& k : whatif_knobs()) keys << QString::fromStdString(k.key);
    fail(2, "--whatif: \"" + name + "\" is not a knob (" + keys.join(", ") + ")");
}

int run(QApplication& app, QCommandLineParser& cli) {
    const bool headless = cli.isSet("screenshot") || cli.isSet("plans-json");
    const int timeout_ms = cli.value("timeout").toInt() * 1000;
    Settings settings;
    settings.db_path = cli.value("db").toStdString();
    settings.calibration = cli.value("calibration").toStdString();
    MainWindow w(settings);
    auto need = [&](const QString& err) {
        if (!err.isEmpty()) fail(2, err);
    };
    if (cli.isSet("scenario")) need(w.open_scenario(cli.value("scenario")));
    if (cli.isSet("model") || cli.isSet("cluster") || cli.isSet("plan")) {
        if (cli.isSet("scenario")) fail(2, "--scenario: give either a scenario or --model/--cluster/--plan");
        need(w.open_specs(cli.value("model"), cli.value("cluster"), cli.value("plan")));
    }
    if (cli.isSet("report")) need(w.open_report(cli.value("report")));
    if (!headless) {
        w.show();
        return app.exec();
    }

    const QString view = cli.value("view");
    if (!MainWindow::view_names().contains(view)) fail(2, "--view: \"" + view + "\" is not one of " + MainWindow::view_names().join(", "));
    if (cli.isSet("size")) w.resize(parse_size(cli.value("size")));
    else w.resize(1600, 1000);
    if (!w.wait_idle(timeout_ms)) fail(1, "timed out simulating the scenario");
    if (!w.last_error().isEmpty()) fail(2, w.last_error());
    for (const QString& kv : cli.values("edit")) {  // shown beside the field, not fatal: that is what the editor view is for
        const int eq = static_cast<int>(kv.indexOf('='));
        if (eq <= 0) fail(2, "--edit: \"" + kv + "\" must be FIELD=VALUE, e.g. plan.tp=4");
        w.edit_field(kv.left(eq), kv.mid(eq + 1));
        if (!w.wait_idle(timeout_ms)) fail(1, "timed out simulating the edit");
    }
    const bool search = cli.isSet("plans-json") || cli.isSet("pick") || (view == "plans" && cli.isSet("screenshot"));
    if (search) {
        if (w.document().scenario().model.layers == 0) fail(2, "--view plans: give --scenario or --model and --cluster");
        if (cli.isSet("plans-json")) w.export_plans_when_done(cli.value("plans-json"));
        const int gbs = cli.isSet("global-batch") ? cli.value("global-batch").toInt()
                                                   : (w.document().scenario().plan ? w.document().scenario().plan->global_batch : 512);
        w.start_search(gbs, !cli.isSet("no-offload"));
        if (!w.wait_idle(timeout_ms)) fail(1, "timed out searching plans");
    }
    if (cli.isSet("pick")) {
        const int n = cli.value("pick").toInt();
        if (!w.open_ranked_plan(n - 1)) fail(2, "--pick: no plan #" + cli.value("pick") + " in the table");
        if (!w.wait_idle(timeout_ms)) fail(1, "timed out simulating the picked plan");
    }
    for (const QString& kv : cli.values("whatif")) {
        const int eq = static_cast<int>(kv.indexOf('='));
        if (eq <= 0) fail(2, "--whatif: \"" + kv + "\" must be KNOB=VALUE");
        need(w.set_knob(parse_knob(kv.left(eq)), kv.mid(eq + 1)));
        if (!w.wait_idle(timeout_ms)) fail(1, "timed out simulating the what-if");
    }
    if (view == "capacity") {
        CapacityRequest r;
        if (cli.isSet("tokens")) r.tokens = cli.value("tokens").toDouble() * 1e9;
        if (cli.isSet("deadline")) r.deadline_s = cli.value("deadline").toDouble() * 86400;
        if (cli.isSet("max-gpus")) r.max_gpus = cli.value("max-gpus").toInt();
        if (cli.isSet("global-batch")) r.global_batch = cli.value("global-batch").toInt();
        if (cli.isSet("gpus")) {
            r.gpus.clear();
            for (const QString& g : cli.value("gpus").split(',', Qt::SkipEmptyParts)) r.gpus.push_back(g.toStdString());
        }
        w.start_capacity(r);
        if (!w.wait_idle(timeout_ms)) fail(1, "timed out sweeping cluster sizes");
        if (!w.last_error().isEmpty()) fail(2, w.last_error());
    }
    if (view == "validation" && !cli.isSet("report")) fail(2, "--view validation: give --report FILE (a strata validate report)");
    w.show_view(view);
    if (cli.isSet("streams")) {
        const QStringList names{"all", "no-p2p", "compute"};
        const int i = static_cast<int>(names.indexOf(cli.value("streams")));
        if (i < 0) fail(2, "--streams: \"" + cli.value("streams") + "\" is not one of " + names.join(", "));
        w.set_timeline_rows(static_cast<RowFilter>(i));
    }
    if (cli.isSet("time")) {
        const auto [a, b] = parse_time(cli.value("time"));
        w.set_timeline_window(a, b);
    }
    if (cli.isSet("screenshot")) {
        QApplication::processEvents();
        const QString err = w.save_view_image(cli.value("screenshot"));
        if (!err.isEmpty()) fail(1, err);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // With no person present (or only asking for help) there may be no display: draw offscreen.
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if ((a == "--screenshot" || a == "--plans-json" || a == "--help" || a == "-h" || a == "--version") && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
            qputenv("QT_QPA_PLATFORM", "offscreen");
    }
    // Qt falls back to /tmp/runtime-$USER when XDG_RUNTIME_DIR is unset (containers, CI) and warns on
    // every start; make that same folder ourselves, quietly.
    if (qEnvironmentVariableIsEmpty("XDG_RUNTIME_DIR")) {
        const std::string dir = "/tmp/runtime-" + std::to_string(::getuid());
        ::mkdir(dir.c_str(), 0700);
        qputenv("XDG_RUNTIME_DIR", QByteArray::fromStdString(dir));
    }
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("strata-gui"));
    QApplication::setApplicationVersion(QStringLiteral(STRATA_VERSION));
    QCommandLineParser cli;
    cli.setApplicationDescription(QStringLiteral(
        "Strata's GUI: edit a scenario, search and compare plans, read the timeline and memory of a step, sweep cluster sizes,\n"
        "and lay a strata validate report's measurement over the prediction. With --screenshot, renders one view and exits."));
    cli.addHelpOption();
    cli.addVersionOption();
    const QString views = MainWindow::view_names().join(", ");
    cli.addOptions({
        {{"s", "scenario"}, "Scenario JSON, or a bundled scenario name.", "file|name"},
        {{"m", "model"}, "Model JSON or bundled model name (with --cluster [--plan]).", "file|name"},
        {{"c", "cluster"}, "Cluster JSON or bundled cluster name.", "file|name"},
        {{"p", "plan"}, "Plan JSON or bundled plan name.", "file|name"},
        {"report", "A strata validate report (schema strata.validate/1) for the validation view.", "file"},
        {"view", "The view to show: " + views + ".", "name", "timeline"},
        {"screenshot", "Render the view to FILE (.png or .svg) and exit; no display needed.", "file"},
        {"size", "Window size for --screenshot (default 1600x1000).", "WxH"},
        {"time", "Timeline range shown, in microseconds.", "start:end"},
        {"streams", "Timeline rows shown: all, no-p2p (no pipeline send/recv), compute.", "which"},
        {"edit", "Edit a scenario field as the editor does (repeatable), e.g. plan.tp=3; a problem is shown beside it.", "field=value"},
        {"pick", "Search plans, then open the N-th ranked plan (as a double-click does).", "n"},
        {"whatif", "Move a what-if knob after the scenario is simulated (repeatable), e.g. micro_batch=2.", "knob=value"},
        {"global-batch", "Sequences per step for a plan search or a capacity sweep.", "n"},
        {"no-offload", "The plan search does not try CPU/SSD offload."},
        {"plans-json", "Search plans and write them as the planner's JSON when the search completes; exit.", "file"},
        {"tokens", "Capacity: billions of tokens to train (default 300).", "billions"},
        {"deadline", "Capacity: days (default 30; 0: none).", "days"},
        {"gpus", "Capacity: hwdb GPU ids, comma-separated (default H100-SXM5-80GB,A100-SXM4-80GB).", "ids"},
        {"max-gpus", "Capacity: largest cluster (default 4096).", "n"},
        {"db", "Hardware database (default: this build's seeded one, or $STRATA_HWDB).", "file"},
        {"calibration", "Cost calibration JSON, or 'none' (default: the built-in one, as the CLI).", "file|none"},
        {"timeout", "Headless: seconds to wait for the work (default 600).", "s", "600"},
    });
    cli.process(app);
    try {
        return run(app, cli);
    } catch (const Failure& f) {
        std::cerr << "error: " << f.message.toStdString() << "\n";
        return f.code;
    } catch (const InputError& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 1;
    }
}
