// The runtime's own cost per instruction on the cpu backend: a model so small that its kernels
// take next to nothing (hidden 8, 4 tokens a sequence), so a step's time over its instruction count
// is the executor's dispatch (stream walk, event checks, operand lookup, liveness, memory
// accounting) plus the transport's rendezvous where there are peers. Reported as ns/instruction.
#include <benchmark/benchmark.h>

#include "strata/runtime/runtime.hpp"

using namespace strata;
using namespace strata::sim;

namespace {

ModelSpec micro() {
    ModelSpec m;
    m.name = "micro";
    m.layers = 8;
    m.hidden = 8;
    m.heads = 2;
    m.kv_heads = 2;
    m.head_dim = 4;
    m.ffn_hidden = 16;
    m.vocab = 16;
    m.seq_len = 4;
    m.max_position = 4;
    m.linear_bias = true;
    m.tied_embeddings = true;
    return m;
}

void run(benchmark::State& state, int tp, int pp, int dp) {
    const ModelSpec m = micro();
    PlanSpec p;
    p.tp = tp;
    p.pp = pp;
    p.dp = dp;
    p.micro_batch = 1;
    p.global_batch = 16 * dp;
    p.precision = Precision::fp32;
    ClusterSpec c;
    c.gpu = "cpu";
    c.gpus_per_node = p.gpus();
    runtime::Session s(m, c, p, {});
    s.step();  // warm-up: first-touch allocations, Adam's moments
    std::int64_t instrs = 0;
    for (const RankProgram& r : s.program().ranks) instrs += static_cast<std::int64_t>(r.instrs.size());
    for (auto _ : state) s.step();
    state.counters["instructions"] = static_cast<double>(instrs);
    state.counters["ns_per_instruction"] =
        benchmark::Counter(static_cast<double>(instrs) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_DispatchOneRank(benchmark::State& state) { run(state, 1, 1, 1); }
void BM_DispatchPipeline2(benchmark::State& state) { run(state, 1, 2, 1); }
void BM_DispatchTensorParallel2(benchmark::State& state) { run(state, 2, 1, 1); }

}  // namespace

BENCHMARK(BM_DispatchOneRank)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DispatchPipeline2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DispatchTensorParallel2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
