// Weights split between the GPU and the host (plan.offload.params {gpu: g, cpu: 1 - g}: Angel-PTM's
// GPU cache of parameter pages, the bundled llama-2-13b-angel-ptm scenario) executed. Each layer
// unit is homed on one side (the lowering's build_resident_units); the host homes every unit's
// weights and the update writes them there; a resident unit comes up once a step, at its first
// use, into the GPU copy it keeps (its ZeRO-3 shard, gathered from there at each use), where an
// offloaded one comes up at each use. The numbers are those of the weights wholly on the host.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/lowering/hazards.hpp"
#include "strata/lowering/params.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

namespace {

// Weights off the GPU need a ZeRO stage (validate_plan): ZeRO-1 on one data-parallel rank.
PlanSpec split(PlanSpec p, double gpu = 0.5) {
    p.offload.params = TierSplit{gpu, 1.0 - gpu, 0.0};
    p.offload.optimizer = TierSplit{0, 1, 0};
    p.zero_stage = std::max(1, p.zero_stage);
    return p;
}

PlanSpec on_host(PlanSpec p) {
    p.offload.params = p.offload.optimizer = TierSplit{0, 1, 0};
    p.zero_stage = std::max(1, p.zero_stage);
    return p;
}

// Per layer of rank 0, how many copies bring its weights up in the step's passes.
std::map<int, int> layer_fetches(const Program& prog) {
    std::map<int, int> n;
    for (const Instr& in : prog.ranks[0].instrs)
        if (in.kind == InstrKind::copy && in.layer >= 0 && prog.names[static_cast<std::size_t>(in.name)] == "params.fetch_h2d") ++n[in.layer];
    return n;
}

}  // namespace

TEST_CASE("weights split between the GPU and the host: the curve of the weights on the host, bit for bit", "[runtime][offload][split]") {
    for (const Precision prec : {Precision::fp32, Precision::bf16}) {
        std::vector<std::pair<const char*, PlanSpec>> plans;
        PlanSpec p = cpu_plan();
        plans.push_back({"one rank", p});
        p.zero_stage = 3;
        plans.push_back({"one rank, ZeRO-3", p});
        plans.push_back({"dp 2, ZeRO-3", [] {
                             PlanSpec q = cpu_plan(1, 1, 2);
                             q.zero_stage = 3;
                             return q;
                         }()});
        plans.push_back({"tp 2 x dp 2, ZeRO-3", [] {
                             PlanSpec q = cpu_plan(2, 1, 2);
                             q.zero_stage = 3;
                             return q;
                         }()});
        plans.push_back({"pp 2", cpu_plan(1, 2, 1)});
        for (const auto& [name, base] : plans) {
            PlanSpec b = base;
            b.precision = prec;
            for (const ModelSpec& m : {tiny_gpt(4), tiny_llama(4)}) {
                INFO(to_string(prec) << ", " << m.name << ", " << name);
                const std::vector<double> host = losses(m, on_host(b), 3), half = losses(m, split(b), 3), most = losses(m, split(b, 0.8), 3);
                CHECK(host.back() < host.front());
                CHECK(half == host);
                CHECK(most == host);
            }
        }
    }
}

TEST_CASE("weights split between the GPU and the host: Angel-PTM's lock-free update over dp 2", "[runtime][offload][split][lockfree]") {
    // The bundled scenario's shape (bf16, ZeRO-3, the optimizer on the host, the delayed update):
    // the weights each step reads are the host's, as with all of them homed there.
    ModelSpec m = tiny_llama(4);
    PlanSpec p = cpu_plan(1, 1, 2);
    p.precision = Precision::bf16;
    p.zero_stage = 3;
    p.lock_free_update = true;
    p.recompute = Recompute::full;
    runtime::RunOptions o;
    o.data.fixed_batch = true;
    CHECK(losses(m, split(p), 4, o) == losses(m, on_host(p), 4, o));
}

TEST_CASE("weights split between the GPU and the host: resident layers come up once a step, the rest at each use", "[runtime][offload][split]") {
    // Four equal layers and half the weights on the GPU: the embedding and the head are fetched,
    // so the layers hold the GPU's share, min(1, 0.5 x all / layers) of them, spread by error
    // diffusion over the units in the backward's order (layer 3 first).
    const ModelSpec m = tiny_gpt(4);
    const PlanSpec p = split(cpu_plan());
    runtime::RunOptions o;
    o.memory_only = true;
    const runtime::Session s(m, cpu_cluster(1), p, o);
    const std::map<int, int> n = layer_fetches(s.program());
    REQUIRE(n.size() == 4);
    int resident = 0;
    for (const auto& [layer, copies] : n) {
        INFO("layer " << layer << ": " << copies << " copies");
        // Four micro-batches: an offloaded layer comes up for each forward and each backward.
        CHECK((copies == 1 || copies == 2 * p.micro_batches()));
        resident += copies == 1;
    }
    const ParamLayout layout = param_layout(m, p, 0);
    double layer_elements = 0;
    for (const GradUnit& g : layout.units)
        if (g.layer >= 0) layer_elements += static_cast<double>(g.count);
    const double all = static_cast<double>(layout.elements()), per_layer = layer_elements / 4;
    const double share = std::min(1.0, 0.5 * all / layer_elements);
    CHECK(resident == static_cast<int>(std::floor(share * 4 + 0.5)));
    CHECK(std::abs(resident * per_layer - 0.5 * all) <= per_layer);
}

TEST_CASE("weights split between the GPU and the host: the walk against the memory model", "[runtime][offload][split][memory]") {
    // The host homes every unit's weights (the model's weights on the cpu tier plus
    // params.host_home): to the byte. The GPU holds the resident layers beside the fetched ones.
    const ModelSpec m = tiny_llama(4);
    for (int dp : {1, 2}) {
        PlanSpec p = split(cpu_plan(1, 1, dp));
        p.precision = Precision::bf16;
        p.zero_stage = 3;
        const WalkAndModel r = walk_and_model(m, p), host = walk_and_model(m, on_host(p));
        INFO("dp " << dp << ": GPU walk " << r.walk[0] << " B, model " << r.model_gpu() << " B; host walk " << r.walk[1] << " B, model "
                   << r.model.cpu_bytes);
        CHECK(r.walk[1] == Approx(r.model.cpu_bytes).epsilon(1e-9));
        CHECK(r.walk[1] == Approx(host.walk[1]).epsilon(1e-9));  // the host homes all of them either way
        INFO("the weights wholly on the host: GPU walk " << host.walk[0] << " B, model " << host.model_gpu() << " B");
        CHECK(r.model_gpu() >= r.walk[0]);
        CHECK(r.walk[0] > host.walk[0]);  // the resident layers stay on the GPU
    }
}

TEST_CASE("weights split between the GPU and the host: a checkpoint resumes bit for bit, the dataflow is race-free",
          "[runtime][offload][split][checkpoint]") {
    const std::string dir = (std::filesystem::temp_directory_path() / "strata-test-params-split-checkpoint").string();
    std::filesystem::remove_all(dir);
    PlanSpec p = split(cpu_plan(1, 1, 2));
    p.precision = Precision::bf16;
    p.zero_stage = 3;
    runtime::RunOptions o;
    o.lr = 3e-3;
    const Resumed r = save_and_resume(tiny_llama(2), p, o, dir);
    CHECK(r.steps_done == 2);
    CHECK(r.before == r.after);
    std::filesystem::remove_all(dir);
    for (const PlanSpec& q : {p, split(cpu_plan()), split(cpu_plan(2, 1, 2))}) {
        PlanSpec x = q;
        if (x.dp > 1) x.zero_stage = 3;
        runtime::RunOptions w;
        w.memory_only = true;
        const runtime::Session s(tiny_gpt(4), cpu_cluster(x.gpus()), x, w);
        const std::vector<std::string> h = dataflow_hazards(s.program(), 3);
        INFO("tp " << x.tp << " dp " << x.dp << (h.empty() ? "" : ": " + h[0]));
        CHECK(h.empty());
    }
    // A share on the SSD beside another tier is not executed: refused by name.
    PlanSpec ssd = cpu_plan();
    ssd.offload.params = TierSplit{0, 0.5, 0.5};
    ssd.offload.optimizer = TierSplit{0, 0, 1};
    CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(1), ssd, {}), Catch::Contains("plan.offload.params"));
}
