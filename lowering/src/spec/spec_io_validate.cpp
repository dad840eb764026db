// validate_plan: the cross-checks between a plan and its model and cluster (divisibility, GPU
// count, schedule and ZeRO rules of Megatron-LM and DeepSpeed). Each rule throws an InputError
// naming the plan's file, the JSON path and the rule, e.g. "plan.json: plan.tp = 3 does not divide
// model.heads = 32". Field-level ranges are checked by the readers (spec_io.cpp), not here.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <string>

#include "strata/common/error.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/lowering/frameworks.hpp"

namespace strata::sim {

namespace {

using i64 = std::int64_t;

// Saturating product: plan degrees come from user input and must never overflow.
i64 mul_sat(i64 a, i64 b) {
    if (a <= 0 || b <= 0) return a * b == 0 ? 0 : -1;
    if (a > INT64_MAX / b) return INT64_MAX;
    return a * b;
}

std::string s(i64 v) { return std::to_string(v); }

}  // namespace

void validate_plan(const ModelSpec& m, const ClusterSpec& c, const PlanSpec& p, const std::string& file) {
    auto fail = [&](const std::string& path, const std::string& rule) { throw InputError(file, path, rule); };
    if (auto no = framework_refusal(p)) fail(no->field, no->rule);

    // Degrees and batch sizes are positive (the reader guarantees it; programmatic plans may not).
    const std::pair<const char*, int> positives[] = {{"plan.tp", p.tp}, {"plan.pp", p.pp}, {"plan.dp", p.dp},
                                                     {"plan.cp", p.cp}, {"plan.ep", p.ep}, {"plan.vpp", p.vpp},
                                                     {"plan.micro_batch", p.micro_batch},
                                                     {"plan.global_batch", p.global_batch}};
    for (const auto& [path, v] : positives)
        if (v < 1) fail(path, "must be a positive integer (got " + s(v) + ")");
    if (p.zero_stage < 0 || p.zero_stage > 3) fail("plan.zero_stage", "must be 0, 1, 2 or 3 (got " + s(p.zero_stage) + ")");
    if (p.vocab_divisible_by < 1 || p.vocab_divisible_by > 65536)
        fail("plan.vocab_divisible_by", "must be an integer from 1 to 65536 (got " + s(p.vocab_divisible_by) + ")");
    if (m.layers < 1 || m.heads < 1 || m.kv_heads < 1 || m.ffn_hidden < 1 || m.seq_len < 1)
        fail("model", "is incomplete (layers, heads, kv_heads, ffn_hidden and seq_len must be positive)");

    // Every GPU holds exactly one (tp, pp, dp, cp) coordinate (Megatron's rank layout; EP is carved
    // out of dp x cp, so it does not multiply).
    const i64 gpus = mul_sat(mul_sat(mul_sat(p.tp, p.pp), p.dp), p.cp);
    const i64 cluster_gpus = static_cast<i64>(c.nodes) * c.gpus_per_node;
    if (gpus != cluster_gpus)
        fail("plan.tp x plan.pp x plan.dp x plan.cp",
             "= " + s(p.tp) + "*" + s(p.pp) + "*" + s(p.dp) + "*" + s(p.cp) + " = " + (gpus == INT64_MAX ? std::string("(overflow)") : s(gpus)) +
                 " does not equal cluster GPUs = " + s(cluster_gpus) + " (cluster.nodes x cluster.gpus_per_node)");

    // Tensor parallelism splits attention heads and the FFN width (Megatron-LM, Shoeybi et al. 2019).
    if (m.heads % p.tp != 0) fail("plan.tp", "= " + s(p.tp) + " does not divide model.heads = " + s(m.heads));
    // GQA: each TP rank needs whole KV heads, or Megatron replicates KV heads when tp > kv_heads.
    if (m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0)
        fail("plan.tp", "= " + s(p.tp) + " and model.kv_heads = " + s(m.kv_heads) +
                            ": one must divide the other (KV heads are split, or replicated when tp > kv_heads)");
    if (m.ffn_hidden % p.tp != 0) fail("plan.tp", "= " + s(p.tp) + " does not divide model.ffn_hidden = " + s(m.ffn_hidden));
    if (m.is_moe() && p.expert_tp == 0 && m.moe->expert_ffn_hidden > 0 && m.moe->expert_ffn_hidden % p.tp != 0)
        fail("plan.tp", "= " + s(p.tp) + " does not divide model.moe.expert_ffn_hidden = " + s(m.moe->expert_ffn_hidden));
    // The vocabulary is NOT required to divide: Megatron pads it to a multiple of 128 x tp.

    // Pipeline: every stage holds at least one layer; an explicit split covers the model exactly.
    if (p.pp > m.layers) fail("plan.pp", "= " + s(p.pp) + " exceeds model.layers = " + s(m.layers) + " (a stage needs a layer)");
    // An explicit split: `want` counts of at least `min` layers each, covering the model exactly.
    const auto check_split = [&](const std::string& field, const std::vector<int>& split, i64 want, const std::string& want_what, int min) {
        if (static_cast<i64>(split.size()) != want)
            fail(field, "has " + s(static_cast<i64>(split.size())) + " entries but " + want_what + " = " + s(want));
        i64 sum = 0;
        for (std::size_t i = 0; i < split.size(); ++i) {
            if (split[i] < min)
                fail(field + "[" + s(static_cast<i64>(i)) + "]",
                     std::string(min >= 1 ? "must be a positive integer" : "must be a non-negative integer") + " (got " + s(split[i]) + ")");
            sum += split[i];
        }
        if (sum != m.layers) fail(field, "sums to " + s(sum) + " but model.layers = " + s(m.layers));
    };
    if (!p.layer_split.empty()) {
        check_split("plan.layer_split", p.layer_split, p.pp, "plan.pp", 1);
        if (!p.virtual_layer_split.empty()) fail("plan.virtual_layer_split", "and plan.layer_split both set the split: give one");
    }
    if (!p.virtual_layer_split.empty()) {
        check_split("plan.virtual_layer_split", p.virtual_layer_split, static_cast<i64>(p.pp) * std::max(1, p.vpp), "plan.pp x plan.vpp", 0);
        const std::vector<int> per_stage = stage_layers(m, p);
        for (std::size_t i = 0; i < per_stage.size(); ++i)
            if (per_stage[i] < 1)
                fail("plan.virtual_layer_split", "leaves pipeline rank " + s(static_cast<i64>(i)) + " without a layer (virtual stages i with i mod plan.pp = " +
                                                     s(static_cast<i64>(i)) + " are all 0)");
    }

    // A step is global_batch sequences in micro-batches of micro_batch on each of dp replicas.
    const i64 per_step = mul_sat(p.micro_batch, p.dp);
    if (p.global_batch % per_step != 0)
        fail("plan.global_batch", "= " + s(p.global_batch) + " is not divisible by plan.micro_batch x plan.dp = " +
                                      s(p.micro_batch) + "*" + s(p.dp) + " = " + s(per_step));
    const i64 micro_batches = p.global_batch / per_step;

    // Interleaved 1F1B (Narayanan et al. SC21): vpp model chunks per pipeline rank.
    if (p.schedule == Schedule::interleaved_1f1b && p.vpp < 2)
        fail("plan.schedule", "= interleaved-1f1b needs plan.vpp >= 2 virtual stages (got " + s(p.vpp) + ")");
    // DualPipeV (deepseek-ai/DualPipe): two chunks per rank in a V, and at least 2 x pp micro-batches.
    if (p.schedule == Schedule::dualpipe_v) {
        if (p.vpp != 2) fail("plan.schedule", "= dualpipev needs plan.vpp = 2 (two chunks per rank, the V's down and up legs; got " + s(p.vpp) + ")");
        if (!p.layer_split.empty())
            fail("plan.layer_split", "gives per-stage counts, which do not place DualPipeV's 2 x pp virtual stages: give plan.virtual_layer_split");
        if (micro_batches < 2 * static_cast<i64>(p.pp))
            fail("plan.global_batch", "gives " + s(micro_batches) + " micro-batches; dualpipev needs at least 2 x plan.pp = " + s(2 * static_cast<i64>(p.pp)));
    }
    if (p.vpp > 1) {
        if (p.schedule != Schedule::interleaved_1f1b && p.schedule != Schedule::dualpipe_v)
            fail("plan.vpp", "= " + s(p.vpp) + " needs plan.schedule = interleaved-1f1b or dualpipev (got " + to_string(p.schedule) + ")");
        if (p.pp < 2) fail("plan.vpp", "= " + s(p.vpp) + " needs plan.pp >= 2 (got " + s(p.pp) + ")");
        // A stage whose layers vpp does not divide gets uneven chunks (the first n mod vpp chunks
        // one layer more), as Megatron's explicit layouts for 126- or 94-layer models do; every
        // chunk needs at least one layer, except the last virtual stage, which holds the head
        // (DualPipeV's balanced default may leave it only the head and the MTP modules).
        const std::vector<int> per_stage = stage_layers(m, p);
        const std::vector<int> per_virtual = virtual_stage_layers(m, p);
        for (std::size_t v = 0; v + 1 < per_virtual.size() && p.virtual_layer_split.empty(); ++v)
            if (per_virtual[v] < 1) {
                const int st = rank_of_virtual_stage(p, static_cast<int>(v));
                fail("plan.vpp", "= " + s(p.vpp) + " exceeds the " + s(per_stage[static_cast<std::size_t>(st)]) +
                                     " layers of pipeline stage " + s(st) + " (every virtual stage needs a layer)");
            }
        // Megatron-LM: "number of microbatches must be divisible by pipeline-model-parallel-size
        // when using interleaved schedule" with the default group of pp; Megatron-Core's groups
        // (schedules.py, forward_backward_pipelining_with_interleaving) relax it.
        if (p.schedule == Schedule::interleaved_1f1b && p.microbatch_group == 0 && micro_batches % p.pp != 0) {
            const int g = micro_batches <= std::numeric_limits<int>::max() ? smallest_microbatch_group(static_cast<int>(micro_batches), p.pp) : 0;
            fail("plan.global_batch", "gives " + s(micro_batches) + " micro-batches, not divisible by plan.pp = " + s(p.pp) +
                                          " (required by the interleaved schedule with its default micro-batch group of pp" +
                                          (g > 0 ? "; plan.microbatch_group = " + s(g) + " would admit it)" : ")"));
        }
    }
    if (p.microbatch_group > 0) {
        if (p.schedule != Schedule::interleaved_1f1b)
            fail("plan.microbatch_group", "= " + s(p.microbatch_group) + " needs plan.schedule = interleaved-1f1b (got " + to_string(p.schedule) + ")");
        if (p.microbatch_group < p.pp || p.microbatch_group > micro_batches)
            fail("plan.microbatch_group", "= " + s(p.microbatch_group) + " must lie in [plan.pp, micro-batches] = [" + s(p.pp) + ", " +
                                              s(micro_batches) + "] (Megatron-Core)");
        const i64 last = micro_batches % p.microbatch_group;
        if (last != 0 && last < p.pp)
            fail("plan.microbatch_group", "= " + s(p.microbatch_group) + " leaves a last group of " + s(last) + " of the " + s(micro_batches) +
                                              " micro-batches; it must be 0 or at least plan.pp = " + s(p.pp) +
                                              " (Megatron-Core: a shorter group stalls the pipeline)");
    }

    // Context parallelism: load-balanced causal CP cuts the sequence into 2*cp chunks.
    if (p.cp > 1 && m.seq_len % (2 * static_cast<i64>(p.cp)) != 0)
        fail("plan.cp", "= " + s(p.cp) + ": model.seq_len = " + s(m.seq_len) + " is not divisible by 2 x plan.cp = " + s(2 * static_cast<i64>(p.cp)));
    // Ulysses trades the sequence split for a head split: each CP rank takes heads/cp of a TP
    // rank's query heads and KV heads.
    if (p.cp > 1 && p.cp_comm_type == CpCommType::a2a) {
        if (!m.ulysses_splits_heads(p.tp, p.cp))
            fail("plan.cp_comm_type", "= \"a2a\" splits a TP rank's heads over plan.cp = " + s(p.cp) + ": its " +
                                          s(m.query_heads_per_tp_rank(p.tp)) + " query heads and " + s(m.kv_heads_per_tp_rank(p.tp)) +
                                          " KV heads must both divide by it (use \"p2p\", the ring)");
    }
    // Sequence parallelism splits each sequence over the tp ranks (no effect when tp = 1).
    // Transformer Engine's userbuffers overlap splits the SP all-gather / reduce-scatter of each
    // GEMM into ring steps (Megatron's --tp-comm-overlap requires --sequence-parallel).
    if (p.tp_comm_overlap && (p.tp < 2 || !p.sequence_parallel))
        fail("plan.tp_comm_overlap", "needs plan.tp >= 2 and plan.sequence_parallel = true (got tp " + s(p.tp) +
                                         (p.sequence_parallel ? ", sequence parallel" : ", no sequence parallelism") + ")");
    if (p.moe_a2a_overlap && (!m.is_moe() || p.ep < 2))
        fail("plan.moe_a2a_overlap", "needs a MoE model with plan.ep >= 2 (got ep " + s(p.ep) + (m.is_moe() ? ")" : ", no model.moe)"));
    // Megatron-Core's combined 1F1B pairs a forward with another micro-batch's backward: with a
    // pipeline only in the interleaved schedule (or DualPipeV's pairs), and never around a full
    // recomputation of the layer (transformer_config.py's checks for overlap_moe_expert_parallel_comm).
    if (p.moe_a2a_overlap && p.pp > 1 && p.vpp < 2)
        fail("plan.moe_a2a_overlap", "with plan.pp = " + s(p.pp) + " needs virtual pipeline stages (plan.vpp >= 2; Megatron-Core: "
                                     "\"virtual_pipeline_model_parallel_size must be specified when pipeline_model_parallel_size > 1\")");
    if (p.moe_a2a_overlap && p.recomputes(RecomputeModule::moe))
        fail("plan.recompute_modules", "\"moe\" with plan.moe_a2a_overlap: the merged steps do not rerun a MoE layer's "
                                       "all-to-alls (Megatron-Core: \"disable moe in recompute_modules when enabling "
                                       "overlap_moe_expert_parallel_comm\")");
    if (p.moe_a2a_overlap && m.mtp_depth > 1)
        fail("plan.moe_a2a_overlap", "with model.mtp_depth = " + s(m.mtp_depth) + ": Megatron-Core's combined 1F1B takes at most one MTP "
                                     "layer (\"MTP supports at most one layer when enabling overlap_moe_expert_parallel_comm\")");
    if (p.moe_a2a_overlap && p.recompute == Recompute::full)
        fail("plan.moe_a2a_overlap", "with plan.recompute = \"full\": the merged forward and backward steps run without full "
                                     "recomputation (Megatron-Core: \"disable full recomputation when enabling "
                                     "overlap_moe_expert_parallel_comm\")");
    // An offloaded optimizer (ZeRO-Offload's CPU Adam, ZeRO-Infinity) and the lock-free update
    // work on an fp32 master in host memory.
    if (!p.master_weights && !p.offload.optimizer.all_gpu())
        fail("plan.master_weights", "= false with plan.offload.optimizer: an offloaded optimizer updates an fp32 master in host memory");
    if (!p.master_weights && p.lock_free_update)
        fail("plan.master_weights", "= false with plan.lock_free_update: the delayed host update works on an fp32 master");
    // PyTorch FSDP's fp32 shards: ZeRO-3's, under mixed precision with a master. Its CPUOffload
    // moves shards, gradients and optimizer state together, which the tier splits do not say.
    if (p.fp32_param_shards) {
        if (p.zero_stage != 3) fail("plan.fp32_param_shards", "needs plan.zero_stage = 3 (got " + s(p.zero_stage) + "): they are FSDP's shards");
        if (!p.has_master())
            fail("plan.fp32_param_shards", "needs 16-bit precision with plan.master_weights: the fp32 shards are the master");
        if (!p.offload.optimizer.all_gpu() || !p.offload.params.all_gpu() || !p.offload.grads.all_gpu())
            fail("plan.fp32_param_shards", "with plan.offload: FSDP's CPU offload of shards, gradients and optimizer together is not "
                                           "modelled (set fp32_param_shards false for ZeRO-Offload's layout)");
    }
    if (p.zero3_param_sync && p.zero_stage != 3)
        fail("plan.zero3_param_sync", "needs plan.zero_stage = 3 (got " + s(p.zero_stage) + "): it is how ZeRO-3 fetched parameters");
    // Context parallelism splits a fused kernel's softmax over the ring (Transformer Engine's
    // ring or all-to-all attention); Megatron-Core runs no unfused attention under CP, and the
    // lowering and the runtime hold no (s x s) probabilities there.
    if (p.cp > 1 && !p.flash_attention)
        fail("plan.flash_attention", "= false with plan.cp = " + s(p.cp) +
                                         ": context parallelism runs fused attention kernels (Transformer Engine's ring or all-to-all; "
                                         "Megatron-Core has no unfused attention under CP)");
    if (p.attention_kernel != AttentionKernel::fa3 && !p.flash_attention)
        fail("plan.attention_kernel", std::string("= \"") + to_string(p.attention_kernel) +
                                          "\" needs plan.flash_attention = true (it names a fused kernel)");
    // DeepEP's kernels dispatch tokens between the GPUs of an expert-parallel group.
    if (p.moe_dispatcher == MoeDispatcher::deepep && (!m.is_moe() || p.ep < 2))
        fail("plan.moe_dispatcher", "= \"deepep\" needs a MoE model with plan.ep >= 2 (got ep " + s(p.ep) + (m.is_moe() ? ")" : ", no model.moe)"));
    if (p.moe_probs_at != MoeProbsAt::fc2_input && !m.is_moe())
        fail("plan.moe_probs_at", "= \"fc2_output\" needs a MoE model (model.moe): it places the router's weights");
    // Selective recomputation of a module the model does not have is a mistake, not a no-op.
    if (p.recomputes(RecomputeModule::mla_up_proj) && !m.mla)
        fail("plan.recompute_modules", "names mla_up_proj, which needs multi-head latent attention (model.mla)");
    for (RecomputeModule mod : {RecomputeModule::moe_act, RecomputeModule::moe})
        if (p.recomputes(mod) && !m.is_moe())
            fail("plan.recompute_modules", std::string("names ") + to_string(mod) + ", which needs a MoE model (model.moe)");
    if (p.recomputes(RecomputeModule::shared_experts) && (!m.is_moe() || m.moe->shared_experts == 0))
        fail("plan.recompute_modules", "names shared_experts, which needs model.moe.shared_experts > 0");
    if (p.recomputes(RecomputeModule::mlp)) {
        bool dense = false;
        for (int l = 0; l < m.layers && !dense; ++l) dense = !m.layer_is_moe(l);
        if (!dense) fail("plan.recompute_modules", "names mlp, which recomputes dense MLP layers; every layer of this model is MoE (use moe or moe_act)");
    }
    // Op-level SAC is modelled for what torchtitan runs it on: bias-free decoders (separate Q/K/V
    // matmuls or DeepSeek's MLA) with fused attention, dense or MoE (its Qwen3 and DeepSeek-V3
    // configurations); under TP a dense, non-MLA decoder with sequence parallelism (torchtitan's
    // 2D Llama: its reduce-scatters kept, its all-gathers rerun); without CP (whose attention
    // kernels the policy would save or rerun differently).
    if (p.op_sac()) {
        // A preset's "selective" (torchtitan's) names where it came from and how to state the other.
        const std::string from = p.from_preset("recompute_policy")
                                     ? " (set by plan.framework = \"" + p.framework + "\" for recompute \"selective\"; state "
                                       "recompute_policy \"modules\" for Megatron's module list)"
                                     : "";
        if (m.linear_bias || m.qkv_bias) fail("plan.recompute_policy", "= \"op\" is modelled for models without linear biases" + from);
        if (p.cp > 1) fail("plan.recompute_policy", "= \"op\" is modelled for cp = 1 (got cp " + s(p.cp) + ")" + from);
        if (p.tp > 1 && (m.is_moe() || m.mla || !p.sequence_parallel))
            fail("plan.recompute_policy", "= \"op\" with plan.tp = " + s(p.tp) +
                                              " is modelled for dense decoders without MLA, with plan.sequence_parallel (torchtitan's 2D "
                                              "Llama)" + from);
        if (!p.flash_attention)
            fail("plan.recompute_policy", "= \"op\" needs plan.flash_attention (it saves the SDPA output and log-sum-exp)" + from);
    }
    // A stated loss_parallel describes the eager loss under TP; a preset sets it wherever tp > 1.
    if (p.loss_parallel && !p.from_preset("loss_parallel") && (!p.eager_cross_entropy || p.tp < 2))
        fail("plan.loss_parallel", "needs plan.eager_cross_entropy and plan.tp >= 2 (got tp " + s(p.tp) +
                                       "): it is PyTorch's vocab-sharded eager cross-entropy");
    if (p.torch_pipelining && (p.pp < 2 || p.p2p_blocking))
        fail("plan.torch_pipelining", p.pp < 2 ? "needs plan.pp >= 2 (got pp " + s(p.pp) + "): it describes a pipeline's buffers"
                                               : "cannot be combined with plan.p2p_blocking (DeepSpeed's pipeline engine)");
    if (p.p2p_blocking && p.pp < 2) fail("plan.p2p_blocking", "needs plan.pp >= 2 (got pp " + s(p.pp) + "): it describes pipeline send/recv");
    if (p.p2p_blocking && (p.schedule == Schedule::interleaved_1f1b || p.schedule == Schedule::dualpipe_v))
        fail("plan.p2p_blocking", "needs plan.schedule gpipe or 1f1b (DeepSpeed's pipeline engine has no interleaved schedule; "
                                  "its blocking, parity-ordered send/recv deadlock across virtual stages)");
    if (p.p2p_scatter_gather && (p.pp < 2 || p.tp < 2))
        fail("plan.p2p_scatter_gather", "needs plan.pp >= 2 and plan.tp >= 2 (got pp " + s(p.pp) + ", tp " + s(p.tp) +
                                        "): it splits pipeline tensors across the TP group");
    if (p.p2p_scatter_gather && p.sequence_parallel)
        fail("plan.p2p_scatter_gather", "cannot be combined with plan.sequence_parallel: the pipeline tensors are "
                                        "already split across the TP group");
    if (p.moe_act_fp8_cache) {
        if (!m.is_moe() || m.ffn != FfnKind::swiglu)
            fail("plan.moe_act_fp8_cache", "needs a MoE model with SwiGLU experts (model.moe, model.ffn = \"swiglu\"): it caches the SwiGLU inputs");
        if (p.precision != Precision::fp8)
            fail("plan.moe_act_fp8_cache", "needs plan.precision = \"fp8\" (got \"" + std::string(to_string(p.precision)) + "\")");
        if (p.recompute != Recompute::selective || !p.recomputes(RecomputeModule::moe_act))
            fail("plan.moe_act_fp8_cache", "needs moe_act in plan.recompute_modules (recompute selective): the cached "
                                           "inputs are what the SwiGLU recompute reads");
    }
    if (p.sequence_parallel && p.tp > 1 && (m.seq_len / p.cp) % p.tp != 0)
        fail("plan.sequence_parallel", "needs model.seq_len / plan.cp = " + s(m.seq_len / p.cp) + " divisible by plan.tp = " + s(p.tp));

    // Expert parallelism: experts are spread over ep ranks. By default (expert_tp = tp) they are
    // taken from the dp x cp group; with MoE parallel folding (plan.expert_tp) the expert groups
    // etp x ep x edp tile the stage's tp x cp x dp ranks.
    if (p.ep > 1) {
        if (!m.is_moe()) fail("plan.ep", "= " + s(p.ep) + " needs a MoE model (model.moe is not set)");
        if (m.moe->experts % p.ep != 0)
            fail("plan.ep", "= " + s(p.ep) + " does not divide model.moe.experts = " + s(m.moe->experts));
        if (p.expert_tp == 0) {
            const i64 dpcp = mul_sat(p.dp, p.cp);
            if (dpcp % p.ep != 0)
                fail("plan.ep", "= " + s(p.ep) + " does not divide plan.dp x plan.cp = " + s(dpcp) +
                                    " (or set plan.expert_tp to fold experts over tp x cp x dp)");
        }
    }
    if (p.expert_tp > 0) {
        if (!m.is_moe()) fail("plan.expert_tp", "= " + s(p.expert_tp) + " needs a MoE model (model.moe is not set)");
        const i64 stage = mul_sat(mul_sat(p.tp, p.cp), p.dp), folded = mul_sat(p.expert_tp, p.ep);
        if (stage % folded != 0)
            fail("plan.expert_tp", "x plan.ep = " + s(p.expert_tp) + "*" + s(p.ep) + " = " + s(folded) +
                                       " does not divide plan.tp x plan.cp x plan.dp = " + s(stage));
        if (m.moe->expert_ffn_hidden % p.expert_tp != 0)
            fail("plan.expert_tp", "= " + s(p.expert_tp) + " does not divide model.moe.expert_ffn_hidden = " + s(m.moe->expert_ffn_hidden));
        if (p.expert_tp != p.tp && p.tp > 1 && !p.sequence_parallel)
            fail("plan.expert_tp", "= " + s(p.expert_tp) + " differs from plan.tp = " + s(p.tp) +
                                       ": needs plan.sequence_parallel = true (Megatron requires it for TP with expert parallelism)");
    }

    // DeepSpeed's PipelineEngine (plan.p2p_blocking) refuses ZeRO 2 and 3 ("ZeRO-2 and ZeRO-3 are
    // incompatible with pipeline parallelism", deepspeed/runtime/pipe/engine.py); FSDP under a
    // pipeline schedule (torchtitan, Megatron-Core's FSDP) runs ZeRO-3: PlanSpec::pipelined_fsdp.
    if (p.p2p_blocking && p.pp > 1 && p.zero_stage >= 2)
        fail("plan.zero_stage", "= " + s(p.zero_stage) + " cannot be combined with plan.pp = " + s(p.pp) +
                                    " > 1 under DeepSpeed's pipeline engine (plan.p2p_blocking = true): its PipelineEngine accepts "
                                    "ZeRO stage 0 or 1 only; FSDP under a pipeline schedule (torchtitan) runs ZeRO-3 with pp > 1");
    // Offloading parameters or gradients needs them partitioned first (ZeRO-Offload / ZeRO-Infinity).
    if (p.zero_stage < 1) {
        if (!p.offload.params.all_gpu()) fail("plan.offload.params", "off the GPU needs plan.zero_stage >= 1 (got 0)");
        if (!p.offload.grads.all_gpu()) fail("plan.offload.grads", "off the GPU needs plan.zero_stage >= 1 (got 0)");
    }

    // Full recompute of some layers per stage: not more than a stage holds.
    if (p.recompute_layers > 0) {
        const std::vector<int> per_stage = stage_layers(m, p);
        const int most = *std::max_element(per_stage.begin(), per_stage.end());
        if (p.recompute_layers > most)
            fail("plan.recompute_layers", "= " + s(p.recompute_layers) + " exceeds the " + s(most) + " layers of the largest pipeline stage");
    }
}

}  // namespace strata::sim
