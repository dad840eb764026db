// The plan knob table (plan_knobs.hpp) drives the reader, the canonical writer, the presets and the
// cache keys. These tests vary every row of it, so a knob added later is covered without editing
// them: its values round-trip, its setting shows in the encoding, a wrong value is refused naming
// it, and a value stated against a framework's preset survives writing and reading.
#include <catch2/catch.hpp>

#include <map>
#include <nlohmann/json.hpp>

#include "strata/common/error.hpp"
#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/plan_knobs.hpp"
#include "strata/lowering/spec_io.hpp"
#include "support/knob_variants.hpp"

using namespace strata;
using namespace strata::sim;
using nlohmann::json;

namespace {

// Plans a knob's samples are tried on: some rows need others first (recompute_layers needs full
// recompute, recompute_modules selective).
const std::vector<json>& bases() {
    static const std::vector<json> b{
        json::parse(R"({"global_batch": 8})"),
        json::parse(R"({"global_batch": 8, "recompute": "full"})"),
        json::parse(R"({"global_batch": 8, "recompute": "selective"})"),
        json::parse(R"({"global_batch": 16, "tp": 2, "pp": 2, "dp": 2, "sequence_parallel": true, "zero_stage": 1, "precision": "bf16"})"),
    };
    return b;
}

bool is_label(const std::string& key) { return key == "name" || key == "description"; }

}  // namespace

TEST_CASE("the table names every key the reader accepts, once, and the writer writes only those", "[plan_knobs]") {
    const std::vector<std::string>& keys = plan_knob_keys();
    REQUIRE(keys.size() > 40);
    for (std::size_t i = 0; i < keys.size(); ++i)
        for (std::size_t j = i + 1; j < keys.size(); ++j) CHECK(keys[i] != keys[j]);
    PlanSpec p;
    p.global_batch = 8;
    p.framework = "torchtitan";
    const json written = json::parse(to_json_text(p));
    for (const auto& [key, value] : written.items()) CHECK(std::find(keys.begin(), keys.end(), key) != keys.end());
    // A key outside the table is refused with its name.
    CHECK_THROWS_WITH(plan_from_json_text(R"({"global_batch": 8, "zero_stages": 1})", "p.json"), Catch::Contains("zero_stages"));
}

TEST_CASE("every knob round-trips through the canonical writer at each of its sample values", "[plan_knobs]") {
    std::map<std::string, int> changed;
    for (const json& base : bases()) {
        const PlanSpec b = plan_from_json_text(base.dump(), "base.json");
        for (const test::KnobVariant& v : test::knob_variants(base, test::knob_changes())) {
            INFO(base.dump() << " with " << v.change.dump());
            const PlanSpec& p = v.plan;
            const std::string text = to_json_text(p);
            const PlanSpec q = plan_from_json_text(text, "canonical.json");
            CHECK(to_json_text(q) == text);
            CHECK(encode_plan(q) == encode_plan(p));
            CHECK(q.name == p.name);
            CHECK(q.description == p.description);
            // A setting that changes the plan shows in its encoding (the cache keys' premise).
            if (!is_label(v.key)) CHECK(encode_plan(p) != encode_plan(b));
            ++changed[v.key];
        }
    }
    // Every row was exercised: some sample is accepted and differs from a base.
    for (const std::string& key : plan_knob_keys()) {
        INFO("plan." << key);
        CHECK(changed[key] > 0);
    }
}

TEST_CASE("every knob refuses a value of the wrong kind and names itself", "[plan_knobs]") {
    for (const std::string& key : plan_knob_keys()) {
        if (is_label(key)) continue;  // free text
        INFO("plan." << key);
        for (const json& bad : {json("x?"), json::array({json::object()}), json(-7)}) {
            json j = json::parse(R"({"global_batch": 8, "recompute": "selective"})");
            j[key] = bad;
            try {
                (void)plan_from_json_text(j.dump(), "p.json");
                FAIL("accepted " << bad.dump());
            } catch (const InputError& e) {
                CHECK_THAT(e.what(), Catch::Contains("p.json") && Catch::Contains(key));
            }
        }
    }
}

TEST_CASE("a value a plan states against its framework's preset survives writing and reading", "[plan_knobs][frameworks]") {
    // The writer once left out keys at their default (eager_cross_entropy = false): reading the file
    // back let the preset (torchtitan's eager loss) overwrite what the plan had chosen.
    int checked = 0;
    for (const std::string& fw : framework_names()) {
        for (const std::string& key : framework_knob_keys()) {
            INFO(fw << ": plan." << key);
            for (const json& v : json::parse(plan_knob_samples(key))) {
                json j = json::parse(R"({"global_batch": 16, "tp": 2, "pp": 2, "dp": 2, "sequence_parallel": true})");
                j["framework"] = fw;
                j[key] = v;
                PlanSpec p;
                try {
                    p = plan_from_json_text(j.dump(), "p.json");
                } catch (const InputError&) {
                    continue;
                }
                const PlanSpec q = plan_from_json_text(to_json_text(p), "canonical.json");
                CHECK(encode_plan(q) == encode_plan(p));
                ++checked;
            }
        }
    }
    CHECK(checked > 100);
}

TEST_CASE("a preset sets its knobs through the table as the reader does", "[plan_knobs][frameworks]") {
    for (const std::string& key : framework_knob_keys()) {
        INFO("plan." << key);
        CHECK(plan_knob_assign(key) != nullptr);
    }
    CHECK(plan_knob_assign("no_such_knob") == nullptr);
    CHECK(plan_knob_assign("name") == nullptr);  // labels are not a preset's to set
    PlanSpec p;
    plan_knob_assign("schedule")(p, json("interleaved-1f1b"));
    plan_knob_assign("zero_stage")(p, json(3));
    plan_knob_assign("overlap_grad_reduce")(p, json(false));
    CHECK(p.schedule == Schedule::interleaved_1f1b);
    CHECK(p.zero_stage == 3);
    CHECK_FALSE(p.overlap_grad_reduce);
}

TEST_CASE("a knob set leaves its knobs out of the encoding, and only them", "[plan_knobs]") {
    PlanSpec a, b;
    a.global_batch = b.global_batch = 8;
    b.dp = 2;
    b.global_batch = 16;
    const PlanKnobSet batch{"dp", "global_batch"};
    std::vector<std::int64_t> ka, kb;
    encode_plan(a, ka, &batch);
    encode_plan(b, kb, &batch);
    CHECK(ka == kb);
    CHECK(encode_plan(a) != encode_plan(b));
    b.tp = 2;
    kb.clear();
    encode_plan(b, kb, &batch);
    CHECK(ka != kb);
}
