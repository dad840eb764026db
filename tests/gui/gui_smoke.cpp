// The GUI end to end on the offscreen platform, through the calls its menus and buttons make:
// load a scenario, refuse a bad one without changing anything, show a field's error, run a small
// plan search to the end, move a what-if knob, cancel a long search, close during a search with
// nothing written, and save a screenshot and a chart as PNG and SVG.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <QApplication>
#include <QElapsedTimer>
#include <QImage>
#include <QLabel>

#include <filesystem>
#include <fstream>

#include "explorer_page.hpp"
#include "scenario_page.hpp"
#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/gui/models/plan_table.hpp"
#include "strata/gui/models/scenario_document.hpp"
#include "strata/gui/widgets/main_window.hpp"
#include "strata/lowering/spec_io.hpp"

using namespace strata;
using namespace strata::gui;
namespace fs = std::filesystem;

namespace {

const std::string kSrc = STRATA_SOURCE_DIR;
const QString kScenario = QString::fromStdString(kSrc + "/scenarios/llama-2-7b-8xh100-pp4.json");

struct TempDir {
    fs::path path = fs::temp_directory_path() / ("strata-gui-smoke-" + std::to_string(::getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
    QString file(const std::string& name) const { return QString::fromStdString((path / name).string()); }
};

bool non_blank(const QImage& img) {
    int colored = 0;
    for (int y = 0; y < img.height(); y += 7)
        for (int x = 0; x < img.width(); x += 7) {
            const QColor c = img.pixelColor(x, y);
            if (std::abs(c.red() - c.green()) > 30 || std::abs(c.green() - c.blue()) > 30) ++colored;
        }
    return colored > 50;
}

}  // namespace

TEST_CASE("smoke: the window loads a scenario, refuses a bad one, searches, cancels, closes clean, saves images", "[gui][smoke]") {
    TempDir tmp;
    MainWindow w(Settings{});
    w.resize(1600, 1000);

    // A scenario loads and is simulated in the background.
    REQUIRE(w.open_scenario(kScenario).isEmpty());
    REQUIRE(w.wait_idle(120000));
    REQUIRE(w.current());
    CHECK(w.current()->plan.pp == 4);
    CHECK(w.last_error().isEmpty());

    // A file with an unknown key: the CLI's message, nothing changed.
    nlohmann::json j = nlohmann::json::parse(read_text_file(kScenario.toStdString()));
    j["model"] = kSrc + "/scenarios/models/llama-2-7b.json";
    j["cluster"] = kSrc + "/scenarios/clusters/dgx-h100-x1.json";
    j["plan"] = kSrc + "/scenarios/plans/llama-2-7b-8xh100-pp4.json";
    j["cluser"] = "x";
    const QString bad = tmp.file("bad.json");
    std::ofstream(bad.toStdString()) << j.dump();
    std::string cli;
    try {
        sim::load_scenario(bad.toStdString());
    } catch (const InputError& e) {
        cli = e.what();
    }
    CHECK(w.open_scenario(bad).toStdString() == cli);
    CHECK(w.document().file() == kScenario.toStdString());
    CHECK_FALSE(w.busy());

    // A field's error shows beside it, in the library's words, and clears when fixed.
    w.scenario_page()->edit_field(Part::plan, "plan.micro_batch", QStringLiteral("0"));
    const QLabel* err = w.scenario_page()->error_label("plan.micro_batch");
    REQUIRE(err);
    CHECK(err->text().contains("plan.micro_batch must be a positive integer (got 0)"));
    CHECK_FALSE(err->isHidden());
    w.scenario_page()->edit_field(Part::plan, "plan.micro_batch", QStringLiteral("1"));
    CHECK(err->isHidden());
    REQUIRE(w.wait_idle(120000));

    // A small plan search runs to the end.
    w.start_search(8, false);
    CHECK(w.busy());
    REQUIRE(w.wait_idle(120000));
    const int rows = w.explorer()->table_model()->rowCount();
    CHECK(rows > 5);
    CHECK(w.export_plans(tmp.file("plans.json")).isEmpty());
    CHECK(fs::exists(tmp.file("plans.json").toStdString()));

    // A what-if knob re-simulates; a bad value is refused beside the knob with the CLI's words.
    CHECK(w.set_knob(Knob::micro_batch, QStringLiteral("2")).isEmpty());
    REQUIRE(w.wait_idle(120000));
    CHECK(w.current()->plan.micro_batch == 2);
    CHECK(w.set_knob(Knob::tp, QStringLiteral("3"), false).contains("what-if: plan.tp"));

    // A long search (LLaMA-3 70B on 64 H100, the whole space) stops when cancelled.
    REQUIRE(w.open_specs(QStringLiteral("llama-3-70b"), QStringLiteral("dgx-h100-x8"), {}).isEmpty());
    w.start_search(512, true);
    QElapsedTimer t;
    t.start();
    while (t.elapsed() < 300) QApplication::processEvents(QEventLoop::AllEvents, 20);
    REQUIRE(w.busy());
    t.restart();
    w.cancel_search();
    REQUIRE(w.wait_idle(60000));
    WARN("the cancelled search ended " << t.elapsed() << " ms after the request");
    CHECK_FALSE(w.export_plans(tmp.file("partial.json")).isEmpty());
    CHECK_FALSE(fs::exists(tmp.file("partial.json").toStdString()));

    // Screenshots and chart exports, PNG and SVG, complete files only.
    REQUIRE(w.open_scenario(kScenario).isEmpty());
    REQUIRE(w.wait_idle(120000));
    for (const QString& view : MainWindow::view_names()) {
        REQUIRE(w.show_view(view));
        const QString png = tmp.file(view.toStdString() + ".png");
        REQUIRE(w.save_view_image(png).isEmpty());
        QImage img(png);
        INFO(view.toStdString() << ": " << img.width() << "x" << img.height() << " for a window of " << w.width() << "x" << w.height());
        CHECK(img.size() == w.size());
        if (view == "timeline" || view == "memory") CHECK(non_blank(img));
    }
    REQUIRE(w.show_view(QStringLiteral("timeline")));
    REQUIRE(w.export_chart(tmp.file("timeline.svg")).isEmpty());
    const std::string svg = read_text_file(tmp.file("timeline.svg").toStdString());
    CHECK(svg.find("<svg") != std::string::npos);
    CHECK(svg.find("stage 0") != std::string::npos);  // text stays text: labels are searchable
    CHECK_FALSE(w.export_chart(tmp.file("timeline.bmp")).isEmpty());
    CHECK_FALSE(fs::exists(tmp.file("timeline.bmp").toStdString()));
    w.show_view(QStringLiteral("scenario"));
    CHECK_FALSE(w.export_chart(tmp.file("none.png")).isEmpty());
}

TEST_CASE("smoke: a capacity sweep's point opens its plan; a validate report opens", "[gui][smoke]") {
    MainWindow w(Settings{});
    REQUIRE(w.open_specs(QStringLiteral("gpt2-124m"), QStringLiteral("dgx-h100-x1"), {}).isEmpty());
    CapacityRequest r;
    r.tokens = 1e9;
    r.deadline_s = 86400;
    r.gpus = {"H100-SXM5-80GB"};
    r.max_gpus = 16;
    r.global_batch = 64;
    w.start_capacity(r);
    REQUIRE(w.wait_idle(120000));
    REQUIRE(w.last_capacity());
    int feasible = -1;
    for (std::size_t i = 0; i < w.last_capacity()->points.size(); ++i)
        if (w.last_capacity()->points[i].feasible) feasible = static_cast<int>(i);
    REQUIRE(feasible >= 0);
    const auto& pt = w.last_capacity()->points[static_cast<std::size_t>(feasible)];
    REQUIRE(w.open_capacity_point(feasible));
    REQUIRE(w.wait_idle(120000));
    CHECK(w.document().scenario().cluster.gpu_count() == pt.cluster.gpu_count());
    REQUIRE(w.current());
    CHECK(w.current()->plan.dp == pt.best.plan.dp);
    CHECK(w.current()->plan.tp == pt.best.plan.tp);

    CHECK(w.open_report(QString::fromStdString(kSrc + "/tests/data/gui/validate/report.json")).isEmpty());
    CHECK(w.open_report(QString::fromStdString(kSrc + "/tests/data/gui/validate/nowhere.json")).contains("cannot be opened"));
}

TEST_CASE("smoke: closing the window during a search leaves no file behind", "[gui][smoke]") {
    TempDir tmp;
    const QString out = tmp.file("plans.json");
    {
        MainWindow w(Settings{});
        REQUIRE(w.open_specs(QStringLiteral("llama-3-70b"), QStringLiteral("dgx-h100-x8"), {}).isEmpty());
        w.export_plans_when_done(out);
        w.start_search(512, true);
        QElapsedTimer t;
        t.start();
        while (t.elapsed() < 300) QApplication::processEvents(QEventLoop::AllEvents, 20);
        REQUIRE(w.busy());
        w.close();
        CHECK_FALSE(w.busy());
        QApplication::processEvents();
    }
    QApplication::processEvents();
    CHECK_FALSE(fs::exists(out.toStdString()));
    CHECK_FALSE(fs::exists(out.toStdString() + ".tmp"));
    // The same export with the search allowed to finish does write (the test could fail).
    MainWindow w(Settings{});
    REQUIRE(w.open_scenario(kScenario).isEmpty());
    w.export_plans_when_done(out);
    w.start_search(8, false);
    REQUIRE(w.wait_idle(120000));
    CHECK(fs::exists(out.toStdString()));
}

// A QApplication on the offscreen platform for the run, made by a Catch2 listener so the test
// shares the project's precompiled Catch2 main.
struct QtWidgetsApp : Catch::TestEventListenerBase {
    using TestEventListenerBase::TestEventListenerBase;
    void testRunStarting(Catch::TestRunInfo const&) override {
        qputenv("QT_QPA_PLATFORM", "offscreen");
        app = std::make_unique<QApplication>(argc, argv);
    }
    void testRunEnded(Catch::TestRunStats const&) override { app.reset(); }
    int argc = 1;
    char name[10] = "gui_smoke";
    char* argv[2] = {name, nullptr};
    std::unique_ptr<QApplication> app;
};
CATCH_REGISTER_LISTENER(QtWidgetsApp)
