// The planner's closed-form estimate under torchtitan's recomputation: op-level SAC and full
// recompute of every n-th layer (plan.recompute_every). The estimate times one probe layer; it
// must charge the rerun to the recomputed share of the layers only, and follow the engine.
#include <catch2/catch.hpp>

#include <cmath>

#include "strata/hwdb/hwdb.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/planner/estimate.hpp"
#include "strata/planner/export.hpp"
#include "strata/planner/search.hpp"
#include "support/gpt.hpp"

using namespace strata;
using namespace strata::sim;

namespace {

ModelSpec llama_like() {
    ModelSpec m = test::gpt_shape("llama-test", 8, 1024, 16, 32000, 2048);
    m.kv_heads = 4;
    m.ffn_hidden = 2816;
    m.ffn = FfnKind::swiglu;
    m.norm = NormKind::rmsnorm;
    m.position = PositionKind::rope;
    m.max_position = 2048;
    return m;
}

ClusterSpec node8() {
    ClusterSpec c;
    c.name = "h100-test";
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 1;
    c.gpus_per_node = 8;
    c.node = "DGX-H100";
    return c;
}

PlanSpec fsdp8() {
    PlanSpec p;
    p.dp = 8;
    p.micro_batch = 1;
    p.global_batch = 16;
    p.zero_stage = 3;
    return p;
}

}  // namespace

TEST_CASE("estimate: every n-th layer recomputed costs that share of full recompute's rerun", "[planner][recompute][torchtitan]") {
    const ModelSpec m = llama_like();
    const ClusterSpec c = node8();
    auto db = hwdb::Database::open(hwdb::default_db_path());
    const auto hw = db.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu);
    planner::Estimator est(m, c, hw);
    PlanSpec full = fsdp8();
    full.recompute = Recompute::full;
    PlanSpec every2 = full;
    every2.recompute_every = 2;  // 4 of the 8 layers
    PlanSpec every3 = full;
    every3.recompute_every = 3;  // layers 3 and 6: 2 of 8
    PlanSpec none = fsdp8();
    for (const PlanSpec* p : {&full, &every2, &every3, &none}) validate_plan(m, c, *p, "test");
    const planner::FastEstimate ef = est.estimate(full), e2 = est.estimate(every2), e3 = est.estimate(every3), en = est.estimate(none);
    REQUIRE(ef.recompute_s > 0);
    CHECK(e2.recompute_s == Approx(ef.recompute_s / 2).epsilon(1e-9));
    CHECK(e3.recompute_s == Approx(ef.recompute_s / 4).epsilon(1e-9));
    CHECK(en.step_time_s < e3.step_time_s);
    CHECK(e3.step_time_s < e2.step_time_s);
    CHECK(e2.step_time_s < ef.step_time_s);
    // And the engine agrees within the search's margin.
    for (const PlanSpec* p : {&every2, &every3}) {
        const planner::SimSummary s = planner::simulate_plan(m, c, *p, hw);
        const planner::FastEstimate e = est.estimate(*p);
        INFO("recompute_every " << p->recompute_every << ": estimate " << e.step_time_s << " s, engine " << s.step_time_s << " s");
        CHECK(std::fabs(e.step_time_s / s.step_time_s - 1.0) <= 0.25);
    }
}

TEST_CASE("estimate: op-level SAC reruns less than full recompute and follows the engine", "[planner][recompute][torchtitan]") {
    const ModelSpec m = llama_like();
    const ClusterSpec c = node8();
    auto db = hwdb::Database::open(hwdb::default_db_path());
    const auto hw = db.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu);
    planner::Estimator est(m, c, hw);
    PlanSpec op = fsdp8();
    op.recompute = Recompute::selective;
    op.recompute_policy = RecomputePolicy::op;
    PlanSpec full = fsdp8();
    full.recompute = Recompute::full;
    validate_plan(m, c, op, "test");
    const planner::FastEstimate eo = est.estimate(op), ef = est.estimate(full);
    CHECK(eo.recompute_s > 0);
    CHECK(eo.recompute_s < ef.recompute_s);
    CHECK(eo.hbm_bytes < est.estimate(fsdp8()).hbm_bytes);
    CHECK(eo.hbm_bytes > ef.hbm_bytes);
    const planner::SimSummary s = planner::simulate_plan(m, c, op, hw);
    INFO("estimate " << eo.step_time_s << " s, engine " << s.step_time_s << " s");
    CHECK(std::fabs(eo.step_time_s / s.step_time_s - 1.0) <= 0.25);
}

TEST_CASE("exports name torchtitan's recomputation they cannot express", "[planner][export][torchtitan]") {
    const ModelSpec m = llama_like();
    PlanSpec op = fsdp8();
    op.zero_stage = 1;
    op.recompute = Recompute::selective;
    op.recompute_policy = RecomputePolicy::op;
    op.eager_cross_entropy = true;
    const auto r = planner::export_megatron(m, op);
    CHECK(r.text.find("--recompute-granularity") == std::string::npos);  // not Megatron's core_attn selective
    auto has = [](const std::vector<std::string>& v, const char* s) {
        for (const std::string& u : v)
            if (u.find(s) != std::string::npos) return true;
        return false;
    };
    CHECK(has(r.unsupported, "op-level selective"));
    CHECK(has(r.unsupported, "eager PyTorch cross-entropy"));
    // Every 3rd of 8 layers: 2 recomputed, written as Megatron's block method over 2 layers.
    PlanSpec every = fsdp8();
    every.zero_stage = 1;
    every.recompute = Recompute::full;
    every.recompute_every = 3;
    const auto e = planner::export_megatron(m, every);
    CHECK(e.text.find("--recompute-method block\n") != std::string::npos);
    CHECK(e.text.find("--recompute-num-layers 2\n") != std::string::npos);
    CHECK(has(e.unsupported, "every 3-th layer"));
    const auto d = planner::export_deepspeed(m, every);
    CHECK(has(d.model_code, "every 3-th layer"));
}
