// Loading bench/fidelity/runs.json into FidelityEntry values: model, cluster and plan through
// Strata's own parsers (so the suite checks exactly what users feed in), after stripping the few
// architecture notes the parser does not read; the FLOP convention from the entry's text; the
// published quantity to compare. Bad entries are kept and marked skipped, never dropped.
#include <algorithm>
#include <array>
#include <utility>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/sim/fidelity.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/lowering/frameworks.hpp"

namespace strata::sim {

using nlohmann::json;

const char* to_string(FlopsConvention c) {
    switch (c) {
        case FlopsConvention::model: return "model";
        case FlopsConvention::megatron_model: return "megatron-72";
        case FlopsConvention::megatron_recompute: return "megatron-96";
        case FlopsConvention::megatron_core: return "megatron-core";
        case FlopsConvention::mpt: return "mpt";
        case FlopsConvention::none: return "none";
    }
    return "?";
}

const char* to_string(Quantity q) {
    switch (q) {
        case Quantity::step_time_s: return "step_time_s";
        case Quantity::tokens_per_s: return "tokens_per_s";
        case Quantity::tokens_per_s_per_gpu: return "tokens_per_s_per_gpu";
        case Quantity::samples_per_s: return "samples_per_s";
        case Quantity::tflops_per_gpu: return "tflops_per_gpu";
        case Quantity::mfu: return "mfu";
    }
    return "?";
}

namespace {

// Architecture notes runs.json keeps for information but Strata's model parser does not read.
// What each one means for the simulation is written in docs/fidelity.md ("Dropped fields").
constexpr std::array kStrippedModelKeys = {"activation", "embed_layernorm", "position_note"};

// NIC ids of runs.json that hwdb lacks, mapped to the closest hwdb link of the same speed.
const std::vector<std::pair<std::string, std::string>> kNicSubstitutes = {
    {"omni-path-100g", "ib-edr"},  // Jean Zay's Omni-Path: 100 Gb/s, the same rate as IB EDR
};

// Order of preference for the compared quantity: the most directly measured first (a time or a
// token count needs no FLOP convention).
constexpr std::array kQuantityOrder = {Quantity::step_time_s,   Quantity::tokens_per_s,   Quantity::tokens_per_s_per_gpu,
                                       Quantity::samples_per_s, Quantity::tflops_per_gpu, Quantity::mfu};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

/// The convention named by an entry's free-text `flops_convention` (patterns from the texts
/// runs.json uses; docs/fidelity-dataset.md lists the conventions).
FlopsConvention convention_from_text(const std::string& t) {
    if (contains(t, "llm-foundry")) return FlopsConvention::mpt;
    if (contains(t, "72*B*s*l*h^2")) return FlopsConvention::megatron_model;
    if (contains(t, "96*B*s*l*h^2") || contains(t, "recompute counted") || contains(t, "4*2 coefficient") ||
        contains(t, "hardware FLOPs incl. recompute"))
        return FlopsConvention::megatron_recompute;
    if (starts_with(t, "Megatron-Core / Megatron-Bridge")) return FlopsConvention::megatron_core;
    if (starts_with(t, "NeMo / Megatron-Bridge") || starts_with(t, "Model FLOPs")) return FlopsConvention::model;
    return FlopsConvention::none;
}

std::string node_for_gpu(const std::string& gpu, int gpus_per_node) {
    if (starts_with(gpu, "A100")) return "DGX-A100";
    if (starts_with(gpu, "H100-SXM") || starts_with(gpu, "H800")) return "DGX-H100";  // H800: an H100 board with cut NVLink
    if (starts_with(gpu, "V100")) return gpus_per_node == 16 ? "DGX-2" : "DGX-1-V100";  // 16 V100 a node: DGX-2 (ZeRO-Infinity's)
    return "";
}

namespace {

FidelityEntry read_entry(const json& j, const std::string& file, const std::string& path, const FidelityLoadOptions& options) {
    FidelityEntry e;
    auto need = [&](const char* key, json::value_t type) -> const json& {
        if (!j.contains(key) || j.at(key).type() != type)
            throw InputError(file, path + "." + key, "is required (" + std::string(json(type).type_name()) + ")");
        return j.at(key);
    };
    // Optional text fields: absent or null reads as "", anything but a string is an error.
    JsonReader fields(j, file, path);
    e.id = need("id", json::value_t::string).get<std::string>();
    e.publisher = fields.str_or("publisher", "");
    const std::string framework = fields.str_or("framework", "");
    if (!framework.empty()) {
        e.framework = canonical_framework(framework);
        if (e.framework.empty())
            throw InputError(file, path + ".framework", "must be one of " + framework_choices() + " (got \"" + framework + "\")");
    }
    e.split = need("split", json::value_t::string).get<std::string>();
    if (e.split != "train" && e.split != "test") throw InputError(file, path + ".split", "must be \"train\" or \"test\"");
    const json& hw = need("hardware", json::value_t::object);
    const json& plan = need("plan", json::value_t::object);
    const json& measured = need("measured", json::value_t::object);
    if (!j.contains("model") || !j.at("model").is_object()) throw InputError(file, path + ".model", "is required (object)");

    for (const auto& [k, v] : measured.items()) {
        if (k == "outcome" || k == "peak_hbm_counter" || k == "peak_hbm_stage") {
            if (!v.is_string()) throw InputError(file, path + ".measured." + k, "must be a string (got " + describe_json(v) + ")");
            (k == "outcome" ? e.outcome : k == "peak_hbm_counter" ? e.peak_counter : e.peak_stage) = v.get<std::string>();
        } else if (v.is_number()) {
            e.measured[k] = v.get<double>();
        } else {
            // A published figure written as text would silently drop the entry's comparison.
            throw InputError(file, path + ".measured." + k, "must be a number (got " + describe_json(v) + ")");
        }
    }
    if (e.peak_counter != "device" && e.peak_counter != "max_reserved" && e.peak_counter != "max_allocated")
        throw InputError(file, path + ".measured.peak_hbm_counter", "must be \"device\", \"max_reserved\" or \"max_allocated\"");
    if (e.peak_stage != "max" && e.peak_stage != "first" && e.peak_stage != "last")
        throw InputError(file, path + ".measured.peak_hbm_stage", "must be \"max\", \"first\" or \"last\"");
    if (e.outcome != "ran" && e.outcome != "oom") throw InputError(file, path + ".measured.outcome", "must be \"ran\" or \"oom\"");
    if (fields.has("publisher_regression")) {
        // The publisher's own report that this figure measures a regression of its software: its
        // address and what it says, both required, so that the flag always points at its evidence.
        JsonReader reg = fields.object("publisher_regression");
        for (const char* k : {"source", "statement"})
            if (reg.str_or(k, "").empty()) reg.fail(k, "is required (a non-empty string)");
        const std::string source = reg.str("source");
        if (!starts_with(source, "https://") && !starts_with(source, "http://"))
            reg.fail("source", "must be the report's http(s) address (got \"" + source + "\")");
        reg.reject_unknown();
        e.publisher_regression = source;
    }
    e.convention = convention_from_text(fields.str_or("flops_convention", ""));
    for (Quantity q : kQuantityOrder) {
        auto it = e.measured.find(to_string(q));
        if (it != e.measured.end() && it->second > 0) {
            e.quantity = q;
            e.published = it->second;
            break;
        }
    }

    // Plan keys the source states outright, which --presets-only keeps (a preset could set them).
    std::vector<std::string> stated;
    if (fields.has("stated_knobs")) {
        const json& s = j.at("stated_knobs");
        if (!s.is_array()) throw InputError(file, path + ".stated_knobs", "must be an array of plan keys");
        for (const json& k : s) {
            if (!k.is_string() || !plan.contains(k.get<std::string>()))
                throw InputError(file, path + ".stated_knobs", "must name keys of the entry's plan (got " + describe_json(k) + ")");
            stated.push_back(k.get<std::string>());
        }
    }

    // Specs go through Strata's own parsers; `where` names the entry in their messages.
    const std::string where = file + " (" + e.id + ")";
    try {
        json model = j.at("model");
        for (const char* k : kStrippedModelKeys)
            if (model.contains(k)) {
                model.erase(k);
                e.dropped.push_back(std::string("model.") + k);
            }
        e.model = model_from_json_text(model.dump(), where);

        json cluster = {{"name", e.id}};
        for (const char* k : {"gpu", "nodes", "gpus_per_node", "nics_per_node"})
            if (hw.contains(k) && !hw.at(k).is_null()) cluster[k] = hw.at(k);
        if (hw.contains("nic") && hw.at("nic").is_string()) {
            std::string nic = hw.at("nic").get<std::string>();
            for (const auto& [from, to] : kNicSubstitutes)
                if (nic == from) {
                    e.substitutions.push_back("hardware.nic " + from + " -> " + to);
                    nic = to;
                }
            cluster["nic"] = nic;
        } else if (hw.contains("nic") && !hw.at("nic").is_null()) {
            cluster["nic"] = hw.at("nic");  // not a string: the cluster parser names it
        }
        // A gpu that is not a string is left to the cluster parser, which names it.
        const std::string gpu = hw.contains("gpu") && hw.at("gpu").is_string() ? hw.at("gpu").get<std::string>() : "";
        const int per_node = hw.contains("gpus_per_node") && hw.at("gpus_per_node").is_number_integer() ? hw.at("gpus_per_node").get<int>() : 8;
        const std::string node = node_for_gpu(gpu, per_node);
        if (!node.empty()) {
            cluster["node"] = node;
            if (starts_with(gpu, "H800"))
                e.substitutions.push_back("hardware.node " + node + " (HGX H800 has no hwdb node row)");
        }
        e.cluster = cluster_from_json_text(cluster.dump(), where);

        json read = plan;
        if (options.presets_only && !e.framework.empty()) {
            // A knob the source itself states (a benchmark's "async TP" column) stays, as a user
            // who read that source would write it; the rest is the preset's.
            for (const std::string& k : framework_knob_keys())
                if (std::find(stated.begin(), stated.end(), k) == stated.end()) read.erase(k);
            read["framework"] = e.framework;
        }
        e.plan = plan_from_json_text(read.dump(), where);
        validate_plan(e.model, e.cluster, e.plan, where);
    } catch (const InputError& err) {
        e.skipped = err.path().empty() ? err.rule() : err.path() + " " + err.rule();
    }
    if (e.skipped.empty() && e.published <= 0) {
        auto peak = e.measured.find("peak_hbm_bytes");
        if (e.outcome == "oom" || (peak != e.measured.end() && peak->second > 0)) e.memory_only = true;
        else e.skipped = "no positive published quantity to compare";
    }
    if (e.memory_only && !e.publisher_regression.empty())
        throw InputError(file, path + ".publisher_regression", "applies to a published throughput; this entry publishes only memory");
    if (e.skipped.empty() && e.convention == FlopsConvention::none &&
        (e.quantity == Quantity::tflops_per_gpu || e.quantity == Quantity::mfu))
        e.skipped = "publishes only a FLOP figure in an unknown convention";
    return e;
}

}  // namespace

std::vector<FidelityEntry> load_fidelity_runs(const std::string& text, const std::string& file, const FidelityLoadOptions& options) {
    const json root = parse_json_text(text, file);
    if (!root.is_object() || !root.contains("entries") || !root.at("entries").is_array())
        throw InputError(file, "entries", "is required (an array of runs)");
    std::vector<FidelityEntry> out;
    const json& entries = root.at("entries");
    for (std::size_t i = 0; i < entries.size(); ++i) {
        const std::string path = "entries[" + std::to_string(i) + "]";
        if (!entries[i].is_object()) throw InputError(file, path, "must be an object");
        out.push_back(read_entry(entries[i], file, path, options));
    }
    // Sorted by id so output order never depends on the file's order.
    std::sort(out.begin(), out.end(), [](const FidelityEntry& a, const FidelityEntry& b) { return a.id < b.id; });
    for (std::size_t i = 1; i < out.size(); ++i)
        if (out[i].id == out[i - 1].id) throw InputError(file, "entries", "id \"" + out[i].id + "\" appears twice");
    return out;
}

double published_step_time_s(const FidelityEntry& e) {
    // Each time/throughput quantity is quantity_from_step_time's formula inverted (run.cpp).
    const double tokens = static_cast<double>(e.plan.global_batch) * static_cast<double>(e.model.seq_len);
    const double v = e.published;
    if (v <= 0) return 0;
    switch (e.quantity) {
        case Quantity::step_time_s: return v;
        case Quantity::tokens_per_s: return tokens / v;
        case Quantity::tokens_per_s_per_gpu: return tokens / v / e.gpus();
        case Quantity::samples_per_s: return e.plan.global_batch / v;
        case Quantity::tflops_per_gpu:
        case Quantity::mfu: return 0;
    }
    return 0;
}

std::vector<FidelityEntry> select_split(const std::vector<FidelityEntry>& all, const std::string& split) {
    std::vector<FidelityEntry> out;
    for (const FidelityEntry& e : all)
        if (split == "all" || e.split == split) out.push_back(e);
    return out;
}

}  // namespace strata::sim
