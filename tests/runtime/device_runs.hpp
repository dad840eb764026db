// Whole runs on a device backend against the cpu backend, which finite differences check
// (test_runtime.cpp): the loss curves of every variant the cuda path executes, and a checkpoint,
// timeline, memory and refusal case. test_cuda.cpp runs them on a GPU (Backend::cuda), and
// test_device_emulated.cpp in CI on the emulated device (Backend::emulated), which runs the same
// executor path over the cpu kernels.
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime_fixtures.hpp"
#include "strata/runtime/runtime.hpp"

namespace strata::test::device_runs {

using namespace strata::sim;

/// share: a parallel plan's ranks on the one device, their collectives staged through the host;
/// else a device each, the collectives and transfers on their communicators (NCCL).
inline std::vector<double> run_losses(const ModelSpec& m, const PlanSpec& p, runtime::Backend b, int steps, runtime::RunOptions o = {},
                                      bool share = true) {
    o.backend = b;
    o.lr = 3e-3;
    o.ranks_share_gpu = share;
    runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
    std::vector<double> out;
    for (int i = 0; i < steps; ++i) out.push_back(s.step().loss);
    return out;
}
inline void close_curves(const std::vector<double>& a, const std::vector<double>& b, double tol = 1e-4) {
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
        INFO("step " << i + 1 << ": cpu " << a[i] << ", device " << b[i]);
        CHECK(std::fabs(a[i] - b[i]) <= tol * std::fabs(a[i]));
    }
}

struct Variant {
    const char* name;
    ModelSpec model;
    PlanSpec plan;
};

/// fp32: the backends differ in summation order only.
inline std::vector<Variant> fp32_variants() {
    std::vector<Variant> v;
    v.push_back({"GPT", tiny_gpt(), cpu_plan()});
    v.push_back({"Llama", tiny_llama(2), cpu_plan()});
    ModelSpec qk = tiny_llama(2);
    qk.qk_norm = true;  // Qwen3's per-head RMSNorm of Q and K (device.hpp: qk_norm_forward)
    v.push_back({"Llama with QK-norm", qk, cpu_plan()});
    // Dropless MoE on one rank: the router, the moves in the host's token order, a GEMM per expert.
    v.push_back({"MoE (4 experts, top 2), weights at fc2's input", tiny_moe(), cpu_plan()});
    {
        PlanSpec p = cpu_plan();
        p.moe_probs_at = MoeProbsAt::fc2_output;  // the router's weights applied in the un-permute
        v.push_back({"MoE, weights at fc2's output", tiny_moe(), p});
        // DeepSeek's group-limited routing (token dropping: bf16_variants).
        ModelSpec grouped = tiny_moe();
        grouped.moe->router_groups = 2;
        grouped.moe->router_group_topk = 1;
        v.push_back({"MoE, group-limited routing (2 groups, 1 a token)", grouped, cpu_plan()});
        // NeMo AutoModel's round-robin gate: its routing written on the host, no router backward,
        // the constant weights applied at the un-permute without a gradient of their own.
        ModelSpec rr = tiny_moe();
        rr.moe->routing = MoeSpec::Routing::round_robin;
        v.push_back({"MoE, AutoModel's round-robin gate, weights at fc2's output", rr, p});
    }
    {
        PlanSpec p = cpu_plan();
        p.recompute = Recompute::full;
        v.push_back({"GPT, full recompute", tiny_gpt(), p});
        ModelSpec g = tiny_gpt();
        g.dropout = 0.3;  // both backends draw the same masks (dropout.hpp)
        v.push_back({"GPT with dropout, full recompute", g, p});
        v.push_back({"GPT with dropout", g, cpu_plan()});
        p.offload.activations = TierSplit{0.0, 1.0, 0.0};  // pinned host copies of the checkpoints
        v.push_back({"GPT, full recompute, activations on the CPU", tiny_gpt(), p});
        p.recompute = Recompute::none;
        v.push_back({"GPT, activations on the CPU", tiny_gpt(), p});
        p = cpu_plan();
        p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
        v.push_back({"Llama, optimizer on the CPU", tiny_llama(2), p});
        p.offload.optimizer = TierSplit{0.0, 0.0, 1.0};
        v.push_back({"Llama, optimizer on SSD", tiny_llama(2), p});
        p.offload.optimizer = TierSplit{0.5, 0.25, 0.25};
        v.push_back({"GPT, optimizer split GPU/CPU/SSD", tiny_gpt(), p});
        // Copies on lanes of their own beside the kernels (device.hpp): parameters fetched a
        // layer at a time, and Angel-PTM's update running beside the next step.
        p = cpu_plan();
        p.zero_stage = 3;
        p.offload.params = p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
        v.push_back({"Llama, parameters and optimizer on the CPU", tiny_llama(2), p});
        p.recompute = Recompute::full;
        p.offload.activations = TierSplit{0.0, 1.0, 0.0};
        v.push_back({"Llama, parameters, optimizer and activations on the CPU", tiny_llama(2), p});
        p = cpu_plan();
        p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
        p.lock_free_update = true;
        v.push_back({"Llama, lock-free update", tiny_llama(2), p});
        // DeepSpeed's ZeRO-Offload: the gradients stream down in the backward and the host's sum
        // comes up into a scratch each later micro-batch (pinned host ranges, copies on their lanes).
        p = cpu_plan();
        p.zero_stage = 2;
        p.offload.optimizer = p.offload.grads = TierSplit{0.0, 1.0, 0.0};
        v.push_back({"Llama, ZeRO-2, gradients streamed to the host", tiny_llama(2), p});
        v.push_back({"MoE, ZeRO-2, gradients streamed to the host", tiny_moe(), p});
    }
    ModelSpec win = tiny_llama(4);
    win.sliding_window = 3;  // layers 0 and 2 see 3 keys, 1 and 3 the whole sequence
    win.window_attn_skip_freq = 2;
    v.push_back({"Llama, sliding window of 3 on every other layer", win, cpu_plan()});
    v.push_back({"MLA (DeepSeek's attention)", tiny_mla(true), cpu_plan()});
    return v;
}

/// bf16 (RankState::elem_bytes): both backends round every 2-byte value to bf16 after computing
/// it in fp32. Different summation orders flip a rounding here and there, so the curves agree to
/// bf16's precision, not fp32's.
inline std::vector<Variant> bf16_variants() {
    std::vector<Variant> v;
    ModelSpec qk = tiny_llama(2);
    qk.qk_norm = true;
    PlanSpec p = cpu_plan();
    p.precision = Precision::bf16;
    v.push_back({"GPT, bf16", tiny_gpt(), p});
    v.push_back({"Llama, bf16", tiny_llama(2), p});
    v.push_back({"Llama with QK-norm, bf16", qk, p});
    v.push_back({"MoE, bf16", tiny_moe(), p});
    v.push_back({"MLA without a query latent, bf16", tiny_mla(false), p});
    {
        // Token dropping: capacity 1 of top 2 over 4 experts drops from the first step, padded to
        // the capacity (GShard, DeepSpeed-MoE) or not. The drops move the loss by about 1e-4 only
        // (the experts add little at initialisation), under fp32's tolerance but far over the
        // emulated device's bf16 one.
        ModelSpec drop = tiny_moe();
        drop.moe->capacity_factor = 1.0;
        PlanSpec q = p;
        q.moe_pad_to_capacity = true;
        v.push_back({"MoE, bf16, capacity 1, padded", drop, q});
        v.push_back({"MoE, bf16, capacity 1, dropped choices leave", drop, p});
    }
    ModelSpec wide = tiny_llama(2);  // 64-wide heads over 80 positions: the flash kernels
    wide.hidden = 128, wide.heads = 2, wide.kv_heads = 1, wide.head_dim = 64, wide.ffn_hidden = 96, wide.seq_len = 80;
    v.push_back({"Llama with 64-wide heads, bf16", wide, p});
    wide.sliding_window = 70;  // the flash walk's tiles cut by the window
    v.push_back({"Llama with 64-wide heads and a 70-token window, bf16", wide, p});
    {
        PlanSpec q = p;  // Megatron's precision-aware optimizer: bf16 moments beside the fp32 master
        q.recompute = Recompute::none;
        q.exp_avg_dtype = q.exp_avg_sq_dtype = Precision::bf16;
        v.push_back({"Llama, bf16 moments", tiny_llama(2), q});
        q.master_weights = false;  // pure bf16: AdamW on the bf16 weights themselves
        v.push_back({"Llama, pure bf16 (no fp32 master)", tiny_llama(2), q});
    }
    {
        // Offloaded bf16 values cross PCIe in their own width; the host widens and narrows them
        // (DeepSpeed's CPU Adam reads half gradients and writes half weights the same way).
        PlanSpec q = p;
        q.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
        v.push_back({"Llama, bf16, optimizer on the CPU", tiny_llama(2), q});
        q.offload.optimizer = TierSplit{0.0, 0.0, 1.0};
        v.push_back({"Llama, bf16, optimizer on SSD", tiny_llama(2), q});
        q = p;
        q.zero_stage = 3;
        q.offload.params = q.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
        q.recompute = Recompute::full;
        q.offload.activations = TierSplit{0.0, 1.0, 0.0};
        v.push_back({"Llama, bf16, parameters, optimizer and activations on the CPU", tiny_llama(2), q});
        q = p;
        q.zero_stage = 3;  // ZeRO-Infinity's NVMe offload of both: the weights staged through the host from the file
        q.offload.params = q.offload.optimizer = TierSplit{0.0, 0.0, 1.0};
        v.push_back({"Llama, bf16, parameters and optimizer on SSD", tiny_llama(2), q});
        q = p;
        q.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
        q.lock_free_update = true;
        v.push_back({"Llama, bf16, lock-free update", tiny_llama(2), q});
    }
    p.recompute = Recompute::full;
    ModelSpec g = tiny_gpt();
    g.dropout = 0.3;
    v.push_back({"GPT with dropout, bf16, full recompute", g, p});
    g.hidden = 128, g.heads = 2, g.kv_heads = 2, g.head_dim = 64, g.ffn_hidden = 256, g.seq_len = g.max_position = 72;
    v.push_back({"GPT with dropout and 64-wide heads, bf16, full recompute", g, p});
    return v;
}

/// fp16 (IEEE halves on a device, floats rounded to them on the cpu backend) with Megatron's
/// dynamic loss scaling: the gradients unscaled and checked where they live (on the GPU, or in host
/// memory beside an offloaded optimizer), the flag summed over the ranks. The exact attention
/// kernels run in halves (the flash ones take bf16 only).
inline std::vector<Variant> fp16_variants() {
    std::vector<Variant> v;
    PlanSpec p = cpu_plan();
    p.precision = Precision::fp16;
    v.push_back({"GPT, fp16", tiny_gpt(), p});
    v.push_back({"Llama, fp16", tiny_llama(2), p});
    v.push_back({"MoE, fp16", tiny_moe(), p});
    ModelSpec wide = tiny_llama(2);
    wide.hidden = 128, wide.heads = 2, wide.kv_heads = 1, wide.head_dim = 64, wide.ffn_hidden = 96, wide.seq_len = 80;
    v.push_back({"Llama with 64-wide heads, fp16", wide, p});
    PlanSpec q = p;
    q.offload.optimizer = TierSplit{0.0, 1.0, 0.0};  // half gradients down, half weights up, unscaled on the host
    v.push_back({"Llama, fp16, optimizer on the CPU", tiny_llama(2), q});
    q.zero_stage = 3;  // DeepSpeed 2021's ZeRO-3 Offload, in fp16 as it ran: the weights fetched from the host a layer at a time
    q.offload.params = TierSplit{0.0, 1.0, 0.0};
    v.push_back({"GPT, fp16, parameters and optimizer on the CPU", tiny_gpt(), q});
    q = cpu_plan(1, 1, 2);
    q.precision = Precision::fp16;
    q.zero_stage = 1;
    v.push_back({"Llama, fp16, dp 2, ZeRO 1", tiny_llama(2), q});
    q.zero_stage = 3;
    v.push_back({"GPT, fp16, dp 2, ZeRO 3", tiny_gpt(), q});
    return v;
}

inline std::vector<runtime::StepReport> run_reports(const ModelSpec& m, const PlanSpec& p, runtime::Backend b, int steps,
                                                    runtime::RunOptions o) {
    o.backend = b;
    o.lr = 3e-3;
    o.ranks_share_gpu = true;
    runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
    std::vector<runtime::StepReport> out;
    for (int i = 0; i < steps; ++i) out.push_back(s.step());
    return out;
}

/// Each fp16 variant on `b` against the cpu backend: a scale of 65536 doubling after every clean
/// step, so that overflows come and go (test_fp16.cpp), and the same steps skipped at the same
/// scales; the losses to fp16's rounding step (`tol`).
inline void check_fp16_curves(runtime::Backend b, double tol) {
    runtime::RunOptions o;
    o.initial_loss_scale = 65536;
    o.loss_scale_window = 1;
    o.hysteresis = 1;
    for (const Variant& x : fp16_variants()) {
        INFO(x.name);
        const auto want = run_reports(x.model, x.plan, runtime::Backend::cpu, 6, o);
        const auto got = run_reports(x.model, x.plan, b, 6, o);
        int skips = 0;
        for (std::size_t i = 0; i < want.size(); ++i) {
            INFO("step " << i + 1 << ": cpu " << want[i].loss << " at scale " << want[i].loss_scale << (want[i].skipped ? " (skipped)" : "")
                         << ", device " << got[i].loss << " at scale " << got[i].loss_scale << (got[i].skipped ? " (skipped)" : ""));
            CHECK(got[i].skipped == want[i].skipped);
            CHECK(got[i].loss_scale == want[i].loss_scale);
            CHECK(std::fabs(got[i].loss - want[i].loss) <= tol * std::fabs(want[i].loss));
            skips += want[i].skipped;
        }
        CHECK(skips > 0);  // the overflow path ran
        CHECK(skips < 6);  // and the update
        CHECK(got.back().loss < got.front().loss);
    }
}

/// Several ranks, each with its device: TP (with and without SP, with TP overlap), PP (1F1B, interleaved, the
/// scatter/gather transfer), DP with every ZeRO stage, the three at once, MoE's expert
/// parallelism and Ulysses context parallelism; fp32 and bf16.
inline std::vector<Variant> parallel_variants() {
    std::vector<Variant> v;
    PlanSpec p = cpu_plan(2, 1, 1);
    v.push_back({"GPT, tp 2", tiny_gpt(), p});
    p.sequence_parallel = true;
    v.push_back({"Llama, tp 2 with SP", tiny_llama(2), p});
    p.tp_comm_overlap = true;  // the ring's blocks as pointers into the device's buffers, and its steps on the communicator
    v.push_back({"Llama, tp 2 with SP and TP overlap", tiny_llama(2), p});
    p = cpu_plan(4, 1, 1);
    p.sequence_parallel = p.tp_comm_overlap = true;
    v.push_back({"GPT, tp 4 with SP and TP overlap", tiny_gpt(), p});
    p = cpu_plan(1, 2, 1);
    v.push_back({"GPT, pp 2 (1F1B)", tiny_gpt(), p});
    p.recompute = Recompute::full;
    v.push_back({"Llama, pp 2, full recompute", tiny_llama(4), p});
    p = cpu_plan(1, 2, 1);
    p.schedule = Schedule::interleaved_1f1b;
    p.vpp = 2;
    v.push_back({"Llama, pp 2 interleaved (vpp 2)", tiny_llama(4), p});
    for (int z : {0, 1, 2, 3}) {
        p = cpu_plan(1, 1, 2);
        p.zero_stage = z;
        static const char* names[] = {"Llama, dp 2, ZeRO 0", "Llama, dp 2, ZeRO 1", "Llama, dp 2, ZeRO 2", "Llama, dp 2, ZeRO 3"};
        v.push_back({names[z], tiny_llama(2), p});
    }
    p = cpu_plan(1, 1, 2);
    p.zero_stage = 3;
    p.offload.optimizer = p.offload.grads = TierSplit{0.0, 1.0, 0.0};
    v.push_back({"Llama, dp 2, ZeRO 3, gradients streamed to the host", tiny_llama(2), p});
    p = cpu_plan(1, 1, 2);
    p.zero_stage = 3;
    p.zero3_param_sync = true;  // DeepSpeed 2021: a gather and a reduce-scatter per tensor, a slice of each a rank
    v.push_back({"GPT, dp 2, ZeRO 3 per parameter (DeepSpeed 2021)", tiny_gpt(), p});
    p = cpu_plan(1, 1, 2);
    p.zero_stage = 1;
    p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
    v.push_back({"Llama, dp 2, ZeRO 1, optimizer on the CPU", tiny_llama(2), p});
    p = cpu_plan(2, 2, 2);
    p.zero_stage = 1;
    p.p2p_scatter_gather = true;  // each TP rank sends its slice; the receivers gather
    v.push_back({"Llama, tp 2 x pp 2 (scatter/gather) x dp 2, ZeRO 1", tiny_llama(4), p});
    p.p2p_scatter_gather = false;
    p.sequence_parallel = true;
    p.precision = Precision::bf16;
    v.push_back({"Llama, tp 2 SP x pp 2 x dp 2, ZeRO 1, bf16", tiny_llama(4), p});
    p = cpu_plan(1, 1, 2);
    p.zero_stage = 3;
    p.precision = Precision::bf16;
    v.push_back({"GPT, dp 2, ZeRO 3, bf16", tiny_gpt(), p});
    // Expert parallelism: the routed rows' all-to-alls staged through the host, the second sort
    // (2 local experts a rank) as device copies.
    p = cpu_plan(1, 1, 2);
    p.ep = 2;
    v.push_back({"MoE, dp 2, ep 2", tiny_moe(), p});
    p = cpu_plan(1, 2, 2);
    p.ep = 2;
    p.zero_stage = 1;
    v.push_back({"MoE, pp 2 dp 2, ep 2, ZeRO-1", tiny_moe(4), p});
    p = cpu_plan(1, 1, 4);
    p.ep = 4;
    v.push_back({"MoE, dp 4, ep 4 (one expert a rank)", tiny_moe(), p});
    p = cpu_plan(2, 1, 2);
    p.sequence_parallel = true;
    p.ep = 2;
    v.push_back({"MoE, tp 2 SP dp 2, ep 2", tiny_moe(), p});
    // Combined 1F1B (moe_a2a_overlap): two micro-batches' kernels and all-to-alls interleaved on
    // each device's streams.
    p = cpu_plan(1, 1, 2);
    p.ep = 2;
    p.global_batch = 16;
    p.moe_a2a_overlap = true;
    v.push_back({"MoE, dp 2, ep 2, all-to-all overlap (combined 1F1B)", tiny_moe(), p});
    p = cpu_plan(1, 2, 2);
    p.schedule = Schedule::interleaved_1f1b;
    p.vpp = 2;
    p.ep = 2;
    p.global_batch = 16;
    p.moe_a2a_overlap = true;
    v.push_back({"MoE, pp 2 interleaved x dp 2, ep 2, all-to-all overlap", tiny_moe(4), p});
    {
        // A shared expert under SP: its output joins the residual add as a third tensor, and its
        // input's gradient the norm's backward as a second one (each summed in fp32 scratch).
        ModelSpec shared = tiny_moe();
        shared.moe->shared_experts = 1;
        PlanSpec q = cpu_plan(2, 1, 1);
        q.sequence_parallel = true;
        v.push_back({"MoE with a shared expert, tp 2 SP", shared, q});
        shared.dropout = 0.3;  // the bias-dropout-add of the experts' sum
        q.precision = Precision::bf16;
        v.push_back({"MoE with a shared expert and dropout, tp 2 SP, bf16", shared, q});
    }
    {
        ModelSpec drop = tiny_moe();  // the drops decided before the dispatch, the kept rows sent
        drop.moe->capacity_factor = 1.0;
        p = cpu_plan(1, 1, 2);
        p.ep = 2;
        p.precision = Precision::bf16;
        v.push_back({"MoE, bf16, capacity 1, dp 2 ep 2", drop, p});
    }
    // Context parallelism: the ring's K/V blocks staged through the host around the device's block
    // kernels; Ulysses' all-to-alls around its whole-sequence attention.
    p = cpu_plan(1, 1, 2);
    p.cp = 2;
    v.push_back({"Llama, cp 2 (ring) dp 2", tiny_llama(2), p});
    p = cpu_plan(1, 1, 1);
    p.cp = 4;
    p.precision = Precision::bf16;
    ModelSpec gw = tiny_gpt();  // learned positions, dropout and a window at the load-balanced layout's positions
    gw.dropout = 0.2;
    gw.seq_len = gw.max_position = 16;
    gw.sliding_window = 5;
    v.push_back({"GPT with dropout and a 5-token window, cp 4 (ring), bf16", gw, p});
    p.cp_comm_type = CpCommType::allgather;  // every block at once, the gradients back in one reduce-scatter
    v.push_back({"GPT with dropout and a 5-token window, cp 4 (K/V all-gathered), bf16", gw, p});
    p = cpu_plan(1, 1, 2);
    p.cp = 2;
    p.cp_comm_type = CpCommType::a2a;
    v.push_back({"Llama, cp 2 (Ulysses) dp 2", tiny_llama(2), p});
    p = cpu_plan(2, 1, 1);
    p.sequence_parallel = true;
    p.cp = 2;
    p.cp_comm_type = CpCommType::a2a;
    p.precision = Precision::bf16;
    ModelSpec gd = tiny_gpt();  // learned positions and dropout at the load-balanced layout's positions
    gd.dropout = 0.2;
    v.push_back({"GPT with dropout, tp 2 SP cp 2 (Ulysses), bf16", gd, p});
    return v;
}

/// Each variant's curve on `b` against the cpu backend's: to fp32's summation-order noise, or to
/// bf16's rounding step (`bf16_tol`: a GPU sums in other orders, so a last-bit difference can move
/// a bf16 value by a spacing; the emulated device runs the cpu kernels themselves).
inline void check_curves(runtime::Backend b, const std::vector<Variant>& variants, double bf16_tol, bool share = true) {
    for (const Variant& x : variants) {
        INFO(x.name << (share ? "" : ", a device a rank"));
        const auto want = run_losses(x.model, x.plan, runtime::Backend::cpu, 6);
        const auto got = run_losses(x.model, x.plan, b, 6, {}, share);
        CHECK(got.back() < got.front());  // it learns
        close_curves(want, got, x.plan.precision == Precision::bf16 ? bf16_tol : 1e-4);
    }
}

/// `which`: the fp32 and bf16 single-rank variants, the rest (fp16 with its loss scale, and the
/// parallel plans), or all.
enum class Curves { fp32_bf16, fp16_parallel, all };

inline void check_loss_curves(runtime::Backend b, double bf16_tol = 5e-3, Curves which = Curves::all) {
    if (which != Curves::fp16_parallel) {
        check_curves(b, fp32_variants(), bf16_tol);
        check_curves(b, bf16_variants(), bf16_tol);
    }
    if (which != Curves::fp32_bf16) {
        check_fp16_curves(b, bf16_tol);
        check_curves(b, parallel_variants(), bf16_tol);
    }
}

/// A checkpoint resumed on the device, every instruction's span, the tiers' peaks, parameters
/// read and written through the session, and a parallel plan refused by name.
inline void check_checkpoint_and_timeline(runtime::Backend backend) {
    const ModelSpec m = tiny_llama(2);
    PlanSpec p = cpu_plan();
    p.offload.optimizer = TierSplit{0.5, 0.5, 0.0};
    runtime::RunOptions o;
    o.backend = backend;
    o.lr = 3e-3;
    o.record_spans = true;
    const std::string dir = (std::filesystem::temp_directory_path() / (std::string("strata-test-checkpoint-") + runtime::to_string(backend))).string();
    std::filesystem::remove_all(dir);
    std::vector<double> a, b;
    {
        runtime::Session s(m, cpu_cluster(1), p, o);
        s.step();
        s.save(dir);
        a.push_back(s.step().loss);
        a.push_back(s.step().loss);
        // Every executed instruction has a span, on the GPU's clock or the host's, in order.
        const auto& t = s.traces();
        REQUIRE(t.size() == 1);
        CHECK(t[0].spans.size() > 20);
        std::int64_t busy = 0;
        for (const auto& sp : t[0].spans) {
            CHECK(sp.end_ns >= sp.start_ns);
            busy += sp.end_ns - sp.start_ns;
        }
        CHECK(busy > 0);
        // The gpu tier's peak is what the dataflow holds: parameters, gradients and half the moments at least.
        const std::int64_t params = s.param_elements(0, "qkv.weight", 0);
        CHECK(s.peak_bytes()[0] > 2.0 * 4 * params);
        CHECK(s.peak_bytes()[1] > 0);
    }
    o.resume_dir = dir;
    runtime::Session r(m, cpu_cluster(1), p, o);
    CHECK(r.steps_done() == 1);
    b.push_back(r.step().loss);
    b.push_back(r.step().loss);
    close_curves(a, b, 1e-6);  // the embedding's gradient adds atomically: not bit for bit
    std::filesystem::remove_all(dir);

    // Parameters read and written through the session reach the device.
    r.set_param(0, "qkv.weight", 0, 3, 0.125f);
    CHECK(r.param(0, "qkv.weight", 0, 3) == 0.125f);

    // A plan of several ranks puts rank r on GPU r: on a machine of one GPU that is refused by name;
    // on one of several it runs, through NCCL.
    if (backend == runtime::Backend::cuda) {
        o.resume_dir.clear();
        try {
            runtime::Session two(m, cpu_cluster(2), cpu_plan(1, 1, 2), o);
            CHECK(std::isfinite(two.step().loss));
        } catch (const std::exception& e) {
            CHECK_THAT(e.what(), Catch::Contains("on GPU 1") && Catch::Contains("this machine shows"));
        }
    }
}

}  // namespace strata::test::device_runs
