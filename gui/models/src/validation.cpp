#include "strata/gui/models/validation.hpp"

#include <cmath>
#include <filesystem>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/common/text.hpp"

namespace strata::gui {

namespace {

constexpr const char* kSchema = "strata.validate/1";

double non_negative(JsonReader& r, const std::string& key) {
    const double v = r.num(key);
    if (v < 0) r.fail(key, "must not be negative (got " + describe_json(nlohmann::json(v)) + ")");
    return v;
}

Compared compared(JsonReader& r, const char* predicted, const char* measured) {
    Compared c;
    c.predicted = non_negative(r, predicted);
    c.measured = non_negative(r, measured);
    c.error_pct = r.num("error_pct");
    return c;
}

/// An array of objects at `key`, each read by `fn(reader)` with its own path ("classes[2]").
template <class Fn>
void each_object(JsonReader& r, const std::string& key, Fn&& fn) {
    const nlohmann::json* arr = r.get(key);
    if (!arr) r.fail(key, "is required");
    if (!arr->is_array()) r.fail(key, "must be an array (got " + describe_json(*arr) + ")");
    for (std::size_t i = 0; i < arr->size(); ++i) {
        JsonReader e((*arr)[i], r.file(), r.child_path(key) + "[" + std::to_string(i) + "]");
        fn(e);
        e.reject_unknown();
    }
}

}  // namespace

ValidationReport validation_report_from_json_text(const std::string& text, const std::string& file) {
    const nlohmann::json j = parse_json_text(text, file);
    JsonReader r(j, file, "");
    ValidationReport v;
    v.file = file;
    const std::string schema = r.str("schema");
    if (schema != kSchema) r.fail("schema", "= \"" + schema + "\" is not a report this build reads (" + kSchema + ")");
    v.scenario = r.str("scenario");
    r.choice("backend", {"cpu", "cuda"});
    v.backend = j.at("backend").get<std::string>();
    v.device = r.str("device");
    const std::int64_t steps = r.i64("steps");
    if (steps < 1) r.fail("steps", "must be a positive integer (got " + std::to_string(steps) + ")");
    v.steps = static_cast<int>(std::min<std::int64_t>(steps, 1 << 30));
    v.calibration = r.str_or("calibration", "");
    {
        JsonReader st = r.object("step_time");
        v.step_time_s = compared(st, "predicted_s", "measured_s");
        st.reject_unknown();
    }
    each_object(r, "classes", [&](JsonReader& e) {
        ValidationReport::ClassRow row;
        row.cls = e.str("class");
        row.seconds = compared(e, "predicted_s", "measured_s");
        row.provenance = e.str("provenance");
        v.classes.push_back(std::move(row));
    });
    each_object(r, "memory", [&](JsonReader& e) {
        ValidationReport::MemoryRow row;
        const std::string tier = e.choice("tier", {"gpu", "cpu", "ssd"});
        row.tier = tier == "gpu" ? sim::Tier::gpu : tier == "cpu" ? sim::Tier::cpu : sim::Tier::ssd;
        row.bytes = compared(e, "predicted_bytes", "measured_bytes");
        v.memory.push_back(row);
    });
    const std::filesystem::path dir = std::filesystem::path(file).parent_path();
    auto resolve = [&](const std::string& key) {
        const std::string rel = r.str(key);
        if (rel.empty()) r.fail(key, "must name a trace file");
        const std::filesystem::path p(rel);
        return (p.is_absolute() ? p : dir / p).lexically_normal().string();
    };
    v.predicted_trace = resolve("predicted_trace");
    v.measured_trace = resolve("measured_trace");
    r.reject_unknown();
    return v;
}

ValidationReport load_validation_report(const std::string& path) {
    return validation_report_from_json_text(read_text_file(path), path);
}

Validation load_validation(const std::string& report_path) {
    Validation v;
    v.report = load_validation_report(report_path);
    std::vector<CounterTrack> pc, mc;
    v.predicted = Timeline::from_chrome_trace(read_text_file(v.report.predicted_trace), v.report.predicted_trace, &pc);
    v.measured = Timeline::from_chrome_trace(read_text_file(v.report.measured_trace), v.report.measured_trace, &mc);
    v.overlay = Timeline::overlay(v.predicted, v.measured);
    v.predicted_memory = memory_from_counters(pc, v.predicted);
    v.measured_memory = memory_from_counters(mc, v.measured);
    return v;
}

ValidationTableModel::ValidationTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void ValidationTableModel::set_report(const ValidationReport& r) {
    beginResetModel();
    rows_.clear();
    rows_.push_back({"step time", "", r.step_time_s, false});
    for (const auto& c : r.classes) rows_.push_back({c.cls, c.provenance, c.seconds, false});
    for (const auto& m : r.memory) rows_.push_back({std::string("peak memory, ") + sim::to_string(m.tier), "", m.bytes, true});
    endResetModel();
}

int ValidationTableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(rows_.size()); }
int ValidationTableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant ValidationTableModel::headerData(int section, Qt::Orientation o, int role) const {
    static const char* names[] = {"what", "predicted", "measured", "error", "cost provenance"};
    if (o != Qt::Horizontal || role != Qt::DisplayRole || section < 0 || section >= ColumnCount) return {};
    return QString::fromLatin1(names[section]);
}

QVariant ValidationTableModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= rowCount()) return {};
    const Row& r = rows_[static_cast<std::size_t>(index.row())];
    auto amount = [&](double v) { return QString::fromStdString(r.bytes ? human_bytes(v) : human_seconds(v)); };
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
            case Class: return QString::fromStdString(r.name);
            case Predicted: return amount(r.c.predicted);
            case Measured: return amount(r.c.measured);
            case Error: return QString::asprintf("%+.1f %%", r.c.error_pct);
            case Provenance: return QString::fromStdString(r.provenance);
            default: return {};
        }
    }
    if (role == Qt::UserRole) {  // the numbers, for sorting and for the charts
        switch (index.column()) {
            case Predicted: return r.c.predicted;
            case Measured: return r.c.measured;
            case Error: return r.c.error_pct;
            default: return {};
        }
    }
    if (role == Qt::TextAlignmentRole && index.column() != Class && index.column() != Provenance)
        return static_cast<int>(Qt::AlignRight | Qt::AlignVCenter);
    return {};
}

}  // namespace strata::gui
