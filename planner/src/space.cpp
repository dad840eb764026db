// Enumeration of the plan space: factorisations of the GPU count into tp x cp x pp x dp (x ep),
// then schedules, micro-batches, ZeRO stages, recomputation and offload, with the constraints
// Megatron-LM and DeepSpeed enforce. Pruning by memory and time happens in search.cpp.
#include "strata/planner/space.hpp"

#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/groups.hpp"  // group_layout: does the EP group cross nodes?

#include <algorithm>
#include <tuple>

namespace strata::planner {

using namespace strata::sim;

std::vector<int> divisors(int n) {
    // Pairs (i, n / i) up to sqrt(n), in 64 bits: i * i never overflows, even at n = INT_MAX
    // (an int loop to n overflowed there, and took minutes at 2^24).
    std::vector<int> low, high;
    for (std::int64_t i = 1; i * i <= n; ++i) {
        if (n % i != 0) continue;
        low.push_back(static_cast<int>(i));
        if (i * i != n) high.push_back(static_cast<int>(n / i));
    }
    low.insert(low.end(), high.rbegin(), high.rend());
    return low;
}

namespace {

OffloadChoice choice(TierSplit optimizer, TierSplit params, int min_zero, const char* label, bool lock_free = false) {
    OffloadChoice c;
    c.offload.optimizer = optimizer;
    c.offload.params = params;
    c.min_zero_stage = min_zero;
    c.label = label;
    c.lock_free = lock_free;
    return c;
}

}  // namespace

std::string cp_label(const PlanSpec& p) {
    if (p.cp <= 1 || p.cp_comm_type == CpCommType::p2p) return std::to_string(p.cp);
    return std::to_string(p.cp) + (p.cp_comm_type == CpCommType::a2a ? "u" : "g");
}

std::vector<OffloadChoice> offload_choices(bool search_offload, bool ssd) {
    const TierSplit gpu{1, 0, 0}, cpu{0, 1, 0}, half{0.5, 0.5, 0}, nvme{0, 0, 1};
    std::vector<OffloadChoice> out{choice(gpu, gpu, 0, "gpu")};
    if (!search_offload) return out;
    out.push_back(choice(cpu, gpu, 1, "opt->cpu"));                   // ZeRO-Offload (needs a sharded optimizer)
    out.push_back(choice(cpu, gpu, 1, "opt->cpu lock-free", true));   // + Angel-PTM's one-step-stale update
    out.push_back(choice(half, gpu, 1, "opt gpu/cpu 50/50"));         // Angel-PTM-style split across tiers
    out.push_back(choice(cpu, cpu, 3, "opt+params->cpu"));            // ZeRO-3 with params on the CPU
    if (!ssd) return out;
    out.push_back(choice(nvme, gpu, 1, "opt->ssd"));                  // ZeRO-Infinity: optimizer on NVMe
    out.push_back(choice(nvme, nvme, 3, "opt+params->ssd"));          // ZeRO-Infinity: params too
    return out;
}

namespace {

// validate_plan's rule for virtual stages: every one but the last (which may hold only the head)
// gets a layer. With MTP modules counted as layers of the last stage, the even split can leave the
// last stage fewer layers than layers / pp (fuzz_plan_space: 96 layers + 2 MTP on 16 stages offered
// vpp 6 to a last stage of 4 layers). DualPipeV's V (vpp 2) is split by its default
// (dualpipe_v_split, balanced by FLOPs around rank 0's two ends).
bool virtual_stages_filled(const ModelSpec& m, int pp, int vpp, Schedule schedule = Schedule::interleaved_1f1b) {
    PlanSpec q;
    q.pp = pp;
    q.vpp = vpp;
    q.schedule = schedule;
    const std::vector<int> per_virtual = virtual_stage_layers(m, q);
    for (std::size_t v = 0; v + 1 < per_virtual.size(); ++v)
        if (per_virtual[v] < 1) return false;
    return true;
}

bool tp_ok(const ModelSpec& m, int tp) {
    if (m.heads % tp != 0) return false;
    // Megatron replicates KV heads when tp > kv_heads; otherwise they must split evenly.
    if (m.kv_heads % tp != 0 && tp % m.kv_heads != 0) return false;
    if (m.ffn_hidden % tp != 0) return false;
    if (m.is_moe() && m.moe->expert_ffn_hidden > 0 && m.moe->expert_ffn_hidden % tp != 0) return false;
    return true;
}

}  // namespace

SpaceCounters enumerate_plans(const ModelSpec& m, const ClusterSpec& c, const SearchSpace& s,
                              const std::function<bool(const PlanSpec&)>& visit, int shard, int shards) {
    SpaceCounters k;
    const int gpus = c.gpu_count();
    const int gbs = s.global_batch > 0 ? s.global_batch : 512;
    const auto offloads = offload_choices(s.search_offload, s.offload_to_ssd);
    std::int64_t layout_index = 0;
    bool stop = false;
    const bool pipelined_fsdp_ok = s.framework == "torchtitan" || s.framework == "torchtitan-compile";

    for (int tp : divisors(gpus)) {
        if (stop) break;
        if (tp > s.max_tp || (s.tp_within_node && tp > c.gpus_per_node)) continue;
        for (int cp : divisors(gpus / tp)) {
            if (stop) break;
            if (cp > s.max_cp) continue;
            for (int pp : divisors(gpus / (tp * cp))) {
                if (stop) break;
                if (pp > s.max_pp) continue;
                const int dp = gpus / (tp * cp * pp);
                // (ep, expert_tp): EP inside dp x cp with experts split like the MLP (expert_tp 0 =
                // tp), and with TP, MoE parallel folding: whole experts (expert_tp 1), EP over
                // tp x cp x dp (Megatron-Core's --expert-tensor-parallel-size 1).
                std::vector<std::pair<int, int>> eps{{1, 0}};
                if (m.is_moe()) {
                    eps.clear();
                    for (int e : divisors(m.moe->experts))
                        if ((dp * cp) % e == 0) eps.emplace_back(e, 0);
                    if (tp > 1 && s.search_expert_tp)
                        for (int e : divisors(m.moe->experts))
                            if (e > 1 && (tp * dp * cp) % e == 0) eps.emplace_back(e, 1);
                }
                // DeepEP sends a token once per GPU (and node) its experts reach, where the flat
                // all-to-all sends a copy per expert (docs/costs.md): with EP both are tried.
                // Megatron-Core's combined 1F1B hides each all-to-all under another micro-batch's
                // kernels (moe_a2a_overlap): tried with either dispatch.
                std::vector<std::tuple<int, int, MoeDispatcher, bool>> moe_layouts;
                for (auto [ep, etp] : eps) {
                    for (bool overlap : {false, true}) {
                        if (overlap && (ep < 2 || !s.search_a2a_overlap || m.mtp_depth > 1)) continue;  // at most one MTP layer
                        moe_layouts.emplace_back(ep, etp, MoeDispatcher::alltoall, overlap);
                        if (ep >= 2 && s.search_deepep) moe_layouts.emplace_back(ep, etp, MoeDispatcher::deepep, overlap);
                    }
                }
                for (auto [ep, etp, disp, a2a_overlap] : moe_layouts) {
                    if (stop) break;
                    const std::int64_t my_layout = layout_index++;
                    const bool mine = shards <= 1 || (my_layout % shards) == shard;
                    // Count the raw combinations of this layout once, valid or not, so the totals
                    // are the same whichever constraint fails first.
                    bool layout_ok = tp_ok(m, tp) && pp <= m.layers && gbs % dp == 0 &&
                                     (cp == 1 || m.seq_len % (2 * cp) == 0) &&
                                     (s.search_uneven_pipeline || m.layers % pp == 0);
                    if (!mine) continue;
                    if (!layout_ok) {
                        ++k.considered;
                        ++k.invalid;
                        continue;
                    }
                    // Context parallelism's exchange: the ring, and Ulysses' all-to-all where a TP
                    // rank's query and KV heads split over cp (validate_plan's rule); under a named
                    // framework the K/V all-gather too (PyTorch's CP runs nothing else; a preset
                    // that fixes the exchange makes the others copies, skipped below).
                    std::vector<CpCommType> cp_comms{CpCommType::p2p};
                    if (cp > 1 && s.search_cp_comm_type && m.ulysses_splits_heads(tp, cp)) cp_comms.push_back(CpCommType::a2a);
                    if (cp > 1 && !s.framework.empty()) cp_comms.push_back(CpCommType::allgather);
                    const int per_dp = gbs / dp;
                    const bool dualpipev_fits = pp > 1 && s.search_dualpipev && virtual_stages_filled(m, pp, 2, Schedule::dualpipe_v);
                    for (int mb : divisors(per_dp)) {
                        if (stop) break;
                        if (mb > s.max_micro_batch) break;
                        const int micro = per_dp / mb;
                        // Schedules: (schedule, vpp) pairs.
                        std::vector<std::pair<Schedule, int>> scheds{{Schedule::one_f_one_b, 1}};
                        if (pp > 1) {
                            if (s.search_gpipe) scheds.push_back({Schedule::gpipe, 1});
                            if (m.layers % pp == 0) {
                                int lps = m.layers / pp;
                                for (int v : divisors(lps))
                                    if (v > 1 && v <= s.max_vpp && virtual_stages_filled(m, pp, v))
                                        scheds.push_back({Schedule::interleaved_1f1b, v});
                            }
                            if (dualpipev_fits && micro >= 2 * pp) scheds.push_back({Schedule::dualpipe_v, 2});
                        }
                        for (auto [sched, vpp] : scheds) {
                            if (stop) break;
                            // Interleaving: groups of pp micro-batches, or Megatron-Core's smallest
                            // larger group when pp does not divide them (0: none, m < pp).
                            const int group = sched == Schedule::interleaved_1f1b ? smallest_microbatch_group(micro, pp) : 0;
                            for (int sp = (tp > 1 ? 1 : 0); sp >= 0 && !stop; --sp) {
                                if (sp == 0 && tp > 1 && !s.search_sequence_parallel) continue;
                                if (sp == 0 && etp > 0) continue;  // folding needs SP (Megatron)
                                for (int zero : s.zero_stages) {
                                    if (stop) break;
                                    for (Recompute rc : s.recomputes) {
                                        if (stop) break;
                                        for (std::size_t oc = 0; oc < offloads.size() * cp_comms.size() && !stop; ++oc) {
                                            const OffloadChoice& off = offloads[oc / cp_comms.size()];
                                            const CpCommType comm = cp_comms[oc % cp_comms.size()];
                                            ++k.considered;
                                            bool ok = true;
                                            if (sched == Schedule::interleaved_1f1b && group == 0) ok = false;
                                            // Pipelined FSDP: a plan file may ask for it; the Megatron and DeepSpeed
                                            // exports cannot say it, so only torchtitan's searches include it.
                                            if (zero == 3 && pp > 1 && !pipelined_fsdp_ok) ok = false;
                                            if (dp * cp == 1 && zero > 0) ok = false;     // nothing to shard over
                                            if (sp == 1 && (m.seq_len / cp) % tp != 0) ok = false;  // SP splits the sequence over tp
                                            if (zero < off.min_zero_stage) ok = false;
                                            // Combined 1F1B: with a pipeline only interleaved (or DualPipeV's
                                            // pairs), never around a full recomputation (validate_plan's rules).
                                            const bool pairs = sched == Schedule::interleaved_1f1b || sched == Schedule::dualpipe_v;
                                            if (a2a_overlap && ((pp > 1 && !pairs) || rc == Recompute::full)) ok = false;
                                            if (!ok) {
                                                ++k.invalid;
                                                continue;
                                            }
                                            PlanSpec p;
                                            p.tp = tp;
                                            p.cp = cp;
                                            p.pp = pp;
                                            p.dp = dp;
                                            p.ep = ep;
                                            p.expert_tp = etp;
                                            p.moe_dispatcher = disp;
                                            p.moe_a2a_overlap = a2a_overlap;
                                            p.vpp = vpp;
                                            p.microbatch_group = group == pp ? 0 : group;  // pp is the default
                                            p.micro_batch = mb;
                                            p.global_batch = gbs;
                                            p.sequence_parallel = sp == 1;
                                            p.schedule = sched;
                                            p.zero_stage = zero;
                                            p.recompute = rc;
                                            p.precision = s.precision;
                                            p.offload = off.offload;
                                            p.lock_free_update = off.lock_free;
                                            p.expandable_segments = s.expandable_segments;
                                            p.cp_comm_type = comm;
                                            if (!s.framework.empty()) {
                                                p.framework = s.framework;
                                                apply_framework(p);
                                                // A preset that fixes the exchange (DeepSpeed's Ulysses) or the EP
                                                // overlap (torchtitan's under DualPipeV) makes the other one a copy.
                                                if (framework_refusal(p) || p.cp_comm_type != comm || p.moe_a2a_overlap != a2a_overlap) {
                                                    ++k.invalid;
                                                    continue;
                                                }
                                            }
                                            ++k.valid;
                                            if (!visit(p)) stop = true;
                                            if (stop) break;
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    return k;
}

}  // namespace strata::planner
