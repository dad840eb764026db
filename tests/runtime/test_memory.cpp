// The runtime's memory: refused before allocating and caught during a step, the per-tier peaks the
// dataflow's frees produce (recompute, ZeRO's shards, offload), and the memory-only walk against a
// run's peaks and through representative ranks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/common/error.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/tensors.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;


TEST_CASE("memory: refused before allocating, caught during a step", "[runtime][memory]") {
    runtime::RunOptions o;
    o.capacity_bytes[0] = 1e6;  // 1 MB of "HBM": the analytical model alone says no
    CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(1), cpu_plan(), o),
                      Catch::Contains("refused before allocating") && Catch::Contains("tier gpu"));
    // Skip the check: parameters and gradients (2 x 77 kB) fit in 170 kB; Adam's moments, which
    // the first optimizer instruction allocates, do not.
    o.check_fit = false;
    o.capacity_bytes[0] = 1.7e5;
    runtime::Session s(tiny_gpt(), cpu_cluster(1), cpu_plan(), o);
    CHECK_THROWS_AS(s.step(), runtime::OutOfMemory);
    CHECK_THROWS_WITH(s.step(), Catch::Contains("cannot continue") && Catch::Contains("tier gpu"));
}

TEST_CASE("memory follows the dataflow: recompute, ZeRO and offload move the peaks", "[runtime][memory]") {
    auto peaks = [](const ModelSpec& m, const PlanSpec& p) {
        runtime::Session s(m, cpu_cluster(p.gpus()), p, {});
        s.step();
        return s.step().peak_bytes;  // the second step: Adam's moments exist from the start
    };
    ModelSpec m = tiny_llama(4);
    m.seq_len = 64;  // activations well above the model states
    PlanSpec p = cpu_plan();
    const auto none = peaks(m, p);
    p.recompute = Recompute::full;
    const auto full = peaks(m, p);
    CHECK(full[0] < none[0]);  // a checkpointed layer keeps only its input between passes
    PlanSpec d = cpu_plan(1, 1, 2);
    const auto z0 = peaks(m, d);
    d.zero_stage = 1;
    const auto z1 = peaks(m, d);
    CHECK(z1[0] < z0[0]);  // Adam's moments for half the parameters
    d.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
    const auto cpu = peaks(m, d);
    CHECK(cpu[0] < z1[0]);
    CHECK(cpu[1] > 0);
    d.offload.optimizer = TierSplit{0.0, 0.0, 1.0};
    const auto ssd = peaks(m, d);
    CHECK(ssd[2] > 0);
}

TEST_CASE("dropout: a byte a masked element, held from the forward to the backward", "[runtime][memory][dropout]") {
    // Korthikanti et al. 2022, Sec. 4.1: the masks of the two residual branches, sbh bytes each
    // a layer, and the embedding's (Sec. 4.3); FlashAttention redraws its own and keeps none.
    auto peak = [](const ModelSpec& m, const PlanSpec& p) {
        runtime::RunOptions o;
        o.memory_only = true;
        runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
        s.step();
        return s.step().peak_bytes[0];
    };
    ModelSpec m = tiny_gpt(4);
    m.seq_len = m.max_position = 64;  // activations well above the model states
    ModelSpec d = m;
    d.dropout = 0.1;
    for (const Precision prec : {Precision::fp32, Precision::bf16}) {
        PlanSpec p = cpu_plan();
        p.precision = prec;
        const double sbh = static_cast<double>(p.micro_batch) * m.seq_len * m.hidden;
        const double masks = (2.0 * m.layers + 1) * sbh;
        INFO(to_string(prec) << ": " << peak(d, p) - peak(m, p) << " B more with dropout, masks " << masks << " B");
        CHECK(peak(d, p) - peak(m, p) == Approx(masks));
        // Full recompute: a checkpointed layer redraws its masks before its backward, so the
        // embedding's and one layer's are held; the backward's peak moves besides, by up to the
        // branch's own gradient that the masked residual adds (sbh activations; Megatron's
        // bias-dropout-add returns one too), where without dropout the branch reads the stream's.
        p.recompute = Recompute::full;
        const double held = 3 * sbh, branch = sbh * (prec == Precision::fp32 ? 4 : 2);
        const double more = peak(d, p) - peak(m, p);
        INFO("full recompute: " << more << " B more");
        CHECK(more >= held);
        CHECK(more <= held + branch);
    }
}

TEST_CASE("activations offloaded: the host holds what the backward reads, the GPU lets it go", "[runtime][memory][host]") {
    auto peaks = [](const ModelSpec& m, const PlanSpec& p) {
        runtime::Session s(m, cpu_cluster(p.gpus()), p, {});
        s.step();
        return s.step().peak_bytes;
    };
    ModelSpec m = tiny_llama(4);
    m.seq_len = 64;  // activations well above the model states
    PlanSpec p = cpu_plan();
    p.recompute = Recompute::full;
    const auto kept = peaks(m, p);
    p.offload.activations = TierSplit{0.0, 1.0, 0.0};
    const auto off = peaks(m, p);
    // DeepSpeed's cpu_checkpointing: each checkpointed layer's input, b s h fp32 values, on the
    // host for one micro-batch at a time (one rank runs a micro-batch's forward and backward in
    // turn).
    const double inputs = 4.0 * m.layers * p.micro_batch * m.seq_len * m.hidden;
    INFO("GPU " << kept[0] << " -> " << off[0] << " B, host " << off[1] << " B");
    CHECK(kept[1] == 0);
    CHECK(off[1] == Approx(inputs));
    // The GPU no longer holds the checkpoints between the passes; it holds two again at the
    // backward's peak: the input of the layer recomputing, and the next one's, prefetched
    // beside it (the lowering brings a layer's activations up one layer ahead).
    CHECK(off[0] <= kept[0] - inputs * (m.layers - 2) / m.layers);
    // Without recompute the whole stash goes down: the host holds more than the inputs and the
    // GPU saves more.
    p.recompute = Recompute::none;
    const auto all = peaks(m, p), none = peaks(m, cpu_plan());
    INFO("no recompute: GPU " << none[0] << " -> " << all[0] << " B, host " << all[1] << " B");
    CHECK(all[1] > 4 * inputs);
    CHECK(none[0] - all[0] > inputs);
}

TEST_CASE("parameters homed on the host: the GPU holds only the units being fetched", "[runtime][memory]") {
    auto peaks = [](const ModelSpec& m, const PlanSpec& p) {
        runtime::Session s(m, cpu_cluster(p.gpus()), p, {});
        s.step();
        return s.step().peak_bytes;
    };
    // By hand, tiny_llama(4): a layer holds qkv (4 + 2 x 2 heads of 8) x 32 = 2048, proj 1024,
    // gate and up 96 x 32 = 3072, down 1536 and two norms of 32: 7744. The edges: embedding and
    // head 64 x 32 each, the final norm 32.
    const double layer = 7744, edges = 2 * 2048 + 32, n = 4 * layer + edges;
    ModelSpec m = tiny_llama(4);
    m.seq_len = 64;
    PlanSpec p = cpu_plan();
    p.zero_stage = 1;
    p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
    const auto resident = peaks(m, p);
    p.offload.params = TierSplit{0.0, 1.0, 0.0};
    const auto homed = peaks(m, p);
    // ZeRO-Offload's fp32 host side either way: weights, gradients, m and v, 16 bytes a parameter.
    CHECK(resident[1] == 16 * n);
    CHECK(homed[1] == 16 * n);
    // The GPU gives up the 4-byte weights but holds a fetched layer with the next one prefetched,
    // or the edges beside a layer.
    const double saved = resident[0] - homed[0];
    INFO("saved " << saved << " of " << 4 * n);
    CHECK(saved <= 4 * n);
    CHECK(saved >= 4 * n - 4 * std::max(2 * layer, layer + edges));
}

TEST_CASE("ZeRO-2 and 3 keep a shard of the gradients (and ZeRO-3 of the weights) on the GPU", "[runtime][memory]") {
    // The ZeRO paper's partitioned gradients (Sec. 5.2): over 2 data-parallel ranks each keeps half
    // of them, 4 B a parameter in fp32, where ZeRO-1 keeps them whole. A reduction's whole range
    // lives from its first gradient to its reduce-scatter: with buckets closed at 30,976 B (a
    // layer), one bucket (whole units: the head and a layer at most) or, under ZeRO-3, the edges
    // (reduced at each micro-batch's end) and a layer beside the shard.
    const double layer = 7744, edges = 2 * 2048 + 32, n = 4 * layer + edges;  // tiny_llama(4), as above
    ModelSpec m = tiny_llama(4);
    m.seq_len = 64;
    runtime::RunOptions o;
    o.memory_only = true;
    auto gpu_peak = [&](const PlanSpec& p) {
        runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
        s.step();
        s.step();
        return s.peak_bytes()[0];
    };
    PlanSpec p = cpu_plan(1, 1, 2);
    p.zero_stage = 1;
    p.dp_bucket_bytes = static_cast<std::int64_t>(4 * layer);
    const double whole = gpu_peak(p);
    for (int zero : {2, 3}) {
        for (bool overlap : {true, false}) {
            PlanSpec q = p;
            q.zero_stage = zero;
            q.overlap_grad_reduce = overlap;
            const double saved = whole - gpu_peak(q);
            // ZeRO-3 keeps half the weights too, and holds gathered units whole while they are
            // read: the edges (gathered at the step's start) and two layers (one prefetched).
            const double shards = zero == 3 ? 4 * n : 4 * n / 2;
            INFO("ZeRO-" << zero << (overlap ? ", overlapped" : "") << ": saved " << saved << " B of the " << shards << " B the shards save");
            CHECK(saved <= shards + 16);  // slices of odd ranges round by an element
            // Without overlap ZeRO-2 reduces each bucket as it fills, as with it (DeepSpeed's
            // reduce_ipg_grads; until stop 57 a whole chunk after its backward, 4 n B live).
            const double live = 4 * (edges + layer);
            const double gathered = zero == 3 ? 4 * (edges + 2 * layer) : 0;
            CHECK(saved >= shards - live - gathered - 16);
            CHECK(saved > 0);
        }
    }
    // MoE: the expert buffer's gradients are sharded over edp too. dp 4 ep 2 (edp 2), one
    // micro-batch a rank, 16 kB buckets: ZeRO-2 saves at least half the expert gradients (a rank
    // holds 2 experts of 3 x 24 x 32 floats in each of 2 MoE layers) less one layer's value.
    PlanSpec q = cpu_plan(1, 1, 4);
    q.ep = 2;
    q.dp_bucket_bytes = 16384;  // buckets smaller than the model, as above
    const ModelSpec moe = tiny_moe();
    auto moe_peak = [&](int zero) {
        q.zero_stage = zero;
        runtime::Session s(moe, cpu_cluster(q.gpus()), q, o);
        s.step();
        s.step();
        return s.peak_bytes()[0];
    };
    const double experts = 2.0 * 2 * 3 * 24 * 32 * 4;  // bytes
    const double z1 = moe_peak(1), z2 = moe_peak(2);
    INFO("MoE ZeRO-1 " << z1 << " B, ZeRO-2 " << z2 << " B");
    CHECK(z1 - z2 >= experts / 2 / 2);
    // ZeRO-3 shards the weights too, the experts' over edp: a layer's gathered at a time.
    const double z3 = moe_peak(3);
    INFO("MoE ZeRO-3 " << z3 << " B");
    CHECK(z3 < z2);
}

TEST_CASE("ZeRO-3 reduces the edges at every micro-batch's end: the head's whole gradient lives through the backward", "[runtime][memory]") {
    // FSDP's root unit (embedding, final norm, head) reduce-scatters its gradients in its
    // post-backward, once per micro-batch as every unit does (DeepSpeed's ZeRO-3 as its buckets
    // fill); until stop 64 the lowering kept them whole to the step's end and the model held only
    // their shard (the random sweep: Llama 3 8B at dp x cp 16, fp32, 17 % over the model).
    ModelSpec m = tiny_llama(2);
    m.vocab = 2048;  // a head of 64k parameters, above a layer's 7.7k
    m.seq_len = 32;
    PlanSpec p = cpu_plan(1, 1, 2);
    p.zero_stage = 3;  // 2 micro-batches a rank
    LowerOptions lo;
    lo.full_mode = lo.dataflow = true;
    const Program prog = lower(m, cpu_cluster(2), p, lo);
    int edge_reductions = 0;
    for (const Instr& in : prog.ranks[0].instrs)
        if (in.kind == InstrKind::collective && in.coll == CollKind::reduce_scatter && prog.names[static_cast<std::size_t>(in.name)] == "dp.grads")
            ++edge_reductions;
    CHECK(edge_reductions == 2 * 2);  // the head's and the embedding's buckets, each micro-batch
    // The walk holds the head's whole gradient beside the backward's peak, and the model counts it.
    for (Precision pr : {Precision::fp32, Precision::bf16}) {
        PlanSpec q = p;
        q.precision = pr;
        const WalkAndModel r = walk_and_model(m, q);
        const double walk = r.walk[0], model = r.model_gpu();
        INFO(to_string(pr) << ": walk " << walk << " B, model " << model << " B");
        // fp32 0.8 %, bf16 0.6 % over: with the DDP buckets it counted under ZeRO-3 until stop 64
        // (at this size twice all the gradients) 44 % over; in bf16 until stop 67 6.2 %, the head's
        // gradient summed with the loss's fp32 copy, which the walk frees before the head's wgrad
        // writes it (in fp32 the loss's stash is its gradient, which the wgrad reads).
        CHECK(model >= walk);
        CHECK(model <= 1.02 * walk);
    }
}

TEST_CASE("ZeRO-3: a layer's whole gradients live through its backward, beside the backward's peak", "[runtime][memory]") {
    // A layer's gradients are a value from its backward's first weight gradient to its
    // reduce-scatter (FSDP's unsharded gradients before the post-backward reduce-scatter), so the
    // first layer's backward, the peak of a fully recomputed step, holds them. The model counts
    // one layer's (zero3.layer_grads, since stop 67; before, a Llama 2 13B layer's 0.64 GB under the
    // walk), not beside the head's backward, which runs before.
    ModelSpec m = tiny_llama(4);
    m.hidden = 1024;
    m.heads = m.kv_heads = 8;
    m.head_dim = 128;
    m.ffn_hidden = 2816;
    m.seq_len = 256;
    PlanSpec p = cpu_plan(1, 1, 2);
    p.zero_stage = 3;
    p.recompute = Recompute::full;
    p.precision = Precision::bf16;
    double value = 0;
    for (const TensorDesc& d : stage_buffers(m, p, 0))
        if (d.name == "zero3.layer_grads") {
            value = d.bytes;
            CHECK(d.lifetime == Lifetime::layers_backward);
        }
    const double h = m.hidden, layer = 4 * h * h + 3 * h * m.ffn_hidden + 2 * h;  // QKV and projection, SwiGLU, two norms
    CHECK(value == Approx(layer * p.grad_bytes()).epsilon(1e-12));
    const WalkAndModel r = walk_and_model(m, p);
    INFO("walk " << r.walk[0] << " B, model " << r.model_gpu() << " B, of which the layer's gradients " << value << " B");
    // Within 1 % (0.15 % under: the recomputed layer's workspace a megabyte short); without the
    // layer's gradients (5 % of the peak here) the model was under the walk by them.
    CHECK(r.model_gpu() == Approx(r.walk[0]).epsilon(0.01));
    CHECK(r.model_gpu() - value < 0.97 * r.walk[0]);
}

TEST_CASE("peak detail: what a rank holds at its GPU peak, largest first", "[runtime][memory]") {
    // tiny_llama(2), fp32, one rank: 2 layers of 7,744 parameters and the embedding and head
    // (2 x 64 x 32) with the final norm (32): 19,616 parameters, 4 B each as weights and as
    // gradients, and two Adam moments once the first step has made them.
    const double params = 2 * 7744 + 2 * 64 * 32 + 32;
    runtime::RunOptions o;
    o.memory_only = true;
    o.peak_detail = 50;
    ModelSpec m = tiny_llama(2);
    m.seq_len = 32;
    runtime::Session s(m, cpu_cluster(1), cpu_plan(), o);
    s.step();
    s.step();
    const auto details = s.peak_details();
    REQUIRE(details.size() == 1);
    const runtime::PeakDetail& d = details.front();
    CHECK(d.bytes == s.peak_bytes()[0]);
    CHECK_FALSE(d.at.empty());
    double listed = 0, weights = -1, grads = -1, moments = -1;
    for (std::size_t k = 0; k < d.largest.size(); ++k) {
        if (k > 0) CHECK(d.largest[k].bytes <= d.largest[k - 1].bytes);
        listed += d.largest[k].bytes;
        if (d.largest[k].what == "weights") weights = d.largest[k].bytes;
        if (d.largest[k].what == "gradients") grads = d.largest[k].bytes;
        if (d.largest[k].what == "optimizer states") moments = d.largest[k].bytes;
    }
    CHECK(weights == 4 * params);
    CHECK(grads == 4 * params);
    CHECK(moments == 8 * params);
    // Everything the rank held then is listed (50 entries are more than it holds): the peak.
    CHECK(listed == Approx(d.bytes).epsilon(1e-12));
    CHECK(d.values_bytes == Approx(d.bytes - 16 * params).epsilon(1e-12));
    // Off by default.
    runtime::RunOptions plain;
    plain.memory_only = true;
    runtime::Session q(m, cpu_cluster(1), cpu_plan(), plain);
    q.step();
    CHECK(q.peak_details().empty());
}

TEST_CASE("ZeRO-2 reduces a unit above the bucket size whole: the model holds it beside a bucket, as the walk does", "[runtime][memory]") {
    // Buckets close at the end of a unit (a layer, the head, the embedding), so a unit larger than
    // dp_bucket_bytes is one bucket, its whole gradients a value until its reduce-scatter, while
    // the next bucket fills: the widest unit (a layer of tiny_llama(4): 7,744 floats, the head
    // 2,048 + 32, the embedding 2,048) beside one bucket. Until stop 63 the model counted two
    // buckets of the size.
    const double layer = 7744, cap = 256;
    ModelSpec m = tiny_llama(4);
    m.seq_len = 64;
    PlanSpec p = cpu_plan(1, 1, 2);
    p.zero_stage = 2;
    p.dp_bucket_bytes = static_cast<std::int64_t>(cap);
    double buckets = -1;
    for (const TensorDesc& d : stage_buffers(m, p, 0))
        if (d.name == "zero2.grad_buckets") buckets = d.bytes;
    CHECK(buckets == Approx(4 * layer + cap));
    runtime::RunOptions o;
    o.memory_only = true;
    for (bool overlap : {true, false}) {
        p.overlap_grad_reduce = overlap;
        runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
        s.step();
        s.step();
        const double walk = s.peak_bytes()[0], model = memory_estimate(m, p, Capacities{}).hbm_bytes - kFrameworkReserveBytes;
        INFO((overlap ? "overlapped" : "not overlapped") << ": walk " << walk << " B, model " << model << " B");
        CHECK(std::fabs(model / walk - 1) < 0.02);
    }
}

TEST_CASE("pipelined FSDP holds the weights' shard beside the gathered stage, as FSDP2 does", "[runtime][memory][fsdp]") {
    // ZeRO-3 under a pipeline gathers each layer at its first forward and keeps it to its last
    // backward (torchtitan's reshard_after_forward off under PP), while the shard the update
    // writes stays: FSDP2's sharded and unsharded parameters both live. Until stop 63 the runtime
    // gathered into its whole stage buffer and held no shard beside it: one shard (a half at
    // dp 2) under the model.
    ModelSpec m = tiny_llama(4);
    m.seq_len = 64;
    PlanSpec p = cpu_plan(1, 2, 2);
    p.zero_stage = 3;
    p.dp_bucket_bytes = 256;  // the model's two overlap buckets (docs/runtime.md) out of the way
    REQUIRE(p.pipelined_fsdp());
    const WalkAndModel r = walk_and_model(m, p);
    const double walk = r.walk[0], model = r.model_gpu();
    INFO("walk " << walk << " B, model " << model << " B");
    CHECK(std::fabs(model / walk - 1) < 0.02);
    // Routed experts over ep 2 at dp 2: the expert-data-parallel group is one rank, which holds its
    // experts whole, so nothing of them is gathered; until stop 64 the model counted a gathered
    // copy of them beside the weights (Mixtral 8x7B at pp 4 x dp 2 x ep 2: 8.3 % over the walk).
    ModelSpec moe = tiny_moe(4);
    moe.seq_len = 64;
    PlanSpec q = p;
    q.ep = 2;
    REQUIRE(q.edp() == 1);
    const WalkAndModel rm = walk_and_model(moe, q);
    const double walk_moe = rm.walk[0], model_moe = rm.model_gpu();
    INFO("MoE: walk " << walk_moe << " B, model " << model_moe << " B");
    CHECK(std::fabs(model_moe / walk_moe - 1) < 0.02);
}

TEST_CASE("memory only: walking the dataflow gives a run's peaks without running it", "[runtime][memory]") {
    struct Variant {
        const char* name;
        ModelSpec m;
        PlanSpec p;
    };
    std::vector<Variant> v{{"GPT", tiny_gpt(), cpu_plan()}, {"Llama, TP 2", tiny_llama(2), cpu_plan(2)}};
    {
        PlanSpec p = cpu_plan();
        p.recompute = Recompute::full;
        v.push_back({"GPT, full recompute", tiny_gpt(), p});
        // One rank: the cpu and ssd pools are per node, and two ranks' host buffers come and go in
        // an order that depends on their threads' timing.
        p = cpu_plan();
        p.offload.optimizer = TierSplit{0.5, 0.25, 0.25};
        v.push_back({"Llama, optimizer on GPU, CPU and SSD", tiny_llama(2), p});
        p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
        p.offload.params = TierSplit{0.0, 1.0, 0.0};
        p.zero_stage = 3;
        v.push_back({"Llama, parameters and optimizer on the CPU", tiny_llama(2), p});
        // A pipeline: a walk's receive meets its send as a run's does, so it holds one buffer at a
        // time (until 2026-11-26 the walk's receive stream ran ahead and held a gradient for every
        // micro-batch; Mixtral 8x7B's plan walked 1.04 GB high).
        v.push_back({"Llama, pp 2, 4 micro-batches", tiny_llama(), cpu_plan(1, 2)});
        p = cpu_plan(1, 2);
        p.micro_batch = 1;
        v.push_back({"Llama, pp 2, 8 micro-batches", tiny_llama(), p});
        v.push_back({"MoE, pp 2 dp 2", tiny_moe(), cpu_plan(1, 2, 2)});
        p = cpu_plan();
        p.offload.activations = TierSplit{0.0, 1.0, 0.0};
        v.push_back({"GPT, activations on the CPU", tiny_gpt(), p});
        // Token dropping pads every expert to its capacity: the rows an expert-parallel rank
        // receives no longer depend on the routing, so the walk knows them.
        ModelSpec capped = tiny_moe();
        capped.moe->capacity_factor = 1.0;
        p = cpu_plan(1, 1, 2);
        p.ep = 2;
        p.moe_pad_to_capacity = true;
        v.push_back({"MoE, capacity 1.0 padded, dp 2 ep 2", capped, p});
    }
    for (const Variant& x : v) {
        INFO(x.name);
        runtime::RunOptions o;
        auto peaks = [&](bool walk) {
            o.memory_only = walk;
            runtime::Session s(x.m, cpu_cluster(x.p.gpus()), x.p, o);
            s.step();
            s.step();  // the second step holds the moments the first created at its end
            return s.peak_bytes();
        };
        const auto run = peaks(false), walk = peaks(true);
        CHECK(run[0] > 0);
        // Under a pipeline a receive's buffer comes to life when its stream posts it, which is
        // when the one before it met its send: the peer's timing, in a run and in a walk alike.
        // The peaks may differ by that one transfer (a micro-batch's hidden states, fp32).
        const double transfer = x.p.pp > 1 ? 4.0 * x.p.micro_batch * x.m.seq_len * x.m.hidden : 0.0;
        for (int t = 0; t < 3; ++t) CHECK(std::fabs(walk[static_cast<std::size_t>(t)] - run[static_cast<std::size_t>(t)]) <= transfer);
    }
    {
        // A walk goes through representative ranks: every stage, TP and CP rank, and the first
        // data-parallel replicas, enough to fill a node. On 4 nodes of 2, pp 2 x dp 4 with ZeRO-1
        // and the optimizer in host memory: 4 of 8 ranks, the same peaks per rank and per node.
        PlanSpec p = cpu_plan(1, 2, 4);
        p.micro_batch = 1;
        p.zero_stage = 1;
        p.offload.optimizer = TierSplit{0, 1, 0};
        sim::ClusterSpec c = cpu_cluster(8);
        c.gpus_per_node = 2;
        c.nodes = 4;
        runtime::RunOptions o;
        o.memory_only = true;
        runtime::Session some(tiny_llama(), c, p, o);
        o.walk_all_ranks = true;
        runtime::Session all(tiny_llama(), c, p, o);
        CHECK(some.program().ranks.size() == 4);
        CHECK(all.program().ranks.size() == 8);
        for (int i = 0; i < 2; ++i) {
            some.step();
            all.step();
        }
        // (GPU: within one pipeline transfer, as above; the host's model states are persistent.)
        CHECK(std::fabs(some.peak_bytes()[0] - all.peak_bytes()[0]) <= 4.0 * 1 * 8 * 32);
        for (int t = 1; t < 3; ++t) CHECK(some.peak_bytes()[static_cast<std::size_t>(t)] == all.peak_bytes()[static_cast<std::size_t>(t)]);
        CHECK(some.peak_bytes()[1] > 0);
    }
    // Under EP the rows a rank's experts receive follow the routing; a walk moves nothing and
    // charges their mean (tokens x top_k a rank, the memory model's balanced routing). At
    // initialisation the router is nearly uniform, so the run stays close: measured 0 to 0.6 %.
    PlanSpec p = cpu_plan(1, 2, 2);
    p.ep = 2;
    runtime::RunOptions o;
    runtime::Session run(tiny_moe(), cpu_cluster(4), p, o);
    run.step();
    o.memory_only = true;
    runtime::Session walk(tiny_moe(), cpu_cluster(4), p, o);
    walk.step();
    CHECK(walk.peak_bytes()[0] == Approx(run.peak_bytes()[0]).epsilon(0.03));
}

TEST_CASE("Megatron's fp32 loss: the last stage keeps an fp32 copy of the logits per micro-batch in flight", "[runtime][memory]") {
    // bf16, pp 2 under the all-forward schedule: the last stage runs 4 forwards (micro-batches of
    // 2 x 8 tokens) before its first backward, each leaving its logits for the loss's backward.
    // With plan.loss_upcast (Megatron's vocab-parallel loss on logits.float()) the kept copy is
    // fp32, with the 2-byte head output beside it while the cast runs; without it the loss reads
    // the 2-byte logits and writes a new 2-byte gradient. At the first backward's cast: 4 x 4 + 2
    // bytes a logit against 4 x 2 + 2: 8 bytes a logit of one micro-batch apart (to 0.1 %: the
    // small tensors beside the two peaks differ by a few hundred bytes). The vocabulary is wide
    // enough that the logits are the last stage's peak.
    ModelSpec m = tiny_llama(2);
    m.vocab = 4096;
    PlanSpec p = cpu_plan(1, 2);
    p.precision = Precision::bf16;
    p.schedule = Schedule::gpipe;
    runtime::RunOptions o;
    o.memory_only = true;
    auto walk = [&](bool upcast) {
        PlanSpec q = p;
        q.loss_upcast = upcast;
        runtime::Session s(m, cpu_cluster(2), q, o);
        s.step();
        return s.step().peak_bytes[0];
    };
    const double logits = 2.0 * 8 * 4096;  // one micro-batch's
    CHECK(walk(true) - walk(false) == Approx(8 * logits).epsilon(1e-3));
}

TEST_CASE("unfused attention keeps its probabilities: the same losses, their bytes held to the backward", "[runtime][memory]") {
    // Megatron's CoreAttention (plan.flash_attention off) keeps softmax(Q K^T / sqrt(d)) for its
    // backward, (b, heads, s, s) a layer, and under attention dropout the mask (1 B) and the
    // dropped probabilities. The runtime materialises them from the forward's log-sum-exp (its
    // kernels recompute from it), so the losses are the fused run's bit for bit. One rank, fp32,
    // micro-batches of 2 x 8 tokens, 4 heads, 2 layers, no recompute: at the first backward the
    // rank holds one micro-batch's: 2 layers x 2 x 4 x 8 x 8 elements of 4 B.
    ModelSpec m = tiny_llama(2);
    auto run = [&](bool flash, double dropout, bool memory_only) {
        ModelSpec mm = m;
        mm.dropout = dropout;
        PlanSpec p = cpu_plan();
        p.flash_attention = flash;
        runtime::RunOptions o;
        o.memory_only = memory_only;
        o.lr = 3e-3;
        runtime::Session s(mm, cpu_cluster(1), p, o);
        std::vector<double> losses;
        for (int i = 0; i < 3; ++i) losses.push_back(s.step().loss);
        return std::pair{losses, s.peak_bytes()[0]};
    };
    const double elements = 2.0 * 2 * 4 * 8 * 8;
    CHECK(run(false, 0, false).first == run(true, 0, false).first);
    CHECK(run(false, 0, true).second - run(true, 0, true).second == Approx(4 * elements).epsilon(1e-12));
    // With attention dropout: the mask's byte and the dropped copy's 4 B beside each probability.
    CHECK(run(false, 0.1, false).first == run(true, 0.1, false).first);
    CHECK(run(false, 0.1, true).second - run(true, 0.1, true).second == Approx((4 + 1 + 4) * elements).epsilon(1e-12));
    // The backward forms the probabilities' gradient, (b, heads, s, s) again, beside them (the
    // memory model's grad.widest). Under full recompute at 256 tokens a sequence they dominate: a
    // layer's attention backward holds its recomputed probabilities E and their gradient E, which
    // the fused run at that point does not: the unfused peak is 2 E x 4 B over the fused run's
    // bytes there, so at most 2 E x 4 B over the fused peak and, with the fused peak under 0.75 E x
    // 4 B, more than 1.25 E x 4 B over it; without the gradient held it would be at most E x 4 B.
    m.seq_len = 256;
    const auto run_full = [&](bool flash) {
        ModelSpec mm = m;
        PlanSpec p = cpu_plan();
        p.flash_attention = flash;
        p.recompute = Recompute::full;
        runtime::RunOptions o;
        o.memory_only = true;
        runtime::Session s(mm, cpu_cluster(1), p, o);
        s.step();
        return s.peak_bytes()[0];
    };
    const double E = 2.0 * 4 * 256 * 256, fused = run_full(true), unfused = run_full(false);
    INFO("fused peak " << fused << " B, unfused " << unfused << " B, E x 4 B = " << 4 * E);
    CHECK(fused < 0.75 * 4 * E);
    CHECK(unfused - fused <= 2 * 4 * E);
    CHECK(unfused - fused > 1.25 * 4 * E);
}
