// strata memory: the analytical per-rank memory of a plan (sim/memory.hpp) as a per-stage table,
// the worst stage per tier, the capacities from hwdb and a FITS / DOES NOT FIT verdict (exit 0
// either way: not fitting is an answer, not an error). --json writes the report atomically.
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli.hpp"
#include "strata/common/text.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"
#include "strata/sim/simulate.hpp"

namespace strata::cli {
namespace {

struct MemoryArgs {
    SpecArgs specs;
    std::string db;
    std::string json;
};

// Capacities of one GPU and one node. The cluster's own figures win over hwdb's node defaults;
// SSD capacity is drives x kDefaultSsdDriveBytes because hwdb records no drive capacity.
sim::Capacities capacities_for(const hwdb::HardwareView& v, const sim::ClusterSpec& c) {
    sim::Capacities caps;
    caps.hbm_bytes = v.gpu.hbm_bytes;
    const sim::TierCapacities t = sim::tier_capacities(c, v);
    caps.cpu_bytes_per_node = t.cpu_bytes;
    caps.ssd_bytes_per_node = t.ssd_bytes;
    caps.gpus_per_node = c.gpus_per_node;
    return caps;
}

// Below this share of HBM left, fragmentation of the caching allocator can decide the verdict:
// the allocator replay held up to 11 % more than the tensors on the fidelity suite's runs.
constexpr double kTightHeadroom = 0.10;

std::string gb(double bytes) { return fmt_fixed(bytes / 1e9, 2); }

void print_report(const sim::Scenario& s, const sim::MemoryReport& r, std::ostream& out) {
    const sim::PlanSpec& p = *s.plan;
    const sim::ParamCounts pc = sim::param_counts(s.model);
    out << "memory: " << s.model.name << " on " << s.cluster.name << " (" << p.gpus() << " GPUs: tp " << p.tp
              << ", pp " << p.pp << ", dp " << p.dp << ", cp " << p.cp << ", ep " << p.ep << ")\n";
    out << "  parameters " << fmt_fixed(static_cast<double>(pc.total) / 1e9, 3) << " B";
    if (pc.active != pc.total) out << " (" << fmt_fixed(static_cast<double>(pc.active) / 1e9, 3) << " B active)";
    out << "; schedule " << sim::to_string(p.schedule) << ", " << p.micro_batches() << " micro-batches, ZeRO "
              << p.zero_stage << ", recompute " << sim::to_string(p.recompute) << "\n\n";
    out << "  per rank, GB (decimal)\n";
    out << format("  %5s %6s %8s %9s %9s %9s %9s %9s %9s | %9s %9s %9s\n", "stage", "layers", "in-fl", "weights",
                     "grads", "optim", "activ", "worksp", "buffers", "hbm", "cpu", "ssd");
    for (const sim::StageMemory& st : r.stages)
        out << format("  %5d %6d %8.2f %9s %9s %9s %9s %9s %9s | %9s %9s %9s\n", st.stage, st.layers,
                         st.in_flight_microbatches, gb(st.weights_bytes).c_str(), gb(st.grads_bytes).c_str(),
                         gb(st.optimizer_bytes).c_str(), gb(st.activations_bytes).c_str(),
                         gb(st.workspace_bytes).c_str(), gb(st.buffers_bytes).c_str(), gb(st.tier_bytes[0]).c_str(),
                         gb(st.tier_bytes[1]).c_str(), gb(st.tier_bytes[2]).c_str());
    const sim::StageMemory& w = r.stages[static_cast<std::size_t>(r.worst_hbm_stage)];
    // The kinds sum every tier (an offloaded optimizer counts here, not in HBM): the columns' totals say where.
    out << "\n  worst stage for HBM: " << w.stage << "; by kind, all tiers: weights " << human_bytes(w.weights_bytes) << ", grads "
              << human_bytes(w.grads_bytes) << ", optimizer " << human_bytes(w.optimizer_bytes) << ", activations "
              << human_bytes(w.activations_bytes) << ", workspace " << human_bytes(w.workspace_bytes) << ", buffers "
              << human_bytes(w.buffers_bytes) << " (incl. " << human_bytes(sim::kFrameworkReserveBytes)
              << " framework reserve)\n\n";
    auto verdict = [](bool ok) { return ok ? "fits" : "DOES NOT FIT"; };
    out << format("  %-16s %12s %12s  %s\n", "tier", "needed", "capacity", "");
    out << format("  %-16s %12s %12s  %s\n", "HBM per GPU", human_bytes(r.hbm_bytes).c_str(),
                     human_bytes(r.capacities.hbm_bytes).c_str(), verdict(r.fits_hbm));
    out << format("  %-16s %12s %12s  %s\n", "host DRAM/node", human_bytes(r.cpu_bytes).c_str(),
                     human_bytes(r.capacities.cpu_bytes_per_node).c_str(), verdict(r.fits_cpu));
    out << format("  %-16s %12s %12s  %s\n", "SSD per node", human_bytes(r.ssd_bytes).c_str(),
                     human_bytes(r.capacities.ssd_bytes_per_node).c_str(), verdict(r.fits_ssd));
    out << "\n" << (r.fits() ? "FITS" : "DOES NOT FIT") << "\n";
    // These are the tensors' bytes; PyTorch's caching allocator holds more (split segments), which
    // decides plans this close to the limit. The engine replays it.
    const double headroom = r.capacities.hbm_bytes - r.hbm_bytes;
    if (r.fits_hbm && headroom < kTightHeadroom * r.capacities.hbm_bytes)
        out << "note: " << human_bytes(headroom) << " of HBM left (" << format("%.1f", 100.0 * headroom / r.capacities.hbm_bytes)
                  << " %); PyTorch's caching allocator held 0-11 % more than the tensors in the fidelity runs "
                     "(docs/fidelity.md): `strata simulate` replays it\n";
}

void run_memory(const MemoryArgs& a) {
    const std::vector<Output> outputs{{"--json", a.json}};
    check_outputs(outputs);
    const sim::Scenario s = resolve_specs(a.specs, true);
    const hwdb::Database db = open_db(a.db);
    const hwdb::HardwareView v = view_for(db, s.cluster, a.specs);
    const sim::MemoryReport r = sim::memory_estimate(s.model, *s.plan, capacities_for(v, s.cluster));
    // The JSON is complete before anything is written, so a failure leaves no partial file.
    const std::string text = sim::to_json_text(r);
    // With --json - the JSON alone goes to stdout, so it can be piped; the report to stderr.
    if (!a.json.empty()) write_output(a.json, text);
    print_report(s, r, report_stream(outputs));
}

void add_memory(CLI::App& app) {
    auto a = std::make_shared<MemoryArgs>();
    auto* cmd = app.add_subcommand("memory", "Analytical per-GPU memory of a plan, per pipeline stage and tier, and whether it fits");
    add_spec_options(cmd, a->specs);
    add_db_option(cmd, a->db);
    cmd->add_option("--json", a->json, "also write the report as JSON to FILE ('-': stdout, the table then goes to stderr)");
    cmd->callback([a] { run_memory(*a); });
}

STRATA_COMMAND(20, add_memory);

}  // namespace
}  // namespace strata::cli
