// When a kernel may start and how fast it runs: the host issue model (a rank's CPU thread issuing
// instructions in program order, stopped by host_sync), compute/communication interference (a
// running kernel re-timed whenever its rank's communication starts or stops), and the event-heap
// compaction that re-timing needs. The event loop itself is engine.cpp.
#include <cmath>

#include "engine_state.hpp"

namespace strata::sim::detail {

// The host thread issues instructions in program order: each costs host_launch_ns per launch, and
// after a host_sync it waits for that sync to complete on the GPU. Issue times of instructions
// on other streams are remembered as the thread passes them.
bool Engine::host_gate(int r, int s, int i) {
    Host& h = host_[static_cast<std::size_t>(r)];
    auto& issued = host_issue_[static_cast<std::size_t>(r)];
    const auto& instrs = p_.ranks[static_cast<std::size_t>(r)].instrs;
    auto& st = streams_[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)];
    while (h.pos <= static_cast<std::size_t>(i)) {
        if (h.sync >= 0) {
            const std::int64_t done = timing_[static_cast<std::size_t>(r)][static_cast<std::size_t>(h.sync)].end;
            if (done < 0) {
                h.waiters |= static_cast<std::uint16_t>(1u << s);
                st.blocked = true;
                return false;
            }
            h.t = std::max(h.t, done);
            h.sync = -1;
        }
        const Instr& x = instrs[h.pos];
        h.t += static_cast<std::int64_t>(std::ceil(opt_.host_launch_ns * host_launches(x) - 1e-6));
        issued[h.pos] = h.t;
        if (x.kind == InstrKind::host_sync) h.sync = static_cast<int>(h.pos);
        ++h.pos;
    }
    const std::int64_t at = issued[static_cast<std::size_t>(i)];
    if (at <= now_) return true;
    st.blocked = true;
    schedule(at, Ev::host_ready, r, s);
    return false;
}

// The running kernel's progress is settled at every change of its rate, and its end re-scheduled
// under a new version; a kernel that starts at the same instant as a transfer is slowed from that
// instant, whichever the engine processes first.
void Engine::reschedule_kernel(int r) {
    RunningKernel& k = kernel_[static_cast<std::size_t>(r)];
    k.rate = comm_active_[static_cast<std::size_t>(r)] > 0 ? 1.0 / (1.0 + opt_.overlap_slowdown) : 1.0;
    ++k.version;
    const double ns = std::max(0.0, k.remaining_ns) / k.rate;
    schedule(now_ + static_cast<std::int64_t>(std::ceil(ns - 1e-6)), Ev::stream_done, r, static_cast<int>(Stream::compute), k.version);
}

void Engine::comm_changed(int r, int delta) {
    int& n = comm_active_[static_cast<std::size_t>(r)];
    const bool was = n > 0;
    n += delta;
    RunningKernel& k = kernel_[static_cast<std::size_t>(r)];
    if (!k.running || was == (n > 0)) return;
    k.remaining_ns -= static_cast<double>(now_ - k.since_ns) * k.rate;
    k.since_ns = now_;
    reschedule_kernel(r);
    superseded();  // the kernel's previous end
}

bool Engine::stale(const Event& e) const {
    if (e.type == Ev::flow_done) {
        const Flow& fl = flows_[static_cast<std::size_t>(e.a)];
        return !fl.active || fl.version != e.version;
    }
    return e.type == Ev::stream_done && opt_.overlap_slowdown > 0 && e.b == static_cast<int>(Stream::compute) &&
           kernel_[static_cast<std::size_t>(e.a)].version != e.version;
}

void Engine::compact_events() {
    events_.erase(std::remove_if(events_.begin(), events_.end(), [&](const Event& e) { return stale(e); }), events_.end());
    std::make_heap(events_.begin(), events_.end(), EventLater{});
    superseded_ = 0;
}

}  // namespace strata::sim::detail
