// Internal to the engine: its state and the Engine class, shared by engine.cpp (the event loop)
// and engine_run.cpp (run() and the idle-time attribution). Not a public header.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <unordered_map>
#include <vector>

#include "engine_internal.hpp"
#include "strata/sim/caching_allocator.hpp"
#include "strata/sim/engine.hpp"
#include "strata/sim/maxmin.hpp"

namespace strata::sim::detail {


enum class Ev : std::uint8_t { stream_done, member_begin, flow_done, host_ready };

struct Event {
    std::int64_t t;
    std::uint64_t seq;
    Ev type;
    int a, b;
    std::uint32_t version;
};
struct EventLater {
    bool operator()(const Event& x, const Event& y) const { return x.t != y.t ? x.t > y.t : x.seq > y.seq; }
};

/// A read-only run of ints inside a larger buffer (a stream's slice of Engine::order_storage_).
struct IndexSpan {
    const int* first = nullptr;
    std::size_t count = 0;
    std::size_t size() const { return count; }
    int operator[](std::size_t k) const { return first[k]; }
    const int* begin() const { return first; }
    const int* end() const { return first + count; }
};

struct StreamState {
    IndexSpan order;          ///< instruction indices of this stream, in program order
    std::size_t pos = 0;
    bool blocked = false;     ///< executing, or waiting for an event or a match
};

struct Member {
    int rank = 0, stream = 0, instr = 0;
    Demand demand;
};
struct Transfer {
    std::vector<Member> members;
    int expected = 1;
    int pending = 0;
    int group = -1;
};

struct Flow {
    int transfer = -1, member = -1;
    double remaining = 1;   ///< fraction of the transfer still to move
    double rate = 0;        ///< fractions per second
    std::int64_t last = 0;
    std::uint32_t version = 0;
    bool active = false;
    double cap = std::numeric_limits<double>::infinity();  ///< from classes with no routed resource
    std::vector<MaxMinUse> uses;
};

struct Pool {
    Tier tier = Tier::gpu;
    int node = 0;
    double capacity = 0, use = 0, peak = 0;
    TagBytes tags{}, peak_tags{};
    /// With the allocator replay (MemoryOptions::replay_caching_allocator), `use` is what its
    /// segments reserve plus `unpaired` (allocations without a tensor id, charged as before).
    std::unique_ptr<CachingAllocator> allocator;
    double unpaired = 0;
    double allocated = 0, peak_allocated = 0;  ///< what the tensors hold (== use without the replay)
};

struct Allocation {
    double charged = 0;
    std::int64_t handle = -1;  ///< the allocator replay's block, when it serves this one
    int tag = 0;
    Tier tier = Tier::gpu;
};

inline bool is_transfer(InstrKind k) {
    return k == InstrKind::collective || k == InstrKind::send || k == InstrKind::recv || k == InstrKind::copy ||
           k == InstrKind::optimizer;
}
inline bool is_comm(InstrKind k) { return k == InstrKind::collective || k == InstrKind::send || k == InstrKind::recv; }

class Engine {
public:
    Engine(const Program& p, const CostModel& c, ResourceMap& rm, const EngineOptions& o)
        : p_(p), cost_(c), rmap_(rm), opt_(o) {}

    SimResult run();

private:
    void setup();
    void schedule(std::int64_t t, Ev type, int a, int b, std::uint32_t version = 0) {
        events_.push_back(Event{t, seq_++, type, a, b, version});
        std::push_heap(events_.begin(), events_.end(), EventLater{});
    }
    Event pop_event() {
        std::pop_heap(events_.begin(), events_.end(), EventLater{});
        const Event e = events_.back();
        events_.pop_back();
        return e;
    }
    /// A superseded event (a flow or a kernel end re-timed) is skipped when popped. Re-timing is
    /// frequent with interference, so when superseded events outnumber the live ones the heap is
    /// rebuilt without them: the pop order of the rest is unchanged ((time, seq) is a total order).
    bool stale(const Event& e) const;
    void superseded() {
        if (++superseded_ > 1024 && superseded_ * 2 > events_.size()) compact_events();
    }
    void compact_events();
    std::size_t superseded_ = 0;
    void drain();
    void advance(int r, int s);
    void record_event(int r, int e, int i);
    void memory(int r, int i, const Instr& in);
    void arrive(int r, int s, int i, const Instr& in);
    void start_transfer(int tid);
    void member_begin(int tid, int m);
    void member_finished(int tid);
    void flow_done(int f, std::uint32_t version);
    void resolve(const std::vector<MaxMinUse>& seeds);
    void finish_instr(int r, int s);
    int new_transfer();
    int new_flow();
    void attribute_idle(SimResult& res) const;

    const Program& p_;
    const CostModel& cost_;
    ResourceMap& rmap_;
    const EngineOptions& opt_;

    std::int64_t now_ = 0;
    std::int64_t last_end_ = 0;  ///< latest instruction end (time only moves forward): the step time
    std::uint64_t seq_ = 0;
    std::vector<Event> events_;  ///< a binary heap under EventLater (schedule / pop_event)
    std::vector<std::pair<int, int>> ready_;

    std::vector<std::array<StreamState, kStreamCount>> streams_;
    // Per (rank, event), flat at rank * events + event (one buffer each: see huge_pages.hpp).
    std::size_t ev(int r, int e) const {
        return static_cast<std::size_t>(r) * static_cast<std::size_t>(std::max(0, p_.events)) + static_cast<std::size_t>(e);
    }
    BigVector<std::int64_t> event_time_;        // recorded at, -1 = not yet
    BigVector<std::uint16_t> event_waiters_;    // stream bitmask
    BigVector<int> event_record_instr_;         // the record instruction, -1 = not yet
    BigVector<int> order_storage_;              // every stream's order, rank-major then stream
    detail::Timings timing_;
    std::vector<std::array<std::vector<ResourceUse>, kLinkClassCount>> routes_;

    std::vector<Transfer> transfers_;
    std::vector<int> free_transfers_;
    /// Interference (EngineOptions::overlap_slowdown): per rank, collectives / p2p in flight, and the
    /// kernel running on its compute stream, whose rate drops to 1 / (1 + slowdown) while any is.
    struct RunningKernel {
        bool running = false;
        std::int64_t since_ns = 0;   ///< last rate change
        double remaining_ns = 0;     ///< work left at full speed
        double rate = 1;
        std::uint32_t version = 0;   ///< stream_done events of older versions are stale
    };
    std::vector<int> comm_active_;
    std::vector<RunningKernel> kernel_;
    void comm_changed(int r, int delta);
    void reschedule_kernel(int r);
    /// Host issue model (EngineOptions::host_launch_ns): per rank, the CPU thread's position in
    /// program order, its clock, a host_sync it is stopped at, and the streams waiting for it.
    struct Host {
        std::size_t pos = 0;         ///< next instruction to issue
        std::int64_t t = 0;          ///< when the thread is free to issue it
        int sync = -1;               ///< a host_sync issued but not yet passed
        std::uint16_t waiters = 0;   ///< streams blocked until that sync completes
    };
    std::vector<Host> host_;
    std::vector<BigVector<std::int64_t>> host_issue_;  ///< [rank][instr]: when the host issued it
    bool host_on() const { return opt_.host_launch_ns > 0; }
    bool host_gate(int r, int s, int i);
    std::map<std::int64_t, int> open_matches_;
    int groups_ = 0;

    std::vector<Flow> flows_;
    std::vector<int> free_flows_;
    std::vector<std::vector<int>> res_flows_;
    std::vector<double> res_load_, res_busy_;
    std::vector<std::int64_t> res_last_;
    // Scratch for resolve().
    std::vector<std::uint32_t> res_stamp_, flow_stamp_;
    std::uint32_t stamp_ = 0;
    std::vector<int> comp_res_, comp_flows_, local_of_;
    std::vector<MaxMinFlow> mm_flows_, view_;
    std::vector<MaxMinUse> seeds_;
    std::vector<double> mm_capacity_, mm_rates_;
    MaxMinSolver solver_;

    std::vector<Pool> pools_;
    std::vector<std::array<int, kTierCount>> rank_pool_;
    std::vector<double> node_scale_;
    // Live allocations by tensor id, per rank. Lowered programs number their tensors densely, so
    // a rank whose ids span a range not much larger than its allocation count gets a flat slice
    // of live_slots_ (id - live_min_[rank]); others (hand-built programs) use the map.
    struct LiveSlot {
        Allocation a;
        bool live = false;
    };
    BigVector<LiveSlot> live_slots_;
    std::vector<std::int64_t> live_min_;     ///< per rank: smallest tensor id; -1: uses live_
    std::vector<std::size_t> live_offset_;   ///< per rank: its slice in live_slots_
    std::vector<std::unordered_map<std::int64_t, Allocation>> live_;

    SimResult res_;
};

}  // namespace strata::sim::detail
