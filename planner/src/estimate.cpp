// Fast estimate: memoised one-layer engine runs for the per-layer terms, closed forms for the
// pipeline, data-parallel, optimizer and offload terms (docs/planner.md derives each one).
#include "strata/planner/estimate.hpp"

#include "estimate_keys.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "strata/sim/cost.hpp"
#include "strata/sim/engine.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/plan_knobs.hpp"
#include "strata/sim/simulate.hpp"
#include "strata/lowering/tensors.hpp"

namespace strata::planner {

using namespace strata::sim;

namespace {

double alone_s(const Demand& d) { return static_cast<double>(d.alone_ns()) * 1e-9; }

/// A transfer's time when `share` GPUs of the node load the node-level resources at once.
double shared_s(Demand d, const ClusterSpec& c) {
    const double node = std::max(1, c.gpus_per_node);
    const double sw = std::max(1, c.gpus_per_pcie_switch);
    for (LinkClass k : {LinkClass::host_mem, LinkClass::ssd_read, LinkClass::ssd_write, LinkClass::cpu})
        d.busy_s[static_cast<int>(k)] *= node;
    for (LinkClass k : {LinkClass::pcie_h2d, LinkClass::pcie_d2h}) d.busy_s[static_cast<int>(k)] *= sw;
    return alone_s(d);
}

Instr coll(CollKind k, Group g, int size, double bytes) {
    Instr in;
    in.kind = InstrKind::collective;
    in.stream = Stream::dp_comm;
    in.coll = k;
    in.group = g;
    in.group_size = size;
    in.bytes = bytes;
    return in;
}

Instr copy_instr(CopyKind k, double bytes) {
    Instr in;
    in.kind = InstrKind::copy;
    in.copy = k;
    in.stream = k == CopyKind::h2d ? Stream::h2d : k == CopyKind::d2h ? Stream::d2h : Stream::ssd;
    in.bytes = bytes;
    return in;
}

}  // namespace

Capacities capacities_of(const ClusterSpec& c, const hwdb::HardwareView& hw) {
    const TierCapacities t = tier_capacities(c, hw);  // the simulator's own rule, so both agree
    Capacities caps;
    caps.hbm_bytes = t.gpu_bytes;
    caps.cpu_bytes_per_node = t.cpu_bytes;
    caps.ssd_bytes_per_node = t.ssd_bytes;
    caps.gpus_per_node = c.gpus_per_node;
    return caps;
}

Estimator::Estimator(const ModelSpec& m, const ClusterSpec& c, const hwdb::HardwareView& hw, double memory_margin,
                     const sim::Calibration& calibration)
    : m_(m), c_(c), hw_(hw), caps_(capacities_of(c, hw)), margin_(memory_margin), cal_(calibration),
      flops_per_token_(model_flops_per_token(m)) {}

Estimator::~Estimator() = default;

LayerTimes Estimator::layer_times(const PlanSpec& p, bool dense_first) {
    const PlanSpec p1 = probe_plan(p);
    std::vector<std::int64_t>& key = key_scratch_;
    probe_key(p1, dense_first, key);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;

    ModelSpec m1 = m_;
    m1.layers = m_.is_moe() ? std::max(1, m_.moe->moe_every) : 1;
    m1.mtp_depth = 0;  // its layer would blur the layer window; costed below as a layer and a head
    if (m1.is_moe()) m1.moe->first_k_dense = 0;  // the period of the MoE part
    // Windowed and whole-context layers alternate (model.window_attn_skip_freq): a period of both.
    if (m_.window_of(0) > 0 && m_.window_attn_skip_freq > 1) m1.layers = std::lcm(m1.layers, m_.window_attn_skip_freq);
    if (dense_first) {
        m1.moe.reset();
        m1.layers = 1;
    }
    LowerOptions lo;
    lo.emit_memory = false;
    Program prog = lower(m1, c_, p1, lo);
    CostContext ctx;
    ctx.hw = &hw_;
    ctx.cluster = &c_;
    ctx.plan = &p1;
    ctx.program = &prog;
    ctx.calibration = cal_;
    RealCostModel costs(ctx);
    EngineOptions eo;
    eo.record_trace = true;
    eo.critical_path = false;
    eo.overlap_slowdown = cal_.overlap;
    eo.host_launch_ns = cal_.host_launch_us * 1e3;
    SimResult r = simulate_program(prog, costs, nullptr, eo);

    // Windows on the compute stream: a layer's forward from its first to its last kernel (TP/CP/EP
    // waits inside count), its backward likewise; the head (embedding, logits, loss) by durations.
    const RankProgram& rp = prog.ranks.at(0);
    std::int64_t f0 = INT64_MAX, f1 = 0, b0 = INT64_MAX, b1 = 0, m0 = INT64_MAX, m1_end = 0;
    double head_f = 0, head_b = 0, rec = 0, zero3_f = 0, zero3_b = 0;
    const bool pair = p.moe_a2a_overlap;  // micro-batch 1's forward and 0's backward are the merged step
    for (const TraceSpan& sp : r.spans) {
        const Instr& in = rp.instrs.at(static_cast<std::size_t>(sp.instr));
        const bool merged = pair && in.microbatch == (in.phase == Phase::forward ? 1 : 0);
        // ZeRO-3's per-layer parameter gathers (and backward's gradient reduce-scatters) run on the
        // DP stream, prefetched a layer ahead: in the one-layer program they start before the
        // layer's first kernel and fall outside its window, but in a deep stack a layer cannot
        // go faster than its own gathers. Their stream time bounds the layer from below.
        if (in.kind == InstrKind::collective && in.layer >= 0 && (in.group == Group::dp || in.group == Group::edp)) {
            const double dur = static_cast<double>(sp.end_ns - sp.start_ns) * 1e-9;
            (in.phase == Phase::forward ? zero3_f : zero3_b) += dur;
            continue;
        }
        if (in.stream != Stream::compute || in.kind != InstrKind::compute) continue;
        const double dur = static_cast<double>(sp.end_ns - sp.start_ns) * 1e-9;
        if (in.layer >= 0 && merged && in.phase != Phase::other) {
            m0 = std::min(m0, sp.start_ns);
            m1_end = std::max(m1_end, sp.end_ns);
            if (in.phase == Phase::recompute) rec += dur;
        } else if (in.layer >= 0) {
            if (in.phase == Phase::forward) {
                f0 = std::min(f0, sp.start_ns);
                f1 = std::max(f1, sp.end_ns);
            } else if (in.phase == Phase::backward || in.phase == Phase::recompute) {
                b0 = std::min(b0, sp.start_ns);
                b1 = std::max(b1, sp.end_ns);
                if (in.phase == Phase::recompute) rec += dur;
            }
        } else if (in.phase == Phase::forward) {
            head_f += dur;
        } else if (in.phase == Phase::backward) {
            head_b += dur;
        }
    }
    LayerTimes t;
    const double n = m1.layers;
    // In a deep stack the next layer's gather (and in backward this layer's reduce-scatter) runs
    // beside the layer's kernels, which then go 1 + overlap times slower for as long as it lasts
    // (the engine's interference); the probe's gathers ran before its window.
    auto with_zero3 = [&](double window, double zero3) {
        if (p.zero_stage != 3) return window;
        if (p.zero3_param_sync) return window + zero3;  // DeepSpeed 2021: between the layers' kernels, not beside them
        return std::max(window + cal_.overlap * std::min(zero3, window), zero3);
    };
    double win_f = f1 > f0 ? static_cast<double>(f1 - f0) * 1e-9 : 0.0, win_b = b1 > b0 ? static_cast<double>(b1 - b0) * 1e-9 : 0.0;
    const double per_mb = pair ? 2.0 : 1.0;  // the head's kernels, recomputes and gathers were summed over both
    // The merged step's window against the unmerged forward and backward: each of the pair's
    // all-to-alls ran under the other pass's kernels. estimate() gives that saving to the passes
    // the schedule merges (not the first forwards and last backwards).
    if (pair && m1_end > m0 && win_f + win_b > 0) t.merged_scale = std::min(1.0, static_cast<double>(m1_end - m0) * 1e-9 / (win_f + win_b));
    t.fwd_s = with_zero3(win_f, zero3_f / per_mb) / n;
    t.bwd_s = with_zero3(win_b, zero3_b / per_mb) / n;
    t.recompute_s = rec / per_mb / n;
    t.head_fwd_s = head_f / per_mb;
    t.head_bwd_s = head_b / per_mb;
    cache_.emplace(key, t);
    return t;
}

// The share of a stage's forward and backward passes that run merged under combined 1F1B (the
// lowering's pairs, merged_pair), from the rank's schedule.
double Estimator::merged_share(const PlanSpec& p, int stage) {
    if (!p.moe_a2a_overlap || p.ep < 2) return 0;
    Key& key = share_key_scratch_;  // no allocation on a hit: estimate() asks per stage and plan
    key.assign({static_cast<std::int64_t>(p.schedule), p.pp, stage, p.micro_batches(), p.vpp, p.vpp_group()});
    if (auto it = merged_share_.find(key); it != merged_share_.end()) return it->second;
    const std::vector<PipeSlot> slots = pipeline_schedule(p.schedule, p.pp, stage, std::max(1, p.micro_batches()), std::max(1, p.vpp),
                                                          p.vpp_group(), true);
    int merged = 0, passes = 0;  // forwards and backwards (a zero-bubble weight slot is no pass of its own)
    for (std::size_t k = 0; k < slots.size(); ++k) {
        passes += slots[k].weights ? 0 : 1;
        if (k + 1 < slots.size() && merged_pair(p, slots[k], slots[k + 1])) merged += 2, ++passes, ++k;
    }
    const double share = passes == 0 ? 0.0 : static_cast<double>(merged) / static_cast<double>(passes);
    merged_share_.emplace(key, share);
    return share;
}

FastEstimate Estimator::estimate(const PlanSpec& p) {
    FastEstimate e;
    MemoryReport mem = memory_estimate(m_, p, caps_, &mem_cache_);
    e.hbm_bytes = mem.hbm_bytes;
    e.fits = mem.fits();
    e.near_fit = !e.fits && mem.hbm_bytes <= caps_.hbm_bytes * margin_ && mem.cpu_bytes <= caps_.cpu_bytes_per_node * margin_ &&
                 mem.ssd_bytes <= caps_.ssd_bytes_per_node * margin_;

    const LayerTimes lt = layer_times(p);
    const std::vector<int> layers = stage_layers(m_, p);
    const int pp = p.pp, m = p.micro_batches(), vpp = std::max(1, p.vpp);
    // Leading dense layers (DeepSeek's first_k_dense) cost a dense layer's time, not the MoE
    // period's: count them per stage with the lowering's layout (stage_layer_ids).
    const int k_dense = m_.is_moe() ? std::min(m_.moe->first_k_dense, m_.layers) : 0;
    std::vector<int> dense(static_cast<std::size_t>(pp), 0);
    LayerTimes ld;
    if (k_dense > 0) {
        ld = layer_times(p, true);
        for (int s = 0; s < pp; ++s)
            for (int l : stage_layer_ids(m_, p, s)) dense[static_cast<std::size_t>(s)] += l < k_dense;
    }
    CostContext ctx;
    ctx.hw = &hw_;
    ctx.cluster = &c_;
    ctx.plan = &p;
    ctx.calibration = cal_;

    // The share of a stage's layers full recompute reruns (1 for every other kind: the probe's
    // recompute time is what each layer pays).
    auto recomputed_share = [&](int s) {
        const int n = layers[static_cast<std::size_t>(s)];
        if (p.recompute != Recompute::full || (p.recompute_layers < 0 && p.recompute_every == 0) || n == 0) return 1.0;
        int rec = 0;
        for (int i = 0; i < n; ++i) rec += layer_recomputed(m_, p, s, i) ? 1 : 0;
        return static_cast<double>(rec) / n;
    };
    // Per stage, per micro-batch: forward and backward compute (the head on first/last stage).
    double worst = 0, sum = 0, worst_b = 0, worst_f = 0;
    int worst_stage = 0;
    std::vector<double> stage_fb(static_cast<std::size_t>(pp), 0.0);  // per micro-batch
    for (int s = 0; s < pp; ++s) {
        const int nd = dense[static_cast<std::size_t>(s)], nm = layers[static_cast<std::size_t>(s)] - nd;
        // Combined 1F1B: the merged share of the passes at the merged step's speed.
        const double share = merged_share(p, s);
        const double em = 1.0 - (1.0 - lt.merged_scale) * share, ed = 1.0 - (1.0 - ld.merged_scale) * share;
        double f = nm * lt.fwd_s * em + nd * ld.fwd_s * ed, b = nm * lt.bwd_s * em + nd * ld.bwd_s * ed;
        // Full recompute of some layers only (recompute_layers, recompute_every): the others skip
        // the rerun the probe's layer timed.
        b -= (1.0 - recomputed_share(s)) * (nm * lt.recompute_s + nd * ld.recompute_s);
        if (s == head_stage(p)) {
            // Each MTP module: about one more layer and one more pass through the head.
            f += lt.head_fwd_s + m_.mtp_depth * (lt.fwd_s + lt.head_fwd_s);
            b += lt.head_bwd_s + m_.mtp_depth * (lt.bwd_s + lt.head_bwd_s);
        }
        sum += f + b;
        stage_fb[static_cast<std::size_t>(s)] = f + b;
        if (f + b > worst) {
            worst = f + b;
            worst_b = b;
            worst_f = f;
            worst_stage = s;
        }
    }
    // Pipeline p2p of one micro-batch's boundary activation (split over tp by SP or by the
    // scatter/gather; the NVLink gather after it is left out).
    // Activations, weights and their transfers: bf16, or 4 bytes in a pure fp32 plan (the lowering's Dims).
    const double wb = p.precision == Precision::fp32 ? 4.0 : 2.0;
    double p2p = 0;
    if (pp > 1) {
        Instr in;
        in.kind = InstrKind::send;
        in.stream = Stream::pp_p2p;
        const bool split = p.sequence_parallel || p.p2p_scatter_gather;
        in.bytes = double(p.micro_batch) * double(m_.seq_len) / p.cp * double(m_.hidden) * wb / (split ? p.tp : 1);
        p2p = alone_s(transfer_demand(in, ctx));
    }
    // Fill and drain: the other stages' share of one micro-batch (1/vpp of it with interleaving),
    // plus the boundary transfers on the critical path.
    const double fill = (sum - worst) / vpp + 2.0 * (pp - 1) * p2p;
    e.compute_s = m * worst;
    e.bubble_s = pp > 1 ? fill : 0;
    {
        const int nd = dense[static_cast<std::size_t>(worst_stage)], nm = layers[static_cast<std::size_t>(worst_stage)] - nd;
        e.recompute_s = m * recomputed_share(worst_stage) * (nm * lt.recompute_s + nd * ld.recompute_s);
    }

    // Data parallelism over dp x cp (Megatron's grad reduction group); experts over edp.
    // A stage's parameters, cached by the stage and the plan's encoding (encoded once: the key's
    // first element is the stage).
    Key& key = stage_key_scratch_;
    key.assign({worst_stage});
    encode_plan(p, key, &stage_params_unread());
    const auto params_of = [&](int s) -> StageParams {
        key[0] = s;
        auto it = stage_params_.find(key);
        if (it == stage_params_.end()) it = stage_params_.emplace(key, stage_params(m_, p, s)).first;
        return it->second;
    };
    const StageParams sp = params_of(worst_stage);
    const int dpg = p.dp * p.cp;
    const int edp = p.edp();
    double dp_s = 0, ag_s = 0;
    double dp_expert_s = 0, ag_expert_s = 0;  // the expert buffer's, over edp (its own buckets)
    // DP buckets of dp_bucket_bytes of gradients (the lowering's build_buckets).
    const double cap = double(std::max<std::int64_t>(1, p.dp_bucket_bytes));
    const auto bucket_count = [&](double params) { return std::max(1.0, std::ceil(params * p.grad_bytes() / cap)); };
    // Buckets that close at a unit's end once they hold dp_bucket_bytes (ZeRO-2's, and overlapped
    // ones: the lowering's build_buckets): one smaller than a layer's gradients still takes the
    // whole layer, so their count follows the layers, not the bytes.
    const double worst_layers = std::max(1, layers[static_cast<std::size_t>(worst_stage)]);
    const auto unit_bucket_count = [&](double params) {
        const double unit = std::max(1.0, params * p.grad_bytes() / worst_layers);
        return std::max(1.0, std::ceil(worst_layers / std::ceil(cap / unit)));
    };
    const bool unit_buckets = (p.overlap_grad_reduce || p.zero_stage == 2) && p.zero_stage != 3;
    const auto count = [&](double params) { return unit_buckets ? unit_bucket_count(params) : bucket_count(params); };
    double zero3_end_s = 0;  // ZeRO-3 reduce-scatters the embedding's and head's gradients at the end
    if (dpg > 1 && p.zero_stage == 3) {
        // Every micro-batch's (FSDP's root post-backward; the next forward's gathers queue behind
        // them on the DP stream), but once after pipelined FSDP's last backward.
        const double reductions = p.pipelined_fsdp() ? 1.0 : std::max(1, p.micro_batches());
        // The stages holding them end the step with it, whichever stage computes most (DualPipeV's
        // rank 0 holds both and computes least).
        const double table = double(padded_vocab(m_, p)) * double(m_.hidden) / p.tp;
        const double end_params = table * (head_stage(p) == 0 && !m_.tied_embeddings ? 2.0 : 1.0);
        // ... and gathers their parameters before the step's forward (the lowering's
        // gather_edges_zero3), with nothing to hide behind.
        // Both go in dp_bucket_bytes pieces (the lowering's edge buckets), each a collective.
        if (end_params > 0) {
            const double n = bucket_count(end_params);
            zero3_end_s = n * (reductions * alone_s(transfer_demand(coll(CollKind::reduce_scatter, Group::dp, dpg, end_params * p.grad_bytes() / n), ctx)) +
                               alone_s(transfer_demand(coll(CollKind::all_gather, Group::dp, dpg, end_params * wb / n), ctx)));
            // Parameters homed on the host: each bucket's slice comes up before its gather.
            const double off = 1 - p.offload.params.gpu;
            if (off > 0) zero3_end_s += shared_s(transfer_demand(copy_instr(CopyKind::h2d, end_params * wb / dpg * off), ctx), c_);
        }
    }
    if (dpg > 1 && p.zero_stage < 3) {
        // One collective per bucket (the lowering's build_buckets; the parameter all-gather reuses
        // the gradient buckets, as Megatron does). Run back to back after the backward (no
        // overlap), each bucket's fixed cost adds up on the critical path; overlapped, the buckets
        // go out as their gradients are ready and those costs hide under the compute (the engine:
        // 1 MB buckets cost an overlapped MoE plan nothing; 24 buckets per micro-batch are 27 % of
        // a non-overlapped ZeRO-2 plan's step), so the whole volume is one transfer there.
        const auto reduce = [&](CollKind k, Group g, int size, double params, double bytes_per, bool hidden) {
            const double n = hidden ? 1.0 : count(params);
            return n * alone_s(transfer_demand(coll(k, g, size, params * bytes_per / n), ctx));
        };
        const CollKind k = p.zero_stage == 0 ? CollKind::all_reduce : CollKind::reduce_scatter;
        dp_s = reduce(k, Group::dp, dpg, sp.dense, p.grad_bytes(), p.overlap_grad_reduce);
        if (sp.expert > 0 && edp > 1) dp_expert_s = reduce(k, Group::edp, edp, sp.expert, p.grad_bytes(), p.overlap_grad_reduce);
        if (p.zero_stage >= 1) {
            ag_s = reduce(CollKind::all_gather, Group::dp, dpg, sp.dense, wb, p.overlap_param_gather);
            if (sp.expert > 0 && edp > 1) ag_expert_s = reduce(CollKind::all_gather, Group::edp, edp, sp.expert, wb, p.overlap_param_gather);
        }
    }
    // Overlapped, bucket by bucket: the dense and the expert gradients fill buckets of their own
    // (the lowering's build_buckets), and the last of each closes as the backward ends (the first
    // layer's and the embedding's), so one bucket of each is exposed after it; the gathers mirror
    // it, the first layer waiting for one bucket of each before the forward can go on.
    const double dense_buckets = count(sp.dense);
    const double expert_buckets = dp_expert_s + ag_expert_s > 0 ? count(sp.expert) : 0.0;
    const double buckets = dense_buckets + expert_buckets;
    const auto last_buckets = [&](double dense_s, double expert_s) {
        return dense_s / dense_buckets + (expert_buckets > 0 ? expert_s / expert_buckets : 0.0);
    };
    const double dp_last = last_buckets(dp_s, dp_expert_s), ag_last = last_buckets(ag_s, ag_expert_s);
    dp_s += dp_expert_s;
    ag_s += ag_expert_s;
    double dp_exposed = p.overlap_grad_reduce ? std::max(dp_last, dp_s - worst_b * (1 - 1 / buckets)) : dp_s;
    if (p.zero_stage == 2) {
        // ZeRO-2 reduces every micro-batch (the lowering's backward_pass). Overlapped, the m
        // reductions share the comm stream under the step's compute and only the last one's tail
        // shows, unless they outlast the compute; without overlap each one blocks.
        dp_exposed = p.overlap_grad_reduce ? std::max(dp_exposed, m * dp_s - e.compute_s * (1 - 1 / buckets)) : m * dp_s;
        // DeepSpeed's barrier (plan.bucket_reduce_barrier): a bucket's reduction hides only under
        // the next bucket's backward; what it outlasts that by shows, every bucket of every
        // micro-batch, and the last one's at the end.
        if (p.overlap_grad_reduce && p.bucket_reduce_barrier && buckets > 1)
            dp_exposed = std::max(dp_exposed, m * (buckets - 1) * std::max(0.0, dp_s / buckets - worst_b / buckets) + dp_s / buckets);
    }
    if (dpg > 1 && p.pipelined_fsdp()) {
        // Pipelined FSDP (lowering: fetch_params, layer_grads): each layer's parameters are
        // gathered at its first forward, one layer ahead of use, and its gradients reduce-scattered
        // as the last backward leaves it; the rest of the first forward and of the last backward
        // hide all but one layer's share of each.
        const double n_layers = std::max(1, layers[static_cast<std::size_t>(worst_stage)]);
        const double rs_s = alone_s(transfer_demand(coll(CollKind::reduce_scatter, Group::dp, dpg, sp.dense * p.grad_bytes()), ctx));
        const double gather_s = alone_s(transfer_demand(coll(CollKind::all_gather, Group::dp, dpg, sp.dense * wb), ctx));
        const double rs_exposed = std::max(rs_s / n_layers, rs_s - worst_b * (1 - 1 / n_layers));
        const double ag_exposed = std::max(gather_s / n_layers, gather_s - worst_f * (1 - 1 / n_layers));
        dp_exposed = rs_exposed + ag_exposed;
        e.compute_s += cal_.overlap * std::max(0.0, rs_s + gather_s - dp_exposed);
    }
    // The distributed optimizer's parameter all-gather: with overlap_param_gather it goes out
    // bucket by bucket at the next step's start and each layer waits only for its own bucket (the
    // lowering's gather_params_overlapped), so the first forward hides all but one bucket of it;
    // without, it runs after the update, exposed.
    double ag_exposed = ag_s;
    if (ag_s > 0 && p.overlap_param_gather) {
        ag_exposed = std::max(ag_last, ag_s - worst_f * (1 - 1 / buckets));
        e.compute_s += cal_.overlap * (ag_s - ag_exposed);
    }
    e.exposed_comm_s = dp_exposed + ag_exposed + zero3_end_s;

    // Interference: the compute that hides a reduction runs 1 + overlap times slower beside it
    // (the engine's overlap_slowdown), so the hidden part costs overlap x itself.
    if (p.overlap_grad_reduce) {
        const double total = p.zero_stage == 2 ? m * dp_s : dp_s;
        e.compute_s += cal_.overlap * std::max(0.0, total - dp_exposed);
    }

    // Unfused gradient accumulation: one memory-bound add per micro-batch over the stage's
    // parameters (its shard under ZeRO 2), as the lowering's accumulate_grads.
    if (!p.grad_accum_fusion) {
        const bool fp32_sum = p.grad_bytes() > 2;
        Instr in;
        in.kind = InstrKind::compute;
        in.op = Op::grad_accum;
        in.bytes = (fp32_sum ? 10.0 : 6.0) * (p.zero_stage >= 2 ? sp.dense / dpg + sp.expert / edp : sp.total());
        e.compute_s += (fp32_sum ? m : m - 1) * static_cast<double>(compute_cost(in, ctx).duration_ns) * 1e-9;
    }

    // Optimizer on its tiers, each fraction at once; the slowest bounds the step. It starts as the
    // pipeline drains, on every stage about at once, so the stage with the most parameters
    // bounds it: the worst-computing one, or one holding the embedding or the head (DualPipeV's
    // rank 0 holds both and computes least).
    const double pipe = e.compute_s + e.bubble_s;
    const auto optimizer_s = [&](const StageParams& ss) {
        const double shard = p.zero_stage >= 1 ? ss.dense / dpg + ss.expert / edp : ss.total();
        const TierSplit& of = p.offload.optimizer;
        double opt_gpu = 0, opt_cpu = 0, opt_ssd = 0;
        double d2h = 0, host_update = 0, h2d = 0;  // the host shares' legs, for the lock-free update
        if (of.gpu > 0) {
            Instr in;
            in.kind = InstrKind::compute;
            in.op = Op::optimizer_gpu;
            in.bytes = p.adam_gpu_bytes_per_param() * shard * of.gpu;  // as the lowering's step
            in.count = shard * of.gpu;
            opt_gpu = static_cast<double>(compute_cost(in, ctx).duration_ns) * 1e-9;
        }
        if (of.cpu > 0 || of.ssd > 0) {
            // Streamed to the host, the gradients went down in the backward (below).
            if (!p.streams_grads_to_host())
                d2h = shared_s(transfer_demand(copy_instr(CopyKind::d2h, p.grad_bytes() * shard * (of.cpu + of.ssd)), ctx), c_);
            Instr adam;
            adam.kind = InstrKind::optimizer;
            adam.stream = Stream::cpu;
            if (of.cpu > 0) {
                adam.count = shard * of.cpu;
                const double update = shared_s(transfer_demand(adam, ctx), c_);
                const double up = shared_s(transfer_demand(copy_instr(CopyKind::h2d, wb * shard * of.cpu * p.offload.params.gpu), ctx), c_);
                opt_cpu = d2h + update + up;
                host_update += update;  // the ssd share's sub-groups follow on the same host stream
                h2d += up;
            }
            if (of.ssd > 0) {
                adam.count = shard * of.ssd;
                // The fp32 master (none in a pure fp32 plan) and the moments come in and go back in
                // sub-groups on one SSD stream (the lowering's optimizer step): reads and writes add up,
                // and the host's update runs under them.
                const double state = ((p.has_master() ? 4.0 : 0.0) + p.adam_moment_bytes()) * shard * of.ssd;
                const double rd = shared_s(transfer_demand(copy_instr(CopyKind::ssd_read, state), ctx), c_);
                const double wr = shared_s(transfer_demand(copy_instr(CopyKind::ssd_write, state), ctx), c_);
                const double update = std::max(rd + wr, shared_s(transfer_demand(adam, ctx), c_));
                const double up = shared_s(transfer_demand(copy_instr(CopyKind::h2d, wb * shard * of.ssd * p.offload.params.gpu), ctx), c_);
                opt_ssd = d2h + update + up;
                host_update += update;
                h2d += up;
            }
        }
        const double opt = std::max({opt_gpu, opt_cpu, opt_ssd});
        // Lock-free update (the lowering's step()): the host's update of step i's gradients runs under
        // step i+1's forward and backward; what shows is its excess over them, then the D2H of the new
        // gradients beside the H2D of the update (each way its own PCIe direction).
        return p.lock_free_update ? std::max(opt_gpu, std::max(d2h, h2d) + std::max(0.0, host_update - pipe)) : opt;
    };
    // The stages that can hold the most parameters: the worst-computing one and the edges'.
    std::vector<int> heavy{worst_stage};
    for (int s : {0, head_stage(p)})
        if (std::find(heavy.begin(), heavy.end(), s) == heavy.end()) heavy.push_back(s);
    e.optimizer_s = 0;
    for (int s : heavy) e.optimizer_s = std::max(e.optimizer_s, optimizer_s(params_of(s)));

    // Parameters on cpu/ssd: every layer's parameters come in before its forward and backward of
    // every micro-batch, prefetched one layer ahead: only what exceeds the layer's compute shows.
    // Under ZeRO-3 a rank brings up only its shard, which the layer's all-gather completes (the
    // lowering's fetch_params); pipelined FSDP does so once a step, at the first forward. Each
    // stage's own: the one that holds the embedding and head (DualPipeV's rank 0 holds both) can
    // be the slowest though it computes least.
    if (!p.offload.params.all_gpu()) {
        const bool sharded = p.zero_stage == 3 && dpg > 1;
        const auto up_s = [&](double params) {  // params homed off the GPU, brought up
            const double bytes = wb * params;
            double t = shared_s(transfer_demand(copy_instr(CopyKind::h2d, bytes * (1 - p.offload.params.gpu)), ctx), c_);
            if (p.offload.params.ssd > 0)
                t = std::max(t, shared_s(transfer_demand(copy_instr(CopyKind::ssd_read, bytes * p.offload.params.ssd), ctx), c_));
            return t;
        };
        const auto stage_fetch_s = [&](int s) {
            const int n_layers = std::max(1, layers[static_cast<std::size_t>(s)]);
            const StageParams ss = params_of(s);
            // Unsharded, the embedding's and head's units come up apart from the layers, each just
            // before it is used, with nothing to hide behind (the lowering's fetch_edge): the
            // embedding before each forward, the head before each forward and backward (one stage
            // with a tied table: the table comes with the head as well).
            double edges = 0, edge_s = 0;
            if (!sharded) {
                const StageEdgeParams ep = stage_edge_params(m_, p, s);
                edges = ep.total();
                const double head_fetch = ep.head + (ep.head > 0 && head_reads_embedding_table(m_, p) ? ep.embedding : 0.0);
                edge_s = (ep.embedding > 0 ? up_s(ep.embedding) : 0.0) + (ep.head > 0 ? 2 * up_s(head_fetch + ep.head_expert) : 0.0);
            }
            const double layer_params = (sharded ? ss.dense / dpg + ss.expert / edp : ss.total() - edges) / n_layers;
            double fetch = up_s(layer_params);
            // Sharded, the layer's all-gather follows its slice's H2D in one chain, one layer ahead.
            if (sharded) fetch += alone_s(transfer_demand(coll(CollKind::all_gather, Group::dp, dpg, wb * ss.dense / n_layers), ctx));
            // Pipelined FSDP fetches once a step, at each stage's first forward: those lie one after
            // another on the pipeline's fill, so every stage's wait adds up.
            const bool once = sharded && p.pipelined_fsdp();
            const double layer_f = lt.fwd_s, layer_b = lt.bwd_s;
            const double per_layer = std::max(0.0, fetch - layer_f) + (once ? 0.0 : std::max(0.0, fetch - layer_b));
            return (once ? pp : m) * n_layers * per_layer + m * edge_s;
        };
        double slowest = 0;
        for (int s : heavy) slowest = std::max(slowest, m * stage_fb[static_cast<std::size_t>(s)] + stage_fetch_s(s));
        e.offload_s = slowest - m * worst;
    }
    // Activations on cpu/ssd: each layer's kept activations go down after its forward and come back
    // before its backward, prefetched one layer ahead (the lowering's forward pass and
    // fetch_activations). A chunk's backward starts from its last layer, whose activations went
    // down last: the way up waits for the chunk's whole way down. With one chunk per rank the two
    // add up; with vpp chunks one chunk's share is serialised and the rest overlap.
    const TierSplit& af = p.offload.activations;
    if (!af.all_gpu()) {
        double act_bytes = 0;
        const std::vector<int> ids = stage_layer_ids(m_, p, worst_stage);
        for (std::size_t i = 0; i < ids.size(); ++i)
            for (const TensorDesc& t : layer_activations(m_, p, ids[i], layer_recomputed(m_, p, worst_stage, static_cast<int>(i))))
                act_bytes += t.bytes;
        const double off = act_bytes * (af.cpu + af.ssd);
        double down = shared_s(transfer_demand(copy_instr(CopyKind::d2h, off), ctx), c_);
        double up = shared_s(transfer_demand(copy_instr(CopyKind::h2d, off), ctx), c_);
        if (af.ssd > 0) {
            down += shared_s(transfer_demand(copy_instr(CopyKind::ssd_write, act_bytes * af.ssd), ctx), c_);
            up += shared_s(transfer_demand(copy_instr(CopyKind::ssd_read, act_bytes * af.ssd), ctx), c_);
        }
        // DualPipeV pairs one chunk's forward with the other's backward, so their copies run at
        // once, each its own PCIe direction.
        const double per_mb = std::max(down, up) + (p.schedule == Schedule::dualpipe_v ? 0.0 : std::min(down, up) / vpp);
        e.offload_s += m * std::max(0.0, per_mb - worst);
    }

    // Gradients streamed to the host (the lowering's grads_to_host): each micro-batch but the
    // first brings the host's sum of the rank's shard up and adds it on the GPU; without
    // overlap_comm the copies are in the backward's line, with it only the adds are, and the
    // boundary's fp32 copy down under ZeRO-2 (DeepSpeed's per-parameter overflow check).
    if (p.streams_grads_to_host()) {
        const StageParams ss = params_of(worst_stage);
        const double shard = ss.dense / dpg + ss.expert / edp, gb = p.grad_bytes();
        const int sums = p.pipelined_fsdp() ? 0 : m - 1;
        Instr add;
        add.kind = InstrKind::compute;
        add.op = Op::grad_accum;
        add.bytes = 3 * gb * shard;
        const double up = shared_s(transfer_demand(copy_instr(CopyKind::h2d, gb * shard), ctx), c_);
        const double down = shared_s(transfer_demand(copy_instr(CopyKind::d2h, gb * shard), ctx), c_);
        const double last = shared_s(transfer_demand(copy_instr(CopyKind::d2h, p.host_grad_bytes() * shard), ctx), c_);
        const bool serial = !p.overlap_grad_reduce;
        if (p.cpu_grad_accumulation) {  // FSDP: each later copy down waited for, then added on the host
            Instr host_add;
            host_add.kind = InstrKind::optimizer;
            host_add.stream = Stream::cpu;
            host_add.bytes = 3 * 4.0 * shard;
            e.offload_s += sums * (down + shared_s(transfer_demand(host_add, ctx), c_)) + (serial ? last : 0.0);
        } else {
            e.offload_s += sums * (static_cast<double>(compute_cost(add, ctx).duration_ns) * 1e-9 + (serial ? up + down : 0.0)) +
                           (serial || p.zero_stage == 2 ? last : 0.0);
        }
    }

    e.step_time_s = pipe + e.exposed_comm_s + e.optimizer_s + e.offload_s;
    const double tokens = double(p.global_batch) * double(m_.seq_len);
    e.tokens_per_s = e.step_time_s > 0 ? tokens / e.step_time_s : 0;
    const double flops = flops_per_token_ * tokens;
    e.tflops_per_gpu = e.step_time_s > 0 ? flops / e.step_time_s / p.gpus() / 1e12 : 0;
    const double peak = peak_flops_for(hw_, p.precision);
    e.mfu = peak > 0 ? e.tflops_per_gpu * 1e12 / peak : 0;
    return e;
}

}  // namespace strata::planner
