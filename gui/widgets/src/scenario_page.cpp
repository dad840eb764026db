#include "scenario_page.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QTabWidget>
#include <QVBoxLayout>

#include "strata/gui/models/workbench.hpp"

namespace strata::gui {

namespace {

QComboBox* bundled_box(const std::string& dir, const std::string& kind) {
    auto* box = new QComboBox;
    box->addItem(QStringLiteral("(choose a bundled %1)").arg(QString::fromStdString(kind).chopped(1)));
    for (const auto& n : bundled_names(dir, kind)) box->addItem(QString::fromStdString(n));
    box->setMinimumContentsLength(18);
    return box;
}

QString error_style() { return QStringLiteral("color: #b41e1e;"); }

}  // namespace

ScenarioPage::ScenarioPage(ScenarioDocument* doc, const std::string& scenarios_dir, QWidget* parent)
    : QWidget(parent), doc_(doc), scenarios_dir_(scenarios_dir) {
    auto* top = new QHBoxLayout;
    model_box_ = bundled_box(scenarios_dir, "models");
    cluster_box_ = bundled_box(scenarios_dir, "clusters");
    plan_box_ = bundled_box(scenarios_dir, "plans");
    auto* hf = new QPushButton(QStringLiteral("Import Hugging Face config.json..."));
    top->addWidget(new QLabel(QStringLiteral("Model")));
    top->addWidget(model_box_);
    top->addWidget(hf);
    top->addSpacing(12);
    top->addWidget(new QLabel(QStringLiteral("Cluster")));
    top->addWidget(cluster_box_);
    top->addSpacing(12);
    top->addWidget(new QLabel(QStringLiteral("Plan")));
    top->addWidget(plan_box_);
    top->addStretch();
    connect(model_box_, &QComboBox::activated, this, [this](int i) { if (i > 0) pick(Part::model, model_box_->itemText(i)); });
    connect(cluster_box_, &QComboBox::activated, this, [this](int i) { if (i > 0) pick(Part::cluster, cluster_box_->itemText(i)); });
    connect(plan_box_, &QComboBox::activated, this, [this](int i) { if (i > 0) pick(Part::plan, plan_box_->itemText(i)); });
    connect(hf, &QPushButton::clicked, this, [this] {
        const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Hugging Face config.json"), {}, QStringLiteral("JSON (*.json)"));
        if (path.isEmpty()) return;
        const std::string err = doc_->import_hf_config(path.toStdString());
        if (!err.empty()) return emit message(QString::fromStdString(err));
        reload();
        emit documentChanged();
    });

    auto* columns = new QHBoxLayout;
    for (Part part : {Part::model, Part::cluster, Part::plan}) {
        PartUi& ui = parts_[part];
        auto* tabs = new QTabWidget;
        auto* scroll = new QScrollArea;
        scroll->setWidgetResizable(true);
        ui.form_host = new QWidget;
        ui.form = new QFormLayout(ui.form_host);
        ui.form->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
        scroll->setWidget(ui.form_host);
        tabs->addTab(scroll, QStringLiteral("Fields"));
        auto* raw = new QWidget;
        auto* raw_layout = new QVBoxLayout(raw);
        ui.json = new QPlainTextEdit;
        ui.json->setFont(QFont(QStringLiteral("DejaVu Sans Mono"), 9));
        auto* apply = new QPushButton(QStringLiteral("Apply JSON"));
        raw_layout->addWidget(ui.json);
        raw_layout->addWidget(apply);
        tabs->addTab(raw, QStringLiteral("JSON"));
        connect(apply, &QPushButton::clicked, this, [this, part] {
            const std::string err = doc_->set_part_text(part, parts_[part].json->toPlainText().toStdString());
            reload();
            if (!err.empty()) emit message(QString::fromStdString(err));
            emit documentChanged();
        });
        auto* box = new QWidget;
        auto* v = new QVBoxLayout(box);
        v->setContentsMargins(0, 0, 0, 0);
        auto* title = new QLabel(QStringLiteral("<b>%1</b>").arg(QString::fromLatin1(to_string(part))));
        ui.part_error = new QLabel;
        ui.part_error->setWordWrap(true);
        ui.part_error->setStyleSheet(error_style());
        v->addWidget(title);
        v->addWidget(tabs, 1);
        v->addWidget(ui.part_error);
        columns->addWidget(box, part == Part::plan ? 4 : 3);
    }
    status_ = new QLabel;
    status_->setWordWrap(true);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(top);
    layout->addLayout(columns, 1);
    layout->addWidget(status_);
    reload();
}

void ScenarioPage::pick(Part part, const QString& name) {
    const std::string n = name.toStdString();
    const std::string err = part == Part::model ? doc_->set_model(n) : part == Part::cluster ? doc_->set_cluster(n) : doc_->set_plan(n);
    if (!err.empty()) return emit message(QString::fromStdString(err));
    reload();
    emit documentChanged();
}

QWidget* ScenarioPage::make_editor(const Field& f) {
    const QString path = QString::fromStdString(f.path);
    const Part part = f.part;
    auto commit = [this, part, path](const QString& text) {
        if (!loading_) edit_field(part, path.toStdString(), text);
    };
    switch (f.kind) {
        case Field::Kind::boolean: {
            auto* c = new QCheckBox;
            c->setChecked(f.value == "true");
            connect(c, &QCheckBox::toggled, this, [commit](bool on) { commit(on ? QStringLiteral("true") : QStringLiteral("false")); });
            return c;
        }
        case Field::Kind::choice: {
            auto* c = new QComboBox;
            for (const auto& ch : f.choices) c->addItem(QString::fromStdString(ch));
            c->setEditable(false);
            c->setCurrentText(QString::fromStdString(f.value));
            connect(c, &QComboBox::textActivated, this, commit);
            return c;
        }
        case Field::Kind::json:
            if (!f.choices.empty()) {  // offload tiers: a name, or an object of fractions typed in
                auto* c = new QComboBox;
                c->setEditable(true);
                for (const auto& ch : f.choices) c->addItem(QString::fromStdString(ch));
                c->setCurrentText(QString::fromStdString(f.value).remove('"'));
                connect(c->lineEdit(), &QLineEdit::editingFinished, this, [c, commit] { commit(c->currentText()); });
                connect(c, &QComboBox::textActivated, this, commit);
                return c;
            }
            [[fallthrough]];
        default: {
            auto* e = new QLineEdit(QString::fromStdString(f.value));
            e->setCursorPosition(0);  // long descriptions show their beginning
            connect(e, &QLineEdit::editingFinished, this, [e, commit] {
                if (e->isModified()) commit(e->text());
                e->setModified(false);
            });
            return e;
        }
    }
}

void ScenarioPage::build_part(Part part, PartUi& ui) {
    while (ui.form->rowCount() > 0) ui.form->removeRow(0);
    for (const Field& f : doc_->fields(part)) {
        auto* cell = new QWidget;
        auto* v = new QVBoxLayout(cell);
        v->setContentsMargins(0, 0, 0, 0);
        v->setSpacing(1);
        QWidget* editor = make_editor(f);
        editor->setObjectName(QString::fromStdString(f.path));
        auto* err = new QLabel;
        err->setWordWrap(true);
        err->setStyleSheet(error_style());
        err->setVisible(false);
        v->addWidget(editor);
        v->addWidget(err);
        errors_[f.path] = err;
        ui.form->addRow(QString::fromStdString(f.key), cell);
    }
    ui.json->setPlainText(QString::fromStdString(doc_->part_text(part)));
}

void ScenarioPage::reload() {
    loading_ = true;
    errors_.clear();
    for (auto& [part, ui] : parts_) build_part(part, ui);
    loading_ = false;
    refresh_errors();
}

void ScenarioPage::edit_field(Part part, const std::string& path, const QString& text) {
    // An edit that did not come from the field's own editor (tests, --edit) shows there too.
    if (QWidget* editor = findChild<QWidget*>(QString::fromStdString(path))) {
        const QSignalBlocker quiet(editor);
        if (auto* e = qobject_cast<QLineEdit*>(editor); e && e->text() != text) e->setText(text);
        if (auto* c = qobject_cast<QComboBox*>(editor)) c->setCurrentText(text);
        if (auto* b = qobject_cast<QCheckBox*>(editor)) b->setChecked(text == QStringLiteral("true"));
    }
    doc_->set_field(part, path, text.toStdString());
    parts_[part].json->setPlainText(QString::fromStdString(doc_->part_text(part)));
    refresh_errors();
    emit documentChanged();
}

void ScenarioPage::refresh_errors() {
    for (auto& [path, label] : errors_) {
        const std::string msg = doc_->problem_at(path);
        label->setText(QString::fromStdString(msg));
        label->setVisible(!msg.empty());
    }
    // A problem that names no field (a whole part, a missing key) is shown under its part.
    for (auto& [part, ui] : parts_) {
        QString text;
        for (const auto& pr : doc_->problems()) {
            bool placed = false;
            for (const auto& [path, label] : errors_) placed = placed || (!doc_->problem_at(path).empty() && doc_->problem_at(path) == pr.message);
            if (pr.part == part && !placed) text += QString::fromStdString(pr.message) + "\n";
        }
        ui.part_error->setText(text.trimmed());
        ui.part_error->setVisible(!text.isEmpty());
    }
    const auto n = doc_->problems().size();
    status_->setText(QString::fromStdString(doc_->display_name()) + (doc_->modified() ? QStringLiteral(" (modified)") : QString()) +
                     (n == 0 ? QStringLiteral(" · every field reads as the CLI reads it")
                             : QStringLiteral(" · %1 problem%2: the views keep the last valid scenario").arg(n).arg(n == 1 ? "" : "s")));
}

const QLabel* ScenarioPage::error_label(const std::string& path) const {
    auto it = errors_.find(path);
    return it == errors_.end() ? nullptr : it->second;
}

}  // namespace strata::gui
