// Every knob of the plan table against the runtime: a plan that differs from a base in one knob
// either runs a step on the cpu backend (a finite loss) or is refused before anything runs with
// the field named (InputError). Nothing else may happen: no internal error, no instruction the
// executor cannot read. Until 2026-11-26 torchtitan's op-level SAC passed the refusals and the
// memory walk, and stopped a real run at its first recomputed RoPE; this test would have said so.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "runtime_fixtures.hpp"
#include "strata/common/error.hpp"
#include "support/knob_variants.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;
using nlohmann::json;

namespace {

struct Tally {
    int ran = 0, refused = 0;
};

void run_each_knob(const ModelSpec& m, const char* base, Tally& t) {
    for (const KnobVariant& v : knob_variants(json::parse(base), knob_changes(), &m, nullptr)) {
        if (v.key == "name" || v.key == "description") continue;
        INFO(m.name << ": " << base << " with " << v.change.dump());
        const PlanSpec& p = v.plan;
        try {
            runtime::Session s(m, cpu_cluster(p.gpus()), p, {});
            const double loss = s.step().loss;
            CHECK(std::isfinite(loss));
            CHECK(loss > 0);
            ++t.ran;
        } catch (const InputError& e) {
            // Refused before anything ran: the message names a model or plan field.
            const std::string what = e.what();
            CHECK((what.find("plan.") != std::string::npos || what.find("model.") != std::string::npos));
            ++t.refused;
        } catch (const std::exception& e) {
            FAIL("neither ran nor was refused: " << e.what());
        }
    }
}

}  // namespace

TEST_CASE("every plan knob runs on the cpu backend or is refused with its field named", "[runtime][plan_knobs]") {
    Tally t;
    ModelSpec gpt = tiny_gpt();
    gpt.dropout = 0.1;  // GPT-2's, through every variant
    run_each_knob(gpt, R"({"global_batch": 8, "micro_batch": 2, "precision": "fp32"})", t);
    run_each_knob(gpt, R"({"global_batch": 8, "micro_batch": 1, "precision": "fp32", "tp": 2, "pp": 2, "dp": 2,
                          "sequence_parallel": true, "zero_stage": 1})", t);
    ModelSpec llama = tiny_llama();
    run_each_knob(llama, R"({"global_batch": 8, "micro_batch": 2, "precision": "fp32", "dp": 2, "zero_stage": 3})", t);
    ModelSpec moe = tiny_moe();
    run_each_knob(moe, R"({"global_batch": 8, "micro_batch": 2, "precision": "fp32", "dp": 2, "ep": 2, "zero_stage": 1})", t);
    INFO(t.ran << " variants ran, " << t.refused << " were refused");
    CHECK(t.ran > 120);
}
