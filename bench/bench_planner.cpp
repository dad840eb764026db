// Planner throughput: plans estimated per second (fast path, memory pruning included) and plans
// simulated per second (engine), on GPT-3 175B over 512 A100-80GB (the space Calculon could not
// finish in ten minutes). Run: build/bench/bench_planner (needs STRATA_HWDB or the default db).
#include <benchmark/benchmark.h>

#include "strata/hwdb/hwdb.hpp"
#include "strata/planner/search.hpp"
#include "strata/lowering/spec_io.hpp"

using namespace strata;

namespace {

struct Setup {
    sim::ModelSpec model;
    sim::ClusterSpec cluster;
    hwdb::HardwareView hw;
    Setup() {
        model = sim::load_model(std::string(STRATA_SOURCE_DIR) + "/scenarios/models/gpt3-175b.json");
        cluster = sim::load_cluster(std::string(STRATA_SOURCE_DIR) + "/scenarios/clusters/dgx-a100-80g-x64.json");
        auto db = hwdb::Database::open(hwdb::default_db_path());
        hw = db.view(cluster.gpu, cluster.node, cluster.intra_link, cluster.nic, cluster.ssd, cluster.cpu);
    }
};

Setup& setup() {
    static Setup s;
    return s;
}

void BM_EstimatePlans(benchmark::State& state) {
    auto& s = setup();
    planner::SearchSpace space;
    space.global_batch = 1536;
    std::vector<sim::PlanSpec> plans;
    planner::enumerate_plans(s.model, s.cluster, space, [&](const sim::PlanSpec& p) {
        plans.push_back(p);
        return plans.size() < 200000;
    });
    planner::Estimator est(s.model, s.cluster, s.hw);
    std::size_t i = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(est.estimate(plans[i]));
        i = (i + 1) % plans.size();
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
    state.counters["plans_in_space"] = static_cast<double>(plans.size());
}
BENCHMARK(BM_EstimatePlans)->Unit(benchmark::kMicrosecond);

void BM_SearchWholeSpaceNoSim(benchmark::State& state) {
    auto& s = setup();
    for (auto _ : state) {
        planner::SearchOptions o;
        o.space.global_batch = 1536;
        o.simulate = false;
        o.threads = static_cast<int>(state.range(0));  // the estimate phase's workers
        auto r = planner::search_plans(s.model, s.cluster, s.hw, o);
        state.counters["considered"] = static_cast<double>(r.space.considered);
        state.counters["estimated"] = static_cast<double>(r.estimated);
        state.counters["plans_per_s"] = static_cast<double>(r.estimated) / r.estimate_seconds;
    }
}
BENCHMARK(BM_SearchWholeSpaceNoSim)->Unit(benchmark::kSecond)->Iterations(1)->ArgName("threads")->Arg(1)->Arg(2);

void BM_SimulatePlan(benchmark::State& state) {
    auto& s = setup();
    sim::PlanSpec p = sim::load_plan(std::string(STRATA_SOURCE_DIR) + "/scenarios/plans/gpt3-175b-megatron-1024.json");
    p.dp = 4;  // 512 GPUs
    for (auto _ : state) benchmark::DoNotOptimize(planner::simulate_plan(s.model, s.cluster, p, s.hw));
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_SimulatePlan)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
