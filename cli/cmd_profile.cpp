// `strata profile`: run the profiler (cuda or cpu backend) and write ONE run with its measurements
// and fits to the hardware database in one transaction at the end. The database must exist (only
// `strata hwdb init` creates one). Ctrl-C (SIGINT) sets a flag the benchmark loops check; the
// command then exits 130 and the database is left untouched.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli.hpp"
#include "strata/common/error.hpp"
#include "strata/profiler/profiler.hpp"

namespace strata::cli {

namespace {

// A signal handler can only reach static storage: this flag is the one piece of process state.
std::atomic<bool> g_profile_interrupted{false};
extern "C" void strata_profile_on_sigint(int) { g_profile_interrupted.store(true); }

struct ProfileArgs {
    std::string backend = "cpu", db, json, ssd_dir = "/tmp", only;
    bool quick = false;
    int threads = 0;
};

std::set<std::string> split_kinds(const std::string& s) {
    std::set<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty()) out.insert(item);
    return out;
}

void run_profile_command(const ProfileArgs& a) {
    profiler::Options o;
    o.backend = a.backend;
    o.quick = a.quick;
    o.ssd_dir = a.ssd_dir;
    o.only = split_kinds(a.only);
    o.threads = a.threads;
    o.cancel = &g_profile_interrupted;
    if (::isatty(STDERR_FILENO)) {
        o.progress = [](const std::string& stage, int done, int total) {
            const int width = 30;
            const int filled = total > 0 ? width * done / total : 0;
            std::fprintf(stderr, "\r%-11s [%s%s] %d/%d   ", stage.c_str(), std::string(static_cast<std::size_t>(filled), '#').c_str(),
                         std::string(static_cast<std::size_t>(width - filled), '.').c_str(), done, total);
            std::fflush(stderr);
        };
    }
    const std::vector<Output> outputs{{"--json", a.json}};
    check_outputs(outputs);
    // Fail before an eight-minute profile, not after: the database must exist, be a Strata
    // database and be writable (only `strata hwdb init` creates one).
    const std::string db_path = a.db.empty() ? hwdb::default_db_path() : a.db;
    std::optional<hwdb::Database> db{open_db_for_write(db_path)};
    db.reset();  // the profile takes minutes: hold no connection meanwhile
    // Install the handler first, so an early Ctrl-C is not lost.
    struct sigaction sa {}, old {};
    sa.sa_handler = strata_profile_on_sigint;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old);

    profiler::Profile p;
    try {
        p = profiler::run_profile(o);
    } catch (const profiler::Cancelled&) {
        ::sigaction(SIGINT, &old, nullptr);
        if (o.progress) std::fprintf(stderr, "\n");
        throw Interrupted("nothing was written to " + db_path);
    } catch (...) {
        ::sigaction(SIGINT, &old, nullptr);
        if (o.progress) std::fprintf(stderr, "\n");
        throw;
    }
    ::sigaction(SIGINT, &old, nullptr);
    if (o.progress) std::fprintf(stderr, "\r%60s\r", "");

    db.emplace(open_db_for_write(db_path));
    const std::int64_t run_id = db->write_run(p.run, p.measurements, p.fits);
    p.run.id = run_id;

    std::optional<hwdb::Gpu> gpu;
    for (const auto& m : p.measurements)
        if (m.kind == "gemm") {
            gpu = db->gpu(m.device);
            break;
        }
    if (!a.json.empty()) write_output(a.json, profiler::to_json(p));
    std::ostream& report = report_stream(outputs);
    report << profiler::format_tables(p, gpu ? &*gpu : nullptr);
    report << "\nwrote run " << run_id << " (" << p.measurements.size() << " measurements, " << p.fits.size() << " fits) to "
           << db_path << "\n";
}

void register_profile(CLI::App& app) {
    auto args = std::make_shared<ProfileArgs>();
    CLI::App* cmd = app.add_subcommand("profile", "measure this machine (GEMM, attention, copies, collectives, SSD, Adam) into hwdb");
    cmd->add_option("--backend", args->backend, "cuda (GPU: cuBLASLt, NCCL) or cpu (Eigen, threads)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd->add_flag("--quick", args->quick, "small sweeps (CI; about a minute on two cores)");
    add_db_option(cmd, args->db);
    cmd->add_option("--json", args->json, "also write the run (measurements and fits) as JSON to FILE ('-': stdout, the tables then go to stderr)");
    cmd->add_option("--ssd-dir", args->ssd_dir, "directory for the SSD benchmark's scratch file (default /tmp)");
    cmd->add_option("--only", args->only, "comma-separated kinds: gemm,attention,membw,memcpy,collective,overlap,ssd,cpu_adam,host_mem");
    add_threads_option(cmd, args->threads, "CPU threads for Adam and the CPU collectives");
    cmd->callback([args] { run_profile_command(*args); });
}

}  // namespace

STRATA_COMMAND(60, register_profile);

}  // namespace strata::cli
