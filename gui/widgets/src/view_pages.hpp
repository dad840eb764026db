// The pages around the charts: the timeline with its toolbar and details pane, the memory charts,
// the capacity sweep's controls and chart, and the validation report's overlay. Each shows what
// the main window hands it and reports what a person asked for.
#pragma once
#include <QWidget>

#include <memory>

#include "capacity_chart.hpp"
#include "memory_charts.hpp"
#include "strata/gui/models/capacity_view.hpp"
#include "strata/gui/models/validation.hpp"
#include "timeline_widget.hpp"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QListWidget;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTableView;
class QTextBrowser;

namespace strata::gui {

class TimelinePage : public QWidget {
    Q_OBJECT
public:
    explicit TimelinePage(QWidget* parent = nullptr);
    void set_timeline(std::shared_ptr<const Timeline> t, const QString& title, const QString& summary, bool keep_window);
    TimelineWidget* chart() { return chart_; }
    void set_row_filter(RowFilter f);

private:
    TimelineWidget* chart_;
    QLabel* title_;
    QComboBox* rows_ = nullptr;
    QTextBrowser* details_;
    QString summary_;
};

class MemoryPage : public QWidget {
    Q_OBJECT
public:
    explicit MemoryPage(QWidget* parent = nullptr);
    void set_view(const MemoryView& v, const QString& title);
    MemoryTimeChart* over_time() { return over_time_; }
    BreakdownChart* breakdown() { return breakdown_; }
    bool follows_timeline() const;

private:
    QLabel* title_;
    QCheckBox* follow_;
    MemoryTimeChart* over_time_;
    BreakdownChart* breakdown_;
};

class CapacityPage : public QWidget {
    Q_OBJECT
public:
    CapacityPage(const std::vector<std::string>& gpu_ids, QWidget* parent = nullptr);
    /// The request from the controls (the model is the scenario's; the main window fills it in).
    CapacityRequest request() const;
    void set_request(const CapacityRequest& r);
    void set_running(bool on);
    void set_progress(double fraction, const QString& phase);
    void set_result(const planner::CapacityResult& r, const CapacityRequest& req, bool cancelled);
    CapacityChart* chart() { return chart_; }

signals:
    void runRequested();
    void cancelRequested();
    void pointActivated(int index);

private:
    QDoubleSpinBox* tokens_b_;
    QDoubleSpinBox* deadline_d_;
    QDoubleSpinBox* budget_m_;
    QSpinBox* min_gpus_;
    QSpinBox* max_gpus_;
    QSpinBox* gbs_;
    QListWidget* gpus_;
    QPushButton* run_;
    QPushButton* cancel_;
    QProgressBar* progress_;
    QLabel* verdict_;
    CapacityChart* chart_;
};

class ValidationPage : public QWidget {
    Q_OBJECT
public:
    explicit ValidationPage(QWidget* parent = nullptr);
    void set_validation(const Validation& v);
    TimelineWidget* timeline() { return timeline_; }
    MemoryTimeChart* memory() { return memory_; }

signals:
    void openRequested();

private:
    QLabel* summary_;
    ValidationTableModel* table_model_;
    QTableView* table_;
    TimelineWidget* timeline_;
    MemoryTimeChart* memory_;
};

}  // namespace strata::gui
