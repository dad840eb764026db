#include "strata/gui/widgets/main_window.hpp"

#include <QApplication>
#include <QCloseEvent>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QStatusBar>
#include <QTabWidget>

#include "explorer_page.hpp"
#include "scenario_page.hpp"
#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/common/text.hpp"
#include "strata/gui/models/job.hpp"
#include "strata/gui/models/memory_view.hpp"
#include "strata/gui/models/scenario_document.hpp"
#include "strata/gui/models/validation.hpp"
#include "strata/planner/search.hpp"
#include "view_pages.hpp"

namespace strata::gui {

namespace {

QString plan_label(const sim::PlanSpec& p) {
    return QStringLiteral("tp %1 pp %2 dp %3 cp %4 ep %5 vpp %6 mb %7 · %8 · ZeRO-%9 · recompute %10 · offload %11")
        .arg(p.tp).arg(p.pp).arg(p.dp).arg(p.cp).arg(p.ep).arg(p.vpp).arg(p.micro_batch)
        .arg(QString::fromLatin1(sim::to_string(p.schedule))).arg(p.zero_stage)
        .arg(QString::fromLatin1(sim::to_string(p.recompute)), QString::fromStdString(offload_label(p)));
}

QString q(const std::string& s) { return QString::fromStdString(s); }

}  // namespace

MainWindow::MainWindow(const Settings& settings, QWidget* parent)
    : QMainWindow(parent), settings_(settings), hw_(std::make_unique<Hardware>(settings)),
      doc_(std::make_unique<ScenarioDocument>(settings.scenarios_dir)) {
    sim_job_ = new Job(this);
    search_job_ = new Job(this);
    capacity_job_ = new Job(this);
    tabs_ = new QTabWidget;
    scenario_page_ = new ScenarioPage(doc_.get(), settings.scenarios_dir);
    explorer_ = new ExplorerPage;
    timeline_page_ = new TimelinePage;
    memory_page_ = new MemoryPage;
    capacity_page_ = new CapacityPage(hw_->gpu_ids());
    validation_page_ = new ValidationPage;
    tabs_->addTab(scenario_page_, QStringLiteral("Scenario"));
    tabs_->addTab(explorer_, QStringLiteral("Plans"));
    tabs_->addTab(timeline_page_, QStringLiteral("Timeline"));
    tabs_->addTab(memory_page_, QStringLiteral("Memory"));
    tabs_->addTab(capacity_page_, QStringLiteral("Capacity"));
    tabs_->addTab(validation_page_, QStringLiteral("Validation"));
    setCentralWidget(tabs_);
    build_menus();
    statusBar()->showMessage(QStringLiteral("hardware database %1").arg(q(hw_->db_path())));
    resize(1500, 950);

    connect(scenario_page_, &ScenarioPage::documentChanged, this, &MainWindow::document_changed);
    connect(scenario_page_, &ScenarioPage::message, this, [this](const QString& m) { refuse(QStringLiteral("Scenario"), m); });
    connect(explorer_, &ExplorerPage::searchRequested, this, &MainWindow::start_search);
    connect(explorer_, &ExplorerPage::cancelRequested, this, &MainWindow::cancel_search);
    connect(explorer_, &ExplorerPage::planActivated, this, &MainWindow::activate_plan);
    connect(explorer_, &ExplorerPage::knobEdited, this, [this](Knob k, const QString& v, bool keep) { set_knob(k, v, keep); });
    connect(explorer_, &ExplorerPage::whatIfReset, this, [this] {
        if (have_base_) simulate(base_plan_, true);
    });
    connect(explorer_, &ExplorerPage::whatIfApplied, this, [this] {
        if (!have_base_) return;
        doc_->set_plan(whatif_plan_);
        scenario_page_->reload();
        document_changed();
    });
    connect(explorer_, &ExplorerPage::exportRequested, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export plans"), QStringLiteral("plans.json"), QStringLiteral("JSON (*.json)"));
        if (!path.isEmpty()) report(export_plans(path), true);
    });
    connect(search_job_, &Job::progressChanged, explorer_, &ExplorerPage::set_progress);
    connect(capacity_job_, &Job::progressChanged, capacity_page_, &CapacityPage::set_progress);
    connect(timeline_page_->chart(), &TimelineWidget::windowChanged, this, [this] {
        if (memory_page_->follows_timeline()) memory_page_->over_time()->set_window(timeline_page_->chart()->window());
    });
    connect(capacity_page_, &CapacityPage::runRequested, this, [this] { start_capacity(capacity_page_->request()); });
    connect(capacity_page_, &CapacityPage::cancelRequested, this, &MainWindow::cancel_capacity);
    connect(capacity_page_, &CapacityPage::pointActivated, this, &MainWindow::open_capacity_point);
    connect(validation_page_, &ValidationPage::openRequested, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("strata validate report"), {}, QStringLiteral("JSON (*.json)"));
        if (!path.isEmpty()) open_report(path);
    });
    update_title();
}

MainWindow::~MainWindow() = default;

void MainWindow::build_menus() {
    QMenu* file = menuBar()->addMenu(QStringLiteral("&File"));
    file->addAction(QStringLiteral("&Open scenario..."), QKeySequence::Open, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Open scenario"), {}, QStringLiteral("JSON (*.json)"));
        if (!path.isEmpty()) open_scenario(path);
    });
    file->addAction(QStringLiteral("&Save scenario"), QKeySequence::Save, this, [this] {
        const QString path = doc_->file().empty() ? QFileDialog::getSaveFileName(this, QStringLiteral("Save scenario"), {}, QStringLiteral("JSON (*.json)"))
                                                   : q(doc_->file());
        if (!path.isEmpty()) report(save_scenario(path), true);
    });
    file->addAction(QStringLiteral("Save scenario &as..."), QKeySequence::SaveAs, this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save scenario as"), {}, QStringLiteral("JSON (*.json)"));
        if (!path.isEmpty()) report(save_scenario(path), true);
    });
    file->addAction(QStringLiteral("Open &validation report..."), this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("strata validate report"), {}, QStringLiteral("JSON (*.json)"));
        if (!path.isEmpty()) open_report(path);
    });
    file->addAction(QStringLiteral("&Export this view as PNG or SVG..."), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export view"), QStringLiteral("view.png"),
                                                          QStringLiteral("Images (*.png *.svg)"));
        if (!path.isEmpty()) report(save_view_image(path), true);
    });
    file->addAction(QStringLiteral("Export this view's &chart as PNG or SVG..."), this, [this] {
        const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export chart"), QStringLiteral("chart.svg"),
                                                          QStringLiteral("Images (*.png *.svg)"));
        if (!path.isEmpty()) report(export_chart(path), true);
    });
    file->addSeparator();
    file->addAction(QStringLiteral("&Quit"), QKeySequence::Quit, this, &QWidget::close);
    QMenu* help = menuBar()->addMenu(QStringLiteral("&Help"));
    help->addAction(QStringLiteral("Timeline keys"), this, [this] {
        QMessageBox::information(this, QStringLiteral("Timeline"),
                                 QStringLiteral("Wheel: zoom around the cursor · drag: pan · shift+wheel: scroll rows · double-click or "
                                                "Home: fit · +/-: zoom · arrows: pan and scroll · right-click any chart: export PNG/SVG"));
    });
}

void MainWindow::report(const QString& message, bool error) {
    if (message.isEmpty()) return;
    if (error) last_error_ = message;
    statusBar()->setStyleSheet(error ? QStringLiteral("color: #b41e1e;") : QString());
    statusBar()->showMessage(message);
}

void MainWindow::refuse(const QString& title, const QString& message) {
    report(message, true);
    // A person who opened a file is told at once; a headless run or a test (no window shown) is not
    // held up by a dialog: it reads the returned message.
    if (isVisible()) QMessageBox::warning(this, title, message);
}

void MainWindow::update_title() {
    setWindowTitle(QStringLiteral("strata-gui · %1%2").arg(q(doc_->display_name()), doc_->modified() ? QStringLiteral(" *") : QString()));
}

QString MainWindow::open_scenario(const QString& path) {
    std::string file;
    try {
        file = locate(settings_.scenarios_dir, "", path.toStdString(), "--scenario");  // a file, or a bundled name
    } catch (const InputError& e) {
        refuse(QStringLiteral("Open scenario"), q(e.what()));
        return q(e.what());
    }
    const std::string err = doc_->open(file);
    if (!err.empty()) {
        refuse(QStringLiteral("Open scenario"), q(err));
        return q(err);
    }
    scenario_page_->reload();
    document_changed();
    return {};
}

QString MainWindow::open_specs(const QString& model, const QString& cluster, const QString& plan) {
    // Applied on a copy, so a bad name leaves the document as it was.
    ScenarioDocument next(settings_.scenarios_dir);
    for (auto [part, name] : {std::pair{Part::model, model}, std::pair{Part::cluster, cluster}, std::pair{Part::plan, plan}}) {
        if (name.isEmpty()) continue;
        const std::string n = name.toStdString();
        const std::string err = part == Part::model ? next.set_model(n) : part == Part::cluster ? next.set_cluster(n) : next.set_plan(n);
        if (!err.empty()) {
            report(q(err), true);
            return q(err);
        }
    }
    *doc_ = std::move(next);
    scenario_page_->reload();
    document_changed();
    return {};
}

QString MainWindow::save_scenario(const QString& path) {
    const QString err = q(doc_->save(path.toStdString()));
    if (err.isEmpty()) report(QStringLiteral("saved %1").arg(path), false);
    scenario_page_->reload();
    update_title();
    return err;
}

void MainWindow::document_changed() {
    update_title();
    if (doc_->valid()) explorer_->set_global_batch(doc_->scenario().plan->global_batch);
    resimulate();
}

void MainWindow::resimulate() {
    if (doc_->valid()) simulate(*doc_->scenario().plan, true);
}

void MainWindow::simulate(const sim::PlanSpec& plan, bool as_base) {
    const sim::Scenario s = doc_->scenario();
    hwdb::HardwareView view;
    try {
        view = hw_->view(s.cluster, doc_->display_name());
    } catch (const InputError& e) {
        return report(q(e.what()), true);
    }
    const sim::Calibration cal = hw_->calibration(view);
    const std::string file = as_base ? doc_->display_name() : "what-if";
    auto result = std::make_shared<Snapshot>();
    auto clock = std::make_shared<QElapsedTimer>();
    clock->start();
    sim_job_->start([=](const JobControl&) { *result = simulate_snapshot(s.model, s.cluster, plan, view, cal, file); },
                    [=, this](bool cancelled, const QString& error) {
                        if (!error.isEmpty()) return report(error, true);
                        if (cancelled) return;
                        show_snapshot(*result, as_base);
                        if (!as_base)
                            explorer_->set_whatif_figures(figures_of(*result->out),
                                                          QStringLiteral("re-simulated and redrawn in %1 ms (simulation %2 ms)")
                                                              .arg(clock->elapsed())
                                                              .arg(result->wall_s * 1e3, 0, 'f', 0));
                    });
    statusBar()->showMessage(QStringLiteral("simulating %1...").arg(plan_label(plan)));
}

void MainWindow::show_snapshot(Snapshot s, bool as_base) {
    current_ = std::move(s);
    const sim::SimOutput& out = *current_.out;
    const QString title = QStringLiteral("%1 on %2 (%3 x %4) · %5 · step %6%7")
                              .arg(q(current_.model.name), q(current_.cluster.name))
                              .arg(current_.cluster.gpu_count())
                              .arg(q(current_.cluster.gpu), plan_label(current_.plan), q(human_seconds(out.step_time_s)),
                                   out.result.oom ? QStringLiteral(" · OOM") : QString());
    // The summary strata simulate prints, with its calibration line.
    const std::string summary = sim::summary_text(out) + "calibration        " + hw_->calibration_note(hw_->view(current_.cluster, "")) + "\n";
    timeline_page_->set_timeline(std::make_shared<const Timeline>(Timeline::from_simulation(current_.out)), title, q(summary), !as_base);
    memory_page_->set_view(memory_view(out), title);
    if (as_base) {
        base_plan_ = whatif_plan_ = current_.plan;
        have_base_ = true;
        explorer_->set_base(current_.plan, figures_of(out), QStringLiteral("<b>Base:</b> ") + title.toHtmlEscaped());
    }
    report(QStringLiteral("simulated in %1 ms: %2").arg(current_.wall_s * 1e3, 0, 'f', 0).arg(title), false);
}

QString MainWindow::set_knob(Knob k, const QString& value, bool keep_gpus) {
    if (!have_base_) return QStringLiteral("open a scenario with a plan first");
    const sim::Scenario& s = doc_->scenario();
    try {
        const WhatIfEdit e = apply_knob(s.model, s.cluster, whatif_plan_, k, value.toStdString(), keep_gpus);
        whatif_plan_ = e.plan;
        explorer_->set_whatif_plan(e.plan, q(e.note));
        simulate(e.plan, false);
        return {};
    } catch (const InputError& e) {
        explorer_->set_knob_error(k, q(e.what()));
        return q(e.what());
    }
}

void MainWindow::start_search(int global_batch, bool offload) {
    const sim::Scenario s = doc_->scenario();
    if (s.model.layers == 0) return report(QStringLiteral("open a scenario first"), true);
    hwdb::HardwareView view;
    try {
        view = hw_->view(s.cluster, doc_->display_name());
    } catch (const InputError& e) {
        return report(q(e.what()), true);
    }
    planner::SearchOptions o;
    o.space.global_batch = global_batch;
    o.space.search_offload = offload;
    o.space.expandable_segments = s.plan && s.plan->expandable_segments;
    o.top_k = 50;  // the table keeps 4 x this many estimated plans
    o.calibration = hw_->calibration(view);
    last_search_.reset();
    explorer_->set_searching(true);
    auto result = std::make_shared<planner::SearchResult>();
    search_job_->start(
        [=](const JobControl& c) mutable {
            o.cancel = c.cancel;
            o.progress = [&c](double f, const char* phase) { c.progress(f, phase); };
            *result = planner::search_plans(s.model, s.cluster, view, o);
        },
        [=, this](bool cancelled, const QString& error) {
            explorer_->set_searching(false);
            if (!error.isEmpty()) return report(error, true);
            const auto& r = *result;
            explorer_->set_results(r, QStringLiteral("%1 considered · %2 estimated · %3 simulated (%4 OOM)%5")
                                          .arg(r.space.considered).arg(r.estimated).arg(r.simulated).arg(r.simulated_oom)
                                          .arg(cancelled || r.cancelled ? QStringLiteral(" · cancelled: partial") : QString()));
            if (!cancelled && !r.cancelled) {
                last_search_ = result;
                searched_model_ = s.model;
                searched_cluster_ = s.cluster;
                if (!auto_export_.isEmpty()) report(export_plans(auto_export_), true);
            }
            report(cancelled || r.cancelled ? QStringLiteral("search cancelled") : QStringLiteral("search done"), false);
        });
}

void MainWindow::cancel_search() { search_job_->cancel(); }

QString MainWindow::export_plans(const QString& path) {
    if (!last_search_ || search_job_->running()) return QStringLiteral("no complete search to export");
    try {
        write_file_atomic(path.toStdString(), planner::search_to_json(searched_model_, searched_cluster_, *last_search_));
    } catch (const std::exception& e) {
        return q(e.what());
    }
    return {};
}

QString MainWindow::edit_field(const QString& path, const QString& value) {
    const std::string p = path.toStdString();
    const Part part = p.rfind("model.", 0) == 0 ? Part::model : p.rfind("cluster.", 0) == 0 ? Part::cluster : Part::plan;
    scenario_page_->edit_field(part, p, value);
    return q(doc_->problem_at(p));
}

bool MainWindow::open_ranked_plan(int n) {
    if (n < 0 || n >= explorer_->table_model()->rowCount()) return false;
    activate_plan(n);
    return true;
}

void MainWindow::activate_plan(int row) {
    if (row < 0 || row >= explorer_->table_model()->rowCount()) return;
    doc_->set_plan(explorer_->table_model()->plan(row).plan);
    scenario_page_->reload();
    document_changed();
}

void MainWindow::start_capacity(const CapacityRequest& req) {
    CapacityRequest r = req;
    r.model = doc_->scenario().model;
    if (r.model.layers == 0) return report(QStringLiteral("open a scenario first: the sweep trains its model"), true);
    std::vector<planner::ClusterOption> options;
    try {
        options = capacity_clusters(*hw_, settings_.scenarios_dir, r.gpus);
    } catch (const InputError& e) {
        return report(q(e.what()), true);
    }
    if (options.empty()) return report(QStringLiteral("pick at least one GPU type"), true);
    capacity_page_->set_request(r);
    capacity_page_->set_running(true);
    auto result = std::make_shared<planner::CapacityResult>();
    capacity_job_->start(
        [=](const JobControl& c) {
            planner::CapacityOptions o = capacity_options(r);
            o.search.cancel = c.cancel;
            o.progress = [&c](int done, int total) { c.progress(static_cast<double>(done) / std::max(1, total), "cluster sizes"); };
            *result = planner::plan_capacity(r.model, options, o);
        },
        [=, this](bool cancelled, const QString& error) {
            capacity_page_->set_running(false);
            if (!error.isEmpty()) return report(error, true);
            last_capacity_ = result;
            capacity_page_->set_result(*result, r, cancelled);
        });
}

void MainWindow::cancel_capacity() { capacity_job_->cancel(); }

bool MainWindow::open_capacity_point(int index) {
    if (!last_capacity_ || index < 0 || index >= static_cast<int>(last_capacity_->points.size())) return false;
    const auto& pt = last_capacity_->points[static_cast<std::size_t>(index)];
    if (!pt.feasible) {
        report(q(describe_point(pt)), true);
        return false;
    }
    doc_->set_cluster(pt.cluster);
    doc_->set_plan(pt.best.plan);
    scenario_page_->reload();
    document_changed();
    show_view(QStringLiteral("plans"));
    return true;
}

QString MainWindow::open_report(const QString& path) {
    try {
        validation_page_->set_validation(load_validation(path.toStdString()));
    } catch (const InputError& e) {
        refuse(QStringLiteral("Open validation report"), q(e.what()));
        return q(e.what());
    } catch (const RuntimeError& e) {
        refuse(QStringLiteral("Open validation report"), q(e.what()));
        return q(e.what());
    }
    show_view(QStringLiteral("validation"));
    return {};
}

bool MainWindow::busy() const { return sim_job_->running() || search_job_->running() || capacity_job_->running(); }

bool MainWindow::wait_idle(int timeout_ms) {
    QElapsedTimer t;
    t.start();
    while (busy() && t.elapsed() < timeout_ms) QApplication::processEvents(QEventLoop::AllEvents, 20);
    QApplication::processEvents();
    return !busy();
}

QStringList MainWindow::view_names() {
    return {QStringLiteral("scenario"), QStringLiteral("plans"), QStringLiteral("timeline"),
            QStringLiteral("memory"), QStringLiteral("capacity"), QStringLiteral("validation")};
}

bool MainWindow::show_view(const QString& name) {
    const int i = static_cast<int>(view_names().indexOf(name));
    if (i < 0) return false;
    tabs_->setCurrentIndex(i);
    return true;
}

QString MainWindow::save_view_image(const QString& path) { return save_widget_image(this, path); }

QString MainWindow::export_chart(const QString& path) {
    QWidget* page = tabs_->currentWidget();
    ChartWidget* chart = page == timeline_page_     ? static_cast<ChartWidget*>(timeline_page_->chart())
                         : page == memory_page_     ? static_cast<ChartWidget*>(memory_page_->over_time())
                         : page == capacity_page_   ? static_cast<ChartWidget*>(capacity_page_->chart())
                         : page == validation_page_ ? static_cast<ChartWidget*>(validation_page_->timeline())
                                                    : nullptr;
    if (!chart) return QStringLiteral("this view has no chart: use File > Export this view");
    return chart->export_to(path);
}

void MainWindow::set_timeline_window(std::int64_t start_ns, std::int64_t end_ns) {
    timeline_page_->chart()->set_window(TimeWindow{start_ns, end_ns});
}

void MainWindow::set_timeline_rows(RowFilter f) { timeline_page_->set_row_filter(f); }

void MainWindow::closeEvent(QCloseEvent* e) {
    // Closing mid-search: stop the work and wait for it; its results, and any file they were
    // meant for, are dropped.
    for (Job* j : {sim_job_, search_job_, capacity_job_}) j->cancel();
    for (Job* j : {sim_job_, search_job_, capacity_job_}) j->wait();
    e->accept();
}

}  // namespace strata::gui
