// Durations of compute kernels: GEMMs (measured efficiency grid, else a size-aware default curve
// anchored on published H100/A100/B200 measurements), flash attention (measured points, else a
// fraction of peak that falls at short sequences), and memory-bound kernels (bytes / achieved HBM
// bandwidth + launch overhead). Pure functions of (Instr, HardwareView); data movement is in comm.cpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "cost_detail.hpp"
#include "strata/common/error.hpp"

namespace strata::sim {

namespace {

using cost_detail::Rate;
using hwdb::Provenance;

hwdb::Dtype to_hw(DType d) { return static_cast<hwdb::Dtype>(static_cast<int>(d)); }

int bytes_per(DType d) {
    switch (d) {
        case DType::fp8: return 1;
        case DType::fp16:
        case DType::bf16: return 2;
        default: return 4;
    }
}

// ---------------------------------------------------------------------------------------------
// GEMM default curve.
//
// eta(m,n,k) = eta_max * wave(m,n) * depth(k)
//   wave  = useful output / (waves * SMs * tile area): output tiles of 256x128 (the shape of
//           cuBLAS's large Hopper/Ampere kernels; the short side shrinks to 16..64 for skinny
//           GEMMs), ceil(tiles / SMs) waves, padded tiles cost a full tile. Time is then
//           monotone in every dimension. From Hopper on a partial last wave costs its share
//           (persistent kernels, persistent_gemms); too few tiles over a deep k are split-K.
//   depth = k / (k + 128): the main loop's prologue/epilogue cost about one 128-deep k step.
//   eta_max: chosen so the curve passes through the GPU's maximum-achievable-matmul (MAMF) point.
// With H100 (132 SMs, eta_max 0.836) this gives 178/755/802 TFLOP/s for 1024^3/2048^3/4096^3
// against measured 176.6/676.6/788.7 (hwdb-seed "gemm-squares-h100-sxm").
// ---------------------------------------------------------------------------------------------
constexpr double kTileLong = 256, kTileShort = 128, kDepthK0 = 128, kSplitDepth = 4096;

double wave_efficiency(double m, double n, double batch, double sms, double k, bool persistent) {
    const double lo = std::min(m, n), hi = std::max(m, n);
    // Skinny GEMMs get kernels with a short tile side (16..128, the next power of two of the
    // small dimension) instead of padding a 128-row tile.
    const double short_side = std::min(kTileShort, std::exp2(std::ceil(std::log2(std::max(16.0, lo)))));
    const double tiles = std::ceil(hi / kTileLong) * std::ceil(lo / short_side) * batch;
    // Split-K: output tiles too few to fill the SMs, over a deep k, are cut along k into slices
    // of at least kSplitDepth, each slice a work unit of its own (cuBLAS's split-K kernels).
    const double split = std::max(1.0, std::min(std::floor(sms / tiles), std::floor(k / kSplitDepth)));
    const double units = tiles * split;
    const double waves = (persistent ? std::max(1.0, units / sms) : std::ceil(units / sms)) / split;
    return (m * n * batch) / (waves * sms * kTileLong * short_side);
}

// Hopper's and Blackwell's cuBLASLt kernels are persistent, their tile scheduler handing the last
// wave's tiles out (stream-K): measured on an H100 (docs/hwdb-runs/2026-11-22-h100, bf16, m = 1024,
// k = 8192), n = 5504 and 6144, whose last waves are 1/3 and 5/11 full, run at 706 and 722 TFLOP/s
// as n = 8192 (a full second wave) at 713.
bool persistent_gemms(const hwdb::HardwareView& hw) {
    const std::string& cc = hw.gpu.compute_capability;
    return !cc.empty() && std::atoi(cc.c_str()) >= 9;
}

double depth_efficiency(double k) { return k / (k + kDepthK0); }

/// A published maximum-achievable-matmul point: efficiency at a shape.
struct MamfAnchor {
    const char* id_part;  ///< substring of the hwdb GPU id
    bool fp8;
    double efficiency;
    double m, n, k;
};

// stas00/ml-engineering compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS" table
// (copied into hwdb-seed.json "measured"); V100 and RTX 4090 from square-GEMM measurements
// (zzc0721/torch-performance-test-data #140, #78). Order matters: GH200 before H200, GB200 before B200.
constexpr MamfAnchor kMamf[] = {
    {"GB200", false, 0.729, 4096, 9728, 2048},  {"GB200", true, 0.723, 19456, 5120, 1536},
    {"B200", false, 0.776, 1792, 16128, 3072},  {"B200", true, 0.763, 15360, 4096, 3072},
    {"GH200", false, 0.838, 1024, 15360, 4096},
    {"H200", false, 0.803, 2048, 2048, 13312},  {"H200", true, 0.734, 1280, 4096, 12032},
    {"H100", false, 0.803, 2048, 2048, 13312},  {"H100", true, 0.709, 1024, 9216, 14336},
    {"H800", false, 0.803, 2048, 2048, 13312},  {"H800", true, 0.709, 1024, 9216, 14336},
    {"A100", false, 0.869, 1024, 10240, 5120},  {"A800", false, 0.869, 1024, 10240, 5120},
    {"MI300X", false, 0.514, 10240, 15360, 8192},
    {"V100", false, 0.779, 8192, 8192, 8192},   {"RTX-4090", false, 0.97, 8192, 8192, 8192},
};
/// No anchor for this GPU: assume 0.75 at 8192^3 (between MI300X's 0.51 and A100's 0.87).
constexpr MamfAnchor kMamfDefault = {"", false, 0.75, 8192, 8192, 8192};

const MamfAnchor* find_anchor(const std::string& id, bool fp8) {
    for (const auto& a : kMamf)
        if (a.fp8 == fp8 && id.find(a.id_part) != std::string::npos) return &a;
    return nullptr;
}

double sm_count(const hwdb::HardwareView& hw) { return hw.gpu.sm_count > 0 ? hw.gpu.sm_count : 108.0; }

double eta_max(const hwdb::HardwareView& hw, DType d) {
    const bool fp8 = d == DType::fp8;
    const MamfAnchor* a = find_anchor(hw.gpu.id, fp8);
    double scale = 1.0;
    if (!a && fp8) {
        a = find_anchor(hw.gpu.id, false);
        scale = 0.9;  // fp8 anchors run ~0.9 of bf16's (H100 0.709 vs 0.803)
    }
    if (!a) a = &kMamfDefault;
    const double sms = sm_count(hw);
    const double shape = wave_efficiency(a->m, a->n, 1, sms, a->k, persistent_gemms(hw)) * depth_efficiency(a->k);
    return std::clamp(a->efficiency * scale / shape, 0.05, 0.95);
}

/// FLOP/s the datasheet promises for this dtype (fp32 CUDA cores when the dtype is unsupported,
/// e.g. bf16 on V100), divided by the straggler factor.
double peak_flops(const hwdb::HardwareView& hw, DType d) {
    double p = hw.gpu.peak(to_hw(d));
    if (p <= 0) p = hw.gpu.peak(hwdb::Dtype::fp32);
    if (p <= 0) p = 1e13;
    return p;
}

// ---------------------------------------------------------------------------------------------
// Measured grids: inverse-distance weighting in log2 space, with the query clamped into the
// measured range per coordinate. Provenance "measured" when a measured point lies within 0.25 in
// log2 distance (every dimension within ~19%), else "fitted" (interpolated or extrapolated).
// ---------------------------------------------------------------------------------------------
constexpr double kMeasuredRadius = 0.25;

struct GridAnswer {
    double value = 0;
    Provenance provenance = Provenance::fitted;
};

template <int D>
GridAnswer idw(const std::vector<std::array<double, D>>& pts, const std::vector<double>& vals,
               std::array<double, D> q) {
    std::array<double, D> lo, hi;
    lo.fill(std::numeric_limits<double>::infinity());
    hi.fill(-std::numeric_limits<double>::infinity());
    for (const auto& p : pts)
        for (int i = 0; i < D; ++i) lo[i] = std::min(lo[i], p[i]), hi[i] = std::max(hi[i], p[i]);
    double nearest_raw = std::numeric_limits<double>::infinity();
    for (const auto& p : pts) {
        double d2 = 0;
        for (int i = 0; i < D; ++i) d2 += (p[i] - q[i]) * (p[i] - q[i]);
        nearest_raw = std::min(nearest_raw, std::sqrt(d2));
    }
    for (int i = 0; i < D; ++i) q[i] = std::clamp(q[i], lo[i], hi[i]);
    double wsum = 0, vsum = 0;
    for (std::size_t j = 0; j < pts.size(); ++j) {
        double d2 = 0;
        for (int i = 0; i < D; ++i) d2 += (pts[j][i] - q[i]) * (pts[j][i] - q[i]);
        if (d2 < 1e-18) return {vals[j], nearest_raw <= kMeasuredRadius ? Provenance::measured : Provenance::fitted};
        const double w = 1.0 / (d2 * std::sqrt(d2));  // 1/d^3: neighbours dominate
        wsum += w;
        vsum += w * vals[j];
    }
    return {vsum / wsum, nearest_raw <= kMeasuredRadius ? Provenance::measured : Provenance::fitted};
}

double lg(double x) { return std::log2(std::max(1.0, x)); }

constexpr double kCastBytesPerElement = 4;  ///< FP8 cast-transpose: read bf16, write two fp8 copies

Estimate gemm_cost(const Instr& in, const CostContext& ctx) {
    const auto& hw = *ctx.hw;
    const double m = std::max<double>(1, static_cast<double>(in.m));
    const double n = std::max<double>(1, static_cast<double>(in.n));
    const double k = std::max<double>(1, static_cast<double>(in.k));
    const double batch = std::max<double>(1, static_cast<double>(in.batch));
    const double flops = in.flops > 0 ? in.flops : 2.0 * m * n * k * batch;
    // Strata's runtime on a machine that timed only fp32 GEMMs (its cpu backend, which computes a
    // bf16 plan in fp32 and rounds): the fp32 rate.
    DType dt = in.dtype;
    auto has = [&](DType d) {
        return std::any_of(hw.gemm_points.begin(), hw.gemm_points.end(), [&](const hwdb::GemmPoint& p) { return p.dtype == to_hw(d) && p.efficiency > 0; });
    };
    if (ctx.runtime_kernels && dt != DType::fp32 && !has(dt) && has(DType::fp32)) dt = DType::fp32;
    const double peak = peak_flops(hw, dt);

    double eta = 0;
    Provenance prov = Provenance::datasheet;
    std::vector<std::array<double, 3>> pts;
    std::vector<double> vals;
    for (const auto& p : hw.gemm_points)
        if (p.dtype == to_hw(dt) && p.efficiency > 0) {
            pts.push_back({lg(static_cast<double>(p.m)), lg(static_cast<double>(p.n)), lg(static_cast<double>(p.k))});
            vals.push_back(p.efficiency);
        }
    if (!pts.empty()) {
        // A batched GEMM fills the GPU like one GEMM with batch x m rows.
        const GridAnswer a = idw<3>(pts, vals, {lg(m * batch), lg(n), lg(k)});
        eta = a.value;
        prov = a.provenance;
    } else {
        eta = eta_max(hw, dt) * wave_efficiency(m, n, batch, sm_count(hw), k, persistent_gemms(hw)) * depth_efficiency(k);
    }
    eta = std::max(eta, 1e-4);
    const double t_compute = flops / (peak * eta);
    // Roofline: a GEMM cannot run faster than it streams A, B and C once: (mk + kn + mn) elements.
    const double bytes = in.bytes > 0 ? in.bytes : bytes_per(in.dtype) * (m * k + k * n + m * n) * batch;
    const double t_memory = bytes / cost_detail::hbm_rate(hw).Bps;
    // FP8: Transformer Engine's cast-transpose of the input first (read 2 bytes, write the FP8 copy
    // and its transpose, 1 + 1), one more kernel. Memory-bound, so it weighs most on small GEMMs.
    double t_cast = 0;
    if (in.dtype == DType::fp8 && in.count > 0)
        t_cast = in.count * kCastBytesPerElement / cost_detail::hbm_rate(hw).Bps + cost_detail::kLaunchOverheadNs * 1e-9;
    return Estimate{cost_detail::to_ns((std::max(t_compute, t_memory) + t_cast) * ctx.gpu_slowdown), prov};
}

// ---------------------------------------------------------------------------------------------
// Attention. Default: achieved = peak * eta_inf(arch, direction) * seq / (seq + s0) * f(head_dim).
//   s0 = 210 tokens for a non-causal forward, fitted to FA3 on H100, hdim 128 (430, 517, 566, 590,
//   614, 621 TFLOP/s at 0.5k..16k; pytorch/benchmark PR #2391); causal x2 (diagonal blocks are
//   half empty), backward x1.5 (FA2 benchmarks roll off faster in backward).
//   f(head_dim) = min(1, 0.7 + 0.3 * hd / 128) (FA2/FA3 are slower at hdim 64).
// Decoder-only models: every attention Instr is causal (Instr has no causal flag).
// ---------------------------------------------------------------------------------------------
struct AttnAnchor {
    const char* id_part;
    double fwd, bwd;
};
// Hopper: FA3 forward 621/989 at 16k (PR #2391 above), backward ~0.5 (FA3 paper, Shah et al. 2024,
// arXiv:2407.08608: 1.5-1.75x FA2's backward). Ampere: FA2 "50-73% of peak" forward (Dao 2023,
// arXiv:2307.08691), backward lower. Blackwell: FA4 on B200, hdim 128, 8k: 1535 fwd / 1360 bwd of
// 2250 (Dao-AILab/flash-attention PR #2280).
constexpr AttnAnchor kAttn[] = {
    {"H100", 0.64, 0.50}, {"H200", 0.64, 0.50}, {"H800", 0.64, 0.50}, {"GH200", 0.64, 0.50},
    {"A100", 0.66, 0.55}, {"A800", 0.66, 0.55}, {"GB200", 0.68, 0.60}, {"B200", 0.68, 0.60},
};
constexpr AttnAnchor kAttnDefault = {"", 0.50, 0.40};
// FlashAttention-2-class kernels on Hopper (plan.attention_kernel "fa2"): measured on an H100 with
// PyTorch 2.11's FLASH_ATTENTION backend (FA2), hdim 128, causal, 2k..64k tokens: forward 311-342
// TFLOP/s, backward 218-323 (docs/gpu-runs/2026-11-22-h100/attention.json); cuDNN's kernels on the
// same GPU: 541-622 and 385-537, the FA3-class anchors above. Elsewhere FA2 is what the anchors
// already describe (Ampere) or has no separate figure.
constexpr AttnAnchor kAttnFa2[] = {
    {"H100", 0.345, 0.335}, {"H200", 0.345, 0.335}, {"H800", 0.345, 0.335}, {"GH200", 0.345, 0.335},
};
// FlashAttention v1 and its Triton port (plan.attention_kernel "fa1"; flash-attn 1.x, MPT's
// attn_impl "triton", 2022-23): the FA2 family's anchors divided by FA2's published speedup over
// FlashAttention in Triton on an A100, "around 1.3-1.5x ... in the forward pass and around 2x
// faster in the backward pass" (Dao 2023, arXiv:2307.08691 Sec. 4.1; midpoint 1.4). On Ampere
// that gives 0.47 / 0.275 of peak, inside the paper's FlashAttention ranges (forward 30-50 %,
// backward 25-35 %, Sec. 1).
constexpr double kFa1FwdSlowdown = 1.4, kFa1BwdSlowdown = 2.0;
constexpr double kAttnS0 = 210.0;

template <std::size_t N>
const AttnAnchor* find_attn_anchor(const AttnAnchor (&table)[N], const std::string& gpu_id) {
    for (const auto& c : table)
        if (gpu_id.find(c.id_part) != std::string::npos) return &c;
    return nullptr;
}

/// Unfused attention (plan.flash_attention = false, Megatron before flash): the score and value
/// matmuls as batched GEMMs over the full s x kv square (no causal skipping), plus the softmax,
/// mask and dropout passes over the materialised scores: forward writes and reads scores and
/// probabilities (4 x 2 bytes per element), backward reads probabilities and their gradient and
/// writes the score gradient (6 x 2 bytes). Backward runs 4 GEMMs (dP, dV, dQ, dK) to forward's 2.
Estimate unfused_attention_cost(const Instr& in, const CostContext& ctx, double seq, double kv, double hd, double batch) {
    const bool backward = in.op == Op::attention_bwd;
    Instr g;
    g.kind = InstrKind::compute;
    g.op = Op::gemm;
    g.dtype = in.dtype;
    g.m = static_cast<std::int64_t>(seq), g.n = static_cast<std::int64_t>(kv), g.k = static_cast<std::int64_t>(hd);
    g.batch = static_cast<std::int64_t>(batch);
    g.flops = 2.0 * seq * kv * hd * batch;
    CostContext plain = ctx;
    plain.gpu_slowdown = 1.0;
    const Estimate qk = gemm_cost(g, plain);
    const double gemms = (backward ? 4.0 : 2.0) * static_cast<double>(qk.duration_ns) * 1e-9;
    const double elements = seq * kv * batch;
    const double bytes = elements * (backward ? 12.0 : 8.0);
    const double softmax = bytes / cost_detail::hbm_rate(*ctx.hw).Bps + 2 * cost_detail::kLaunchOverheadNs * 1e-9;
    // Calibrated as what it is made of, GEMMs and memory-bound passes: the fused-attention factor
    // describes flash kernels only.
    const Calibration& cal = ctx.calibration;
    const double t = gemms * cal.gemm + softmax * cal.memory_bound;  // FP8 runs attention in BF16
    return Estimate{cost_detail::to_ns(t * ctx.gpu_slowdown), qk.provenance};
}

/// The attention points that price `in`. A framework's fused kernel: its dtype's points of fused
/// kernels, never the runtime's (fp32 excepted: on a GPU only the runtime runs fp32, and a CPU's
/// points are all the runtime's) nor the cuda profile's unfused floor. Strata's runtime
/// (ctx.runtime_kernels): its own points of the dtype, else its own of any dtype (its kernels
/// compute in fp32 whatever they store), else a framework's of the dtype.
std::vector<const hwdb::AttentionPoint*> attention_candidates(const Instr& in, const CostContext& ctx) {
    const bool backward = in.op == Op::attention_bwd;
    auto pick = [&](bool any_dtype, int runtime) {  // runtime: 1 only the runtime's, 0 only others, -1 either
        std::vector<const hwdb::AttentionPoint*> out;
        for (const auto& p : ctx.hw->attention_points)
            if ((any_dtype || p.dtype == to_hw(in.dtype)) && (runtime < 0 || p.runtime == (runtime == 1)) && !p.unfused &&
                p.backward == backward && p.causal && p.flops_per_s > 0)
                out.push_back(&p);
        return out;
    };
    if (!ctx.runtime_kernels) return pick(false, in.dtype == DType::fp32 ? -1 : 0);
    for (const auto& [any_dtype, runtime] : {std::pair<bool, int>{false, 1}, {true, 1}, {false, -1}})
        if (auto v = pick(any_dtype, runtime); !v.empty()) {
            if (!any_dtype) return v;
            // Of any dtype: the runtime's fp32 points (the phase its kernels compute in).
            std::vector<const hwdb::AttentionPoint*> fp32;
            for (const auto* p : v)
                if (p->dtype == hwdb::Dtype::fp32) fp32.push_back(p);
            return fp32.empty() ? v : fp32;
        }
    return {};
}

Estimate attention_cost(const Instr& in_fp, const CostContext& ctx) {
    const auto& hw = *ctx.hw;
    // FP8 training (Transformer Engine's fp8_autocast, NeMo/Megatron recipes) runs the attention
    // core in BF16 unless FP8 attention is switched on explicitly: cost it at the BF16 rate.
    Instr in_bf = in_fp;
    if (in_bf.dtype == DType::fp8) in_bf.dtype = DType::bf16;
    const Instr& in = in_bf;
    const bool backward = in.op == Op::attention_bwd;
    const double seq = std::max<double>(1, static_cast<double>(in.m));
    const double kv = in.n > 0 ? static_cast<double>(in.n) : seq;
    const double hd = in.k > 0 ? static_cast<double>(in.k) : 128.0;
    const double batch = std::max<double>(1, static_cast<double>(in.batch));
    // Causal forward: 2 GEMMs of seq x kv x hd, half of them masked: 2 * seq * kv * hd per head.
    if (in.kernel == Kernel::unfused_attention) return unfused_attention_cost(in, ctx, seq, kv, hd, batch);
    double flops = in.flops;
    if (flops <= 0) flops = (backward ? 2.5 : 1.0) * 2.0 * seq * kv * hd * batch;
    const double peak = peak_flops(hw, in.dtype);

    double achieved = 0;
    Provenance prov = Provenance::datasheet;
    std::vector<std::array<double, 3>> pts;
    std::vector<double> vals;
    bool all_bh = true;  // every point says the sequences x heads it ran (a kernel fills the GPU with them)
    for (const hwdb::AttentionPoint* p : attention_candidates(in, ctx)) {
        pts.push_back({lg(static_cast<double>(p->seq)), lg(static_cast<double>(p->head_dim)), lg(static_cast<double>(p->batch_heads))});
        vals.push_back(p->flops_per_s);
        all_bh = all_bh && p->batch_heads > 0;
    }
    if (!pts.empty()) {
        GridAnswer a;
        if (all_bh) {
            a = idw<3>(pts, vals, {lg(seq), lg(hd), lg(batch)});
        } else {
            std::vector<std::array<double, 2>> flat;
            for (const auto& p : pts) flat.push_back({p[0], p[1]});
            a = idw<2>(flat, vals, {lg(seq), lg(hd)});
        }
        achieved = a.value;
        prov = a.provenance;
    } else {
        const AttentionKernel family = in.kernel == Kernel::flash_fa2   ? AttentionKernel::fa2
                                       : in.kernel == Kernel::flash_fa1 ? AttentionKernel::fa1
                                                                        : AttentionKernel::fa3;
        const AttnAnchor* a = nullptr;
        if (family != AttentionKernel::fa3) a = find_attn_anchor(kAttnFa2, hw.gpu.id);
        if (!a) a = find_attn_anchor(kAttn, hw.gpu.id);
        if (!a) a = &kAttnDefault;
        double eta = backward ? a->bwd : a->fwd;
        if (family == AttentionKernel::fa1) eta /= backward ? kFa1BwdSlowdown : kFa1FwdSlowdown;
        const double s0 = kAttnS0 * 2.0 * (backward ? 1.5 : 1.0);
        const double f_hd = std::min(1.0, 0.7 + 0.3 * hd / 128.0);
        achieved = peak * eta * (seq / (seq + s0)) * f_hd;
    }
    const double t = flops / std::max(achieved, 1.0) * ctx.calibration.attention;  // fused kernels only
    return Estimate{cost_detail::to_ns(t * ctx.gpu_slowdown), prov};
}

/// Memory-bound kernels (norms, elementwise, embedding, loss, router, GPU Adam): bytes / achieved
/// HBM bandwidth, or their FLOPs on the CUDA cores (fp32 peak) if that is slower, + launch overhead.
Estimate memory_bound_cost(const Instr& in, const CostContext& ctx) {
    const auto& hw = *ctx.hw;
    // Where the kernels themselves were measured (a CPU's, bound by arithmetic), their rate.
    const bool adam = in.op == Op::optimizer_gpu;
    std::optional<hwdb::BandwidthFit> own = adam && hw.optimizer_kernel ? hw.optimizer_kernel : hw.memory_bound;
    // On a GPU, fp32 is the precision of Strata's runtime: its own kernels, where they were timed;
    // a Program the runtime runs (validate) in bf16 too (its AdamW updates fp32 masters either way).
    if (in.dtype == DType::fp32 || ctx.runtime_kernels) {
        const std::optional<hwdb::BandwidthFit>& rt = adam                       ? hw.optimizer_kernel_fp32
                                                      : in.dtype == DType::fp32 ? hw.memory_bound_fp32
                                                      : in.dtype == DType::bf16 ? hw.memory_bound_bf16
                                                                                : std::optional<hwdb::BandwidthFit>{};
        if (rt) own = rt;
    }
    const Rate r = own && own->Bps > 0 ? Rate{own->Bps, own->latency_ns, own->provenance} : cost_detail::hbm_rate(hw);
    const double t_mem = in.bytes / r.Bps;
    const double vec_peak = hw.gpu.peak(hwdb::Dtype::fp32) > 0 ? hw.gpu.peak(hwdb::Dtype::fp32) : 1e13;
    const double t_flops = in.flops / vec_peak;
    const double t = std::max(t_mem, t_flops) + cost_detail::kLaunchOverheadNs * 1e-9;
    return Estimate{cost_detail::to_ns(t * ctx.gpu_slowdown), r.provenance};
}

/// A GEMM, or an untyped compute instruction with a shape and FLOPs (hand-built programs).
bool costed_as_gemm(const Instr& in) { return in.op == Op::gemm || (in.op == Op::none && in.flops > 0 && in.m > 0); }

Estimate scaled(Estimate e, double factor) {
    if (factor != 1.0) e.duration_ns = cost_detail::to_ns(static_cast<double>(e.duration_ns) * 1e-9 * factor);
    return e;
}

}  // namespace

int host_launches(const Instr& in) {
    switch (in.kind) {
        case InstrKind::compute: {
            if (in.op == Op::router) return 8;
            if (!costed_as_gemm(in)) return 1;
            return std::max<int>(1, in.batch) * (in.dtype == DType::fp8 ? 2 : 1);
        }
        case InstrKind::collective:
        case InstrKind::send:
        case InstrKind::recv:
        case InstrKind::copy:
        case InstrKind::optimizer: return 1;
        default: return 0;
    }
}

Estimate compute_cost(const Instr& in, const CostContext& ctx) {
    STRATA_ASSERT(ctx.hw != nullptr, "compute_cost needs a HardwareView");
    if (in.kind != InstrKind::compute) return Estimate{};
    // Calibration multipliers (fitted on bench/fidelity's training split) scale each kernel class.
    const Calibration& cal = ctx.calibration;
    if (costed_as_gemm(in)) return scaled(gemm_cost(in, ctx), in.dtype == DType::fp8 ? cal.gemm_fp8 : cal.gemm);
    // Attention calibrates itself: fused kernels by `attention`, unfused ones as their parts.
    if (in.op == Op::attention_fwd || in.op == Op::attention_bwd) return attention_cost(in, ctx);
    // Eager frameworks run a layer's norms and elementwise ops unfused (embedding, loss and the
    // optimizer are single kernels either way).
    // Strata's runtime runs its own kernels whatever a framework would (its fit prices them).
    const bool eager = in.kernel == Kernel::eager && (in.op == Op::norm || in.op == Op::elementwise) && !ctx.runtime_kernels;
    return scaled(memory_bound_cost(in, ctx), cal.memory_bound * (eager ? kEagerElementwiseFactor : 1.0));
}

}  // namespace strata::sim
