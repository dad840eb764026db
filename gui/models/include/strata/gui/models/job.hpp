// Library work off the GUI thread (a plan search, a capacity sweep, a what-if simulation), as
// hotspot's JobTracker does it: a newer start() cancels the older run and drops its result, the
// result comes back on the GUI thread, and progress is coalesced so a fast producer cannot flood
// the event loop. The destructor cancels and joins: closing a window never leaves a thread behind.
#pragma once
#include <QObject>
#include <QString>

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace strata::gui {

/// What the work sees: the flag to poll (the planner's SearchOptions::cancel takes it) and a
/// progress sink callable from any thread.
struct JobControl {
    const std::atomic<bool>* cancel = nullptr;
    std::function<void(double fraction, const std::string& phase)> progress;
    bool cancelled() const { return cancel && cancel->load(); }
};

class Job : public QObject {
    Q_OBJECT
public:
    using Work = std::function<void(const JobControl&)>;
    /// Runs on this object's thread after the newest run ended: cancelled, and the error message
    /// ("" if none; an InputError's text reads as the CLI prints it).
    using Done = std::function<void(bool cancelled, const QString& error)>;

    explicit Job(QObject* parent = nullptr);
    ~Job() override;

    void start(Work work, Done done);
    void cancel();
    /// Blocks until every run has ended (the done callbacks of cancelled runs are dropped).
    void wait();
    bool running() const { return running_; }

signals:
    void progressChanged(double fraction, const QString& phase);
    void runningChanged(bool running);

private:
    struct Run;
    Run* find(std::uint64_t generation);
    void finish(std::uint64_t generation, bool cancelled, const QString& error);
    void post_progress(Run& run, double fraction, const std::string& phase);
    std::list<std::unique_ptr<Run>> runs_;
    std::uint64_t generation_ = 0;
    bool running_ = false;
};

}  // namespace strata::gui
