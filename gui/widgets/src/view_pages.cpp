#include "view_pages.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QTextBrowser>
#include <QVBoxLayout>

#include "strata/common/text.hpp"
#include "strata/lowering/memory.hpp"

namespace strata::gui {

namespace {

QPushButton* tool(const QString& text, const QString& tip) {
    auto* b = new QPushButton(text);
    b->setToolTip(tip);
    return b;
}

}  // namespace

TimelinePage::TimelinePage(QWidget* parent) : QWidget(parent), chart_(new TimelineWidget), title_(new QLabel), details_(new QTextBrowser) {
    title_->setWordWrap(true);
    auto* bar = new QHBoxLayout;
    auto* fit = tool(QStringLiteral("Fit"), QStringLiteral("The whole step (double-click, Home)"));
    auto* in = tool(QStringLiteral("Zoom in"), QStringLiteral("Wheel or +; down to a microsecond across the view"));
    auto* out = tool(QStringLiteral("Zoom out"), QStringLiteral("Wheel or -"));
    auto* critical = new QCheckBox(QStringLiteral("highlight the critical path"));
    critical->setChecked(true);
    rows_ = new QComboBox;
    rows_->addItems({QStringLiteral("all streams"), QStringLiteral("no pipeline send/recv"), QStringLiteral("compute only")});
    rows_->setToolTip(QStringLiteral("Which rows to show: a deep pipeline's send and receive streams take most of the rows"));
    bar->addWidget(title_, 1);
    bar->addWidget(rows_);
    bar->addWidget(critical);
    bar->addWidget(fit);
    bar->addWidget(in);
    bar->addWidget(out);
    connect(fit, &QPushButton::clicked, chart_, &TimelineWidget::fit);
    connect(in, &QPushButton::clicked, this, [this] {
        chart_->set_window(chart_->window().zoomed(0.5, (chart_->window().start_ns + chart_->window().end_ns) / 2, chart_->timeline() ? chart_->timeline()->end_ns() : 1));
    });
    connect(out, &QPushButton::clicked, this, [this] {
        chart_->set_window(chart_->window().zoomed(2.0, (chart_->window().start_ns + chart_->window().end_ns) / 2, chart_->timeline() ? chart_->timeline()->end_ns() : 1));
    });
    connect(critical, &QCheckBox::toggled, chart_, &TimelineWidget::set_highlight_critical);
    connect(rows_, &QComboBox::currentIndexChanged, this, [this](int i) { chart_->set_row_filter(static_cast<RowFilter>(i)); });
    details_->setMinimumWidth(300);
    details_->setMaximumWidth(480);
    connect(chart_, &TimelineWidget::spanHovered, this, [this](const QString& html) {
        details_->setHtml(html + QStringLiteral("<hr><pre style='font-size:7.5pt; white-space: pre-wrap'>") + summary_.toHtmlEscaped() + QStringLiteral("</pre>"));
    });
    auto* split = new QSplitter(Qt::Horizontal);
    split->addWidget(chart_);
    split->addWidget(details_);
    split->setStretchFactor(0, 4);
    split->setStretchFactor(1, 1);
    split->setSizes({1150, 420});
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(bar);
    layout->addWidget(split, 1);
}

void TimelinePage::set_timeline(std::shared_ptr<const Timeline> t, const QString& title, const QString& summary, bool keep_window) {
    chart_->set_timeline(std::move(t), keep_window);
    title_->setText(title);
    summary_ = summary;
    details_->setHtml(QStringLiteral("<i>Hover a bar for its instruction.</i><hr><pre style='font-size:7.5pt; white-space: pre-wrap'>") + summary.toHtmlEscaped() +
                      QStringLiteral("</pre>"));
}

void TimelinePage::set_row_filter(RowFilter f) { rows_->setCurrentIndex(static_cast<int>(f)); }

MemoryPage::MemoryPage(QWidget* parent)
    : QWidget(parent), title_(new QLabel), follow_(new QCheckBox(QStringLiteral("follow the timeline's zoom"))),
      over_time_(new MemoryTimeChart), breakdown_(new BreakdownChart) {
    auto* bar = new QHBoxLayout;
    bar->addWidget(title_, 1);
    bar->addWidget(follow_);
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(over_time_);
    split->addWidget(breakdown_);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(bar);
    layout->addWidget(split, 1);
}

bool MemoryPage::follows_timeline() const { return follow_->isChecked(); }

void MemoryPage::set_view(const MemoryView& v, const QString& title) {
    title_->setText(title);
    over_time_->set_data(v.tiers, v.step_ns);
    breakdown_->set_data(v.stages, v.gpu_capacity_bytes);
}

CapacityPage::CapacityPage(const std::vector<std::string>& gpu_ids, QWidget* parent)
    : QWidget(parent), tokens_b_(new QDoubleSpinBox), deadline_d_(new QDoubleSpinBox), budget_m_(new QDoubleSpinBox),
      min_gpus_(new QSpinBox), max_gpus_(new QSpinBox), gbs_(new QSpinBox), gpus_(new QListWidget),
      run_(new QPushButton(QStringLiteral("Run sweep"))), cancel_(new QPushButton(QStringLiteral("Cancel"))), progress_(new QProgressBar),
      verdict_(new QLabel), chart_(new CapacityChart) {
    tokens_b_->setRange(0.001, 1e6);
    tokens_b_->setDecimals(1);
    tokens_b_->setSuffix(QStringLiteral(" B tokens"));
    deadline_d_->setRange(0, 1e5);
    deadline_d_->setSuffix(QStringLiteral(" days (0: none)"));
    budget_m_->setRange(0, 1e6);
    budget_m_->setDecimals(2);
    budget_m_->setSuffix(QStringLiteral(" M USD (0: none)"));
    min_gpus_->setRange(1, 1 << 20);
    max_gpus_->setRange(1, 1 << 20);
    gbs_->setRange(1, 1 << 20);
    for (const auto& g : gpu_ids) {
        auto* item = new QListWidgetItem(QString::fromStdString(g), gpus_);
        item->setFlags(item->flags() | Qt::ItemIsUserCheckable);
        item->setCheckState(Qt::Unchecked);
    }
    gpus_->setMaximumHeight(110);
    auto* form = new QFormLayout;
    form->addRow(QStringLiteral("train"), tokens_b_);
    form->addRow(QStringLiteral("deadline"), deadline_d_);
    form->addRow(QStringLiteral("budget"), budget_m_);
    form->addRow(QStringLiteral("GPUs from"), min_gpus_);
    form->addRow(QStringLiteral("GPUs up to"), max_gpus_);
    form->addRow(QStringLiteral("global batch"), gbs_);
    auto* left = new QVBoxLayout;
    left->addLayout(form);
    left->addWidget(new QLabel(QStringLiteral("GPU types (hwdb)")));
    left->addWidget(gpus_);
    auto* buttons = new QHBoxLayout;
    buttons->addWidget(run_);
    buttons->addWidget(cancel_);
    left->addLayout(buttons);
    left->addWidget(progress_);
    verdict_->setWordWrap(true);
    left->addWidget(verdict_);
    left->addStretch();
    auto* host = new QWidget;
    host->setLayout(left);
    host->setMaximumWidth(330);
    auto* layout = new QHBoxLayout(this);
    layout->addWidget(host);
    layout->addWidget(chart_, 1);
    progress_->setRange(0, 1000);
    cancel_->setEnabled(false);
    connect(run_, &QPushButton::clicked, this, &CapacityPage::runRequested);
    connect(cancel_, &QPushButton::clicked, this, &CapacityPage::cancelRequested);
    connect(chart_, &CapacityChart::pointActivated, this, &CapacityPage::pointActivated);
    set_request(CapacityRequest{});
}

CapacityRequest CapacityPage::request() const {
    CapacityRequest r;
    r.tokens = tokens_b_->value() * 1e9;
    r.deadline_s = deadline_d_->value() * 86400;
    r.budget_usd = budget_m_->value() * 1e6;
    r.min_gpus = min_gpus_->value();
    r.max_gpus = max_gpus_->value();
    r.global_batch = gbs_->value();
    r.gpus.clear();
    for (int i = 0; i < gpus_->count(); ++i)
        if (gpus_->item(i)->checkState() == Qt::Checked) r.gpus.push_back(gpus_->item(i)->text().toStdString());
    return r;
}

void CapacityPage::set_request(const CapacityRequest& r) {
    tokens_b_->setValue(r.tokens / 1e9);
    deadline_d_->setValue(r.deadline_s / 86400);
    budget_m_->setValue(r.budget_usd / 1e6);
    min_gpus_->setValue(r.min_gpus);
    max_gpus_->setValue(r.max_gpus);
    gbs_->setValue(r.global_batch);
    for (int i = 0; i < gpus_->count(); ++i) {
        const std::string id = gpus_->item(i)->text().toStdString();
        const bool on = std::find(r.gpus.begin(), r.gpus.end(), id) != r.gpus.end();
        gpus_->item(i)->setCheckState(on ? Qt::Checked : Qt::Unchecked);
    }
}

void CapacityPage::set_running(bool on) {
    run_->setEnabled(!on);
    cancel_->setEnabled(on);
    if (on) progress_->setValue(0), verdict_->setText(QStringLiteral("sweeping..."));
}

void CapacityPage::set_progress(double fraction, const QString& phase) {
    progress_->setValue(static_cast<int>(fraction * 1000));
    progress_->setFormat(phase + QStringLiteral(" %p%"));
}

void CapacityPage::set_result(const planner::CapacityResult& r, const CapacityRequest& req, bool cancelled) {
    chart_->set_result(r, req.deadline_s, req.budget_usd);
    auto line = [&](const char* what, int i) {
        if (i < 0) return QStringLiteral("%1: none meets the target within %2 GPUs").arg(QString::fromLatin1(what)).arg(req.max_gpus);
        return QStringLiteral("%1: %2").arg(QString::fromLatin1(what), QString::fromStdString(describe_point(r.points[static_cast<std::size_t>(i)])));
    };
    verdict_->setText((cancelled ? QStringLiteral("cancelled: the points swept so far\n") : QString()) + line("fewest GPUs", r.fewest_gpus) +
                      "\n" + line("cheapest", r.cheapest));
    progress_->setFormat(cancelled ? QStringLiteral("cancelled") : QStringLiteral("done"));
    if (!cancelled) progress_->setValue(1000);
}

ValidationPage::ValidationPage(QWidget* parent)
    : QWidget(parent), summary_(new QLabel(QStringLiteral("Open a report written by strata validate (schema strata.validate/1)"))),
      table_model_(new ValidationTableModel(this)), table_(new QTableView), timeline_(new TimelineWidget), memory_(new MemoryTimeChart) {
    auto* open = new QPushButton(QStringLiteral("Open report..."));
    connect(open, &QPushButton::clicked, this, &ValidationPage::openRequested);
    auto* bar = new QHBoxLayout;
    summary_->setWordWrap(true);
    bar->addWidget(summary_, 1);
    bar->addWidget(open);
    table_->setModel(table_model_);
    table_->verticalHeader()->hide();
    table_->horizontalHeader()->setStretchLastSection(true);
    table_->setMinimumWidth(360);
    timeline_->set_highlight_critical(false);  // a trace carries no critical path
    auto* right = new QSplitter(Qt::Vertical);
    right->addWidget(timeline_);
    right->addWidget(memory_);
    right->setStretchFactor(0, 3);
    right->setStretchFactor(1, 2);
    auto* split = new QSplitter(Qt::Horizontal);
    split->addWidget(table_);
    split->addWidget(right);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 3);
    split->setSizes({470, 1130});
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(bar);
    layout->addWidget(split, 1);
    connect(timeline_, &TimelineWidget::windowChanged, this, [this] { memory_->set_window(timeline_->window()); });
}

void ValidationPage::set_validation(const Validation& v) {
    const auto& r = v.report;
    summary_->setText(QStringLiteral("<b>%1</b> · %2 backend on %3 · %4 steps · step time predicted %5, measured %6 (%7 %8)")
                          .arg(QString::fromStdString(r.scenario).toHtmlEscaped(), QString::fromStdString(r.backend),
                               QString::fromStdString(r.device).toHtmlEscaped())
                          .arg(r.steps)
                          .arg(QString::fromStdString(human_seconds(r.step_time_s.predicted)), QString::fromStdString(human_seconds(r.step_time_s.measured)))
                          .arg(r.step_time_s.error_pct, 0, 'f', 1)
                          .arg(QStringLiteral("%")) +
                      (r.calibration.empty() ? QString() : QStringLiteral(" · calibration ") + QString::fromStdString(r.calibration).toHtmlEscaped()));
    table_model_->set_report(r);
    table_->resizeColumnsToContents();
    timeline_->set_timeline(std::make_shared<const Timeline>(v.overlay));
    memory_->set_data(v.predicted_memory, std::max(v.predicted.end_ns(), v.measured.end_ns()), v.measured_memory);
    // The engine's GPU pool starts with the CUDA context and NCCL buffers (lowering/memory.hpp); a
    // CPU rank has neither, and strata validate's table leaves them out. The curves are the traces'.
    memory_->set_note(r.backend == "cpu" ? QStringLiteral("predicted GPU curves include the %1 CUDA-context and NCCL reserve a CPU rank "
                                                          "does not have (the table leaves it out)")
                                               .arg(QString::fromStdString(human_bytes(sim::kFrameworkReserveBytes)))
                                         : QString());
}

}  // namespace strata::gui
