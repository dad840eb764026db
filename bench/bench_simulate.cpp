// Wall time of one simulated iteration for the two scale targets of issue 3: GPT-3 175B on 1024
// A100-80GB (tp 8, pp 16, dp 8, interleaved) and LLaMA-3 405B on 16,384 H100 (tp 8, pp 16, cp 1,
// dp 128). Reports simulated instructions per second. Lowering is timed separately.
#include <benchmark/benchmark.h>

#include "strata/hwdb/hwdb.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/sim/simulate.hpp"
#include "strata/lowering/spec_io.hpp"

using namespace strata;

namespace {

void run(benchmark::State& state, const char* scenario, bool lower_only) {
    auto s = sim::load_scenario(std::string(STRATA_SOURCE_DIR) + "/scenarios/" + scenario);
    auto db = hwdb::Database::open(hwdb::default_db_path());
    auto hw = db.view(s.cluster.gpu, s.cluster.node, s.cluster.intra_link, s.cluster.nic, s.cluster.ssd, s.cluster.cpu);
    std::int64_t instrs = 0;
    for (auto _ : state) {
        if (lower_only) {
            auto prog = sim::lower(s.model, s.cluster, *s.plan);
            instrs = 0;
            for (const auto& r : prog.ranks) instrs += static_cast<std::int64_t>(r.instrs.size());
            benchmark::DoNotOptimize(prog);
        } else {
            sim::SimOptions o;
            auto out = sim::simulate(s.model, s.cluster, *s.plan, hw, o);
            instrs = out.result.instructions;
            benchmark::DoNotOptimize(out);
        }
    }
    state.counters["instructions"] = static_cast<double>(instrs);
    state.counters["instr_per_s"] = benchmark::Counter(static_cast<double>(instrs) * state.iterations(), benchmark::Counter::kIsRate);
}

void BM_Gpt3_1024_Lower(benchmark::State& st) { run(st, "gpt3-175b-1024xa100.json", true); }
void BM_Gpt3_1024_Simulate(benchmark::State& st) { run(st, "gpt3-175b-1024xa100.json", false); }
void BM_Llama3_405B_16k_Lower(benchmark::State& st) { run(st, "llama-3-405b-16k-h100.json", true); }
void BM_Llama3_405B_16k_Simulate(benchmark::State& st) { run(st, "llama-3-405b-16k-h100.json", false); }
BENCHMARK(BM_Gpt3_1024_Lower)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Gpt3_1024_Simulate)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Llama3_405B_16k_Lower)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Llama3_405B_16k_Simulate)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
