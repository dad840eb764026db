// The step's update, on the tiers the plan keeps the optimizer on (plan.offload.optimizer): the
// GPU's fused Adam, the host's CPU Adam and ZeRO-Infinity's SSD sub-groups, the gradients' way
// down and the parameters' way home, fp16's overflow check, and the distributed optimizer's
// end-of-step gather.
#include <algorithm>
#include <cmath>

#include "lower_impl.hpp"

namespace strata::sim::lower_detail {

namespace {
constexpr double kMasterBytesPerParam = 4;         // fp32 master: with m, v what ZeRO-Infinity swaps per param
}  // namespace

// The updated parameters of a host-side update go where the plan keeps them: the share resident
// on the GPU is copied up (ZeRO-Offload); an offloaded share stays in host memory, its home, or is
// written back to the SSD (ZeRO-Infinity's parameter swap), and the next fetch brings it.
// (The SSD optimizer's sub-groups send their weights home as each one finishes: host_update;
// `sent` says so.)
template <class DataflowH2D>
int RankLowering::params_home(double params, int after_ev, DataflowH2D&& dataflow_h2d, bool sent) {
    const TierSplit& pf = p_.offload.params;
    int done = after_ev;
    if (sent) return done;
    // Split between the GPU and the host, the host homes every unit: a resident one comes up at
    // its first use of the next step (fetch_params).
    if (pf.gpu > 0 && !split_params()) {
        done = copy(Stream::h2d, CopyKind::h2d, d_.act_bytes * params * pf.gpu, n_.param_h2d, after_ev);
        if (df_) dataflow_h2d();
    }
    if (pf.ssd > 0) done = copy(Stream::ssd, CopyKind::ssd_write, d_.act_bytes * params * pf.ssd, n_.param_ssd_write, after_ev);
    return done;
}

// The host's share of the update (plan.offload.optimizer cpu and ssd), once the gradients are in
// host memory (after_ev): CPU Adam over the cpu share; over the ssd share ZeRO-Infinity's
// pipelined sub-groups (read state, CPU Adam, write state back, the next sub-group's read
// overlapping the current update). Sets the events after which each share's parameters are
// updated in host memory (-1 for a share of none); for the ssd share, after which the last
// sub-group's weights are home: in the file (DeepSpeed's stage3.py swaps a sub-group's 2-byte
// parameters out after its step, beside its optimizer state) and on the GPU.
void RankLowering::host_update(int after_ev, const std::vector<std::pair<double, double>>& owned, int& cpu_done, int& ssd_done) {
    cpu_done = ssd_done = -1;
    const Phase was = phase_;
    enter_optimizer_phase();
    const double shard = optimizer_shard();
    const TierSplit& of = p_.offload.optimizer;
    using R = TensorRole;
    auto part = [&](double lo, double hi, R role, Tier tier) { return ranges_part(owned, lo, hi, role, tier); };
    if (of.cpu > 0) {
        const double lo = of.gpu, hi = of.gpu + of.cpu;
        wait(Stream::cpu, after_ev);
        Instr& in = push(InstrKind::optimizer, Stream::cpu, n_.opt_cpu);
        in.count = shard * of.cpu;
        // Lock-free with the weights homed on the host: the update writes the fp32 master
        // (DataTensor::version 1), which optimizer() publishes to the weights at the step's end.
        if (df_) {
            std::vector<int> ins = part(lo, hi, R::param_grad, Tier::cpu);
            if (found_inf_ >= 0) ins.push_back(found_inf_);
            io_lists(ins, lf_master(part(lo, hi, R::param, Tier::cpu)));
        }
        cpu_done = record(Stream::cpu);
    }
    if (of.ssd > 0) {
        const double params = shard * of.ssd;
        const double sub = std::max(1.0, o_.ssd_sub_group_params);
        const int groups = static_cast<int>(std::clamp(std::ceil(params / sub), 1.0, 4096.0));
        const double per = params / groups;
        // fp32 weights are their own master: only the moments go to the SSD (memory.hpp's list).
        const double master = p_.has_master() ? kMasterBytesPerParam : 0.0;
        const double state_bytes = (master + p_.adam_moment_bytes()) * per;
        const double base = of.gpu + of.cpu, width = of.ssd / groups;  // sub-group g: [base + g w, base + (g+1) w)
        auto group_part = [&](int g, R role, Tier tier) { return part(base + g * width, base + (g + 1) * width, role, tier); };
        std::vector<int> read_ev(static_cast<std::size_t>(groups), -1);
        auto read = [&](int g, int after) {
            read_ev[static_cast<std::size_t>(g)] = copy(Stream::ssd, CopyKind::ssd_read, state_bytes, n_.state_read, after);
            if (df_) io_lists(group_part(g, R::optimizer_state, Tier::ssd), group_part(g, R::optimizer_state, Tier::cpu));
        };
        read(0, after_ev);
        // The lock-free update (emitted at the next step's start) sends its weights home after
        // that step's passes have read the old ones: optimizer(), with the rest.
        const bool per_group_home = !p_.lock_free_update;
        int last_write = -1, last_up = -1;
        for (int g = 0; g < groups; ++g) {
            if (g + 1 < groups) read(g + 1, -1);
            wait(Stream::cpu, read_ev[static_cast<std::size_t>(g)]);
            Instr& in = push(InstrKind::optimizer, Stream::cpu, n_.opt_ssd);
            in.count = per;
            if (df_) {
                std::vector<int> ins = group_part(g, R::param_grad, Tier::cpu), outs = group_part(g, R::optimizer_state, Tier::cpu);
                const std::vector<int> st = outs, hp = group_part(g, R::param, Tier::cpu);
                ins.insert(ins.end(), st.begin(), st.end());
                if (found_inf_ >= 0) ins.push_back(found_inf_);
                outs.insert(outs.end(), hp.begin(), hp.end());
                io_lists(ins, outs);
            }
            const int updated = record(Stream::cpu);
            ssd_done = updated;
            copy(Stream::ssd, CopyKind::ssd_write, state_bytes, n_.state_write, updated);
            if (df_) io_lists(group_part(g, R::optimizer_state, Tier::cpu), group_part(g, R::optimizer_state, Tier::ssd));
            if (!per_group_home) continue;
            if (p_.offload.params.ssd > 0) {
                last_write = copy(Stream::ssd, CopyKind::ssd_write, d_.act_bytes * per * p_.offload.params.ssd, n_.param_ssd_write, updated);
                if (df_) io_lists(group_part(g, R::param, Tier::cpu), group_part(g, R::param, Tier::ssd));
            }
            // Weights kept on the GPU go up as each sub-group finishes (stage3.py copies the
            // sub-group's fp32 partition into the GPU's 16-bit one after its step).
            if (p_.offload.params.gpu > 0 && !split_params()) {
                last_up = copy(Stream::h2d, CopyKind::h2d, d_.act_bytes * per * p_.offload.params.gpu, n_.param_h2d, updated);
                if (df_) io_lists(group_part(g, R::param, Tier::cpu), group_part(g, R::param, Tier::gpu));
            }
        }
        if (last_write >= 0 && last_up >= 0) {
            wait(Stream::ssd, last_up);
            ssd_done = record(Stream::ssd);
        } else if (last_write >= 0 || last_up >= 0) {
            ssd_done = std::max(last_write, last_up);
        }
    }
    phase_ = was;
}

void RankLowering::enter_optimizer_phase() {
    phase_ = Phase::optimizer;
    layer_ = -1;
    mb_ = -1;
    chunk_ = 0;
}

double RankLowering::optimizer_shard() const {
    const StageParams sp = stage_params(m_, p_, stage_);
    return p_.zero_stage >= 1 ? sp.dense / group_size(Group::dp) + sp.expert / group_size(Group::edp) : sp.total();
}

// Optimizer on its tiers (plan.offload.optimizer), each fraction its own way at once: the GPU
// part as a fused Adam kernel; the host parts as D2H of grads, the host update (host_update) and
// the parameters' way home (params_home). Lock-free, the host update of this step's gradients is
// emitted at the next step's start; what goes home here is the update emitted at this step's start.
void RankLowering::optimizer(int s) {
    flush_host_grads();
    enter_optimizer_phase();
    wait(Stream::compute, record(Stream::dp_comm));  // gradients reduced
    // Streamed to the host (PlanSpec::streams_grads_to_host), the gradients are there once the
    // backward's last copy down is.
    const bool streamed = p_.streams_grads_to_host();
    if (streamed) wait(Stream::compute, record(Stream::d2h));
    const Tier grad_tier = streamed ? Tier::cpu : Tier::gpu;
    const double shard = optimizer_shard();
    const TierSplit& of = p_.offload.optimizer;
    // Dataflow: the element ranges this rank updates, cut into the tiers' parts in buffer order.
    std::vector<std::pair<double, double>> owned;
    if (df_) owned = owned_ranges();
    using R = TensorRole;
    auto part = [&](double lo, double hi, R role, Tier tier) { return ranges_part(owned, lo, hi, role, tier); };
    found_inf_ = -1;
    if (p_.precision == Precision::fp16) {
        // Megatron's loss scaling (MixedPrecisionOptimizer._unscale_main_grads_and_check_for_nan):
        // the rank's gradients are unscaled in place and checked for inf/NaN (one pass, read and
        // write), and the flag is summed over every group whose ranks hold other gradients (TP,
        // PP, DP x CP); every update reads it and a step that found one is skipped.
        compute(Op::elementwise, n_.grad_unscale, 0, 2 * p_.grad_bytes() * shard);
        if (df_) {
            found_inf_ = act(n_.t_found_inf, -1, 1, 1, TensorRole::stats);
            std::vector<int> grads = part(0, 1, R::param_grad, grad_tier), outs = grads;
            outs.push_back(found_inf_);
            io_lists(grads, outs);
        }
        for (Group g : {Group::tp, Group::pp, Group::dp}) {
            if (group_size(g) <= 1) continue;
            wait(Stream::compute, collective(Stream::dp_comm, CollKind::all_reduce, g, 4, n_.found_inf, kAfterCompute));
            if (df_) io({found_inf_}, {found_inf_});
        }
    }
    auto with_found = [&](std::vector<int> ins) {
        if (found_inf_ >= 0) ins.push_back(found_inf_);
        return ins;
    };
    if (of.gpu > 0) {
        Instr& in = compute(Op::optimizer_gpu, n_.opt_gpu, 0, p_.adam_gpu_bytes_per_param() * shard * of.gpu);
        in.count = shard * of.gpu;
        if (df_) io_lists(with_found(part(0, of.gpu, R::param_grad, Tier::gpu)), part(0, of.gpu, R::param, Tier::gpu));
    }
    const int grads_on_gpu = record(Stream::compute);
    int done = -1;
    if (of.cpu + of.ssd > 0) {
        const bool lock_free = p_.lock_free_update;
        // Lock-free: the D2H overwrites the host gradients this step's host update reads.
        if (lock_free) wait(Stream::d2h, of.ssd > 0 ? lf_ssd_done_ : lf_cpu_done_);
        int d2h = grads_on_gpu;  // streamed: down already, and the compute stream waited for them
        if (!streamed) {
            d2h = copy(Stream::d2h, CopyKind::d2h, p_.grad_bytes() * shard * (of.cpu + of.ssd), n_.grad_d2h, grads_on_gpu);
            if (df_) io_lists(part(of.gpu, 1, R::param_grad, Tier::gpu), part(of.gpu, 1, R::param_grad, Tier::cpu));
        }
        int cpu_done = lf_cpu_done_, ssd_done = lf_ssd_done_;
        if (lock_free) {
            host_grads_ev_ = d2h;  // the next step's host update
            // The update goes up once this step's forward and backward have read the old values.
            wait(Stream::h2d, grads_on_gpu);
            wait(Stream::ssd, grads_on_gpu);
        } else {
            host_update(d2h, owned, cpu_done, ssd_done);
        }
        lf_cpu_done_ = lf_ssd_done_ = -1;
        if (lock_free && of.cpu > 0 && !p_.offload.params.all_gpu()) {
            // The master goes to the homed weights once this step's fetches have read them: a host
            // copy of the master (4 B) into the weights (2 B) a parameter, which the next step waits for.
            const double lo = of.gpu, hi = of.gpu + of.cpu;
            wait(Stream::cpu, grads_on_gpu);
            Instr& in = push(InstrKind::optimizer, Stream::cpu, n_.opt_publish);
            in.bytes = shard * of.cpu * (kMasterBytesPerParam + d_.act_bytes);
            if (df_) io_lists(lf_master(part(lo, hi, R::param, Tier::cpu)), part(lo, hi, R::param, Tier::cpu));
            cpu_done = record(Stream::cpu);
        }
        int cpu_home = -1, ssd_home = -1;
        if (of.cpu > 0) {
            const double lo = of.gpu, hi = of.gpu + of.cpu;
            cpu_home = params_home(shard * of.cpu, cpu_done, [&] { io_lists(part(lo, hi, R::param, Tier::cpu), part(lo, hi, R::param, Tier::gpu)); }, false);
        }
        if (of.ssd > 0) {
            const double base = of.gpu + of.cpu;
            ssd_home = params_home(shard * of.ssd, ssd_done, [&] { io_lists(part(base, 1, R::param, Tier::cpu), part(base, 1, R::param, Tier::gpu)); },
                                   !lock_free);
        }
        // The SSD share's sub-groups went home before the host share's copy was issued: the step's
        // weights are home once both are.
        if (cpu_home >= 0 && ssd_home >= 0 && !lock_free) {
            wait(Stream::h2d, cpu_home);
            wait(Stream::h2d, ssd_home);
            done = record(Stream::h2d);
        } else {
            done = of.ssd > 0 ? ssd_home : cpu_home;
        }
    }
    optimizer_done_ev_ = done;
    // Distributed optimizer (ZeRO 1/2) without overlap_param_gather: gather the updated parameter
    // shards at the end of the step, bucket by bucket over the ranges they were reduced over; the
    // next step's forward waits for it. (With the overlap, the gather is emitted at the start of the
    // step: gather_params_overlapped.)
    if ((p_.zero_stage == 1 || p_.zero_stage == 2) && !p_.overlap_param_gather) {
        int after = record(Stream::compute);
        wait(Stream::dp_comm, done);
        int ev = -1;
        for (const Bucket& b : buckets_) {
            const Group g = b.expert ? Group::edp : Group::dp;
            if (group_size(g) <= 1) continue;
            ev = collective(Stream::dp_comm, CollKind::all_gather, g, b.count * d_.act_bytes, b.expert ? n_.edp_params : n_.dp_params, after);
            after = -1;
            if (df_) {
                const int r = range(R::param, b.off, b.count, Tier::gpu, b.expert);
                io({r}, {r});
            }
        }
        param_gather_ev_ = ev;
    }
    (void)s;
}

}  // namespace strata::sim::lower_detail
