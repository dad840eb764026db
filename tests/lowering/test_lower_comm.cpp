// Lowering of communication on the small GPT: the byte counts of each parallelism's traffic,
// blocking pipeline p2p (DeepSpeed) and ring attention. Expected values are derived by hand in the
// comments.
#include <catch2/catch.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/lower.hpp"
#include "support/gpt.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;
using strata::test::cluster;
using strata::test::plan;
using strata::test::small_gpt;

TEST_CASE("blocking pipeline p2p: DeepSpeed's parity order of sends and in-line receives", "[lower]") {
    // Even stages wait for a send right after issuing it; odd stages post the next receive first
    // and wait for the send after it (or at the end of the step). Every receive is posted in line:
    // its stream waits for the compute stream first.
    // (record() reuses an event when nothing was issued on its stream since: search, don't match
    // adjacent instructions.)
    struct Count {
        int sends = 0, awaited_before_next_recv = 0, awaited_after_next_recv = 0, recvs = 0, recvs_in_line = 0;
    };
    auto count = [](const RankProgram& rp) {
        Count c;
        const auto& v = rp.instrs;
        std::vector<int> compute_events;  // events recorded on the compute stream so far
        int last_recv_wait = -1;          // event the pp_recv stream last waited for
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (v[i].kind == InstrKind::record && v[i].stream == Stream::compute) compute_events.push_back(v[i].event);
            if (v[i].kind == InstrKind::wait && v[i].stream == Stream::pp_recv) last_recv_wait = v[i].event;
            if (v[i].kind == InstrKind::recv) {
                ++c.recvs;
                if (std::find(compute_events.begin(), compute_events.end(), last_recv_wait) != compute_events.end()) ++c.recvs_in_line;
                last_recv_wait = -1;
            }
            if (v[i].kind != InstrKind::send) continue;
            ++c.sends;
            int ev = -1;  // the pp_p2p stream's record after the send
            for (std::size_t j = i + 1; j < v.size() && ev < 0; ++j)
                if (v[j].kind == InstrKind::record && v[j].stream == Stream::pp_p2p) ev = v[j].event;
            std::size_t awaited = v.size(), next_recv_posted = v.size();
            for (std::size_t j = i + 1; j < v.size() && awaited == v.size(); ++j)
                if (v[j].kind == InstrKind::wait && v[j].stream == Stream::compute && v[j].event == ev) awaited = j;
            // Where the compute event that posts the next receive was recorded.
            int post_ev = -1;
            for (std::size_t j = i + 1; j < v.size(); ++j) {
                if (v[j].kind == InstrKind::wait && v[j].stream == Stream::pp_recv) post_ev = v[j].event;
                if (v[j].kind == InstrKind::recv) break;
                if (j + 1 == v.size()) post_ev = -1;  // no receive after this send
            }
            for (std::size_t j = 0; j < v.size() && post_ev >= 0; ++j)
                if (v[j].kind == InstrKind::record && v[j].stream == Stream::compute && v[j].event == post_ev) next_recv_posted = j;
            if (awaited == v.size()) continue;
            (next_recv_posted < awaited ? c.awaited_after_next_recv : c.awaited_before_next_recv) += 1;
        }
        return c;
    };
    PlanSpec p = plan(1, 4, 1, 4);
    const Program overlapped = lower(small_gpt(), cluster(4), p);
    p.p2p_blocking = true;
    const Program blocking = lower(small_gpt(), cluster(4), p);
    REQUIRE(blocking.ranks.size() == 4);
    for (std::size_t s = 0; s < 4; ++s) {
        const Count o = count(overlapped.ranks[s]), b = count(blocking.ranks[s]);
        // 4 micro-batches: stages 0-2 send 4 activations, stages 1-3 send 4 gradients; stages 1-3
        // receive 4 activations, stages 0-2 receive 4 gradients.
        const int sends = (s < 3 ? 4 : 0) + (s > 0 ? 4 : 0);
        CHECK(o.sends == sends);
        CHECK(b.sends == sends);
        CHECK(o.recvs == sends);
        CHECK(o.awaited_before_next_recv + o.awaited_after_next_recv == 0);  // Megatron: sends overlap compute
        CHECK(o.recvs_in_line == 0);                                          // and receives are pre-posted
        CHECK(b.recvs_in_line == b.recvs);
        if (s % 2 == 0) {
            CHECK(b.awaited_before_next_recv == sends);
            CHECK(b.awaited_after_next_recv == 0);
        } else {
            // The step's last send has no receive after it: awaited at the end of the step.
            CHECK(b.awaited_before_next_recv == 1);
            CHECK(b.awaited_after_next_recv == sends - 1);
        }
    }
}

TEST_CASE("context parallelism: ring attention in cp - 1 steps of one K/V chunk each", "[lower]") {
    // cp = 4, s = 32: each rank holds s/cp = 8 queries; one K/V chunk = 2*b*(s/cp)*kv_w/tp*2 =
    // 2*1*8*64*2 = 2048 bytes. A ring step moves one chunk per rank, costed as an all-gather of
    // S = 2048 * 4/3; forward: 3 steps per layer, backward: 3 K/V steps + 3 dK/dV steps. The
    // attention runs as the local block plus one block per step, each 1/cp of the FLOPs.
    PlanSpec p = plan(1, 1, 1, 4);
    p.cp = 4;
    const Program prog = lower(small_gpt(), cluster(4), p);
    int fwd_steps = 0, bwd_ag = 0, bwd_rs = 0, fwd_blocks = 0;
    double flops = 0, block0 = -1;
    for (const auto& in : prog.ranks[0].instrs) {
        if (in.layer != 0 || in.microbatch != 0) continue;
        if (in.kind == InstrKind::collective && in.group == Group::cp) {
            CHECK(in.bytes == Approx(2048.0 * 4 / 3));
            if (in.phase == Phase::forward) ++fwd_steps;
            else if (in.coll == CollKind::all_gather) ++bwd_ag;
            else ++bwd_rs;
        }
        if (in.kind == InstrKind::compute && in.op == Op::attention_fwd && in.phase == Phase::forward) {
            ++fwd_blocks;
            flops += in.flops;
            if (block0 < 0) block0 = in.flops;
            CHECK(in.flops == Approx(block0));  // equal blocks (load-balanced causal chunks)
        }
    }
    CHECK(fwd_steps == 3);
    CHECK(bwd_ag == 3);
    CHECK(bwd_rs == 3);
    CHECK(fwd_blocks == 4);
    // All blocks together: causal 4*b*(s/cp)*s*heads*hd/tp/2 = 4*1*8*32*64/2 = 32768.
    CHECK(flops == Approx(4.0 * 8 * 32 * 64 / 2));
}

TEST_CASE("pipeline scatter/gather: 1/tp of each tensor on the wire, gathered over TP on arrival", "[lower]") {
    // tp 2, pp 2, no SP, b = 1, s = 32, h = 64: a boundary tensor is b*s*h*2 = 4096 bytes. With
    // plan.p2p_scatter_gather each TP rank sends 4096/2 = 2048 bytes, and the receiver all-gathers
    // the whole 4096 bytes over its TP group before it computes. 4 micro-batches: stage 0 sends 4
    // activations and receives 4 gradients; stage 1 the reverse; so 4 gathers per stage.
    PlanSpec p = plan(2, 2, 1, 4);
    const Program whole = lower(small_gpt(), cluster(4), p);
    p.p2p_scatter_gather = true;
    const Program split = lower(small_gpt(), cluster(4), p);
    for (std::size_t s = 0; s < 2; ++s) {
        int sends = 0, recvs = 0, gathers = 0, whole_gathers = 0, gathers_awaited = 0;
        for (const auto& in : whole.ranks[s].instrs) {
            if (in.kind == InstrKind::send || in.kind == InstrKind::recv) CHECK(in.bytes == Approx(4096.0));
            if (in.kind == InstrKind::collective && whole.names[static_cast<std::size_t>(in.name)] == "pp.all_gather") ++whole_gathers;
        }
        const auto& v = split.ranks[s].instrs;
        for (std::size_t i = 0; i < v.size(); ++i) {
            const Instr& in = v[i];
            if (in.kind == InstrKind::send) {
                ++sends;
                CHECK(in.bytes == Approx(2048.0));
            }
            if (in.kind == InstrKind::recv) {
                ++recvs;
                CHECK(in.bytes == Approx(2048.0));
                // The next TP collective is the gather, all of the tensor, and compute waits for it.
                std::size_t j = i + 1;
                while (j < v.size() && v[j].kind != InstrKind::collective) ++j;
                REQUIRE(j < v.size());
                CHECK(split.names[static_cast<std::size_t>(v[j].name)] == "pp.all_gather");
                CHECK(v[j].coll == CollKind::all_gather);
                CHECK(v[j].group == Group::tp);
                CHECK(v[j].bytes == Approx(4096.0));
                int ev = -1;
                for (std::size_t k = j + 1; k < v.size() && ev < 0; ++k)
                    if (v[k].kind == InstrKind::record && v[k].stream == v[j].stream) ev = v[k].event;
                for (std::size_t k = j + 1; k < v.size(); ++k)
                    if (v[k].kind == InstrKind::wait && v[k].stream == Stream::compute && v[k].event == ev) {
                        ++gathers_awaited;
                        break;
                    }
            }
            if (in.kind == InstrKind::collective && split.names[static_cast<std::size_t>(in.name)] == "pp.all_gather") ++gathers;
        }
        CHECK(sends == 4);
        CHECK(recvs == 4);
        CHECK(gathers == 4);
        CHECK(gathers_awaited == 4);
        CHECK(whole_gathers == 0);
    }
}

TEST_CASE("ZeRO-2 reduce-scatters every micro-batch's gradients, ZeRO 1 once", "[lower][zero]") {
    // DeepSpeed's ZeRO-2 keeps only its shard of the gradients, so each backward reduces into it
    // ("gradient reduction is required after every backward because of gradient partitioning",
    // DeepSpeed issue #2252). Megatron's distributed optimizer (ZeRO 1) keeps the whole gradient
    // and reduces it once, in the last backward.
    // Small GPT without biases, untied: per layer 12 h^2 + two LayerNorms (4h) = 49152 + 256;
    // embedding 128 x 64, positions 32 x 64, final norm 2 x 64, head 128 x 64: 4 x 49408 + 18560 =
    // 216192 parameters, 432384 bytes of bf16 gradients. dp 2, global batch 8: 4 micro-batches.
    ModelSpec m = small_gpt();
    m.linear_bias = false;
    m.tied_embeddings = false;
    const double grad_bytes = 2.0 * 216192;
    for (const bool overlap : {true, false}) {
        int waits[3] = {0, 0, 0};
        for (const int zero : {1, 2}) {
            PlanSpec p = plan(1, 1, 2, 8);
            p.zero_stage = zero;
            p.overlap_grad_reduce = overlap;
            const Program prog = lower(m, cluster(2), p);
            double reduced = 0;
            std::vector<int> dp_events;
            for (const Instr& in : prog.ranks[0].instrs) {
                if (in.kind == InstrKind::collective && in.group == Group::dp && in.coll == CollKind::reduce_scatter) reduced += in.bytes;
                if (in.kind == InstrKind::record && in.stream == Stream::dp_comm) dp_events.push_back(in.event);
                if (in.kind == InstrKind::wait && in.stream == Stream::compute &&
                    std::find(dp_events.begin(), dp_events.end(), in.event) != dp_events.end())
                    ++waits[zero];
            }
            INFO("zero " << zero << ", overlap " << overlap);
            CHECK(reduced == Approx(zero == 2 ? 4 * grad_bytes : grad_bytes));
        }
        // Without overlap each ZeRO-2 backward blocks on its reduction: four more waits than ZeRO 1
        // (whose compute waits for the reduction only before the optimizer).
        if (!overlap) CHECK(waits[2] - waits[1] == 4);
        if (overlap) CHECK(waits[2] == waits[1]);
    }
}

TEST_CASE("ZeRO-3 under a pipeline gathers and reduces each layer once a step (FSDP)", "[lower][zero]") {
    // torch.distributed.pipelining with FSDP2 (torchtitan's default with pp > 1): no reshard after
    // forward, reshard and gradient sync only at the last backward. Small GPT without biases: 4
    // layers of 49408 parameters, pp 2 (2 layers a stage), dp 2, global batch 8: 4 micro-batches.
    // Stage 0 gathers its 2 layers once (2 x 49408 bf16 = 197632 bytes) and reduce-scatters them
    // once; without the pipeline, ZeRO-3 gathers all 4 layers in each of the 4 forwards and 4
    // backwards and reduce-scatters them in each of the 4 backwards.
    ModelSpec m = small_gpt();
    m.linear_bias = false;
    m.tied_embeddings = false;
    const double layer_params = 49408;
    auto count = [&](const PlanSpec& p, int rank) {
        const Program prog = lower(m, cluster(4), p);
        struct {
            int gathers = 0, reductions = 0;
            double gathered = 0, reduced = 0;
        } c;
        for (const Instr& in : prog.ranks[static_cast<std::size_t>(rank)].instrs) {
            if (in.kind != InstrKind::collective) continue;
            const std::string& name = prog.names[static_cast<std::size_t>(in.name)];
            if (name == "zero3.params") ++c.gathers, c.gathered += in.bytes;
            if (name == "zero3.grads") ++c.reductions, c.reduced += in.bytes;
        }
        return c;
    };
    PlanSpec piped = plan(1, 2, 2, 8);
    piped.zero_stage = 3;
    REQUIRE(piped.pipelined_fsdp());
    const auto c = count(piped, 0);
    CHECK(c.gathers == 2);
    CHECK(c.gathered == Approx(2 * layer_params * 2));
    CHECK(c.reductions == 2);
    CHECK(c.reduced == Approx(2 * layer_params * piped.grad_bytes()));
    const auto last = count(piped, 1);  // the last stage likewise (its head is an edge, gathered apart)
    CHECK(last.gathers == 2);
    CHECK(last.reductions == 2);
    PlanSpec flat = plan(1, 1, 2, 8);
    flat.zero_stage = 3;
    REQUIRE_FALSE(flat.pipelined_fsdp());
    const auto f = count(flat, 0);
    CHECK(f.gathers == 4 * 4 * 2);
    CHECK(f.reductions == 4 * 4);
}

TEST_CASE("unfused gradient accumulation: one add per micro-batch, 6 or 10 bytes per parameter", "[lower][zero]") {
    // plan.grad_accum_fusion off (DeepSpeed's engine, PyTorch DDP: autograd adds each micro-batch's
    // weight gradients into the accumulated ones). The same small GPT as above: 216192 parameters
    // on one rank, 4 micro-batches. bf16 sums: micro-batches 2..4 read both and write, 3 x 2 bytes
    // = 3 x 6 x 216192. fp32 sums (fp32_grads): every micro-batch reads 2 and updates 4, 4 x 10 x
    // 216192. ZeRO-2 adds into its shard after the reduce-scatter: half of it at dp 2.
    ModelSpec m = small_gpt();
    m.linear_bias = false;
    m.tied_embeddings = false;
    const double params = 216192;
    auto accumulated = [&](bool fused, bool fp32, int zero) {
        PlanSpec p = plan(1, 1, 2, 8);
        p.grad_accum_fusion = fused;
        p.fp32_grads = fp32;
        p.zero_stage = zero;
        const Program prog = lower(m, cluster(2), p);
        double bytes = 0;
        for (const Instr& in : prog.ranks[0].instrs)
            if (in.kind == InstrKind::compute && in.op == Op::grad_accum) {
                CHECK(in.stream == Stream::compute);
                CHECK(in.phase == Phase::backward);
                bytes += in.bytes;
            }
        return bytes;
    };
    CHECK(accumulated(true, false, 1) == 0);
    CHECK(accumulated(true, true, 1) == 0);
    CHECK(accumulated(false, false, 1) == Approx(3 * 6 * params));
    CHECK(accumulated(false, true, 1) == Approx(4 * 10 * params));
    CHECK(accumulated(false, false, 2) == Approx(3 * 6 * params / 2));
}

TEST_CASE("communication byte counts follow the formulas", "[lower]") {
    // Pipeline p2p with SP: b*s/cp*h*2/tp = 2*32/1*64*2/2 = 4096 bytes.
    PlanSpec p = plan(2, 2, 1, 4);
    p.micro_batch = 2;
    p.sequence_parallel = true;
    const Program pp = lower(small_gpt(), cluster(4), p);
    for (const auto& r : pp.ranks)
        for (const auto& in : r.instrs)
            if (in.kind == InstrKind::send || in.kind == InstrKind::recv) CHECK(in.bytes == 4096);
    // A pure fp32 plan moves 4-byte activations: twice that, and the TP all-reduce of one layer's
    // output b*s*h*4 = 2*32*64*4 = 16384 bytes (without SP).
    p.precision = Precision::fp32;
    const Program pp32 = lower(small_gpt(), cluster(4), p);
    for (const auto& r : pp32.ranks)
        for (const auto& in : r.instrs)
            if (in.kind == InstrKind::send || in.kind == InstrKind::recv) CHECK(in.bytes == 8192);
    p.sequence_parallel = false;
    const Program tp32 = lower(small_gpt(), cluster(4), p);
    int tp_reduces = 0;
    for (const auto& in : tp32.ranks[0].instrs)
        if (in.kind == InstrKind::collective && in.group == Group::tp && in.coll == CollKind::all_reduce && in.layer == 0) {
            CHECK(in.bytes == 16384);
            ++tp_reduces;
        }
    CHECK(tp_reduces == 2 * 2 * 2);  // 2 forward + 2 backward, 2 micro-batches
    // CP = 2: K/V all-gather output = cp * 2*b*(s/cp)*kv_w/tp*2 = 2 * 2*1*16*64*2 = 8192 bytes,
    // the bytes of Megatron's ring: (cp-1) steps of 4096 sent per rank, gathered buffer 8192.
    PlanSpec pc = plan(1, 1, 1, 2);
    pc.cp = 2;
    const Program cp = lower(small_gpt(), cluster(2), pc);
    int kv = 0;
    for (const auto& in : cp.ranks[0].instrs)
        if (in.kind == InstrKind::collective && in.group == Group::cp) {
            CHECK(in.bytes == 8192);
            ++kv;
        }
    // Per layer and micro-batch: forward gather, backward gather + reduce-scatter; 4 layers x 2 mbs.
    CHECK(kv == 3 * 4 * 2);
    // EP all-to-all: tokens*top_k*h*2 = 32*2*64*2 = 8192 bytes, 2 forward + 2 backward per layer.
    ModelSpec moe = small_gpt();
    moe.moe = strata::test::moe_spec(4, 2);
    PlanSpec pe = plan(1, 1, 2, 2);
    pe.ep = 2;
    const Program ep = lower(moe, cluster(2), pe);
    int a2a = 0;
    for (const auto& in : ep.ranks[0].instrs)
        if (in.kind == InstrKind::collective && in.group == Group::ep) {
            CHECK(in.coll == CollKind::all_to_all);
            CHECK(in.bytes == 8192);
            ++a2a;
        }
    CHECK(a2a == 4 * 4 * 1);  // 4 layers, 1 micro-batch (global 2 / dp 2)
}

TEST_CASE("DeepSpeed's ZeRO-2 waits for the earlier buckets' reductions before each one", "[lower][zero]") {
    // average_tensor under overlap_comm: torch.cuda.synchronize() (v0.3-2023), then
    // current_stream().wait_stream(reduction_stream) (PR #5606, June 2024), before the bucket's
    // reduction is issued: the backward goes on only once the reductions before it are done. With
    // B buckets a micro-batch and m micro-batches a step, B x m waits of the compute stream on the
    // data-parallel stream in the backward (the first of each micro-batch waits for the previous
    // one's last); without the barrier, none (overlap_comm waits at the step's end only).
    const ModelSpec m = small_gpt();
    PlanSpec p = plan(1, 1, 8, 16);  // 2 micro-batches a rank
    p.zero_stage = 2;
    p.overlap_grad_reduce = true;
    p.dp_bucket_bytes = 1;  // every unit its own bucket
    auto waits = [&](const PlanSpec& q) {
        const Program prog = lower(m, cluster(8), q, LowerOptions{});
        const auto& v = prog.ranks[0].instrs;
        std::vector<int> dp_events;
        int n = 0, reductions = 0;
        for (const Instr& in : v) {
            if (in.kind == InstrKind::record && in.stream == Stream::dp_comm) dp_events.push_back(in.event);
            if (in.kind == InstrKind::collective && in.coll == CollKind::reduce_scatter) ++reductions;
            if (in.kind == InstrKind::wait && in.stream == Stream::compute && in.phase == Phase::backward &&
                std::find(dp_events.begin(), dp_events.end(), in.event) != dp_events.end())
                ++n;
        }
        return std::pair<int, int>{n, reductions};
    };
    const auto [free_waits, buckets] = waits(p);
    CHECK(free_waits == 0);
    REQUIRE(buckets >= 2 * 3);  // the layers, the head and the embedding, twice
    p.bucket_reduce_barrier = true;
    CHECK(waits(p).first == buckets);
    // The DeepSpeed presets set it; Megatron-Core's does not.
    PlanSpec ds = p;
    ds.bucket_reduce_barrier = false;
    ds.framework = "deepspeed";
    apply_framework(ds);
    CHECK(ds.bucket_reduce_barrier);
    PlanSpec mc = ds;
    mc.bucket_reduce_barrier = false;
    mc.framework = "megatron-core";
    apply_framework(mc);
    CHECK_FALSE(mc.bucket_reduce_barrier);
}
