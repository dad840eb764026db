#include "strata/gui/models/scenario_document.hpp"

#include <map>
#include <mutex>
#include <sstream>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/gui/models/workbench.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::gui {

using ojson = nlohmann::ordered_json;

const char* to_string(Part p) {
    switch (p) {
        case Part::model: return "model";
        case Part::cluster: return "cluster";
        case Part::plan: return "plan";
    }
    return "?";
}

namespace {

// Minimal documents each reader accepts up to its last field, so a probe of any string field
// reaches that field's check.
const char* probe_base(Part p) {
    switch (p) {
        case Part::model: return R"({"name": "probe", "layers": 2, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 16})";
        case Part::cluster: return R"({"name": "probe", "gpu": "probe"})";
        case Part::plan: return R"({"global_batch": 1})";
    }
    return "{}";
}

void read_part(Part p, const std::string& text, const std::string& file) {
    switch (p) {
        case Part::model: sim::model_from_json_text(text, file); break;
        case Part::cluster: sim::cluster_from_json_text(text, file); break;
        case Part::plan: sim::plan_from_json_text(text, file); break;
    }
}

/// Walks "a.b" down the part's JSON; nullptr if absent.
template <class Json>
Json* node_at(Json& root, const std::string& rel) {
    Json* n = &root;
    std::istringstream in(rel);
    for (std::string k; std::getline(in, k, '.');) {
        if (!n->is_object() || !n->contains(k)) return nullptr;
        n = &n->at(k);
    }
    return n;
}

/// The canonical JSON of a default spec: the type each key has when it holds a valid value (a
/// field keeps its kind while it holds a bad one, so "two" typed into tp and then "2" is a number).
const ojson* default_value(Part part, const std::string& rel) {
    static const ojson defaults[] = {ojson::parse(sim::to_json_text(sim::ModelSpec{})), ojson::parse(sim::to_json_text(sim::ClusterSpec{})),
                                     ojson::parse(sim::to_json_text(sim::PlanSpec{}))};
    return node_at(defaults[static_cast<int>(part)], rel);
}

/// A string field the reader takes as free text (name, gpu id): stays a string whatever is typed.
bool free_text(Part part, const std::string& rel) {
    const ojson* d = default_value(part, rel);
    return d && d->is_string() && accepted_choices(part, rel).empty();
}

// "choice" is told apart from free text by asking the library.
Field make_field(Part part, const std::string& rel, const ojson& current) {
    Field f;
    f.part = part;
    f.path = std::string(to_string(part)) + "." + rel;
    f.key = rel;
    const ojson* d = default_value(part, rel);
    const ojson& v = d && !d->is_null() && (d->is_primitive() || current.is_structured()) ? *d : current;
    f.value = current.is_string() ? current.get<std::string>() : current.dump();
    if (v.is_boolean()) {
        f.kind = Field::Kind::boolean;
    } else if (v.is_number_integer()) {
        f.kind = Field::Kind::integer;
    } else if (v.is_number()) {
        f.kind = Field::Kind::number;
    } else if (v.is_string()) {
        f.choices = accepted_choices(part, rel);
        f.kind = f.choices.empty() ? Field::Kind::text : Field::Kind::choice;
    } else {
        f.kind = Field::Kind::json;
        f.choices = accepted_choices(part, rel);  // offload tiers: a name or an object of fractions
    }
    return f;
}

}  // namespace

std::vector<std::string> accepted_choices(Part part, const std::string& key) {
    static std::mutex mu;
    static std::map<std::pair<int, std::string>, std::vector<std::string>> cache;
    const std::lock_guard<std::mutex> lock(mu);
    const auto ck = std::make_pair(static_cast<int>(part), key);
    if (auto it = cache.find(ck); it != cache.end()) return it->second;
    std::vector<std::string> out;
    ojson base = ojson::parse(probe_base(part));
    const auto dot = key.find('.');
    if (dot == std::string::npos) base[key] = "?";
    else base[key.substr(0, dot)][key.substr(dot + 1)] = "?";
    try {
        read_part(part, base.dump(), "probe");
    } catch (const InputError& e) {
        const std::string marker = "is not one of: ";
        const auto at = e.rule().find(marker);
        if (e.path() == std::string(to_string(part)) + "." + key && at != std::string::npos) {
            std::string list = e.rule().substr(at + marker.size());
            list = list.substr(0, list.find(" (did you mean"));
            std::istringstream in(list);
            for (std::string item; std::getline(in, item, ',');) {
                if (!item.empty() && item.front() == ' ') item.erase(0, 1);
                if (!item.empty() && item.find(' ') == std::string::npos) out.push_back(item);  // "or an object {...}" is not a name
            }
        }
    }
    cache[ck] = out;
    return out;
}

ScenarioDocument::ScenarioDocument(std::string scenarios_dir) : scenarios_dir_(std::move(scenarios_dir)) {}

ojson& ScenarioDocument::part_json(Part p) { return p == Part::model ? model_ : p == Part::cluster ? cluster_ : plan_; }
const ojson& ScenarioDocument::part_json(Part p) const {
    return p == Part::model ? model_ : p == Part::cluster ? cluster_ : plan_;
}

std::string ScenarioDocument::display_name() const { return file_.empty() ? "untitled scenario" : file_; }

std::string ScenarioDocument::open(const std::string& path) {
    try {
        const sim::Scenario s = sim::load_scenario(path);  // the CLI's reader: same checks, same words
        model_ = ojson::parse(sim::to_json_text(s.model));
        cluster_ = ojson::parse(sim::to_json_text(s.cluster));
        plan_ = s.plan ? ojson::parse(sim::to_json_text(*s.plan)) : ojson();
        name_ = s.name;
        description_ = s.description;
        file_ = path;
        modified_ = false;
        recheck();
        return "";
    } catch (const InputError& e) {
        return e.what();
    } catch (const RuntimeError& e) {
        return e.what();
    }
}

std::string ScenarioDocument::set_model(const std::string& name_or_file) {
    try {
        const std::string f = locate(scenarios_dir_, "models", name_or_file, "--model");
        model_ = ojson::parse(sim::to_json_text(sim::load_model(f)));
    } catch (const InputError& e) {
        return e.what();
    }
    modified_ = true;
    recheck();
    return "";
}

std::string ScenarioDocument::import_hf_config(const std::string& path) {
    try {
        model_ = ojson::parse(sim::to_json_text(sim::model_from_hf_config_text(read_text_file(path), path)));
    } catch (const InputError& e) {
        return e.what();
    }
    modified_ = true;
    recheck();
    return "";
}

std::string ScenarioDocument::set_cluster(const std::string& name_or_file) {
    try {
        const std::string f = locate(scenarios_dir_, "clusters", name_or_file, "--cluster");
        cluster_ = ojson::parse(sim::to_json_text(sim::load_cluster(f)));
    } catch (const InputError& e) {
        return e.what();
    }
    modified_ = true;
    recheck();
    return "";
}

std::string ScenarioDocument::set_plan(const std::string& name_or_file) {
    try {
        const std::string f = locate(scenarios_dir_, "plans", name_or_file, "--plan");
        plan_ = ojson::parse(sim::to_json_text(sim::load_plan(f)));
    } catch (const InputError& e) {
        return e.what();
    }
    modified_ = true;
    recheck();
    return "";
}

void ScenarioDocument::set_plan(const sim::PlanSpec& p) {
    plan_ = ojson::parse(sim::to_json_text(p));
    modified_ = true;
    recheck();
}

void ScenarioDocument::set_cluster(const sim::ClusterSpec& c) {
    cluster_ = ojson::parse(sim::to_json_text(c));
    modified_ = true;
    recheck();
}

std::vector<Field> ScenarioDocument::fields(Part part) const {
    std::vector<Field> out;
    const ojson& j = part_json(part);
    if (!j.is_object()) return out;
    for (auto it = j.begin(); it != j.end(); ++it) {
        if (it.value().is_object()) {  // one level is flattened: moe.experts, offload.params
            for (auto sub = it.value().begin(); sub != it.value().end(); ++sub)
                out.push_back(make_field(part, it.key() + "." + sub.key(), sub.value()));
        } else {
            out.push_back(make_field(part, it.key(), it.value()));
        }
    }
    return out;
}

void ScenarioDocument::set_field(Part part, const std::string& path, const std::string& text) {
    const std::string prefix = std::string(to_string(part)) + ".";
    const std::string rel = path.rfind(prefix, 0) == 0 ? path.substr(prefix.size()) : path;
    ojson* n = node_at(part_json(part), rel);
    if (!n) return;
    if (free_text(part, rel)) {
        *n = text;
    } else {
        ojson v = ojson::parse(text, nullptr, false);  // no exceptions: discarded on a syntax error
        *n = v.is_discarded() ? ojson(text) : v;
    }
    modified_ = true;
    recheck();
}

std::string ScenarioDocument::part_text(Part part) const { return part_json(part).dump(2); }

std::string ScenarioDocument::set_part_text(Part part, const std::string& text) {
    ojson v = ojson::parse(text, nullptr, false);
    if (v.is_discarded() || !v.is_object()) {
        try {
            read_part(part, text, display_name());  // the library's own words for the syntax error
        } catch (const InputError& e) {
            return e.what();
        }
        return display_name() + ": " + to_string(part) + " must be a JSON object";
    }
    const char* key = to_string(part);
    if (v.size() == 1 && v.contains(key) && v[key].is_object()) v = v[key];  // a wrapped file, as the readers allow
    part_json(part) = v;
    modified_ = true;
    recheck();
    for (const auto& p : problems_)
        if (p.part == part) return p.message;
    return "";
}

void ScenarioDocument::recheck() {
    problems_.clear();
    const std::string file = display_name();
    auto attempt = [&](Part part, auto&& fn) {
        try {
            fn();
            return true;
        } catch (const InputError& e) {
            problems_.push_back({part, e.path(), e.what()});
            return false;
        }
    };
    sim::Scenario s;
    s.name = name_;
    s.description = description_;
    const bool m_ok = attempt(Part::model, [&] { s.model = sim::model_from_json_text(model_.dump(), file); });
    const bool c_ok = attempt(Part::cluster, [&] { s.cluster = sim::cluster_from_json_text(cluster_.dump(), file); });
    bool p_ok = has_plan() && attempt(Part::plan, [&] { s.plan = sim::plan_from_json_text(plan_.dump(), file); });
    if (m_ok && c_ok && p_ok) {
        try {
            sim::derive_unstated_dp(s.cluster, *s.plan);  // as the CLI reads a plan that leaves dp out
            sim::validate_plan(s.model, s.cluster, *s.plan, file);
        } catch (const InputError& e) {
            const Part part = e.path().rfind("model", 0) == 0 ? Part::model : e.path().rfind("cluster", 0) == 0 ? Part::cluster : Part::plan;
            problems_.push_back({part, e.path(), e.what()});
            p_ok = false;
        }
    }
    if (m_ok && c_ok && (p_ok || !has_plan())) scenario_ = std::move(s);
}

std::string ScenarioDocument::problem_at(const std::string& path) const {
    for (const auto& p : problems_) {
        // "plan.recompute_modules[1]" belongs to plan.recompute_modules; "plan.tp x plan.pp" to both.
        std::istringstream in(p.path);
        for (std::string tok; in >> tok;) {
            tok = tok.substr(0, tok.find('['));
            if (tok == path) return p.message;
        }
    }
    return "";
}

std::string ScenarioDocument::save(const std::string& path) {
    if (!problems_.empty()) return "not saved: " + problems_.front().message;
    try {
        write_file_atomic(path, sim::to_json_text(scenario_));  // canonical: every key, fixed order
    } catch (const std::exception& e) {
        return e.what();
    }
    file_ = path;
    modified_ = false;
    return "";
}

}  // namespace strata::gui
