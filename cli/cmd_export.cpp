// strata export: a plan as Megatron-LM arguments or a DeepSpeed config, or with --launch as a
// whole launch script around them. The plan comes from a scenario (or --model/--cluster/--plan),
// or from the planner's JSON output (--from-plan-json, taking its best plan). What the format
// cannot express is printed on stderr (and into a launch script), never dropped.
#include <iostream>

#include "cli.hpp"
#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/planner/export.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::cli {
namespace {

struct ExportArgs {
    SpecArgs specs;
    std::string format = "megatron";
    std::string output = "-";
    std::string plan_json;
    bool launch = false;
    planner::LaunchOptions launch_options;
};

void run_export(const ExportArgs& a) {
    check_outputs({{"--output", a.output}});
    sim::Scenario s;
    if (!a.plan_json.empty()) {
        // The planner's --json output holds the model, cluster and ranked plans.
        auto j = read_json_file(a.plan_json);
        if (!j.is_object() || !j.contains("model") || !j.contains("cluster") || !j.contains("plans") || !j["plans"].is_array() || j["plans"].empty())
            throw InputError(a.plan_json, "", "is not a `strata plan --json` output (needs model, cluster and a non-empty plans list)");
        s.model = sim::model_from_json_text(j["model"].dump(), a.plan_json);
        s.cluster = sim::cluster_from_json_text(j["cluster"].dump(), a.plan_json);
        const auto& best = j["plans"][0];
        if (!best.is_object() || !best.contains("plan")) throw InputError(a.plan_json, "plans[0].plan", "is required");
        s.plan = sim::plan_from_json_text(best["plan"].dump(), a.plan_json);
        sim::validate_plan(s.model, s.cluster, *s.plan, a.plan_json);
    } else {
        s = resolve_specs(a.specs, true);
    }
    const bool megatron = a.format == "megatron";
    const planner::ExportResult r = megatron ? planner::export_megatron(s.model, *s.plan) : planner::export_deepspeed(s.model, *s.plan);
    std::string text = r.text;
    if (a.launch)
        text = megatron ? planner::megatron_launch(s.model, s.cluster, *s.plan, a.launch_options, r)
                        : planner::deepspeed_launch(s.model, s.cluster, *s.plan, a.launch_options, r);
    write_output(a.output, text);
    // Notes go to stderr whatever the output, so stdout carries nothing but the export.
    for (const auto& u : r.unsupported) std::cerr << "note: " << a.format << " cannot express: " << u << "\n";
    if (!a.launch) {
        for (const auto& [name, value] : r.env) std::cerr << "note: launch with " << name << "=" << value << "\n";
        for (const auto& c : r.model_code) std::cerr << "note: set in the model code (DeepSpeed does not read it from the config): " << c << "\n";
    }
}

void add_export(CLI::App& app) {
    auto a = std::make_shared<ExportArgs>();
    auto* cmd = app.add_subcommand("export", "Print a plan as Megatron-LM arguments or a DeepSpeed config, or a launch script (--launch)");
    add_spec_options(cmd, a->specs);
    cmd->add_option("--from-plan-json", a->plan_json, "take the best plan of a `strata plan --json` output");
    cmd->add_option("--format,-f", a->format, "megatron | deepspeed")->check(CLI::IsMember({"megatron", "deepspeed"}));
    cmd->add_option("--output,-o", a->output, "output file (default '-': stdout)");
    cmd->add_flag("--launch", a->launch,
                  "write a bash launch script: environment, torchrun/srun over the cluster's nodes, the entry script with every argument "
                  "it needs (tokenizer or --vocab-size, --mock-data unless --data-path, iterations, learning rate)");
    auto& lo = a->launch_options;
    cmd->add_option("--launcher", lo.launcher, "with --launch: torchrun (one command per node) | srun (Slurm)")
        ->check(CLI::IsMember({"torchrun", "srun"}));
    cmd->add_option("--data-path", lo.data_path, "with --launch: the training data (default: Megatron's --mock-data)");
    cmd->add_option("--tokenizer-model", lo.tokenizer_model,
                    "with --launch: a Hugging Face tokenizer (default: NullTokenizer with the model's vocabulary size)");
    add_int_option(cmd, "--train-iters", lo.train_iters, 1, 1 << 30, "with --launch: optimizer steps (default 100)");
    add_num_option(cmd, "--lr", lo.lr, 1e-12, 10, "with --launch: peak learning rate, cosine to a tenth (default 3e-4)");
    cmd->add_option("--entry", lo.entry, "with --launch: the training script (default pretrain_gpt.py; DeepSpeed: train.py)");
    cmd->callback([a] { run_export(*a); });
}

STRATA_COMMAND(80, add_export);

}  // namespace
}  // namespace strata::cli
