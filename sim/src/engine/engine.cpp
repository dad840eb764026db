// The event loop: streams as serial queues, record/wait events, matched transfers (rendezvous of
// all participants), fluid flows on shared resources re-solved by max-min on every start and end,
// memory pools with the allocator model. When a kernel may start and how fast it runs (host issue
// model, interference) is engine_kernels.cpp. It does not compute costs (CostModel) nor route
// (ResourceMap); the post-run critical path is in critical_path.cpp.
#include "strata/sim/engine.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <queue>
#include <unordered_map>

#include "engine_state.hpp"

namespace strata::sim {

using detail::Timing;

std::int64_t ceil_ns(double seconds) {
    if (!(seconds > 0)) return 0;
    const double ns = seconds * 1e9;
    if (ns >= 9.0e18) return std::numeric_limits<std::int64_t>::max() / 4;
    // Up to whole ns; 1e-6 ns of slack so that 2.0000000000001 ns (rounding noise) stays 2.
    return static_cast<std::int64_t>(std::ceil(ns - 1e-6));
}

double charged_bytes(double bytes, Tier tier, const MemoryOptions& m) {
    if (bytes <= 0) return 0;
    if (tier != Tier::gpu) return bytes;
    double b = bytes;
    if (m.caching_allocator) {
        // PyTorch's CUDACachingAllocator: small requests round to 512 B blocks; large ones (> 1 MiB)
        // are carved from segments, modelled here as rounding up to 2 MiB.
        constexpr double kSmall = 512, kLarge = 2.0 * 1024 * 1024, kSmallLimit = 1024.0 * 1024;
        const double unit = b > kSmallLimit ? kLarge : kSmall;
        b = std::ceil(b / unit) * unit;
    }
    return b * (1.0 + m.fragmentation);
}

std::string instr_label(const Instr& in) {
    switch (in.kind) {
        case InstrKind::compute: return in.op == Op::none ? "compute" : to_string(in.op);
        case InstrKind::collective: return std::string(to_string(in.coll)) + "(" + to_string(in.group) + ")";
        case InstrKind::copy: return to_string(in.copy);
        case InstrKind::optimizer: return "cpu_optimizer";
        default: return to_string(in.kind);
    }
}

std::vector<ResourceUse> PrivateResourceMap::route(const RankProgram& rank, LinkClass c) {
    names_.push_back("rank" + std::to_string(rank.id) + "/" + to_string(c));
    classes_.push_back(c);
    return {ResourceUse{static_cast<int>(names_.size() - 1), 1.0}};
}

int PrivateResourceMap::gpus_on_node(const RankProgram& rank) const {
    const auto local = rank.global_rank % std::max(1, gpus_per_node_);
    return static_cast<int>(std::min<std::int64_t>(rank.multiplicity, gpus_per_node_ - local));
}

namespace detail {

void Engine::setup() {
    const auto nr = p_.ranks.size();
    comm_active_.assign(nr, 0);
    kernel_.assign(nr, RunningKernel{});
    if (host_on()) {
        host_.assign(nr, Host{});
        host_issue_.resize(nr);
        for (std::size_t r = 0; r < nr; ++r) host_issue_[r].assign(p_.ranks[r].instrs.size(), -1);
    }
    streams_.resize(nr);
    timing_.resize(nr);
    const std::size_t events = nr * static_cast<std::size_t>(std::max(0, p_.events));
    event_time_.assign(events, -1);
    event_waiters_.assign(events, 0);
    event_record_instr_.assign(events, -1);
    // Each stream's instruction indices, in program order, as slices of one buffer: counted first
    // so that it is allocated once at its size (programs have millions of instructions). A rank is
    // counted and then filled right away, while its instructions are still in cache.
    std::vector<bool> any_transfer(nr, false);
    std::size_t total = 0, live_total = 0, at = 0;
    for (const auto& rp : p_.ranks) total += rp.instrs.size();
    order_storage_.resize(total);
    live_min_.assign(nr, -1);
    live_offset_.assign(nr, 0);
    for (std::size_t r = 0; r < nr; ++r) {
        const auto& instrs = p_.ranks[r].instrs;
        std::array<std::size_t, kStreamCount> per_stream{};
        std::int64_t lo = std::numeric_limits<std::int64_t>::max(), hi = -1, allocs = 0;
        for (const auto& in : instrs) {
            ++per_stream[static_cast<std::size_t>(in.stream)];
            if (is_transfer(in.kind)) any_transfer[r] = true;
            if ((in.kind == InstrKind::alloc || in.kind == InstrKind::free) && in.tensor >= 0) {
                lo = std::min<std::int64_t>(lo, in.tensor);
                hi = std::max<std::int64_t>(hi, in.tensor);
                allocs += in.kind == InstrKind::alloc ? 1 : 0;
            }
        }
        std::array<int*, kStreamCount> fill{};
        for (std::size_t s = 0; s < static_cast<std::size_t>(kStreamCount); ++s) {
            streams_[r][s].order = IndexSpan{order_storage_.data() + at, per_stream[s]};
            fill[s] = order_storage_.data() + at;
            at += per_stream[s];
        }
        for (std::size_t i = 0; i < instrs.size(); ++i) *fill[static_cast<std::size_t>(instrs[i].stream)]++ = static_cast<int>(i);
        if (hi >= 0 && hi - lo + 1 <= 4 * allocs + 64) {  // dense enough for a flat slice
            live_min_[r] = lo;
            live_offset_[r] = live_total;
            live_total += static_cast<std::size_t>(hi - lo + 1);
        }
    }
    live_slots_.resize(live_total);
    routes_.resize(nr);
    rank_pool_.resize(nr);
    node_scale_.resize(nr);
    live_.resize(nr);
    std::map<std::pair<int, int>, int> node_pools;  // (tier, node) -> pool
    for (std::size_t r = 0; r < nr; ++r) {
        const auto& rp = p_.ranks[r];
        timing_[r].resize(rp.instrs.size());
        // Which link classes this program uses: route only those (routing can be costly).
        std::array<bool, kLinkClassCount> needed{};
        if (any_transfer[r]) needed.fill(true);
        for (int c = 0; c < kLinkClassCount; ++c)
            if (needed[static_cast<std::size_t>(c)]) routes_[r][static_cast<std::size_t>(c)] = rmap_.route(rp, static_cast<LinkClass>(c));
        // Memory pools: HBM per program (one GPU stands for all), DRAM/SSD per node, shared.
        Pool g;
        g.tier = Tier::gpu;
        g.node = rp.node;
        g.capacity = opt_.memory.gpu_capacity_bytes;
        if (opt_.memory.replay_caching_allocator) {
            // cudaMalloc's limit in whole bytes; an unbounded GPU still needs a finite one.
            constexpr double kUnbounded = 1e18;
            g.allocator = std::make_unique<CachingAllocator>(static_cast<std::int64_t>(std::min(g.capacity, kUnbounded)),
                                                             opt_.memory.expandable_segments);
        }
        rank_pool_[r][0] = static_cast<int>(pools_.size());
        pools_.push_back(std::move(g));
        for (Tier t : {Tier::cpu, Tier::ssd}) {
            auto key = std::make_pair(static_cast<int>(t), rp.node);
            auto it = node_pools.find(key);
            if (it == node_pools.end()) {
                Pool np;
                np.tier = t;
                np.node = rp.node;
                np.capacity = t == Tier::cpu ? opt_.memory.cpu_capacity_bytes : opt_.memory.ssd_capacity_bytes;
                it = node_pools.emplace(key, static_cast<int>(pools_.size())).first;
                pools_.push_back(std::move(np));
            }
            rank_pool_[r][static_cast<int>(t)] = it->second;
        }
        node_scale_[r] = std::max(1, rmap_.gpus_on_node(rp));
    }
    const auto nres = static_cast<std::size_t>(rmap_.resource_count());
    res_flows_.resize(nres);
    res_load_.assign(nres, 0);
    res_busy_.assign(nres, 0);
    res_last_.assign(nres, 0);
    res_stamp_.assign(nres, 0);
    local_of_.assign(nres, -1);
}

void Engine::drain() {
    // FIFO over streams made ready; each advance may ready others (record wakes waiters).
    for (std::size_t k = 0; k < ready_.size(); ++k) advance(ready_[k].first, ready_[k].second);
    ready_.clear();
}

void Engine::advance(int r, int s) {
    auto& st = streams_[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)];
    const auto& rp = p_.ranks[static_cast<std::size_t>(r)];
    while (!st.blocked && st.pos < st.order.size()) {
        const int i = st.order[st.pos];
        const Instr& in = rp.instrs[static_cast<std::size_t>(i)];
        Timing& tm = timing_[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
        if (tm.issue < 0) tm.issue = now_;
        if (host_on() && in.kind != InstrKind::alloc && in.kind != InstrKind::free && in.kind != InstrKind::record &&
            in.kind != InstrKind::wait && !host_gate(r, s, i))
            return;  // not issued by the host yet: host_ready or the pending sync wakes the stream
        switch (in.kind) {
            case InstrKind::host_sync: {
                tm.exec = tm.end = last_end_ = now_;
                ++st.pos;
                ++res_.instructions;
                if (!host_on()) continue;
                Host& h = host_[static_cast<std::size_t>(r)];
                if (h.sync == i) {  // the host thread was stopped here: it goes on, and so do its waiters
                    for (int w = 0; w < kStreamCount; ++w)
                        if (h.waiters & (1u << w)) {
                            streams_[static_cast<std::size_t>(r)][static_cast<std::size_t>(w)].blocked = false;
                            ready_.emplace_back(r, w);
                        }
                    h.waiters = 0;
                }
                continue;
            }
            case InstrKind::record:
                tm.exec = tm.end = last_end_ = now_;
                ++st.pos;
                record_event(r, in.event, i);
                ++res_.instructions;
                continue;
            case InstrKind::wait: {
                const bool valid = in.event >= 0 && in.event < p_.events;
                if (!valid || event_time_[ev(r, in.event)] >= 0) {
                    tm.exec = tm.end = last_end_ = now_;
                    ++st.pos;
                    ++res_.instructions;
                    continue;
                }
                event_waiters_[ev(r, in.event)] |=
                    static_cast<std::uint16_t>(1u << s);
                st.blocked = true;
                return;
            }
            case InstrKind::alloc:
            case InstrKind::free:
                tm.exec = tm.end = last_end_ = now_;
                memory(r, i, in);
                ++st.pos;
                ++res_.instructions;
                continue;
            case InstrKind::compute: {
                const Estimate e = cost_.compute(in, rp);
                ++res_.provenance_counts[static_cast<std::size_t>(e.provenance)];
                tm.provenance = static_cast<std::int8_t>(e.provenance);
                tm.exec = now_;
                st.blocked = true;
                const std::int64_t d = std::max<std::int64_t>(0, e.duration_ns);
                if (opt_.overlap_slowdown > 0 && s == static_cast<int>(Stream::compute)) {
                    RunningKernel& k = kernel_[static_cast<std::size_t>(r)];
                    k.running = true;
                    k.since_ns = now_;
                    k.remaining_ns = static_cast<double>(d);
                    reschedule_kernel(r);
                } else {
                    schedule(now_ + d, Ev::stream_done, r, s);
                }
                return;
            }
            default:
                st.blocked = true;
                arrive(r, s, i, in);
                return;
        }
    }
}

void Engine::record_event(int r, int e, int i) {
    if (e < 0 || e >= p_.events) return;
    const auto ru = static_cast<std::size_t>(r), k = ev(r, e);
    event_time_[k] = now_;
    event_record_instr_[k] = i;
    std::uint16_t mask = event_waiters_[k];
    event_waiters_[k] = 0;
    for (int s = 0; s < kStreamCount; ++s) {
        if (!(mask & (1u << s))) continue;
        streams_[ru][static_cast<std::size_t>(s)].blocked = false;
        ready_.emplace_back(r, s);
    }
}

void Engine::memory(int r, int i, const Instr& in) {
    const auto ru = static_cast<std::size_t>(r);
    Allocation a;
    bool found = false;
    LiveSlot* slot = nullptr;  // this tensor's slot when the rank keeps them flat
    if (in.tensor >= 0 && live_min_[ru] >= 0)
        slot = &live_slots_[live_offset_[ru] + static_cast<std::size_t>(in.tensor - live_min_[ru])];
    if (in.kind == InstrKind::free && in.tensor >= 0) {
        if (slot) {
            if (slot->live) {
                a = slot->a;
                slot->live = false;
                found = true;
            }
        } else if (auto it = live_[ru].find(in.tensor); it != live_[ru].end()) {
            a = it->second;
            live_[ru].erase(it);
            found = true;
        }
    }
    Pool& pool = pools_[static_cast<std::size_t>(rank_pool_[ru][static_cast<int>(found ? a.tier : in.tier)])];
    CachingAllocator* replay = pool.allocator.get();
    bool failed = false;  // the replay could not serve this request
    if (!found) {
        a.tier = in.tier;
        a.tag = std::clamp(in.tag, 0, kTensorTagCount - 1);
        if (replay && in.kind == InstrKind::alloc && in.tensor >= 0) {
            const CachingAllocator::Grant g = replay->malloc(static_cast<std::int64_t>(std::ceil(in.bytes)));
            a.handle = g.handle;
            a.charged = static_cast<double>(g.block_bytes);
            failed = g.failed;
        } else {
            a.charged = charged_bytes(in.bytes, in.tier, opt_.memory) * (in.tier == Tier::gpu ? 1.0 : node_scale_[ru]);
        }
        if (in.kind == InstrKind::alloc && in.tensor >= 0) {
            if (slot) *slot = LiveSlot{a, true};
            else live_[ru][in.tensor] = a;
        }
    } else if (a.handle >= 0) {
        replay->free(a.handle);
    }
    const double sign = in.kind == InstrKind::alloc ? 1.0 : -1.0;
    const double before = pool.use;
    pool.tags[static_cast<std::size_t>(a.tag)] += sign * a.charged;
    pool.allocated += sign * a.charged;
    pool.peak_allocated = std::max(pool.peak_allocated, pool.allocated);
    if (replay) {
        if (a.handle < 0) pool.unpaired += sign * a.charged;
        pool.use = static_cast<double>(replay->stats().reserved_bytes) + pool.unpaired;
    } else {
        pool.use += sign * a.charged;
    }
    if (pool.use > pool.peak) {
        pool.peak = pool.use;
        pool.peak_tags = pool.tags;
    }
    const bool over = replay && a.handle >= 0 ? failed : pool.use > pool.capacity;
    if (sign > 0 && over && before <= pool.capacity) {
        ++res_.oom_count;
        if (res_.ooms.size() < opt_.max_oom_records) {
            OomRecord o;
            o.time_ns = now_;
            o.tier = a.tier;
            o.rank = r;
            o.node = p_.ranks[ru].node;
            o.instr = i;
            o.name = in.name >= 0 && static_cast<std::size_t>(in.name) < p_.names.size() ? p_.names[static_cast<std::size_t>(in.name)]
                                                                                        : instr_label(in);
            o.request_bytes = a.charged;
            o.in_use_bytes = pool.use;
            o.capacity_bytes = pool.capacity;
            o.breakdown = pool.tags;
            res_.ooms.push_back(std::move(o));
        }
    }
    if (opt_.record_trace) res_.memory_samples.push_back(MemorySample{r, a.tier, pool.node, now_, pool.use});
}

int Engine::new_transfer() {
    if (!free_transfers_.empty()) {
        int t = free_transfers_.back();
        free_transfers_.pop_back();
        auto& tr = transfers_[static_cast<std::size_t>(t)];
        tr.members.clear();
        tr.expected = 1;
        tr.pending = 0;
        tr.group = -1;
        return t;
    }
    transfers_.emplace_back();
    return static_cast<int>(transfers_.size() - 1);
}

int Engine::new_flow() {
    if (!free_flows_.empty()) {
        int f = free_flows_.back();
        free_flows_.pop_back();
        return f;
    }
    flows_.emplace_back();
    return static_cast<int>(flows_.size() - 1);
}

void Engine::arrive(int r, int s, int i, const Instr& in) {
    const auto& rp = p_.ranks[static_cast<std::size_t>(r)];
    Member m;
    m.rank = r;
    m.stream = s;
    m.instr = i;
    m.demand = cost_.transfer(in, rp);
    ++res_.provenance_counts[static_cast<std::size_t>(m.demand.provenance)];
    // Dominant link class, for labels of the critical path.
    double best = 0;
    Timing& tm = timing_[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
    tm.provenance = static_cast<std::int8_t>(m.demand.provenance);
    for (int c = 0; c < kLinkClassCount; ++c)
        if (m.demand.busy_s[static_cast<std::size_t>(c)] > best)
            best = m.demand.busy_s[static_cast<std::size_t>(c)], tm.link = static_cast<std::uint8_t>(c);

    const bool p2p = in.kind == InstrKind::send || in.kind == InstrKind::recv;
    const bool matched = in.match_id != 0 && (p2p || (in.kind == InstrKind::collective && in.participants > 1));
    if (!matched) {
        const int t = new_transfer();
        transfers_[static_cast<std::size_t>(t)].members.push_back(m);
        start_transfer(t);
        return;
    }
    auto it = open_matches_.find(in.match_id);
    int t;
    if (it == open_matches_.end()) {
        t = new_transfer();
        transfers_[static_cast<std::size_t>(t)].expected = p2p ? 2 : in.participants;
        transfers_[static_cast<std::size_t>(t)].group = groups_++;
        open_matches_.emplace(in.match_id, t);
    } else {
        t = it->second;
    }
    auto& tr = transfers_[static_cast<std::size_t>(t)];
    tm.group = tr.group;
    tr.members.push_back(m);
    if (static_cast<int>(tr.members.size()) >= tr.expected) {
        open_matches_.erase(in.match_id);
        start_transfer(t);
    }
}

void Engine::start_transfer(int tid) {
    auto& tr = transfers_[static_cast<std::size_t>(tid)];
    tr.pending = static_cast<int>(tr.members.size());
    for (std::size_t k = 0; k < tr.members.size(); ++k) {
        const auto& m = tr.members[k];
        timing_[static_cast<std::size_t>(m.rank)][static_cast<std::size_t>(m.instr)].exec = now_;
        if (opt_.overlap_slowdown > 0 &&
            is_comm(p_.ranks[static_cast<std::size_t>(m.rank)].instrs[static_cast<std::size_t>(m.instr)].kind))
            comm_changed(m.rank, +1);
        schedule(now_ + std::max<std::int64_t>(0, m.demand.latency_ns), Ev::member_begin, tid, static_cast<int>(k));
    }
}

void Engine::member_begin(int tid, int mi) {
    const Member& m = transfers_[static_cast<std::size_t>(tid)].members[static_cast<std::size_t>(mi)];
    const int f = new_flow();
    Flow& fl = flows_[static_cast<std::size_t>(f)];
    fl.transfer = tid;
    fl.member = mi;
    fl.remaining = 1;
    fl.rate = 0;
    fl.last = now_;
    fl.active = true;
    fl.uses.clear();
    double unrouted = 0;  // busy seconds of classes the map gave no resource for: a private limit
    for (int c = 0; c < kLinkClassCount; ++c) {
        const double busy = m.demand.busy_s[static_cast<std::size_t>(c)];
        if (!(busy > 0)) continue;
        const auto& route = routes_[static_cast<std::size_t>(m.rank)][static_cast<std::size_t>(c)];
        if (route.empty()) unrouted = std::max(unrouted, busy);
        for (const auto& u : route) {
            auto same = std::find_if(fl.uses.begin(), fl.uses.end(), [&](const MaxMinUse& x) { return x.resource == u.resource; });
            if (same != fl.uses.end()) same->weight += busy * u.multiplicity;
            else fl.uses.push_back(MaxMinUse{u.resource, busy * u.multiplicity});
        }
    }
    ++res_.flows;
    if (fl.uses.empty()) {
        fl.rate = unrouted > 0 ? 1.0 / unrouted : 0;
        schedule(now_ + ceil_ns(unrouted), Ev::flow_done, f, 0, fl.version);
        return;
    }
    // A private limit rides along as a resource only this flow uses: handled as its cap.
    fl.cap = unrouted > 0 ? 1.0 / unrouted : std::numeric_limits<double>::infinity();
    for (const auto& u : fl.uses) res_flows_[static_cast<std::size_t>(u.resource)].push_back(f);
    resolve(fl.uses);
}

void Engine::resolve(const std::vector<MaxMinUse>& seeds) {
    // The connected component of resources and flows reachable from the seeds: only their rates
    // can change when a flow starts or ends there.
    ++stamp_;
    comp_res_.clear();
    comp_flows_.clear();
    if (flow_stamp_.size() < flows_.size()) flow_stamp_.resize(flows_.size(), 0);
    for (const auto& u : seeds) {
        if (res_stamp_[static_cast<std::size_t>(u.resource)] == stamp_) continue;
        res_stamp_[static_cast<std::size_t>(u.resource)] = stamp_;
        comp_res_.push_back(u.resource);
    }
    for (std::size_t k = 0; k < comp_res_.size(); ++k) {
        for (int f : res_flows_[static_cast<std::size_t>(comp_res_[k])]) {
            if (flow_stamp_[static_cast<std::size_t>(f)] == stamp_) continue;
            flow_stamp_[static_cast<std::size_t>(f)] = stamp_;
            comp_flows_.push_back(f);
            for (const auto& u : flows_[static_cast<std::size_t>(f)].uses) {
                if (res_stamp_[static_cast<std::size_t>(u.resource)] == stamp_) continue;
                res_stamp_[static_cast<std::size_t>(u.resource)] = stamp_;
                comp_res_.push_back(u.resource);
            }
        }
    }
    std::sort(comp_flows_.begin(), comp_flows_.end());
    std::sort(comp_res_.begin(), comp_res_.end());
    // Account the busy time of the old loads up to now.
    for (int r : comp_res_) {
        const auto ru = static_cast<std::size_t>(r);
        res_busy_[ru] += res_load_[ru] * static_cast<double>(now_ - res_last_[ru]) * 1e-9;
        res_last_[ru] = now_;
        res_load_[ru] = 0;
    }
    for (std::size_t k = 0; k < comp_res_.size(); ++k) local_of_[static_cast<std::size_t>(comp_res_[k])] = static_cast<int>(k);
    mm_capacity_.assign(comp_res_.size(), 1.0);  // a resource offers one busy-second per second
    if (mm_flows_.size() < comp_flows_.size()) mm_flows_.resize(comp_flows_.size());
    for (std::size_t k = 0; k < comp_flows_.size(); ++k) {
        const Flow& fl = flows_[static_cast<std::size_t>(comp_flows_[k])];
        auto& mf = mm_flows_[k];
        mf.uses.clear();
        for (const auto& u : fl.uses) mf.uses.push_back(MaxMinUse{local_of_[static_cast<std::size_t>(u.resource)], u.weight});
        mf.cap = fl.cap;
        mf.priority = 1.0;
    }
    view_.resize(comp_flows_.size());
    for (std::size_t k = 0; k < comp_flows_.size(); ++k) std::swap(view_[k], mm_flows_[k]);
    solver_.solve(mm_capacity_, view_, mm_rates_);
    for (std::size_t k = 0; k < comp_flows_.size(); ++k) std::swap(view_[k], mm_flows_[k]);

    for (std::size_t k = 0; k < comp_flows_.size(); ++k) {
        const int f = comp_flows_[k];
        Flow& fl = flows_[static_cast<std::size_t>(f)];
        const double rate = mm_rates_[k];
        for (const auto& u : fl.uses) res_load_[static_cast<std::size_t>(u.resource)] += rate * u.weight;
        if (rate == fl.rate) continue;  // its completion event still holds
        fl.remaining = std::max(0.0, fl.remaining - fl.rate * static_cast<double>(now_ - fl.last) * 1e-9);
        fl.last = now_;
        const bool had_end = fl.rate > 0;  // a completion event is pending, and is superseded now
        fl.rate = rate;
        ++fl.version;
        schedule(now_ + ceil_ns(fl.remaining / rate), Ev::flow_done, f, 0, fl.version);
        if (had_end) superseded();
    }
}

void Engine::flow_done(int f, std::uint32_t version) {
    Flow& fl = flows_[static_cast<std::size_t>(f)];
    if (!fl.active || fl.version != version) return;  // superseded by a later rate change
    fl.active = false;
    fl.remaining = 0;
    const int tid = fl.transfer;
    if (!fl.uses.empty()) {
        for (const auto& u : fl.uses) {
            auto& v = res_flows_[static_cast<std::size_t>(u.resource)];
            auto it = std::find(v.begin(), v.end(), f);
            if (it != v.end()) v.erase(it);  // keep order: determinism of the component walk
        }
        seeds_ = fl.uses;
        ++fl.version;
        free_flows_.push_back(f);
        resolve(seeds_);
    } else {
        ++fl.version;
        free_flows_.push_back(f);
    }
    member_finished(tid);
}

void Engine::member_finished(int tid) {
    auto& tr = transfers_[static_cast<std::size_t>(tid)];
    if (--tr.pending > 0) return;
    // All participants' data has moved: the instruction completes for every one of them together.
    for (const auto& m : tr.members) finish_instr(m.rank, m.stream);
    free_transfers_.push_back(tid);
}

void Engine::finish_instr(int r, int s) {
    auto& st = streams_[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)];
    const int i = st.order[st.pos];
    Timing& tm = timing_[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
    tm.end = last_end_ = now_;
    if (opt_.overlap_slowdown > 0) {  // interference bookkeeping only when there is interference
        if (is_comm(p_.ranks[static_cast<std::size_t>(r)].instrs[static_cast<std::size_t>(i)].kind)) comm_changed(r, -1);
        if (s == static_cast<int>(Stream::compute)) kernel_[static_cast<std::size_t>(r)].running = false;
    }
    res_.ranks[static_cast<std::size_t>(r)].busy_ns[static_cast<std::size_t>(s)] += tm.end - tm.exec;
    ++res_.instructions;
    ++st.pos;
    st.blocked = false;
    ready_.emplace_back(r, s);
}

}  // namespace detail

SimResult simulate_program(const Program& program, const CostModel& costs, ResourceMap* resources,
                           const EngineOptions& options) {
    PrivateResourceMap fallback;
    detail::Engine e(program, costs, resources ? *resources : fallback, options);
    return e.run();
}

}  // namespace strata::sim
