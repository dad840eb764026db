// The plan explorer: the search's controls and progress, the sortable, filterable table of ranked
// plans, and the what-if panel (a control per knob, the error beside it, the delta against the plan
// the what-if started from). It emits what a person asked for; the main window runs the work.
#pragma once
#include <QWidget>

#include <map>

#include "strata/gui/models/plan_table.hpp"
#include "strata/gui/models/whatif.hpp"

class QCheckBox;
class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableView;
class QTableWidget;

namespace strata::gui {

class ExplorerPage : public QWidget {
    Q_OBJECT
public:
    explicit ExplorerPage(QWidget* parent = nullptr);

    void set_searching(bool on);
    void set_progress(double fraction, const QString& phase);
    void set_results(const planner::SearchResult& r, const QString& summary);
    void set_global_batch(int gbs);
    /// The plan the what-if starts from, and its figures (simulated).
    void set_base(const sim::PlanSpec& p, const Figures& f, const QString& title);
    /// The current what-if plan (knob controls follow it) and, once simulated, its figures.
    void set_whatif_plan(const sim::PlanSpec& p, const QString& note);
    void set_whatif_figures(const Figures& f, const QString& status);
    void set_knob_error(Knob k, const QString& message);
    PlanTableModel* table_model() { return model_; }
    PlanFilterModel* filter_model() { return filter_; }
    QTableView* table_view() { return table_; }

signals:
    void searchRequested(int global_batch, bool offload);
    void cancelRequested();
    void planActivated(int source_row);
    void knobEdited(Knob knob, const QString& value, bool keep_gpus);
    void whatIfReset();
    void whatIfApplied();
    void exportRequested();

private:
    QWidget* build_whatif();
    void apply_filter();
    void show_delta();

    PlanTableModel* model_;
    PlanFilterModel* filter_;
    QTableView* table_ = nullptr;
    QSpinBox* gbs_ = nullptr;
    QCheckBox* offload_search_ = nullptr;
    QPushButton* search_ = nullptr;
    QPushButton* cancel_ = nullptr;
    QPushButton* export_ = nullptr;
    QProgressBar* progress_ = nullptr;
    QLabel* summary_ = nullptr;
    QCheckBox* fits_only_ = nullptr;
    QComboBox* zero_ = nullptr;
    QComboBox* offload_ = nullptr;
    QComboBox* schedule_ = nullptr;
    // What-if.
    QLabel* base_title_ = nullptr;
    QCheckBox* keep_gpus_ = nullptr;
    std::map<Knob, QWidget*> knob_edit_;
    std::map<Knob, QLabel*> knob_error_;
    QTableWidget* delta_ = nullptr;
    QLabel* whatif_status_ = nullptr;
    QString note_;  ///< what else the last knob moved (dp followed tp)
    Figures base_{}, now_{};
    bool have_base_ = false, have_now_ = false, updating_ = false;
};

}  // namespace strata::gui
