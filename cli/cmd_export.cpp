// strata export: a plan as Megatron-LM arguments or a DeepSpeed config. The plan comes from a
// scenario (or --model/--cluster/--plan), or from the planner's JSON output (--from-plan-json,
// taking its best plan). What the format cannot express is printed on stderr, never dropped.
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
    planner::ExportResult r = a.format == "megatron" ? planner::export_megatron(s.model, *s.plan)
                                                     : planner::export_deepspeed(s.model, *s.plan);
    write_output(a.output, r.text);
    for (const auto& u : r.unsupported) std::cerr << "note: " << a.format << " cannot express: " << u << "\n";
}

void add_export(CLI::App& app) {
    auto a = std::make_shared<ExportArgs>();
    auto* cmd = app.add_subcommand("export", "Print a plan as Megatron-LM arguments or a DeepSpeed config");
    add_spec_options(cmd, a->specs);
    cmd->add_option("--from-plan-json", a->plan_json, "take the best plan of a `strata plan --json` output");
    cmd->add_option("--format,-f", a->format, "megatron | deepspeed")->check(CLI::IsMember({"megatron", "deepspeed"}));
    cmd->add_option("--output,-o", a->output, "output file (default '-': stdout)");
    cmd->callback([a] { run_export(*a); });
}

STRATA_COMMAND(80, add_export);

}  // namespace
}  // namespace strata::cli
