// Conformance of the exports with the frameworks that read them. The flags, types and cross-field
// rules of Megatron-LM (arguments.py validate_args, TransformerConfig.__post_init__, the pipeline
// layout's own checks) and DeepSpeed's config keys and checks are data in tests/planner/data/,
// written from the upstream sources at the commit each file names. Every bundled scenario's export
// must pass them: no unknown or deprecated flag, every value of its type, no rule violated. The
// checker itself is tested to reject what upstream rejects (the defects of issue #33 among them).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "strata/lowering/spec_io.hpp"
#include "strata/planner/export.hpp"
#include "support/rule_expr.hpp"

using namespace strata;
using strata::test::RuleExpr;
using strata::test::RuleValue;

namespace {

nlohmann::json load_data(const std::string& name) {
    std::ifstream in(std::string(STRATA_SOURCE_DIR) + "/tests/planner/data/" + name);
    REQUIRE(in.good());
    return nlohmann::json::parse(in);
}

std::string unquote(std::string s) {
    if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front()) s = s.substr(1, s.size() - 2);
    return s;
}

bool is_int(const std::string& s) {
    if (s.empty()) return false;
    std::size_t i = s[0] == '-' ? 1 : 0;
    return i < s.size() && std::all_of(s.begin() + static_cast<long>(i), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

bool is_real(const std::string& s) {
    try {
        std::size_t used = 0;
        std::stod(s, &used);
        return used == s.size();
    } catch (const std::exception&) {
        return false;
    }
}

/// A pipeline layout expanded as the data describes it: commas dropped, "(X)*N" then "xN" unrolled.
std::string expand_layout(std::string s) {
    s.erase(std::remove(s.begin(), s.end(), ','), s.end());
    for (std::size_t open; (open = s.find('(')) != std::string::npos;) {
        const std::size_t close = s.find(')', open);
        if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != '*') return "?";
        std::size_t end = close + 2;
        while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
        const int n = std::stoi(s.substr(close + 2, end - close - 2));
        std::string body, rep = s.substr(open + 1, close - open - 1);
        for (int k = 0; k < n; ++k) body += rep;
        s = s.substr(0, open) + body + s.substr(end);
    }
    for (std::size_t star; (star = s.find('*')) != std::string::npos;) {
        if (star == 0) return "?";
        std::size_t end = star + 1;
        while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
        const int n = std::stoi(s.substr(star + 1, end - star - 1));
        s = s.substr(0, star - 1) + std::string(static_cast<std::size_t>(n), s[star - 1]) + s.substr(end);
    }
    return s;
}

/// Every problem Megatron-LM would have with these arguments on `world_size` GPUs, per the data.
std::vector<std::string> megatron_problems(const std::string& text, int world_size, const nlohmann::json& data) {
    std::vector<std::string> problems;
    std::vector<std::string> tok;
    std::istringstream in(text);
    for (std::string t; in >> t;) tok.push_back(t);
    const auto& flags = data.at("flags");
    std::map<std::string, RuleValue> given;  // by underscore name
    for (std::size_t i = 0; i < tok.size(); ++i) {
        const std::string f = tok[i];
        if (f.rfind("--", 0) != 0) {
            problems.push_back("stray value " + f);
            continue;
        }
        if (!flags.contains(f)) {
            problems.push_back("unknown flag " + f);
            continue;
        }
        const auto& spec = flags.at(f);
        if (spec.contains("deprecated")) problems.push_back("deprecated flag " + f + ": " + spec.at("deprecated").get<std::string>());
        std::vector<std::string> values;
        while (i + 1 < tok.size() && tok[i + 1].rfind("--", 0) != 0) values.push_back(unquote(tok[++i]));
        const std::string type = spec.at("type");
        std::string name = f.substr(2);
        std::replace(name.begin(), name.end(), '-', '_');
        auto bad = [&](const std::string& why) { problems.push_back("wrong type for " + f + ": " + why); };
        if (type == "flag") {
            if (!values.empty()) bad("takes no value");
            given[name] = RuleValue::of(true);
            continue;
        }
        if (type == "list") {
            if (values.empty()) bad("needs one or more values");
            for (const auto& v : values)
                if (std::find(spec.at("choices").begin(), spec.at("choices").end(), v) == spec.at("choices").end()) bad("\"" + v + "\" is not a choice");
            given[name] = RuleValue::of(values);
            continue;
        }
        if (values.size() != 1) {
            bad("needs exactly one value");
            continue;
        }
        const std::string& v = values[0];
        if (type == "int") {
            if (!is_int(v)) bad("\"" + v + "\" is not an integer");
            else given[name] = RuleValue::of(std::stod(v));
        } else if (type == "float") {
            if (!is_real(v)) bad("\"" + v + "\" is not a number");
            else given[name] = RuleValue::of(std::stod(v));
        } else if (type == "choice") {
            if (std::find(spec.at("choices").begin(), spec.at("choices").end(), v) == spec.at("choices").end()) bad("\"" + v + "\" is not a choice");
            given[name] = RuleValue::of(v);
        } else if (type == "freq") {
            if (is_int(v)) {
                given[name] = RuleValue::of(std::stod(v));
            } else if (v.size() >= 2 && v.front() == '[' && v.back() == ']') {
                const std::string body = v.substr(1, v.size() - 2);
                double n = 1;
                for (char c : body) {
                    if (c == ',') ++n;
                    else if (c != '0' && c != '1') bad("\"" + v + "\" is not a list of 0/1");
                }
                given[name] = RuleValue::of(v);
                given["moe_layer_freq_len"] = RuleValue::of(n);
            } else {
                bad("\"" + v + "\" is neither an integer nor a [0/1, ...] list");
            }
        } else if (type == "layout" || type == "str") {
            given[name] = RuleValue::of(v);
        } else {
            FAIL("the data names an unknown type " << type);
        }
    }
    if (!problems.empty()) return problems;

    auto lookup = [&](const std::string& n) -> RuleValue {
        if (auto it = given.find(n); it != given.end()) return it->second;
        std::string f = "--" + n;
        std::replace(f.begin(), f.end(), '_', '-');
        if (flags.contains(f) && flags.at(f).contains("default")) {
            const auto& d = flags.at(f).at("default");
            if (d.is_number()) return RuleValue::of(d.get<double>());
            if (d.is_string()) return RuleValue::of(d.get<std::string>());
            if (d.is_array()) return RuleValue::of(d.get<std::vector<std::string>>());
        }
        return {};
    };
    auto num = [&](const std::string& n, double fallback) {
        const RuleValue v = lookup(n);
        return v.kind == RuleValue::number ? v.n : fallback;
    };
    // derived values (the "derived" section of the data)
    const double tp = num("tensor_model_parallel_size", 1), pp = num("pipeline_model_parallel_size", 1), cp = num("context_parallel_size", 1);
    given["world_size"] = RuleValue::of(static_cast<double>(world_size));
    given["data_parallel_size"] = RuleValue::of(std::floor(world_size / (tp * pp * cp)));
    const double micro = num("micro_batch_size", 1);
    if (given.count("global_batch_size") && micro > 0)
        given["num_microbatches"] = RuleValue::of(std::floor(num("global_batch_size", 0) / (micro * given["data_parallel_size"].n)));
    double vpp = 0;
    if (given.count("pipeline_model_parallel_layout")) {
        const std::string lay = expand_layout(given["pipeline_model_parallel_layout"].s);
        std::vector<std::string> stages(1);
        for (char c : lay) {
            if (c == '|') stages.emplace_back();
            else stages.back() += c;
        }
        const auto count = [&](char c) { return static_cast<double>(std::count(lay.begin(), lay.end(), c)); };
        given["layout_stages"] = RuleValue::of(static_cast<double>(stages.size()));
        for (char c : std::string("ELtm")) given[std::string("layout_") + c] = RuleValue::of(count(c));
        given["layout_E_first"] = RuleValue::of(!lay.empty() && lay.front() == 'E');
        given["layout_L_last"] = RuleValue::of(!lay.empty() && lay.back() == 'L');
        const std::size_t first_m = lay.find('m');
        given["layout_t_after_m"] = RuleValue::of(first_m != std::string::npos && lay.find('t', first_m) != std::string::npos);
        // an MTP module must sit in its rank's last virtual stage (stage v is chunk v / pp of rank v % pp)
        const int ipp = static_cast<int>(pp), nvs = static_cast<int>(stages.size());
        bool outside = false;
        for (int v = 0; v < nvs; ++v)
            if (stages[static_cast<std::size_t>(v)].find('m') != std::string::npos && ipp > 0 && v / ipp != nvs / ipp - 1) outside = true;
        given["layout_m_outside_last_chunk"] = RuleValue::of(outside);
        vpp = pp > 0 ? std::floor(stages.size() / pp) : 0;
    } else if (given.count("num_layers_per_virtual_pipeline_stage")) {
        vpp = std::floor(std::floor(num("num_layers", 0) / pp) / num("num_layers_per_virtual_pipeline_stage", 1));
    } else if (given.count("num_virtual_stages_per_pipeline_rank")) {
        vpp = num("num_virtual_stages_per_pipeline_rank", 1);
    }
    if (vpp > 1) given["vpp"] = RuleValue::of(vpp);

    for (const auto& rule : data.at("rules")) {
        const std::string id = rule.at("id");
        try {
            if (rule.contains("when") && !RuleExpr(rule.at("when"), lookup).eval().truthy()) continue;
            if (!RuleExpr(rule.at("require"), lookup).eval().truthy())
                problems.push_back("rule " + id + " (" + rule.at("where").get<std::string>() + "): " + rule.at("require").get<std::string>());
        } catch (const std::exception& e) {
            problems.push_back("rule " + id + " could not be evaluated: " + e.what());
        }
    }
    return problems;
}

std::string joined(const std::vector<std::string>& problems) {
    std::string out;
    for (const auto& p : problems) out += p + "\n";
    return out;
}

bool has_problem(const std::vector<std::string>& problems, const std::string& what) {
    return std::any_of(problems.begin(), problems.end(), [&](const std::string& p) { return p.find(what) != std::string::npos; });
}

/// The bundled scenarios that carry a plan.
std::vector<std::pair<std::string, sim::Scenario>> bundled_plans() {
    std::vector<std::pair<std::string, sim::Scenario>> out;
    for (const auto& e : std::filesystem::directory_iterator(std::string(STRATA_SOURCE_DIR) + "/scenarios")) {
        if (e.path().extension() != ".json") continue;
        sim::Scenario s = sim::load_scenario(e.path().string());
        if (s.plan) out.emplace_back(e.path().stem().string(), std::move(s));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
}

/// The arguments of a launch script's ARGS=( ... ) array, comments dropped.
std::string launch_args(const std::string& script) {
    const std::size_t start = script.find("ARGS=(\n"), end = script.find("\n)\n", start);
    REQUIRE(start != std::string::npos);
    REQUIRE(end != std::string::npos);
    std::istringstream in(script.substr(start + 7, end - start - 7));
    std::string out;
    for (std::string line; std::getline(in, line);) {
        const std::size_t hash = line.find(" #");
        if (line.find_first_not_of(' ') != std::string::npos && line[line.find_first_not_of(' ')] == '#') continue;
        out += (hash == std::string::npos ? line : line.substr(0, hash)) + "\n";
    }
    return out;
}

const char* kBase =
    "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16 "
    "--micro-batch-size 1 --global-batch-size 8 --bf16 ";

}  // namespace

TEST_CASE("the Megatron conformance checker rejects what Megatron-LM rejects", "[planner][export][conformance]") {
    const auto data = load_data("megatron_args.json");
    REQUIRE(megatron_problems(kBase, 8, data).empty());
    auto problems = [&](const std::string& extra, int gpus = 8) { return megatron_problems(std::string(kBase) + extra, gpus, data); };
    CHECK(has_problem(problems("--no-such-flag"), "unknown flag --no-such-flag"));
    CHECK(has_problem(problems("--use-flash-attn"), "deprecated flag --use-flash-attn"));
    CHECK(has_problem(problems("--attention-backend flashy"), "not a choice"));
    CHECK(has_problem(problems("--tensor-model-parallel-size two"), "not an integer"));
    CHECK(has_problem(problems("--sequence-parallel 1"), "takes no value"));
    CHECK(has_problem(problems("--tensor-model-parallel-size 3", 9), "rule heads-tp"));
    // Issue #33's DeepSeek-V3 defects, one by one:
    CHECK(has_problem(megatron_problems("--num-layers 61 --hidden-size 64 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16 "
                                        "--micro-batch-size 1 --global-batch-size 8 --pipeline-model-parallel-size 16",
                                        16, data),
                      "rule even-pipeline"));
    CHECK(has_problem(problems("--num-experts 8 --expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall --pipeline-model-parallel-size 2 "
                               "--overlap-moe-expert-parallel-comm --global-batch-size 16", 16),
                      "rule a2a-overlap"));
    CHECK(has_problem(problems("--num-experts 8 --recompute-granularity selective --recompute-modules moe_act"), "rule moe-act-grouped-gemm"));
    CHECK(has_problem(problems("--num-experts 8 --moe-grouped-gemm --fp8-format hybrid --recompute-granularity selective --recompute-modules moe_act"),
                      "rule fp8-recompute-recipe"));
    CHECK_FALSE(has_problem(problems("--num-experts 8 --moe-grouped-gemm --fp8-format hybrid --fp8-recipe blockwise --recompute-granularity selective "
                                     "--recompute-modules moe_act"),
                            "rule"));
    // and a few more of upstream's rules
    CHECK(has_problem(problems("--overlap-param-gather --use-distributed-optimizer"), "rule param-gather"));
    CHECK(has_problem(problems("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout \"Ett|ttmL\"", 16), "rule layout-layers"));
    CHECK(has_problem(problems("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout \"E|t*4|L\"", 16), "rule layout-stages"));
    CHECK(problems("--pipeline-model-parallel-size 2 --pipeline-model-parallel-layout \"Et*3|tL\"", 16).empty());
    CHECK(has_problem(problems("--num-experts 8 --moe-router-topk 1"), "rule top1-softmax"));
    CHECK(has_problem(problems("--num-experts 8 --moe-layer-freq \"[0,1,1]\""), "rule moe-layer-freq"));
    CHECK(has_problem(problems("--global-batch-size 12"), "rule batch"));
    // 120 micro-batches on an interleaved pp 16 need a group (20) that leaves no short last group
    const std::string dualpipe = "--pipeline-model-parallel-size 16 --num-layers 32 --num-layers-per-virtual-pipeline-stage 1 --global-batch-size 120 ";
    CHECK(has_problem(problems(dualpipe, 16), "rule microbatch-group"));
    CHECK(has_problem(problems(dualpipe + "--microbatch-group-size-per-virtual-pipeline-stage 17", 16), "rule microbatch-group"));
    CHECK(problems(dualpipe + "--microbatch-group-size-per-virtual-pipeline-stage 20", 16).empty());
    CHECK(has_problem(problems("--mock-data --data-path x"), "rule one-data-source"));
}

TEST_CASE("every bundled scenario's Megatron export passes Megatron-LM's argument checks", "[planner][export][conformance]") {
    const auto data = load_data("megatron_args.json");
    int checked = 0;
    bool deepseek = false;
    for (const auto& [name, s] : bundled_plans()) {
        INFO(name);
        const planner::ExportResult r = planner::export_megatron(s.model, *s.plan);
        const auto problems = megatron_problems(r.text, s.cluster.gpu_count(), data);
        INFO(joined(problems));
        CHECK(problems.empty());
        // The launch script adds the tokenizer, data and schedule: the whole command line passes too.
        const std::string script = planner::megatron_launch(s.model, s.cluster, *s.plan, {}, r);
        const auto launch_problems = megatron_problems(launch_args(script), s.cluster.gpu_count(), data);
        INFO("launch: " << joined(launch_problems));
        CHECK(launch_problems.empty());
        ++checked;
        deepseek = deepseek || name == "deepseek-v3-2048xh800-dualpipev";
    }
    CHECK(checked >= 12);
    CHECK(deepseek);
}

TEST_CASE("the Megatron launch script starts the plan's processes with what Megatron needs", "[planner][export][launch]") {
    const sim::Scenario s = sim::load_scenario(std::string(STRATA_SOURCE_DIR) + "/scenarios/gpt3-175b-1024xa100.json");
    const planner::ExportResult r = planner::export_megatron(s.model, *s.plan);
    const std::string script = planner::megatron_launch(s.model, s.cluster, *s.plan, {}, r);
    // 1024 A100 in 128 nodes of 8; TP 8 needs one CUDA connection (Megatron asserts it below Blackwell).
    CHECK(script.find("torchrun --nnodes 128 --nproc-per-node 8") != std::string::npos);
    CHECK(script.find("pretrain_gpt.py") != std::string::npos);
    CHECK(script.find("export CUDA_DEVICE_MAX_CONNECTIONS=1\n") != std::string::npos);
    const std::string args = launch_args(script);
    CHECK(args.find("--vocab-size " + std::to_string(s.model.vocab)) != std::string::npos);
    CHECK(args.find("--tokenizer-type NullTokenizer") != std::string::npos);
    CHECK(args.find("--mock-data") != std::string::npos);
    CHECK(args.find("--train-iters") != std::string::npos);
    CHECK(args.find("--lr ") != std::string::npos);
    planner::LaunchOptions o;
    o.launcher = "srun";
    o.data_path = "/data/pile_text_document";
    o.tokenizer_model = "meta-llama/Llama-2-7b-hf";
    const std::string srun = planner::megatron_launch(s.model, s.cluster, *s.plan, o, r);
    CHECK(srun.find("srun --nodes 128 --ntasks-per-node 8") != std::string::npos);
    CHECK(launch_args(srun).find("--mock-data") == std::string::npos);
    CHECK(launch_args(srun).find("--data-path '/data/pile_text_document'") != std::string::npos);
    CHECK(launch_args(srun).find("--tokenizer-type HuggingFaceTokenizer") != std::string::npos);
    // What the plan needs and Megatron cannot do is in the script, not lost.
    const sim::Scenario a = sim::load_scenario(std::string(STRATA_SOURCE_DIR) + "/scenarios/llama-2-13b-angel-ptm.json");
    const auto ra = planner::export_megatron(a.model, *a.plan);
    CHECK(planner::megatron_launch(a.model, a.cluster, *a.plan, {}, ra).find("lock-free") != std::string::npos);
}
