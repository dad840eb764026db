#include "capacity_chart.hpp"

#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>

#include <cmath>

#include "strata/gui/models/axis.hpp"

namespace strata::gui {

namespace {

constexpr int kCapLeft = 64, kCapRight = 12, kCapTop = 24, kCapBottom = 40;

/// A log axis mapping [lo, hi] to [0, 1].
struct LogScale {
    double lo = 1, hi = 10;
    double at(double v) const { return (std::log(v) - std::log(lo)) / std::max(1e-12, std::log(hi) - std::log(lo)); }
};

}  // namespace

CapacityChart::CapacityChart(QWidget* parent) : ChartWidget(parent) { setMinimumSize(600, 300); }

void CapacityChart::set_result(const planner::CapacityResult& r, double deadline_s, double budget_usd) {
    result_ = r;
    layout_ = capacity_layout(r);
    deadline_s_ = deadline_s;
    budget_usd_ = budget_usd;
    update();
}

void CapacityChart::render_chart(QPainter& p, const QRect& area) {
    begin_chart(p, area);
    p.setRenderHint(QPainter::Antialiasing, true);
    const bool on_screen = p.device() == this;
    if (on_screen) hits_.clear();
    if (layout_.pareto.empty())
        return end_empty_chart(p, area, result_.points.empty() ? QStringLiteral("Run a sweep: tokens, deadline and GPU types above")
                                                               : QStringLiteral("No cluster size in the sweep fits this model"));
    const int w = area.width() / 3;
    const int legend_h = 26;
    const QRect body(area.left(), area.top(), area.width(), area.height() - legend_h);
    paint_panel(p, QRect(body.left(), body.top(), w, body.height()), Panel::days, on_screen);
    paint_panel(p, QRect(body.left() + w, body.top(), w, body.height()), Panel::cost, on_screen);
    paint_panel(p, QRect(body.left() + 2 * w, body.top(), area.width() - 2 * w, body.height()), Panel::pareto, on_screen);
    // Legend: GPU types, then the marks.
    int x = area.left() + kCapLeft;
    const int y = area.bottom() - legend_h + 6;
    for (std::size_t s = 0; s < layout_.series.size(); ++s) {
        const QString name = QString::fromStdString(layout_.series[s].gpu);
        p.setPen(Qt::NoPen);
        p.setBrush(series_color(static_cast<int>(s)));
        p.drawEllipse(QPointF(x + 5, y + 7), 5, 5);
        p.setPen(QColor(40, 40, 40));
        p.drawText(QPoint(x + 14, y + 11), name);
        x += 14 + p.fontMetrics().horizontalAdvance(name) + 18;
    }
    p.drawText(QPoint(x, y + 11), QStringLiteral("ringed: on the time/cost Pareto front · hollow: misses the target · dashed: deadline "
                                                 "and budget · click a point to open its plan"));
    p.restore();
}

void CapacityChart::paint_panel(QPainter& p, const QRect& r, Panel which, bool record_hits) {
    const QRect plot(r.left() + kCapLeft, r.top() + kCapTop, r.width() - kCapLeft - kCapRight, r.height() - kCapTop - kCapBottom);
    if (plot.width() < 20 || plot.height() < 20) return;
    double min_days = 1e300, min_cost = 1e300;
    for (const auto& pt : result_.points)
        if (pt.feasible) min_days = std::min(min_days, pt.time_s / 86400), min_cost = std::min(min_cost, pt.cost_usd);
    const LogScale gx{layout_.min_gpus / 1.3, layout_.max_gpus * 1.3};
    const LogScale dy{min_days / 1.4, std::max(layout_.max_days, deadline_s_ / 86400) * 1.4};
    const double max_cost = std::max(layout_.max_cost_usd, budget_usd_) * 1.1;
    auto x_of = [&](const planner::CapacityPoint& pt) {
        return which == Panel::pareto ? plot.left() + dy.at(pt.time_s / 86400) * plot.width()
                                      : plot.left() + gx.at(pt.cluster.gpu_count()) * plot.width();
    };
    auto y_of_value = [&](double v) {  // days (days panel) or dollars (the others)
        return which == Panel::days ? plot.bottom() - dy.at(v) * plot.height() : plot.bottom() - v / max_cost * plot.height();
    };
    auto y_of = [&](const planner::CapacityPoint& pt) { return y_of_value(which == Panel::days ? pt.time_s / 86400 : pt.cost_usd); };

    QFont bold = p.font();
    bold.setBold(true);
    p.setFont(bold);
    p.setPen(QColor(30, 30, 30));
    const char* titles[] = {"time to train (days) vs GPUs", "cost (USD) vs GPUs", "cost vs time: the Pareto front"};
    p.drawText(QRect(plot.left(), r.top(), plot.width(), kCapTop), Qt::AlignVCenter | Qt::AlignLeft, QString::fromLatin1(titles[static_cast<int>(which)]));
    bold.setBold(false);
    p.setFont(bold);
    // Axes.
    const auto xticks = which == Panel::pareto ? log10_ticks(dy.lo, dy.hi, 6, days_label) : log2_ticks(gx.lo, gx.hi, 8);
    for (const Tick& t : xticks) {
        const double x = which == Panel::pareto ? plot.left() + dy.at(t.value) * plot.width() : plot.left() + gx.at(t.value) * plot.width();
        p.setPen(QColor(0, 0, 0, 25));
        p.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()));
        p.setPen(QColor(60, 60, 60));
        p.drawText(QRectF(x - 40, plot.bottom() + 2, 80, 16), Qt::AlignHCenter | Qt::AlignTop, QString::fromStdString(t.label));
    }
    p.drawText(QRect(plot.left(), plot.bottom() + 18, plot.width(), 16), Qt::AlignHCenter | Qt::AlignTop,
               which == Panel::pareto ? QStringLiteral("days to train") : QStringLiteral("GPUs"));
    const auto yticks = which == Panel::days ? log10_ticks(dy.lo, dy.hi, 8, days_label) : linear_ticks(0, max_cost, 6, usd_label);
    for (const Tick& t : yticks) {
        const double y = y_of_value(t.value);
        p.setPen(QColor(0, 0, 0, 25));
        p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
        p.setPen(QColor(60, 60, 60));
        p.drawText(QRectF(r.left(), y - 8, kCapLeft - 6, 16), Qt::AlignVCenter | Qt::AlignRight, QString::fromStdString(t.label));
    }
    p.setPen(QColor(120, 120, 120));
    p.setBrush(Qt::NoBrush);
    p.drawRect(plot);
    // Target lines.
    p.setPen(QPen(QColor(30, 30, 30), 1.2, Qt::DashLine));
    if (deadline_s_ > 0 && which == Panel::days) {
        const double y = y_of_value(deadline_s_ / 86400);
        p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
        p.drawText(QRectF(plot.left() + 4, y - 15, 200, 14), Qt::AlignLeft | Qt::AlignBottom,
                   QStringLiteral("deadline %1").arg(QString::fromStdString(days_label(deadline_s_ / 86400))));
    }
    if (deadline_s_ > 0 && which == Panel::pareto) {
        const double x = plot.left() + dy.at(deadline_s_ / 86400) * plot.width();
        p.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()));
    }
    if (budget_usd_ > 0 && which != Panel::days) {
        const double y = y_of_value(budget_usd_);
        p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
    }
    p.save();
    p.setClipRect(plot.adjusted(-6, -6, 6, 6));
    if (which == Panel::pareto) {  // the front, fastest to cheapest
        QPainterPath front;
        for (std::size_t k = 0; k < layout_.pareto.size(); ++k) {
            const auto& pt = result_.points[static_cast<std::size_t>(layout_.pareto[k])];
            const QPointF q(x_of(pt), y_of(pt));
            if (k == 0) front.moveTo(q);
            else front.lineTo(q);
        }
        p.setPen(QPen(QColor(30, 30, 30), 1.5));
        p.setBrush(Qt::NoBrush);
        p.drawPath(front);
    }
    for (std::size_t s = 0; s < layout_.series.size(); ++s) {
        const QColor c = series_color(static_cast<int>(s));
        QPainterPath line;
        bool open = false;
        for (int idx : layout_.series[s].points) {
            const auto& pt = result_.points[static_cast<std::size_t>(idx)];
            if (!pt.feasible) continue;
            const QPointF q(x_of(pt), y_of(pt));
            if (which != Panel::pareto) {
                if (!open) line.moveTo(q);
                else line.lineTo(q);
                open = true;
            }
        }
        p.setPen(QPen(c, 1.5));
        p.setBrush(Qt::NoBrush);
        p.drawPath(line);
        for (int idx : layout_.series[s].points) {
            const auto& pt = result_.points[static_cast<std::size_t>(idx)];
            if (!pt.feasible) continue;
            const QPointF q(x_of(pt), y_of(pt));
            p.setPen(QPen(c, 1.5));
            p.setBrush(pt.meets ? QBrush(c) : QBrush(Qt::white));
            p.drawEllipse(q, 4, 4);
            if (pt.pareto) {
                p.setPen(QPen(QColor(20, 20, 20), 1.5));
                p.setBrush(Qt::NoBrush);
                p.drawEllipse(q, 7.5, 7.5);
            }
            if (record_hits) hits_.emplace_back(q, idx);
        }
    }
    p.restore();
}

int CapacityChart::point_at(QPoint pos) const {
    int best = -1;
    double best_d = 10 * 10;
    for (const auto& [q, idx] : hits_) {
        const double d = (q.x() - pos.x()) * (q.x() - pos.x()) + (q.y() - pos.y()) * (q.y() - pos.y());
        if (d <= best_d) best_d = d, best = idx;
    }
    return best;
}

void CapacityChart::mouseMoveEvent(QMouseEvent* e) {
    const int i = point_at(e->pos());
    if (i < 0) {
        QToolTip::hideText();
        unsetCursor();
        return;
    }
    setCursor(Qt::PointingHandCursor);
    QToolTip::showText(e->globalPosition().toPoint(), QString::fromStdString(describe_point(result_.points[static_cast<std::size_t>(i)])), this);
}

void CapacityChart::mousePressEvent(QMouseEvent* e) {
    const int i = point_at(e->pos());
    if (e->button() == Qt::LeftButton && i >= 0) emit pointActivated(i);
}

}  // namespace strata::gui
