// Exports of a plan to the frameworks that run it: Megatron-LM command-line arguments and a
// DeepSpeed config JSON, each optionally wrapped in a launch script; and the way back, a plan from
// a Megatron command line or a DeepSpeed config. What a format cannot express is listed in
// `unsupported`, never dropped silently.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "strata/lowering/spec.hpp"

namespace strata::planner {

struct ExportResult {
    std::string text;                       ///< the arguments (one per line) or the JSON document
    std::vector<std::string> unsupported;   ///< plan features the format cannot express
    /// Settings the framework takes from the training script or model code, not from this file
    /// (DeepSpeed: the PipelineModule's stage count, which layers are checkpointed, TP/EP sizes).
    std::vector<std::string> model_code;
    /// Environment variables the simulated plan assumes (name, value), in launch order.
    std::vector<std::pair<std::string, std::string>> env;
};

/// Megatron-LM arguments (pretrain_gpt.py), model shape included. Flags and the cross-field
/// rules they must pass are those of Megatron-LM's arguments.py and TransformerConfig
/// (tests/planner/data/megatron_args.json names the commit).
ExportResult export_megatron(const sim::ModelSpec& m, const sim::PlanSpec& p);
/// DeepSpeed config JSON with only the keys DeepSpeed's engine reads (zero_optimization with its
/// offload sections, batch sizes, precision, activation_checkpointing); the pipeline stage count and
/// the recompute switch live in the model code and are listed in `model_code`.
ExportResult export_deepspeed(const sim::ModelSpec& m, const sim::PlanSpec& p);

/// What a launch script needs beyond the plan. Empty strings and zeros take the defaults named.
struct LaunchOptions {
    std::string launcher = "torchrun";  ///< "torchrun" (one line per node) or "srun" (Slurm)
    std::string data_path;              ///< Megatron --data-path; empty: --mock-data
    std::string tokenizer_model;        ///< a HuggingFace tokenizer; empty: NullTokenizer with --vocab-size
    int train_iters = 0;                ///< 0: 100 iterations, a smoke run
    double lr = 0;                      ///< 0: 3e-4 (cosine to a tenth, 1 % warm-up)
    std::string entry = "pretrain_gpt.py";  ///< Megatron's script; DeepSpeed: the user's train.py
};

/// A bash script that launches the plan: the environment, then torchrun (nnodes, nproc-per-node)
/// or srun, then pretrain_gpt.py with every argument Megatron needs to start.
std::string megatron_launch(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& p, const LaunchOptions& o,
                            const ExportResult& args);
/// A bash script for DeepSpeed: the config written beside it by a heredoc, the model-code
/// settings as a commented list, and a `deepspeed` launch line with a hostfile sketch.
std::string deepspeed_launch(const sim::ModelSpec& m, const sim::ClusterSpec& c, const sim::PlanSpec& p, const LaunchOptions& o,
                             const ExportResult& config);

/// Parse Megatron-LM arguments (as export_megatron writes them, or a user's command line) back
/// into the parallel plan fields. Unknown flags are ignored; bad values are an InputError.
sim::PlanSpec plan_from_megatron_args(const std::string& args, int gpus, const std::string& file);

/// Model-code settings a DeepSpeed config cannot hold (the import's second input).
struct DeepSpeedModelCode {
    int tp = 1;  ///< tensor parallelism of the model code (Megatron-DeepSpeed)
    int pp = 1;  ///< PipelineModule(num_stages=...)
    int ep = 1;  ///< MoE layers' ep_size
    bool checkpoint_layers = false;  ///< the model code checkpoints every layer (deepspeed.checkpointing)
};
/// A DeepSpeed config JSON (the keys export_deepspeed writes, and the rest of DeepSpeed's
/// documented keys ignored) to a plan: dp from the batch sizes, then checked against `gpus`.
sim::PlanSpec plan_from_deepspeed_config(const std::string& json_text, int gpus, const DeepSpeedModelCode& code,
                                         const std::string& file);

}  // namespace strata::planner
