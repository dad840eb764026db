// The planner's caches key on a plan's knob encoding less the knobs each cache is known not to
// read (plan_knobs.hpp). A wrong "not read" would hand one plan another's cached answer. Here every
// knob of the table is varied, one at a time, from several base plans: an estimator warmed by the
// base must answer the variant exactly as a fresh one does, and the memory cache likewise. A knob
// added to the table later is varied here too, without editing this file.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "strata/common/error.hpp"
#include "strata/hwdb/hwdb.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/plan_knobs.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/planner/estimate.hpp"
#include "support/dgx.hpp"
#include "support/estimate_checks.hpp"
#include "support/gpt.hpp"
#include "support/knob_variants.hpp"

using namespace strata;
using namespace strata::sim;
using nlohmann::json;

namespace {

struct Counts {
    int variants = 0;        // valid one-knob variants tried
    int shared_probe = 0;    // variants that differ from their base but share its layer-probe key
};

// Every one-knob variant of `base` that the reader and validate_plan accept.
Counts check_variants(const ModelSpec& m, const ClusterSpec& c, const json& base, std::vector<std::string>* shared_keys) {
    auto db = hwdb::Database::open(hwdb::default_db_path());
    const hwdb::HardwareView hw = db.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu);
    const PlanSpec b = plan_from_json_text(base.dump(), "base.json");
    validate_plan(m, c, b, "base.json");
    Counts n;
    // One knob at a time, and the degrees two at a time (their product is the cluster's size).
    std::vector<std::pair<std::string, json>> changes = test::knob_changes(), pairs = test::degree_pairs();
    changes.insert(changes.end(), pairs.begin(), pairs.end());
    for (const test::KnobVariant& v : test::knob_variants(base, changes, &m, &c)) {
        const std::string& key = v.key;
        const PlanSpec& q = v.plan;
        INFO(base.dump() << " with " << v.change.dump());
        ++n.variants;
        // The estimator: warmed by the base, then asked the variant.
        planner::Estimator warm(m, c, hw), fresh(m, c, hw);
        (void)warm.estimate(b);
        test::require_same_estimate(warm.estimate(q), fresh.estimate(q));
        for (bool dense_first : {false, true}) {
            if (dense_first && !(m.is_moe() && m.moe->first_k_dense > 0)) continue;
            if (planner::layer_times_key(q, dense_first) != planner::layer_times_key(b, dense_first)) continue;
            ++n.shared_probe;
            if (shared_keys) shared_keys->push_back(key);
        }
        // The memory model's cache, likewise.
        const Capacities caps = planner::capacities_of(c, hw);
        MemoryCache cache;
        (void)memory_estimate(m, b, caps, &cache);
        const MemoryReport cached = memory_estimate(m, q, caps, &cache), uncached = memory_estimate(m, q, caps);
        REQUIRE(cached.hbm_bytes == uncached.hbm_bytes);
        REQUIRE(cached.cpu_bytes == uncached.cpu_bytes);
        REQUIRE(cached.ssd_bytes == uncached.ssd_bytes);
        REQUIRE(cached.worst_hbm_stage == uncached.worst_hbm_stage);
        for (std::size_t s = 0; s < cached.stages.size(); ++s) {
            REQUIRE(cached.stages[s].activations_bytes == uncached.stages[s].activations_bytes);
            REQUIRE(cached.stages[s].workspace_bytes == uncached.stages[s].workspace_bytes);
        }
    }
    return n;
}

bool has(const std::vector<std::string>& v, const std::string& k) { return std::find(v.begin(), v.end(), k) != v.end(); }

}  // namespace

TEST_CASE("every knob's variant of a dense plan gets a fresh estimator's answer from warm caches", "[planner][cache]") {
    ModelSpec m = test::gpt_shape("gpt", 4, 1024, 8, 32000, 1024);
    m.dropout = 0.1;
    const ClusterSpec c = test::dgx_cluster("H100-SXM5-80GB", 1);
    std::vector<std::string> shared;
    int variants = 0;
    for (const char* base : {
             R"({"global_batch": 16, "tp": 2, "dp": 4, "sequence_parallel": true})",
             R"({"global_batch": 16, "dp": 8, "zero_stage": 3, "recompute": "selective"})",
             R"({"global_batch": 16, "tp": 2, "pp": 2, "dp": 2, "zero_stage": 1, "recompute": "full"})",
             R"({"global_batch": 16, "tp": 2, "pp": 2, "dp": 2, "vpp": 2, "schedule": "interleaved-1f1b", "recompute": "selective"})",
             R"({"global_batch": 16, "tp": 1, "pp": 2, "dp": 4, "zero_stage": 1, "offload": {"optimizer": "cpu"}})",
         }) {
        const Counts n = check_variants(m, c, json::parse(base), &shared);
        CHECK(n.variants > 30);
        variants += n.variants;
    }
    // The probe's key leaves these out; each was exercised (a variant shared its base's key).
    for (const char* k :
         {"pp+dp", "global_batch", "schedule", "offload", "exp_avg_dtype", "fp32_grads", "dp_bucket_mb", "p2p_blocking", "expandable_segments"}) {
        INFO("plan." << k);
        CHECK(has(shared, k));
    }
    CHECK(variants > 200);
}

TEST_CASE("every knob's variant of a MoE plan gets a fresh estimator's answer from warm caches", "[planner][cache]") {
    ModelSpec m = test::llama_moe(4, 1024, 8, 1024, 8, 2, 1024);
    m.moe->first_k_dense = 1;
    m.moe->shared_experts = 1;
    const ClusterSpec c = test::dgx_cluster("H100-SXM5-80GB", 2);
    for (const char* base : {
             R"({"global_batch": 32, "tp": 2, "dp": 8, "ep": 4, "sequence_parallel": true})",
             R"({"global_batch": 32, "tp": 2, "pp": 2, "dp": 4, "ep": 8, "expert_tp": 1, "sequence_parallel": true, "zero_stage": 1})",
             R"({"global_batch": 32, "dp": 16, "ep": 8, "zero_stage": 3, "recompute": "selective", "recompute_modules": ["moe_act"]})",
         }) {
        const Counts n = check_variants(m, c, json::parse(base), nullptr);
        CHECK(n.variants > 30);
    }
}

TEST_CASE("a DualPipeV plan does not take a 1F1B plan's stage parameters from the cache", "[planner][cache]") {
    // DualPipeV puts the head on stage 0, 1F1B on the last: the stage parameter cache once keyed on
    // (tp, pp, ep, stage) only.
    const ModelSpec m = test::gpt_shape("gpt", 8, 1024, 8, 32000, 1024);
    const ClusterSpec c = test::dgx_cluster("H100-SXM5-80GB", 1);
    const Counts n = check_variants(m, c, json::parse(R"({"global_batch": 32, "pp": 4, "dp": 2, "vpp": 2, "schedule": "dualpipev"})"), nullptr);
    CHECK(n.variants > 20);
}
