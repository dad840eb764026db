// Running fidelity entries through simulate(), the sources' FLOP conventions applied to a step
// time, and the error statistics (MAPE, median, worst, OOM agreement) over the rows. No I/O.
#include <algorithm>
#include <array>
#include <cmath>
#include <set>

#include "strata/common/error.hpp"
#include "strata/sim/fidelity.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"
#include "strata/sim/simulate.hpp"

namespace strata::sim {

namespace {

// SimOptions gains a `calibration` member when the lead wires Calibration into simulate(); until
// then the multipliers cannot reach the cost models and the suite runs uncalibrated.
template <class O>
concept HasCalibration = requires(O o) { o.calibration = Calibration{}; };

template <class O>
void set_calibration(O& o, const Calibration& c) {
    if constexpr (HasCalibration<O>) o.calibration = c;
    else (void)c, (void)o;
}

// The engine's peak in the published counter's terms, on the published stage. nvidia-smi sees the
// whole process (the allocator replay's reserved segments and the framework reserve); PyTorch's
// counters exclude the CUDA context and NCCL's buffers (the framework reserve), and
// max_allocated also the cached but unused parts of the segments.
double comparable_peak_bytes(const FidelityEntry& e, const SimOutput& out) {
    const int want = e.peak_stage == "first" ? 0 : e.peak_stage == "last" ? e.plan.pp - 1 : -1;
    const bool allocated = e.peak_counter == "max_allocated";
    double peak = 0;
    for (const RankStats& rs : out.result.ranks)
        if (want < 0 || rs.pp_stage == want) peak = std::max(peak, allocated ? rs.gpu_peak_allocated_bytes : rs.peak_bytes[0]);
    if (e.peak_counter != "device") peak -= kFrameworkReserveBytes;
    return peak;
}

}  // namespace

double convention_flops_per_step(const FidelityEntry& e) {
    const ModelSpec& m = e.model;
    const double batch = e.plan.global_batch;
    // Megatron counts the logits over its padded vocabulary (SC21's V = 51,200 for GPT-3's 50,257;
    // Megatron-Core's num_floating_point_operations reads args.padded_vocab_size): the plan's
    // padding (plan.vocab_divisible_by x tp), which its framework preset states.
    ModelSpec padded = m;
    padded.vocab = padded_vocab(m, e.plan);
    switch (e.convention) {
        case FlopsConvention::model: return model_flops_per_step(m, e.plan);
        case FlopsConvention::megatron_model: return megatron_flops_per_step(padded, batch, false);
        case FlopsConvention::megatron_recompute: return megatron_flops_per_step(padded, batch, true);
        case FlopsConvention::megatron_core: return megatron_core_flops_per_step(padded, batch);
        case FlopsConvention::mpt: {
            // llm-foundry README, "MFU and HFU": per sequence 6 N s + 12 L d s^2, N = all parameters.
            const double n = static_cast<double>(param_counts(m).total);
            const double s = static_cast<double>(m.seq_len);
            const double d = static_cast<double>(m.hidden);
            return batch * (6.0 * n * s + 12.0 * m.layers * d * s * s);
        }
        case FlopsConvention::none: return 0;
    }
    return 0;
}

double quantity_from_step_time(const FidelityEntry& e, Quantity q, double step_time_s, double peak_flops_per_gpu) {
    if (step_time_s <= 0) return 0;
    const double samples = e.plan.global_batch;
    const double tokens = samples * static_cast<double>(e.model.seq_len);
    const double gpus = e.gpus();
    switch (q) {
        case Quantity::step_time_s: return step_time_s;
        case Quantity::tokens_per_s: return tokens / step_time_s;
        case Quantity::tokens_per_s_per_gpu: return tokens / step_time_s / gpus;
        case Quantity::samples_per_s: return samples / step_time_s;
        case Quantity::tflops_per_gpu: return convention_flops_per_step(e) / step_time_s / gpus / 1e12;
        case Quantity::mfu:
            return peak_flops_per_gpu > 0 ? convention_flops_per_step(e) / step_time_s / gpus / peak_flops_per_gpu : 0;
    }
    return 0;
}

bool calibration_supported() { return HasCalibration<SimOptions>; }

std::string arch_family(const std::string& gpu_arch) {
    const std::size_t end = gpu_arch.find_first_of(" (");
    return gpu_arch.substr(0, end);
}

std::string calibration_family(const hwdb::HardwareView& hw) {
    const std::string arch = arch_family(hw.gpu.arch);
    const bool measured = std::any_of(hw.gemm_points.begin(), hw.gemm_points.end(), [](const hwdb::GemmPoint& p) { return !p.plan; });
    return measured && !arch.empty() ? arch + "+measured" : arch;
}

FidelityRow run_fidelity_entry(const FidelityEntry& e, const ViewResolver& views, const Calibration& cal) {
    FidelityRow r;
    r.id = e.id;
    r.publisher = e.publisher;
    r.framework = e.framework;
    r.split = e.split;
    r.gpu = e.cluster.gpu;
    r.gpus = e.gpus();
    r.quantity = e.quantity;
    r.convention = e.convention;
    r.published = e.published;
    r.outcome = e.outcome;
    r.skipped = e.skipped;
    r.publisher_regression = e.publisher_regression;
    if (!r.skipped.empty()) return r;

    hwdb::HardwareView hw;
    try {
        hw = views(e.cluster);
    } catch (const InputError& err) {
        r.skipped = err.path() + " " + err.rule();
        return r;
    }
    SimOptions o;
    o.critical_path = true;
    set_calibration(o, cal);
    const SimOutput out = simulate(e.model, e.cluster, e.plan, hw, o);

    r.step_time_s = out.step_time_s;
    r.memory_only = e.memory_only;
    if (!r.memory_only) {
        r.predicted = quantity_from_step_time(e, e.quantity, out.step_time_s, out.peak_flops_per_gpu);
        r.error = r.published > 0 ? r.predicted / r.published - 1.0 : 0.0;
    }
    r.engine_oom = out.result.oom;
    r.peak_hbm_bytes = out.result.peak_bytes_max[0];
    r.hbm_capacity_bytes = out.capacities.gpu_bytes;
    if (auto pk = e.measured.find("peak_hbm_bytes"); pk != e.measured.end() && pk->second > 0) {
        r.published_peak_hbm_bytes = pk->second;
        r.peak_counter = e.peak_counter + ", " + (e.peak_stage == "max" ? "any" : e.peak_stage) + " stage";
        r.peak_hbm_bytes = comparable_peak_bytes(e, out);
        r.peak_error = r.peak_hbm_bytes / pk->second - 1.0;
    }
    r.fits = out.memory.fits();
    r.oom_agrees = (e.outcome == "oom") == r.engine_oom;
    r.bubble_fraction = out.result.bubble_fraction;
    r.exposed_comm_s = static_cast<double>(out.result.exposed_comm_ns) * 1e-9;
    r.mfu = out.job.mfu;
    r.critical_path = out.result.critical_path.summary;
    r.arch = arch_family(hw.gpu.arch);
    r.applied = cal;
    // Critical-path seconds per calibration class, for the fit's surrogate (fit.cpp).
    double classified = 0;
    for (const CriticalSegment& seg : out.result.critical_path.segments) {
        int c = -1;
        switch (seg.stream) {
            case Stream::compute:
                if (seg.label == "gemm") c = e.plan.precision == Precision::fp8 ? 1 : 0;
                // Unfused attention is costed as GEMMs + softmax passes (compute.cpp); its time is
                // mostly the passes, so the surrogate books it as memory-bound.
                else if (seg.label == "attention_fwd" || seg.label == "attention_bwd") c = e.plan.flash_attention ? 2 : 3;
                else c = 3;
                break;
            case Stream::tp_comm:
            case Stream::cp_comm:
            case Stream::ep_comm:
            case Stream::dp_comm: c = 4; break;
            case Stream::pp_p2p:
            case Stream::pp_recv:
            case Stream::pp_p2p_b:
            case Stream::pp_recv_b: c = 5; break;
            default: break;  // copies: not calibrated
        }
        if (c < 0) continue;
        const double t = static_cast<double>(seg.duration_ns) * 1e-9;
        r.class_s[static_cast<std::size_t>(c)] += t;
        classified += t;
    }
    r.other_s = std::max(0.0, r.step_time_s - classified);

    // Does the convention, applied to the published step time, give the published TFLOP/s? A check
    // of the convention's implementation (and of the source's own consistency), not of Strata.
    auto tf = e.measured.find("tflops_per_gpu");
    const double t_pub = published_step_time_s(e);
    if (tf != e.measured.end() && t_pub > 0 && e.convention != FlopsConvention::none)
        r.convention_check = quantity_from_step_time(e, Quantity::tflops_per_gpu, t_pub, 0) / tf->second - 1.0;
    return r;
}

double mean_abs(const std::vector<double>& v) {
    if (v.empty()) return 0;
    double s = 0;
    for (double x : v) s += std::abs(x);
    return s / static_cast<double>(v.size());
}

double median_abs(const std::vector<double>& v) {
    if (v.empty()) return 0;
    std::vector<double> a;
    a.reserve(v.size());
    for (double x : v) a.push_back(std::abs(x));
    std::sort(a.begin(), a.end());
    const std::size_t n = a.size();
    return n % 2 == 1 ? a[n / 2] : 0.5 * (a[n / 2 - 1] + a[n / 2]);
}

namespace {

template <class Keep>
FidelityStats stats_of(const std::vector<FidelityRow>& rows, const Keep& keep) {
    FidelityStats s;
    std::vector<double> errors, peak_errors, with_not_scored;
    for (const FidelityRow& r : rows) {
        if (!keep(r)) continue;
        ++s.entries;
        if (!r.simulated()) {
            ++s.skipped;
            continue;
        }
        ++s.memory_compared;
        if (r.oom_agrees) ++s.oom_agree;
        if ((r.outcome == "ran") == r.fits) ++s.fits_agree;
        if (r.published_peak_hbm_bytes > 0) {
            peak_errors.push_back(r.peak_error);
            s.peak_worst_ape = std::max(s.peak_worst_ape, std::abs(r.peak_error));
        }
        if (!r.compared()) continue;
        with_not_scored.push_back(r.error);
        if (!r.scored()) {
            ++s.not_scored;
            continue;
        }
        ++s.scored;
        errors.push_back(r.error);
        const double ape = std::abs(r.error);
        if (ape > s.worst_ape || s.worst_id.empty()) {
            s.worst_ape = ape;
            s.worst_id = r.id;
        }
        if (ape > 0.15) ++s.over_15pct;
    }
    s.peak_compared = static_cast<int>(peak_errors.size());
    s.peak_mape = mean_abs(peak_errors);
    s.mape = mean_abs(errors);
    s.median_ape = median_abs(errors);
    s.mape_with_not_scored = mean_abs(with_not_scored);
    return s;
}

}  // namespace

FidelityStats fidelity_stats(const std::vector<FidelityRow>& rows, const std::string& split) {
    return stats_of(rows, [&](const FidelityRow& r) { return split == "all" || r.split == split; });
}

std::vector<std::pair<std::string, FidelityStats>> fidelity_stats_by(const std::vector<FidelityRow>& rows,
                                                                     const std::string& split, FidelityGroup by) {
    auto key = [by](const FidelityRow& r) {
        if (by == FidelityGroup::framework) return r.framework.empty() ? std::string("(none)") : r.framework;
        return by == FidelityGroup::publisher ? r.publisher : r.gpu;
    };
    std::set<std::string> keys;
    for (const FidelityRow& r : rows)
        if (split == "all" || r.split == split) keys.insert(key(r));
    std::vector<std::pair<std::string, FidelityStats>> out;
    for (const std::string& k : keys)
        out.emplace_back(k, stats_of(rows, [&](const FidelityRow& r) { return (split == "all" || r.split == split) && key(r) == k; }));
    return out;
}

}  // namespace strata::sim
