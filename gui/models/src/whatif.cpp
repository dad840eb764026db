#include "strata/gui/models/whatif.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "strata/common/error.hpp"
#include "strata/common/text.hpp"
#include "strata/gui/models/scenario_document.hpp"
#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/plan_knobs.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/planner/space.hpp"

namespace strata::gui {

namespace {

std::vector<std::string> offload_names() {
    std::vector<std::string> out;
    for (const auto& c : planner::offload_choices(true, true)) out.emplace_back(c.label);
    return out;
}

bool same_split(const sim::TierSplit& a, const sim::TierSplit& b) { return a.gpu == b.gpu && a.cpu == b.cpu && a.ssd == b.ssd; }

constexpr const char* kNoFramework = "none";

std::vector<std::string> framework_list() {
    std::vector<std::string> out{kNoFramework};
    for (const auto& n : sim::framework_names()) out.push_back(n);
    return out;
}

}  // namespace

const std::vector<KnobInfo>& whatif_knobs() {
    static const std::vector<KnobInfo> knobs = [] {
        std::vector<KnobInfo> k{
            {Knob::tp, "tp", "tp", true, {}},
            {Knob::pp, "pp", "pp", true, {}},
            {Knob::dp, "dp", "dp", true, {}},
            {Knob::cp, "cp", "cp", true, {}},
            {Knob::ep, "ep", "ep", true, {}},
            {Knob::micro_batch, "micro_batch", "micro-batch", true, {}},
            {Knob::vpp, "vpp", "vpp", true, {}},
            {Knob::schedule, "schedule", "schedule", false, accepted_choices(Part::plan, "schedule")},
            {Knob::recompute, "recompute", "recompute", false, accepted_choices(Part::plan, "recompute")},
            {Knob::zero_stage, "zero_stage", "ZeRO stage", true, {}},
            {Knob::offload, "offload", "offload", false, offload_names()},
            {Knob::sequence_parallel, "sequence_parallel", "sequence parallel", false, {"false", "true"}},
            {Knob::framework, "framework", "framework", false, framework_list()},
            // How CP exchanges the sequence (ring or Ulysses) and what "selective" means
            // (Megatron's modules or torchtitan's op-level policy).
            {Knob::cp_comm_type, "cp_comm_type", "CP exchange", false, accepted_choices(Part::plan, "cp_comm_type")},
            {Knob::recompute_policy, "recompute_policy", "selective policy", false, accepted_choices(Part::plan, "recompute_policy")},
        };
        return k;
    }();
    return knobs;
}

const KnobInfo& knob_info(Knob k) { return whatif_knobs().at(static_cast<std::size_t>(k)); }

std::string offload_label(const sim::PlanSpec& p) {
    for (const auto& c : planner::offload_choices(true, true)) {
        // The gradients where the plan's framework puts them with this choice (DeepSpeed's
        // offloaded optimizer takes them to the host), as the planner's plans have them.
        sim::PlanSpec q = p;
        q.offload = c.offload;
        sim::apply_framework(q);
        if (same_split(c.offload.optimizer, p.offload.optimizer) && same_split(c.offload.params, p.offload.params) &&
            same_split(q.offload.grads, p.offload.grads) && p.offload.activations.all_gpu() && c.lock_free == p.lock_free_update)
            return c.label;
    }
    return "custom";
}

// The plan knob table's value (plan_knobs.hpp), unquoted; the offload variant and "no framework"
// are the explorer's own labels.
std::string knob_value(const sim::PlanSpec& p, Knob k) {
    if (k == Knob::offload) return offload_label(p);
    if (k == Knob::framework) return p.framework.empty() ? kNoFramework : p.framework;
    if (k == Knob::count) return "";
    const nlohmann::json v = nlohmann::json::parse(sim::plan_knob_value(p, knob_info(k).key));
    return v.is_string() ? v.get<std::string>() : v.dump();
}

WhatIfEdit apply_knob(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& base, Knob k,
                      const std::string& value, bool keep_gpus, const std::string& file) {
    const KnobInfo& info = knob_info(k);
    sim::PlanSpec p = base;
    if (k == Knob::offload) {
        bool found = false;
        for (const auto& ch : planner::offload_choices(true, true))
            if (value == ch.label) {
                p.offload = ch.offload;
                p.lock_free_update = ch.lock_free;
                found = true;
            }
        if (!found) throw InputError(file, "plan.offload", "= \"" + value + "\" is not one of the planner's offload variants");
    }
    // Through the reader: the same checks, and the same words, as a plan file.
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(sim::to_json_text(p));
    // Under a framework, or switching one, every knob a preset may set that the user did not state
    // (in the plan file or an earlier edit) is left to the preset again: it follows the edit (a
    // knob that depends on tp, say) or gives way to another framework's or to the default.
    // strata explain-plan shows which is which.
    const bool presets = k == Knob::framework || !base.framework.empty();
    auto stated = [&](const std::string& key) {
        return std::find(base.keys_in_file.begin(), base.keys_in_file.end(), key) != base.keys_in_file.end();
    };
    if (presets)
        for (const std::string& key : sim::framework_knob_keys())
            if (!stated(key)) j.erase(key);
    if (k == Knob::framework) {
        if (value == kNoFramework) j.erase("framework");
        else j["framework"] = value;
    } else if (k == Knob::offload) {
        // The variants place the optimizer and the parameters; the gradients are left to the
        // framework's preset, as in a plan file that does not state them.
        j["offload"].erase("grads");
    } else {
        nlohmann::ordered_json v = nlohmann::ordered_json::parse(value, nullptr, false);
        j[info.key] = v.is_discarded() ? nlohmann::ordered_json(value) : v;
    }
    if (k == Knob::recompute && value != sim::to_string(base.recompute)) {
        // The layer count and module list belong to the old granularity: back to its defaults.
        j["recompute_layers"] = -1;
        j.erase("recompute_modules");
    }
    WhatIfEdit e;
    e.plan = sim::plan_from_json_text(j.dump(), file);
    if (presets) {
        // The reader saw every key the writer wrote; what the user stated is the file's and this edit's.
        e.plan.keys_in_file = base.keys_in_file;
        if (!stated(info.key)) e.plan.keys_in_file.push_back(info.key);
    }
    const bool layout = k == Knob::tp || k == Knob::pp || k == Knob::cp;
    const int rest = e.plan.tp * e.plan.pp * e.plan.cp;
    if (keep_gpus && layout && rest > 0 && c.gpu_count() % rest == 0 && e.plan.dp != c.gpu_count() / rest) {
        const int dp = c.gpu_count() / rest;
        e.note = "dp " + std::to_string(e.plan.dp) + " -> " + std::to_string(dp) + " (keeps " + std::to_string(c.gpu_count()) + " GPUs)";
        e.plan.dp = dp;
    }
    sim::validate_plan(m, c, e.plan, file);
    return e;
}

std::vector<DeltaLine> delta_lines(const Figures& b, const Figures& a) {
    auto pct = [](double before, double after) -> std::string {
        if (!(before > 0) || !std::isfinite(after)) return "";
        char buf[32];
        std::snprintf(buf, sizeof buf, "%+.1f %%", 100.0 * (after / before - 1.0));
        return buf;
    };
    auto sign = [](double before, double after, bool higher_is_better) {
        if (after == before) return 0;
        return (after > before) == higher_is_better ? 1 : -1;
    };
    char buf[64];
    std::vector<DeltaLine> out;
    out.push_back({"step time", human_seconds(b.step_time_s), human_seconds(a.step_time_s), pct(b.step_time_s, a.step_time_s),
                   sign(b.step_time_s, a.step_time_s, false)});
    out.push_back({"tokens/s", fmt_fixed(b.tokens_per_s, 0), fmt_fixed(a.tokens_per_s, 0), pct(b.tokens_per_s, a.tokens_per_s),
                   sign(b.tokens_per_s, a.tokens_per_s, true)});
    std::snprintf(buf, sizeof buf, "%+.1f pt", 100.0 * (a.mfu - b.mfu));
    out.push_back({"MFU", fmt_fixed(100 * b.mfu, 1) + " %", fmt_fixed(100 * a.mfu, 1) + " %", buf, sign(b.mfu, a.mfu, true)});
    out.push_back({"peak HBM", human_bytes(b.peak_hbm_bytes), human_bytes(a.peak_hbm_bytes), pct(b.peak_hbm_bytes, a.peak_hbm_bytes),
                   sign(b.peak_hbm_bytes, a.peak_hbm_bytes, false)});
    out.push_back({"memory", b.fits ? "fits" : "OOM", a.fits ? "fits" : "OOM", b.fits == a.fits ? "" : a.fits ? "now fits" : "now OOM",
                   b.fits == a.fits ? 0 : a.fits ? 1 : -1});
    return out;
}

}  // namespace strata::gui
