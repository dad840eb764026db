// Engine::run(): set up, drain the event queue, then assemble the SimResult (peaks, OOMs,
// utilisation, provenance) and split each compute stream's idle time into exposed
// communication, exposed copies and bubble (attribute_idle). The loop itself is engine.cpp.
#include "engine_state.hpp"

namespace strata::sim::detail {

void Engine::attribute_idle(SimResult& res) const {
    // Partition the compute stream's idle time: while it sits on a Wait, the event's producer is
    // the instruction just before the Record on the recording stream; the part of the wait during
    // which a contiguous run of data movements ending there was executing is exposed transfer time,
    // the rest (e.g. waiting for the previous pipeline stage) is bubble.
    const int cs = static_cast<int>(Stream::compute);
    double bubble_sum = 0, comm_sum = 0, copy_sum = 0, host_sum = 0;
    int counted = 0;
    for (std::size_t r = 0; r < p_.ranks.size(); ++r) {
        const auto& rp = p_.ranks[r];
        auto& rs = res.ranks[r];
        const auto& order = streams_[r][static_cast<std::size_t>(cs)].order;
        std::int64_t compute_busy = 0, comm = 0, copy = 0, host = 0;
        bool has_compute = false;
        for (int i : order) {
            const Instr& in = rp.instrs[static_cast<std::size_t>(i)];
            const Timing& tm = timing_[r][static_cast<std::size_t>(i)];
            if (tm.end < 0) continue;
            if (in.kind == InstrKind::compute) {
                compute_busy += tm.end - tm.exec;
                host += tm.exec - tm.issue;  // at the head of its stream, waiting only for the host to issue it
                has_compute = true;
            } else if (is_transfer(in.kind)) {
                (is_comm(in.kind) ? comm : copy) += tm.end - tm.exec;  // [issue, exec): waiting for peers
            } else if (in.kind == InstrKind::wait && tm.end > tm.issue && in.event >= 0) {
                const int rec = event_record_instr_[ev(static_cast<int>(r), in.event)];
                if (rec < 0) continue;
                const Stream rs_stream = rp.instrs[static_cast<std::size_t>(rec)].stream;
                const auto& ro = streams_[r][static_cast<std::size_t>(rs_stream)].order;
                auto pos = std::lower_bound(ro.begin(), ro.end(), rec);  // orders are ascending
                // Walk back over the contiguous data movements that ended at the record.
                std::int64_t chain_start = tm.end;
                bool comm_kind = false;
                std::int64_t boundary = tm.end;
                while (pos != ro.begin()) {
                    --pos;
                    const Instr& x = rp.instrs[static_cast<std::size_t>(*pos)];
                    const Timing& xt = timing_[r][static_cast<std::size_t>(*pos)];
                    if (x.kind == InstrKind::record || x.kind == InstrKind::host_sync || x.kind == InstrKind::alloc ||
                        x.kind == InstrKind::free)
                        continue;
                    if (!is_transfer(x.kind) || xt.end != boundary) break;
                    if (chain_start == tm.end) comm_kind = is_comm(x.kind);
                    chain_start = xt.exec;
                    boundary = xt.exec;
                    if (xt.issue != xt.exec) break;  // it waited before running: earlier cause is not transfer
                }
                const std::int64_t exposed = std::max<std::int64_t>(0, tm.end - std::max(tm.issue, chain_start));
                (comm_kind ? comm : copy) += exposed;
            }
        }
        rs.compute_idle_ns = res.step_time_ns - compute_busy;
        rs.exposed_comm_ns = comm;
        rs.exposed_copy_ns = copy;
        rs.host_wait_ns = host;
        rs.bubble_ns = std::max<std::int64_t>(0, rs.compute_idle_ns - comm - copy - host);
        if (has_compute && res.step_time_ns > 0) {
            ++counted;
            bubble_sum += static_cast<double>(rs.bubble_ns) / static_cast<double>(res.step_time_ns);
            comm_sum += static_cast<double>(comm);
            copy_sum += static_cast<double>(copy);
            host_sum += static_cast<double>(host);
        }
    }
    if (counted > 0) {
        res.bubble_fraction = bubble_sum / counted;
        res.exposed_comm_ns = static_cast<std::int64_t>(std::llround(comm_sum / counted));
        res.exposed_copy_ns = static_cast<std::int64_t>(std::llround(copy_sum / counted));
        res.host_wait_ns = static_cast<std::int64_t>(std::llround(host_sum / counted));
    }
}

SimResult Engine::run() {
    res_.ranks.resize(p_.ranks.size());
    for (std::size_t r = 0; r < p_.ranks.size(); ++r) {
        const auto& rp = p_.ranks[r];
        auto& rs = res_.ranks[r];
        rs.id = rp.id;
        rs.pp_stage = rp.pp_stage;
        rs.node = rp.node;
        rs.multiplicity = rp.multiplicity;
    }
    setup();
    for (std::size_t r = 0; r < p_.ranks.size(); ++r)
        for (int s = 0; s < kStreamCount; ++s) ready_.emplace_back(static_cast<int>(r), s);
    drain();
    while (!events_.empty()) {
        const Event e = pop_event();
        if (stale(e)) {  // superseded by a rate change: do not advance time
            if (superseded_ > 0) --superseded_;
            continue;
        }
        now_ = e.t;
        switch (e.type) {
            case Ev::stream_done: finish_instr(e.a, e.b); break;
            case Ev::member_begin: member_begin(e.a, e.b); break;
            case Ev::flow_done: flow_done(e.a, e.version); break;
            case Ev::host_ready:
                streams_[static_cast<std::size_t>(e.a)][static_cast<std::size_t>(e.b)].blocked = false;
                ready_.emplace_back(e.a, e.b);
                break;
        }
        drain();
    }

    // Step time: the last instruction's end (kept as instructions end).
    const std::int64_t step = last_end_;
    int stuck = 0;
    for (std::size_t r = 0; r < p_.ranks.size(); ++r) {
        for (int s = 0; s < kStreamCount; ++s) {
            const auto& st = streams_[r][static_cast<std::size_t>(s)];
            if (st.pos < st.order.size()) {
                res_.deadlock = true;
                if (stuck++ < 8) {
                    const auto& in = p_.ranks[r].instrs[static_cast<std::size_t>(st.order[st.pos])];
                    res_.deadlock_detail += (res_.deadlock_detail.empty() ? "" : "; ") + std::string("rank ") +
                                            std::to_string(p_.ranks[r].id) + " " + to_string(static_cast<Stream>(s)) +
                                            " stuck at instr " + std::to_string(st.order[st.pos]) + " (" +
                                            to_string(in.kind) + " " + instr_label(in) + ")";
                }
            }
        }
    }
    res_.step_time_ns = step;

    for (std::size_t r = 0; r < p_.ranks.size(); ++r) {
        auto& rs = res_.ranks[r];
        for (int t = 0; t < kTierCount; ++t) {
            const Pool& pool = pools_[static_cast<std::size_t>(rank_pool_[r][static_cast<std::size_t>(t)])];
            rs.peak_bytes[static_cast<std::size_t>(t)] = pool.peak;
            rs.peak_breakdown[static_cast<std::size_t>(t)] = pool.peak_tags;
            rs.capacity_bytes[static_cast<std::size_t>(t)] = pool.capacity;
            res_.peak_bytes_max[static_cast<std::size_t>(t)] = std::max(res_.peak_bytes_max[static_cast<std::size_t>(t)], pool.peak);
        }
    }
    for (std::size_t r = 0; r < p_.ranks.size(); ++r) {
        const Pool& gpu = pools_[static_cast<std::size_t>(rank_pool_[r][0])];
        res_.ranks[r].gpu_peak_allocated_bytes = gpu.peak_allocated;
        if (gpu.allocator) res_.ranks[r].gpu_cache_flushes = gpu.allocator->stats().cache_flushes;
    }
    res_.oom = res_.oom_count > 0;

    const double step_s = static_cast<double>(step) * 1e-9;
    for (int r = 0; r < rmap_.resource_count(); ++r) {
        const auto ru = static_cast<std::size_t>(r);
        if (ru < res_busy_.size()) res_busy_[ru] += res_load_[ru] * static_cast<double>(now_ - res_last_[ru]) * 1e-9;
        ResourceUtil u;
        u.name = rmap_.resource_name(r);
        u.cls = rmap_.resource_class(r);
        u.busy_s = ru < res_busy_.size() ? res_busy_[ru] : 0;
        u.utilisation = step_s > 0 ? u.busy_s / step_s : 0;
        res_.utilisation.push_back(std::move(u));
    }

    attribute_idle(res_);
    if (opt_.critical_path && !res_.deadlock) res_.critical_path = detail::critical_path(p_, timing_, groups_, step);
    if (opt_.record_trace) {
        for (std::size_t r = 0; r < p_.ranks.size(); ++r)
            for (std::size_t i = 0; i < timing_[r].size(); ++i) {
                const auto& tm = timing_[r][i];
                const auto k = p_.ranks[r].instrs[i].kind;
                if (tm.end < 0 || k == InstrKind::record || k == InstrKind::host_sync || k == InstrKind::alloc ||
                    k == InstrKind::free)
                    continue;
                if (k == InstrKind::wait && tm.end == tm.issue) continue;
                res_.spans.push_back(TraceSpan{static_cast<int>(r), static_cast<int>(i),
                                               k == InstrKind::wait ? tm.issue : tm.exec, tm.end, tm.provenance});
            }
    }
    return std::move(res_);
}

}  // namespace strata::sim::detail
