// The planner's fast path must not change a single byte or second: the cached memory estimate
// (byte-only tensor lists, memoised layer sizes) against the uncached one over whole enumerated
// plan spaces (dense, MoE, DeepSeek-V3's MLA/MTP/dense-first layers, DualPipeV), and the
// Estimator's warm caches against a fresh Estimator.
#include <catch2/catch.hpp>

#include <set>

#include "strata/common/error.hpp"
#include "strata/hwdb/hwdb.hpp"
#include "strata/planner/estimate.hpp"
#include "strata/planner/space.hpp"
#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/lowering/memory.hpp"
#include "support/dgx.hpp"
#include "support/estimate_checks.hpp"
#include "support/gpt.hpp"

using namespace strata;
using namespace strata::sim;

namespace {

Capacities test_caps(int gpus_per_node) {
    Capacities caps;
    caps.hbm_bytes = 80e9;
    caps.cpu_bytes_per_node = 2e12;
    caps.ssd_bytes_per_node = 30e12;
    caps.gpus_per_node = gpus_per_node;
    return caps;
}

// Every number of the report, exactly: the cached path sums byte-only lists (stage_tensor_bytes),
// the uncached one the named tensor lists, and the planner's ranking must not move by one ulp.
void require_same(const MemoryReport& a, const MemoryReport& b) {
    REQUIRE(a.stages.size() == b.stages.size());
    for (std::size_t i = 0; i < a.stages.size(); ++i) {
        const StageMemory &x = a.stages[i], &y = b.stages[i];
        REQUIRE(x.stage == y.stage);
        REQUIRE(x.layers == y.layers);
        REQUIRE(x.in_flight_microbatches == y.in_flight_microbatches);
        REQUIRE(x.weights_bytes == y.weights_bytes);
        REQUIRE(x.grads_bytes == y.grads_bytes);
        REQUIRE(x.optimizer_bytes == y.optimizer_bytes);
        REQUIRE(x.activations_bytes == y.activations_bytes);
        REQUIRE(x.workspace_bytes == y.workspace_bytes);
        REQUIRE(x.buffers_bytes == y.buffers_bytes);
        REQUIRE(x.layers_backward_gpu_bytes == y.layers_backward_gpu_bytes);
        for (int t = 0; t < kTierCount; ++t) REQUIRE(x.tier_bytes[t] == y.tier_bytes[t]);
    }
    REQUIRE(a.worst_hbm_stage == b.worst_hbm_stage);
    REQUIRE(a.hbm_bytes == b.hbm_bytes);
    REQUIRE(a.cpu_bytes == b.cpu_bytes);
    REQUIRE(a.ssd_bytes == b.ssd_bytes);
    REQUIRE(a.fits() == b.fits());
}

// Plan settings the space does not enumerate but the byte-only lists branch on.
std::vector<PlanSpec> variants(const PlanSpec& p) {
    std::vector<PlanSpec> out;
    PlanSpec q = p;
    q.p2p_blocking = q.p2p_scatter_gather = true;  // DeepSpeed's partitioned pipe tensors
    out.push_back(q);
    q = p;
    q.precision = Precision::fp32;
    out.push_back(q);
    q = p;
    q.exp_avg_dtype = q.exp_avg_sq_dtype = Precision::bf16;
    q.fp32_grads = true;
    q.overlap_param_gather = !q.overlap_param_gather;
    out.push_back(q);
    q = p;  // gradients streamed to the host (DeepSpeed's optimizer offload), ZeRO-3's values not beside the head
    q.zero_stage = std::max(2, q.zero_stage);
    q.offload.optimizer = q.offload.grads = TierSplit{0, 1, 0};
    out.push_back(q);
    return out;
}

int compare_space(const ModelSpec& m, const ClusterSpec& c, int global_batch, int max_plans = 20000) {
    const Capacities caps = test_caps(c.gpus_per_node);
    MemoryCache cache;
    planner::SearchSpace s;
    s.global_batch = global_batch;
    int n = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        require_same(memory_estimate(m, p, caps), memory_estimate(m, p, caps, &cache));
        if (n % 7 == 0)
            for (const PlanSpec& q : variants(p)) require_same(memory_estimate(m, q, caps), memory_estimate(m, q, caps, &cache));
        return ++n < max_plans;
    });
    return n;
}

}  // namespace

TEST_CASE("cached memory estimates equal uncached ones (dense)", "[planner][memory]") {
    ModelSpec m = test::gpt_shape("gpt", 24, 2048, 16, 50304, 2048);
    m.dropout = 0.1;
    ClusterSpec c;
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 4;
    c.gpus_per_node = 8;
    CHECK(compare_space(m, c, 128) > 1000);
}

TEST_CASE("cached memory estimates equal uncached ones (MoE)", "[planner][memory]") {
    ModelSpec m = strata::test::gpt_shape("moe", 8, 1024, 8, 32000, 4096);  // 8 heads of 128
    m.kv_heads = 2;
    m.ffn_hidden = 3584;
    m.ffn = FfnKind::swiglu;
    m.position = PositionKind::rope;
    m.norm = NormKind::rmsnorm;
    m.moe = strata::test::moe_spec(8, 2, 3584);
    m.moe->moe_every = 2;
    ClusterSpec c;
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 2;
    c.gpus_per_node = 8;
    CHECK(compare_space(m, c, 64) > 1000);
}

TEST_CASE("the cache tells apart plans that differ only in what a selective recompute keeps", "[planner][memory]") {
    ModelSpec m = test::gpt_shape("moe", 4, 1024, 8, 32000, 4096);
    m.ffn = FfnKind::swiglu;
    m.moe = test::moe_spec(8, 2, 1024);
    Capacities caps;
    caps.hbm_bytes = 80e9;
    caps.gpus_per_node = 8;
    PlanSpec p;
    p.global_batch = 8;
    p.precision = Precision::fp8;
    p.recompute = Recompute::selective;
    MemoryCache cache;
    const auto with = [&](unsigned modules, bool fp8_cache) {
        PlanSpec q = p;
        q.recompute_modules = modules;
        q.moe_act_fp8_cache = fp8_cache;
        const double cached = memory_estimate(m, q, caps, &cache).stages[0].activations_bytes;
        CHECK(cached == memory_estimate(m, q, caps).stages[0].activations_bytes);
        return cached;
    };
    const unsigned core = 1u << static_cast<unsigned>(RecomputeModule::core_attn);
    const unsigned act = core | (1u << static_cast<unsigned>(RecomputeModule::moe_act));
    const double a = with(core, false), b = with(act, false), c = with(act, true);
    CHECK(b < a);
    CHECK(c < b);
}

TEST_CASE("cached memory estimates equal uncached ones (MLA, MTP, dense-first layers, DualPipeV)", "[planner][memory]") {
    ModelSpec m = load_model(std::string(STRATA_SOURCE_DIR) + "/scenarios/models/deepseek-v3.json");
    m.layers = 12;  // small enough to enumerate; first_k_dense and the MTP module stay
    m.seq_len = 1024;
    ClusterSpec c;
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 4;
    c.gpus_per_node = 8;
    CHECK(compare_space(m, c, 64, 6000) > 1000);

    const ModelSpec full = load_model(std::string(STRATA_SOURCE_DIR) + "/scenarios/models/deepseek-v3.json");
    const PlanSpec dualpipe = load_plan(std::string(STRATA_SOURCE_DIR) + "/scenarios/plans/deepseek-v3-2048-dualpipev.json");
    REQUIRE(dualpipe.schedule == Schedule::dualpipe_v);
    MemoryCache cache;
    const Capacities caps = test_caps(8);
    for (const PlanSpec& q : variants(dualpipe)) require_same(memory_estimate(full, q, caps), memory_estimate(full, q, caps, &cache));
    require_same(memory_estimate(full, dualpipe, caps), memory_estimate(full, dualpipe, caps, &cache));
}

TEST_CASE("cached memory estimates equal uncached ones (explicit layer splits)", "[planner][memory]") {
    ModelSpec m = test::gpt_shape("gpt", 10, 1024, 8, 32000, 1024);
    PlanSpec p;
    p.pp = 4;
    p.global_batch = 32;
    p.layer_split = {1, 3, 4, 2};
    MemoryCache cache;
    const Capacities caps = test_caps(8);
    require_same(memory_estimate(m, p, caps), memory_estimate(m, p, caps, &cache));
    p.layer_split.clear();
    p.vpp = 2;
    p.schedule = Schedule::interleaved_1f1b;
    p.virtual_layer_split = {1, 2, 1, 1, 2, 1, 1, 1};
    require_same(memory_estimate(m, p, caps), memory_estimate(m, p, caps, &cache));
    p.zero_stage = 3;
    p.dp = 2;
    p.global_batch = 64;
    require_same(memory_estimate(m, p, caps), memory_estimate(m, p, caps, &cache));  // pipelined FSDP
}

TEST_CASE("the estimator's warm caches give a fresh estimator's answers", "[planner][memory]") {
    const ModelSpec m = test::gpt_shape("gpt", 8, 1024, 8, 32000, 1024);
    const ClusterSpec c = test::dgx_cluster("A100-SXM4-80GB", 2);
    auto db = hwdb::Database::open(hwdb::default_db_path());
    const hwdb::HardwareView hw = db.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu);
    planner::Estimator warm(m, c, hw);
    planner::SearchSpace s;
    s.global_batch = 64;
    int n = 0, checked = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        const planner::FastEstimate a = warm.estimate(p);
        if (n++ % 53 != 0) return true;
        planner::Estimator fresh(m, c, hw);
        const planner::FastEstimate b = fresh.estimate(p);
        test::require_same_estimate(a, b);
        // ... and its bytes are the named tensor lists' (the uncached memory estimate).
        const MemoryReport r = memory_estimate(m, p, warm.capacities());
        REQUIRE(a.hbm_bytes == r.hbm_bytes);
        REQUIRE(a.fits == r.fits());
        ++checked;
        return true;
    });
    CHECK(checked > 50);
}

namespace {

// Every plan one knob away from `base`: each scalar key of its canonical JSON (one level into
// objects) set to each other value it takes. Booleans flip, numbers double and grow by one, and a
// string takes every value the reader's own error message lists for it. Only plans the rules
// accept are kept.
std::vector<std::pair<std::string, PlanSpec>> one_knob_away(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& base) {
    const nlohmann::json j = nlohmann::json::parse(to_json_text(base));
    std::vector<std::pair<std::string, nlohmann::json>> tries;
    auto add = [&](const std::string& path, const nlohmann::json& at) {
        auto set = [&](const nlohmann::json& v) {
            nlohmann::json q = j;
            q[nlohmann::json::json_pointer(path)] = v;
            tries.emplace_back(path + " = " + v.dump(), q);
        };
        if (at.is_boolean()) set(!at.get<bool>());
        if (at.is_number_integer()) {
            set(at.get<std::int64_t>() + 1);
            set(at.get<std::int64_t>() * 2);
        } else if (at.is_number()) {
            set(at.get<double>() * 2);
        }
        if (at.is_string()) {
            nlohmann::json q = j;
            q[nlohmann::json::json_pointer(path)] = "no-such-value";
            try {
                plan_from_json_text(q.dump(), "knob");
            } catch (const InputError& e) {
                // "... is not one of: a, b, c" or "... must be one of a, b, c (...)"
                const std::string msg = e.what();
                std::size_t at_list = msg.find("is not one of: "), skip = 15;
                if (at_list == std::string::npos) at_list = msg.find("must be one of "), skip = 15;
                if (at_list == std::string::npos) return;
                std::string rest = msg.substr(at_list + skip);
                rest = rest.substr(0, rest.find_first_of("\n("));
                std::size_t from = 0;
                while (from < rest.size()) {
                    std::size_t to = rest.find(", ", from);
                    if (to == std::string::npos) to = rest.size();
                    std::string v = rest.substr(from, to - from);
                    while (!v.empty() && (v.back() == ' ' || v.back() == '.')) v.pop_back();
                    if (!v.empty() && v != at.get<std::string>()) set(v);
                    from = to + 2;
                }
            }
        }
    };
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.key() == "name" || it.key() == "description") continue;
        if (it.value().is_object()) {
            for (auto jt = it.value().begin(); jt != it.value().end(); ++jt) add("/" + it.key() + "/" + jt.key(), jt.value());
        } else {
            add("/" + it.key(), it.value());
        }
    }
    std::vector<std::pair<std::string, PlanSpec>> out;
    for (const auto& [what, q] : tries) {
        try {
            PlanSpec p = plan_from_json_text(q.dump(), "knob");
            validate_plan(m, c, p, "knob");
            out.emplace_back(what, p);
        } catch (const InputError&) {
        }
    }
    return out;
}

}  // namespace

TEST_CASE("the estimator's caches tell apart plans one knob apart, for every knob of the plan file", "[planner][memory]") {
    // The layer-time and memory caches are keyed by plan fields listed by hand (estimate.cpp,
    // memory.cpp): a field missing from a key would return the answer of the plan before it. Every
    // knob of the canonical plan file is turned, one at a time, after the base plan warmed the
    // caches; the warm estimator must give a fresh one's answers, to the bit.
    ModelSpec dense = test::gpt_shape("gpt", 8, 1024, 8, 32000, 1024);
    ModelSpec moe = dense;
    moe.moe = test::moe_spec(8, 2);
    const ClusterSpec c = test::dgx_cluster("H100-SXM5-80GB", 2);
    auto db = hwdb::Database::open(hwdb::default_db_path());
    const hwdb::HardwareView hw = db.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu);
    int turned = 0;
    std::set<std::string> knobs;
    // Under a framework the canonical file states every knob its preset sets (the writer leaves
    // defaults out otherwise), so those are turned too.
    for (const ModelSpec* m : {&dense, &moe})
      for (const char* framework : {"", "megatron-core"}) {
        PlanSpec base;
        base.framework = framework;
        base.tp = 2;
        base.pp = 2;
        base.dp = 4;
        base.micro_batch = 1;
        base.global_batch = 64;
        base.sequence_parallel = true;
        base.zero_stage = 1;
        if (m->is_moe()) base.ep = 2;
        apply_framework(base);
        validate_plan(*m, c, base, "base");
        planner::Estimator warm(*m, c, hw);
        warm.estimate(base);
        for (const auto& [what, p] : one_knob_away(*m, c, base)) {
            INFO(m->name << (m->is_moe() ? " (MoE)" : "") << ", " << what);
            const planner::FastEstimate a = warm.estimate(p);
            planner::Estimator fresh(*m, c, hw);
            const planner::FastEstimate b = fresh.estimate(p);
            CHECK(a.step_time_s == b.step_time_s);
            CHECK(a.compute_s == b.compute_s);
            CHECK(a.exposed_comm_s == b.exposed_comm_s);
            CHECK(a.recompute_s == b.recompute_s);
            CHECK(a.optimizer_s == b.optimizer_s);
            CHECK(a.offload_s == b.offload_s);
            CHECK(a.hbm_bytes == b.hbm_bytes);
            CHECK(a.fits == b.fits);
            warm.estimate(base);  // the base's answers back in the caches before the next knob
            knobs.insert(what.substr(0, what.find(" = ")));
            ++turned;
        }
      }
    std::string seen;
    for (const std::string& k : knobs) seen += k + " ";
    INFO(turned << " plans over " << knobs.size() << " knobs: " << seen);
    CHECK(knobs.size() >= 25);
    for (const char* k : {"/attention_kernel", "/recompute", "/schedule", "/precision", "/offload/optimizer", "/moe_dispatcher",
                          "/eager_elementwise", "/framework", "/fp32_grads", "/grad_accum_fusion", "/loss_upcast"})
        CHECK(knobs.count(k) == 1);
}
