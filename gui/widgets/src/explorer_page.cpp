#include "explorer_page.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QStyledItemDelegate>
#include <QTableView>
#include <QTableWidget>
#include <QVBoxLayout>

#include "strata/gui/models/scenario_document.hpp"

namespace strata::gui {

namespace {

/// Estimates in italics and grey, OOM in red: the table's roles say which rows are which.
class PlanDelegate : public QStyledItemDelegate {
public:
    using QStyledItemDelegate::QStyledItemDelegate;
    void initStyleOption(QStyleOptionViewItem* o, const QModelIndex& index) const override {
        QStyledItemDelegate::initStyleOption(o, index);
        if (index.data(PlanTableModel::EstimateRole).toBool()) {
            o->font.setItalic(true);
            o->palette.setColor(QPalette::Text, QColor(110, 110, 110));
        }
        if (index.column() == PlanTableModel::Fits && index.data(PlanTableModel::OomRole).toBool())
            o->palette.setColor(QPalette::Text, QColor(190, 30, 30));
    }
};

}  // namespace

ExplorerPage::ExplorerPage(QWidget* parent) : QWidget(parent), model_(new PlanTableModel(this)), filter_(new PlanFilterModel(this)) {
    filter_->setSourceModel(model_);
    auto* controls = new QHBoxLayout;
    gbs_ = new QSpinBox;
    gbs_->setRange(1, 1 << 20);
    gbs_->setValue(512);
    offload_search_ = new QCheckBox(QStringLiteral("try CPU/SSD offload"));
    offload_search_->setChecked(true);
    search_ = new QPushButton(QStringLiteral("Search plans"));
    cancel_ = new QPushButton(QStringLiteral("Cancel"));
    cancel_->setEnabled(false);
    export_ = new QPushButton(QStringLiteral("Export plans JSON..."));
    export_->setEnabled(false);
    progress_ = new QProgressBar;
    progress_->setRange(0, 1000);
    progress_->setTextVisible(true);
    progress_->setFormat(QStringLiteral("idle"));
    controls->addWidget(new QLabel(QStringLiteral("global batch")));
    controls->addWidget(gbs_);
    controls->addWidget(offload_search_);
    controls->addWidget(search_);
    controls->addWidget(cancel_);
    controls->addWidget(progress_, 1);
    controls->addWidget(export_);
    connect(search_, &QPushButton::clicked, this, [this] { emit searchRequested(gbs_->value(), offload_search_->isChecked()); });
    connect(cancel_, &QPushButton::clicked, this, &ExplorerPage::cancelRequested);
    connect(export_, &QPushButton::clicked, this, &ExplorerPage::exportRequested);

    auto* filters = new QHBoxLayout;
    fits_only_ = new QCheckBox(QStringLiteral("fits only"));
    zero_ = new QComboBox;
    zero_->addItems({QStringLiteral("any"), QStringLiteral("0"), QStringLiteral("1"), QStringLiteral("2"), QStringLiteral("3")});
    offload_ = new QComboBox;
    offload_->addItems({QStringLiteral("any"), QStringLiteral("none"), QStringLiteral("some")});
    schedule_ = new QComboBox;
    schedule_->addItem(QStringLiteral("any"));
    for (const auto& s : accepted_choices(Part::plan, "schedule")) schedule_->addItem(QString::fromStdString(s));
    filters->addWidget(new QLabel(QStringLiteral("Filter:")));
    filters->addWidget(fits_only_);
    filters->addWidget(new QLabel(QStringLiteral("ZeRO")));
    filters->addWidget(zero_);
    filters->addWidget(new QLabel(QStringLiteral("offload")));
    filters->addWidget(offload_);
    filters->addWidget(new QLabel(QStringLiteral("schedule")));
    filters->addWidget(schedule_);
    summary_ = new QLabel;
    filters->addWidget(summary_, 1);
    connect(fits_only_, &QCheckBox::toggled, this, &ExplorerPage::apply_filter);
    for (QComboBox* c : {zero_, offload_, schedule_}) connect(c, &QComboBox::currentIndexChanged, this, &ExplorerPage::apply_filter);

    table_ = new QTableView;
    table_->setModel(filter_);
    table_->setSortingEnabled(true);
    table_->sortByColumn(PlanTableModel::Rank, Qt::AscendingOrder);
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::SingleSelection);
    table_->setItemDelegate(new PlanDelegate(table_));
    table_->verticalHeader()->hide();
    table_->verticalHeader()->setDefaultSectionSize(20);
    table_->horizontalHeader()->setStretchLastSection(true);
    table_->setToolTip(QStringLiteral("Double-click a plan to open it: it becomes the scenario's plan and the what-if's base"));
    connect(table_, &QTableView::doubleClicked, this,
            [this](const QModelIndex& i) { emit planActivated(filter_->mapToSource(i).row()); });

    auto* split = new QSplitter(Qt::Horizontal);
    split->addWidget(table_);
    split->addWidget(build_whatif());
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 1);
    split->setSizes({1210, 370});
    auto* hint = new QLabel(QStringLiteral("Plain rows: simulated by the engine, ranked by simulated throughput · italic grey: the fast "
                                           "estimate only · click a header to sort · double-click a plan to open it (it becomes the "
                                           "scenario's plan and the what-if's base)"));
    hint->setStyleSheet(QStringLiteral("color: #555;"));
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(controls);
    layout->addLayout(filters);
    layout->addWidget(split, 1);
    layout->addWidget(hint);
}

QWidget* ExplorerPage::build_whatif() {
    auto* box = new QGroupBox(QStringLiteral("What if"));
    box->setMaximumWidth(390);
    auto* v = new QVBoxLayout(box);
    base_title_ = new QLabel(QStringLiteral("Open a scenario or double-click a plan"));
    base_title_->setWordWrap(true);
    v->addWidget(base_title_);
    auto* grid = new QGridLayout;
    int row = 0;
    for (const KnobInfo& k : whatif_knobs()) {
        QWidget* edit = nullptr;
        if (k.integer) {
            auto* s = new QSpinBox;
            s->setRange(0, 1 << 20);
            s->setKeyboardTracking(false);  // one re-simulation per value, not per keystroke
            connect(s, &QSpinBox::valueChanged, this, [this, knob = k.knob](int value) {
                if (!updating_) emit knobEdited(knob, QString::number(value), keep_gpus_->isChecked());
            });
            edit = s;
        } else {
            auto* c = new QComboBox;
            for (const auto& ch : k.choices) c->addItem(QString::fromStdString(ch));
            connect(c, &QComboBox::textActivated, this, [this, knob = k.knob](const QString& t) {
                if (!updating_) emit knobEdited(knob, t, keep_gpus_->isChecked());
            });
            edit = c;
        }
        edit->setObjectName(QString::fromStdString("whatif." + k.key));
        auto* err = new QLabel;
        err->setWordWrap(true);
        err->setStyleSheet(QStringLiteral("color: #b41e1e;"));
        err->setVisible(false);
        grid->addWidget(new QLabel(QString::fromStdString(k.label)), row, 0);
        grid->addWidget(edit, row, 1);
        grid->addWidget(err, row + 1, 0, 1, 2);
        knob_edit_[k.knob] = edit;
        knob_error_[k.knob] = err;
        row += 2;
    }
    v->addLayout(grid);
    keep_gpus_ = new QCheckBox(QStringLiteral("keep the GPU count (dp follows tp, pp, cp)"));
    keep_gpus_->setChecked(true);
    v->addWidget(keep_gpus_);
    auto* buttons = new QHBoxLayout;
    auto* reset = new QPushButton(QStringLiteral("Back to base"));
    auto* apply = new QPushButton(QStringLiteral("Make it the scenario's plan"));
    buttons->addWidget(reset);
    buttons->addWidget(apply);
    v->addLayout(buttons);
    connect(reset, &QPushButton::clicked, this, &ExplorerPage::whatIfReset);
    connect(apply, &QPushButton::clicked, this, &ExplorerPage::whatIfApplied);
    delta_ = new QTableWidget(5, 4);
    delta_->setHorizontalHeaderLabels({QStringLiteral("figure"), QStringLiteral("base"), QStringLiteral("what-if"), QStringLiteral("change")});
    delta_->verticalHeader()->hide();
    delta_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    delta_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    delta_->setMinimumHeight(6 * 22);
    v->addWidget(delta_);
    whatif_status_ = new QLabel;
    whatif_status_->setWordWrap(true);
    v->addWidget(whatif_status_);
    v->addStretch();
    return box;
}

void ExplorerPage::apply_filter() {
    PlanFilter f;
    f.fits_only = fits_only_->isChecked();
    f.zero_stage = zero_->currentIndex() - 1;
    f.offload = static_cast<PlanFilter::Offload>(offload_->currentIndex());
    f.schedule = schedule_->currentIndex() == 0 ? "" : schedule_->currentText().toStdString();
    filter_->set_filter(f);
}

void ExplorerPage::set_searching(bool on) {
    search_->setEnabled(!on);
    cancel_->setEnabled(on);
    if (on) export_->setEnabled(false);
    if (on) progress_->setValue(0), progress_->setFormat(QStringLiteral("starting"));
}

void ExplorerPage::set_progress(double fraction, const QString& phase) {
    progress_->setValue(static_cast<int>(fraction * 1000));
    progress_->setFormat(phase + QStringLiteral(" %p%"));
}

void ExplorerPage::set_results(const planner::SearchResult& r, const QString& summary) {
    model_->set_plans(r.ranked);
    // A dimension that is the same in every plan (ep of a dense model) gives its room to "why".
    QStringList same;
    for (int col : {PlanTableModel::Cp, PlanTableModel::Ep, PlanTableModel::Vpp}) {
        bool constant = model_->rowCount() > 0;
        const QVariant first = model_->data(model_->index(0, col));
        for (int row = 1; row < model_->rowCount() && constant; ++row) constant = model_->data(model_->index(row, col)) == first;
        table_->setColumnHidden(col, constant);
        if (constant) same << model_->headerData(col, Qt::Horizontal).toString() + " " + first.toString();
    }
    table_->resizeColumnsToContents();
    table_->setColumnWidth(PlanTableModel::Why, std::min(table_->columnWidth(PlanTableModel::Why), 480));
    progress_->setValue(r.cancelled ? progress_->value() : 1000);
    progress_->setFormat(r.cancelled ? QStringLiteral("cancelled") : QStringLiteral("done"));
    export_->setEnabled(!r.cancelled && !r.ranked.empty());
    summary_->setText(same.isEmpty() ? summary : summary + QStringLiteral(" · in every plan: ") + same.join(", "));
}

void ExplorerPage::set_global_batch(int gbs) { gbs_->setValue(gbs); }

void ExplorerPage::set_base(const sim::PlanSpec& p, const Figures& f, const QString& title) {
    base_ = f;
    have_base_ = true;
    have_now_ = false;
    base_title_->setText(title);
    set_whatif_plan(p, {});
    show_delta();
}

void ExplorerPage::set_whatif_plan(const sim::PlanSpec& p, const QString& note) {
    updating_ = true;
    for (const KnobInfo& k : whatif_knobs()) {
        const QString v = QString::fromStdString(knob_value(p, k.knob));
        if (auto* s = qobject_cast<QSpinBox*>(knob_edit_[k.knob])) s->setValue(v.toInt());
        if (auto* c = qobject_cast<QComboBox*>(knob_edit_[k.knob])) {
            if (c->findText(v) < 0) c->addItem(v);  // e.g. a "custom" offload split
            c->setCurrentText(v);
        }
        set_knob_error(k.knob, {});
    }
    updating_ = false;
    note_ = note;
    whatif_status_->setText(note);
}

void ExplorerPage::set_whatif_figures(const Figures& f, const QString& status) {
    now_ = f;
    have_now_ = true;
    whatif_status_->setText(note_.isEmpty() ? status : note_ + QStringLiteral("; ") + status);
    show_delta();
}

void ExplorerPage::set_knob_error(Knob k, const QString& message) {
    knob_error_[k]->setText(message);
    knob_error_[k]->setVisible(!message.isEmpty());
}

void ExplorerPage::show_delta() {
    if (!have_base_) return;
    const auto lines = delta_lines(base_, have_now_ ? now_ : base_);
    delta_->setRowCount(static_cast<int>(lines.size()));
    for (int r = 0; r < static_cast<int>(lines.size()); ++r) {
        const auto& l = lines[static_cast<std::size_t>(r)];
        const QString cells[] = {QString::fromStdString(l.name), QString::fromStdString(l.before), QString::fromStdString(l.after),
                                 QString::fromStdString(l.change)};
        for (int c = 0; c < 4; ++c) {
            auto* item = new QTableWidgetItem(cells[c]);
            if (c == 3 && l.better != 0) item->setForeground(l.better > 0 ? QColor(30, 130, 50) : QColor(190, 30, 30));
            delta_->setItem(r, c, item);
        }
    }
}

}  // namespace strata::gui
