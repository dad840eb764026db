// The scenario editor's document: every field is checked by the library's own readers and
// validate_plan, so its messages are the CLI's, word for word; a bad file changes nothing; saving
// writes the canonical JSON atomically.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/gui/models/scenario_document.hpp"
#include "strata/lowering/spec_io.hpp"

using namespace strata;
using namespace strata::gui;
namespace fs = std::filesystem;

namespace {

const std::string kSrc = STRATA_SOURCE_DIR;
const std::string kScenario = kSrc + "/scenarios/llama-2-7b-8xh100-pp4.json";

struct TempDir {
    fs::path path;
    TempDir() : path(fs::temp_directory_path() / ("strata-gui-test-" + std::to_string(::getpid()))) { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
    std::string file(const std::string& name, const std::string& text = "") const {
        const auto p = (path / name).string();
        if (!text.empty()) std::ofstream(p) << text;
        return p;
    }
};

const Field* find_field(const std::vector<Field>& fs, const std::string& path) {
    for (const auto& f : fs)
        if (f.path == path) return &f;
    return nullptr;
}

/// What the library says about a plan with one key changed (what `strata simulate` would print).
std::string library_message(const sim::Scenario& s, const std::string& key, const nlohmann::json& value, const std::string& file) {
    nlohmann::json j = nlohmann::json::parse(sim::to_json_text(*s.plan));
    j[key] = value;
    try {
        const sim::PlanSpec p = sim::plan_from_json_text(j.dump(), file);
        sim::validate_plan(s.model, s.cluster, p, file);
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("document: a bundled scenario opens with every canonical field and no problem", "[gui][document]") {
    ScenarioDocument d;
    REQUIRE(d.open(kScenario).empty());
    CHECK(d.valid());
    CHECK(d.problems().empty());
    CHECK_FALSE(d.modified());
    const auto plan = d.fields(Part::plan);
    const Field* tp = find_field(plan, "plan.tp");
    REQUIRE(tp);
    CHECK(tp->kind == Field::Kind::integer);
    CHECK(tp->value == "2");
    const Field* sched = find_field(plan, "plan.schedule");
    REQUIRE(sched);
    CHECK(sched->kind == Field::Kind::choice);
    CHECK(sched->choices == std::vector<std::string>{"gpipe", "1f1b", "interleaved-1f1b", "dualpipev"});
    CHECK(find_field(plan, "plan.offload.optimizer"));  // nested objects are flattened one level
    const auto cluster = d.fields(Part::cluster);
    const Field* gpu = find_field(cluster, "cluster.gpu");
    REQUIRE(gpu);
    CHECK(gpu->kind == Field::Kind::text);  // a free hwdb id, not a fixed list
    CHECK(d.scenario().plan->tp == 2);
}

TEST_CASE("document: choices are what the library's reader accepts", "[gui][document]") {
    CHECK(accepted_choices(Part::plan, "recompute") == std::vector<std::string>{"none", "selective", "full"});
    CHECK(accepted_choices(Part::plan, "offload.params") == std::vector<std::string>{"gpu", "cpu", "ssd"});
    CHECK(accepted_choices(Part::model, "ffn") == std::vector<std::string>{"gelu", "swiglu", "relu2", "relu", "geglu"});
    CHECK(accepted_choices(Part::cluster, "topology") == std::vector<std::string>{"fat-tree", "rail-optimized"});
    CHECK(accepted_choices(Part::plan, "name").empty());
    // Every offered choice reads.
    for (const auto& v : accepted_choices(Part::plan, "schedule")) {
        nlohmann::json j{{"global_batch", 8}, {"schedule", v}};
        CHECK_NOTHROW(sim::plan_from_json_text(j.dump(), "t"));
    }
}

TEST_CASE("document: a bad field shows the CLI's message beside it, and a fix clears it", "[gui][document]") {
    ScenarioDocument d;
    REQUIRE(d.open(kScenario).empty());
    const sim::Scenario good = d.scenario();

    d.set_field(Part::plan, "plan.tp", "3");
    CHECK_FALSE(d.valid());
    const std::string cross = library_message(good, "tp", 3, kScenario);
    REQUIRE_FALSE(cross.empty());
    CHECK(d.problem_at("plan.tp") == cross);
    CHECK(d.problem_at("plan.micro_batch").empty());
    CHECK(d.scenario().plan->tp == 2);  // the last valid scenario stays for the views

    d.set_field(Part::plan, "plan.tp", "two");
    CHECK(d.problem_at("plan.tp") == library_message(good, "tp", "two", kScenario));
    CHECK(d.problem_at("plan.tp").find("must be an integer") != std::string::npos);

    d.set_field(Part::plan, "plan.schedule", "1f1c");
    d.set_field(Part::plan, "plan.tp", "2");
    CHECK(d.problem_at("plan.schedule") == library_message(good, "schedule", "1f1c", kScenario));
    CHECK(d.problem_at("plan.schedule").find("did you mean \"1f1b\"") != std::string::npos);

    d.set_field(Part::plan, "plan.schedule", "1f1b");
    CHECK(d.valid());
    CHECK(d.modified());
}

TEST_CASE("document: a product rule is shown at every field it names", "[gui][document]") {
    ScenarioDocument d;
    REQUIRE(d.open(kScenario).empty());
    d.set_field(Part::plan, "plan.dp", "2");  // 2 x 4 x 2 != 8 GPUs
    REQUIRE(d.problems().size() == 1);
    CHECK(d.problems()[0].path.find(" x ") != std::string::npos);
    CHECK_FALSE(d.problem_at("plan.dp").empty());
    CHECK_FALSE(d.problem_at("plan.tp").empty());
    CHECK(d.problem_at("plan.micro_batch").empty());
}

TEST_CASE("document: a malformed or unknown-key file is refused with the CLI's message, changing nothing", "[gui][document]") {
    TempDir tmp;
    ScenarioDocument d;
    REQUIRE(d.open(kScenario).empty());
    d.set_field(Part::plan, "plan.micro_batch", "2");
    const std::string before = d.part_text(Part::plan);

    const std::string broken = tmp.file("broken.json", "{\"model\": \"models/x.json\",\n \"cluster\": }");
    std::string cli;
    try {
        sim::load_scenario(broken);
    } catch (const InputError& e) {
        cli = e.what();
    }
    REQUIRE_FALSE(cli.empty());
    CHECK(d.open(broken) == cli);
    CHECK(cli.find("line 2") != std::string::npos);

    nlohmann::json j = nlohmann::json::parse(read_text_file(kScenario));
    j["cluster"] = kSrc + "/scenarios/clusters/dgx-h100-x1.json";
    j["model"] = kSrc + "/scenarios/models/llama-2-7b.json";
    j["plan"] = kSrc + "/scenarios/plans/llama-2-7b-8xh100-pp4.json";
    j["shedule"] = "1f1b";
    const std::string unknown = tmp.file("unknown.json", j.dump());
    const std::string msg = d.open(unknown);
    CHECK(msg.find(unknown) == 0);
    CHECK(msg.find("shedule") != std::string::npos);

    CHECK(d.file() == kScenario);
    CHECK(d.part_text(Part::plan) == before);
    CHECK(d.modified());
}

TEST_CASE("document: save writes the canonical JSON atomically; problems block it", "[gui][document]") {
    TempDir tmp;
    ScenarioDocument d;
    REQUIRE(d.open(kScenario).empty());
    d.set_field(Part::plan, "plan.micro_batch", "2");
    const std::string out = tmp.file("saved.json");
    REQUIRE(d.save(out).empty());
    CHECK_FALSE(d.modified());
    CHECK(d.file() == out);
    CHECK(read_text_file(out) == sim::to_json_text(d.scenario()));
    CHECK(sim::load_scenario(out).plan->micro_batch == 2);
    CHECK_FALSE(fs::exists(out + ".tmp"));

    d.set_field(Part::plan, "plan.tp", "3");
    const std::string refused = tmp.file("refused.json");
    CHECK(d.save(refused).find("not saved") == 0);
    CHECK_FALSE(fs::exists(refused));
}

TEST_CASE("document: models come from the bundled list or a Hugging Face config", "[gui][document]") {
    ScenarioDocument d;
    REQUIRE(d.open(kScenario).empty());
    CHECK(d.set_model("llama-2-13b").empty());
    CHECK(d.fields(Part::model).front().value == "llama-2-13b");
    CHECK(d.set_model("llama-9").find("neither a file nor a bundled models name") != std::string::npos);
    // (Mixtral: no sliding window; Mistral-7B v0.1's 4096-token window is refused at the default 8192)
    CHECK(d.import_hf_config(kSrc + "/tests/data/hf/mixtral-8x7b.json").empty());
    CHECK(d.scenario().model.kv_heads == 8);
    const std::string bert = d.import_hf_config(kSrc + "/tests/data/hf/bert-unsupported.json");
    CHECK(bert.find("bert-unsupported.json") != std::string::npos);
    CHECK(d.scenario().model.kv_heads == 8);  // unchanged
}

TEST_CASE("document: the raw JSON editor reads through the same readers", "[gui][document]") {
    ScenarioDocument d;
    REQUIRE(d.open(kScenario).empty());
    const std::string before = d.part_text(Part::cluster);
    const std::string syntax = d.set_part_text(Part::cluster, "{\"gpu\": ");
    CHECK(syntax.find("is not valid JSON at line 1") != std::string::npos);
    CHECK(d.part_text(Part::cluster) == before);
    const std::string msg = d.set_part_text(Part::cluster, R"({"cluster": {"name": "c", "gpu": "H100-SXM5-80GB", "nodez": 1}})");
    CHECK(msg.find("nodez") != std::string::npos);
    CHECK(msg.find("is not a known key (did you mean") != std::string::npos);
}
