// Session: lowers the plan with its dataflow, refuses what cannot run or cannot fit before it
// allocates anything, then runs each step with one thread per rank and gathers the figures.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "device.hpp"
#include "rank.hpp"
#include "strata/common/error.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/params.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::runtime {

using namespace sim;

const char* to_string(Backend b) { return b == Backend::cpu ? "cpu" : b == Backend::cuda ? "cuda" : "emulated"; }

namespace {
// Megatron's DynamicGradScaler.update: an overflow resets the growth count and spends one unit of
// hysteresis, halving the scale (down to the minimum) once it is spent; `window` clean steps in a
// row double it and restore the hysteresis. The skipped steps leave AdamW's step count.
void update_loss_scale(World& w, const RunOptions& o, bool found_inf) {
    if (found_inf) {
        ++w.skipped;
        w.growth_tracker = 0;
        if (--w.hysteresis_tracker <= 0) w.loss_scale = std::max(w.loss_scale * 0.5, o.min_loss_scale);
        return;
    }
    if (++w.growth_tracker == o.loss_scale_window) {
        w.growth_tracker = 0;
        w.hysteresis_tracker = o.hysteresis;
        w.loss_scale *= 2.0;
    }
}
}  // namespace

std::string unsupported(const ModelSpec& m, const PlanSpec& p, Backend backend, bool ranks_share_gpu) {
    const bool cuda = backend != Backend::cpu;  // the emulated device keeps the cuda backend's rules
    if (std::string why = dataflow_unsupported(m, p); !why.empty()) return why;
    // bf16 and fp16: the cpu backend holds 2-byte values as floats rounded to their format
    // (computing in fp32, as a GPU's kernels do), with fp32 master weights for the update, and
    // fp16 with Megatron's dynamic loss scaling. The cuda backend stores them in 2 bytes
    // (device.hpp, Storage).
    // fp8: the GEMMs inside Transformer Engine's fp8_autocast read E4M3 / E5M2 operands with
    // per-tensor current scaling (runtime/src/fp8.cpp), everything else as bf16; on the cpu backend.
    if (p.precision == Precision::fp8 && cuda)
        return "plan.precision = fp8 with --backend cuda: FP8 GEMMs are executed on --backend cpu (per-tensor current scaling, "
               "emulated in fp32); the cuda backend's FP8 GEMMs (cuBLASLt with scale factors) are not built yet";
    if (p.precision == Precision::fp16 && p.lock_free_update)
        return "plan.precision = fp16 with plan.lock_free_update: a delayed host update of a step skipped for an overflow is not "
               "executed";
    if (p.precision != Precision::fp32) {
        for (const auto& [field, dtype] : {std::pair<const char*, Precision>{"plan.exp_avg_dtype", p.exp_avg_dtype},
                                           std::pair<const char*, Precision>{"plan.exp_avg_sq_dtype", p.exp_avg_sq_dtype}}) {
            if (dtype != Precision::fp32 && dtype != Precision::bf16)
                return std::string(field) + " = " + to_string(dtype) + ": Adam moments are executed in fp32 or bf16";
            if (dtype != Precision::fp32 && p.offload.optimizer.ssd > 0)
                return std::string(field) + " = bf16 with plan.offload.optimizer.ssd: the SSD file's moments are fp32 (narrowed ones on SSD "
                       "are not executed yet)";
        }
    }
    if (cuda && p.fsdp_fp32_shards())
        return "plan.fp32_param_shards: FSDP's fp32 shards, cast to bf16 at each gather, are executed on --backend cpu; the cuda "
               "backend keeps bf16 weights beside an fp32 master (set fp32_param_shards false to run that layout)";
    (void)ranks_share_gpu;  // several ranks: a GPU each (NCCL between them), or all on GPU 0 for a check
    return {};
}

struct Session::Impl {
    ModelSpec model;
    ClusterSpec cluster;
    PlanSpec plan;
    RunOptions options;
    Program program;
    std::unique_ptr<World> world;
    std::vector<std::unique_ptr<RankState>> ranks;
    std::vector<RankTrace> traces;
    std::array<double, kTierCount> peaks{};
    int steps_done = 0;
    std::string broken;  ///< why the session cannot step any more
    std::string tmp_ssd_dir;
    std::vector<std::unique_ptr<Device>> devices;  ///< a rank's (the cuda backend's GPU, or emulated)
    std::vector<std::unique_ptr<DeviceComm>> comms;  ///< between the ranks' devices (NCCL on the cuda backend)

    ~Impl() {
        ranks.clear();
        if (world)
            for (auto& c : world->host_caches) c->clear();  // pinned host buffers go back to their devices
        comms.clear();    // before their devices
        devices.clear();  // after the ranks: their buffers go back to them
        if (!tmp_ssd_dir.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(tmp_ssd_dir, ec);
        }
    }

    RankState& at(int rank) const {  // by global rank (a memory walk may hold only some)
        if (rank >= 0 && rank < static_cast<int>(ranks.size()) && ranks[static_cast<std::size_t>(rank)]->rank() == rank)
            return *ranks[static_cast<std::size_t>(rank)];
        for (const auto& r : ranks)
            if (r->rank() == rank) return *r;
        throw InputError("runtime", "rank", "no rank " + std::to_string(rank) + " in this session");
    }
};

namespace {

std::string mib(double b) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
    return buf;
}

// The analytical memory model (memory.hpp) against the capacities, before any allocation.
void check_fits(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const RunOptions& o) {
    Capacities caps;
    caps.hbm_bytes = o.capacity_bytes[0] > 0 ? o.capacity_bytes[0] : 1e300;
    caps.cpu_bytes_per_node = o.capacity_bytes[1] > 0 ? o.capacity_bytes[1] : 1e300;
    caps.ssd_bytes_per_node = o.capacity_bytes[2] > 0 ? o.capacity_bytes[2] : 1e300;
    caps.gpus_per_node = c.gpus_per_node;
    const MemoryReport r = memory_estimate(m, p, caps);
    if (!r.fits_hbm)
        throw OutOfMemory("the plan does not fit, refused before allocating: tier gpu needs " + mib(r.hbm_bytes) + " per rank (stage " +
                          std::to_string(r.worst_hbm_stage) + ") of " + mib(caps.hbm_bytes));
    if (!r.fits_cpu) throw OutOfMemory("the plan does not fit, refused before allocating: tier cpu needs " + mib(r.cpu_bytes) + " per node of " + mib(caps.cpu_bytes_per_node));
    if (!r.fits_ssd) throw OutOfMemory("the plan does not fit, refused before allocating: tier ssd needs " + mib(r.ssd_bytes) + " per node of " + mib(caps.ssd_bytes_per_node));
}

// A memory walk's representative ranks (RunOptions::walk_all_ranks): every pipeline stage, TP
// and CP rank, and the first data-parallel replicas, enough to fill a node, since the cpu and ssd
// tiers are per node. Empty: all ranks.
std::vector<int> walk_ranks(const ClusterSpec& c, const PlanSpec& p) {
    const int per_replica = p.tp * p.cp, gpn = std::max(1, c.gpus_per_node);
    const int replicas = std::min(p.dp, std::max(1, (gpn + per_replica - 1) / per_replica));
    std::vector<int> out;
    if (replicas == p.dp) return out;
    for (int s = 0; s < p.pp; ++s)
        for (int d = 0; d < replicas; ++d)
            for (int r = 0; r < per_replica; ++r) out.push_back(r + per_replica * (d + p.dp * s));
    return out;
}

}  // namespace

Session::Session(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const RunOptions& o) : impl_(std::make_unique<Impl>()) {
    Impl& s = *impl_;
    s.model = m;
    s.cluster = c;
    s.plan = p;
    s.options = o;
    // A plan built in code has not met the file reader's rules: check them here too (a plan the
    // lowering cannot schedule would otherwise fail inside it).
    validate_plan(m, c, p, p.name.empty() ? "plan" : p.name);
    if (const std::string why = unsupported(m, p, o.memory_only ? Backend::cpu : o.backend, o.ranks_share_gpu); !why.empty())  // a walk needs no GPU
        throw InputError(p.name.empty() ? "plan" : p.name, "", why + " (strata run executes what the dataflow lowering covers)");
    if (o.check_fit) check_fits(m, c, p, o);
    LowerOptions lo;
    lo.full_mode = true;
    lo.dataflow = true;
    lo.steps = 1;
    if (o.memory_only && !o.walk_all_ranks) lo.ranks = walk_ranks(c, p);
    s.program = lower(s.model, s.cluster, s.plan, lo);
    s.world = std::make_unique<World>(s.model, s.plan, s.options, s.program);
    World& w = *s.world;
    if (p.precision == Precision::fp16) {  // a resumed run's checkpoint overrides these
        w.loss_scale = o.initial_loss_scale;
        w.hysteresis_tracker = o.hysteresis;
    }
    if (o.backend != Backend::cpu && !o.memory_only)
        for (std::size_t r = 0; r < s.program.ranks.size(); ++r) {
            // A GPU each (rank r on GPU r of this machine), or every rank on GPU 0 (ranks_share_gpu).
            s.devices.push_back(o.backend == Backend::cuda ? open_cuda_device(o.ranks_share_gpu ? 0 : static_cast<int>(r)) : make_emulated_device());
            w.devices.push_back(s.devices.back().get());
        }
    for (std::size_t r = 0; r < std::max<std::size_t>(1, w.devices.size()); ++r)
        w.host_caches.push_back(std::make_unique<HostCache>(w.devices.empty() ? nullptr : w.devices[r]));
    const int nodes = std::max(1, s.cluster.nodes);
    for (int n = 0; n < nodes; ++n) {
        w.node_cpu.push_back(std::make_unique<Pool>());
        w.node_ssd.push_back(std::make_unique<Pool>());
        w.node_cpu.back()->capacity = o.capacity_bytes[1];
        w.node_ssd.back()->capacity = o.capacity_bytes[2];
    }
    w.ssd_dir = o.ssd_dir;
    if (w.ssd_dir.empty()) {
        std::string tmpl = (std::filesystem::temp_directory_path() / "strata-ssd-XXXXXX").string();
        if (!::mkdtemp(tmpl.data())) throw RuntimeError("cannot create a directory for the ssd tier in " + std::filesystem::temp_directory_path().string());
        w.ssd_dir = s.tmp_ssd_dir = tmpl;
    } else {
        std::filesystem::create_directories(w.ssd_dir);
    }
    for (std::size_t r = 0; r < s.program.ranks.size(); ++r) {
        s.ranks.push_back(std::make_unique<RankState>(w, static_cast<int>(r)));
        w.transport.add_waker(&s.ranks.back()->waker());
    }
    // Ranks on devices of their own move values through the devices' communicators (comms.cpp).
    if (s.devices.size() > 1 && !o.ranks_share_gpu) connect_comms(w, s.ranks, s.comms);
    for (auto& r : s.ranks) r->init(o.resume_dir);
    s.steps_done = s.ranks.empty() ? 0 : s.ranks[0]->adam_step();
    for (auto& r : s.ranks)
        if (r->adam_step() != s.steps_done) throw InputError(o.resume_dir, "checkpoint", "its ranks were saved at different steps");
}

Session::~Session() = default;

StepReport Session::step() {
    Impl& s = *impl_;
    if (!s.broken.empty()) throw RuntimeError("the run cannot continue: " + s.broken);
    World& w = *s.world;
    w.step = s.steps_done;
    for (auto& p : w.node_cpu) p->reset_peak();
    for (auto& p : w.node_ssd) p->reset_peak();
    std::vector<std::exception_ptr> errors(s.ranks.size());
    w.step_start = std::chrono::steady_clock::now();
    {
        std::vector<std::thread> threads;
        threads.reserve(s.ranks.size());
        for (std::size_t r = 0; r < s.ranks.size(); ++r)
            threads.emplace_back([&, r] {
                try {
                    s.ranks[r]->run_step();
                } catch (const std::exception& e) {
                    errors[r] = std::current_exception();
                    w.transport.abort(e.what());
                    // NCCL: the peers' operations, and the synchronisations queued behind them,
                    // would wait for this rank forever.
                    for (auto& c : s.comms) c->abort();
                }
            });
        for (auto& t : threads) t.join();
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - w.step_start).count();
    // The first rank's own failure (not another rank's "stopped" echo of it) is the one to report.
    for (std::size_t r = 0; r < errors.size(); ++r) {
        if (!errors[r]) continue;
        try {
            std::rethrow_exception(errors[r]);
        } catch (const std::exception& e) {
            if (std::string(e.what()).rfind("stopped: ", 0) == 0) continue;
            s.broken = e.what();
            throw;
        }
    }
    for (auto& e : errors)
        if (e) {
            s.broken = w.transport.why();
            std::rethrow_exception(e);
        }
    ++s.steps_done;
    StepReport rep;
    rep.step = s.steps_done;
    rep.loss_scale = w.loss_scale;
    if (s.plan.precision == Precision::fp16 && !s.options.memory_only) {
        for (auto& r : s.ranks) rep.skipped = rep.skipped || r->skipped();
        update_loss_scale(w, s.options, rep.skipped);
    }
    double loss = 0;
    for (auto& r : s.ranks) loss += r->loss_sum();
    rep.loss = loss / s.program.tokens_per_step;
    for (int k = 1; k <= s.model.mtp_depth; ++k) {  // each module's mean over the rows its shift leaves
        double sum = 0;
        for (auto& r : s.ranks) sum += r->mtp_loss_sum(k);
        rep.mtp_loss += sum / (s.program.tokens_per_step * mtp_kept_fraction(s.model, k)) / s.model.mtp_depth;
    }
    rep.step_s = secs;
    rep.tokens_per_s = s.program.tokens_per_step / secs;
    if (s.options.peak_flops_per_rank > 0)
        rep.mfu = s.program.model_flops_per_step / (secs * s.program.gpus * s.options.peak_flops_per_rank);
    for (auto& r : s.ranks) rep.peak_bytes[0] = std::max(rep.peak_bytes[0], r->gpu_pool().peak.load());
    if (s.options.memory_only) {  // each rank's own host peak, summed per node (rank.hpp, cpu_own_)
        std::vector<std::array<double, kTierCount>> node(w.node_cpu.size());
        for (auto& r : s.ranks)
            for (int t = 1; t < kTierCount; ++t)
                node[static_cast<std::size_t>(r->node())][static_cast<std::size_t>(t)] += r->own_host_pool(static_cast<Tier>(t)).peak.load();
        for (const auto& n : node)
            for (std::size_t t = 1; t < kTierCount; ++t) rep.peak_bytes[t] = std::max(rep.peak_bytes[t], n[t]);
    } else {
        for (auto& p : w.node_cpu) rep.peak_bytes[1] = std::max(rep.peak_bytes[1], p->peak.load());
        for (auto& p : w.node_ssd) rep.peak_bytes[2] = std::max(rep.peak_bytes[2], p->peak.load());
    }
    for (int t = 0; t < kTierCount; ++t) s.peaks[static_cast<std::size_t>(t)] = std::max(s.peaks[static_cast<std::size_t>(t)], rep.peak_bytes[static_cast<std::size_t>(t)]);
    if (s.options.record_spans) {
        s.traces.clear();
        for (auto& r : s.ranks) s.traces.push_back(r->trace());
    }
    return rep;
}

int Session::steps_done() const { return impl_->steps_done; }

void Session::save(const std::string& dir) const {
    for (const auto& r : impl_->ranks) r->save(dir);
}

const Program& Session::program() const { return impl_->program; }
const std::vector<RankTrace>& Session::traces() const { return impl_->traces; }
std::array<double, kTierCount> Session::peak_bytes() const { return impl_->peaks; }

std::vector<PeakDetail> Session::peak_details() const {
    std::vector<PeakDetail> out;
    if (impl_->options.peak_detail <= 0) return out;
    for (const auto& r : impl_->ranks)
        if (r && r->peak_detail().bytes > 0) out.push_back(r->peak_detail());
    std::stable_sort(out.begin(), out.end(), [](const PeakDetail& a, const PeakDetail& b) { return a.bytes > b.bytes; });
    return out;
}
double Session::device_reserved_peak_bytes() const {  // the worst rank's
    double most = 0;
    for (const auto& d : impl_->devices) most = std::max(most, d->reserved_peak_bytes());
    return most;
}

float Session::param(int rank, const std::string& name, int layer, std::int64_t index) const {
    RankState& r = impl_->at(rank);
    if (index < 0 || index >= r.entry(name, layer).elements()) throw InputError("runtime", name, "index out of range");
    return r.read_param(name, layer, false, index);
}

void Session::set_param(int rank, const std::string& name, int layer, std::int64_t index, float value) {
    RankState& r = impl_->at(rank);
    if (index < 0 || index >= r.entry(name, layer).elements()) throw InputError("runtime", name, "index out of range");
    r.write_param(name, layer, index, value);
}

float Session::grad(int rank, const std::string& name, int layer, std::int64_t index) const {
    RankState& r = impl_->at(rank);
    if (index < 0 || index >= r.entry(name, layer).elements()) throw InputError("runtime", name, "index out of range");
    return r.read_param(name, layer, true, index);
}

std::int64_t Session::param_elements(int rank, const std::string& name, int layer) const {
    return impl_->at(rank).entry(name, layer).elements();
}

}  // namespace strata::runtime
