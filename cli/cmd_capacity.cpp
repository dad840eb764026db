// strata capacity: fewest GPUs and cheapest cluster that train T tokens by a deadline or within a
// budget, with the Pareto front; --max-model: the largest model of the family that trains on a
// cluster at all, with and without CPU/SSD offload.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli.hpp"
#include "strata/lowering/frameworks.hpp"
#include "progress.hpp"
#include "strata/common/error.hpp"
#include "strata/common/text.hpp"
#include "strata/planner/capacity.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::cli {
namespace {

struct CapArgs {
    SpecArgs specs;
    std::string db, json, tokens, deadline, calibration, residuals;
    double budget = 0;
    std::vector<std::string> gpus;
    int max_gpus = 4096, min_gpus = 8, global_batch = 0, threads = 0;
    bool max_model = false, quiet = false, no_deepep = false, no_a2a_overlap = false, whole_simulations = false, expandable_segments = false, owned = false;
    std::string framework;
};

/// "2T", "300B", "1.5e12" -> tokens.
double parse_count(const std::string& s, const std::string& opt) {
    if (s.empty()) throw InputError(opt, "", "is required");
    double mult = 1;
    std::string num = s;
    switch (s.back()) {
        case 'K': case 'k': mult = 1e3; num.pop_back(); break;
        case 'M': mult = 1e6; num.pop_back(); break;
        case 'B': case 'G': mult = 1e9; num.pop_back(); break;
        case 'T': mult = 1e12; num.pop_back(); break;
        default: break;
    }
    try {
        std::size_t pos = 0;
        double v = std::stod(num, &pos);
        if (pos != num.size() || !(v > 0) || !std::isfinite(v)) throw std::invalid_argument("x");
        return v * mult;
    } catch (const std::exception&) {
        throw InputError(opt, "", "= \"" + s + "\" must be a positive number, optionally with K, M, B or T");
    }
}

/// "30d", "720h", "30" (days) -> seconds.
double parse_duration(const std::string& s, const std::string& opt) {
    if (s.empty()) return 0;
    double mult = 86400;
    std::string num = s;
    if (s.back() == 'd') num.pop_back();
    else if (s.back() == 'h') { mult = 3600; num.pop_back(); }
    else if (s.back() == 'w') { mult = 7 * 86400; num.pop_back(); }
    try {
        std::size_t pos = 0;
        double v = std::stod(num, &pos);
        if (pos != num.size() || !(v > 0) || !std::isfinite(v)) throw std::invalid_argument("x");
        return v * mult;
    } catch (const std::exception&) {
        throw InputError(opt, "", "= \"" + s + "\" must be a duration such as 30d, 720h or 4w");
    }
}

/// A template cluster for a GPU type: the smallest bundled cluster using that GPU.
sim::ClusterSpec template_for(const std::string& gpu) {
    namespace fs = std::filesystem;
    sim::ClusterSpec best;
    bool found = false;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(fs::path(STRATA_SCENARIOS_DIR) / "clusters")) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
        sim::ClusterSpec c = sim::load_cluster(f.string());
        if (c.gpu != gpu || c.gpus_per_node < 8) continue;
        if (!found || c.nodes < best.nodes) best = c, found = true;
    }
    if (!found) {
        best.gpu = gpu;
        best.nodes = 1;
        best.gpus_per_node = 8;
        best.name = gpu;
    }
    return best;
}

void run_capacity(const CapArgs& a) {
    const std::vector<Output> outputs{{"--json", a.json}};
    check_outputs(outputs);
    if (a.max_model && !a.json.empty()) throw InputError("--json", "", "is not available with --max-model (it prints its answer only)");
    if (a.min_gpus > a.max_gpus)
        throw InputError("--min-gpus", "", "= " + std::to_string(a.min_gpus) + " exceeds --max-gpus = " + std::to_string(a.max_gpus));
    std::ostream& report = report_stream(outputs);
    auto db = open_db(a.db);
    install_interrupt_handler();
    ProgressBar bar(a.quiet);
    if (a.max_model) {
        sim::Scenario s = resolve_specs(a.specs, false);
        planner::ClusterOption opt{s.cluster, view_for(db, s.cluster, a.specs), {}};
        opt.calibration = calibration_for(a.calibration, opt.hw);
        const int gbs = a.global_batch > 0 ? a.global_batch : 64;
        report << "Largest trainable member of the " << s.model.name << " family on " << s.cluster.name << " ("
                  << s.cluster.gpu_count() << " x " << s.cluster.gpu << "), global batch " << gbs << ", seq " << s.model.seq_len
                  << (a.framework.empty() ? std::string() : ", plans " + a.framework + " runs") << ":\n";
        using T = planner::OffloadTiers;
        for (T tiers : {T::none, T::cpu, T::cpu_and_ssd}) {
            bar.update(static_cast<double>(tiers) / 3.0, "searching");
            auto r = planner::max_trainable_model(s.model, opt, tiers, gbs, &interrupted(), a.expandable_segments,
                                                   thread_count(a.threads), a.framework);
            bar.finish();
            report << (tiers == T::none ? "  GPU memory only:      " : tiers == T::cpu ? "  GPU + CPU offload:    " : "  GPU + CPU + SSD:      ");
            if (!r.found) {
                report << "no member fits\n";
                continue;
            }
            const auto& p = r.plan.plan;
            report << format("%s, %.1fB parameters (%d layers, hidden %lld); plan tp %d pp %d dp %d zero %d recompute %s%s%s, %.0f tokens/s\n",
                        r.model.name.c_str(), r.params / 1e9, r.model.layers, static_cast<long long>(r.model.hidden), p.tp, p.pp, p.dp,
                        p.zero_stage, sim::to_string(p.recompute), p.offload.optimizer.all_gpu() ? "" : ", optimizer offloaded",
                        p.offload.params.all_gpu() ? "" : ", params offloaded", r.plan.sim.tokens_per_s);
            report.flush();
        }
        if (interrupted().load()) throw Interrupted("the members above were searched; the rest was not");
        return;
    }
    sim::Scenario s;
    if (!a.specs.scenario.empty() || !a.specs.model.empty()) {
        SpecArgs only_model = a.specs;
        if (only_model.cluster.empty() && only_model.scenario.empty()) only_model.cluster = "dgx-h100-x1";
        s = resolve_specs(only_model, false);
    } else {
        throw InputError("--model", "", "is required");
    }
    planner::CapacityOptions o;
    o.tokens = parse_count(a.tokens, "--tokens");
    o.deadline_s = parse_duration(a.deadline, "--deadline");
    o.budget_usd = a.budget;
    if (o.deadline_s <= 0 && o.budget_usd <= 0) throw InputError("--deadline", "", "or --budget is required");
    o.max_gpus = a.max_gpus;
    o.min_gpus = a.min_gpus;
    o.search.space.global_batch = a.global_batch > 0 ? a.global_batch : 1024;
    // A reduced space per size keeps a sweep of dozens of cluster sizes to seconds per size.
    o.search.space.search_gpipe = false;
    o.search.space.search_offload = false;
    o.search.space.zero_stages = {1};
    if (!a.framework.empty()) {
        // FSDP frameworks have no ZeRO-1: their sweep takes full sharding, as they default to.
        o.search.space.framework = a.framework;
        if (a.framework == "torchtitan" || a.framework == "torchtitan-compile" || a.framework == "llm-foundry")
            o.search.space.zero_stages = {3};
    }
    o.search.space.search_deepep = !a.no_deepep;
    o.search.space.search_a2a_overlap = !a.no_a2a_overlap;
    o.search.space.search_dualpipev = false;  // the reduced space (docs/planner.md)
    o.search.space.expandable_segments = a.expandable_segments;
    o.search.shortlist = 3;
    o.search.max_simulated = 3;
    o.search.shortlist_margin = 0.0;
    o.search.cancel = &interrupted();
    o.search.threads = thread_count(a.threads);
    o.search.steady_state = !a.whole_simulations;
    o.progress = [&](int done, int total) { bar.update(double(done) / total, "sizes"); };
    std::string residuals_line;
    const std::optional<planner::ResidualTable> residuals = residuals_for(a.residuals, &residuals_line);
    o.residuals = residuals ? &*residuals : nullptr;
    o.owned = a.owned;
    std::vector<planner::ClusterOption> options;
    std::vector<std::string> gpus = a.gpus.empty() ? std::vector<std::string>{"H100-SXM5-80GB", "A100-SXM4-80GB"} : a.gpus;
    for (const auto& g : gpus) {
        sim::ClusterSpec c = template_for(g);
        // A given cluster (--cluster, --scenario) lends its operations keys (failures, checkpoints,
        // power, PUE, energy price) to every swept size; its node and price stay the template's.
        if (!a.specs.cluster.empty() || !a.specs.scenario.empty()) c.ops = s.cluster.ops;
        const hwdb::HardwareView hw = view_for(db, c);
        options.push_back({c, hw, calibration_for(a.calibration, hw)});
    }
    auto r = planner::plan_capacity(s.model, options, o);
    bar.finish();
    report << format("Training %s on %s tokens", s.model.name.c_str(), fmt_sci(o.tokens, 3).c_str());
    if (o.deadline_s > 0) report << format(", deadline %.1f days", o.deadline_s / 86400);
    if (o.budget_usd > 0) report << format(", budget $%.0f", o.budget_usd);
    report << format(" (global batch %d):\n", o.search.space.global_batch);
    const bool iv = o.residuals != nullptr;
    report << format("%-16s %6s %6s %12s %7s %17s %15s %10s %5s %6s  %s\n", "gpu", "nodes", "gpus", "tokens/s", "goodput",
                  iv ? "days (80% interval)" : "days", iv ? "cost $ (hi)" : "cost $", "MWh", "meets", "pareto", "plan (tp pp dp cp vpp mb recompute)");
    for (const auto& p : r.points) {
        if (!p.feasible) {
            report << format("%-16s %6d %6d %12s\n", p.cluster.gpu.c_str(), p.cluster.nodes, p.cluster.gpu_count(),
                        p.valid_plans == 0 ? "no valid plan (batch/layers/heads do not divide)" : "no plan fits in memory");
            continue;
        }
        const auto& q = p.best.plan;
        const auto& ol = p.outlook;
        if (!ol.goodput.converges) {
            report << format("%-16s %6d %6d %12.0f %7s  never finishes: an interruption every %.0f s, sooner than a restart and its lost work\n",
                          p.cluster.gpu.c_str(), p.cluster.nodes, p.cluster.gpu_count(), p.tokens_per_s, "0%", ol.goodput.mtbf_s);
            continue;
        }
        const std::string days = iv ? format("%.1f (%.1f-%.1f)", p.time_s / 86400, ol.wall_s.lo / 86400, ol.wall_s.hi / 86400)
                                    : format("%.2f", p.time_s / 86400);
        const std::string cost = iv ? format("%.2fM (%.2fM)", p.cost_usd / 1e6, p.cost_hi_usd / 1e6) : format("%.0f", p.cost_usd);
        report << format("%-16s %6d %6d %12.0f %6.1f%% %17s %15s %10.0f %5s %6s  %d %d %d %d %d %d %s%s\n", p.cluster.gpu.c_str(), p.cluster.nodes,
                    p.cluster.gpu_count(), p.tokens_per_s, 100 * ol.goodput.goodput, days.c_str(), cost.c_str(), ol.run_energy.kwh / 1e3,
                    p.meets ? "yes" : "no", p.pareto ? "*" : "", q.tp, q.pp, q.dp, q.cp, q.vpp, q.micro_batch, sim::to_string(q.recompute),
                    std::string(ol.memory) == "borderline" ? ", memory borderline" : "");
    }
    auto say = [&](const char* what, int i) {
        if (i < 0) {
            report << format("%s: none meets the target within %d GPUs\n", what, o.max_gpus);
            return;
        }
        const auto& p = r.points[static_cast<std::size_t>(i)];
        const auto& ol = p.outlook;
        report << format("%s: %d x %s (%d nodes), %.1f days", what, p.cluster.gpu_count(), p.cluster.gpu.c_str(), p.cluster.nodes, p.time_s / 86400);
        if (iv && ol.interval.available) report << format(" (80%% interval %.1f-%.1f)", ol.wall_s.lo / 86400, ol.wall_s.hi / 86400);
        report << format(", $%.0f", p.cost_usd);
        if (iv && ol.interval.available) report << format(" ($%.0f-%.0f)", ol.cost_usd.lo, ol.cost_usd.hi);
        report << "\n";
        report << format("  throughput %.0f tokens/s (%.0f-%.0f); goodput %.1f%%: %.0f tokens/s kept\n", ol.tokens_per_s.mid, ol.tokens_per_s.lo,
                      ol.tokens_per_s.hi, 100 * ol.goodput.goodput, ol.tokens_per_s.mid * ol.goodput.goodput);
        report << format("  failures: %.1f expected (one every %.1f h at %.3g per GPU-hour), %.0f s restart + %.0f s lost work each\n",
                      ol.goodput.failures, ol.goodput.mtbf_s / 3600, ol.goodput_in.interruptions_per_gpu_hour, ol.goodput_in.restart_s,
                      ol.goodput.lost_per_failure_s);
        report << format("  checkpoints: %s every %.1f min (%s), %.3g s to write to %s, %.3g s stall each\n",
                      human_bytes(planner::checkpoint_bytes(s.model, p.best.plan)).c_str(), ol.goodput.interval_s / 60,
                      p.cluster.ops.checkpoint_interval_s ? "fixed" : "Young/Daly", ol.goodput_in.checkpoint_write_s, ol.goodput_in.storage,
                      ol.goodput_in.checkpoint_stall_s);
        report << format("  energy: %.3g MJ per step, %.3g J per token, %.2f MW mean (PUE %.2f); %.0f MWh, $%.0f at $%.3f/kWh%s\n",
                      ol.energy.facility_j / 1e6, ol.energy.per_token_j, ol.energy.mean_power_w / 1e6, ol.power.pue, ol.run_energy.kwh / 1e3,
                      ol.run_energy.usd, ol.power.usd_per_kwh, o.owned ? " (in the cost: owned hardware)" : " (in the rental price; --owned adds it)");
        report << format("  memory: %s (peak %s of %s; suite's memory error %.1f%%)\n", ol.memory, human_bytes(ol.peak_hbm_bytes).c_str(),
                      human_bytes(ol.hbm_capacity_bytes).c_str(), 100 * ol.memory_error);
    };
    say("fewest GPUs", r.fewest_gpus);
    if (iv) {
        if (r.fewest_gpus_predicted >= 0 && r.fewest_gpus_predicted != r.fewest_gpus)
            report << format("  (judged at the pessimistic end of the 80%% interval; at the predicted time %d GPUs would do)\n",
                          r.points[static_cast<std::size_t>(r.fewest_gpus_predicted)].cluster.gpu_count());
        else
            report << "  (judged at the pessimistic end of the 80% interval)\n";
    }
    if (r.cheapest >= 0 && r.cheapest == r.fewest_gpus) report << "cheapest: the same cluster\n";
    else say("cheapest", r.cheapest);
    report << "residuals: " << residuals_line << "\n";
    report.flush();
    if (interrupted().load()) throw Interrupted("partial sweep shown; no output file written");
    if (!a.json.empty()) write_output(a.json, planner::capacity_to_json(s.model, o, r));
}

void add_capacity(CLI::App& app) {
    auto a = std::make_shared<CapArgs>();
    auto* cmd = app.add_subcommand("capacity", "Fewest GPUs / cheapest cluster to train T tokens by a deadline; or the largest trainable model");
    add_spec_options(cmd, a->specs);
    add_db_option(cmd, a->db);
    add_calibration_option(cmd, a->calibration);
    add_residuals_option(cmd, a->residuals);
    cmd->add_option("--tokens,-t", a->tokens, "tokens to train, e.g. 2T or 3e11");
    cmd->add_option("--deadline,-d", a->deadline, "wall-clock limit, e.g. 30d, 720h");
    add_num_option(cmd, "--budget", a->budget, 1e-6, 1e15, "budget in USD");
    cmd->add_option("--gpu", a->gpus, "GPU types to consider (hwdb ids; default H100-SXM5-80GB A100-SXM4-80GB)");
    add_int_option(cmd, "--max-gpus", a->max_gpus, 1, 1 << 20, "largest cluster to consider (default 4096)");
    add_int_option(cmd, "--min-gpus", a->min_gpus, 1, 1 << 20, "smallest cluster to consider (default 8)");
    add_global_batch_option(cmd, a->global_batch, "1024; --max-model: 64");
    add_threads_option(cmd, a->threads, "simulations run in parallel");
    cmd->add_option("--json", a->json, "also write the sweep as JSON to FILE ('-': stdout, the table then goes to stderr)");
    cmd->add_flag("--max-model", a->max_model, "largest model of the --model family that trains on --cluster");
    cmd->add_flag("--quiet,-q", a->quiet, "no progress bar");
    cmd->add_flag("--no-deepep", a->no_deepep, "MoE: keep Megatron's flat all-to-all (no DeepEP dispatch)");
    cmd->add_flag("--no-a2a-overlap", a->no_a2a_overlap, "MoE: do not try hiding the all-to-alls under another micro-batch (Megatron-Core's combined 1F1B)");
    cmd->add_flag("--whole-simulations", a->whole_simulations,
                  "simulate every shortlisted plan whole, never extended from three shorter simulations of its steady state "
                  "(the same figures, slower: a check)");
    cmd->add_flag("--expandable-segments", a->expandable_segments, "the runs use PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
    cmd->add_option("--framework", a->framework, "size the cluster for plans this framework runs, with its preset's knobs (docs/frameworks.md)")
        ->check([](const std::string& v) {
            return sim::canonical_framework(v).empty() ? "must be one of " + sim::framework_choices() : std::string();
        })
        ->transform([](const std::string& v) { return sim::canonical_framework(v); });
    cmd->add_flag("--owned", a->owned, "owned hardware: the cost is the price per GPU-hour (amortised) plus the energy bill");
    cmd->callback([a] { run_capacity(*a); });
}

STRATA_COMMAND(15, add_capacity);

}  // namespace
}  // namespace strata::cli
