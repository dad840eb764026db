#pragma once
// Framework presets (plan.framework): the plan knobs a training framework fixes, each with the
// source that says so, and the configurations it cannot run. A user states what a paper or recipe
// states (the parallel sizes, batch, recompute, precision, framework); the preset supplies
// p2p style, gradient accumulation, kernels and overlap flags. Keys written in the plan win.
#include <optional>
#include <string>
#include <vector>

#include "strata/lowering/spec.hpp"

namespace strata::sim {

/// One knob a framework fixes: the plan key, its value as JSON text, and where that comes from.
struct FrameworkKnob {
    std::string key;
    std::string value_json;
    std::string source;
};

/// The known framework names, in a fixed order (aliases excluded).
const std::vector<std::string>& framework_names();
/// "a, b, c" for error messages and --help.
std::string framework_choices();
/// The canonical name for `name` or an alias ("nemo" is "megatron-bridge"); empty if unknown.
std::string canonical_framework(const std::string& name);
/// One line on what the preset describes (its era and parts).
std::string framework_summary(const std::string& name);

/// The knobs `framework` fixes for a plan whose stated fields (tp, sequence_parallel, zero_stage,
/// precision) are those of `stated`. Knob values may depend on them (e.g. fp32 gradient
/// accumulation only under bf16). Empty for an unknown name.
std::vector<FrameworkKnob> framework_knobs(const std::string& framework, const PlanSpec& stated);

/// Sets p's knobs to p.framework's preset in place (the planner's fast path: no JSON), as reading
/// a plan with only its stated fields and plan.framework would.
void apply_framework(PlanSpec& p);

/// Every plan key some preset sets: what a presets-only reading of a plan leaves to the preset.
/// Not offload, which a preset only completes (the parts the plan leaves out).
const std::vector<std::string>& framework_knob_keys();
/// Where DeepSpeed keeps the reduced gradients for ZeRO stage `zero_stage` and an optimizer placed
/// on `optimizer`: with the optimizer offloaded under ZeRO-2/3, beside it in host memory (the
/// offloaded share: stage3.py offloads the offloaded sub-groups'; below ZeRO-3 the whole
/// optimizer goes to the CPU), else on the GPU. The DeepSpeed presets' `offload` knob, the
/// DeepSpeed import and export all follow it.
TierSplit deepspeed_gradient_tiers(int zero_stage, const TierSplit& optimizer);
/// The source of the framework's knob for `key` whatever its condition ("" if it has none): the
/// condition may no longer hold once the knob applied (an offload it completed).
std::string framework_knob_source(const std::string& framework, const std::string& key);

/// Why plan.framework cannot run this plan: the plan field and the rule (naming the framework),
/// or nothing when it can. validate_plan and the planner's search both call it.
struct FrameworkRefusal {
    std::string field;  ///< e.g. "plan.cp"
    std::string rule;
};
std::optional<FrameworkRefusal> framework_refusal(const PlanSpec& p);

}  // namespace strata::sim
