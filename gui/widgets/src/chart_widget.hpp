// The base of every chart: it paints through render(), so the screen, a PNG and an SVG get the same
// picture; a context menu exports it; files are written through QSaveFile, so an export that fails
// or is interrupted leaves no partial file. Also the colours every chart shares.
#pragma once
#include <QColor>
#include <QWidget>

#include "strata/gui/models/timeline.hpp"

class QPainter;

namespace strata::gui {

/// Colours of the bar classes, chosen to stay apart for common colour blindness (Tableau 10).
QColor class_color(BarClass c);
/// A series colour for the n-th GPU type or curve.
QColor series_color(int n);

class ChartWidget : public QWidget {
    Q_OBJECT
public:
    explicit ChartWidget(QWidget* parent = nullptr);
    /// Paints the whole chart into `area` of any paint device.
    virtual void render_chart(QPainter& p, const QRect& area) = 0;
    /// Writes the chart as .png or .svg (by the suffix) at `size` (empty: the widget's size).
    /// Returns "" or the reason it could not.
    QString export_to(const QString& path, QSize size = {});

protected:
    void paintEvent(QPaintEvent* e) override;
    void contextMenuEvent(QContextMenuEvent* e) override;
    /// The title used for the export dialog's default file name.
    virtual QString chart_name() const { return QStringLiteral("chart"); }
    /// Every chart's start: save the painter, a white ground, the charts' 8.5 pt font.
    static void begin_chart(QPainter& p, const QRect& area);
    /// A chart with nothing to show: `message` in the middle, and the painter restored.
    static void end_empty_chart(QPainter& p, const QRect& area, const QString& message);
};

/// Writes any widget (a whole page, for screenshots) as .png or .svg through QSaveFile.
QString save_widget_image(QWidget* w, const QString& path);

}  // namespace strata::gui
