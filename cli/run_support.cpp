#include "run_support.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "strata/common/error.hpp"
#include "strata/sim/simulate.hpp"

namespace strata::cli {

std::atomic<bool> g_run_interrupted{false};

namespace {
extern "C" void strata_run_on_sigint(int) { g_run_interrupted.store(true); }
struct sigaction g_old_sigint {};
}  // namespace

void install_sigint() {
    struct sigaction sa {};
    sa.sa_handler = strata_run_on_sigint;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &g_old_sigint);
}

void restore_sigint() { ::sigaction(SIGINT, &g_old_sigint, nullptr); }

void add_runtime_options(CLI::App* cmd, RuntimeArgs& a, int default_steps) {
    a.steps = default_steps;
    cmd->add_option("--backend", a.backend,
                    "cpu (ranks as threads), cuda (rank r on GPU r of this machine, NCCL between them), or emulated (the cuda "
                    "backend's executor path over the cpu kernels and NCCL's semantics, no GPU: whether a plan runs there, "
                    "before a GPU is lent)")
        ->check(CLI::IsMember({"cpu", "cuda", "emulated"}));
    cmd->add_option("--steps", a.steps, "optimizer steps to run")->check(CLI::Range(1, 1000000));
    cmd->add_option("--data", a.data,
                    "token data: a byte-level text file, 'text' for the bundled public-domain text, or 'synthetic' (default)");
    cmd->add_option("--lr", a.lr, "AdamW learning rate (constant after --warmup steps)")->check(CLI::Range(0.0, 10.0));
    cmd->add_option("--warmup", a.warmup, "linear learning-rate warm-up steps")->check(CLI::Range(0, 1000000));
    cmd->add_option("--seed", a.seed, "parameter initialisation seed");
    cmd->add_option("--initial-loss-scale", a.initial_loss_scale,
                    "fp16 plans: the dynamic loss scale to start from (Megatron's default 2^32; window 1000, hysteresis 2)")
        ->check(CLI::Range(1.0, 1e12));
    cmd->add_option("--mtp-loss-scale", a.mtp_loss_scale,
                    "models with MTP modules: their losses join the objective times this over their number (Megatron's "
                    "--mtp-loss-scaling-factor, 0.1)")
        ->check(CLI::Range(0.0, 100.0));
    cmd->add_option("--save", a.save, "write a checkpoint to DIR after the last step (or on Ctrl-C)");
    cmd->add_option("--resume", a.resume, "continue from the checkpoint in DIR");
    cmd->add_option("--ssd-dir", a.ssd_dir, "where the ssd tier's files go (default: a temporary directory)");
}

runtime::RunOptions runtime_options(const RuntimeArgs& a, const sim::Scenario& s, const hwdb::HardwareView& hw) {
    runtime::RunOptions o;
    o.backend = a.backend == "cuda" ? runtime::Backend::cuda : a.backend == "emulated" ? runtime::Backend::emulated : runtime::Backend::cpu;
    o.steps = a.steps;
    o.lr = a.lr;
    o.warmup_steps = a.warmup;
    o.seed = a.seed;
    o.initial_loss_scale = a.initial_loss_scale;
    o.mtp_loss_scale = a.mtp_loss_scale;
    o.resume_dir = a.resume;
    o.ssd_dir = a.ssd_dir;
    if (a.data == "text") o.data.text_path = find_bundled("data", "public-domain.txt");
    else if (!a.data.empty() && a.data != "synthetic") o.data.text_path = a.data;
    o.peak_flops_per_rank = sim::peak_flops_for(hw, s.plan->precision);
    if (o.backend != runtime::Backend::cuda) {  // the emulated device's memory is this machine's too
        // A cpu rank's "device memory" is its share of this machine's RAM.
        const double ram = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
        o.capacity_bytes[0] = ram / std::max(1, s.cluster.gpus_per_node);
        o.capacity_bytes[1] = ram;
    } else {
        o.capacity_bytes[0] = hw.gpu.hbm_bytes;
    }
    std::error_code ec;
    const auto space = std::filesystem::space(a.ssd_dir.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(a.ssd_dir), ec);
    if (!ec) o.capacity_bytes[2] = static_cast<double>(space.available);
    return o;
}

sim::SimResult measured_result(const sim::Program& prog, const std::vector<runtime::RankTrace>& traces) {
    sim::SimResult r;
    std::map<std::int64_t, std::int64_t> last_post;  // match_id -> latest start among its peers
    for (std::size_t k = 0; k < traces.size(); ++k)
        for (const runtime::Span& sp : traces[k].spans) {
            const sim::Instr& in = prog.ranks[k].instrs[static_cast<std::size_t>(sp.instr)];
            const bool matched = (in.kind == sim::InstrKind::collective || in.kind == sim::InstrKind::send || in.kind == sim::InstrKind::recv) && in.match_id != 0;
            if (matched) last_post[in.match_id] = std::max(last_post[in.match_id], sp.start_ns);
        }
    std::int64_t end = 0;
    for (std::size_t k = 0; k < traces.size(); ++k) {
        for (const runtime::Span& sp : traces[k].spans) {
            const sim::Instr& in = prog.ranks[k].instrs[static_cast<std::size_t>(sp.instr)];
            sim::TraceSpan t;
            t.rank = static_cast<int>(k);
            t.instr = sp.instr;
            t.start_ns = sp.start_ns;
            t.end_ns = sp.end_ns;
            if (auto it = last_post.find(in.match_id); in.match_id != 0 && it != last_post.end() &&
                                                        (in.kind == sim::InstrKind::collective || in.kind == sim::InstrKind::send || in.kind == sim::InstrKind::recv))
                t.start_ns = std::min(std::max(t.start_ns, it->second), t.end_ns);
            r.spans.push_back(t);
            end = std::max(end, sp.end_ns);
        }
        for (const runtime::MemorySample& m : traces[k].memory)
            r.memory_samples.push_back({static_cast<int>(k), m.tier, prog.ranks[k].node, m.time_ns, m.bytes});
    }
    std::sort(r.memory_samples.begin(), r.memory_samples.end(),
              [](const sim::MemorySample& a, const sim::MemorySample& b) { return a.time_ns != b.time_ns ? a.time_ns < b.time_ns : a.rank < b.rank; });
    r.step_time_ns = end;
    return r;
}

}  // namespace strata::cli
