// libFuzzer entry for one spec reader, chosen at compile time (STRATA_FUZZ_TARGET_<name>). Bad input
// must end in strata::InputError; good input must survive the canonical round trip
// (to_json_text, then the reader again). Anything else aborts and is reported by libFuzzer.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/lowering/spec_io.hpp"

using namespace strata::sim;

namespace {

// The round trip of accepted input must be accepted again (a writer/reader mismatch is a bug).
template <class T, class Read>
void round_trip(const T& v, Read read) {
    const std::string text = to_json_text(v);
    try {
        T again = read(text, "roundtrip.json");
        if (to_json_text(again).empty()) std::abort();
    } catch (const strata::InputError&) {
        std::abort();
    }
}

#if defined(STRATA_FUZZ_TARGET_scenario)
// Scenario parts given as paths would make the fuzzer read arbitrary files: fuzz inline parts only.
bool has_path_parts(const std::string& text) {
    try {
        nlohmann::json j = nlohmann::json::parse(text);
        if (!j.is_object()) return false;
        for (const char* k : {"model", "cluster", "plan"})
            if (j.contains(k) && !j.at(k).is_object() && !j.at(k).is_null()) return true;
    } catch (const nlohmann::json::exception&) {
    }
    return false;
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
#if defined(STRATA_FUZZ_TARGET_model)
        round_trip(model_from_json_text(text, "fuzz.json"), model_from_json_text);
#elif defined(STRATA_FUZZ_TARGET_cluster)
        round_trip(cluster_from_json_text(text, "fuzz.json"), cluster_from_json_text);
#elif defined(STRATA_FUZZ_TARGET_plan)
        PlanSpec p = plan_from_json_text(text, "fuzz.json");
        round_trip(p, plan_from_json_text);
        // Cross-validation against a fixed model and cluster must also end in InputError or pass.
        ModelSpec m = model_from_json_text(
            R"({"name": "f", "layers": 8, "hidden": 512, "heads": 8, "kv_heads": 4, "ffn_hidden": 1536, "vocab": 1000, "seq_len": 256})",
            "m.json");
        ClusterSpec c = cluster_from_json_text(R"({"name": "c", "gpu": "x", "nodes": 2, "gpus_per_node": 8})", "c.json");
        validate_plan(m, c, p, "fuzz.json");
#elif defined(STRATA_FUZZ_TARGET_scenario)
        if (has_path_parts(text)) return 0;
        round_trip(scenario_from_json_text(text, "fuzz/scenario.json"), scenario_from_json_text);
#elif defined(STRATA_FUZZ_TARGET_hf_import)
        round_trip(model_from_hf_config_text(text, "config.json"), model_from_json_text);
#else
#error "define one STRATA_FUZZ_TARGET_<name>"
#endif
    } catch (const strata::InputError&) {
        // Expected: bad input, reported with file, path and rule.
    }
    return 0;
}
