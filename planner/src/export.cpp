// Megatron-LM export. Flag names, types and the cross-field rules they must pass follow
// Megatron-LM's megatron/training/arguments.py (validate_args) and
// megatron/core/transformer/transformer_config.py (__post_init__); the commit they were read at
// and the rules themselves are data in tests/planner/data/megatron_args.json, which
// tests/planner/test_export_conformance.cpp holds every bundled scenario's export to.
#include "strata/planner/export.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "strata/common/error.hpp"
#include "strata/lowering/tensors.hpp"

namespace strata::planner {

using namespace strata::sim;

namespace {

/// Megatron-Core's --pipeline-model-parallel-layout: one '|'-separated stage per virtual stage in
/// model order (virtual stage v on pipeline rank v mod pp), E = embedding, t = decoder layer,
/// m = MTP module, L = loss (e.g. DeepSeek-V3's "Et|tt|...|tt|mL").
std::string megatron_layout(const ModelSpec& m, const std::vector<int>& virtual_layers) {
    std::string out;
    const std::size_t n = virtual_layers.size();
    for (std::size_t i = 0; i < n; ++i) {
        if (i) out += '|';
        if (i == 0) out += 'E';
        out += std::string(static_cast<std::size_t>(virtual_layers[i]), 't');
        if (i + 1 == n) out += std::string(static_cast<std::size_t>(m.mtp_depth), 'm') + "L";
    }
    return out;
}

/// Decoder layers per virtual stage as Megatron will run them, in model order. DualPipeV's V
/// (rank r holds virtual stages r and 2pp-1-r) has no Megatron placement; the nearest is
/// interleaved 1F1B with two virtual stages per rank placed round-robin, each rank keeping the
/// layer count the V gave it (its down leg taking the odd one).
std::vector<int> megatron_virtual_layers(const ModelSpec& m, const PlanSpec& p) {
    if (p.schedule != Schedule::dualpipe_v) return virtual_stage_layers(m, p);
    const std::vector<int> per_rank = stage_layers(m, p);
    std::vector<int> v(static_cast<std::size_t>(2 * p.pp), 0);
    for (int r = 0; r < p.pp; ++r) {
        const int n = per_rank[static_cast<std::size_t>(r)];
        v[static_cast<std::size_t>(r)] = n - n / 2;
        v[static_cast<std::size_t>(p.pp + r)] = n / 2;
    }
    return v;
}

/// Megatron's --attention-backend for the plan's fused-attention choice: Transformer Engine's
/// cuDNN fused attention is the FA3-class kernel on Hopper; "flash" is the flash-attn package
/// (FA2); "unfused" keeps the s x s scores, as a plan without flash attention assumes.
const char* attention_backend(const PlanSpec& p) {
    if (!p.flash_attention) return "unfused";
    return p.attention_kernel == AttentionKernel::fa3 ? "fused" : "flash";
}

}  // namespace

ExportResult export_megatron(const ModelSpec& m, const PlanSpec& p) {
    ExportResult r;
    std::ostringstream o;
    auto arg = [&](const std::string& k, auto v) { o << "--" << k << " " << v << "\n"; };
    auto flag = [&](const std::string& k) { o << "--" << k << "\n"; };
    arg("num-layers", m.layers);
    arg("hidden-size", m.hidden);
    arg("num-attention-heads", m.heads);
    if (m.kv_heads != m.heads) {
        flag("group-query-attention");
        arg("num-query-groups", m.kv_heads);
    }
    if (m.heads > 0 && m.head_dim > 0 && m.head_dim * m.heads != m.hidden) arg("kv-channels", m.head_dim);
    if (m.mla) {
        flag("multi-latent-attention");
        if (m.mla->q_lora_rank > 0) arg("q-lora-rank", m.mla->q_lora_rank);
        arg("kv-lora-rank", m.mla->kv_lora_rank);
        arg("qk-head-dim", m.mla->qk_nope_head_dim);
        arg("qk-pos-emb-head-dim", m.mla->qk_rope_head_dim);
        arg("v-head-dim", m.mla->v_head_dim);
    }
    arg("ffn-hidden-size", m.ffn_hidden);
    arg("seq-length", m.seq_len);
    arg("make-vocab-size-divisible-by", p.vocab_divisible_by);  // Megatron pads the vocabulary to this x tp
    arg("max-position-embeddings", std::max(m.max_position > 0 ? m.max_position : m.seq_len, m.seq_len));
    // Megatron's dropout defaults to 0.1; the simulated model keeps masks only when it has dropout.
    arg("attention-dropout", m.dropout);
    arg("hidden-dropout", m.dropout);
    if (m.ffn == FfnKind::swiglu) flag("swiglu");
    if (m.ffn == FfnKind::relu2) flag("squared-relu");
    if (m.ffn == FfnKind::relu)
        r.unsupported.push_back("a ReLU MLP (Megatron-LM's arguments offer GELU, SwiGLU and squared ReLU: set "
                                "TransformerConfig.activation_func = F.relu in model code)");
    if (m.ffn == FfnKind::geglu)
        r.unsupported.push_back("a GeGLU MLP (Megatron-LM's arguments offer GELU, SwiGLU and squared ReLU: set "
                                "TransformerConfig.gated_linear_unit = True and activation_func = F.gelu in model code)");
    if (m.norm == NormKind::rmsnorm) arg("normalization", "RMSNorm");
    if (m.position == PositionKind::rope) arg("position-embedding-type", "rope");
    if (m.position == PositionKind::none) arg("position-embedding-type", "none");
    if (!m.tied_embeddings) flag("untie-embeddings-and-output-weights");
    if (!m.linear_bias) flag("disable-bias-linear");
    if (!m.linear_bias && m.qkv_bias) flag("add-qkv-bias");  // Qwen2: biases on Q, K, V only
    if (m.qk_norm) flag("qk-layernorm");                        // with --normalization, RMSNorm for Qwen3
    if (m.window_of(0) > 0) {  // Megatron-Core counts the keys before the query: w - 1 of them, none after
        arg("window-size", std::to_string(m.sliding_window - 1) + ",0");
        if (m.window_attn_skip_freq > 0) arg("window-attn-skip-freq", m.window_attn_skip_freq);
    }
    if (m.is_moe()) {
        arg("num-experts", m.moe->experts);
        arg("moe-router-topk", m.moe->top_k);
        // Megatron refuses top-1 routing with a post-top-k softmax (its gradient would be zero).
        if (m.moe->top_k == 1) flag("moe-router-pre-softmax");
        if (m.moe->expert_ffn_hidden > 0 && m.moe->expert_ffn_hidden != m.ffn_hidden)
            arg("moe-ffn-hidden-size", m.moe->expert_ffn_hidden);
        if (m.moe->first_k_dense > 0) {
            // Megatron takes a per-layer pattern: 0 = dense, 1 = MoE.
            std::string pattern = "[";
            for (int l = 0; l < m.layers; ++l) pattern += std::string(l ? "," : "") + (m.layer_is_moe(l) ? "1" : "0");
            arg("moe-layer-freq", "\"" + pattern + "]\"");
        } else if (m.moe->moe_every > 1) {
            arg("moe-layer-freq", m.moe->moe_every);
        }
        if (m.moe->shared_experts > 0)
            arg("moe-shared-expert-intermediate-size", m.moe->shared_experts * (m.moe->expert_ffn_hidden > 0 ? m.moe->expert_ffn_hidden : m.ffn_hidden));
        if (m.moe->capacity_factor > 0) arg("moe-expert-capacity-factor", m.moe->capacity_factor);
        if (m.moe->capacity_factor > 0 && p.moe_pad_to_capacity) flag("moe-pad-expert-input-to-capacity");
        if (m.moe->router_groups > 0) {
            arg("moe-router-num-groups", m.moe->router_groups);
            arg("moe-router-group-topk", m.moe->router_group_topk);
        }
        // The simulated experts run as one grouped GEMM per rank (and Megatron's moe_act
        // recompute requires it); the dispatcher is the one simulated, never Megatron's allgather default.
        flag("moe-grouped-gemm");
        if (p.moe_dispatcher == MoeDispatcher::deepep) {
            // Megatron-Core's flex dispatcher with the DeepEP backend (older releases: --moe-enable-deepep).
            arg("moe-token-dispatcher-type", "flex");
            arg("moe-flex-dispatcher-backend", "deepep");
        } else {
            arg("moe-token-dispatcher-type", "alltoall");
        }
    }
    if (m.mtp_depth > 0) arg("mtp-num-layers", m.mtp_depth);
    arg("tensor-model-parallel-size", p.tp);
    arg("pipeline-model-parallel-size", p.pp);
    if (p.pp > 1) {
        // Megatron's own split is even (layers divisible by pp) with the same count in every
        // virtual stage; anything else, the uneven split Strata simulated included, is written as
        // an explicit layout, which Megatron checks layer by layer.
        const std::vector<int> vs = megatron_virtual_layers(m, p);
        const bool uniform = std::all_of(vs.begin(), vs.end(), [&](int n) { return n == vs.front(); }) && vs.front() > 0;
        const int vpp = static_cast<int>(vs.size()) / p.pp;
        if (!uniform) {
            // Quoted by appending (GCC 12's -Wrestrict misreads const char* + std::string).
            std::string quoted = "\"";
            quoted += megatron_layout(m, vs);
            quoted += '"';
            arg("pipeline-model-parallel-layout", quoted);
        } else if (vpp > 1) {
            arg("num-layers-per-virtual-pipeline-stage", vs.front());
        }
    }
    if (p.schedule == Schedule::interleaved_1f1b && p.microbatch_group > 0 && p.microbatch_group != p.pp)
        arg("microbatch-group-size-per-virtual-pipeline-stage", p.microbatch_group);
    // DualPipeV runs any micro-batch count; Megatron's interleaving needs groups of at least pp
    // with a last group of 0 or >= pp, so a count pp does not divide gets the smallest such group.
    if (p.schedule == Schedule::dualpipe_v && p.micro_batches() % p.pp != 0) {
        const int group = smallest_microbatch_group(p.micro_batches(), p.pp);
        if (group > 0) arg("microbatch-group-size-per-virtual-pipeline-stage", group);
        else r.unsupported.push_back("fewer micro-batches than pipeline stages under interleaving");
    }
    if (p.cp > 1) arg("context-parallel-size", p.cp);
    // Transformer Engine's Ulysses-style CP, or its K/V all-gather (p2p, the ring, is the default).
    // The value goes through TransformerConfig to TE, which accepts "all_gather" (its
    // attn_forward_func_with_cp), though arguments.py's help text spells it "allgather".
    if (p.cp_comm_type == CpCommType::a2a) arg("cp-comm-type", "a2a");
    if (p.cp_comm_type == CpCommType::allgather) arg("cp-comm-type", "all_gather");
    if (p.ep > 1) arg("expert-model-parallel-size", p.ep);
    if (p.expert_tp > 0 && p.expert_tp != p.tp) arg("expert-tensor-parallel-size", p.expert_tp);
    if (p.sequence_parallel && p.tp > 1) flag("sequence-parallel");
    arg("micro-batch-size", p.micro_batch);
    arg("global-batch-size", p.global_batch);
    if (p.zero_stage >= 1) flag("use-distributed-optimizer");
    if (p.op_sac()) {
        r.unsupported.push_back("torchtitan's op-level selective checkpointing (Megatron's selective granularity recomputes modules)");
    } else if (p.recompute == Recompute::selective) {
        arg("recompute-granularity", "selective");
        if (p.recompute_modules != recompute_bit(RecomputeModule::core_attn)) {
            std::string names;
            for (const std::string& n : recompute_module_names(p)) names += (names.empty() ? "" : " ") + n;
            arg("recompute-modules", names);
        }
    }
    if (p.recompute == Recompute::full && p.recompute_every > 0) {
        // Megatron recomputes the first N layers of a stage, not every n-th: as many layers as the
        // largest stage recomputes (the same memory, other layers).
        int most = 0;
        for (int s = 0; s < p.pp; ++s) {
            const int n = static_cast<int>(stage_layer_ids(m, p, s).size());
            int rec = 0;
            for (int i = 0; i < n; ++i) rec += layer_recomputed(m, p, s, i) ? 1 : 0;
            most = std::max(most, rec);
        }
        arg("recompute-granularity", "full");
        arg("recompute-method", "block");
        arg("recompute-num-layers", most);
        r.unsupported.push_back("every " + std::to_string(p.recompute_every) +
                                "-th layer recomputed (torchtitan): written as Megatron's block method over as many layers");
    } else if (p.recompute == Recompute::full) {
        arg("recompute-granularity", "full");
        arg("recompute-method", p.recompute_layers >= 0 ? "block" : "uniform");
        arg("recompute-num-layers", p.recompute_layers >= 0 ? p.recompute_layers : 1);
    }
    if (p.precision == Precision::bf16) flag("bf16");
    if (p.precision == Precision::fp16) flag("fp16");
    if (p.precision == Precision::fp8) {
        flag("bf16");
        arg("fp8-format", "hybrid");
        // Megatron refuses FP8 recompute of moe_act/layernorm under its default delayed scaling;
        // DeepSeek-style runs use blockwise (1x128 / 128x128) scales anyway.
        const bool blockwise = p.recomputes(RecomputeModule::moe_act) || p.recomputes(RecomputeModule::layernorm) || p.moe_act_fp8_cache;
        arg("fp8-recipe", blockwise ? "blockwise" : "delayed");
    }
    // Megatron accumulates and reduces bf16 gradients in fp32 unless told otherwise; say which
    // the plan was simulated with, so the run keeps the same memory and DP traffic.
    const bool bf16_weights = p.precision == Precision::bf16 || p.precision == Precision::fp8;
    if (bf16_weights && !p.fp32_grads) flag("grad-reduce-in-bf16");
    if (p.precision == Precision::fp16 && p.fp32_grads) flag("accumulate-allreduce-grads-in-fp32");
    if (!p.grad_accum_fusion) flag("no-gradient-accumulation-fusion");
    if (!p.master_weights)
        r.unsupported.push_back("pure 16-bit weights without an fp32 master (Megatron's optimizer keeps fp32 main params)");
    if (p.fsdp_fp32_shards())
        r.unsupported.push_back("PyTorch FSDP's fp32 parameter shards (Megatron's distributed optimizer keeps bf16 weights beside fp32 "
                                "main params)");
    if (p.exp_avg_dtype != Precision::fp32 || p.exp_avg_sq_dtype != Precision::fp32) {
        flag("use-precision-aware-optimizer");
        arg("exp-avg-dtype", to_string(p.exp_avg_dtype));
        arg("exp-avg-sq-dtype", to_string(p.exp_avg_sq_dtype));
    }
    arg("attention-backend", attention_backend(p));
    if (p.flash_attention && p.attention_kernel == AttentionKernel::fa1)
        r.unsupported.push_back("FlashAttention v1 kernels (Megatron's flash backend runs FlashAttention-2 or later)");
    if (p.overlap_grad_reduce) flag("overlap-grad-reduce");
    // Megatron counts a bucket in parameters (DistributedDataParallelConfig.bucket_size); the plan
    // in bytes of gradients. Written only when the plan chose one: Megatron's own default is
    // max(4e7, 1e6 x dp x cp) parameters.
    if (p.dp_bucket_bytes != PlanSpec{}.dp_bucket_bytes)
        arg("ddp-bucket-size", std::max<long long>(1, std::llround(static_cast<double>(p.dp_bucket_bytes) / p.grad_bytes())));
    // Megatron overlaps the parameter all-gather only under the distributed optimizer and with the
    // gradient reduce-scatter overlapped as well.
    if (p.overlap_param_gather && p.zero_stage >= 1) {
        if (p.overlap_grad_reduce) flag("overlap-param-gather");
        else r.unsupported.push_back("an overlapped parameter all-gather without an overlapped gradient reduction");
    }
    if (p.tp_comm_overlap) flag("tp-comm-overlap");
    if (!p.tp_overlap_rs_fp8)
        r.unsupported.push_back("TP overlap's reduce-scatter in bf16 under FP8 (torchtitan's async TP; Transformer Engine's "
                                "userbuffers reduce the FP8 output)");
    if (p.moe_a2a_overlap) {
        flag("overlap-moe-expert-parallel-comm");
        flag("delay-wgrad-compute");
    }
    // The environment the simulation assumed: TP/CP collectives ordered on one hardware queue
    // (Megatron asserts it below Blackwell), except where the MoE all-to-all overlap wants more.
    if ((p.tp > 1 || p.cp > 1) && !p.moe_a2a_overlap) r.env.emplace_back("CUDA_DEVICE_MAX_CONNECTIONS", "1");
    if (p.moe_a2a_overlap) r.env.emplace_back("CUDA_DEVICE_MAX_CONNECTIONS", "32");
    if (p.expandable_segments) r.env.emplace_back("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True");
    if (p.moe_pad_to_capacity && !(m.is_moe() && m.moe->capacity_factor > 0))
        r.unsupported.push_back("padding to an expert capacity without a capacity factor (Megatron-LM refuses "
                                "--moe-pad-expert-input-to-capacity without --moe-expert-capacity-factor; it has no effect here)");
    if (p.schedule == Schedule::gpipe) r.unsupported.push_back("GPipe schedule (Megatron-LM runs 1F1B)");
    if (p.schedule == Schedule::dualpipe_v)
        r.unsupported.push_back("DualPipeV schedule (deepseek-ai/DualPipe): written as Megatron-Core's interleaved 1F1B with 2 virtual "
                                "stages per rank, each rank keeping its layer count, the head on the last rank instead of rank 0");
    if (m.mtp_depth > 0 && m.position == PositionKind::learned)
        r.unsupported.push_back("MTP modules with learned positions (Megatron-LM's validate_args allows MTP with rope or none)");
    if (p.p2p_blocking) r.unsupported.push_back("blocking pipeline p2p (DeepSpeed's pipeline engine; Megatron overlaps send/recv)");
    if (p.torch_pipelining)
        r.unsupported.push_back("torch.distributed.pipelining's buffers (a gradient receive buffer per micro-batch, every output kept to its "
                                "backward; Megatron frees a sent output's data)");
    if (p.p2p_scatter_gather)
        r.unsupported.push_back("pipeline scatter/gather without sequence parallelism (Megatron-LM before Megatron-Core; "
                                "Megatron-Core sends whole tensors: enable --sequence-parallel instead)");
    if (p.eager_elementwise) r.unsupported.push_back("unfused eager elementwise ops (Megatron-LM fuses its norms and activations)");
    if (!p.loss_upcast)
        r.unsupported.push_back("a loss that keeps the logits in their dtype (Megatron's vocab-parallel cross-entropy keeps an fp32 softmax)");
    if (p.eager_cross_entropy) r.unsupported.push_back("an eager PyTorch cross-entropy (Megatron's vocab-parallel one is fused)");
    if (p.bucket_reduce_barrier)
        r.unsupported.push_back("a wait for the earlier buckets' reductions before each one (DeepSpeed's ZeRO-2; Megatron's DDP does not wait)");
    if (p.cpu_grad_accumulation)
        r.unsupported.push_back("gradients summed over micro-batches on the host (FSDP's CPU offload; Megatron keeps its gradient buffers on the GPU)");
    if (p.moe_act_fp8_cache) r.unsupported.push_back("FP8 cache of the MoE SwiGLU inputs (DeepSeek-V3's own framework; Megatron keeps them in BF16)");
    if (p.moe_probs_at == MoeProbsAt::fc2_output)
        r.unsupported.push_back("router weights applied to the expert outputs (Megatron-Core applies them before fc2, in its weighted SwiGLU)");
    if (p.zero_stage >= 2) r.unsupported.push_back("ZeRO stage " + std::to_string(p.zero_stage) + " (Megatron's distributed optimizer shards only optimizer states and, with overlap, gradients; use DeepSpeed)");
    if (!p.offload.optimizer.all_gpu() || !p.offload.params.all_gpu() || !p.offload.grads.all_gpu())
        r.unsupported.push_back("offload of model states (Megatron-LM has only --optimizer-cpu-offload in recent versions; use DeepSpeed)");
    if (!p.offload.activations.all_gpu()) r.unsupported.push_back("activation offload");
    if (p.lock_free_update) r.unsupported.push_back("lock-free (delayed) optimizer update (Angel-PTM)");
    r.text = o.str();
    return r;
}

}  // namespace strata::planner
