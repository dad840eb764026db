// The capacity chart: for each GPU type, time to train and cost against the GPU count (log axes
// where the range calls for them), and cost against time with the Pareto front joined. The
// deadline and budget are drawn as lines; a point is a plan: hover describes it, a click opens it.
#pragma once
#include <QPointF>

#include <vector>

#include "chart_widget.hpp"
#include "strata/gui/models/capacity_view.hpp"

namespace strata::gui {

class CapacityChart : public ChartWidget {
    Q_OBJECT
public:
    explicit CapacityChart(QWidget* parent = nullptr);
    void set_result(const planner::CapacityResult& r, double deadline_s, double budget_usd);
    void render_chart(QPainter& p, const QRect& area) override;
    /// The point (index into the result) drawn nearest a widget position, within a few pixels.
    int point_at(QPoint pos) const;

signals:
    void pointActivated(int index);

protected:
    void mouseMoveEvent(QMouseEvent* e) override;
    void mousePressEvent(QMouseEvent* e) override;
    QString chart_name() const override { return QStringLiteral("capacity"); }

private:
    enum class Panel { days, cost, pareto };
    void paint_panel(QPainter& p, const QRect& r, Panel which, bool record_hits);
    planner::CapacityResult result_;
    CapacityLayout layout_;
    double deadline_s_ = 0, budget_usd_ = 0;
    std::vector<std::pair<QPointF, int>> hits_;  ///< where each point was drawn on screen
};

}  // namespace strata::gui
