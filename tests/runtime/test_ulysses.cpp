// Ulysses context parallelism (plan.cp_comm_type a2a) executed: the transport's all-to-all moves
// each value where the load-balanced layout and the head split put it (worked out by hand here),
// the second all-to-all undoes the first, and every plan with it follows the single rank's loss
// curve, as the ring does (test_parallel.cpp). The device path: device_runs.hpp.
#include <catch2/catch.hpp>

#include <vector>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/tensors.hpp"
#include "transport.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;
using runtime::CollPart;
using runtime::Transport;

namespace {

PlanSpec ulysses(PlanSpec p, int cp) {
    p.cp = cp;
    p.cp_comm_type = CpCommType::a2a;
    return p;
}

// Each of n members posts its part of a Ulysses exchange (mode 1: to the heads, 2: back); whether
// each post completed it.
std::vector<bool> post_ulysses(Transport& t, int n, int mode, std::vector<float>* from, std::vector<float>* to, std::int64_t key,
                               const std::vector<std::int64_t>& segments, std::int64_t seq) {
    std::vector<bool> done;
    for (int r = 0; r < n; ++r) {
        CollPart part;
        part.group_rank = r;
        part.in = {from[r].data()};
        part.in_n = {static_cast<std::int64_t>(from[r].size())};
        part.out = {to[r].data()};
        part.out_n = {static_cast<std::int64_t>(to[r].size())};
        part.ulysses = mode;
        part.segments = segments;
        part.seq = seq;
        done.push_back(t.collective({0, key}, CollKind::all_to_all, n, part));
    }
    for (int r = 0; r + 1 < n; ++r) t.collective_done({0, key});
    return done;
}

}  // namespace

TEST_CASE("Ulysses all-to-all: a sequence split's rows to a head split's, and back", "[runtime][ulysses]") {
    using i64 = std::int64_t;
    // cp 2, two sequences of 8: member 0 holds chunks 0 and 3 of each (positions 0 1 6 7), member 1
    // chunks 1 and 2 (2 3 4 5). Columns [a: 2 | b: 4]: member r takes a's column r and b's
    // columns 2r, 2r + 1.
    const i64 seq = 8, b = 2, W = 6, w = 3, rows = b * seq / 2;
    const int positions[2][4] = {{0, 1, 6, 7}, {2, 3, 4, 5}};
    std::vector<float> seq_split[2], head_split[2], back[2];
    for (int s = 0; s < 2; ++s) {
        seq_split[s].resize(static_cast<std::size_t>(rows * W));
        for (i64 i = 0; i < rows; ++i)
            for (i64 c = 0; c < W; ++c) seq_split[s][static_cast<std::size_t>(i * W + c)] = static_cast<float>(1000 * (i / 4) + 10 * positions[s][i % 4] + c);
        head_split[s].assign(static_cast<std::size_t>(b * seq * w), -1.0f);
        back[s].assign(seq_split[s].size(), -1.0f);
    }
    Transport t;
    auto exchange = [&](int mode, std::vector<float>* from, std::vector<float>* to, std::int64_t key) {
        CHECK(post_ulysses(t, 2, mode, from, to, key, {2, 4}, seq) == std::vector<bool>{false, true});  // the last to post performs it
    };
    exchange(1, seq_split, head_split, 1);
    for (int r = 0; r < 2; ++r)
        for (i64 sq = 0; sq < b; ++sq)
            for (i64 pos = 0; pos < seq; ++pos) {
                const float* row = head_split[r].data() + (sq * seq + pos) * w;
                const float base = static_cast<float>(1000 * sq + 10 * pos);
                INFO("member " << r << ", sequence " << sq << ", position " << pos);
                CHECK(row[0] == base + static_cast<float>(r));          // a's column r
                CHECK(row[1] == base + static_cast<float>(2 + 2 * r));  // b's columns 2r, 2r + 1
                CHECK(row[2] == base + static_cast<float>(3 + 2 * r));
            }
    exchange(2, head_split, back, 2);
    CHECK(back[0] == seq_split[0]);
    CHECK(back[1] == seq_split[1]);
}

TEST_CASE("Ulysses: every plan follows the single-rank loss curve", "[runtime][ulysses][parallel]") {
    {
        std::vector<Variant> v;
        v.push_back({"cp 2, Ulysses", ulysses(cpu_plan(), 2)});
        v.push_back({"cp 4, Ulysses (one head a rank)", ulysses(cpu_plan(), 4)});
        PlanSpec p = ulysses(cpu_plan(2), 2);
        p.sequence_parallel = true;
        v.push_back({"tp 2 SP cp 2, Ulysses", p});
        p = ulysses(cpu_plan(1, 1, 2), 2);
        p.zero_stage = 1;
        v.push_back({"cp 2 dp 2, ZeRO-1, Ulysses", p});
        p = ulysses(cpu_plan(1, 2), 2);
        p.recompute = Recompute::full;
        v.push_back({"cp 2 pp 2, full recompute, Ulysses", p});
        p = ulysses(cpu_plan(), 2);
        p.recompute = Recompute::selective;  // the core attention and both all-to-alls rerun in the backward
        v.push_back({"cp 2, selective recompute, Ulysses", p});
        p = ulysses(cpu_plan(), 2);
        p.offload.activations = TierSplit{0.0, 1.0, 0.0};  // the head-split tensors to host memory and back
        v.push_back({"cp 2, activations on the CPU, Ulysses", p});
        check_against_single_rank(tiny_gpt(), v);
        p = ulysses(cpu_plan(1, 2), 2);
        p.schedule = Schedule::interleaved_1f1b;
        p.vpp = 2;
        check_against_single_rank(tiny_gpt(4), {{"cp 2 pp 2 interleaved (vpp 2), Ulysses", p}});
    }
    {
        // GQA and RoPE: the rotation at each row's own position before the exchange, K/V heads
        // split as the query heads that read them.
        check_against_single_rank(tiny_llama(2), {{"cp 2, Ulysses", ulysses(cpu_plan(), 2)}});
        ModelSpec w = tiny_llama(2);
        w.sliding_window = 3;
        check_against_single_rank(w, {{"cp 2, Ulysses, a 3-token window", ulysses(cpu_plan(), 2)}});
    }
    {
        // MoE layers beside Ulysses: the CP all-to-alls and the EP ones share no group.
        PlanSpec p = ulysses(cpu_plan(1, 1, 2), 2);
        p.ep = 2;
        check_against_single_rank(tiny_moe(), {{"MoE, cp 2 dp 2 ep 2, Ulysses", p}});
    }
    {
        // Attention dropout: each probability's mask is named by its model head and positions, so
        // the head-split ranks draw the single rank's.
        ModelSpec g = tiny_gpt();
        g.dropout = 0.2;
        check_against_single_rank(g, {{"cp 2, Ulysses, dropout 0.2", ulysses(cpu_plan(), 2)}});
    }
}

TEST_CASE("Ulysses keeps the attention's output twice: head split for its backward, sequence split for the projection",
          "[runtime][ulysses][memory]") {
    // Per layer and micro-batch the a2a plan stashes one more b x s/cp x heads/tp x d activation
    // than the ring (Transformer Engine's a2a attention saves its output before the exchange back;
    // the projection saves the exchanged copy), in the activation dtype; core_attn recompute
    // drops it with the log-sum-exp.
    ModelSpec m = tiny_gpt();
    m.seq_len = m.max_position = 16;
    PlanSpec ring = cpu_plan();
    ring.cp = 2;
    ring.precision = Precision::bf16;
    const PlanSpec a2a = ulysses(ring, 2);
    auto bytes = [&](const PlanSpec& p) {
        double sum = 0;
        for (const TensorDesc& t : layer_activations(m, p, 0, false)) sum += t.bytes;
        return sum;
    };
    const double tokens = static_cast<double>(a2a.micro_batch) * 16 / 2;
    CHECK(bytes(a2a) - bytes(ring) == Approx(2.0 * tokens * 4 * 8));  // bf16 x tokens x heads x head_dim
    PlanSpec sel = a2a, sel_ring = ring;
    sel.recompute = sel_ring.recompute = Recompute::selective;
    CHECK(bytes(sel) == Approx(bytes(sel_ring)));
}
