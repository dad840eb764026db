#include "memory_charts.hpp"

#include <QPainter>
#include <QPainterPath>

#include <cmath>

#include "strata/common/text.hpp"
#include "strata/gui/models/axis.hpp"

namespace strata::gui {

namespace {

constexpr int kMemLeft = 78, kMemRight = 16, kMemTitle = 20, kMemXAxis = 22, kMemLegend = 22;

QString tier_title(sim::Tier t) {
    switch (t) {
        case sim::Tier::gpu: return QStringLiteral("GPU memory (HBM), one GPU");
        case sim::Tier::cpu: return QStringLiteral("host DRAM, one node");
        case sim::Tier::ssd: return QStringLiteral("NVMe SSD, one node");
    }
    return {};
}

std::string bytes_tick(double b) { return bytes_label(b); }

const MemoryCurve* fullest(const TierMemory& t) {
    for (const auto& c : t.curves)
        if (c.worst) return &c;
    return nullptr;
}

/// A curve through the per-column envelope: each column's low and high joined, so a spike
/// narrower than a pixel still shows.
QPainterPath envelope_path(const MemoryCurve& c, const TimeWindow& w, const QRect& plot, double max_y) {
    QPainterPath path;
    const Envelope e = envelope(c, w, plot.width());
    bool open = false;
    auto y_of = [&](double b) { return plot.bottom() - b / max_y * plot.height(); };
    for (int col = 0; col < plot.width(); ++col) {
        const double lo = e.lo[static_cast<std::size_t>(col)], hi = e.hi[static_cast<std::size_t>(col)];
        if (std::isnan(lo)) {
            open = false;
            continue;
        }
        const double x = plot.left() + col + 0.5;
        if (!open) path.moveTo(x, y_of(lo));
        else path.lineTo(x, y_of(lo));
        if (hi != lo) path.lineTo(x, y_of(hi)), path.lineTo(x, y_of(lo));
        open = true;
    }
    return path;
}

}  // namespace

QColor part_color(int part) {
    static const QColor colors[] = {{78, 121, 167}, {242, 142, 43}, {89, 161, 79}, {225, 87, 89}, {176, 122, 161}, {200, 200, 200}};
    return colors[std::clamp(part, 0, StageBreakdown::kParts - 1)];
}

MemoryTimeChart::MemoryTimeChart(QWidget* parent) : ChartWidget(parent) { setMinimumSize(400, 200); }

void MemoryTimeChart::set_data(std::vector<TierMemory> tiers, std::int64_t end_ns, std::vector<TierMemory> overlay) {
    tiers_ = std::move(tiers);
    overlay_ = std::move(overlay);
    end_ns_ = std::max<std::int64_t>(1, end_ns);
    window_ = TimeWindow{0, end_ns_};
    update();
}

void MemoryTimeChart::set_window(const TimeWindow& w) {
    window_ = w;
    update();
}

void MemoryTimeChart::set_note(const QString& note) {
    note_ = note;
    update();
}

void MemoryTimeChart::render_chart(QPainter& p, const QRect& area) {
    begin_chart(p, area);
    if (tiers_.empty()) return end_empty_chart(p, area, QStringLiteral("No memory samples yet: simulate a plan"));
    const int n = static_cast<int>(tiers_.size());
    const int h = (area.height() - kMemLegend) / n;
    for (int i = 0; i < n; ++i) {
        const TierMemory* ov = nullptr;
        for (const auto& o : overlay_)
            if (o.tier == tiers_[static_cast<std::size_t>(i)].tier) ov = &o;
        paint_tier(p, QRect(area.left(), area.top() + i * h, area.width(), h), tiers_[static_cast<std::size_t>(i)], ov);
    }
    p.setPen(QColor(80, 80, 80));
    const QString legend = overlay_.empty()
                               ? QStringLiteral("bold: the fullest pool · thin: the others · dashed: capacity · red cross: the first allocation "
                                                "past capacity · GPU: what the caching allocator holds reserved (nvidia-smi's view)")
                               : QStringLiteral("blue dashed: predicted · orange solid: measured (bold: the fullest pool of each)");
    p.drawText(QRect(area.left() + kMemLeft, area.bottom() - kMemLegend + 1, area.width() - kMemLeft, kMemLegend), Qt::AlignVCenter | Qt::AlignLeft,
               p.fontMetrics().elidedText(note_.isEmpty() ? legend : legend + QStringLiteral(" · ") + note_, Qt::ElideRight, area.width() - kMemLeft));
    p.restore();
}

void MemoryTimeChart::paint_tier(QPainter& p, const QRect& r, const TierMemory& t, const TierMemory* overlay) const {
    const QRect plot(r.left() + kMemLeft, r.top() + kMemTitle, r.width() - kMemLeft - kMemRight, r.height() - kMemTitle - kMemXAxis);
    if (plot.width() < 10 || plot.height() < 10) return;
    double peak = 0;
    for (const auto& c : t.curves) peak = std::max(peak, c.peak_bytes);
    if (overlay)
        for (const auto& c : overlay->curves) peak = std::max(peak, c.peak_bytes);
    if (t.oom) peak = std::max(peak, t.oom->in_use_bytes);
    // The capacity line only when it is on the same scale as the use (an SSD's terabytes would
    // flatten a few gigabytes to nothing).
    const bool show_cap = t.capacity_bytes > 0 && t.capacity_bytes < 3 * std::max(peak, 1.0);
    const double max_y = std::max(1.0, (show_cap ? std::max(peak, t.capacity_bytes) : peak) * 1.08);
    auto y_of = [&](double b) { return plot.bottom() - b / max_y * plot.height(); };

    p.setPen(QColor(30, 30, 30));
    QString title = tier_title(t.tier);
    if (t.capacity_bytes > 0) title += QStringLiteral(" · capacity %1").arg(QString::fromStdString(human_bytes(t.capacity_bytes)));
    if (const MemoryCurve* w = fullest(t))
        title += QStringLiteral(" · fullest: %1, peak %2").arg(QString::fromStdString(w->label), QString::fromStdString(human_bytes(w->peak_bytes)));
    QFont bold = p.font();
    bold.setBold(true);
    p.setFont(bold);
    p.drawText(QRect(plot.left(), r.top(), plot.width(), kMemTitle), Qt::AlignVCenter | Qt::AlignLeft,
               p.fontMetrics().elidedText(title, Qt::ElideRight, plot.width()));
    bold.setBold(false);
    p.setFont(bold);

    for (const Tick& tk : linear_ticks(0, max_y, std::max(2, plot.height() / 40), bytes_tick)) {
        const int y = static_cast<int>(std::lround(y_of(tk.value)));
        p.setPen(QColor(0, 0, 0, 25));
        p.drawLine(plot.left(), y, plot.right(), y);
        p.setPen(QColor(60, 60, 60));
        p.drawText(QRect(r.left(), y - 8, kMemLeft - 6, 16), Qt::AlignVCenter | Qt::AlignRight, QString::fromStdString(tk.label));
    }
    for (const Tick& tk : time_ticks(window_, plot.width(), 110)) {
        const int x = plot.left() + static_cast<int>(std::lround(window_.x_of(static_cast<std::int64_t>(tk.value), plot.width())));
        p.setPen(QColor(0, 0, 0, 25));
        p.drawLine(x, plot.top(), x, plot.bottom());
        p.setPen(QColor(60, 60, 60));
        p.drawText(QRect(x - 60, plot.bottom() + 2, 120, kMemXAxis - 2), Qt::AlignHCenter | Qt::AlignTop, QString::fromStdString(tk.label));
    }
    p.setPen(QColor(120, 120, 120));
    p.setBrush(Qt::NoBrush);
    p.drawRect(plot);

    p.save();
    p.setClipRect(plot.adjusted(0, -2, 1, 1));
    p.setRenderHint(QPainter::Antialiasing, true);
    auto draw_set = [&](const TierMemory& set, QColor thin, QColor bold_color, Qt::PenStyle style) {
        for (const auto& c : set.curves) {
            if (c.worst) continue;
            p.setPen(QPen(thin, 1, style));
            p.drawPath(envelope_path(c, window_, plot, max_y));
        }
        for (const auto& c : set.curves)
            if (c.worst) {
                p.setPen(QPen(bold_color, 2.2, style));
                p.drawPath(envelope_path(c, window_, plot, max_y));
            }
    };
    if (overlay) {
        draw_set(t, QColor(78, 121, 167, 110), QColor(48, 91, 157), Qt::DashLine);
        draw_set(*overlay, QColor(242, 142, 43, 110), QColor(222, 112, 13), Qt::SolidLine);
    } else {
        draw_set(t, QColor(120, 140, 170, 140), QColor(200, 55, 45), Qt::SolidLine);
    }
    if (show_cap) {
        const double y = y_of(t.capacity_bytes);
        p.setPen(QPen(QColor(30, 30, 30), 1.5, Qt::DashLine));
        p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
    }
    p.restore();
    if (show_cap) {
        p.setPen(QColor(30, 30, 30));
        p.drawText(QRect(plot.right() - 200, static_cast<int>(y_of(t.capacity_bytes)) - 16, 196, 14), Qt::AlignRight | Qt::AlignBottom,
                   QStringLiteral("capacity %1").arg(QString::fromStdString(human_bytes(t.capacity_bytes))));
    }
    if (t.oom && t.oom->time_ns >= window_.start_ns && t.oom->time_ns <= window_.end_ns) {
        const double x = plot.left() + window_.x_of(t.oom->time_ns, plot.width());
        const double y = std::max<double>(plot.top() + 6, y_of(t.oom->in_use_bytes));
        p.setPen(QPen(QColor(210, 20, 20), 3));
        p.drawLine(QPointF(x - 6, y - 6), QPointF(x + 6, y + 6));
        p.drawLine(QPointF(x - 6, y + 6), QPointF(x + 6, y - 6));
        QFont ff = p.font();
        ff.setBold(true);
        p.setFont(ff);
        const QString text = QStringLiteral("OOM at %1: %2").arg(QString::fromStdString(time_label(t.oom->time_ns, 1000)),
                                                                 QString::fromStdString(t.oom->where));
        const int tw = std::min(plot.width() - 8, p.fontMetrics().horizontalAdvance(text) + 8);
        const int tx = static_cast<int>(std::clamp<double>(x + 10, plot.left() + 4, plot.right() - tw));
        p.fillRect(QRect(tx, static_cast<int>(y) + 8, tw, 16), QColor(255, 255, 255, 220));
        p.setPen(QColor(190, 20, 20));
        p.drawText(QRect(tx + 4, static_cast<int>(y) + 8, tw - 4, 16), Qt::AlignVCenter | Qt::AlignLeft,
                   p.fontMetrics().elidedText(text, Qt::ElideRight, tw - 4));
        ff.setBold(false);
        p.setFont(ff);
    }
}

BreakdownChart::BreakdownChart(QWidget* parent) : ChartWidget(parent) { setMinimumSize(300, 200); }

void BreakdownChart::set_data(std::vector<StageBreakdown> stages, double capacity_bytes) {
    stages_ = std::move(stages);
    capacity_bytes_ = capacity_bytes;
    update();
}

void BreakdownChart::render_chart(QPainter& p, const QRect& area) {
    begin_chart(p, area);
    if (stages_.empty()) return end_empty_chart(p, area, QStringLiteral("No breakdown yet"));
    constexpr int kBottom = 58;
    const QRect plot(area.left() + kMemLeft, area.top() + kMemTitle + 4, area.width() - kMemLeft - kMemRight, area.height() - kMemTitle - 4 - kBottom);
    double max_y = capacity_bytes_;
    const StageBreakdown* worst = &stages_.front();
    for (const auto& s : stages_) {
        max_y = std::max({max_y, s.total(), s.analytical_bytes});
        if (s.worst) worst = &s;
    }
    max_y = std::max(1.0, max_y * 1.08);
    auto y_of = [&](double b) { return plot.bottom() - b / max_y * plot.height(); };
    QFont bold = p.font();
    bold.setBold(true);
    p.setFont(bold);
    p.setPen(QColor(30, 30, 30));
    p.drawText(QRect(plot.left(), area.top(), plot.width(), kMemTitle), Qt::AlignVCenter | Qt::AlignLeft,
               p.fontMetrics().elidedText(QStringLiteral("GPU peak by stage, stacked by what holds it · worst: %1, %2")
                                              .arg(QString::fromStdString(worst->label), QString::fromStdString(human_bytes(worst->total()))),
                                          Qt::ElideRight, plot.width()));
    bold.setBold(false);
    p.setFont(bold);
    for (const Tick& tk : linear_ticks(0, max_y, std::max(2, plot.height() / 40), bytes_tick)) {
        const int y = static_cast<int>(std::lround(y_of(tk.value)));
        p.setPen(QColor(0, 0, 0, 25));
        p.drawLine(plot.left(), y, plot.right(), y);
        p.setPen(QColor(60, 60, 60));
        p.drawText(QRect(area.left(), y - 8, kMemLeft - 6, 16), Qt::AlignVCenter | Qt::AlignRight, QString::fromStdString(tk.label));
    }
    const int n = static_cast<int>(stages_.size());
    const double slot = static_cast<double>(plot.width()) / n;
    const double bar_w = std::max(2.0, std::min(60.0, slot * 0.6));
    for (int i = 0; i < n; ++i) {
        const StageBreakdown& s = stages_[static_cast<std::size_t>(i)];
        const double x = plot.left() + slot * (i + 0.5) - bar_w / 2;
        double base = 0;
        for (int k = 0; k < StageBreakdown::kParts; ++k) {
            const double b = s.bytes[static_cast<std::size_t>(k)];
            if (b <= 0) continue;
            p.fillRect(QRectF(x, y_of(base + b), bar_w, y_of(base) - y_of(base + b)), part_color(k));
            base += b;
        }
        if (s.worst) {
            p.setPen(QPen(QColor(20, 20, 20), 2));
            p.setBrush(Qt::NoBrush);
            p.drawRect(QRectF(x, y_of(base), bar_w, y_of(0) - y_of(base)));
        }
        if (s.analytical_bytes > 0) {  // the closed-form model's figure for the stage
            const double y = y_of(s.analytical_bytes);
            p.setPen(QPen(QColor(20, 20, 20), 2));
            p.drawLine(QPointF(x + bar_w + 1, y), QPointF(x + bar_w + std::min(10.0, slot * 0.18), y));
        }
        if (n <= 32 || i % ((n + 31) / 32) == 0) {
            p.setPen(QColor(60, 60, 60));
            const QString lbl = QString::fromStdString(s.label.substr(0, s.label.find(" (")));
            p.drawText(QRectF(plot.left() + slot * i, plot.bottom() + 2, slot, 16), Qt::AlignHCenter | Qt::AlignTop,
                       p.fontMetrics().elidedText(lbl.startsWith("stage ") && slot < 50 ? lbl.mid(6) : lbl, Qt::ElideRight, static_cast<int>(slot)));
        }
    }
    if (capacity_bytes_ > 0) {
        const double y = y_of(capacity_bytes_);
        p.setPen(QPen(QColor(30, 30, 30), 1.5, Qt::DashLine));
        p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
        p.drawText(QRectF(plot.right() - 200, y - 16, 196, 14), Qt::AlignRight | Qt::AlignBottom,
                   QStringLiteral("capacity %1").arg(QString::fromStdString(human_bytes(capacity_bytes_))));
    }
    p.setPen(QColor(120, 120, 120));
    p.setBrush(Qt::NoBrush);
    p.drawRect(plot);
    // Legend: the parts, then the marks.
    int x = plot.left();
    const int y = area.bottom() - 36;
    for (int k = 0; k < StageBreakdown::kParts; ++k) {
        const QString name = QString::fromLatin1(StageBreakdown::part_name(k));
        p.fillRect(QRect(x, y + 3, 12, 10), part_color(k));
        p.setPen(QColor(40, 40, 40));
        p.drawText(QPoint(x + 16, y + 12), name);
        x += 16 + p.fontMetrics().horizontalAdvance(name) + 14;
    }
    p.setPen(QColor(80, 80, 80));
    p.drawText(QRect(plot.left(), y + 16, plot.width(), 18), Qt::AlignVCenter | Qt::AlignLeft,
               QStringLiteral("outlined: the worst stage · tick right of a bar: the analytical model · dashed: HBM capacity"));
    p.restore();
}

}  // namespace strata::gui
