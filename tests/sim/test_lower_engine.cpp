// Lowered programs run through the engine with a fake cost model: every schedule and feature mix
// must finish (no deadlock between rendezvous send/recv and matched collectives), 1F1B must beat
// GPipe's bubble, and the engine's GPU peak must equal the analytical memory model (memory.hpp)
// on the same plan, because both read the one tensor list (tensors.hpp).
#include <catch2/catch.hpp>

#include "strata/sim/engine.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/spec.hpp"
#include "strata/lowering/tensors.hpp"
#include "support/gpt.hpp"
#include "unit_costs.hpp"

using namespace strata::sim;

namespace {

ModelSpec gpt(int layers) {
    ModelSpec m;
    m.layers = layers;
    m.hidden = 256;
    m.heads = 8;
    m.kv_heads = 8;
    m.head_dim = 32;
    m.ffn_hidden = 1024;
    m.vocab = 512;
    m.seq_len = 128;
    m.max_position = 128;
    return m;
}

ClusterSpec cluster(int gpus) {
    ClusterSpec c;
    c.gpus_per_node = 8;
    c.nodes = (gpus + 7) / 8;
    return c;
}

SimResult run(const Program& p) {
    test::UnitCosts cost;
    EngineOptions eo;
    eo.memory.caching_allocator = false;
    eo.memory.fragmentation = 0;
    eo.critical_path = false;
    return simulate_program(p, cost, nullptr, eo);
}

// The engine's GPU peak per stage against memory_estimate, both without the fixed framework
// reserve (which would hide a wrong activation count).
void check_peaks_match_model(const ModelSpec& m, const PlanSpec& p, const SimResult& r) {
    Capacities caps;
    caps.hbm_bytes = 80e9;
    caps.cpu_bytes_per_node = 1e12;
    caps.ssd_bytes_per_node = 1e13;
    const MemoryReport rep = memory_estimate(m, p, caps);
    for (int st = 0; st < p.pp; ++st) {
        INFO("stage " << st);
        const double engine = r.ranks[static_cast<std::size_t>(st)].peak_bytes[0] - kFrameworkReserveBytes;
        const double model = rep.stages[static_cast<std::size_t>(st)].tier_bytes[0] - kFrameworkReserveBytes;
        CHECK(model > 1e6);
        const auto& bd = r.ranks[static_cast<std::size_t>(st)].peak_breakdown[0];
        const auto& ms = rep.stages[static_cast<std::size_t>(st)];
        INFO("engine weights/grads/optimizer/activations/buffers " << bd[0] << " " << bd[1] << " " << bd[2] << " " << bd[3] << " " << bd[4] << " model act " << ms.activations_bytes << " ws " << ms.workspace_bytes << " buf " << ms.buffers_bytes << " inflight " << ms.in_flight_microbatches);
        CHECK(engine == Approx(model).epsilon(1e-6));
    }
}

// Two pipeline stages, four micro-batches, `vpp` chunks each (interleaved when more than one).
PlanSpec two_stages(int vpp, bool grad_accum_fusion) {
    PlanSpec p;
    p.pp = 2;
    p.vpp = vpp;
    p.global_batch = 4;
    p.schedule = vpp > 1 ? Schedule::interleaved_1f1b : Schedule::one_f_one_b;
    p.grad_accum_fusion = grad_accum_fusion;
    return p;
}

// Runs the plan in the engine, checks its peaks against the memory model, returns the model's report.
MemoryReport engine_matches_model(const ModelSpec& m, const PlanSpec& p) {
    const SimResult r = run(lower(m, cluster(p.gpus()), p));
    REQUIRE_FALSE(r.deadlock);
    check_peaks_match_model(m, p, r);
    Capacities caps;
    caps.hbm_bytes = 80e9;
    return memory_estimate(m, p, caps);
}

}  // namespace

TEST_CASE("lowered programs finish in the engine for every schedule and feature", "[lower][engine]") {
    struct Case {
        const char* what;
        int tp, pp, dp, cp, ep, vpp, gb;
        Schedule sched;
        int zero;
        bool full, moe, offload, lock_free;
    };
    const std::vector<Case> cases = {
        {"1f1b pp4", 1, 4, 1, 1, 1, 1, 8, Schedule::one_f_one_b, 0, false, false, false, false},
        {"gpipe pp4", 1, 4, 1, 1, 1, 1, 8, Schedule::gpipe, 0, false, false, false, false},
        {"interleaved pp4 vpp2", 1, 4, 1, 1, 1, 2, 8, Schedule::interleaved_1f1b, 0, false, false, false, false},
        {"interleaved m == pp", 1, 2, 1, 1, 1, 2, 2, Schedule::interleaved_1f1b, 0, false, false, false, false},
        {"3d full mode", 2, 2, 2, 1, 1, 1, 8, Schedule::one_f_one_b, 1, true, false, false, false},
        {"interleaved full mode", 2, 2, 1, 2, 1, 2, 4, Schedule::interleaved_1f1b, 0, true, false, false, false},
        {"zero3 dp4", 1, 1, 4, 1, 1, 1, 8, Schedule::one_f_one_b, 3, false, false, false, false},
        {"moe ep2 full", 1, 2, 2, 1, 2, 1, 4, Schedule::one_f_one_b, 1, true, true, false, false},
        {"offload + lock-free", 1, 2, 1, 1, 1, 1, 4, Schedule::one_f_one_b, 0, false, false, true, true},
        {"gpipe with chunks", 1, 2, 1, 1, 1, 2, 4, Schedule::gpipe, 0, false, false, false, false},
        {"zero3 + offload full mode", 1, 2, 2, 1, 1, 1, 4, Schedule::one_f_one_b, 3, true, false, true, false},
        {"cp2 tp2 full mode", 2, 2, 1, 2, 1, 1, 4, Schedule::one_f_one_b, 2, true, false, false, false},
    };
    for (const auto& c : cases) {
        INFO(c.what);
        ModelSpec m = gpt(8);
        m.tied_embeddings = true;  // exercises the first/last stage embedding all-reduce
        if (c.moe) {
            m.moe = strata::test::moe_spec(4, 2);
            m.moe->load_skew = 0.3;
        }
        PlanSpec p;
        p.tp = c.tp;
        p.pp = c.pp;
        p.dp = c.dp;
        p.cp = c.cp;
        p.ep = c.ep;
        p.vpp = c.vpp;
        p.global_batch = c.gb;
        p.schedule = c.sched;
        p.zero_stage = c.zero;
        p.lock_free_update = c.lock_free;
        if (c.offload) {
            p.offload.optimizer = TierSplit{0, 0.5, 0.5};
            p.offload.params = TierSplit{0.5, 0.5, 0};
            p.offload.activations = TierSplit{0.5, 0.5, 0};
        }
        LowerOptions o;
        o.full_mode = c.full;
        o.ssd_sub_group_params = 1e5;  // several SSD sub-groups, so the swap pipeline runs
        const Program prog = lower(m, cluster(p.gpus()), p, o);
        const SimResult r = run(prog);
        INFO(r.deadlock_detail);
        CHECK_FALSE(r.deadlock);
        CHECK(r.step_time_ns > 0);
    }
}

TEST_CASE("1F1B has the same bubble as GPipe but holds fewer micro-batches", "[lower][engine]") {
    // Narayanan et al. (SC21) §2.2: both schedules idle (pp-1)/m of the step; 1F1B keeps at most
    // pp micro-batches of activations on stage 0 instead of m.
    PlanSpec p;
    p.pp = 4;
    p.global_batch = 16;
    p.schedule = Schedule::gpipe;
    const SimResult g = run(lower(gpt(8), cluster(4), p));
    p.schedule = Schedule::one_f_one_b;
    const SimResult f = run(lower(gpt(8), cluster(4), p));
    REQUIRE_FALSE(g.deadlock);
    REQUIRE_FALSE(f.deadlock);
    CHECK(f.ranks[0].peak_bytes[0] < g.ranks[0].peak_bytes[0]);
    CHECK(static_cast<double>(f.step_time_ns) == Approx(static_cast<double>(g.step_time_ns)).epsilon(0.10));
}

TEST_CASE("engine GPU peak equals the analytical memory model", "[lower][engine][memory]") {
    for (Schedule s : {Schedule::one_f_one_b, Schedule::gpipe}) {
        for (Recompute rc : {Recompute::none, Recompute::selective, Recompute::full}) {
            PlanSpec p;
            p.pp = 4;
            p.tp = 2;
            p.global_batch = 8;
            p.schedule = s;
            p.recompute = rc;
            const ModelSpec m = gpt(8);
            const SimResult r = run(lower(m, cluster(8), p));
            REQUIRE_FALSE(r.deadlock);
            INFO("schedule " << to_string(s) << " recompute " << to_string(rc));
            check_peaks_match_model(m, p, r);
        }
    }
}

TEST_CASE("engine GPU peak equals the memory model with SP, CP, ZeRO, interleaving, offload", "[lower][engine][memory]") {
    struct Case {
        const char* what;
        int tp, pp, dp, cp, vpp, gb, zero;
        bool sp;
        Schedule sched;
        bool offload_act;
    };
    const std::vector<Case> cases = {
        {"tp2 sp", 2, 2, 1, 1, 1, 4, 0, true, Schedule::one_f_one_b, false},
        {"cp2", 1, 2, 1, 2, 1, 4, 0, false, Schedule::one_f_one_b, false},
        {"dp2 zero1", 1, 2, 2, 1, 1, 8, 1, false, Schedule::one_f_one_b, false},
        {"dp2 zero3", 1, 1, 2, 1, 1, 4, 3, false, Schedule::one_f_one_b, false},
        {"interleaved", 1, 2, 1, 1, 2, 4, 0, false, Schedule::interleaved_1f1b, false},
        {"activation offload", 1, 2, 1, 1, 1, 4, 0, false, Schedule::one_f_one_b, true},
    };
    for (const auto& c : cases) {
        PlanSpec p;
        p.tp = c.tp;
        p.pp = c.pp;
        p.dp = c.dp;
        p.cp = c.cp;
        p.vpp = c.vpp;
        p.global_batch = c.gb;
        p.zero_stage = c.zero;
        p.sequence_parallel = c.sp;
        p.schedule = c.sched;
        if (c.offload_act) p.offload.activations = TierSplit{0.5, 0.5, 0};
        const ModelSpec m = gpt(8);
        const SimResult r = run(lower(m, cluster(p.gpus()), p));
        REQUIRE_FALSE(r.deadlock);
        INFO(c.what);
        check_peaks_match_model(m, p, r);
    }
}

// DeepSpeed's PipelineEngine keeps a 1/tp slice of each sent output until its micro-batch's
// backward and regathers the whole output for it. gpt(8) at tp 2, pp 4, m = 8, 1F1B, recompute
// full and not: stage r holds pp - r slices; the peak on stages 0-2 must grow by exactly
// (pp - r) s b h / tp + s b h activation bytes over the same plan without DeepSpeed's engine, and
// the engine must agree with the model on both.
TEST_CASE("DeepSpeed's pipe engine: kept output slices and the regathered output", "[lower][engine][memory]") {
    const ModelSpec m = gpt(8);
    for (Recompute rc : {Recompute::none, Recompute::full}) {
        PlanSpec p;
        p.tp = 2, p.pp = 4;
        p.global_batch = 8;
        p.recompute = rc;
        p.p2p_scatter_gather = true;
        PlanSpec ds = p;
        ds.p2p_blocking = true;
        const MemoryReport plain = engine_matches_model(m, p);
        const MemoryReport deep = engine_matches_model(m, ds);
        const double sbh = 2.0 * m.seq_len * 1 * m.hidden;  // bytes of one (s, b, h) tensor, b = 1
        for (int r = 0; r < 4; ++r) {
            INFO("stage " << r << " recompute " << static_cast<int>(rc));
            const double extra = r < 3 ? (4 - r) * sbh / 2 + sbh : 0.0;
            CHECK(deep.stages[static_cast<std::size_t>(r)].tier_bytes[0] - plain.stages[static_cast<std::size_t>(r)].tier_bytes[0] ==
                  Approx(extra).margin(1.0));
        }
    }
}

// torch.distributed.pipelining (torchtitan's PP) keeps each stage's whole output until its
// micro-batch's backward (fwd_cache) and holds a gradient receive buffer per micro-batch for the
// step (stage.py _prepare_backward_infra) instead of one send and one receive buffer. gpt(8) at
// pp 4, m = 8, 1F1B: stage r keeps pp - r outputs, and stages 0-2 hold 8 buffers for 2, so the
// peak grows by (pp - r + 8 - 2) s b h on stages 0-2 and falls by 2 s b h on the last. Interleaved
// (vpp 2, m 8): each of a rank's chunks but the model's last receives gradients from another
// rank, so rank 3 holds 8 buffers and the others 16. The engine agrees with the model on all.
TEST_CASE("torch's pipeline: kept outputs and a gradient buffer per micro-batch", "[lower][engine][memory]") {
    const ModelSpec m = gpt(8);
    const double sbh = 2.0 * m.seq_len * 1 * m.hidden;  // bytes of one (s, b, h) tensor, b = 1
    for (Recompute rc : {Recompute::none, Recompute::full}) {
        PlanSpec p;
        p.pp = 4;
        p.global_batch = 8;
        p.recompute = rc;
        PlanSpec tp = p;
        tp.torch_pipelining = true;
        const MemoryReport plain = engine_matches_model(m, p);
        const MemoryReport torch = engine_matches_model(m, tp);
        for (int r = 0; r < 4; ++r) {
            INFO("stage " << r << " recompute " << static_cast<int>(rc));
            const double extra = r < 3 ? (4 - r + 8 - 2) * sbh : -2 * sbh;
            CHECK(torch.stages[static_cast<std::size_t>(r)].tier_bytes[0] - plain.stages[static_cast<std::size_t>(r)].tier_bytes[0] ==
                  Approx(extra).margin(1.0));
        }
    }
    PlanSpec il;
    il.pp = 4;
    il.vpp = 2;
    il.global_batch = 8;
    il.schedule = Schedule::interleaved_1f1b;
    il.torch_pipelining = true;
    const std::vector<TensorDesc> last = stage_buffers(m, il, 3), first = stage_buffers(m, il, 0);
    auto grad_recv = [](const std::vector<TensorDesc>& list) {
        double b = 0;
        for (const TensorDesc& d : list)
            if (d.name == "pp.grad_recv") b += d.bytes;
        return b;
    };
    CHECK(grad_recv(last) == Approx(8 * sbh));
    CHECK(grad_recv(first) == Approx(16 * sbh));
    engine_matches_model(m, il);
}

TEST_CASE("engine GPU peak equals the memory model when the embedding's backward sets it", "[lower][engine][memory]") {
    // A 64k vocabulary on a 256-wide model: stage 0's dense embedding gradient (32 MB at tp 1)
    // outweighs a recomputed layer's backward, so the peak falls at the embedding's backward,
    // after the micro-batch's layers have released their inputs.
    ModelSpec m = gpt(8);
    m.vocab = 65536;
    for (int vpp : {1, 2})
        for (bool fused : {true, false}) {
            PlanSpec p = two_stages(vpp, fused);
            p.recompute = Recompute::full;
            INFO("vpp " << vpp << " fused " << fused);
            const MemoryReport rep = engine_matches_model(m, p);
            // 65536 x 256 x 2 B table + (128 x 256 x 2 B) output gradient, less the inputs of the
            // micro-batch's chunk-0 layers (2 B x 128 x 256 each) it no longer holds.
            const double chunk0_layers = vpp > 1 ? 2 : 4;
            CHECK(rep.stages[0].workspace_bytes == Approx(65536.0 * 256 * 2 + 128.0 * 256 * 2 - chunk0_layers * 128 * 256 * 2));
        }
}

TEST_CASE("engine GPU peak equals the memory model when a rank's chunks differ", "[lower][engine][memory]") {
    // Interleaved and V schedules hold each chunk's micro-batches in its own count; with uneven
    // chunks (a hand-laid split, the head's chunk, an MTP module) the model replays the schedule
    // and takes its largest held state, which the engine must reach exactly.
    struct Case {
        const char* what;
        int pp, gb;
        Schedule sched;
        std::vector<int> virtual_split;
        int mtp;
    };
    const std::vector<Case> cases = {
        {"interleaved, even", 2, 8, Schedule::interleaved_1f1b, {}, 0},
        {"interleaved, laid out 3|1|1|3", 2, 8, Schedule::interleaved_1f1b, {3, 1, 1, 3}, 0},
        {"interleaved, laid out 1|3|3|1", 2, 8, Schedule::interleaved_1f1b, {1, 3, 3, 1}, 0},
        {"interleaved, m == pp: rank 0 all forwards, rank 1 reaches 1F1B", 2, 2, Schedule::interleaved_1f1b, {}, 0},
        {"dualpipev, even", 2, 8, Schedule::dualpipe_v, {}, 0},
        {"dualpipev, pp 4", 4, 12, Schedule::dualpipe_v, {}, 0},
        {"dualpipev, MTP on rank 0's second chunk", 4, 12, Schedule::dualpipe_v, {}, 1},
        {"dualpipev, laid out", 2, 8, Schedule::dualpipe_v, {3, 2, 1, 2}, 0},
    };
    for (const auto& c : cases) {
        PlanSpec p;
        p.pp = c.pp;
        p.vpp = 2;
        p.global_batch = c.gb;
        p.schedule = c.sched;
        p.virtual_layer_split = c.virtual_split;
        ModelSpec m = gpt(8);
        m.mtp_depth = c.mtp;
        const SimResult r = run(lower(m, cluster(p.gpus()), p));
        INFO(c.what);
        REQUIRE_FALSE(r.deadlock);
        check_peaks_match_model(m, p, r);
    }
}

TEST_CASE("a larger micro-batch group holds more; empty virtual stages run and match the memory model", "[lower][engine][memory]") {
    // Layouts whose first and last virtual stages hold only the embedding or the loss (Llama 3's
    // 405B pipeline, arXiv 2407.21783 Sec. 3.3.2) must lower, finish and hold what the memory
    // model says; and one group of all micro-batches holds more than groups of pp + 1.
    struct Case {
        const char* what;
        int layers, pp, vpp, gb, group;
        std::vector<int> virtual_split;
    };
    const std::vector<Case> cases = {
        {"pp 4, m 10 in groups of 5", 8, 4, 2, 10, 5, {}},
        {"pp 4, m 10 in one group", 8, 4, 2, 10, 10, {}},
        {"pp 2 x 4 chunks, embedding and loss alone", 6, 2, 4, 4, 0, {0, 1, 1, 1, 1, 1, 1, 0}},
    };
    double peak_group5 = 0, peak_group10 = 0;
    for (const auto& c : cases) {
        INFO(c.what);
        PlanSpec p;
        p.pp = c.pp;
        p.vpp = c.vpp;
        p.global_batch = c.gb;
        p.microbatch_group = c.group;
        p.schedule = Schedule::interleaved_1f1b;
        p.virtual_layer_split = c.virtual_split;
        const ModelSpec m = gpt(c.layers);
        const SimResult r = run(lower(m, cluster(p.gpus()), p));
        INFO(r.deadlock_detail);
        REQUIRE_FALSE(r.deadlock);
        check_peaks_match_model(m, p, r);
        if (c.gb == 10) (c.group == 5 ? peak_group5 : peak_group10) = r.ranks[0].peak_bytes[0];
    }
    // One group of 10 runs (vpp - 1) x 5 more warm-up forwards on rank 0 than groups of 5.
    CHECK(peak_group10 > peak_group5);
}

TEST_CASE("engine GPU peak equals the memory model when the head's transient sets it", "[lower][engine][memory]") {
    // A 64k vocabulary, 64 tokens of width 256: the logits (4M elements) and the head's weight
    // (16M) outweigh a layer's backward on the last stage. Hand counts from Megatron's
    // cross_entropy.py: an upcasting loss keeps the fp32 softmax (4 B) and has a 2 B cast beside
    // it; its unfused weight gradient (2 B) comes once the fp32 softmax is freed. A loss that
    // keeps the logits in their dtype (2 B) writes a 2 B gradient, beside which the weight
    // gradient is formed.
    ModelSpec m = gpt(8);
    m.vocab = 65536;
    m.seq_len = 64;
    const double logits = 64.0 * 65536, weight = 2.0 * 65536 * 256;
    for (int vpp : {1, 2})
        for (bool upcast : {true, false})
            for (bool fused : {true, false}) {
                PlanSpec p = two_stages(vpp, fused);
                p.loss_upcast = upcast;
                INFO("vpp " << vpp << " upcast " << upcast << " fused " << fused);
                const MemoryReport rep = engine_matches_model(m, p);
                const double want = upcast ? (fused ? 2 * logits : weight - 2 * logits) : 2 * logits + (fused ? 0 : weight);
                CHECK(rep.stages[1].workspace_bytes == Approx(want));
                // The stash: fp32 logits, or the logits in their own dtype.
                double stash = 0;
                for (const TensorDesc& d : logits_activations(m, p))
                    if (d.name == "lm_head.logits") stash = d.bytes;
                CHECK(stash == Approx((upcast ? 4 : 2) * logits));
            }
}
TEST_CASE("every valid micro-batch group runs and matches the memory model", "[lower][engine][memory]") {
    // Megatron-Core's rule admits any group pp <= N <= m whose last group is empty or at least pp
    // long. Each must finish in the engine (a rank's activation and gradient sends to a neighbour
    // come in a different order than the neighbour takes them once N > pp, which one FIFO pair for
    // both directions deadlocks on) and hold what the memory model's replay says.
    int plans = 0;
    for (int pp = 2; pp <= 5; ++pp)
        for (int vpp = 2; vpp <= 3; ++vpp)
            for (int micro = pp; micro <= 3 * pp; ++micro)
                for (int group = pp; group <= micro; ++group) {
                    if (!valid_microbatch_group(micro, pp, group)) continue;
                    INFO("pp " << pp << " vpp " << vpp << " m " << micro << " group " << group);
                    PlanSpec p;
                    p.pp = pp;
                    p.vpp = vpp;
                    p.global_batch = micro;
                    p.microbatch_group = group;
                    p.schedule = Schedule::interleaved_1f1b;
                    const ModelSpec m = gpt(pp * vpp);
                    const SimResult r = run(lower(m, cluster(p.gpus()), p));
                    INFO(r.deadlock_detail);
                    REQUIRE_FALSE(r.deadlock);
                    check_peaks_match_model(m, p, r);
                    ++plans;
                }
    CHECK(plans == 134);
}

TEST_CASE("engine GPU peak equals the memory model under CP's K/V all-gather", "[lower][engine][memory][cp]") {
    // The backward holds the other ranks' K/V chunks and each block's K/V gradient until the one
    // reduce-scatter: 2 (cp - 1) chunks of (s/cp, b, 2 kv_heads x head_dim) in bf16 beyond the
    // ring's workspace.
    const ModelSpec m = gpt(4);
    PlanSpec p;
    p.cp = 4;
    p.global_batch = 2;
    p.flash_attention = true;
    const PlanSpec ring = p;
    p.cp_comm_type = CpCommType::allgather;
    const MemoryReport gathered = engine_matches_model(m, p);
    auto layer_ws = [&](const PlanSpec& q) {
        double b = 0;
        for (const TensorDesc& d : layer_backward_workspace(m, q, 0, false)) b += d.bytes;
        return b;
    };
    const double chunk = (128.0 / 4) * 1 * (2 * 8 * 32) * 2;
    CHECK(layer_ws(p) - layer_ws(ring) == Approx(2 * 3 * chunk));
    CHECK(gathered.hbm_bytes > engine_matches_model(m, ring).hbm_bytes);
}
