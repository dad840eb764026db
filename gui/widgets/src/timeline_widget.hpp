// The timeline: a row per (rank, stream), bars coloured by class (darker: backward, hatched:
// recompute), the critical path outlined over faded bars. Wheel zooms around the cursor (down to a
// microsecond across the view), drag pans, shift+wheel scrolls rows, double-click fits; hover shows
// the span's instruction. Painting asks the model for the visible range only.
#pragma once
#include <memory>
#include <optional>

#include "chart_widget.hpp"
#include "strata/gui/models/timeline.hpp"

namespace strata::gui {

class TimelineWidget : public ChartWidget {
    Q_OBJECT
public:
    explicit TimelineWidget(QWidget* parent = nullptr);
    /// keep_window: keep the visible range (a what-if of the same scenario) when it still fits.
    void set_timeline(std::shared_ptr<const Timeline> t, bool keep_window = false);
    const Timeline* timeline() const { return timeline_.get(); }
    void set_window(const TimeWindow& w);
    const TimeWindow& window() const { return window_; }
    void fit();
    void set_highlight_critical(bool on);
    void set_row_filter(RowFilter f);
    void set_first_row(int row);
    int first_row() const { return first_row_; }
    void render_chart(QPainter& p, const QRect& area) override;
    /// The span under a widget position (for tests and the hover).
    std::optional<std::pair<std::size_t, std::size_t>> span_at(QPoint pos) const;
    /// A multi-line description of a span (the tooltip and the details pane).
    QString describe(std::size_t row, std::size_t span) const;

signals:
    void windowChanged();
    void spanHovered(const QString& details);

protected:
    void wheelEvent(QWheelEvent* e) override;
    void mousePressEvent(QMouseEvent* e) override;
    void mouseMoveEvent(QMouseEvent* e) override;
    void mouseReleaseEvent(QMouseEvent* e) override;
    void mouseDoubleClickEvent(QMouseEvent* e) override;
    void keyPressEvent(QKeyEvent* e) override;
    QString chart_name() const override { return QStringLiteral("timeline"); }

private:
    struct Layout {
        QRect plot, gutter, axis, legend;
        int row_h = 16;        ///< rows grow to fill the height when there are few of them
        int rows_visible = 0;
    };
    Layout layout_for(const QRect& area) const;
    void paint_rows(QPainter& p, const Layout& l) const;
    void paint_axis(QPainter& p, const Layout& l) const;
    void paint_legend(QPainter& p, const Layout& l) const;
    void zoom_at(double factor, int x);

    std::shared_ptr<const Timeline> timeline_;
    std::array<std::int64_t, kBarClassCount> busy_{};
    std::vector<int> shade_;           ///< per row: 0/1 alternating with the rank, for the background
    RowFilter filter_ = RowFilter::all;
    std::vector<std::size_t> shown_;   ///< the rows the filter keeps; display row i is rows()[shown_[i]]
    TimeWindow window_;
    int first_row_ = 0;
    bool highlight_critical_ = true;
    std::optional<QPoint> drag_from_;
    TimeWindow drag_window_;
    int drag_row_ = 0;
};

}  // namespace strata::gui
