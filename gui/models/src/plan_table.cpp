#include "strata/gui/models/plan_table.hpp"

#include "strata/common/text.hpp"
#include "strata/gui/models/whatif.hpp"
#include "strata/planner/space.hpp"

namespace strata::gui {

Figures figures_of(const planner::RankedPlan& rp) {
    Figures f;
    if (rp.simulated) {
        f.step_time_s = rp.sim.step_time_s;
        f.tokens_per_s = rp.sim.tokens_per_s;
        f.mfu = rp.sim.mfu;
        f.peak_hbm_bytes = rp.sim.peak_hbm_bytes;
        f.fits = !rp.sim.oom;
    } else {
        f.step_time_s = rp.estimate.step_time_s;
        f.tokens_per_s = rp.estimate.tokens_per_s;
        f.mfu = rp.estimate.mfu;
        f.peak_hbm_bytes = rp.estimate.hbm_bytes;
        f.fits = rp.estimate.fits;
    }
    return f;
}

PlanTableModel::PlanTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void PlanTableModel::set_plans(std::vector<planner::RankedPlan> plans) {
    beginResetModel();
    plans_ = std::move(plans);
    endResetModel();
}

int PlanTableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(plans_.size()); }
int PlanTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant PlanTableModel::headerData(int section, Qt::Orientation o, int role) const {
    static const char* names[] = {"#",        "tp",   "pp",       "dp",       "cp",      "ep",     "vpp",
                                  "mb",       "schedule", "ZeRO", "recompute", "SP",     "offload", "step time",
                                  "tokens/s", "MFU",  "peak HBM", "memory",   "why"};
    static const char* tips[] = {"rank by the planner (simulated plans by simulated throughput)", "tensor parallel",
                                 "pipeline parallel", "data parallel", "context parallel (u: Ulysses' all-to-all, else the ring)", "expert parallel",
                                 "virtual pipeline stages per rank", "micro-batch (sequences)", "pipeline schedule",
                                 "ZeRO stage (1 = distributed optimizer)", "activation recomputation", "sequence parallelism",
                                 "model state offload (the planner's variants)", "one optimizer step", "training throughput",
                                 "model FLOP utilisation", "peak GPU memory (simulated: caching allocator's reserve)",
                                 "fits every tier, or out of memory", "what bounds the step"};
    if (o != Qt::Horizontal || section < 0 || section >= ColumnCount) return {};
    if (role == Qt::DisplayRole) return QString::fromLatin1(names[section]);
    if (role == Qt::ToolTipRole) return QString::fromLatin1(tips[section]);
    return {};
}

QVariant PlanTableModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() < 0 || index.row() >= rowCount()) return {};
    const auto& rp = plans_[static_cast<std::size_t>(index.row())];
    const auto& p = rp.plan;
    const Figures f = figures_of(rp);
    const int col = index.column();
    if (role == SortRole) {
        switch (col) {
            case Rank: return index.row();
            case Tp: return p.tp;
            case Pp: return p.pp;
            case Dp: return p.dp;
            case Cp: return p.cp;
            case Ep: return p.ep;
            case Vpp: return p.vpp;
            case MicroBatch: return p.micro_batch;
            case Zero: return p.zero_stage;
            case StepTime: return f.step_time_s;
            case TokensPerS: return f.tokens_per_s;
            case Mfu: return f.mfu;
            case PeakHbm: return f.peak_hbm_bytes;
            case Fits: return f.fits ? 1 : 0;
            default: break;  // text columns sort by their text
        }
        role = Qt::DisplayRole;
    }
    if (role == Qt::DisplayRole) {
        switch (col) {
            case Rank: return index.row() + 1;
            case Tp: return p.tp;
            case Pp: return p.pp;
            case Dp: return p.dp;
            case Cp: return QString::fromStdString(planner::cp_label(p));  // as the CLI's table: 4u with Ulysses
            case Ep: return p.ep;
            case Vpp: return p.vpp;
            case MicroBatch: return p.micro_batch;
            case Schedule: return QString::fromLatin1(sim::to_string(p.schedule));
            case Zero: return p.zero_stage;
            case Recompute: return QString::fromLatin1(sim::to_string(p.recompute));
            case SeqParallel: return p.sequence_parallel ? QStringLiteral("yes") : QStringLiteral("no");
            case Offload: return QString::fromStdString(offload_label(p));
            case StepTime: return QString::fromStdString(human_seconds(f.step_time_s));
            case TokensPerS: return QString::fromStdString(fmt_fixed(f.tokens_per_s, 0));
            case Mfu: return QString::fromStdString(fmt_fixed(100 * f.mfu, 1) + " %");
            case PeakHbm: return QString::fromStdString(human_bytes(f.peak_hbm_bytes));
            case Fits: return f.fits ? QStringLiteral("fits") : QStringLiteral("OOM");
            case Why: return QString::fromStdString(rp.simulated && rp.sim.oom ? "OOM (simulated)" : rp.why);
            default: return {};
        }
    }
    if (role == Qt::ToolTipRole)
        return QString::fromStdString((rp.simulated ? "simulated by the engine: " : "fast estimate only (not simulated): ") + rp.why);
    if (role == EstimateRole) return !rp.simulated;
    if (role == OomRole) return !f.fits;
    if (role == Qt::TextAlignmentRole && col != Why && col != Schedule && col != Recompute && col != Offload)
        return static_cast<int>(Qt::AlignRight | Qt::AlignVCenter);
    return {};
}

bool PlanFilter::accepts(const planner::RankedPlan& rp) const {
    const auto& p = rp.plan;
    if (fits_only && !figures_of(rp).fits) return false;
    if (zero_stage >= 0 && p.zero_stage != zero_stage) return false;
    const bool offloaded = !(p.offload.optimizer.all_gpu() && p.offload.params.all_gpu() && p.offload.grads.all_gpu() &&
                             p.offload.activations.all_gpu());
    if (offload == Offload::none && offloaded) return false;
    if (offload == Offload::some && !offloaded) return false;
    if (!schedule.empty() && schedule != sim::to_string(p.schedule)) return false;
    return true;
}

PlanFilterModel::PlanFilterModel(QObject* parent) : QSortFilterProxyModel(parent) { setSortRole(PlanTableModel::SortRole); }

void PlanFilterModel::set_filter(const PlanFilter& f) {
    filter_ = f;
    invalidateFilter();
}

bool PlanFilterModel::filterAcceptsRow(int source_row, const QModelIndex& source_parent) const {
    const auto* m = qobject_cast<const PlanTableModel*>(sourceModel());
    if (!m || source_parent.isValid() || source_row < 0 || source_row >= m->rowCount()) return false;
    return filter_.accepts(m->plan(source_row));
}

}  // namespace strata::gui
