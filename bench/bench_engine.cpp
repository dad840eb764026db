// Engine throughput on a synthetic large Program: a 1F1B pipeline whose layers carry GEMMs and
// tensor-parallel all-reduces on their own stream (record/wait on both sides), plus a DP reduce.
// Reports instructions simulated per second. Costs are fake constants: this measures the engine.
#include <benchmark/benchmark.h>

#include "strata/sim/engine.hpp"

using namespace strata::sim;

namespace {

struct ConstCost : CostModel {
    Estimate compute(const Instr& in, const RankProgram&) const override { return Estimate{static_cast<std::int64_t>(in.flops)}; }
    Demand transfer(const Instr& in, const RankProgram&) const override {
        Demand d;
        d.latency_ns = 5000;
        d.busy_s[static_cast<std::size_t>(in.kind == InstrKind::collective ? LinkClass::nvlink : LinkClass::nic)] = in.bytes * 1e-9;
        return d;
    }
};

Program synthetic(int p, int m, int layers) {
    Program prog;
    prog.ranks.resize(static_cast<std::size_t>(p));
    int events = 0;
    std::vector<std::vector<Instr>*> all;
    for (int s = 0; s < p; ++s) {
        auto& rp = prog.ranks[static_cast<std::size_t>(s)];
        rp.id = s;
        rp.pp_stage = s;
        rp.global_rank = s * 8;
        rp.multiplicity = 8;
        rp.node = s;
        auto& v = rp.instrs;
        int ev = 0;
        auto kernel = [&](double ns) {
            Instr in;
            in.op = Op::gemm;
            in.flops = ns;
            v.push_back(in);
        };
        auto tp_allreduce = [&]() {
            Instr r;
            r.kind = InstrKind::record;
            r.event = ev++;
            v.push_back(r);
            Instr w = r;
            w.kind = InstrKind::wait;
            w.stream = Stream::tp_comm;
            v.push_back(w);
            Instr c;
            c.kind = InstrKind::collective;
            c.stream = Stream::tp_comm;
            c.bytes = 20000;
            v.push_back(c);
            Instr r2;
            r2.kind = InstrKind::record;
            r2.stream = Stream::tp_comm;
            r2.event = ev++;
            v.push_back(r2);
            Instr w2 = r2;
            w2.kind = InstrKind::wait;
            w2.stream = Stream::compute;
            v.push_back(w2);
        };
        auto pass = [&](double scale) {
            for (int l = 0; l < layers; ++l) {
                for (int k = 0; k < 4; ++k) kernel(30000 * scale);
                tp_allreduce();
                for (int k = 0; k < 4; ++k) kernel(30000 * scale);
                tp_allreduce();
            }
        };
        auto p2p = [&](InstrKind k, std::int64_t id, Stream st) {
            Instr in;
            in.kind = k;
            in.stream = st;
            in.match_id = id;
            in.bytes = 50000;
            v.push_back(in);
        };
        auto fwd = [&](int i) {
            if (s > 0) p2p(InstrKind::recv, 1000000 + s * 10000 + i, Stream::compute);
            pass(1);
            if (s < p - 1) p2p(InstrKind::send, 1000000 + (s + 1) * 10000 + i, Stream::compute);
        };
        auto bwd = [&](int i) {
            if (s < p - 1) p2p(InstrKind::recv, 2000000 + s * 10000 + i, Stream::compute);
            pass(2);
            if (s > 0) p2p(InstrKind::send, 2000000 + (s - 1) * 10000 + i, Stream::compute);
        };
        // GPipe order keeps blocking sends on the compute stream deadlock-free.
        for (int i = 0; i < m; ++i) fwd(i);
        for (int i = m - 1; i >= 0; --i) bwd(i);
        Instr dp;
        dp.kind = InstrKind::collective;
        dp.coll = CollKind::reduce_scatter;
        dp.bytes = 1e6;
        v.push_back(dp);
        events = std::max(events, ev);
    }
    prog.events = events;
    return prog;
}

void BM_engine(benchmark::State& state) {
    const auto prog = synthetic(8, static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
    std::size_t n = 0;
    for (const auto& r : prog.ranks) n += r.instrs.size();
    ConstCost cost;
    EngineOptions o;
    o.critical_path = state.range(2) != 0;
    for (auto _ : state) {
        auto r = simulate_program(prog, cost, nullptr, o);
        benchmark::DoNotOptimize(r.step_time_ns);
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * n));
    state.counters["instructions"] = static_cast<double>(n);
}

}  // namespace

BENCHMARK(BM_engine)->Args({16, 12, 0})->Args({16, 12, 1})->Args({64, 24, 0})->Args({64, 24, 1})->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
