// Every knob of the plan table against the Megatron export: a plan that differs from a base in one
// knob either imports back with that knob's value, or its export says what it could not express
// (ExportResult::unsupported), or the environment or model code it asks for carries it
// (ExportResult::env, ::model_code).
// Nothing is dropped silently. A knob added to the table later is
// tried here too.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "strata/common/error.hpp"
#include "strata/lowering/plan_knobs.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/planner/export.hpp"
#include "support/dgx.hpp"
#include "support/gpt.hpp"
#include "support/knob_variants.hpp"

using namespace strata;
using namespace strata::sim;
using nlohmann::json;

namespace {

// Did the export say something of the change: a note, an environment variable, a model-code line?
bool says(const planner::ExportResult& r, const planner::ExportResult& base) {
    return r.unsupported.size() > base.unsupported.size() || r.env != base.env || r.model_code != base.model_code;
}

}  // namespace

TEST_CASE("a knob the Megatron export cannot carry is named, never dropped", "[planner][export][plan_knobs]") {
    ModelSpec m = test::gpt_shape("gpt", 8, 1024, 8, 32000, 1024);
    m.ffn = FfnKind::swiglu;
    m.norm = NormKind::rmsnorm;
    m.position = PositionKind::rope;
    const ClusterSpec c = test::dgx_cluster("H100-SXM5-80GB", 2);
    int tried = 0;
    for (const char* base_text : {R"({"global_batch": 64, "tp": 2, "pp": 2, "dp": 4, "sequence_parallel": true, "zero_stage": 1, "recompute": "selective"})",
                                  R"({"global_batch": 64, "tp": 2, "pp": 2, "dp": 4, "recompute": "full"})"}) {
        const planner::ExportResult base_export = planner::export_megatron(m, plan_from_json_text(base_text, "base.json"));
        for (const test::KnobVariant& v : test::knob_variants(json::parse(base_text), test::knob_changes(), &m, &c)) {
            if (v.key == "name" || v.key == "description") continue;
            INFO(base_text << " with " << v.change.dump());
            ++tried;
            const planner::ExportResult r = planner::export_megatron(m, v.plan);
            const PlanSpec q = planner::plan_from_megatron_args(r.text, c.gpu_count(), "args");
            if (plan_knob_value(q, v.key) == plan_knob_value(v.plan, v.key)) continue;
            INFO("imported back as " << plan_knob_value(q, v.key));
            CHECK(says(r, base_export));
        }
    }
    CHECK(tried > 60);
}

TEST_CASE("a knob the DeepSpeed export cannot carry is named, never dropped", "[planner][export][plan_knobs]") {
    ModelSpec m = test::gpt_shape("gpt", 8, 1024, 8, 32000, 1024);
    const ClusterSpec c = test::dgx_cluster("H100-SXM5-80GB", 2);
    int tried = 0;
    for (const char* base_text : {R"({"global_batch": 64, "dp": 16, "zero_stage": 2, "framework": "deepspeed"})",
                                  R"({"global_batch": 64, "tp": 2, "pp": 2, "dp": 4, "zero_stage": 1, "framework": "deepspeed", "recompute": "full"})"}) {
        const planner::ExportResult base_export = planner::export_deepspeed(m, plan_from_json_text(base_text, "base.json"));
        for (const test::KnobVariant& v : test::knob_variants(json::parse(base_text), test::knob_changes(), &m, &c)) {
            const PlanSpec& p = v.plan;
            if (v.key == "name" || v.key == "description") continue;
            // Settings without effect in this plan: SP without TP, a schedule without a pipeline, the
            // bucket barrier outside ZeRO-2 under overlap_comm.
            if ((v.key == "sequence_parallel" && p.tp == 1) || (v.key == "schedule" && p.pp == 1)) continue;
            if (v.key == "bucket_reduce_barrier" && !(p.zero_stage == 2 && p.overlap_grad_reduce)) continue;
            INFO(base_text << " with " << v.change.dump());
            ++tried;
            const planner::ExportResult r = planner::export_deepspeed(m, p);
            planner::DeepSpeedModelCode code;
            code.tp = p.tp;
            code.pp = p.pp;
            code.ep = p.ep;
            code.checkpoint_layers = p.recompute == Recompute::full;
            PlanSpec q;
            try {
                q = planner::plan_from_deepspeed_config(r.text, c.gpu_count(), code, "ds.json");
            } catch (const InputError& e) {
                FAIL("the export does not import: " << e.what());
            }
            if (plan_knob_value(q, v.key) == plan_knob_value(p, v.key)) continue;
            INFO("imported back as " << plan_knob_value(q, v.key));
            CHECK(says(r, base_export));
        }
    }
    CHECK(tried > 60);
}
