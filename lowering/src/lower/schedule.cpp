// Pipeline schedules as pure functions: the ordered (micro-batch, chunk, fwd/bwd) slots one
// pipeline rank runs in a step. Follows Megatron-LM's schedules.py (forward_backward_no_pipelining,
// ..._pipelining_without_interleaving, ..._pipelining_with_interleaving). No timing here: the
// engine discovers the bubbles by executing the send/recv dependencies.
#include <algorithm>

#include "strata/common/error.hpp"
#include "strata/lowering/lower.hpp"

namespace strata::sim {
namespace {

std::vector<PipeSlot> gpipe(int m, int vpp) {
    std::vector<PipeSlot> out;
    out.reserve(static_cast<std::size_t>(2 * m * vpp));
    for (int c = 0; c < vpp; ++c)
        for (int mb = 0; mb < m; ++mb) out.push_back({mb, c, true});
    for (int c = vpp - 1; c >= 0; --c)
        for (int mb = 0; mb < m; ++mb) out.push_back({mb, c, false});
    return out;
}

// Megatron, non-interleaved: a rank holds at most pp - stage micro-batches in flight.
std::vector<PipeSlot> one_f_one_b(int pp, int stage, int m, int extra) {
    std::vector<PipeSlot> out;
    out.reserve(static_cast<std::size_t>(2 * m));
    const int warmup = std::min(pp - stage - 1 + extra, m);
    const int steady = m - warmup;
    for (int i = 0; i < warmup; ++i) out.push_back({i, 0, true});
    for (int i = 0; i < steady; ++i) {
        out.push_back({warmup + i, 0, true, false, false, true});
        out.push_back({i, 0, false});
    }
    for (int i = steady; i < m; ++i) out.push_back({i, 0, false});
    return out;
}

// Megatron-Core's get_schedule_table: micro-batches go through chunk 0 in groups of `group`, then
// the same group through chunk 1, ...; the last group takes whatever is left (m mod group, or a
// whole group). The k-th backward runs the k-th entry's micro-batch on the mirrored chunk.
std::vector<PipeSlot> interleaved_table(int m, int vpp, int group) {
    std::vector<PipeSlot> t;
    t.reserve(static_cast<std::size_t>(m * vpp));
    for (int first = 0; first < m; first += group) {
        const int end = std::min(first + group, m);
        for (int c = 0; c < vpp; ++c)
            for (int mb = first; mb < end; ++mb) t.push_back({mb, c, true});
    }
    return t;
}

std::vector<PipeSlot> interleaved(int pp, int stage, int m, int vpp, int group, int extra) {
    const std::vector<PipeSlot> table = interleaved_table(m, vpp, group);
    const int total = m * vpp;
    // Megatron-Core's get_pp_rank_microbatches. Megatron's older schedule ran every forward first
    // whenever m == pp; the current one has no such case, so with m == pp the later ranks still
    // reach 1F1B (the last after (vpp - 1)·pp forwards, holding one micro-batch's logits).
    const int warmup = std::min((pp - stage - 1) * 2 + (vpp - 1) * group + extra, total);
    const int steady = total - warmup;
    const auto fwd = [&](int k) { return table[static_cast<std::size_t>(k)]; };
    const auto bwd = [&](int k) {
        const PipeSlot& e = table[static_cast<std::size_t>(k)];
        return PipeSlot{e.microbatch, vpp - 1 - e.chunk, false};
    };
    std::vector<PipeSlot> out;
    out.reserve(static_cast<std::size_t>(2 * total));
    for (int k = 0; k < warmup; ++k) out.push_back(fwd(k));
    for (int k = 0; k < steady; ++k) {
        out.push_back(fwd(warmup + k));
        out.back().steady = true;
        out.push_back(bwd(k));
    }
    for (int k = steady; k < total; ++k) out.push_back(bwd(k));
    return out;
}

// DeepSeek's DualPipeV (deepseek-ai/DualPipe, dualpipev.py, "cut-in-half" DualPipe): chunk 0 is
// the V's down leg (virtual stage r), chunk 1 its up leg (2pp - 1 - r). Its eight steps: warm-up
// forwards of chunk 0; F0 F1 pairs; B1 W F1 with zero bubble; the steady F0 B1 F1 B0; B1 F1 B0;
// B1 B0, the second half with zero bubble; W B0 with zero bubble; the last W. Zero bubble
// (WeightGradStore): the backward leaves its weight gradients in a FIFO that each W pops, to fill
// the ramps where the rank would wait. Micro-batches go through each chunk in order.
std::vector<PipeSlot> dualpipe_v(int pp, int r, int m) {
    std::vector<PipeSlot> out;
    out.reserve(static_cast<std::size_t>(5 * m));
    int next[2][2] = {{0, 0}, {0, 0}};  // [chunk][forward]
    std::vector<PipeSlot> deferred;     // WeightGradStore's queue
    std::size_t popped = 0;
    auto fwd = [&](int chunk) { out.push_back({next[chunk][1]++, chunk, true}); };
    auto bwd = [&](int chunk, bool zb = false) {
        out.push_back({next[chunk][0]++, chunk, false, zb});
        if (zb) deferred.push_back({out.back().microbatch, chunk, false, false, true});
    };
    auto weights = [&] { out.push_back(deferred[popped++]); };
    for (int i = 0; i < (pp - r - 1) * 2; ++i) fwd(0);
    for (int i = 0; i < r + 1; ++i) fwd(0), fwd(1);
    for (int i = 0; i < pp - r - 1; ++i) bwd(1, true), weights(), fwd(1);
    for (int i = 0; i < m - 2 * pp + r + 1; ++i) fwd(0), bwd(1), fwd(1), bwd(0);
    for (int i = 0; i < pp - r - 1; ++i) bwd(1), fwd(1), bwd(0);
    // Step 6 turns zero bubble on halfway: before B1 of iteration (r + 1) / 2 on odd ranks, after
    // it on even ones.
    const int step6 = r + 1;
    bool zb = false;
    for (int i = 0; i < step6; ++i) {
        if (i == step6 / 2 && r % 2 == 1) zb = true;
        bwd(1, zb);
        if (i == step6 / 2 && r % 2 == 0) zb = true;
        bwd(0, zb);
    }
    for (int i = 0; i < pp - r - 1; ++i) weights(), bwd(0, true);
    for (int i = 0; i < r + 1; ++i) weights();
    STRATA_ASSERT(popped == deferred.size(), "DualPipeV: a deferred weight pass left in the queue");
    return out;
}

}  // namespace

std::vector<PipeSlot> pipeline_schedule(Schedule s, int pp, int stage, int micro_batches, int vpp, int group, bool a2a_overlap) {
    STRATA_ASSERT(pp >= 1 && stage >= 0 && stage < pp && micro_batches >= 1 && vpp >= 1,
                  "pipeline_schedule: bad arguments");
    if (s == Schedule::gpipe) return gpipe(micro_batches, vpp);
    if (s == Schedule::dualpipe_v) {
        STRATA_ASSERT(vpp == 2 && pp >= 2 && micro_batches >= 2 * pp, "DualPipeV needs vpp 2, pp >= 2 and 2 pp micro-batches");
        return dualpipe_v(pp, stage, micro_batches);
    }
    if (vpp > 1) {  // 1F1B with virtual stages is Megatron's interleaved schedule
        if (group <= 0) group = pp;
        STRATA_ASSERT(valid_microbatch_group(micro_batches, pp, group),
                      "interleaved 1F1B needs pp <= group <= micro_batches and a last group of 0 or >= pp");
        return interleaved(pp, stage, micro_batches, vpp, group, a2a_overlap ? 1 : 0);
    }
    return one_f_one_b(pp, stage, micro_batches, a2a_overlap ? 1 : 0);
}

bool merged_pair(const PlanSpec& p, const PipeSlot& a, const PipeSlot& b) {
    if (!p.moe_a2a_overlap || p.ep < 2 || !a.forward || b.forward || b.weights || b.defer_weights || a.microbatch == b.microbatch)
        return false;
    // DualPipeV merges F0 with B1 and F1 with B0 (dualpipev.py steps 4 and 5), not step 3's F1 B1.
    if (p.schedule == Schedule::dualpipe_v) return a.chunk != b.chunk;
    // 1F1B and interleaved merge their steady state's pairs only (Megatron-Core's combined 1F1B):
    // a rank whose warm-up takes every forward runs its last one alone, then the backwards. Merging
    // that boundary too deadlocked a pipeline at m = pp (its backward's receive waited on the next
    // rank's merged step, which waited on this forward's send; losses sweep seed 72).
    return a.steady;
}

}  // namespace strata::sim
