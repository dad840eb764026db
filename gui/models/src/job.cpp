#include "strata/gui/models/job.hpp"

#include <QMetaObject>

#include "strata/common/error.hpp"

namespace strata::gui {

struct Job::Run {
    std::uint64_t generation = 0;
    std::atomic<bool> cancel{false};
    std::thread thread;
    Done done;
    // Progress is coalesced: the worker stores the newest value and posts one update at a time.
    std::mutex mu;
    double fraction = 0;
    std::string phase;
    bool update_pending = false;
};

Job::Job(QObject* parent) : QObject(parent) {}

Job::~Job() {
    for (auto& r : runs_) r->cancel = true;
    wait();
}

void Job::start(Work work, Done done) {
    for (auto& r : runs_) r->cancel = true;  // superseded: its result is dropped in finish()
    auto run = std::make_unique<Run>();
    Run* raw = run.get();
    raw->generation = ++generation_;
    raw->done = std::move(done);
    runs_.push_back(std::move(run));
    raw->thread = std::thread([this, raw, work = std::move(work)] {
        JobControl control;
        control.cancel = &raw->cancel;
        control.progress = [this, raw](double f, const std::string& phase) { post_progress(*raw, f, phase); };
        QString error;
        try {
            work(control);
        } catch (const InputError& e) {
            error = QString::fromStdString(e.what());
        } catch (const std::exception& e) {
            error = QString::fromStdString(e.what());
        }
        const bool cancelled = raw->cancel.load();
        const std::uint64_t gen = raw->generation;  // runs are found again by generation: wait() may have freed this one
        QMetaObject::invokeMethod(this, [this, gen, cancelled, error] { finish(gen, cancelled, error); }, Qt::QueuedConnection);
    });
    if (!running_) {
        running_ = true;
        emit runningChanged(true);
    }
}

Job::Run* Job::find(std::uint64_t generation) {
    for (auto& r : runs_)
        if (r->generation == generation) return r.get();
    return nullptr;
}

void Job::post_progress(Run& run, double fraction, const std::string& phase) {
    {
        const std::lock_guard<std::mutex> lock(run.mu);
        run.fraction = fraction;
        run.phase = phase;
        if (run.update_pending) return;
        run.update_pending = true;
    }
    const std::uint64_t gen = run.generation;
    QMetaObject::invokeMethod(
        this,
        [this, gen] {
            Run* r = find(gen);
            if (!r) return;
            double f = 0;
            std::string ph;
            {
                const std::lock_guard<std::mutex> lock(r->mu);
                f = r->fraction;
                ph = r->phase;
                r->update_pending = false;
            }
            if (gen == generation_) emit progressChanged(f, QString::fromStdString(ph));
        },
        Qt::QueuedConnection);
}

void Job::finish(std::uint64_t generation, bool cancelled, const QString& error) {
    Run* run = find(generation);
    if (!run) return;  // already joined by wait()
    if (run->thread.joinable()) run->thread.join();
    Done done = generation == generation_ ? std::move(run->done) : Done{};
    runs_.remove_if([run](const std::unique_ptr<Run>& r) { return r.get() == run; });
    if (runs_.empty() && running_) {
        running_ = false;
        emit runningChanged(false);
    }
    if (done) done(cancelled, error);
}

void Job::cancel() {
    for (auto& r : runs_) r->cancel = true;
}

void Job::wait() {
    for (auto& r : runs_)
        if (r->thread.joinable()) r->thread.join();
    // The queued finish() calls of these runs will find nothing left to do.
    runs_.clear();
    if (running_) {
        running_ = false;
        emit runningChanged(false);
    }
}

}  // namespace strata::gui
