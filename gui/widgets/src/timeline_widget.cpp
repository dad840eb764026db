#include "timeline_widget.hpp"

#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>

#include <map>

#include "strata/common/text.hpp"
#include "strata/gui/models/axis.hpp"

namespace strata::gui {

namespace {

constexpr int kRowHeight = 16;
constexpr int kAxisHeight = 24;
constexpr int kLegendHeight = 40;
constexpr int kGutterWidth = 250;

QColor blend(const QColor& c, const QColor& to, double f) {
    return QColor::fromRgbF(static_cast<float>(c.redF() * (1 - f) + to.redF() * f), static_cast<float>(c.greenF() * (1 - f) + to.greenF() * f),
                            static_cast<float>(c.blueF() * (1 - f) + to.blueF() * f));
}

QColor bar_color(BarClass cls, std::uint8_t flags, bool faded) {
    QColor c = class_color(cls);
    if (flags & kBackward) c = c.darker(130);
    return faded ? blend(c, Qt::white, 0.6) : c;
}

}  // namespace

TimelineWidget::TimelineWidget(QWidget* parent) : ChartWidget(parent) {
    setFocusPolicy(Qt::StrongFocus);
    setMinimumSize(600, 200);
}

void TimelineWidget::set_timeline(std::shared_ptr<const Timeline> t, bool keep_window) {
    timeline_ = std::move(t);
    busy_ = timeline_ ? timeline_->busy_by_class() : decltype(busy_){};
    shade_.clear();
    if (timeline_)
        for (std::size_t r = 0; r < timeline_->rows().size(); ++r)
            shade_.push_back(r == 0 ? 0 : shade_.back() ^ (timeline_->rows()[r - 1].rank != timeline_->rows()[r].rank ? 1 : 0));
    shown_ = timeline_ ? filtered_rows(*timeline_, filter_) : std::vector<std::size_t>{};
    if (!keep_window || !timeline_ || window_.end_ns > std::max(timeline_->end_ns(), TimeWindow::kMinWindowNs)) fit();
    first_row_ = std::clamp(first_row_, 0, std::max(0, static_cast<int>(shown_.size()) - 1));
    update();
}

void TimelineWidget::set_row_filter(RowFilter f) {
    filter_ = f;
    shown_ = timeline_ ? filtered_rows(*timeline_, filter_) : std::vector<std::size_t>{};
    first_row_ = 0;
    update();
}

void TimelineWidget::fit() {
    window_ = TimeWindow{0, std::max<std::int64_t>(TimeWindow::kMinWindowNs, timeline_ ? timeline_->end_ns() : 1)};
    emit windowChanged();
    update();
}

void TimelineWidget::set_window(const TimeWindow& w) {
    const std::int64_t limit = std::max<std::int64_t>(TimeWindow::kMinWindowNs, timeline_ ? timeline_->end_ns() : 1);
    const std::int64_t len = std::clamp(w.length_ns(), TimeWindow::kMinWindowNs, limit);
    const std::int64_t start = std::clamp<std::int64_t>(w.start_ns, 0, limit - len);
    window_ = TimeWindow{start, start + len};
    emit windowChanged();
    update();
}

void TimelineWidget::set_highlight_critical(bool on) {
    highlight_critical_ = on;
    update();
}

void TimelineWidget::set_first_row(int row) {
    const int rows = static_cast<int>(shown_.size());
    first_row_ = std::clamp(row, 0, std::max(0, rows - 1));
    update();
}

TimelineWidget::Layout TimelineWidget::layout_for(const QRect& a) const {
    Layout l;
    l.axis = QRect(a.left() + kGutterWidth, a.top(), a.width() - kGutterWidth, kAxisHeight);
    l.legend = QRect(a.left(), a.bottom() - kLegendHeight + 1, a.width(), kLegendHeight);
    l.plot = QRect(a.left() + kGutterWidth, a.top() + kAxisHeight, a.width() - kGutterWidth, a.height() - kAxisHeight - kLegendHeight);
    l.gutter = QRect(a.left(), l.plot.top(), kGutterWidth, l.plot.height());
    const int rows = std::max<int>(1, static_cast<int>(shown_.size()));
    l.row_h = std::clamp(l.plot.height() / rows, kRowHeight, 2 * kRowHeight);
    l.rows_visible = std::max(0, l.plot.height() / l.row_h);
    return l;
}

void TimelineWidget::render_chart(QPainter& p, const QRect& area) {
    begin_chart(p, area);
    const Layout l = layout_for(area);
    if (!timeline_ || timeline_->rows().empty())
        return end_empty_chart(p, area, QStringLiteral("No timeline yet: open a scenario, or pick a plan"));
    paint_rows(p, l);
    paint_axis(p, l);
    paint_legend(p, l);
    p.restore();
}

void TimelineWidget::paint_rows(QPainter& p, const Layout& l) const {
    const auto& rows = timeline_->rows();
    const double width = l.plot.width();
    const int last = std::min(static_cast<int>(shown_.size()), first_row_ + l.rows_visible);
    const bool fade = highlight_critical_;
    // Bars of one style are drawn in one call: a frame has up to a few hundred thousand of them.
    std::map<std::pair<int, int>, QVector<QRectF>> batches;  // (class, flags) -> rects
    QVector<QRectF> waits, hatched, critical_outline, critical_line;
    std::map<std::pair<int, int>, QVector<QRectF>> critical;
    p.setClipRect(l.plot.united(l.gutter));
    // The stream names take the room they need (an overlay's "compute · predicted" is long); the
    // rank label gets the rest of the gutter.
    int stream_w = 60;
    for (int d = first_row_; d < last; ++d) {
        const auto& row = rows[shown_[static_cast<std::size_t>(d)]];
        stream_w = std::max(stream_w, p.fontMetrics().horizontalAdvance(QString::fromStdString(row.stream + (row.tag.empty() ? "" : " · " + row.tag))) + 2);
    }
    stream_w = std::min(stream_w, kGutterWidth - 80);
    for (int d = first_row_; d < last; ++d) {
        const std::size_t r = shown_[static_cast<std::size_t>(d)];
        const auto& row = rows[r];
        const int rh = l.row_h;
        const int y = l.plot.top() + (d - first_row_) * rh;
        const bool new_rank = d == first_row_ || rows[shown_[static_cast<std::size_t>(d - 1)]].rank != row.rank;
        // Alternate shading per rank makes stages easy to tell apart.
        const QColor bg = shade_[r] ? QColor(238, 241, 246) : QColor(248, 248, 250);
        p.fillRect(QRect(l.gutter.left(), y, l.gutter.width() + l.plot.width(), rh), bg);
        if (row.tag == "measured") p.fillRect(QRect(l.plot.left(), y, l.plot.width(), rh), QColor(255, 248, 235));
        p.setPen(QColor(40, 40, 40));
        const QString stream = QString::fromStdString(row.stream) + (row.tag.empty() ? QString() : " · " + QString::fromStdString(row.tag));
        if (new_rank) {
            p.drawText(QRect(l.gutter.left() + 4, y, kGutterWidth - stream_w - 8, rh), Qt::AlignVCenter | Qt::AlignLeft,
                       p.fontMetrics().elidedText(QString::fromStdString(row.rank_label), Qt::ElideRight, kGutterWidth - stream_w - 8));
            p.setPen(QColor(200, 200, 210));
            p.drawLine(l.gutter.left(), y, l.plot.right(), y);
            p.setPen(QColor(40, 40, 40));
        }
        p.drawText(QRect(l.gutter.right() - stream_w - 4, y, stream_w, rh), Qt::AlignVCenter | Qt::AlignRight, stream);
        for (const Bar& b : timeline_->bars(r, window_, width)) {
            const double x0 = l.plot.left() + std::max(0.0, b.x0);
            const double w = std::max(1.0, std::min(width, b.x1) - std::max(0.0, b.x0));
            if (b.cls == BarClass::wait) {
                waits.push_back(QRectF(x0, y + rh / 2.0 - 1, w, 2));
                continue;
            }
            const QRectF rect(x0, y + 2, w, rh - 4);
            batches[{static_cast<int>(b.cls), b.flags & kBackward}].push_back(rect);
            if (b.flags & kRecompute) hatched.push_back(rect);
        }
        if (!fade) continue;
        for (const Bar& b : timeline_->critical_bars(r, window_, width)) {
            const double x0 = l.plot.left() + std::max(0.0, b.x0);
            const double w = std::max(1.0, std::min(width, b.x1) - std::max(0.0, b.x0));
            critical[{static_cast<int>(b.cls), b.flags & kBackward}].push_back(QRectF(x0, y + 2, w, rh - 6));
            // The path itself: a red line under its bars, unbroken where they touch.
            if (!critical_line.empty() && critical_line.back().top() == y + rh - 4 && x0 <= critical_line.back().right() + 1.0)
                critical_line.back().setRight(std::max(critical_line.back().right(), x0 + w));
            else
                critical_line.push_back(QRectF(x0, y + rh - 4, w, 3));
            if (w >= 6) critical_outline.push_back(QRectF(x0, y + 2, w, rh - 6));
        }
    }
    p.setClipRect(l.plot);
    p.setPen(Qt::NoPen);
    p.setBrush(QColor(170, 170, 170));
    p.drawRects(waits);
    for (const auto& [key, rects] : batches) {
        p.setBrush(bar_color(static_cast<BarClass>(key.first), static_cast<std::uint8_t>(key.second), fade));
        p.drawRects(rects);
    }
    p.setBrush(QBrush(QColor(255, 255, 255, 150), Qt::BDiagPattern));
    p.drawRects(hatched);
    for (const auto& [key, rects] : critical) {
        p.setBrush(bar_color(static_cast<BarClass>(key.first), static_cast<std::uint8_t>(key.second), false));
        p.drawRects(rects);
    }
    p.setBrush(QColor(200, 25, 25));
    p.drawRects(critical_line);
    p.setBrush(Qt::NoBrush);
    p.setPen(QPen(QColor(20, 20, 20), 1));
    p.drawRects(critical_outline);
    p.setClipping(false);
    if (last - first_row_ < static_cast<int>(shown_.size())) {
        p.setPen(Qt::darkGray);
        p.drawText(l.gutter.adjusted(4, 0, -4, 0), Qt::AlignBottom | Qt::AlignLeft,
                   QStringLiteral("rows %1-%2 of %3 (shift+wheel)").arg(first_row_ + 1).arg(last).arg(shown_.size()));
    }
}

void TimelineWidget::paint_axis(QPainter& p, const Layout& l) const {
    p.setPen(QColor(60, 60, 60));
    p.drawLine(l.axis.bottomLeft(), l.axis.bottomRight());
    for (const Tick& t : time_ticks(window_, l.axis.width(), 110)) {
        const int x = l.axis.left() + static_cast<int>(std::lround(window_.x_of(static_cast<std::int64_t>(t.value), l.axis.width())));
        p.setPen(QColor(60, 60, 60));
        p.drawLine(x, l.axis.bottom() - 5, x, l.axis.bottom());
        const int lx = std::clamp(x - 60, l.axis.left(), l.axis.right() - 120);
        p.drawText(QRect(lx, l.axis.top(), 120, l.axis.height() - 6), (lx == x - 60 ? Qt::AlignHCenter : lx == l.axis.left() ? Qt::AlignLeft : Qt::AlignRight) | Qt::AlignBottom,
                   QString::fromStdString(t.label));
        p.setPen(QColor(0, 0, 0, 28));
        p.drawLine(x, l.plot.top(), x, l.plot.bottom());
    }
    p.setPen(QColor(40, 40, 40));
    const QString span = QString::fromStdString(time_label(window_.start_ns, window_.length_ns() / 10) + " to " +
                                                time_label(window_.end_ns, window_.length_ns() / 10) + "  (" +
                                                human_seconds(static_cast<double>(window_.length_ns()) * 1e-9) + " shown)");
    p.drawText(QRect(l.gutter.left() + 4, l.axis.top(), kGutterWidth - 8, l.axis.height()), Qt::AlignVCenter | Qt::AlignLeft, span);
}

void TimelineWidget::paint_legend(QPainter& p, const Layout& l) const {
    p.fillRect(l.legend, QColor(250, 250, 250));
    p.setPen(QColor(210, 210, 210));
    p.drawLine(l.legend.topLeft(), l.legend.topRight());
    int x = l.legend.left() + 6;
    int y = l.legend.top() + 4;
    const QFontMetrics fm = p.fontMetrics();
    for (int c = 0; c < kBarClassCount; ++c) {
        if (busy_[static_cast<std::size_t>(c)] == 0) continue;
        const QString name = QString::fromLatin1(to_string(static_cast<BarClass>(c)));
        const int w = 16 + fm.horizontalAdvance(name) + 14;
        if (x + w > l.legend.right()) x = l.legend.left() + 6, y += 16;
        p.fillRect(QRect(x, y + 2, 12, 10), class_color(static_cast<BarClass>(c)));
        p.setPen(QColor(40, 40, 40));
        p.drawText(QPoint(x + 16, y + 11), name);
        x += w;
    }
    p.setPen(QColor(90, 90, 90));
    p.drawText(QRect(l.legend.left() + 6, l.legend.top() + 20, l.legend.width() - 12, 18), Qt::AlignVCenter | Qt::AlignLeft,
               highlight_critical_ ? QStringLiteral("darker: backward · hatched: recompute · red underline, full colour: the critical path "
                                                    "(the rest faded) · grey line: stream waiting")
                                   : QStringLiteral("darker: backward · hatched: recompute · grey line: stream waiting"));
}

std::optional<std::pair<std::size_t, std::size_t>> TimelineWidget::span_at(QPoint pos) const {
    if (!timeline_) return std::nullopt;
    const Layout l = layout_for(rect());
    if (!l.plot.contains(pos)) return std::nullopt;
    const int d = first_row_ + (pos.y() - l.plot.top()) / l.row_h;
    if (d < 0 || d >= static_cast<int>(shown_.size())) return std::nullopt;
    const std::size_t r = shown_[static_cast<std::size_t>(d)];
    const double ns_per_px = static_cast<double>(window_.length_ns()) / std::max(1, l.plot.width());
    const std::int64_t t = window_.t_of(pos.x() - l.plot.left(), l.plot.width());
    auto s = timeline_->span_at(r, t, static_cast<std::int64_t>(2 * ns_per_px));
    if (!s) return std::nullopt;
    return std::make_pair(r, *s);
}

QString TimelineWidget::describe(std::size_t row, std::size_t span) const {
    const SpanInfo i = timeline_->info(row, span);
    QString s = QStringLiteral("<b>%1</b> (%2)<br>%3 · %4%5<br>%6 to %7: <b>%8</b>")
                    .arg(QString::fromStdString(i.name).toHtmlEscaped(), QString::fromStdString(i.label).toHtmlEscaped(),
                         QString::fromStdString(i.rank_label), QString::fromStdString(i.stream),
                         i.critical ? QStringLiteral(" · <b>on the critical path</b>") : QString(),
                         QString::fromStdString(time_label(i.start_ns, 1)), QString::fromStdString(time_label(i.end_ns, 1)),
                         QString::fromStdString(human_seconds(static_cast<double>(i.end_ns - i.start_ns) * 1e-9)));
    s += QStringLiteral("<br>phase %1").arg(QString::fromStdString(i.phase.empty() ? "-" : i.phase));
    if (i.layer >= 0) s += QStringLiteral(" · layer %1").arg(i.layer);
    if (i.microbatch >= 0) s += QStringLiteral(" · micro-batch %1").arg(i.microbatch);
    if (i.flops > 0) s += QStringLiteral("<br>%1 FLOPs").arg(QString::fromStdString(fmt_sci(i.flops, 3)));
    if (i.bytes > 0) s += QStringLiteral("%1%2").arg(i.flops > 0 ? " · " : "<br>", QString::fromStdString(human_bytes(i.bytes)));
    s += QStringLiteral("<br>cost from: %1").arg(QString::fromStdString(i.provenance.empty() ? "-" : i.provenance));
    return s;
}

void TimelineWidget::zoom_at(double factor, int x) {
    const Layout l = layout_for(rect());
    const std::int64_t anchor = window_.t_of(std::clamp(x - l.plot.left(), 0, l.plot.width()), l.plot.width());
    window_ = window_.zoomed(factor, anchor, timeline_ ? timeline_->end_ns() : 1);
    emit windowChanged();
    update();
}

void TimelineWidget::wheelEvent(QWheelEvent* e) {
    const QPoint d = e->angleDelta();
    if (e->modifiers() & Qt::ShiftModifier) {
        set_first_row(first_row_ - (d.y() != 0 ? d.y() : d.x()) / 40);
    } else if (d.x() != 0 && d.y() == 0) {
        window_ = window_.panned(-d.x() * window_.length_ns() / 1200, timeline_ ? timeline_->end_ns() : 1);
        emit windowChanged();
        update();
    } else {
        zoom_at(std::pow(0.85, d.y() / 120.0), static_cast<int>(e->position().x()));
    }
    e->accept();
}

void TimelineWidget::mousePressEvent(QMouseEvent* e) {
    if (e->button() != Qt::LeftButton) return;
    drag_from_ = e->pos();
    drag_window_ = window_;
    drag_row_ = first_row_;
    setCursor(Qt::ClosedHandCursor);
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* e) {
    if (drag_from_ && timeline_) {
        const Layout l = layout_for(rect());
        const QPoint d = e->pos() - *drag_from_;
        const auto dt = static_cast<std::int64_t>(-static_cast<double>(d.x()) * drag_window_.length_ns() / std::max(1, l.plot.width()));
        window_ = drag_window_.panned(dt, timeline_->end_ns());
        first_row_ = std::clamp(drag_row_ - d.y() / l.row_h, 0, std::max(0, static_cast<int>(shown_.size()) - 1));
        emit windowChanged();
        update();
        return;
    }
    if (auto hit = span_at(e->pos())) {
        const QString text = describe(hit->first, hit->second);
        QToolTip::showText(e->globalPosition().toPoint(), text, this);
        emit spanHovered(text);
    } else {
        QToolTip::hideText();
    }
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent*) {
    drag_from_.reset();
    unsetCursor();
}

void TimelineWidget::mouseDoubleClickEvent(QMouseEvent*) { fit(); }

void TimelineWidget::keyPressEvent(QKeyEvent* e) {
    const std::int64_t limit = timeline_ ? timeline_->end_ns() : 1;
    const int mid = layout_for(rect()).plot.center().x();
    switch (e->key()) {
        case Qt::Key_Plus:
        case Qt::Key_Equal: zoom_at(0.5, mid); break;
        case Qt::Key_Minus: zoom_at(2.0, mid); break;
        case Qt::Key_Left: set_window(window_.panned(-window_.length_ns() / 5, limit)); break;
        case Qt::Key_Right: set_window(window_.panned(window_.length_ns() / 5, limit)); break;
        case Qt::Key_Up: set_first_row(first_row_ - 1); break;
        case Qt::Key_Down: set_first_row(first_row_ + 1); break;
        case Qt::Key_Home: fit(); break;
        default: ChartWidget::keyPressEvent(e);
    }
}

}  // namespace strata::gui
