// `strata import-megatron ARGS` and `strata import-deepspeed CONFIG.json`: a plan (canonical plan
// JSON, docs/formats.md) from what a framework run was launched with. The GPU count comes from
// --gpus or a cluster; with --model and --cluster the plan is also checked against them, as every
// plan file is. Bad input exits 2 and writes nothing.
#include <filesystem>
#include <iostream>
#include <optional>
#include <memory>

#include "cli.hpp"
#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/planner/export.hpp"

namespace strata::cli {

namespace {

struct ImportFrameworkArgs {
    std::string input;  ///< the arguments file / config ('-': stdin)
    std::string output = "-";
    SpecArgs specs;     ///< optional --model/--cluster to check the plan against
    int gpus = 0;
    std::string name;
    planner::DeepSpeedModelCode code;  ///< import-deepspeed only
};

std::string read_input(const std::string& path) {
    if (path != "-") return read_text_file(path);
    std::string text, line;
    while (std::getline(std::cin, line)) text += line + "\n";
    return text;
}

/// The GPU count: --gpus, else the cluster's; both given must agree.
int gpu_count(const ImportFrameworkArgs& a, std::optional<sim::Scenario>& specs) {
    if (!a.specs.scenario.empty() || (!a.specs.model.empty() && !a.specs.cluster.empty())) {
        specs = resolve_specs(a.specs, false);
    } else if (!a.specs.model.empty()) {
        throw InputError("--model", "", "needs --cluster as well (a plan is checked against both)");
    } else if (!a.specs.cluster.empty()) {
        const std::string path = std::filesystem::exists(a.specs.cluster) ? a.specs.cluster : find_bundled("clusters", a.specs.cluster);
        if (path.empty()) throw InputError("--cluster", "", "\"" + a.specs.cluster + "\" is neither a file nor a bundled cluster");
        specs = sim::Scenario{};
        specs->cluster = sim::load_cluster(path);
    }
    const int from_cluster = specs ? specs->cluster.gpu_count() : 0;
    if (a.gpus > 0 && from_cluster > 0 && a.gpus != from_cluster)
        throw InputError("--gpus", "", "= " + std::to_string(a.gpus) + " disagrees with the cluster's " + std::to_string(from_cluster) + " GPUs");
    const int gpus = a.gpus > 0 ? a.gpus : from_cluster;
    if (gpus <= 0) throw InputError("--gpus", "", "is required (or --cluster / --scenario, whose GPU count is taken)");
    return gpus;
}

void finish(const ImportFrameworkArgs& a, sim::PlanSpec p, const std::optional<sim::Scenario>& specs, const std::string& what) {
    p.name = a.name.empty() ? "imported" : a.name;
    p.description = "imported from " + what + " " + (a.input == "-" ? std::string("(stdin)") : a.input) + " by strata";
    if (specs && (!a.specs.model.empty() || !a.specs.scenario.empty())) sim::validate_plan(specs->model, specs->cluster, p, a.input);
    const std::string text = sim::to_json_text(p);
    sim::plan_from_json_text(text, a.input);  // what is written loads
    write_output(a.output, text);
    std::ostream& report = report_stream({{"--output", a.output}});
    if (a.output != "-")
        report << "wrote " << a.output << ": tp " << p.tp << ", pp " << p.pp << ", dp " << p.dp << ", cp " << p.cp << ", ep " << p.ep << ", vpp "
               << p.vpp << ", micro-batch " << p.micro_batch << ", global batch " << p.global_batch << ", ZeRO " << p.zero_stage << "\n";
}

void run_import_megatron(const ImportFrameworkArgs& a) {
    check_outputs({{"--output", a.output}});
    std::optional<sim::Scenario> specs;
    const int gpus = gpu_count(a, specs);
    const std::string text = read_input(a.input);
    if (text.find("--global-batch-size") == std::string::npos || text.find("--micro-batch-size") == std::string::npos)
        throw InputError(a.input, "--global-batch-size", "and --micro-batch-size are required to make a plan");
    finish(a, planner::plan_from_megatron_args(text, gpus, a.input), specs, "Megatron-LM arguments");
}

void run_import_deepspeed(const ImportFrameworkArgs& a) {
    check_outputs({{"--output", a.output}});
    std::optional<sim::Scenario> specs;
    const int gpus = gpu_count(a, specs);
    finish(a, planner::plan_from_deepspeed_config(read_input(a.input), gpus, a.code, a.input), specs, "the DeepSpeed config");
}

void add_common(CLI::App* cmd, ImportFrameworkArgs& a) {
    cmd->add_option("-o,--output", a.output, "output plan JSON (default '-': stdout)");
    add_int_option(cmd, "--gpus", a.gpus, 1, 1 << 30, "GPUs of the run (default: the cluster's)");
    cmd->add_option("--model", a.specs.model, "check the plan against this model (file or bundled name)");
    cmd->add_option("--cluster", a.specs.cluster, "take the GPU count from this cluster and check the plan against it");
    cmd->add_option("--scenario", a.specs.scenario, "model and cluster from this scenario");
    cmd->add_option("--name", a.name, "plan name (default: imported)");
}

void register_imports(CLI::App& app) {
    auto m = std::make_shared<ImportFrameworkArgs>();
    CLI::App* cmd = app.add_subcommand("import-megatron", "Make a Strata plan from Megatron-LM arguments (a file of them or a launch script)");
    cmd->add_option("args", m->input, "file holding the arguments, e.g. `strata export --format megatron` output ('-': stdin)")->required();
    add_common(cmd, *m);
    cmd->callback([m] { run_import_megatron(*m); });

    auto d = std::make_shared<ImportFrameworkArgs>();
    CLI::App* ds = app.add_subcommand("import-deepspeed", "Make a Strata plan from a DeepSpeed config JSON and the model code's parallel sizes");
    ds->add_option("config", d->input, "DeepSpeed config JSON ('-': stdin)")->required();
    add_common(ds, *d);
    add_int_option(ds, "--tp", d->code.tp, 1, 1 << 20, "tensor parallelism of the model code (default 1)");
    add_int_option(ds, "--pp", d->code.pp, 1, 1 << 20, "PipelineModule stages (default 1)");
    add_int_option(ds, "--ep", d->code.ep, 1, 1 << 20, "MoE ep_size (default 1)");
    ds->add_flag("--checkpoint-layers", d->code.checkpoint_layers, "the model code checkpoints every layer (full recomputation)");
    ds->callback([d] { run_import_deepspeed(*d); });
}

}  // namespace

STRATA_COMMAND(41, register_imports);

}  // namespace strata::cli
