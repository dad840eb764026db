// A rank's step: the executor loop. Each stream's next instruction runs when what it waits for has
// happened (try_execute), completes (finish) and frees the values it read last; host-side work
// (CPU Adam, SSD transfers) runs on a helper thread beside the streams (start_host_job).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "rank.hpp"
#include "strata/common/error.hpp"

namespace strata::runtime {

using namespace sim;

bool RankState::try_execute(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    auto now = [&]() {
        if (dev_ && w_.options.record_spans && device_instr(i)) dev_->mark(1 + 2 * i);
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w_.step_start).count();
    };
    const int lane = this->lane(in.stream);
    if (lanes_) dev_->set_lane(lane < 0 ? Device::lane_compute : lane);
    const auto ev = static_cast<std::size_t>(in.event);
    switch (in.kind) {
        // On the cuda backend an event of a device lane is a CUDA event: a lane waits for it on the
        // device, a host stream (the CPU optimizer, SSD I/O) until the device has passed it.
        case InstrKind::record:
            if (lanes_ && lane >= 0) dev_->record(ev);
            recorded_[ev] = lanes_ && lane >= 0 ? 2 : 1;
            return true;
        case InstrKind::wait:
            if (recorded_[ev] == 0) return false;
            if (recorded_[ev] == 2 && lane >= 0) dev_->wait(ev);
            if (recorded_[ev] == 2 && lane < 0 && !dev_->reached(ev)) {
                polling_ = true;
                return false;
            }
            return true;
        case InstrKind::alloc:
        case InstrKind::free:  // the memory model's tensors: the runtime allocates the dataflow's own
        case InstrKind::host_sync: started_ns_[i] = now(); return true;
        case InstrKind::compute:
        case InstrKind::copy:
        case InstrKind::optimizer:
        case InstrKind::collective:
        case InstrKind::send:
        case InstrKind::recv:
            if (!w_.options.memory_only) break;
            if (in.kind == InstrKind::send || in.kind == InstrKind::recv) {
                // A walk's transfer still meets its peer (with no data): a receive posted far
                // ahead would otherwise hold every micro-batch's buffer at once.
                if (!posted_[i]) {
                    posted_[i] = 1;
                    started_ns_[i] = now();
                    touch(i);
                    return w_.transport.p2p({w_.step, in.match_id}, in.kind == InstrKind::send, nullptr, 0, &waker_);
                }
                return w_.transport.p2p_done({w_.step, in.match_id}, in.kind == InstrKind::send);
            }
            started_ns_[i] = now();
            start_fetches(i);
            touch(i);
            return true;
        default: break;
    }
    switch (in.kind) {
        case InstrKind::compute: started_ns_[i] = now(); start_fetches(i); compute(i); return true;
        case InstrKind::copy: started_ns_[i] = now(); start_fetches(i); copy(i); return true;
        case InstrKind::optimizer:
            if (!posted_[i]) {
                posted_[i] = 1;
                started_ns_[i] = now();
                start_host_job(i, optimizer_job(i, true));
            }
            return host_job_done();
        case InstrKind::collective:
            if (!posted_[i]) {
                posted_[i] = 1;
                started_ns_[i] = now();
                return collective(i, true, start_fetches(i));
            }
            return collective(i, false);
        case InstrKind::send:
        case InstrKind::recv:
            if (!posted_[i]) {
                posted_[i] = 1;
                started_ns_[i] = now();
                return p2p(i, true);
            }
            return p2p(i, false);
        default: break;
    }
    return false;
}

void RankState::finish(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    if (w_.options.peak_detail > 0) note_peak(i);  // before its inputs' last reads free them
    finish_grad_values(i);
    if (w_.options.record_spans && in.kind != InstrKind::record && in.kind != InstrKind::wait) {
        if (dev_ && device_instr(i)) {
            if (lanes_) dev_->set_lane(std::max(lane(in.stream), 0));
            dev_->mark(2 + 2 * i);
        }
        // A transfer ends when the transport completed it, not when this rank's one thread, busy
        // on another stream, noticed.
        const auto end = ended_ns_[i] >= 0 ? ended_ns_[i]
                                           : std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w_.step_start).count();
        trace_.spans.push_back({static_cast<int>(i), started_ns_[i], std::max(end, started_ns_[i])});
    }
    if (rp_.operands.empty()) return finish_fetches(i);
    const Operands& o = rp_.operands[i];
    const auto* ids = rp_.operand_ids.data() + o.first;
    // A bf16 plan's 2-byte values are bf16 once written (the kernels computed them in fp32).
    if (w_.plan.precision != Precision::fp32 && !w_.options.memory_only && !dev_)
        for (int j = 0; j < o.n_out; ++j) {
            const DataTensor& t = w_.program.tensors[static_cast<std::size_t>(ids[o.n_in + j])];
            if (elem_bytes(t) == 2.0 && t.tier != Tier::ssd) round_half(tensor(ids[o.n_in + j], false, i), elements(ids[o.n_in + j]));
        }
    // After the rounding: a fetch no instruction reads (a pass that needs none of the unit it
    // brought) gives its copy back here.
    finish_fetches(i);
    // Inputs have been read; outputs start a new value with its own count of readers; a value
    // nobody will read again is freed. An in-place update must be the old value's last reader.
    for (int k = 0; k < o.n_in; ++k)
        if (auto it = live_.find(ids[k]); it != live_.end()) --it->second.pending;
    for (int j = 0; j < o.n_out; ++j) {
        auto it = live_.find(ids[o.n_in + j]);
        if (it == live_.end() || block_continues(i, w_.program.tensors[static_cast<std::size_t>(ids[o.n_in + j])])) continue;
        if (it->second.pending > 0) fail(i, "overwrites a value other instructions have yet to read");
        it->second.pending = version_reads_[o.first + static_cast<std::size_t>(o.n_in + j)];
    }
    for (int k = 0; k < o.n_in + o.n_out; ++k) {
        auto it = live_.find(ids[k]);
        if (it == live_.end() || it->second.pending > 0) continue;
        const Tier t = live_tier(w_.program.tensors[static_cast<std::size_t>(ids[k])]);
        live_.erase(it);
        sample_memory(t);
    }
}

void RankState::start_host_job(std::size_t i, std::function<void()> job) {
    join_host_job();
    host_job_done_.store(false);
    host_job_error_ = nullptr;
    host_job_instr_ = i;
    host_uploads_.clear();
    host_job_ = std::thread([this, i, job = std::move(job)] {
        try {
            job();
        } catch (...) {
            host_job_error_ = std::current_exception();
        }
        ended_ns_[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w_.step_start).count();
        host_job_done_.store(true, std::memory_order_release);
        waker_.notify();
    });
}

bool RankState::host_job_done() {
    if (!host_job_done_.load(std::memory_order_acquire)) return false;
    join_host_job();
    if (host_job_error_) std::rethrow_exception(std::exchange(host_job_error_, nullptr));
    if (!host_uploads_.empty()) {  // the update's weights up, on the H2D lane, before the instruction ends
        if (lanes_) dev_->set_lane(Device::lane_h2d);
        for (const auto& [to, from, n] : host_uploads_) dev_->copy(to, from, n);
        host_uploads_.clear();
        ended_ns_[host_job_instr_] =
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - w_.step_start).count();
    }
    return true;
}

void RankState::join_host_job() {
    if (host_job_.joinable()) host_job_.join();
}

void RankState::run_step() {
    // A step that fails leaves no host job running on this rank's buffers.
    struct JoinOnExit {
        RankState& r;
        ~JoinOnExit() { r.join_host_job(); }
    } join_on_exit{*this};
    if (dev_) dev_->bind_thread();
    adam_step_ = w_.step + 1;
    skipped_ = false;
    pc_.fill(0);
    std::fill(recorded_.begin(), recorded_.end(), 0);
    std::fill(posted_.begin(), posted_.end(), 0);
    std::fill(ended_ns_.begin(), ended_ns_.end(), -1);
    grad_reduced_.clear();
    // Megatron's zero_grad_buffer (sharded: the shard the reduce-scatters add into)
    if (w_.options.memory_only) {
    } else if (dev_) dev_->zero(grads_.data(), grads_.size());
    else std::fill(grads_.data(), grads_.data() + grads_.size(), 0.0f);
    if (lanes_) dev_->set_lane(Device::lane_compute);
    if (dev_ && w_.options.record_spans) {
        dev_->timing_reset(1 + 2 * rp_.instrs.size());
        dev_->mark(0);
    }
    loss_sum_ = 0;
    mtp_loss_sum_.assign(static_cast<std::size_t>(w_.model.mtp_depth + 1), 0.0);
    trace_ = RankTrace{};
    gpu_.reset_peak();
    cpu_own_.reset_peak();
    ssd_own_.reset_peak();
    std::uint64_t seen = 0;
    auto idle_since = std::chrono::steady_clock::now();
    for (;;) {
        {
            std::lock_guard<std::mutex> lk(waker_.mu);
            seen = waker_.epoch;
        }
        // Like a GPU whose host issues in program order: records, waits and transfers go the
        // moment their stream reaches them (a transfer is posted, then runs beside whatever the
        // thread does next); of the kernels ready at their streams' heads, the earliest in program
        // order runs, one at a time, since a rank has one thread.
        bool done = true, progressed = false;
        polling_ = false;
        std::size_t next = SIZE_MAX;
        int next_stream = -1;
        for (int s = 0; s < kStreamCount; ++s) {
            auto& list = streams_[static_cast<std::size_t>(s)];
            auto& pc = pc_[static_cast<std::size_t>(s)];
            while (pc < list.size()) {
                const InstrKind k = rp_.instrs[list[pc]].kind;
                const bool eager = k == InstrKind::record || k == InstrKind::wait || k == InstrKind::collective ||
                                   k == InstrKind::send || k == InstrKind::recv || k == InstrKind::alloc || k == InstrKind::free ||
                                   k == InstrKind::optimizer;
                if (!eager) {
                    if (list[pc] < next) next = list[pc], next_stream = s;
                    break;
                }
                if (!try_execute(list[pc])) break;
                finish(list[pc]);
                ++pc;
                progressed = true;
            }
            done = done && pc == list.size();
        }
        if (done) break;
        if (!progressed && next_stream >= 0) {
            auto& pc = pc_[static_cast<std::size_t>(next_stream)];
            if (!try_execute(next)) fail(next, "a kernel could not run although it was ready");
            finish(next);
            ++pc;
            progressed = true;
        }
        if (w_.transport.aborted()) throw RuntimeError("stopped: " + w_.transport.why());
        if (progressed) {
            idle_since = std::chrono::steady_clock::now();
            continue;
        }
        if (polling_) idle_since = std::chrono::steady_clock::now();  // the device is working, not stuck
        std::unique_lock<std::mutex> lk(waker_.mu);
        // A host stream waiting for the device polls it (the device notifies nobody).
        const auto nap = polling_ ? std::chrono::microseconds(20) : std::chrono::microseconds(50000);
        waker_.cv.wait_for(lk, nap, [&] { return waker_.epoch != seen || w_.transport.aborted(); });
        if (std::chrono::steady_clock::now() - idle_since > std::chrono::seconds(120)) {
            std::string stuck;
            for (int s = 0; s < kStreamCount; ++s) {
                const auto& list = streams_[static_cast<std::size_t>(s)];
                const std::size_t pc = pc_[static_cast<std::size_t>(s)];
                if (pc >= list.size()) continue;
                stuck += "\n  ";  // appended piece by piece: GCC 12 misreads a chain of + here (-Wrestrict)
                stuck += to_string(static_cast<Stream>(s));
                stuck += " at ";
                stuck += describe(list[pc]);
            }
            throw RuntimeError("rank " + std::to_string(rank_) + " made no progress for 120 s; its streams wait at:" + stuck);
        }
    }
    if (dev_) {
        dev_->sync();  // the step ends when the GPU has done its work
        if (w_.options.record_spans) {
            // Device instructions take the GPU's own times (events), the host's the host clock.
            std::vector<std::int64_t> t;
            dev_->times(t);
            for (Span& sp : trace_.spans) {
                const std::size_t k = static_cast<std::size_t>(sp.instr);
                if (!device_instr(k) || t[1 + 2 * k] < 0 || t[2 + 2 * k] < 0) continue;
                sp.start_ns = t[1 + 2 * k];
                sp.end_ns = std::max(t[2 + 2 * k], sp.start_ns);
            }
        }
    }
    // Every value of the step has had its last reader: nothing of it may stay behind.
    for (std::size_t u = 0; u < fetched_.size(); ++u)
        if (!fetched_[u].buf.empty())
            throw RuntimeError("rank " + std::to_string(rank_) + ": the fetched parameters of unit " + std::to_string(u) + " outlived the step");
    if (!grad_live_.empty())
        throw RuntimeError("rank " + std::to_string(rank_) + ": gradients of " + std::to_string(grad_live_.size()) +
                           " reductions outlived the step, never reduce-scattered");
    if (!live_.empty())
        throw RuntimeError("rank " + std::to_string(rank_) + ": " + std::to_string(live_.size()) + " tensors outlived the step (first: " +
                           w_.program.tensor_names[static_cast<std::size_t>(w_.program.tensors[static_cast<std::size_t>(live_.begin()->first)].name)] + ")");
}

}  // namespace strata::runtime
