// The plan explorer's table: the planner's ranked plans with their figures (the engine's where the
// plan was simulated, the fast estimate's otherwise: EstimateRole says which), sortable by the
// numbers behind the text, and a filter proxy (fits only, ZeRO stage, offload, schedule).
#pragma once
#include <QAbstractTableModel>
#include <QSortFilterProxyModel>

#include <string>
#include <vector>

#include "strata/gui/models/workbench.hpp"
#include "strata/planner/search.hpp"

namespace strata::gui {

/// A ranked plan's figures, from the engine when it was simulated, else from the estimate.
Figures figures_of(const planner::RankedPlan& rp);

class PlanTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column {
        Rank, Tp, Pp, Dp, Cp, Ep, Vpp, MicroBatch, Schedule, Zero, Recompute, SeqParallel, Offload,
        StepTime, TokensPerS, Mfu, PeakHbm, Fits, Why, ColumnCount
    };
    /// SortRole: the number behind a cell; EstimateRole: the row's figures are the fast estimate's
    /// (the view sets them apart); OomRole: the plan does not fit. (QtCore only: no colours here.)
    enum Role { SortRole = Qt::UserRole + 1, EstimateRole, OomRole };

    explicit PlanTableModel(QObject* parent = nullptr);
    void set_plans(std::vector<planner::RankedPlan> plans);
    const std::vector<planner::RankedPlan>& plans() const { return plans_; }
    const planner::RankedPlan& plan(int row) const { return plans_.at(static_cast<std::size_t>(row)); }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    std::vector<planner::RankedPlan> plans_;
};

struct PlanFilter {
    enum class Offload { any, none, some };
    bool fits_only = false;
    int zero_stage = -1;    ///< -1: any
    Offload offload = Offload::any;
    std::string schedule;   ///< "" or a schedule's JSON name ("1f1b")
    bool accepts(const planner::RankedPlan& rp) const;
};

class PlanFilterModel : public QSortFilterProxyModel {
    Q_OBJECT
public:
    explicit PlanFilterModel(QObject* parent = nullptr);
    void set_filter(const PlanFilter& f);
    const PlanFilter& filter() const { return filter_; }

protected:
    bool filterAcceptsRow(int source_row, const QModelIndex& source_parent) const override;

private:
    PlanFilter filter_;
};

}  // namespace strata::gui
