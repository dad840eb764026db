// The memory charts. MemoryTimeChart: use over time, a panel per tier, every pool's curve (the
// fullest one bold and named), the capacity dashed, the first OOM marked; a second set of curves
// (measured) can be laid over the first (predicted). It follows the timeline's visible range.
// BreakdownChart: every stage's GPU peak stacked by what holds it, the worst outlined, the
// capacity line and the analytical model's figure beside each bar.
#pragma once
#include <vector>

#include "chart_widget.hpp"
#include "strata/gui/models/memory_view.hpp"

namespace strata::gui {

class MemoryTimeChart : public ChartWidget {
    Q_OBJECT
public:
    explicit MemoryTimeChart(QWidget* parent = nullptr);
    /// `overlay`: measured curves drawn solid over `tiers` drawn dashed (validation); empty otherwise.
    void set_data(std::vector<TierMemory> tiers, std::int64_t end_ns, std::vector<TierMemory> overlay = {});
    void set_window(const TimeWindow& w);
    /// A line under the legend (what the curves include).
    void set_note(const QString& note);
    void render_chart(QPainter& p, const QRect& area) override;

protected:
    QString chart_name() const override { return QStringLiteral("memory-over-time"); }

private:
    void paint_tier(QPainter& p, const QRect& r, const TierMemory& t, const TierMemory* overlay) const;
    std::vector<TierMemory> tiers_, overlay_;
    QString note_;
    std::int64_t end_ns_ = 1;
    TimeWindow window_;
};

class BreakdownChart : public ChartWidget {
    Q_OBJECT
public:
    explicit BreakdownChart(QWidget* parent = nullptr);
    void set_data(std::vector<StageBreakdown> stages, double capacity_bytes);
    void render_chart(QPainter& p, const QRect& area) override;

protected:
    QString chart_name() const override { return QStringLiteral("memory-breakdown"); }

private:
    std::vector<StageBreakdown> stages_;
    double capacity_bytes_ = 0;
};

/// The colour of a breakdown part (weights, grads, optimizer, activations, buffers, slack).
QColor part_color(int part);

}  // namespace strata::gui
