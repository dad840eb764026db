// A `strata validate` report (schema "strata.validate/1", written by `strata validate --json`):
// step time, time per instruction class and memory per tier, predicted against measured, plus
// the two Chrome traces it points at (paths relative to the report's folder). Read as strictly
// as every other input: an unknown key, a missing field or a wrong type names the file, the JSON
// path and the rule.
#pragma once
#include <QAbstractTableModel>

#include <string>
#include <vector>

#include "strata/gui/models/memory_view.hpp"
#include "strata/gui/models/timeline.hpp"

namespace strata::gui {

struct Compared {
    double predicted = 0, measured = 0, error_pct = 0;
};

struct ValidationReport {
    std::string file;  ///< the report's path
    std::string scenario, backend, device;
    std::string calibration;  ///< optional: the cost multipliers the prediction used (strata validate writes it)
    int steps = 0;
    Compared step_time_s;
    struct ClassRow {
        std::string cls, provenance;
        Compared seconds;
    };
    std::vector<ClassRow> classes;
    struct MemoryRow {
        sim::Tier tier = sim::Tier::gpu;
        Compared bytes;
    };
    std::vector<MemoryRow> memory;
    std::string predicted_trace, measured_trace;  ///< resolved against the report's folder
};

ValidationReport validation_report_from_json_text(const std::string& text, const std::string& file);
ValidationReport load_validation_report(const std::string& path);

/// The report with its traces read: both timelines, their overlay, and memory over time of each
/// (from the traces' counter tracks).
struct Validation {
    ValidationReport report;
    Timeline predicted, measured, overlay;
    std::vector<TierMemory> predicted_memory, measured_memory;
};
Validation load_validation(const std::string& report_path);

/// The per-class table: class, predicted, measured, error, provenance (step time first).
class ValidationTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Class, Predicted, Measured, Error, Provenance, ColumnCount };
    explicit ValidationTableModel(QObject* parent = nullptr);
    void set_report(const ValidationReport& r);
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

private:
    struct Row {
        std::string name, provenance;
        Compared c;
        bool bytes = false;
    };
    std::vector<Row> rows_;
};

}  // namespace strata::gui
