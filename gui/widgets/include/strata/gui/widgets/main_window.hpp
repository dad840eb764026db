// strata-gui's window: the scenario editor, the plan explorer, the timeline, memory, capacity and
// validation views as tabs over one ScenarioDocument. It wires: work goes to the models library
// and the planner in background jobs, results come back to the pages. The public calls are what
// the menus do, so the headless mode (--screenshot) and the smoke test drive the same paths.
#pragma once
#include <QMainWindow>

#include <memory>

#include "strata/gui/models/capacity_view.hpp"
#include "strata/gui/models/timeline.hpp"
#include "strata/gui/models/whatif.hpp"
#include "strata/gui/models/workbench.hpp"

namespace strata::gui {

class ScenarioDocument;
class ScenarioPage;
class ExplorerPage;
class TimelinePage;
class MemoryPage;
class CapacityPage;
class ValidationPage;
class Job;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    /// Opens the hardware database (throws RuntimeError or InputError if it cannot).
    explicit MainWindow(const Settings& settings, QWidget* parent = nullptr);
    ~MainWindow() override;

    /// Each returns "" or the message shown (the CLI's words for bad input); on failure nothing changes.
    QString open_scenario(const QString& path);
    QString open_specs(const QString& model, const QString& cluster, const QString& plan);
    QString open_report(const QString& path);
    QString save_scenario(const QString& path);

    void start_search(int global_batch, bool offload);
    void cancel_search();
    void start_capacity(const CapacityRequest& r);
    void cancel_capacity();
    /// Opens a point of the last sweep as a click on it does: its cluster and plan become the
    /// scenario's. False if there is no such feasible point.
    bool open_capacity_point(int index);
    const planner::CapacityResult* last_capacity() const { return last_capacity_.get(); }
    /// Edits one scenario field ("plan.tp") as its editor does; returns the problem now shown beside
    /// it ("" if none).
    QString edit_field(const QString& path, const QString& value);
    /// Opens the n-th plan of the table (0-based, in the planner's order) as a double-click does.
    bool open_ranked_plan(int n);
    /// Moves one what-if knob as its control does; returns the error shown beside it ("" if none).
    QString set_knob(Knob k, const QString& value, bool keep_gpus = true);
    /// Writes the last complete search as the planner's JSON (refused while one runs or was cancelled).
    QString export_plans(const QString& path);
    /// Writes the plans to `path` when the running (or next) search completes; a search that is
    /// cancelled, or a window closed before it ends, writes nothing.
    void export_plans_when_done(const QString& path) { auto_export_ = path; }

    /// Any background work (simulation, search, sweep) still running.
    bool busy() const;
    /// Runs the event loop until nothing is running or the timeout passes; returns !busy().
    bool wait_idle(int timeout_ms);
    /// Tab names: scenario, plans, timeline, memory, capacity, validation.
    static QStringList view_names();
    bool show_view(const QString& name);
    /// The visible view's page as .png or .svg (a screenshot), through QSaveFile.
    QString save_view_image(const QString& path);
    /// The visible view's chart alone (timeline, memory over time, capacity, validation overlay) as
    /// .png or .svg; "" or why not.
    QString export_chart(const QString& path);
    /// Sets the timeline's visible range and rows (headless screenshots of a zoomed region).
    void set_timeline_window(std::int64_t start_ns, std::int64_t end_ns);
    void set_timeline_rows(RowFilter f);

    ScenarioDocument& document() { return *doc_; }
    ExplorerPage* explorer() { return explorer_; }
    ScenarioPage* scenario_page() { return scenario_page_; }
    const Snapshot* current() const { return current_.out ? &current_ : nullptr; }
    /// The last error a background job reported ("" if none): headless runs print it.
    const QString& last_error() const { return last_error_; }

protected:
    void closeEvent(QCloseEvent* e) override;

private:
    void build_menus();
    void document_changed();
    void resimulate();
    void simulate(const sim::PlanSpec& plan, bool as_base);
    void show_snapshot(Snapshot s, bool as_base);
    void activate_plan(int row);
    void report(const QString& message, bool error);
    void refuse(const QString& title, const QString& message);  ///< a file not opened: says why
    void update_title();

    Settings settings_;
    std::unique_ptr<Hardware> hw_;
    std::unique_ptr<ScenarioDocument> doc_;
    ScenarioPage* scenario_page_ = nullptr;
    ExplorerPage* explorer_ = nullptr;
    TimelinePage* timeline_page_ = nullptr;
    MemoryPage* memory_page_ = nullptr;
    CapacityPage* capacity_page_ = nullptr;
    ValidationPage* validation_page_ = nullptr;
    class QTabWidget* tabs_ = nullptr;
    Job* sim_job_ = nullptr;
    Job* search_job_ = nullptr;
    Job* capacity_job_ = nullptr;
    Snapshot current_;
    sim::PlanSpec base_plan_, whatif_plan_;
    bool have_base_ = false;
    std::shared_ptr<const planner::SearchResult> last_search_;  ///< complete searches only
    sim::ModelSpec searched_model_;
    sim::ClusterSpec searched_cluster_;
    std::shared_ptr<const planner::CapacityResult> last_capacity_;
    QString last_error_;
    QString auto_export_;
};

}  // namespace strata::gui
