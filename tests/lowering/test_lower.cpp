// Lowering (sim/lower.hpp) on a small GPT: instruction counts per layer, FLOPs against a hand
// formula, balanced Alloc/Free, matched send/recv and collectives, events, ZeRO shapes and
// determinism (offload and the lock-free update: test_lower_offload.cpp). Expected values are
// derived by hand in the comments.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <utility>

#include "strata/lowering/lower.hpp"
#include "strata/lowering/tensors.hpp"
#include "support/gpt.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;
using strata::test::cluster;
using strata::test::plan;
using strata::test::small_gpt;

namespace {

// Hand FLOPs of one step, per token (h = 64, f = 256, V = 128, s = 32, L = 4):
//   layer GEMMs forward: QKV 2*h*3h + proj 2*h*h + MLP 2*2*h*f = 2*(4h^2 + 2hf) = 2*(16384 + 32768) = 98304
//   causal attention core forward: 4*s*h / 2 = 2*32*64 = 4096 per layer
//   logits: 2*h*V = 16384
// Backward: 2x GEMMs, 2.5x attention (FlashAttention-2). Recompute adds forward work again.
struct HandFlops {
    double gemm_layers = 4 * 98304.0, attn = 4 * 4096.0, logits = 16384.0;
    double forward() const { return gemm_layers + attn + logits; }
    double step(Recompute r) const {
        double f = 3 * gemm_layers + 3.5 * attn + 3 * logits;
        if (r == Recompute::selective) f += attn;
        if (r == Recompute::full) f += gemm_layers + attn;
        return f;
    }
};

double program_flops(const Program& p, bool matmul_only = true) {
    double f = 0;
    for (const auto& r : p.ranks)
        for (const auto& in : r.instrs)
            if (in.kind == InstrKind::compute && (!matmul_only || in.op == Op::gemm || in.op == Op::attention_fwd || in.op == Op::attention_bwd))
                f += in.flops * static_cast<double>(r.multiplicity);
    return f;
}

// Every wait names an event recorded exactly once in the same program.
void check_events(const Program& p) {
    for (const auto& r : p.ranks) {
        std::map<int, int> recorded;
        for (const auto& in : r.instrs)
            if (in.kind == InstrKind::record) {
                REQUIRE(in.event >= 0);
                REQUIRE(in.event < p.events);
                ++recorded[in.event];
            }
        for (const auto& [ev, n] : recorded) REQUIRE(n == 1);
        for (const auto& in : r.instrs)
            if (in.kind == InstrKind::wait) REQUIRE(recorded.count(in.event) == 1);
    }
}

// Every non-persistent allocation is freed once with the same size; persistent ones (model
// states, buffers) are allocated at program start, outside any phase, and never freed.
void check_memory_balanced(const Program& p) {
    for (const auto& r : p.ranks) {
        std::size_t i = 0;
        std::set<std::int64_t> persistent;
        for (; i < r.instrs.size() && r.instrs[i].kind == InstrKind::alloc && r.instrs[i].phase == Phase::other; ++i)
            persistent.insert(r.instrs[i].tensor);
        REQUIRE(!persistent.empty());  // weights, grads, optimizer states at least
        std::map<std::int64_t, double> live;
        for (; i < r.instrs.size(); ++i) {
            const Instr& in = r.instrs[i];
            if (in.kind == InstrKind::alloc) {
                REQUIRE(live.count(in.tensor) == 0);
                REQUIRE(persistent.count(in.tensor) == 0);
                live[in.tensor] = in.bytes;
            } else if (in.kind == InstrKind::free) {
                REQUIRE(live.count(in.tensor) == 1);
                REQUIRE(live[in.tensor] == in.bytes);
                live.erase(in.tensor);
            }
        }
        REQUIRE(live.empty());
    }
}

// Sends and receives pair 1:1 by match_id, between the right programs, with equal bytes.
void check_p2p(const Program& p) {
    struct End {
        int prog, peer;
        double bytes;
    };
    std::map<std::int64_t, std::vector<End>> sends, recvs;
    for (const auto& r : p.ranks)
        for (const auto& in : r.instrs) {
            if (in.kind == InstrKind::send) sends[in.match_id].push_back({r.id, in.peer, in.bytes});
            if (in.kind == InstrKind::recv) recvs[in.match_id].push_back({r.id, in.peer, in.bytes});
        }
    REQUIRE(sends.size() == recvs.size());
    for (const auto& [id, s] : sends) {
        REQUIRE(id != 0);
        REQUIRE(s.size() == 1);
        REQUIRE(recvs.count(id) == 1);
        const auto& rv = recvs[id];
        REQUIRE(rv.size() == 1);
        CHECK(s[0].peer == rv[0].prog);
        CHECK(rv[0].peer == s[0].prog);
        CHECK(s[0].bytes == rv[0].bytes);
    }
}

int count_if(const RankProgram& r, auto pred) {
    int n = 0;
    for (const auto& in : r.instrs)
        if (pred(in)) ++n;
    return n;
}

bool same(const Program& a, const Program& b) {
    if (a.ranks.size() != b.ranks.size() || a.names != b.names || a.events != b.events) return false;
    for (std::size_t r = 0; r < a.ranks.size(); ++r) {
        const auto& x = a.ranks[r].instrs;
        const auto& y = b.ranks[r].instrs;
        if (x.size() != y.size()) return false;
        for (std::size_t i = 0; i < x.size(); ++i) {
            const Instr &p = x[i], &q = y[i];
            if (p.kind != q.kind || p.stream != q.stream || p.op != q.op || p.name != q.name || p.event != q.event ||
                p.match_id != q.match_id || p.tensor != q.tensor || p.flops != q.flops || p.bytes != q.bytes ||
                p.m != q.m || p.n != q.n || p.k != q.k || p.layer != q.layer || p.microbatch != q.microbatch)
                return false;
        }
    }
    return true;
}

}  // namespace

TEST_CASE("single GPU: instructions of one layer and micro-batch", "[lower]") {
    const Program p = lower(small_gpt(), cluster(1), plan(1, 1, 1, 4));
    REQUIRE(p.ranks.size() == 1);
    const auto& r = p.ranks[0];
    auto at = [&](Phase ph) {
        return count_if(r, [&](const Instr& in) { return in.kind == InstrKind::compute && in.layer == 1 && in.microbatch == 2 && in.phase == ph; });
    };
    // Forward: norm1, qkv, attention, proj, residual, norm2, fc1, gelu, fc2, residual = 10.
    CHECK(at(Phase::forward) == 10);
    // Backward: residual, fc2 dgrad+wgrad, gelu, fc1 dgrad+wgrad, norm2, residual, proj dgrad+wgrad,
    // attention, qkv dgrad+wgrad, norm1 = 14.
    CHECK(at(Phase::backward) == 14);
    CHECK(at(Phase::recompute) == 0);
    // No communication at all on one GPU.
    CHECK(count_if(r, [](const Instr& in) { return in.kind == InstrKind::collective || in.kind == InstrKind::send; }) == 0);
    // One GPU optimizer step over all parameters. Hand count (no biases, layernorm, learned pos):
    // per layer 4h^2 + 2hf + 4h = 16384 + 32768 + 256 = 49408; x4 = 197632; embeddings (V + s) h =
    // 10240; head V h = 8192; final norm 2h = 128 -> 216192.
    double opt_params = 0;
    for (const auto& in : r.instrs)
        if (in.kind == InstrKind::compute && in.op == Op::optimizer_gpu) opt_params += in.count;
    CHECK(opt_params == 216192.0);  // exact: a hand count has no tolerance (issue #32)
    // A fused AdamW (apex multi_tensor_adam) reads p, g, m, v and writes p, m, v. The plan here
    // is bf16 with bf16 gradients: the fp32 master read and written (8), the bf16 weights written
    // (2), the gradient read (2), both fp32 moments read and written (16) = 28 bytes a parameter.
    double opt_bytes = 0;
    for (const auto& in : r.instrs)
        if (in.kind == InstrKind::compute && in.op == Op::optimizer_gpu) opt_bytes += in.bytes;
    REQUIRE(plan(1, 1, 1, 4).precision == Precision::bf16);
    REQUIRE(!plan(1, 1, 1, 4).fp32_grads);
    CHECK(opt_bytes == Approx(28.0 * 216192.0).epsilon(1e-12));
    // Useful FLOPs: 3 x forward, tokens = 4 * 32 = 128.
    CHECK(p.model_flops_per_step == Approx(3 * HandFlops{}.forward() * 128).epsilon(1e-9));
    CHECK(p.tokens_per_step == 128);
}

TEST_CASE("QK-norm: one norm over Q and K each way, sized by the rank's heads", "[lower]") {
    // h 64 in 4 heads of 16 (MHA): per token Q and K are 64 wide each. Forward reads and writes
    // them (2 x 2 x 64 x 2 bytes per token), backward reads x and dy and writes dx (3 x ...); with
    // TP 2 each rank holds half the heads. 32 tokens per micro-batch.
    ModelSpec m = small_gpt();
    m.qk_norm = true;
    for (int tp : {1, 2}) {
        Program p = lower(m, cluster(tp), plan(tp, 1, 1, 4));
        const int id = p.name_id("qk_norm");
        double fwd = 0, bwd = 0;
        int n = 0;
        for (const auto& in : p.ranks[0].instrs) {
            if (in.kind != InstrKind::compute || in.name != id || in.layer != 1 || in.microbatch != 2) continue;
            ++n;
            (in.phase == Phase::forward ? fwd : bwd) += in.bytes;
        }
        CHECK(n == 2);
        CHECK(fwd == Approx(2.0 * 32 * 2 * 64 / tp * 2));
        CHECK(bwd == Approx(3.0 * 32 * 2 * 64 / tp * 2));
    }
    Program plain = lower(small_gpt(), cluster(1), plan(1, 1, 1, 4));
    const int none = plain.name_id("qk_norm");  // interned here: no instruction can carry it
    CHECK(count_if(plain.ranks[0], [&](const Instr& in) { return in.name == none; }) == 0);
}

TEST_CASE("FLOPs of the program equal the hand formula for every split", "[lower]") {
    const HandFlops hand;
    const double tokens = 16 * 32;
    struct Case {
        int tp, pp, dp, cp, vpp;
        bool sp;
        Schedule sched;
        Recompute rec;
    };
    const std::vector<Case> cases = {
        {1, 1, 1, 1, 1, false, Schedule::one_f_one_b, Recompute::none},
        {2, 2, 2, 1, 1, false, Schedule::one_f_one_b, Recompute::none},
        {2, 2, 2, 1, 1, true, Schedule::gpipe, Recompute::selective},
        {1, 2, 1, 2, 1, false, Schedule::one_f_one_b, Recompute::full},
        {1, 2, 2, 1, 2, false, Schedule::interleaved_1f1b, Recompute::none},
        {4, 1, 1, 2, 1, true, Schedule::one_f_one_b, Recompute::full},
    };
    for (const auto& c : cases) {
        PlanSpec p = plan(c.tp, c.pp, c.dp, 16);
        p.cp = c.cp;
        p.vpp = c.vpp;
        p.sequence_parallel = c.sp;
        p.schedule = c.sched;
        p.recompute = c.rec;
        const Program prog = lower(small_gpt(), cluster(p.gpus()), p);
        INFO("tp " << c.tp << " pp " << c.pp << " dp " << c.dp << " cp " << c.cp << " vpp " << c.vpp);
        CHECK(program_flops(prog) == Approx(hand.step(c.rec) * tokens).epsilon(0.01));
        CHECK(prog.ranks.size() == static_cast<std::size_t>(c.pp));
        CHECK(prog.ranks[0].multiplicity == c.tp * c.dp * c.cp);
        check_events(prog);
        check_memory_balanced(prog);
        check_p2p(prog);
    }
}

TEST_CASE("tensor parallelism: two all-reduces per layer each way (Megatron)", "[lower]") {
    PlanSpec p = plan(2, 1, 1, 2);
    Program prog = lower(small_gpt(), cluster(2), p);
    const auto& r = prog.ranks[0];
    auto n = [&](Phase ph, CollKind k) {
        return count_if(r, [&](const Instr& in) {
            return in.kind == InstrKind::collective && in.group == Group::tp && in.coll == k && in.layer == 0 && in.microbatch == 0 && in.phase == ph;
        });
    };
    CHECK(n(Phase::forward, CollKind::all_reduce) == 2);
    CHECK(n(Phase::backward, CollKind::all_reduce) == 2);
    // Bytes: b*s*h*2 = 1*32*64*2 = 4096, nccl-tests' S; so is the vocab-parallel embedding's
    // all-reduce of its partial lookups. The loss gathers 3 fp32 numbers per token from each TP
    // rank: 32 tokens x 3 x 2 ranks x 4 B = 768.
    int loss_gathers = 0, emb_reduces = 0;
    for (const auto& in : r.instrs) {
        if (in.kind != InstrKind::collective || in.group != Group::tp) continue;
        if (in.coll == CollKind::all_gather) {
            CHECK(in.bytes == 768);
            ++loss_gathers;
        } else {
            CHECK(in.bytes == 4096);
            if (in.layer < 0 && in.phase == Phase::forward) ++emb_reduces;
        }
    }
    CHECK(loss_gathers == p.micro_batches());
    CHECK(emb_reduces == p.micro_batches());
    // With sequence parallelism: forward all-gather + reduce-scatter per block (2 + 2).
    p.sequence_parallel = true;
    const Program sp = lower(small_gpt(), cluster(2), p);
    auto m = [&](Phase ph, CollKind k) {
        return count_if(sp.ranks[0], [&](const Instr& in) {
            return in.kind == InstrKind::collective && in.group == Group::tp && in.coll == k && in.layer == 0 && in.microbatch == 0 && in.phase == ph;
        });
    };
    CHECK(m(Phase::forward, CollKind::all_gather) == 2);
    CHECK(m(Phase::forward, CollKind::reduce_scatter) == 2);
    CHECK(m(Phase::forward, CollKind::all_reduce) == 0);
    CHECK(m(Phase::backward, CollKind::reduce_scatter) == 2);
}

TEST_CASE("data parallel gradient reduction carries every gradient once", "[lower]") {
    // ZeRO 0, dp = 2, one stage: all-reduces over the dp group sum to 2 bytes x 216192 params.
    for (bool overlap : {true, false}) {
        PlanSpec p = plan(1, 1, 2, 4);
        p.overlap_grad_reduce = overlap;
        p.dp_bucket_bytes = 100000;
        Program prog = lower(small_gpt(), cluster(2), p);
        double bytes = 0;
        int n = 0;
        for (const auto& in : prog.ranks[0].instrs)
            if (in.kind == InstrKind::collective && in.group == Group::dp) {
                CHECK(in.coll == CollKind::all_reduce);
                CHECK(in.group_size == 2);
                bytes += in.bytes;
                ++n;
            }
        CHECK(bytes == 2 * 216192.0);
        // 432384 B of gradients. Overlapped, buckets close once they reach 100 kB as layers finish
        // (Megatron DDP): head 16640 + layer 98816 -> 115456 | 2 layers 197632 | layer + embedding
        // 98816 + 20480 = 119296 -> 3 buckets. At the end: ceil(432384 / 100000) = 5 buckets.
        CHECK(n == (overlap ? 3 : 5));
    }
    // ZeRO 1: reduce-scatter of grads, then an all-gather of the updated params (2 x 216192 B)
    // over the same buckets (Megatron shares them, so each rank gathers the slices it reduced).
    // Without overlap_param_gather: the gathers follow the optimizer. With it: at the start of the
    // step, last bucket first (forward order), each layer's first forward waiting for its bucket.
    PlanSpec p1 = plan(1, 1, 2, 4);
    p1.zero_stage = 1;
    p1.dp_bucket_bytes = 100000;
    p1.overlap_param_gather = false;
    const Program z1 = lower(small_gpt(), cluster(2), p1);
    CHECK(count_if(z1.ranks[0], [](const Instr& in) { return in.kind == InstrKind::collective && in.coll == CollKind::reduce_scatter; }) >= 1);
    auto gathers = [](const Program& pr, Phase ph, double* bytes) {
        int n = 0;
        for (const auto& in : pr.ranks[0].instrs)
            if (in.kind == InstrKind::collective && in.coll == CollKind::all_gather && in.phase == ph) {
                ++n;
                *bytes += in.bytes;
            }
        return n;
    };
    double b_end = 0, b_start = 0;
    CHECK(gathers(z1, Phase::optimizer, &b_end) == 3);
    CHECK(b_end == 2 * 216192.0);
    p1.overlap_param_gather = true;
    const Program z1o = lower(small_gpt(), cluster(2), p1);
    CHECK(gathers(z1o, Phase::optimizer, &b_end) == 0);
    // The three gradient buckets above, in forward order.
    CHECK(gathers(z1o, Phase::forward, &b_start) == 3);
    CHECK(b_start == 2 * 216192.0);
}

TEST_CASE("fp32 gradients double the DP reduction's bytes, not the parameter gathers'", "[lower]") {
    // Megatron's default for bf16: gradients accumulated and reduced in fp32 (4 bytes x 216192
    // parameters); the updated bf16 parameters are still gathered at 2 bytes each.
    for (bool overlap : {true, false}) {
        PlanSpec p = plan(1, 1, 2, 4);
        p.zero_stage = 1;
        p.overlap_grad_reduce = overlap;
        p.dp_bucket_bytes = 100000;
        p.fp32_grads = true;
        Program prog = lower(small_gpt(), cluster(2), p);
        double rs = 0, ag = 0;
        for (const auto& in : prog.ranks[0].instrs)
            if (in.kind == InstrKind::collective && in.group == Group::dp) {
                if (in.coll == CollKind::reduce_scatter) rs += in.bytes;
                if (in.coll == CollKind::all_gather) ag += in.bytes;
            }
        INFO("overlap " << overlap);
        CHECK(rs == 4 * 216192.0);
        CHECK(ag == 2 * 216192.0);
    }
}

TEST_CASE("ZeRO-3 gathers each layer before its forward and backward", "[lower]") {
    PlanSpec p = plan(1, 1, 4, 8);  // 2 micro-batches
    p.zero_stage = 3;
    const Program prog = lower(small_gpt(), cluster(4), p);
    const auto& r = prog.ranks[0];
    // 4 layers x 2 micro-batches x (forward + backward) = 16 all-gathers, 8 reduce-scatters.
    CHECK(count_if(r, [](const Instr& in) { return in.kind == InstrKind::collective && in.coll == CollKind::all_gather && in.layer >= 0; }) == 16);
    CHECK(count_if(r, [](const Instr& in) { return in.kind == InstrKind::collective && in.coll == CollKind::reduce_scatter && in.layer >= 0; }) == 8);
    check_events(prog);
    check_memory_balanced(prog);
}

TEST_CASE("full mode: one program per GPU, matched collectives, MoE skew", "[lower]") {
    ModelSpec m = small_gpt();
    m.moe = strata::test::moe_spec(4, 2);
    m.moe->load_skew = 0.5;
    PlanSpec p = plan(2, 2, 2, 8);
    p.ep = 2;
    LowerOptions o;
    o.full_mode = true;
    const Program prog = lower(m, cluster(8), p, o);
    REQUIRE(prog.ranks.size() == 8);
    check_events(prog);
    check_p2p(prog);
    check_memory_balanced(prog);
    // Every matched collective id is reached by exactly `participants` programs.
    std::map<std::int64_t, int> seen, want;
    for (const auto& r : prog.ranks)
        for (const auto& in : r.instrs)
            if (in.kind == InstrKind::collective) {
                REQUIRE(in.match_id != 0);
                ++seen[in.match_id];
                want[in.match_id] = in.participants;
            }
    for (const auto& [id, n] : seen) CHECK(n == want[id]);
    // MoE skew: global rank 0 is EP rank 0 (hot, 1.5x), rank 2 is EP rank 1 (0.5x): expert GEMM
    // FLOPs 3:1. Uniform total: tokens*top_k conserved -> (1.5 + 0.5) / 2 = 1.
    auto expert_flops = [&](int rank) {
        double f = 0;
        for (const auto& in : prog.ranks[static_cast<std::size_t>(rank)].instrs)
            if (in.kind == InstrKind::compute && in.op == Op::gemm && in.batch > 1) f += in.flops;
        return f;
    };
    CHECK(expert_flops(0) == Approx(3 * expert_flops(2)).epsilon(0.01));
}

TEST_CASE("lowering is deterministic", "[lower]") {
    PlanSpec p = plan(2, 2, 2, 16);
    p.sequence_parallel = true;
    p.zero_stage = 1;
    p.recompute = Recompute::selective;
    const Program a = lower(small_gpt(), cluster(8), p);
    const Program b = lower(small_gpt(), cluster(8), p);
    CHECK(same(a, b));
    LowerOptions full;
    full.full_mode = true;
    CHECK(same(lower(small_gpt(), cluster(8), p, full), lower(small_gpt(), cluster(8), p, full)));
    // Without memory instructions the compute and communication stay the same.
    LowerOptions no_mem;
    no_mem.emit_memory = false;
    const Program c = lower(small_gpt(), cluster(8), p, no_mem);
    int allocs = 0;
    for (const auto& r : c.ranks) allocs += count_if(r, [](const Instr& in) { return in.kind == InstrKind::alloc || in.kind == InstrKind::free; });
    CHECK(allocs == 0);
    CHECK(program_flops(c) == program_flops(a));
}

TEST_CASE("GPT-3 175B on 1024 GPUs lowers (size check)", "[lower][slow]") {
    ModelSpec m = strata::test::gpt_shape("", 96, 12288, 96, 51200, 2048);
    PlanSpec p = plan(8, 16, 8, 1536);  // m = 192
    p.sequence_parallel = true;
    p.zero_stage = 1;
    const Program prog = lower(m, cluster(1024), p);
    CHECK(prog.ranks.size() == 16);
    CHECK(prog.ranks[0].multiplicity == 64);
}

TEST_CASE("every layer runs forward once per micro-batch, on the right virtual stage", "[lower]") {
    // pp = 2, vpp = 2, 4 layers: virtual stages v = chunk*pp + stage hold layers 0,1,2,3 in order,
    // so stage 0 holds layers {0 (chunk 0), 2 (chunk 1)} and stage 1 holds {1, 3}.
    PlanSpec p = plan(1, 2, 1, 4);
    p.vpp = 2;
    p.schedule = Schedule::interleaved_1f1b;
    Program prog = lower(small_gpt(), cluster(2), p);
    std::map<std::pair<int, int>, std::set<int>> layers;  // (stage, chunk) -> layers
    std::map<int, int> qkv_per_layer;
    for (const auto& r : prog.ranks)
        for (const auto& in : r.instrs)
            if (in.kind == InstrKind::compute && in.phase == Phase::forward && in.op == Op::gemm &&
                prog.names[static_cast<std::size_t>(in.name)] == "qkv") {
                layers[{r.pp_stage, in.chunk}].insert(in.layer);
                ++qkv_per_layer[in.layer];
            }
    CHECK(layers[{0, 0}] == std::set<int>{0});
    CHECK(layers[{1, 0}] == std::set<int>{1});
    CHECK(layers[{0, 1}] == std::set<int>{2});
    CHECK(layers[{1, 1}] == std::set<int>{3});
    for (int l = 0; l < 4; ++l) CHECK(qkv_per_layer[l] == 4);  // 4 micro-batches
}

// Instr keeps fields of kinds that never meet in shared storage (program.hpp): each kind must read
// back its own values. Shapes by hand for the small GPT with tp 2 (b = 1, s = 32, h = 64, 4 heads
// of 16, f = 256, GELU): forward QKV (m, n, k) = (s, 3h/tp, h) = (32, 96, 64); fc1 = (32, f/tp, h) =
// (32, 128, 64); attention (sq, skv, head_dim) = (32, 32, 16) over b*heads/tp = 2 heads.
TEST_CASE("instruction fields that share storage read back per kind", "[lower]") {
    static_assert(sizeof(Instr) == 64);
    Program p = lower(small_gpt(), cluster(4), plan(2, 2, 1, 4));
    REQUIRE(p.ranks.size() == 2);
    const int qkv = p.name_id("qkv"), fc1 = p.name_id("fc1");  // already interned: looks up
    int checked_qkv = 0, checked_attn = 0, sends = 0, allocs = 0, colls = 0;
    for (const auto& r : p.ranks)
        for (const auto& in : r.instrs) {
            switch (in.kind) {
                case InstrKind::compute:
                    if (in.phase == Phase::forward && in.op == Op::gemm && in.name == qkv) {
                        CHECK(in.m == 32);
                        CHECK(in.n == 96);
                        CHECK(in.k == 64);
                        CHECK(in.batch == 1);
                        ++checked_qkv;
                    }
                    if (in.phase == Phase::forward && in.op == Op::gemm && in.name == fc1) CHECK(in.n == 128);
                    if (in.op == Op::attention_fwd) {
                        CHECK(in.m == 32);
                        CHECK(in.n == 32);
                        CHECK(in.k == 16);
                        CHECK(in.batch == 2);
                        ++checked_attn;
                    }
                    break;
                case InstrKind::collective:
                    // Symmetric mode: peers share the program, nothing to match.
                    CHECK(in.match_id == 0);
                    CHECK(in.participants == 1);
                    CHECK(in.group_size == 2);  // only TP collectives: dp = cp = 1
                    ++colls;
                    break;
                case InstrKind::send:
                case InstrKind::recv:
                    CHECK(in.peer == 1 - r.id);  // two stages: the other one
                    CHECK(in.match_id != 0);
                    ++sends;
                    break;
                case InstrKind::alloc:
                case InstrKind::free:
                    CHECK(in.tensor >= 0);
                    CHECK(in.tag >= 0);
                    CHECK(in.tag < kTensorTagCount);
                    ++allocs;
                    break;
                case InstrKind::record:
                case InstrKind::wait:
                    CHECK(in.event >= 0);
                    CHECK(in.event < p.events);
                    break;
                default: break;
            }
        }
    // 4 micro-batches x 2 layers per stage x 2 stages: one forward QKV and one attention each.
    CHECK(checked_qkv == 16);
    CHECK(checked_attn == 16);
    CHECK(colls > 0);
    CHECK(sends == 4 * 2 * 2);  // per micro-batch: activation send + recv, gradient send + recv
    CHECK(allocs > 0);
}
