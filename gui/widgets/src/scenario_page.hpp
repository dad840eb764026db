// The scenario editor: pick a bundled model, cluster and plan (or import a Hugging Face config),
// then edit any field. Each edit goes to the ScenarioDocument, which checks it with the library's
// readers; the page shows each message beside the field its path names. No rule lives here.
#pragma once
#include <QWidget>

#include <map>

#include "strata/gui/models/scenario_document.hpp"

class QComboBox;
class QLabel;
class QFormLayout;
class QPlainTextEdit;
class QTabWidget;

namespace strata::gui {

class ScenarioPage : public QWidget {
    Q_OBJECT
public:
    ScenarioPage(ScenarioDocument* doc, const std::string& scenarios_dir, QWidget* parent = nullptr);
    /// Rebuilds the forms from the document (after open, or a part replaced).
    void reload();
    /// The error label beside a field (tests read it); nullptr if the path has no field.
    const QLabel* error_label(const std::string& path) const;
    /// Sets a field as a person would (tests; the editors call the same).
    void edit_field(Part part, const std::string& path, const QString& text);

signals:
    void documentChanged();
    void message(const QString& text);

private:
    struct PartUi {
        QWidget* form_host = nullptr;
        QFormLayout* form = nullptr;
        QPlainTextEdit* json = nullptr;
        QLabel* part_error = nullptr;
    };
    void build_part(Part part, PartUi& ui);
    void refresh_errors();
    void pick(Part part, const QString& name);
    QWidget* make_editor(const Field& f);

    ScenarioDocument* doc_;
    std::string scenarios_dir_;
    QComboBox* model_box_ = nullptr;
    QComboBox* cluster_box_ = nullptr;
    QComboBox* plan_box_ = nullptr;
    QLabel* status_ = nullptr;
    std::map<Part, PartUi> parts_;
    std::map<std::string, QLabel*> errors_;  ///< path -> its error label
    bool loading_ = false;
};

}  // namespace strata::gui
