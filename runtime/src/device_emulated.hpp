// The emulated device's model of a GPU (device_emulated.cpp says what it checks): device memory as
// addresses in a reserved, never-mapped range with a buffer per allocation, the h2d / d2h /
// compute lanes as queues with events, copies that convert into 2-byte buffers, pinned host
// memory, timing marks, and the operand checks every kernel goes through. The kernels themselves,
// over the cpu kernels: device_emulated.cpp.
#pragma once
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "device.hpp"
#include "handle_space.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::runtime {

namespace emulated_comm {
class EmulatedComm;
}

class EmulatedBase : public Device {
public:
    EmulatedBase() = default;
    ~EmulatedBase() override {
        for (auto& [p, n] : pinned_) std::free(p);
    }

    std::string describe() const override { return "emulated device (the cpu kernels behind the cuda backend's interface; no GPU)"; }

    void set_lane(int lane) override {
        if (lane < 0 || lane >= lane_count) throw std::runtime_error("emulated device: set_lane " + std::to_string(lane));
        lane_ = lane;
    }
    void record(std::size_t id) override {
        if (recorded_.size() <= id) recorded_.resize(id + 1, 0), done_.resize(id + 1, 0);
        ++recorded_[id];
        enqueue(lane_, Op{Op::record, {}, id, 0});
    }
    void wait(std::size_t id) override {
        if (id >= recorded_.size() || recorded_[id] == 0) throw std::runtime_error("emulated device: a wait for an event never recorded");
        enqueue(lane_, Op{Op::wait, {}, id, recorded_[id]});
    }
    bool reached(std::size_t id) override {
        if (id >= recorded_.size() || recorded_[id] == 0) throw std::runtime_error("emulated device: a query of an event never recorded");
        while (done_[id] < recorded_[id]) step_any();
        return true;
    }

    float* alloc(i64 n, Storage fmt) override {
        const std::size_t span = round_up(static_cast<std::size_t>(std::max<i64>(n, 1)) * sizeof(float));
        char* h = space_.take(span);
        if (!h) return nullptr;
        live_[h] = Block{std::make_unique<float[]>(static_cast<std::size_t>(std::max<i64>(n, 1))), n, fmt, span};
        held_bytes_ += bytes_of(n, fmt);
        peak_bytes_ = std::max(peak_bytes_, held_bytes_);
        return reinterpret_cast<float*>(h);
    }
    void release(float* p, i64 n) override {
        if (!p) return;
        auto it = live_.find(reinterpret_cast<char*>(p));
        if (it == live_.end()) throw std::runtime_error("emulated device: release of an address that is no live buffer's start");
        if (it->second.n != n)
            throw std::runtime_error("emulated device: a buffer of " + std::to_string(it->second.n) + " elements released as " + std::to_string(n));
        held_bytes_ -= bytes_of(n, it->second.fmt);
        space_.give(it->first, it->second.span);
        // A queued copy may still read it (the cuda device fences the block's next user instead).
        graveyard_.push_back(std::move(it->second.data));
        live_.erase(it);
    }
    float* alloc_host(i64 n) override {  // page-aligned, as cudaHostAlloc's (the ssd tier reads into it with O_DIRECT)
        const std::size_t bytes = (static_cast<std::size_t>(std::max<i64>(n, 1)) * sizeof(float) + 4095) / 4096 * 4096;
        auto* p = static_cast<float*>(std::aligned_alloc(4096, bytes));
        if (!p) return nullptr;
        std::memset(p, 0, bytes);
        pinned_[p] = n;
        return p;
    }
    void release_host(float* p) override {
        if (!p) return;
        sync();  // no queued copy may still touch it
        if (pinned_.erase(p) == 0) throw std::runtime_error("emulated device: release_host of memory alloc_host did not give");
        std::free(p);
    }
    void copy(float* dst, const float* src, i64 n) override {
        if (n <= 0 || dst == src) return;
        enqueue(lane_, move_op(dst, src, n));
        while (!q_[lane_].empty()) step(lane_);  // the cuda device syncs the lane when an end is host memory
    }
    void copy_async(float* dst, const float* src, i64 n) override {
        if (n <= 0 || dst == src) return;
        enqueue(lane_, move_op(dst, src, n));
    }
    void host_settle(const float*) override { sync(); }
    void zero(float* p, i64 n) override {
        const Ref r = dev(p, n, "zero");
        kernel([=] { std::fill(r.p, r.p + n, 0.0f); }, {});
    }
    void sync() override {
        for (bool queued = true; queued;) {
            queued = false;
            for (const auto& q : q_) queued = queued || !q.empty();
            if (queued) step_any();
        }
        graveyard_.clear();
    }
    void bind_thread() override {}
    /// device_comm_emulated.cpp: communicators between emulated devices of this process.
    std::vector<std::unique_ptr<DeviceComm>> comms_with(const std::vector<Device*>& members) override;
    double sum(const float* p, i64 n) override {
        const Ref r = dev(p, n, "sum");
        double s = 0;
        kernel([=, &s] {
            for (i64 i = 0; i < n; ++i) s += r.p[i];
        }, {});
        return s;
    }
    double reserved_peak_bytes() override { return peak_bytes_; }

    void timing_reset(std::size_t slots) override {
        sync();
        marks_.assign(slots, -1);
        start_ = std::chrono::steady_clock::now();
    }
    void mark(std::size_t slot) override {
        if (slot >= marks_.size()) throw std::runtime_error("emulated device: timing slot out of range");
        enqueue(lane_, Op{Op::run, [this, slot] {
                              marks_[slot] = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
                          }, 0, 0});
    }
    void times(std::vector<std::int64_t>& out) override {
        sync();
        out.assign(marks_.size(), -1);
        if (marks_.empty() || marks_[0] < 0) return;
        for (std::size_t s = 0; s < marks_.size(); ++s)
            if (marks_[s] >= 0) out[s] = marks_[s] - marks_[0];
    }


protected:
    friend class emulated_comm::EmulatedComm;
    using i64 = Device::i64;
    struct Block {
        std::unique_ptr<float[]> data;
        i64 n;
        Storage fmt;
        std::size_t span;
    };
    /// An operand's storage here, its extent, and its format (a 2-byte one rounded after a write).
    struct Ref {
        float* p = nullptr;
        i64 n = 0;
        Storage fmt = Storage::fp32;
    };
    static void narrow(Storage fmt, float* p, i64 n) {
        if (fmt == Storage::bf16) cpu::round_bf16(p, n);
        else if (fmt == Storage::fp16) cpu::round_fp16(p, n);
    }
    struct Op {
        enum Kind { run, record, wait } kind;
        std::function<void()> fn;
        std::size_t id;
        std::uint64_t gen;  ///< a wait: the count of records of `id` it waits for
    };

    static std::size_t round_up(std::size_t b) { return (b + 255) / 256 * 256; }
    static double bytes_of(i64 n, Storage fmt) {
        return static_cast<double>(round_up(static_cast<std::size_t>(std::max<i64>(n, 1)) * (fmt == Storage::fp32 ? 4 : 2)));
    }
    bool inside(const void* p) const { return space_.inside(p); }
    // The storage of [p, p + n), which must lie in one live buffer.
    Ref at(const float* p, i64 n, const char* what) const {
        const char* c = reinterpret_cast<const char*>(p);
        auto it = live_.upper_bound(const_cast<char*>(c));
        if (it == live_.begin()) throw std::runtime_error(std::string("emulated device: ") + what + ": an address in no live buffer");
        --it;
        const Block& b = it->second;
        const i64 off = (c - it->first) / static_cast<i64>(sizeof(float)), limit = std::max<i64>(b.n, 1);
        if ((c - it->first) % static_cast<i64>(sizeof(float)) != 0 || n < 0 || off + n > limit || (n > 0 && off >= limit))
            throw std::runtime_error(std::string("emulated device: ") + what + ": " + std::to_string(n) + " elements at offset " + std::to_string(off) +
                                     " of a buffer of " + std::to_string(b.n) + " (past its end, or in no live buffer)");
        return Ref{b.data.get() + off, n, b.fmt};
    }
    Ref dev(const float* p, i64 n, const char* what) const {
        if (!p) throw std::runtime_error(std::string("emulated device: ") + what + ": a null pointer");
        if (!inside(p)) throw std::runtime_error(std::string("emulated device: ") + what + ": not device memory (a kernel was given a host address)");
        return at(p, n, what);
    }
    Ref opt(const float* p, i64 n, const char* what) const { return p ? dev(p, n, what) : Ref{}; }
    std::vector<i64> order(i64 n, const char* what) const {
        if (static_cast<i64>(order_.size()) < n)
            throw std::runtime_error(std::string("emulated device: ") + what + ": the token order set holds " + std::to_string(order_.size()) +
                                     " rows, the move needs " + std::to_string(n));
        return std::vector<i64>(order_.begin(), order_.begin() + n);
    }

    template <class F>
    void unary(F f, float* y, const float* x, i64 n, const char* what) {
        const Ref Y = dev(y, n, what), X = dev(x, n, what);
        kernel([=] { f(Y.p, X.p, n); }, {Y});
    }
    template <class F>
    void binary(F f, float* o, const float* a, const float* b, i64 n, const char* what) {
        const Ref O = dev(o, n, what), A = dev(a, n, what), B = dev(b, n, what);
        kernel([=] { f(O.p, A.p, B.p, n); }, {O});
    }
    // A kernel: on the compute lane whatever the current lane, run at once (after what that lane
    // waits for); its 2-byte outputs rounded, as the cuda device stores them.
    void kernel(std::function<void()> body, std::initializer_list<Ref> outs) {
        std::vector<Ref> halves;
        for (const Ref& r : outs)
            if (r.p && r.fmt != Storage::fp32) halves.push_back(r);
        enqueue(lane_compute, Op{Op::run, [body = std::move(body), halves] {
                                     body();
                                     for (const Ref& r : halves) narrow(r.fmt, r.p, r.n);
                                 }, 0, 0});
        while (!q_[lane_compute].empty()) step(lane_compute);
    }
    // A copy between any two of device memory and host memory, converting into a 2-byte buffer.
    Op move_op(float* dst, const float* src, i64 n) const {
        const Ref d = inside(dst) ? at(dst, n, "copy dst") : Ref{dst, n, Storage::fp32};
        const Ref s = inside(src) ? at(src, n, "copy src") : Ref{const_cast<float*>(src), n, Storage::fp32};
        return Op{Op::run, [d, s, n] {
                      std::memmove(d.p, s.p, static_cast<std::size_t>(n) * sizeof(float));
                      if (d.fmt != s.fmt) narrow(d.fmt, d.p, n);
                  }, 0, 0};
    }
    void enqueue(int lane, Op op) { q_[lane].push_back(std::move(op)); }
    // Runs a lane's first operation, false when it cannot run yet: a wait first runs the other
    // lanes (those not themselves inside a wait) until its event is reached. A lane that cannot
    // move gives the turn back, so that another lane may record what both wait for (a GPU runs
    // its streams side by side).
    bool try_step(int lane) {
        Op& op = q_[lane].front();
        if (op.kind == Op::wait && done_[op.id] < op.gen) {
            active_[lane] = true;
            for (bool moved = true; moved && done_[op.id] < op.gen;) {
                moved = false;
                for (int m = 0; m < lane_count && done_[op.id] < op.gen; ++m)
                    if (m != lane && !active_[m] && !q_[m].empty() && try_step(m)) moved = true;
            }
            active_[lane] = false;
            if (done_[op.id] < op.gen) return false;
        }
        Op done = std::move(op);
        q_[lane].pop_front();
        if (done.kind == Op::record) ++done_[done.id];
        else if (done.kind == Op::run) done.fn();
        return true;
    }
    void step(int lane) {
        if (!try_step(lane)) stuck(lane);
    }
    void step_any() {
        for (int l = 0; l < lane_count; ++l)
            if (!q_[l].empty() && try_step(l)) return;
        for (int l = 0; l < lane_count; ++l)
            if (!q_[l].empty()) stuck(l);
    }
    [[noreturn]] void stuck(int lane) const {
        std::string queues;
        for (int m = 0; m < lane_count; ++m) {
            if (q_[m].empty()) continue;
            queues += " lane " + std::to_string(m) + ":";
            for (const Op& o : q_[m])
                queues += o.kind == Op::wait ? " wait " + std::to_string(o.id) : o.kind == Op::record ? " record " + std::to_string(o.id) : " work";
            queues += ";";
        }
        throw std::runtime_error("emulated device: lane " + std::to_string(lane) + " waits for event " + std::to_string(q_[lane].front().id) +
                                 ", which no lane can reach (the lanes wait on each other):" + queues);
    }

    HandleSpace space_{"emulated device: device memory"};
    std::map<char*, Block> live_;
    std::vector<std::unique_ptr<float[]>> graveyard_;
    std::map<float*, i64> pinned_;
    double held_bytes_ = 0, peak_bytes_ = 0;
    int lane_ = lane_compute;
    std::deque<Op> q_[lane_count];
    bool active_[lane_count] = {};
    std::vector<std::uint64_t> recorded_, done_;
    std::vector<std::int64_t> marks_;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    std::vector<i64> order_;
    i64 kept_ = 0;
};

}  // namespace strata::runtime
