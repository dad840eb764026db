// Reading and writing specs as JSON, with validation that names the file, the JSON path and the
// rule. Unknown keys are errors (with a did-you-mean). Cross-checks between model, cluster and plan
// (tp divides heads, tp*pp*dp*cp = GPUs, ...) live in validate_plan().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/lowering/spec.hpp"

namespace strata::sim {

/// Parse from JSON text; `file` names the source in error messages.
ModelSpec model_from_json_text(const std::string& text, const std::string& file);
ClusterSpec cluster_from_json_text(const std::string& text, const std::string& file);
PlanSpec plan_from_json_text(const std::string& text, const std::string& file);
/// A scenario: {"model": {...} | "path", "cluster": ..., "plan": ...}; paths are relative to the file.
Scenario scenario_from_json_text(const std::string& text, const std::string& file);

/// Load from files. A file may hold the object itself or wrap it ({"model": {...}}).
ModelSpec load_model(const std::string& path);
ClusterSpec load_cluster(const std::string& path);
PlanSpec load_plan(const std::string& path);
Scenario load_scenario(const std::string& path);

/// One effective plan value and where it came from: "plan" (written in the file), "framework
/// NAME: SOURCE" (its preset), or "default".
struct PlanValueOrigin {
    std::string key;
    std::string value_json;
    std::string origin;
};
/// Every key of the plan's canonical JSON with its origin (strata explain-plan).
std::vector<PlanValueOrigin> explain_plan(const PlanSpec& p);

/// A plan that does not state plan.dp takes the data-parallel degree its cluster leaves,
/// GPUs / (tp x pp x cp), where that divides (papers state tp, pp and the GPU count); a stated dp
/// is kept, and validate_plan names a mismatch.
void derive_unstated_dp(const ClusterSpec& c, PlanSpec& p);

/// Cross-validate a plan against its model and cluster; throws InputError naming `file`.
void validate_plan(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const std::string& file);

/// The largest plan.global_batch (and micro_batch) the readers and the CLI accept: 2^20 =
/// 1,048,576 sequences, 68x the largest published LLM batch (DeepSeek-V3: 15,360; GPT-3: 1,536;
/// Llama 3 405B: 2,048) and 16x BERT's LAMB runs (65,536). The planner's analytical memory model
/// walks the pipeline schedule of every micro-batch, so a search near the bound takes minutes (GPT-3
/// 175B on 1024 GPUs: 106 s against 8 s at 1536); the memory a simulation needs is checked
/// separately (check_simulation_size).
constexpr std::int64_t kMaxGlobalBatch = std::int64_t{1} << 20;
/// The largest model.seq_len (and max_position) the readers and the CLI accept: 2^24 tokens.
constexpr std::int64_t kMaxSeqLen = std::int64_t{1} << 24;

/// How large a simulation of a plan would be. The Program holds every instruction of every
/// micro-batch (the engine keeps per-instruction state beside it), so memory grows with the number
/// of micro-batches; a step with 2^18 of them needs tens of GB.
struct SimulationShape {
    bool full = false;   ///< full mode: one RankProgram per GPU
    bool trace = false;  ///< a Chrome trace is kept (timeline spans, then the text)
    int steps = 1;       ///< training steps simulated
};
struct SimulationSize {
    std::int64_t micro_batches = 0;  ///< per step
    double instructions = 0;         ///< of the whole Program, estimated
    double bytes = 0;                ///< memory the simulation needs, estimated (Program, engine, trace)
};
/// Instructions measured by lowering the plan with a few micro-batches (two counts, a line through
/// them), times the simulator's bytes per instruction (docs/reliability.md). Small plans skip the
/// lowering: a bound of kBoundInstrPerLayer instructions per layer and micro-batch shows them far
/// below any budget. The plan must be valid (validate_plan).
SimulationSize simulation_size(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const SimulationShape& shape = {},
                               double budget_bytes = 0);
/// InputError naming `file` and plan.global_batch, with the memory it would need, when
/// simulation_size(...).bytes exceeds `budget_bytes` (memory_limit_bytes() for one simulation at a
/// time; the planner divides it among its threads).
void check_simulation_size(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const SimulationShape& shape,
                           double budget_bytes, const std::string& file);

/// Canonical JSON (2-space indent, keys in a fixed order); parse(to_json(x)) == x.
std::string to_json_text(const ModelSpec& m);
std::string to_json_text(const ClusterSpec& c);
std::string to_json_text(const PlanSpec& p);
std::string to_json_text(const Scenario& s);

/// Hugging Face config.json (LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM,
/// Qwen2ForCausalLM, GPT2LMHeadModel, ...) to a ModelSpec.
ModelSpec model_from_hf_config_text(const std::string& text, const std::string& file);
/// Choices an import cannot take from the config alone.
struct HfImportOptions {
    std::int64_t seq_len = 0;      ///< training sequence length; 0 = min(max_position_embeddings, 8192)
    /// Cost the sliding-window layers as full attention (an overestimate) instead of importing the
    /// window (model.sliding_window).
    bool windows_as_full = false;
};
ModelSpec model_from_hf_config_text(const std::string& text, const std::string& file, const HfImportOptions& options);

}  // namespace strata::sim
