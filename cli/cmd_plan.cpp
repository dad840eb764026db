// strata plan: the best parallel plans for a model on a cluster; strata plan-merge: combine the
// JSON outputs of a sharded search (--shard i/n). Ctrl-C stops the search cleanly, prints what was
// found so far, writes no output file and exits 130.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "cli.hpp"
#include "strata/lowering/frameworks.hpp"
#include "progress.hpp"
#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/common/text.hpp"
#include "strata/planner/outlook.hpp"
#include "strata/planner/search.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::cli {
namespace {

struct PlanArgs {
    SpecArgs specs;
    std::string db, json, shard, calibration, residuals;
    int global_batch = 0;
    int seq_len = 0;
    int top = 10;
    int threads = 0;
    bool quiet = false, no_simulate = false, no_offload = false, tp_across_nodes = false, no_deepep = false, no_a2a_overlap = false, no_dualpipev = false, whole_simulations = false;
    bool expandable_segments = false;
    std::string framework;
    std::string precision;
};

std::string offload_label(const sim::PlanSpec& p) {
    auto one = [](const char* what, const sim::TierSplit& t) -> std::string {
        if (t.all_gpu()) return "";
        std::string s = std::string(what) + ":";
        if (t.gpu > 0 && (t.cpu > 0 || t.ssd > 0)) s += "split";
        else s += t.ssd > 0 ? "ssd" : "cpu";
        return s;
    };
    std::string s = one("opt", p.offload.optimizer);
    std::string q = one("par", p.offload.params);
    if (!q.empty()) s += (s.empty() ? "" : ",") + q;
    if (p.lock_free_update) s += ",lf";
    return s.empty() ? "-" : s;
}

std::string sched_label(const sim::PlanSpec& p) {
    switch (p.schedule) {
        case sim::Schedule::gpipe: return "gpipe";
        case sim::Schedule::one_f_one_b: return "1f1b";
        case sim::Schedule::interleaved_1f1b:  // a micro-batch group other than pp is shown: il/g5
            return p.microbatch_group > 0 && p.microbatch_group != p.pp ? "il/g" + std::to_string(p.microbatch_group) : "interl";
        case sim::Schedule::dualpipe_v: return "dpv";
    }
    return "?";
}

void print_table(const planner::SearchResult& r, const std::vector<planner::RunOutlook>& outlooks, int top, const std::string& framework,
                 std::ostream& out) {
    char line[512];
    std::snprintf(line, sizeof line, "%4s %3s %3s %4s %4s %3s %3s %-9s %3s %3s %-6s %4s %-9s %2s %-14s %9s %11s %7s %6s %9s  %s\n", "#", "tp", "pp", "dp",
                  "cp", "ep", "etp", "a2a", "vpp", "mb", "sched", "zero", "recompute", "sp", "offload", "step", "tokens/s", "goodput", "MFU", "peak HBM", "why");
    out << line;
    int shown = 0;
    for (const auto& rp : r.ranked) {
        if (shown >= top) break;
        const auto& p = rp.plan;
        const bool sim = rp.simulated;
        const double step = sim ? rp.sim.step_time_s : rp.estimate.step_time_s;
        const double tps = sim ? rp.sim.tokens_per_s : rp.estimate.tokens_per_s;
        const double mfu = sim ? rp.sim.mfu : rp.estimate.mfu;
        const double hbm = sim ? rp.sim.peak_hbm_bytes : rp.estimate.hbm_bytes;
        std::string note = sim ? (rp.sim.oom ? "OOM (simulated)" : rp.why) : ("estimate only; " + rp.why);
        const planner::RunOutlook& ol = outlooks[static_cast<std::size_t>(shown)];
        if (std::string(ol.memory) == "borderline") note = "memory borderline; " + note;
        const std::string etp = p.ep > 1 || p.expert_tp > 0 ? std::to_string(p.etp()) : "-";  // experts only
        // The all-to-all: flat or DeepEP, "+ov" when combined 1F1B hides it.
        const std::string a2a = p.ep < 2 ? "-" : std::string(p.moe_dispatcher == sim::MoeDispatcher::deepep ? "deepep" : "flat") + (p.moe_a2a_overlap ? "+ov" : "");
        const std::string cp = planner::cp_label(p);
        std::snprintf(line, sizeof line, "%4d %3d %3d %4d %4s %3d %3s %-9s %3d %3d %-6s %4d %-9s %2s %-14s %9s %11.0f %6.1f%% %5.1f%% %9s  %s\n", shown + 1, p.tp, p.pp,
                      p.dp, cp.c_str(), p.ep, etp.c_str(), a2a.c_str(), p.vpp, p.micro_batch, sched_label(p).c_str(), p.zero_stage, sim::to_string(p.recompute),
                      p.sequence_parallel ? "y" : "n", offload_label(p).c_str(), human_seconds(step).c_str(), tps, 100 * ol.goodput.goodput, 100 * mfu,
                      human_bytes(hbm).c_str(), note.c_str());
        out << line;
        ++shown;
    }
    out << "plans: " << r.space.considered << " considered, " << r.space.invalid << (framework.empty() ? std::string(" invalid (divisibility), ") : " invalid (divisibility, or not run by " + framework + "), ")
        << r.pruned_memory << " pruned by memory, " << r.estimated << " estimated, " << r.simulated << " simulated ("
        << r.simulated_oom << " OOM" << (r.follow_up_rounds > 0 ? ", " + std::to_string(r.follow_up_rounds) + " follow-up round(s) after OOMs" : "")
        << ")" << (r.too_large_to_simulate > 0 ? "; " + std::to_string(r.too_large_to_simulate) + " too large to simulate in memory here (ranked by estimate)" : "")
        << "\n";
    if (r.ranked.empty()) out << "no plan fits this cluster (see `strata memory` for why)\n";
}

// The best plan's interval, goodput and energy, and where the ranking cannot tell plans apart.
void print_outlook(const std::vector<planner::RunOutlook>& outlooks, int top, std::ostream& out) {
    const planner::RunOutlook& o = outlooks[0];
    char line[512];
    if (o.interval.available) {
        const std::size_t shown = std::min<std::size_t>(outlooks.size(), static_cast<std::size_t>(std::max(1, top)));
        std::snprintf(line, sizeof line, "best plan: step %s (80%% interval %s-%s), %.0f tokens/s (%.0f-%.0f); residuals of %d held-out runs, class %s\n",
                      human_seconds(o.step_time_s.mid).c_str(), human_seconds(o.step_time_s.lo).c_str(), human_seconds(o.step_time_s.hi).c_str(),
                      o.tokens_per_s.mid, o.tokens_per_s.lo, o.tokens_per_s.hi, o.interval.n, o.interval.cls.c_str());
        out << line;
        // Plans whose intervals overlap the best one's are not told apart by the prediction.
        int within = 0;
        for (std::size_t i = 1; i < shown; ++i)
            if (outlooks[i].tokens_per_s.hi >= o.tokens_per_s.lo) ++within;
        if (within > 0)
            out << "  " << within << " of the other " << shown - 1
                << " plans shown lie within each other's interval with it: the prediction cannot tell them apart\n";
    }
    std::snprintf(line, sizeof line, "  goodput %.1f%% (one interruption every %.1f h; %s checkpoint to %s every %.0f min, %.1f s stall; %.0f s restart): %.0f tokens/s kept\n",
                  100 * o.goodput.goodput, o.goodput.mtbf_s / 3600, human_bytes(o.goodput_in.checkpoint_bytes).c_str(),
                  o.goodput_in.storage, o.goodput.interval_s / 60, o.goodput_in.checkpoint_stall_s, o.goodput_in.restart_s,
                  o.tokens_per_s.mid * o.goodput.goodput);
    out << line;
    if (o.power.known) {
        std::snprintf(line, sizeof line, "  energy %.3g MJ per step, %.3g J per token, %.1f kW mean (PUE %.2f, GPUs %.0f W computing)\n",
                      o.energy.facility_j / 1e6, o.energy.per_token_j, o.energy.mean_power_w / 1e3, o.power.pue, o.power.gpu_compute_w);
        out << line;
    }
    std::snprintf(line, sizeof line, "  memory %s (peak %s of %s; the suite's memory error %.1f%%)\n", o.memory, human_bytes(o.peak_hbm_bytes).c_str(),
                  human_bytes(o.hbm_capacity_bytes).c_str(), 100 * o.memory_error);
    out << line;
}

void run_plan(const PlanArgs& a) {
    const std::vector<Output> outputs{{"--json", a.json}};
    check_outputs(outputs);  // before the search, not after it
    std::ostream& report = report_stream(outputs);
    sim::Scenario s = resolve_specs(a.specs, false);
    if (a.seq_len > 0) s.model.seq_len = a.seq_len;
    if (s.model.max_position > 0 && s.model.max_position < s.model.seq_len && s.model.position == sim::PositionKind::learned)
        throw InputError("--seq-len", "", "= " + std::to_string(s.model.seq_len) + " exceeds the learned position table (" + std::to_string(s.model.max_position) + ")");
    planner::SearchOptions o;
    o.space.global_batch = a.global_batch > 0 ? a.global_batch : (s.plan ? s.plan->global_batch : 512);
    o.space.search_offload = !a.no_offload;
    o.space.tp_within_node = !a.tp_across_nodes;
    o.space.search_deepep = !a.no_deepep;
    o.space.search_a2a_overlap = !a.no_a2a_overlap;
    o.space.search_dualpipev = !a.no_dualpipev;
    o.space.expandable_segments = a.expandable_segments || (s.plan && s.plan->expandable_segments);
    o.space.framework = !a.framework.empty() ? a.framework : (s.plan ? s.plan->framework : "");
    if (!a.precision.empty()) sim::precision_from(a.precision, o.space.precision);
    else if (s.plan) o.space.precision = s.plan->precision;
    o.top_k = a.top;
    o.threads = thread_count(a.threads);
    o.simulate = !a.no_simulate;
    o.steady_state = !a.whole_simulations;
    if (!a.shard.empty()) {
        int i = -1, n = -1;
        char slash = 0;
        std::istringstream in(a.shard);
        if (!(in >> i >> slash >> n) || slash != '/' || n < 1 || i < 0 || i >= n || !in.eof())
            throw InputError("--shard", "", "= \"" + a.shard + "\" must be i/n with 0 <= i < n");
        o.shard = i;
        o.shards = n;
    }
    auto db = open_db(a.db);
    auto hw = view_for(db, s.cluster, a.specs);
    std::string cal_line;
    o.calibration = calibration_for(a.calibration, hw, &cal_line);
    install_interrupt_handler();
    o.cancel = &interrupted();
    ProgressBar bar(a.quiet);
    o.progress = [&](double f, const char* phase) { bar.update(f, phase); };
    std::string residuals_line;
    const std::optional<planner::ResidualTable> residuals = residuals_for(a.residuals, &residuals_line);
    planner::SearchResult r = planner::search_plans(s.model, s.cluster, hw, o);
    bar.finish();
    std::vector<planner::RunOutlook> outlooks;
    for (const auto& rp : r.ranked)
        outlooks.push_back(planner::run_outlook(s.model, s.cluster, hw, rp, 0, residuals ? &*residuals : nullptr, false));
    report << "Plans for " << s.model.name << " on " << s.cluster.name << " (" << s.cluster.gpu_count() << " x " << s.cluster.gpu
           << "), global batch " << o.space.global_batch << ", seq " << s.model.seq_len << "\n";
    print_table(r, outlooks, a.top, o.space.framework, report);
    if (!r.ranked.empty()) print_outlook(outlooks, a.top, report);
    report << "calibration: " << cal_line << "\n";
    report << "residuals: " << residuals_line << "\n";
    report.flush();
    if (r.cancelled) throw Interrupted("the table shows what was found so far; no output file written");
    if (!a.json.empty()) {
        // Each ranked plan carries its run outlook (interval, goodput, energy) beside its figures.
        nlohmann::ordered_json j = nlohmann::ordered_json::parse(planner::search_to_json(s.model, s.cluster, r));
        for (std::size_t i = 0; i < outlooks.size() && i < j["plans"].size(); ++i) j["plans"][i]["outlook"] = planner::outlook_json(outlooks[i]);
        write_output(a.json, j.dump(2) + "\n");
    }
}

void add_plan(CLI::App& app) {
    auto a = std::make_shared<PlanArgs>();
    auto* cmd = app.add_subcommand("plan", "Search parallel plans for a model on a cluster and rank them");
    add_spec_options(cmd, a->specs);
    add_db_option(cmd, a->db);
    add_calibration_option(cmd, a->calibration);
    add_residuals_option(cmd, a->residuals);
    add_global_batch_option(cmd, a->global_batch, "the scenario's plan, else 512");
    add_int_option(cmd, "--seq-len", a->seq_len, 1, static_cast<int>(sim::kMaxSeqLen), "override the model's sequence length");
    add_int_option(cmd, "--top,-k", a->top, 1, 100000, "plans to show (default 10)");
    cmd->add_option("--json", a->json, "also write the ranked plans as JSON to FILE ('-': stdout, the table then goes to stderr)");
    add_threads_option(cmd, a->threads, "simulations run in parallel");
    cmd->add_option("--shard", a->shard, "search only shard i of n (i/n); merge with plan-merge");
    cmd->add_flag("--quiet,-q", a->quiet, "no progress bar");
    cmd->add_flag("--no-simulate", a->no_simulate, "rank by the fast estimate only");
    cmd->add_flag("--no-offload", a->no_offload, "do not consider CPU/SSD offload");
    cmd->add_flag("--tp-across-nodes", a->tp_across_nodes, "allow tensor parallelism across nodes");
    cmd->add_flag("--no-deepep", a->no_deepep, "MoE: keep Megatron's flat all-to-all (no DeepEP dispatch)");
    cmd->add_flag("--no-a2a-overlap", a->no_a2a_overlap, "MoE: do not try hiding the all-to-alls under another micro-batch (Megatron-Core's combined 1F1B)");
    cmd->add_flag("--no-dualpipev", a->no_dualpipev, "pipelines: do not try DeepSeek's DualPipeV schedule (two chunks a rank in a V)");
    cmd->add_flag("--whole-simulations", a->whole_simulations,
                  "simulate every shortlisted plan whole, never extended from three shorter simulations of its steady state "
                  "(the same figures, slower: a check)");
    cmd->add_option("--precision", a->precision, "the precision every plan trains in (default: the plan given, else bf16)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
    cmd->add_option("--framework", a->framework,
                    "search only what this framework runs, with its preset's knobs (strata explain-plan --frameworks; "
                    "also taken from the plan given)")
        ->check([](const std::string& v) {
            return sim::canonical_framework(v).empty() ? "must be one of " + sim::framework_choices() : std::string();
        })
        ->transform([](const std::string& v) { return sim::canonical_framework(v); });
    cmd->add_flag("--expandable-segments", a->expandable_segments,
                  "the runs use PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (also taken from the plan given)");
    cmd->callback([a] { run_plan(*a); });

    auto files = std::make_shared<std::vector<std::string>>();
    auto out = std::make_shared<std::string>("-");
    auto top = std::make_shared<int>(10);
    auto* merge = app.add_subcommand("plan-merge", "Merge the --json outputs of a sharded `strata plan`");
    merge->add_option("files", *files, "shard outputs")->required()->check(CLI::ExistingFile);
    merge->add_option("--output,-o", *out, "merged JSON (default '-': stdout)");
    add_int_option(merge, "--top,-k", *top, 0, 100000, "plans to keep (default 10; 0: all)");
    merge->callback([files, out, top] {
        check_outputs({{"--output", *out}});
        std::vector<std::string> texts;
        for (const auto& f : *files) texts.push_back(read_text_file(f));
        write_output(*out, planner::merge_search_json(texts, *files, *top));
    });
}

STRATA_COMMAND(10, add_plan);

}  // namespace
}  // namespace strata::cli
