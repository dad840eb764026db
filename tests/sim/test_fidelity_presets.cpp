// The fidelity loader's --presets-only reading (docs/fidelity.md, "Presets only"): what an entry's
// source states stays, the rest is its framework's preset.
#include <catch2/catch.hpp>

#include "strata/common/error.hpp"
#include "strata/sim/fidelity.hpp"

using namespace strata;
using namespace strata::sim;

TEST_CASE("fidelity loader: --presets-only keeps the knobs an entry's source states", "[fidelity][frameworks]") {
    // torchtitan's async-TP benchmark states "Async TP" in its column: a user who read it writes
    // tp_comm_overlap, which a preset could set; the other preset knobs are the preset's.
    auto entry_with = [](const std::string& stated) {
        return R"({"entries": [{"id": "x", "split": "test", "framework": "torchtitan-compile",
            "hardware": {"gpu": "H100-SXM5-80GB", "nodes": 1, "gpus_per_node": 8},
            "model": {"name": "m", "layers": 2, "hidden": 256, "heads": 8, "ffn_hidden": 512, "vocab": 1024, "seq_len": 512},
            "plan": {"tp": 8, "global_batch": 8, "sequence_parallel": true, "tp_comm_overlap": true, "eager_elementwise": true},
            "measured": {"step_time_s": 1.0, "outcome": "ran"})" + stated + "}]}";
    };
    FidelityLoadOptions presets;
    presets.presets_only = true;
    const auto kept = load_fidelity_runs(entry_with(R"(, "stated_knobs": ["tp_comm_overlap"])"), "runs.json", presets);
    REQUIRE(kept.size() == 1);
    INFO(kept[0].skipped);
    REQUIRE(kept[0].skipped.empty());
    CHECK(kept[0].plan.tp_comm_overlap);       // stated: kept
    CHECK_FALSE(kept[0].plan.eager_elementwise);  // not stated: torchtitan-compile's preset (Inductor fuses them)
    const auto dropped = load_fidelity_runs(entry_with(""), "runs.json", presets);
    CHECK_FALSE(dropped[0].plan.tp_comm_overlap);  // the preset's default: no async TP
    CHECK(load_fidelity_runs(entry_with(R"(, "stated_knobs": ["tp_comm_overlap"])"), "runs.json")[0].plan.tp_comm_overlap);
    // A stated key must be one of the entry's plan keys.
    CHECK_THROWS_WITH(load_fidelity_runs(entry_with(R"(, "stated_knobs": ["zero_stage"])"), "runs.json", presets),
                      Catch::Contains("entries[0].stated_knobs") && Catch::Contains("zero_stage"));
    CHECK_THROWS_WITH(load_fidelity_runs(entry_with(R"(, "stated_knobs": "tp_comm_overlap")"), "runs.json"),
                      Catch::Contains("entries[0].stated_knobs"));
}
