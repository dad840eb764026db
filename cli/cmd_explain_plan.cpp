// strata explain-plan: every effective value of a plan and where it came from (the plan file, its
// framework's preset with the source, or Strata's default), so a preset never acts unseen.
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "strata/common/text.hpp"
#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::cli {
namespace {

struct ExplainArgs {
    SpecArgs specs;
    bool list = false;
};

void list_frameworks(std::ostream& out) {
    for (const std::string& name : sim::framework_names()) {
        out << name << ": " << sim::framework_summary(name) << "\n";
        // The knobs under bf16, tp > 1 with sequence parallelism, ZeRO-1: the common case.
        sim::PlanSpec stated;
        stated.tp = 2;
        stated.sequence_parallel = true;
        stated.zero_stage = 1;
        for (const sim::FrameworkKnob& k : sim::framework_knobs(name, stated))
            out << "  " << k.key << " = " << k.value_json << "  (" << k.source << ")\n";
    }
}

void run_explain(const ExplainArgs& a) {
    if (a.list) {
        list_frameworks(std::cout);
        return;
    }
    const sim::Scenario s = resolve_specs(a.specs, true);
    const sim::PlanSpec& p = *s.plan;
    std::cout << "plan of " << s.model.name << " on " << s.cluster.name;
    if (!p.framework.empty()) std::cout << ", framework " << p.framework << " (" << sim::framework_summary(p.framework) << ")";
    std::cout << "\n";
    for (const sim::PlanValueOrigin& v : sim::explain_plan(p)) {
        if (v.key == "name" || v.key == "description") continue;
        std::cout << format("  %-22s %-14s %s\n", v.key.c_str(), v.value_json.size() > 14 ? "[...]" : v.value_json.c_str(),
                            v.origin.c_str());
    }
    // What vocab_divisible_by and tp make of the model's vocabulary: the rows its tables hold.
    const std::int64_t rows = sim::padded_vocab(s.model, p);
    std::cout << "  the tables hold " << rows << " rows for a vocabulary of " << s.model.vocab
              << (rows > s.model.vocab ? " (padded to a multiple of vocab_divisible_by x tp)" : "") << "\n";
}

void add_explain(CLI::App& app) {
    auto a = std::make_shared<ExplainArgs>();
    auto* cmd = app.add_subcommand("explain-plan",
                                   "Every effective plan value and where it came from: the plan, its framework preset, or the default");
    add_spec_options(cmd, a->specs);
    cmd->add_flag("--frameworks", a->list, "list the framework presets and the knobs each sets, with sources");
    cmd->callback([a] { run_explain(*a); });
}

STRATA_COMMAND(32, add_explain);

}  // namespace
}  // namespace strata::cli
