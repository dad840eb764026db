// The scenario editor's document: a model, a cluster and a plan held as the JSON the library reads,
// each field editable on its own and every edit checked by the library's own readers and
// validate_plan, so an error reads exactly as the CLI prints it and lands beside the field its
// JSON path names. Saving writes the library's canonical JSON, atomically.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "strata/lowering/spec.hpp"

namespace strata::gui {

enum class Part { model, cluster, plan };
const char* to_string(Part);  ///< "model", "cluster", "plan": the JSON key and the path prefix

/// One editable field, derived from the part's JSON (so every knob the canonical writer knows
/// shows up, and nothing else).
struct Field {
    enum class Kind { integer, number, boolean, text, choice, json };
    Part part = Part::plan;
    std::string path;   ///< as the library names it in errors: "plan.tp", "model.moe.experts"
    std::string key;    ///< last component: "tp"
    Kind kind = Kind::text;
    std::string value;  ///< as shown (JSON text for Kind::json, bare text for strings)
    std::vector<std::string> choices;  ///< Kind::choice: the values the library's reader accepts
};

/// An error from the library: `path` is its JSON path, `message` InputError::what() (the CLI's text).
struct Problem {
    Part part = Part::plan;
    std::string path;
    std::string message;
};

/// The values the library's reader accepts for a string field of a part, learned by asking it
/// (it lists them when it refuses a value), so the editor can offer no value the CLI refuses.
/// Empty when the field is free text.
std::vector<std::string> accepted_choices(Part part, const std::string& key);

class ScenarioDocument {
public:
    explicit ScenarioDocument(std::string scenarios_dir = "");

    // Loading. Each returns "" on success, else the CLI's message; on failure nothing changes.
    std::string open(const std::string& path);
    std::string set_model(const std::string& name_or_file);    ///< bundled name or a model JSON file
    std::string import_hf_config(const std::string& path);    ///< a Hugging Face config.json
    std::string set_cluster(const std::string& name_or_file);
    std::string set_plan(const std::string& name_or_file);
    /// A plan from elsewhere (the explorer, the capacity view): written through the canonical writer.
    void set_plan(const sim::PlanSpec& p);
    void set_cluster(const sim::ClusterSpec& c);

    /// Fields of a part in the canonical writer's order (nested objects flattened: "offload.params").
    std::vector<Field> fields(Part part) const;
    /// Set one field from text and re-check everything. Text is read as JSON when it parses as
    /// such (3, true, [1, 2]) and as a string otherwise, except that string fields stay strings.
    void set_field(Part part, const std::string& path, const std::string& text);
    /// The part's JSON as text, and replacing it whole (the raw editor); a parse error is a problem
    /// of the part. Returns the problem's message ("" if it reads).
    std::string part_text(Part part) const;
    std::string set_part_text(Part part, const std::string& text);

    /// Problems after the last change (at most one per part, as the readers stop at the first,
    /// then the cross-checks of validate_plan).
    const std::vector<Problem>& problems() const { return problems_; }
    /// The problem that names this field's path ("" if none). A cross-check naming several fields
    /// ("plan.tp x plan.pp x ...") is reported at each of them.
    std::string problem_at(const std::string& path) const;
    bool valid() const { return problems_.empty() && has_plan(); }
    bool has_plan() const { return !plan_.is_null(); }

    /// The scenario as last read without problems (model and cluster; plan when valid()).
    const sim::Scenario& scenario() const { return scenario_; }
    const std::string& file() const { return file_; }  ///< "" until opened or saved
    std::string display_name() const;                  ///< the file, or "untitled scenario"
    bool modified() const { return modified_; }

    /// Canonical JSON of the scenario (to_json_text) to `path`, atomically. Returns "" or the
    /// message; refuses while there are problems.
    std::string save(const std::string& path);

private:
    nlohmann::ordered_json& part_json(Part p);
    const nlohmann::ordered_json& part_json(Part p) const;
    void recheck();
    std::string scenarios_dir_;
    std::string file_;
    std::string name_ = "untitled", description_;
    nlohmann::ordered_json model_, cluster_, plan_;
    sim::Scenario scenario_;
    std::vector<Problem> problems_;
    bool modified_ = false;
};

}  // namespace strata::gui
