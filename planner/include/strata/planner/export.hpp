// Exports of a plan to the frameworks that run it: Megatron-LM command-line arguments and a
// DeepSpeed config JSON. What a format cannot express is listed in `unsupported`, never dropped
// silently.
#pragma once
#include <string>
#include <vector>

#include "strata/lowering/spec.hpp"

namespace strata::planner {

struct ExportResult {
    std::string text;                       ///< the arguments (one per line) or the JSON document
    std::vector<std::string> unsupported;   ///< plan features the format cannot express
};

/// Megatron-LM arguments (pretrain_gpt.py), model shape included.
ExportResult export_megatron(const sim::ModelSpec& m, const sim::PlanSpec& p);
/// DeepSpeed config JSON (zero_optimization, offload_optimizer/offload_param, batch sizes, bf16).
ExportResult export_deepspeed(const sim::ModelSpec& m, const sim::PlanSpec& p);

/// Parse Megatron-LM arguments (as export_megatron writes them, or a user's command line) back
/// into the parallel plan fields. Unknown flags are ignored; bad values are an InputError.
sim::PlanSpec plan_from_megatron_args(const std::string& args, int gpus, const std::string& file);

}  // namespace strata::planner
