// What-if: move one knob of a plan and see what it does. A knob's new value goes through the
// plan's canonical JSON and the library's reader, then validate_plan, so a value the CLI would
// refuse is refused with the CLI's words (shown beside the knob). The offload knob offers exactly
// the planner's offload variants (planner::offload_choices).
#pragma once
#include <string>
#include <vector>

#include "strata/gui/models/workbench.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::gui {

enum class Knob {
    tp, pp, dp, cp, ep, micro_batch, vpp, schedule, recompute, zero_stage, offload, sequence_parallel, framework, cp_comm_type,
    recompute_policy, count
};

struct KnobInfo {
    Knob knob = Knob::tp;
    std::string key;    ///< the plan's JSON key ("micro_batch"); "offload" for the tier variants
    std::string label;  ///< "micro-batch"
    bool integer = true;
    std::vector<std::string> choices;  ///< non-integer knobs: what may be picked
};
const std::vector<KnobInfo>& whatif_knobs();
const KnobInfo& knob_info(Knob k);

/// The knob's value in a plan, as its control shows it.
std::string knob_value(const sim::PlanSpec& p, Knob k);
/// "gpu", "opt->cpu", ... (the planner's names); "custom" for a split the planner does not try.
std::string offload_label(const sim::PlanSpec& p);

struct WhatIfEdit {
    sim::PlanSpec plan;
    std::string note;  ///< what else moved: "dp 16 -> 8 (keeps 64 GPUs)"
};

/// The plan with one knob moved. keep_gpus: when tp, pp or cp move, dp follows so the plan still
/// covers the cluster (when it divides). Throws InputError naming `file` ("what-if" in the GUI).
WhatIfEdit apply_knob(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& base, Knob k,
                      const std::string& value, bool keep_gpus, const std::string& file = "what-if");

/// A figure against the plan the what-if started from.
struct DeltaLine {
    std::string name, before, after, change;  ///< "step time", "1.234 s", "1.100 s", "-10.9 %"
    int better = 0;                           ///< +1 better, -1 worse, 0 same or not comparable
};
std::vector<DeltaLine> delta_lines(const Figures& before, const Figures& after);

}  // namespace strata::gui
