// The engine on small hand-built Programs with a fake cost model, each expected time derived by
// hand in a comment. Fake costs: a compute instruction takes `flops` nanoseconds; a transfer keeps
// its class (nic for collectives/p2p, pcie_h2d for copies) busy `bytes` nanoseconds, after a
// latency of `m` nanoseconds.
#include <catch2/catch.hpp>

#include "strata/sim/engine.hpp"
#include "strata/sim/trace.hpp"

using namespace strata::sim;

namespace {

struct FakeCost : CostModel {
    Estimate compute(const Instr& in, const RankProgram&) const override {
        return Estimate{static_cast<std::int64_t>(in.flops), strata::hwdb::Provenance::measured};
    }
    Demand transfer(const Instr& in, const RankProgram&) const override {
        Demand d;
        d.latency_ns = in.m;
        const LinkClass c = in.kind == InstrKind::copy ? LinkClass::pcie_h2d : LinkClass::nic;
        d.busy_s[static_cast<std::size_t>(c)] = in.bytes * 1e-9;
        d.provenance = strata::hwdb::Provenance::datasheet;
        return d;
    }
};

Instr compute(double ns, Stream s = Stream::compute, Phase ph = Phase::forward) {
    Instr in;
    in.kind = InstrKind::compute;
    in.op = Op::gemm;
    in.stream = s;
    in.phase = ph;
    in.flops = ns;
    return in;
}
Instr coll(double busy_ns, Stream s, std::int64_t match = 0, int participants = 1) {
    Instr in;
    in.kind = InstrKind::collective;
    in.coll = CollKind::all_reduce;
    in.group = Group::dp;
    in.stream = s;
    in.bytes = busy_ns;
    in.match_id = match;
    in.participants = participants;
    return in;
}
Instr p2p(InstrKind k, int peer, std::int64_t match, double busy_ns = 0, Stream s = Stream::compute) {
    Instr in;
    in.kind = k;
    in.stream = s;
    in.peer = peer;
    in.match_id = match;
    in.bytes = busy_ns;
    return in;
}
Instr rec(int e, Stream s) {
    Instr in;
    in.kind = InstrKind::record;
    in.stream = s;
    in.event = e;
    return in;
}
Instr wait(int e, Stream s) {
    Instr in;
    in.kind = InstrKind::wait;
    in.stream = s;
    in.event = e;
    return in;
}
Instr mem(InstrKind k, Tier t, double bytes, std::int64_t tensor, TensorTag tag = TensorTag::activations) {
    Instr in;
    in.kind = k;
    in.tier = t;
    in.bytes = bytes;
    in.tensor = tensor;
    in.tag = static_cast<int>(tag);
    return in;
}

Program one_rank(std::vector<Instr> instrs, int events = 8) {
    Program p;
    p.events = events;
    p.ranks.resize(1);
    p.ranks[0].instrs = std::move(instrs);
    return p;
}

// p2p match ids: unique per (direction, boundary, micro-batch).
std::int64_t fwd_id(int stage, int mb) { return 1000000 + stage * 1000 + mb; }
std::int64_t bwd_id(int stage, int mb) { return 2000000 + stage * 1000 + mb; }

// Compute-only pipeline (zero-cost p2p on the compute stream), forward 1 unit, backward 2.
Program gpipe(int p, int m, double unit) {
    Program prog;
    prog.ranks.resize(static_cast<std::size_t>(p));
    for (int s = 0; s < p; ++s) {
        auto& rp = prog.ranks[static_cast<std::size_t>(s)];
        rp.id = s;
        rp.pp_stage = s;
        rp.node = s;
        rp.global_rank = s;
        for (int i = 0; i < m; ++i) {
            if (s > 0) rp.instrs.push_back(p2p(InstrKind::recv, s - 1, fwd_id(s, i)));
            rp.instrs.push_back(compute(unit));
            if (s < p - 1) rp.instrs.push_back(p2p(InstrKind::send, s + 1, fwd_id(s + 1, i)));
        }
        for (int i = m - 1; i >= 0; --i) {
            if (s < p - 1) rp.instrs.push_back(p2p(InstrKind::recv, s + 1, bwd_id(s, i)));
            rp.instrs.push_back(compute(2 * unit, Stream::compute, Phase::backward));
            if (s > 0) rp.instrs.push_back(p2p(InstrKind::send, s - 1, bwd_id(s - 1, i)));
        }
    }
    return prog;
}

// 1F1B (Megatron's non-interleaved schedule): recvs on the compute stream, sends on pp-p2p after a
// record/wait so compute never blocks on its own sends.
Program one_f_one_b(int p, int m, double unit) {
    Program prog;
    prog.ranks.resize(static_cast<std::size_t>(p));
    prog.events = 2 * m;
    for (int s = 0; s < p; ++s) {
        auto& rp = prog.ranks[static_cast<std::size_t>(s)];
        rp.id = s;
        rp.pp_stage = s;
        rp.node = s;
        rp.global_rank = s;
        auto fwd = [&](int i) {
            if (s > 0) rp.instrs.push_back(p2p(InstrKind::recv, s - 1, fwd_id(s, i)));
            rp.instrs.push_back(compute(unit));
            if (s < p - 1) {
                rp.instrs.push_back(rec(i, Stream::compute));
                rp.instrs.push_back(wait(i, Stream::pp_p2p));
                rp.instrs.push_back(p2p(InstrKind::send, s + 1, fwd_id(s + 1, i), 0, Stream::pp_p2p));
            }
        };
        auto bwd = [&](int i) {
            if (s < p - 1) rp.instrs.push_back(p2p(InstrKind::recv, s + 1, bwd_id(s, i)));
            rp.instrs.push_back(compute(2 * unit, Stream::compute, Phase::backward));
            if (s > 0) {
                rp.instrs.push_back(rec(m + i, Stream::compute));
                rp.instrs.push_back(wait(m + i, Stream::pp_p2p));
                rp.instrs.push_back(p2p(InstrKind::send, s - 1, bwd_id(s - 1, i), 0, Stream::pp_p2p));
            }
        };
        const int warmup = std::min(p - s - 1, m);
        for (int i = 0; i < warmup; ++i) fwd(i);
        for (int i = 0; i < m - warmup; ++i) {
            fwd(warmup + i);
            bwd(i);
        }
        for (int i = m - warmup; i < m; ++i) bwd(i);
    }
    return prog;
}

}  // namespace

TEST_CASE("engine: compute-only GPipe gives (m+p-1) x 3 units and bubble (p-1)/(m+p-1)", "[engine]") {
    // Forward wave: the last stage ends its forwards at (m + p - 1) units; the backward wave (2
    // units each) takes m*2 on the last stage plus 2 per stage to reach stage 0:
    // (m + p - 1) + 2(m + p - 1) = 3(m + p - 1). Each stage computes 3m units, so its idle share
    // is 3(p - 1) / 3(m + p - 1) = (p - 1)/(m + p - 1).
    const int p = 4, m = 8;
    const double unit = 1000;
    FakeCost cost;
    auto r = simulate_program(gpipe(p, m, unit), cost, nullptr);
    REQUIRE_FALSE(r.deadlock);
    CHECK(r.step_time_ns == 3 * (m + p - 1) * 1000);
    CHECK(r.bubble_fraction == Approx(double(p - 1) / (m + p - 1)));
    CHECK(r.exposed_comm_ns == 0);
    CHECK(r.critical_path.length_ns == r.step_time_ns);
}

TEST_CASE("engine: compute-only 1F1B has the same step time and bubble", "[engine]") {
    // 1F1B reorders work but keeps the (p - 1)(t_f + t_b) fill/drain: step = (m + p - 1) * 3 units.
    for (auto [p, m] : {std::pair{4, 8}, std::pair{2, 2}, std::pair{3, 5}}) {
        FakeCost cost;
        auto r = simulate_program(one_f_one_b(p, m, 1000), cost, nullptr);
        INFO("p=" << p << " m=" << m << " " << r.deadlock_detail);
        REQUIRE_FALSE(r.deadlock);
        CHECK(r.step_time_ns == 3 * (m + p - 1) * 1000);
        CHECK(r.bubble_fraction == Approx(double(p - 1) / (m + p - 1)));
    }
}

TEST_CASE("engine: two flows on one link each take twice as long", "[engine]") {
    FakeCost cost;
    // One all-reduce alone: 1000 ns of nic busy -> ends at 1000.
    auto alone = simulate_program(one_rank({coll(1000, Stream::dp_comm)}), cost, nullptr);
    CHECK(alone.step_time_ns == 1000);
    // Two on the same rank's nic from two streams: each gets half -> both end at 2000.
    auto two = simulate_program(one_rank({coll(1000, Stream::dp_comm), coll(1000, Stream::tp_comm)}), cost, nullptr);
    CHECK(two.step_time_ns == 2000);
    REQUIRE(two.utilisation.size() >= 1);
    // Unequal: 1000 and 3000. Both at half speed until the small one ends at 2000 (it moved 1000
    // busy-ns at rate 1/2); the big one has 3000 - 1000 = 2000 left at full speed -> ends at 4000.
    auto uneq = simulate_program(one_rank({coll(1000, Stream::dp_comm), coll(3000, Stream::tp_comm)}), cost, nullptr);
    CHECK(uneq.step_time_ns == 4000);
    // The nic was busy all 4000 ns: utilisation 1.
    bool found = false;
    for (const auto& u : uneq.utilisation)
        if (u.cls == LinkClass::nic) {
            found = true;
            CHECK(u.utilisation == Approx(1.0));
        }
    CHECK(found);
}

TEST_CASE("engine: latency comes before the data and does not load the link", "[engine]") {
    FakeCost cost;
    auto a = coll(1000, Stream::dp_comm);
    a.m = 300;  // latency
    // 300 ns latency, then 1000 ns of data: 1300.
    CHECK(simulate_program(one_rank({a}), cost, nullptr).step_time_ns == 1300);
}

TEST_CASE("engine: an overlapped DP reduce adds nothing, an exposed one adds its transfer", "[engine]") {
    FakeCost cost;
    // Overlapped: compute C1 (1000), record e0; C2 (2000) continues while dp-comm waits e0 and
    // reduces (500, ends at 1500); compute then waits e1 (already recorded) -> step = 3000.
    auto overlapped = one_rank({compute(1000), rec(0, Stream::compute), wait(0, Stream::dp_comm),
                                coll(500, Stream::dp_comm), rec(1, Stream::dp_comm), compute(2000), wait(1, Stream::compute)});
    auto r1 = simulate_program(overlapped, cost, nullptr);
    CHECK(r1.step_time_ns == 3000);
    CHECK(r1.exposed_comm_ns == 0);
    CHECK(r1.ranks[0].busy_ns[static_cast<int>(Stream::dp_comm)] == 500);
    // Exposed: compute waits for e1 before C2: 1000 + 500 + 2000 = 3500, exposed = 500.
    auto exposed = one_rank({compute(1000), rec(0, Stream::compute), wait(0, Stream::dp_comm),
                             coll(500, Stream::dp_comm), rec(1, Stream::dp_comm), wait(1, Stream::compute), compute(2000)});
    auto r2 = simulate_program(exposed, cost, nullptr);
    CHECK(r2.step_time_ns == 3500);
    CHECK(r2.exposed_comm_ns == 500);
    CHECK(r2.bubble_fraction == Approx(0.0));
    // Critical path: compute 3000 of 3500, the all-reduce 500.
    CHECK(r2.critical_path.length_ns == 3500);
    REQUIRE(r2.critical_path.segments.size() == 2);
    CHECK(r2.critical_path.segments[0].label == "gemm");
    CHECK(r2.critical_path.segments[0].share == Approx(3000.0 / 3500));
    CHECK(r2.critical_path.segments[1].label == "all_reduce(dp)");
    CHECK(r2.critical_path.segments[1].link == "nic");
    // The path's instructions in time order: the first GEMM (instr 0), the reduce (3), the second
    // GEMM (6); records and waits take no time and are left out.
    REQUIRE(r2.critical_path.steps.size() == 3);
    CHECK(r2.critical_path.steps[0].instr == 0);
    CHECK(r2.critical_path.steps[1].instr == 3);
    CHECK(r2.critical_path.steps[2].instr == 6);
    for (const auto& st : r2.critical_path.steps) CHECK(st.rank == 0);
}

TEST_CASE("engine: record/wait orders streams", "[engine]") {
    FakeCost cost;
    // dp-comm waits e0 first (not yet recorded): it must not start before compute's 700 ns kernel.
    // Then its 200 ns transfer: step = 900.
    auto p = one_rank({wait(0, Stream::dp_comm), coll(200, Stream::dp_comm), compute(700), rec(0, Stream::compute)});
    auto r = simulate_program(p, cost, nullptr);
    CHECK(r.step_time_ns == 900);
    // A wait on an event recorded earlier passes at once: compute 700, then dp 200 in parallel? No:
    // dp waits for the record at 700, so the same 900 whatever the order of the instructions.
    auto q = one_rank({compute(700), rec(0, Stream::compute), wait(0, Stream::dp_comm), coll(200, Stream::dp_comm)});
    CHECK(simulate_program(q, cost, nullptr).step_time_ns == 900);
}

TEST_CASE("engine: cross-program send/recv and matched collectives", "[engine]") {
    FakeCost cost;
    Program p;
    p.ranks.resize(2);
    p.ranks[0].id = 0;
    p.ranks[1].id = 1;
    p.ranks[1].node = 1;
    // Rank 0 computes 1000 then sends (latency 100, 500 busy). Rank 1 posts its recv at 0; the
    // pair starts at 1000 when both are there: 100 + 500 -> recv done at 1600; rank 1 computes
    // 1000 more -> 2600.
    auto s = p2p(InstrKind::send, 1, 42, 500);
    s.m = 100;
    auto rcv = p2p(InstrKind::recv, 0, 42, 500);
    rcv.m = 100;
    p.ranks[0].instrs = {compute(1000), s};
    p.ranks[1].instrs = {rcv, compute(1000)};
    auto r = simulate_program(p, cost, nullptr);
    REQUIRE_FALSE(r.deadlock);
    CHECK(r.step_time_ns == 2600);
    // Rank 1's compute stream waited 1000 for its peer (bubble) and 600 on the data (exposed).
    CHECK(r.ranks[1].exposed_comm_ns == 600);
    CHECK(r.ranks[1].bubble_ns == 1000);

    // A collective matched over 3 programs arriving at 0, 300, 800: all start at 800, each
    // moves 400 on its own nic -> all end at 1200.
    Program c;
    c.ranks.resize(3);
    for (int k = 0; k < 3; ++k) {
        c.ranks[static_cast<std::size_t>(k)].id = k;
        c.ranks[static_cast<std::size_t>(k)].node = k;
    }
    c.ranks[0].instrs = {coll(400, Stream::compute, 9, 3)};
    c.ranks[1].instrs = {compute(300), coll(400, Stream::compute, 9, 3)};
    c.ranks[2].instrs = {compute(800), coll(400, Stream::compute, 9, 3)};
    auto rc = simulate_program(c, cost, nullptr);
    REQUIRE_FALSE(rc.deadlock);
    CHECK(rc.step_time_ns == 1200);
    CHECK(rc.ranks[0].busy_ns[0] == 400);
    CHECK(rc.critical_path.length_ns == 1200);
}

TEST_CASE("engine: a recv without its send is reported as deadlock, not a hang", "[engine]") {
    FakeCost cost;
    Program p;
    p.ranks.resize(1);
    p.ranks[0].instrs = {p2p(InstrKind::recv, 1, 5)};
    auto r = simulate_program(p, cost, nullptr);
    CHECK(r.deadlock);
    CHECK(r.deadlock_detail.find("recv") != std::string::npos);
}

TEST_CASE("engine: allocator model rounding", "[engine][memory]") {
    MemoryOptions m;
    m.fragmentation = 0;
    // <= 1 MiB: 512 B blocks. 1 B -> 512; 513 -> 1024.
    CHECK(charged_bytes(1, Tier::gpu, m) == 512);
    CHECK(charged_bytes(513, Tier::gpu, m) == 1024);
    // > 1 MiB: 2 MiB segments. 1.5 MiB -> 2 MiB; 3 MiB -> 4 MiB.
    CHECK(charged_bytes(1.5 * 1048576, Tier::gpu, m) == 2 * 1048576.0);
    CHECK(charged_bytes(3 * 1048576, Tier::gpu, m) == 4 * 1048576.0);
    // Host tiers are charged as requested; fragmentation multiplies the GPU tier only.
    CHECK(charged_bytes(1000, Tier::cpu, m) == 1000);
    m.fragmentation = 0.1;
    CHECK(charged_bytes(2 * 1048576, Tier::gpu, m) == Approx(2 * 1048576 * 1.1));
}

TEST_CASE("engine: an allocation past capacity is an OOM on the right tier and instruction", "[engine][memory]") {
    FakeCost cost;
    EngineOptions o;
    o.memory.fragmentation = 0;
    o.memory.gpu_capacity_bytes = 10 * 1048576.0;
    o.memory.cpu_capacity_bytes = 5000;
    const double MiB = 1048576;
    // GPU: 6 MiB (ok), 6 MiB (12 > 10: OOM at instr 1), free the first (6), 6 MiB again (12: a
    // second excursion, instr 3). CPU: 4000 ok, then 2000 -> 6000 > 5000: OOM at instr 5.
    auto p = one_rank({mem(InstrKind::alloc, Tier::gpu, 6 * MiB, 1, TensorTag::weights),
                       mem(InstrKind::alloc, Tier::gpu, 6 * MiB, 2), mem(InstrKind::free, Tier::gpu, 6 * MiB, 1),
                       mem(InstrKind::alloc, Tier::gpu, 6 * MiB, 3), mem(InstrKind::alloc, Tier::cpu, 4000, 4),
                       mem(InstrKind::alloc, Tier::cpu, 2000, 5, TensorTag::optimizer)});
    auto r = simulate_program(p, cost, nullptr, o);
    REQUIRE(r.oom);
    REQUIRE(r.ooms.size() == 3);
    CHECK(r.ooms[0].tier == Tier::gpu);
    CHECK(r.ooms[0].instr == 1);
    CHECK(r.ooms[0].in_use_bytes == 12 * MiB);
    CHECK(r.ooms[0].breakdown[static_cast<int>(TensorTag::weights)] == 6 * MiB);
    CHECK(r.ooms[1].instr == 3);
    CHECK(r.ooms[2].tier == Tier::cpu);
    CHECK(r.ooms[2].instr == 5);
    // Peaks: GPU 12 MiB (weights 6 + activations 6 at the first peak), CPU 6000.
    CHECK(r.ranks[0].peak_bytes[0] == 12 * MiB);
    CHECK(r.ranks[0].peak_breakdown[0][static_cast<int>(TensorTag::activations)] == 6 * MiB);
    CHECK(r.peak_bytes_max[1] == 6000);
}

// The engine keeps live allocations flat when a rank's tensor ids are dense (lowered programs)
// and in a map otherwise; a free must release what its alloc charged either way. By hand, 512 B
// blocks, no fragmentation: A 1000 -> 1024, B 3000 -> 3072 (use 4096), free A (its own bytes,
// 100000, must be ignored: -1024 -> 3072), C 3000 -> 3072 (use 6144 = the peak). Releasing the
// free's own 100352 instead would leave the peak at 4096.
TEST_CASE("engine: a free releases its alloc's charge, tensor ids dense or sparse", "[engine][memory]") {
    FakeCost cost;
    EngineOptions o;
    o.memory.fragmentation = 0;
    for (const std::int64_t stride : {std::int64_t{1}, std::int64_t{1000000}}) {  // dense, sparse
        const std::int64_t a = 7, b = 7 + stride, c = 7 + 2 * stride;
        auto p = one_rank({mem(InstrKind::alloc, Tier::gpu, 1000, a), mem(InstrKind::alloc, Tier::gpu, 3000, b),
                           mem(InstrKind::free, Tier::gpu, 100000, a), mem(InstrKind::alloc, Tier::gpu, 3000, c)});
        auto r = simulate_program(p, cost, nullptr, o);
        INFO("stride " << stride);
        CHECK(r.ranks[0].peak_bytes[0] == 6144);
    }
}

TEST_CASE("engine: node pools are shared by the programs of a node and scaled by GPUs", "[engine][memory]") {
    FakeCost cost;
    // Two programs on node 0, each standing for 4 GPUs of an 8-GPU node; each allocates 1000 B of
    // host memory per GPU -> the node pool holds 2 x 4 x 1000 = 8000 B.
    Program p;
    p.ranks.resize(2);
    for (int k = 0; k < 2; ++k) {
        auto& rp = p.ranks[static_cast<std::size_t>(k)];
        rp.id = k;
        rp.global_rank = 4 * k;
        rp.multiplicity = 4;
        rp.instrs = {mem(InstrKind::alloc, Tier::cpu, 1000, 1)};
    }
    PrivateResourceMap map(8);
    auto r = simulate_program(p, cost, &map);
    CHECK(r.ranks[0].peak_bytes[1] == 8000);
    CHECK(r.ranks[1].peak_bytes[1] == 8000);
}

TEST_CASE("engine: identical input gives byte-identical JSON and trace", "[engine]") {
    FakeCost cost;
    EngineOptions o;
    o.record_trace = true;
    auto prog = one_f_one_b(3, 4, 1000);
    prog.ranks[0].instrs.push_back(mem(InstrKind::alloc, Tier::gpu, 5000, 7));
    prog.ranks[1].instrs.push_back(coll(700, Stream::dp_comm));
    prog.ranks[1].instrs.push_back(coll(300, Stream::tp_comm));
    auto a = simulate_program(prog, cost, nullptr, o);
    auto b = simulate_program(prog, cost, nullptr, o);
    JobFigures job{1.0, 2.0, 0.5, "m", "c", "p"};
    CHECK(to_json_text(a, job) == to_json_text(b, job));
    CHECK(to_chrome_trace(prog, a) == to_chrome_trace(prog, b));
    CHECK(to_json_text(a, job).find("\"step_time_s\": ") != std::string::npos);
}

TEST_CASE("engine: provenance counts and instruction counts", "[engine]") {
    FakeCost cost;
    auto r = simulate_program(one_rank({compute(10), compute(10), coll(10, Stream::dp_comm), rec(0, Stream::compute)}), cost, nullptr);
    CHECK(r.provenance_counts[0] == 2);  // the fake marks kernels measured
    CHECK(r.provenance_counts[2] == 1);  // and transfers datasheet
    CHECK(r.instructions == 4);
}

TEST_CASE("engine: rates are re-solved when a flow joins and when one leaves", "[engine]") {
    FakeCost cost;
    // A (1000 busy-ns) starts at 0 alone: by 500 it has moved half. B (1000) joins at 500 after a
    // 500 ns kernel on its stream's rank... both at half speed: A's last 500 take 1000 -> A ends
    // at 1500, when B has moved 500. B alone moves its last 500 at full speed -> ends at 2000.
    auto p = one_rank({coll(1000, Stream::dp_comm), compute(500, Stream::tp_comm), coll(1000, Stream::tp_comm)});
    EngineOptions o;
    o.record_trace = true;
    auto r = simulate_program(p, cost, nullptr, o);
    CHECK(r.step_time_ns == 2000);
    REQUIRE(r.spans.size() == 3);
    for (const auto& s : r.spans) {
        if (s.instr == 0) CHECK(s.end_ns == 1500);
        if (s.instr == 2) CHECK((s.start_ns == 500 && s.end_ns == 2000));
    }
}

TEST_CASE("engine: compute/communication interference slows kernels while a transfer runs", "[engine]") {
    // One rank: an all-reduce of 3000 ns on dp_comm and three 1000-ns kernels on compute, all
    // issued at 0. With overlap_slowdown 0.25 a kernel progresses at 1/1.25 = 0.8 while the
    // transfer is in flight: kernel 1 0..1250, kernel 2 1250..2500, kernel 3 from 2500: 400 ns of
    // work by 3000, the other 600 at full speed -> 3600. Without the term: 3000.
    FakeCost cost;
    auto prog = one_rank({coll(3000, Stream::dp_comm), compute(1000), compute(1000), compute(1000)});
    CHECK(simulate_program(prog, cost, nullptr).step_time_ns == 3000);
    EngineOptions o;
    o.overlap_slowdown = 0.25;
    CHECK(simulate_program(prog, cost, nullptr, o).step_time_ns == 3600);
    // A 500-ns transfer: kernel 1 does 400 ns of work by 500 and the other 600 at full speed
    // (ends 1100); kernel 2 runs alone, 1100..2100.
    auto late = one_rank({coll(500, Stream::dp_comm), compute(1000), compute(1000)});
    CHECK(simulate_program(late, cost, nullptr, o).step_time_ns == 2100);
    // Copies run on DMA engines and do not interfere.
    Instr h2d;
    h2d.kind = InstrKind::copy;
    h2d.copy = CopyKind::h2d;
    h2d.stream = Stream::h2d;
    h2d.bytes = 3000;
    CHECK(simulate_program(one_rank({h2d, compute(1000)}), cost, nullptr, o).step_time_ns == 3000);
}

TEST_CASE("engine: the host issues kernels in program order and stops at host syncs", "[engine][host]") {
    FakeCost cost;
    EngineOptions o;
    o.host_launch_ns = 20;
    // Three 10-ns kernels, 20 ns of host time each: issued at 20, 40, 60, so they run 20..30,
    // 40..50, 60..70; the GPU waits 20 + 10 + 10 = 40 ns for the host. Without the model: 30.
    auto three = one_rank({compute(10), compute(10), compute(10)});
    CHECK(simulate_program(three, cost, nullptr).step_time_ns == 30);
    const SimResult r = simulate_program(three, cost, nullptr, o);
    CHECK(r.step_time_ns == 70);
    CHECK(r.ranks[0].host_wait_ns == 40);
    CHECK(r.ranks[0].bubble_ns == 0);
    // Long kernels hide the host: 100-ns kernels issued every 20 ns run back to back from 20.
    CHECK(simulate_program(one_rank({compute(100), compute(100)}), cost, nullptr, o).step_time_ns == 220);

    // A host sync after a 100-ns kernel (host_launch 5): the kernel is issued at 5 and ends at 105;
    // the host waits for it, so the next kernel is issued at 105 + 5 = 110 and ends at 120.
    // Without the sync it is issued at 10 and runs right after: 105..115.
    o.host_launch_ns = 5;
    Instr sync;
    sync.kind = InstrKind::host_sync;
    sync.stream = Stream::compute;
    CHECK(simulate_program(one_rank({compute(100), sync, compute(10)}), cost, nullptr, o).step_time_ns == 120);
    CHECK(simulate_program(one_rank({compute(100), compute(10)}), cost, nullptr, o).step_time_ns == 115);
    // The host is stopped for every stream: a transfer issued after the sync starts at 110 too
    // (busy 50 ns -> ends 160), though its stream is idle.
    CHECK(simulate_program(one_rank({compute(100), sync, coll(50, Stream::dp_comm)}), cost, nullptr, o).step_time_ns == 160);
    // Without the host model a host_sync is only a marker: 100 + 10.
    CHECK(simulate_program(one_rank({compute(100), sync, compute(10)}), cost, nullptr).step_time_ns == 110);
}

TEST_CASE("engine: kernel launches per instruction for the host model", "[engine][host]") {
    Instr g = compute(1);
    CHECK(host_launches(g) == 1);
    g.batch = 16;  // a grouped GEMM over 16 local experts: one GEMM each
    CHECK(host_launches(g) == 16);
    g.dtype = DType::fp8;  // plus a quantisation kernel each
    CHECK(host_launches(g) == 32);
    Instr r = compute(1);
    r.op = Op::router;
    CHECK(host_launches(r) == 8);
    CHECK(host_launches(coll(1, Stream::dp_comm)) == 1);
    CHECK(host_launches(rec(0, Stream::compute)) == 0);
    CHECK(host_launches(mem(InstrKind::alloc, Tier::gpu, 1, 0)) == 0);
}

TEST_CASE("engine: thousands of interference re-timings (superseded events compacted) keep the hand result", "[engine]") {
    // A 1,000,000-ns kernel beside 3,000 back-to-back 100-ns all-reduces: every transfer start and
    // end re-times the kernel (6,000 superseded kernel ends, well past the compaction threshold).
    // With slowdown 0.25 the kernel does 300,000 / 1.25 = 240,000 ns of work while the transfers
    // run and the remaining 760,000 at full speed: it ends at 1,060,000 ns.
    FakeCost cost;
    std::vector<Instr> v;
    v.push_back(compute(1'000'000));
    for (int i = 0; i < 3000; ++i) v.push_back(coll(100, Stream::dp_comm));
    EngineOptions o;
    o.overlap_slowdown = 0.25;
    const SimResult r = simulate_program(one_rank(std::move(v)), cost, nullptr, o);
    CHECK(r.step_time_ns == Approx(1'060'000).margin(2));
    CHECK(r.ranks[0].busy_ns[static_cast<std::size_t>(Stream::compute)] == Approx(1'060'000).margin(2));
}
