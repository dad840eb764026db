#include "chart_widget.hpp"

#include <QBuffer>
#include <QContextMenuEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QImage>
#include <QMenu>
#include <QMessageBox>
#include <QPainter>
#include <QSaveFile>
#include <QSvgGenerator>

namespace strata::gui {

QColor class_color(BarClass c) {
    switch (c) {
        case BarClass::gemm: return {78, 121, 167};
        case BarClass::attention: return {118, 183, 178};
        case BarClass::memory_bound: return {176, 122, 161};
        case BarClass::optimizer: return {156, 117, 95};
        case BarClass::tp_comm: return {242, 142, 43};
        case BarClass::cp_comm: return {237, 201, 72};
        case BarClass::ep_comm: return {255, 157, 167};
        case BarClass::dp_comm: return {225, 87, 89};
        case BarClass::pp_p2p: return {89, 161, 79};
        case BarClass::copy: return {186, 176, 172};
        case BarClass::ssd: return {127, 127, 127};
        case BarClass::cpu_optimizer: return {140, 86, 75};
        case BarClass::wait: return {225, 225, 225};
        default: return {200, 200, 200};
    }
}

QColor series_color(int n) {
    static const QColor colors[] = {{78, 121, 167}, {225, 87, 89}, {89, 161, 79}, {242, 142, 43}, {176, 122, 161}, {118, 183, 178}};
    return colors[static_cast<std::size_t>(n) % (sizeof colors / sizeof colors[0])];
}

ChartWidget::ChartWidget(QWidget* parent) : QWidget(parent) {
    setAttribute(Qt::WA_OpaquePaintEvent);
    setMouseTracking(true);
}

void ChartWidget::begin_chart(QPainter& p, const QRect& area) {
    p.save();
    p.fillRect(area, Qt::white);
    QFont f = p.font();
    f.setPointSizeF(8.5);
    p.setFont(f);
}

void ChartWidget::end_empty_chart(QPainter& p, const QRect& area, const QString& message) {
    p.setPen(Qt::darkGray);
    p.drawText(area, Qt::AlignCenter, message);
    p.restore();
}

void ChartWidget::paintEvent(QPaintEvent*) {
    QPainter p(this);
    render_chart(p, rect());
}

namespace {

/// Renders into bytes first: only a complete picture reaches the file.
QByteArray render_bytes(const QString& path, QSize size, const std::function<void(QPainter&, const QRect&)>& paint, QString& error) {
    QByteArray bytes;
    QBuffer buf(&bytes);
    buf.open(QIODevice::WriteOnly);
    const QRect area(QPoint(0, 0), size);
    if (QFileInfo(path).suffix().compare("svg", Qt::CaseInsensitive) == 0) {
        QSvgGenerator svg;
        svg.setOutputDevice(&buf);
        svg.setSize(size);
        svg.setViewBox(area);
        svg.setTitle(QFileInfo(path).completeBaseName());
        svg.setDescription(QStringLiteral("strata-gui"));
        QPainter p(&svg);
        paint(p, area);
    } else if (QFileInfo(path).suffix().compare("png", Qt::CaseInsensitive) == 0) {
        QImage img(size, QImage::Format_ARGB32_Premultiplied);
        img.fill(Qt::white);
        {
            QPainter p(&img);
            p.setRenderHint(QPainter::Antialiasing, true);
            p.setRenderHint(QPainter::TextAntialiasing, true);
            paint(p, area);
        }
        img.save(&buf, "PNG");
    } else {
        error = path + QStringLiteral(": the file name must end in .png or .svg");
    }
    return bytes;
}

QString write_all(const QString& path, const QByteArray& bytes) {
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly)) return path + QStringLiteral(": cannot be written (") + f.errorString() + ")";
    f.write(bytes);
    if (!f.commit()) return path + QStringLiteral(": cannot be written (") + f.errorString() + ")";
    return {};
}

}  // namespace

QString ChartWidget::export_to(const QString& path, QSize size) {
    if (size.isEmpty()) size = this->size();
    QString error;
    const QByteArray bytes = render_bytes(path, size, [this](QPainter& p, const QRect& r) { render_chart(p, r); }, error);
    return error.isEmpty() ? write_all(path, bytes) : error;
}

QString save_widget_image(QWidget* w, const QString& path) {
    QString error;
    const QByteArray bytes = render_bytes(path, w->size(), [w](QPainter& p, const QRect&) { w->render(&p); }, error);
    return error.isEmpty() ? write_all(path, bytes) : error;
}

void ChartWidget::contextMenuEvent(QContextMenuEvent* e) {
    QMenu menu(this);
    QAction* png = menu.addAction(QStringLiteral("Export as PNG..."));
    QAction* svg = menu.addAction(QStringLiteral("Export as SVG..."));
    QAction* picked = menu.exec(e->globalPos());
    if (!picked) return;
    const bool is_svg = picked == svg;
    (void)png;
    const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export chart"), chart_name() + (is_svg ? ".svg" : ".png"),
                                                      is_svg ? QStringLiteral("SVG (*.svg)") : QStringLiteral("PNG (*.png)"));
    if (path.isEmpty()) return;
    const QString error = export_to(path);
    if (!error.isEmpty()) QMessageBox::warning(this, QStringLiteral("Export"), error);
}

}  // namespace strata::gui
