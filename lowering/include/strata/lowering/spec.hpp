// The three inputs of every Strata question, as value types: what is trained (ModelSpec), on what
// (ClusterSpec) and how it is split (PlanSpec). Parsed and validated at the edge (spec_io.hpp);
// everything below the edge trusts them. Vocabulary follows Megatron-LM. Units: SI (bytes, bytes/s,
// seconds); the JSON files use the human units named in docs/formats.md.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::sim {

/// gelu: two matrices around a GELU; swiglu: gate and up, then down (three); geglu: the same
/// three with a GELU (tanh form) gate (Gemma: HF's gelu_pytorch_tanh); relu2: two matrices around
/// a squared ReLU (Nemotron-4; Megatron --squared-relu).
enum class FfnKind { gelu, swiglu, relu2, relu, geglu };
/// A gated MLP: fc1 holds gate and up (2 x ffn rows), the activation multiplies them.
inline bool gated(FfnKind k) { return k == FfnKind::swiglu || k == FfnKind::geglu; }
enum class NormKind { layernorm, rmsnorm };
enum class PositionKind { learned, rope, none };

/// Mixture-of-Experts block description (DeepSeek/Mixtral style).
struct MoeSpec {
    int experts = 0;                    ///< routed experts per MoE layer
    int top_k = 1;                      ///< experts each token is routed to
    std::int64_t expert_ffn_hidden = 0; ///< FFN width of one expert (0 = model.ffn_hidden)
    int moe_every = 1;                  ///< every n-th layer is MoE (1 = all)
    int first_k_dense = 0;              ///< the first k layers stay dense (DeepSeek's first_k_dense_replace)
    int shared_experts = 0;             ///< always-on experts (DeepSeek), each expert_ffn_hidden wide
    double capacity_factor = 0.0;       ///< 0 = dropless
    double load_skew = 0.0;             ///< hottest expert's extra load: 0 = uniform, 1 = twice the mean
    /// Group-limited routing (DeepSeek-V3's node-limited gate; HF n_group / topk_group, Megatron's
    /// --moe-router-num-groups / --moe-router-group-topk): the experts form router_groups equal
    /// groups and a token picks its top_k experts from its router_group_topk best groups only.
    /// 0 / 0 = unrestricted routing.
    int router_groups = 0;
    int router_group_topk = 0;
    /// How tokens pick their experts, for where their copies go (the dispatch's distinct ranks and
    /// nodes a token reaches): `learned`, a trained router, taken as spreading each token's
    /// experts uniformly; `round_robin`, NeMo AutoModel's FakeBalancedGate (its benchmarks'
    /// fake_balanced_gate): token t takes experts k t .. k t + k - 1 (mod experts), perfectly
    /// balanced and, with Megatron's contiguous expert placement, on as few ranks as possible.
    enum class Routing { learned, round_robin };
    Routing routing = Routing::learned;
    /// A learned gate: router weights, scores over the experts and a backward. AutoModel's fake
    /// gate has none of them (it writes the routing from the token count).
    bool has_router() const { return routing != Routing::round_robin; }
};

/// Multi-head latent attention (DeepSeek-V2/V3; Megatron-Core MLASelfAttention): queries through a
/// low-rank bottleneck (q_lora_rank; 0 = a plain h -> heads x (nope + rope) projection), keys and
/// values from one compressed latent of kv_lora_rank plus a shared RoPE key of qk_rope_head_dim.
/// Scores use qk_nope_head_dim + qk_rope_head_dim per head, values v_head_dim.
struct MlaSpec {
    std::int64_t q_lora_rank = 0;
    std::int64_t kv_lora_rank = 0;
    std::int64_t qk_nope_head_dim = 0;
    std::int64_t qk_rope_head_dim = 0;
    std::int64_t v_head_dim = 0;
};

/// A decoder-only Transformer (GPT, LLaMA, Mistral, Qwen, Mixtral, DeepSeek-style MoE).
struct ModelSpec {
    std::string name;
    int layers = 0;
    std::int64_t hidden = 0;
    int heads = 0;
    int kv_heads = 0;               ///< GQA/MQA; == heads for MHA
    std::int64_t head_dim = 0;      ///< usually hidden / heads
    std::int64_t ffn_hidden = 0;
    FfnKind ffn = FfnKind::gelu;
    std::int64_t vocab = 0;
    std::int64_t seq_len = 0;
    std::int64_t max_position = 0;  ///< rows of a learned position table (0 = seq_len)
    NormKind norm = NormKind::layernorm;
    PositionKind position = PositionKind::learned;
    bool tied_embeddings = false;
    bool linear_bias = false;       ///< biases in QKV/proj/MLP linears (GPT-2/3: true; LLaMA: false)
    bool qkv_bias = false;          ///< bias on QKV only (Qwen2)
    /// A norm over each head's query and key before RoPE (Qwen3, OLMo 2, Gemma 3; Megatron-Core
    /// --qk-layernorm): head_dim weights each, and the pre-norm Q and K kept for its backward.
    bool qk_norm = false;
    /// Sliding-window attention (Mistral, Gemma 2/3, GPT-OSS): a query attends to itself and the
    /// sliding_window - 1 tokens before it (HF's sliding_window; Megatron-Core --window-size
    /// w-1,0); 0 = the whole causal context. With window_attn_skip_freq N > 0 every N-th layer
    /// (1-based: layers N, 2N, ...) attends to the whole context (Megatron-Core
    /// --window-attn-skip-freq; GPT-OSS and Gemma 2: 2, Gemma 3: 6); 0: every layer is windowed.
    std::int64_t sliding_window = 0;
    int window_attn_skip_freq = 0;
    double dropout = 0.0;           ///< dropout probability (GPT-3 in Megatron: 0.1); > 0 stores masks
    std::optional<MoeSpec> moe;
    std::optional<MlaSpec> mla;     ///< multi-head latent attention instead of MHA/GQA
    /// Multi-token prediction modules (DeepSeek-V3, Megatron-Core --mtp-num-layers): each one an
    /// embedding lookup, two norms, a 2h -> h projection, one transformer layer built like the
    /// last decoder layer, and the shared output head and loss, on the last pipeline stage.
    int mtp_depth = 0;
    std::string description;        ///< free text: sources, assumptions (JSON "description")

    bool is_moe() const { return moe.has_value() && moe->experts > 0; }
    /// The window of a layer (0-based) in tokens, 0 where it attends to the whole context.
    std::int64_t window_of(int layer) const {
        if (sliding_window <= 0 || sliding_window >= seq_len) return 0;
        return window_attn_skip_freq > 0 && (layer + 1) % window_attn_skip_freq == 0 ? 0 : sliding_window;
    }
    bool layer_is_moe(int layer) const {
        return is_moe() && layer >= moe->first_k_dense && (layer % moe->moe_every) == (moe->moe_every - 1);
    }
    /// A TP rank's query heads, and its KV heads (at least one: Megatron replicates KV heads when
    /// tp exceeds them).
    int query_heads_per_tp_rank(int tp) const { return heads / tp; }
    int kv_heads_per_tp_rank(int tp) const { return std::max(1, (kv_heads > 0 ? kv_heads : heads) / tp); }
    /// Ulysses' all-to-all (plan.cp_comm_type "a2a") can split a TP rank's heads over cp: both its
    /// query and its KV heads divide by cp (validate_plan's rule, the planner's search).
    bool ulysses_splits_heads(int tp, int cp) const {
        return query_heads_per_tp_rank(tp) % cp == 0 && kv_heads_per_tp_rank(tp) % cp == 0;
    }
};

enum class NetTopology { fat_tree, rail_optimized };

/// A pool of identical nodes. Fields left 0/empty take the hwdb node/GPU defaults when resolved.
/// How a cluster behaves over a whole run: failures, checkpoints and energy (planner/goodput.hpp,
/// planner/energy.hpp; docs/formats.md). Absent: the planner's published defaults.
struct ClusterOperations {
    std::optional<double> interruptions_per_gpu_hour;  ///< unexpected job interruptions, per GPU-hour
    std::optional<double> restart_s;                    ///< detect, reschedule, reload after one
    std::optional<double> checkpoint_Bps;               ///< a parallel file system's write rate for the job (else the node SSDs)
    bool checkpoint_async = false;                      ///< training stalls only for the copy to host memory
    std::optional<double> checkpoint_interval_s;        ///< fixed interval (else Young/Daly)
    std::optional<double> pue;                          ///< facility power / IT power, >= 1
    std::optional<double> usd_per_kwh;                  ///< energy price
    std::optional<double> host_power_w;                 ///< per node: CPUs, DRAM, fans, NVSwitches
    std::optional<double> network_power_w;              ///< per node: NICs and its share of the switches
    std::optional<double> gpu_power_w;                  ///< one GPU computing (a measured figure; else TDP)
};

struct ClusterSpec {
    std::string name;
    std::string gpu;                  ///< hwdb GPU id, e.g. "H100-SXM5-80GB"
    int nodes = 1;
    int gpus_per_node = 8;
    std::string node;                 ///< hwdb node id, e.g. "DGX-H100" ("" = generic)
    std::string intra_link;           ///< hwdb link id of the scale-up fabric ("" = from GPU)
    std::string nic;                  ///< hwdb link id of one NIC, e.g. "ib-ndr" ("" = from node)
    int nics_per_node = 0;
    double nic_Bps = 0;               ///< override of one NIC's per-direction bandwidth
    NetTopology topology = NetTopology::rail_optimized;
    double oversubscription = 1.0;    ///< fat-tree leaf uplink oversubscription (1 = non-blocking)
    int nodes_per_leaf = 32;
    int gpus_per_pcie_switch = 2;     ///< GPUs sharing one PCIe switch (and its host uplink)
    double host_dram_bytes = 0;
    std::string cpu;                  ///< hwdb CPU id ("" = from node)
    std::string ssd;                  ///< hwdb SSD id ("" = from node)
    int ssds_per_node = 0;
    double price_per_gpu_hour = 0;    ///< USD
    /// Full-mode heterogeneity: per-GPU slowdown factors (1 = nominal), applied by global rank.
    std::vector<std::pair<int, double>> slow_gpus;
    std::string description;          ///< free text: sources of prices and figures
    ClusterOperations ops;            ///< failures, checkpoints, energy (optional keys)

    int gpu_count() const { return nodes * gpus_per_node; }
};

/// dualpipe_v: DeepSeek's DualPipeV (the V-shaped, cut-in-half DualPipe; deepseek-ai/DualPipe):
/// the model in 2 x pp virtual stages, rank r holding stage r on the way down and stage 2pp-1-r on
/// the way back, so rank 0 holds both the embedding and the head; vpp = 2.
enum class Schedule { gpipe, one_f_one_b, interleaved_1f1b, dualpipe_v };
/// MoE token dispatcher: a flat all-to-all over the EP group (Megatron's alltoall dispatcher), or
/// DeepEP's hierarchical kernels (Megatron's flex dispatcher with the DeepEP backend): one RDMA
/// transfer per token and destination node, then an NVLink fan-out to the experts' GPUs.
enum class MoeDispatcher { alltoall, deepep };
/// How context parallelism exchanges the sequence: p2p, the ring passing K/V blocks (Megatron-Core's
/// default); a2a, all-to-alls that trade the sequence split for a head split around the attention
/// core (DeepSpeed-Ulysses; Megatron-Core --cp-comm-type a2a); allgather, every rank's K/V
/// all-gathered before the attention and their gradients reduce-scattered after its backward
/// (Megatron-Core --cp-comm-type allgather, Transformer Engine's KV all-gather; PyTorch's SDPA
/// context parallelism, which torchtitan runs; Llama 3's CP, arXiv:2407.21783 Sec. 3.3.2).
enum class CpCommType { p2p, a2a, allgather };
/// Where the router's weights multiply the routed experts' results. fc2_input: inside the expert,
/// on the activation's output before fc2 (Megatron-Core's weighted SwiGLU, its default), so the
/// weights' gradient needs only tensors fc2 keeps anyway. fc2_output: on the expert outputs at the
/// combine (older Megatron-Core's weighted unpermute, torchtitan), which keeps those outputs,
/// (tokens x top_k, h), for the weights' gradient.
enum class MoeProbsAt { fc2_input, fc2_output };
/// Fused attention kernel family: FA3-class (FlashAttention-3, cuDNN's fused flash kernels, the
/// attention model's anchors) or FlashAttention-2-class (FA2, Triton flash: 2023-era frameworks),
/// which reaches about 0.55x of it on Hopper and is what the Ampere anchors already describe.
/// Fused attention kernel families (docs/costs.md): fa3 = FlashAttention-3 / cuDNN, fa2 =
/// FlashAttention-2, fa1 = FlashAttention v1 and its Triton port (2022-23 frameworks).
enum class AttentionKernel { fa3, fa2, fa1 };
enum class Recompute { none, selective, full };
/// The parts of a layer selective recomputation drops and recomputes (Megatron-Core's
/// --recompute-modules, same names): core_attn (the softmax/flash state, Korthikanti's selective
/// recomputation), layernorm (the norm outputs feeding QKV and fc1), mla_up_proj (MLA's Q, K, V
/// from the latents), mlp (dense MLP intermediates), moe_act (the experts' activation outputs),
/// shared_experts (the shared experts' intermediates) and moe (the whole MoE block, dispatch
/// included).
enum class RecomputeModule { core_attn, layernorm, mla_up_proj, mlp, moe_act, shared_experts, moe, count };
/// How selective recomputation chooses what a layer keeps. modules: Megatron-Core's
/// --recompute-modules (plan.recompute_modules). op: torchtitan's op-level selective activation
/// checkpointing (selective_ac_option = "op"): every layer keeps its input and the outputs of the
/// matmuls, SDPA and reduce-scatters, except every second matmul of the layer in forward order,
/// and reruns the rest (norms, RoPE, activations, the even matmuls) before its backward.
enum class RecomputePolicy { modules, op };
enum class Precision { fp32, bf16, fp16, fp8 };
enum class Tier { gpu = 0, cpu = 1, ssd = 2 };
constexpr int kTierCount = 3;

/// Where a class of model state lives: fractions per tier that sum to 1 (Angel-PTM's split).
struct TierSplit {
    double gpu = 1.0, cpu = 0.0, ssd = 0.0;
    double of(Tier t) const { return t == Tier::gpu ? gpu : t == Tier::cpu ? cpu : ssd; }
    bool all_gpu() const { return cpu == 0.0 && ssd == 0.0; }
};

struct OffloadSpec {
    TierSplit optimizer, params, grads, activations;
};

/// How the model is split and run (Megatron-LM vocabulary).
struct PlanSpec {
    int tp = 1, pp = 1, dp = 1, cp = 1, ep = 1;
    /// Tensor parallelism of the experts (Megatron's --expert-tensor-parallel-size, "MoE parallel
    /// folding"): expert groups are laid over the stage's tp x cp x dp ranks as etp (fastest) x ep x
    /// edp. 0 = tp (Megatron's default: experts split like the dense MLP, EP carved out of dp x cp).
    int expert_tp = 0;
    int vpp = 1;                          ///< virtual stages per pipeline rank (interleaving)
    /// Interleaved 1F1B: micro-batches that pass through one chunk before the next chunk takes them
    /// (Megatron-Core's --microbatch-group-size-per-virtual-pipeline-stage). 0 = pp, the SC21
    /// depth-first schedule; larger groups admit micro-batch counts that pp does not divide.
    int microbatch_group = 0;
    /// The group size in effect: microbatch_group, or pp when unset.
    int vpp_group() const { return microbatch_group > 0 ? microbatch_group : pp; }
    int micro_batch = 1;                  ///< sequences per micro-batch
    int global_batch = 1;                 ///< sequences per optimizer step
    bool sequence_parallel = false;
    bool flash_attention = true;          ///< fused attention: no s^2 activations kept
    AttentionKernel attention_kernel = AttentionKernel::fa3;  ///< which fused kernel family (costs.md)
    Schedule schedule = Schedule::one_f_one_b;
    int zero_stage = 0;                   ///< 0..3; 1 = Megatron's distributed optimizer
    Recompute recompute = Recompute::none;
    int recompute_layers = -1;            ///< full recompute: layers per stage recomputed (-1 = all)
    /// Full recompute of every n-th layer a pipeline rank holds, counted across its chunks in
    /// order (torchtitan's selective_ac_option = n: layers n, 2n, ... of the rank); 0 = unset.
    int recompute_every = 0;
    RecomputePolicy recompute_policy = RecomputePolicy::modules;  ///< selective recompute only
    /// Selective recompute: bit i set = RecomputeModule i is recomputed (default core_attn only).
    unsigned recompute_modules = 1u << static_cast<unsigned>(RecomputeModule::core_attn);  // recompute_bit(core_attn)
    Precision precision = Precision::bf16;
    /// Adam's first and second moments (Megatron's --use-precision-aware-optimizer with
    /// --exp-avg-dtype / --exp-avg-sq-dtype): fp32 by default, bf16/fp16/fp8 to save state memory.
    Precision exp_avg_dtype = Precision::fp32;
    Precision exp_avg_sq_dtype = Precision::fp32;
    /// Bytes per parameter of the two moments together.
    double adam_moment_bytes() const;
    /// Bytes a fused GPU AdamW moves per parameter it updates (apex's multi_tensor_adam, torch's
    /// fused AdamW): the fp32 weights (the master under mixed precision) and both moments read and
    /// written, the gradient read, and under mixed precision the 2-byte weights written.
    double adam_gpu_bytes_per_param() const;
    /// Gradients accumulated and data-parallel reduced in fp32 under mixed precision (Megatron's
    /// --accumulate-allreduce-grads-in-fp32, its default for bf16): 4 bytes per parameter instead
    /// of the weights' 2 (the ZeRO paper's convention, Megatron's --grad-reduce-in-bf16).
    bool fp32_grads = false;
    /// Under 16-bit precision, the optimizer updates an fp32 master copy of the weights (Megatron,
    /// DeepSpeed, FSDP2 over fp32 parameters, autocast). false: pure 16-bit training, the weights
    /// updated in their own type and Adam's moments in the moments' types, no master (a model
    /// loaded in bf16 under FSDP2's MixedPrecisionPolicy, NeMo AutoModel's default).
    bool master_weights = true;
    /// An fp32 master is kept: 16-bit precision with master_weights.
    bool has_master() const { return precision != Precision::fp32 && master_weights; }
    /// ZeRO-3's shards are the fp32 parameters themselves, updated in place (PyTorch FSDP's mixed
    /// precision, FSDP1 and FSDP2): the 16-bit weights exist only as the gathers' output, cast from
    /// the shard, and the sharded gradients take the parameters' type. No separate master and no
    /// persistent 16-bit shard: 4 + 4 + 8 bytes a parameter, sharded, where Megatron's and
    /// DeepSpeed's layout (2-byte shard beside a 12-byte fp32 optimizer state) keeps 2 + 2 + 12.
    bool fp32_param_shards = false;
    /// fp32_param_shards in effect: ZeRO-3 over dp x cp > 1 under mixed precision with a master.
    bool fsdp_fp32_shards() const { return fp32_param_shards && zero_stage == 3 && dp * cp > 1 && has_master(); }
    /// Bytes per element of the gradients a rank keeps between steps: its shard under ZeRO-2/3
    /// (fp32 under fsdp_fp32_shards), else the whole buffer, at grad_bytes().
    double kept_grad_bytes() const { return fsdp_fp32_shards() ? 4.0 : grad_bytes(); }
    /// Bytes per gradient element, in memory and on the wire of the data-parallel reduction.
    double grad_bytes() const;
    /// The weight-gradient GEMMs accumulate into the gradient buffer themselves (Megatron's
    /// --gradient-accumulation-fusion, on by default). Off: each micro-batch's weight gradients
    /// are added in by a separate memory-bound kernel, as autograd does under DeepSpeed's engine
    /// or PyTorch DDP: micro-batches 2..m read both and write the sum (6 bytes per parameter),
    /// or with fp32_grads every micro-batch reads 2 and updates 4 (10 bytes per parameter).
    bool grad_accum_fusion = true;
    /// Unfused accumulation has a fresh weight gradient to add into a sum in the step's steady
    /// state: from the second micro-batch with 16-bit sums, in every one with fp32 sums.
    bool adds_unfused_grads() const { return !grad_accum_fusion && (micro_batches() > 1 || grad_bytes() > 2); }
    /// The cross-entropy upcasts the logits and keeps an fp32 softmax for its backward (Megatron's
    /// vocab-parallel loss; PyTorch's under autocast). Off: a kernel that reads the logits in their
    /// dtype and keeps only them (flash-attn's CrossEntropyLoss, llm-foundry's default). Memory
    /// only: the loss's time is costed the same either way.
    bool loss_upcast = true;
    /// The cross-entropy runs as eager PyTorch ops, F.cross_entropy(logits.float(), labels)
    /// (torchtitan's loss_fn, Hugging Face models): log_softmax keeps its output for the backward,
    /// and the backward holds it beside nll_loss's logits-sized gradient and log_softmax's
    /// (three fp32 logits-sized tensors at once). Off: a fused kernel (Megatron's vocab-parallel
    /// cross-entropy) that turns the softmax into the gradient in place. Memory only, like loss_upcast.
    bool eager_cross_entropy = false;
    /// The eager loss under TP runs in PyTorch's loss_parallel (torch distributed/tensor/parallel/
    /// loss.py, torchtitan's default under TP): DTensor's vocab-sharded decomposition of
    /// log_softmax (the shifted logits, their exponentials and the result each a new fp32 tensor)
    /// and a fused nll/log_softmax backward (zeros, exp of the output and their sum at once).
    /// Only with eager_cross_entropy and tp > 1.
    bool loss_parallel = false;
    /// The pipeline runs in torch.distributed.pipelining (torchtitan's PP): each stage allocates a
    /// receive buffer per micro-batch for the gradients coming back (stage.py
    /// _prepare_backward_infra, held for the step) and keeps each micro-batch's output until its
    /// backward (fwd_cache), where Megatron frees a sent output's data. Only with pp > 1.
    bool torch_pipelining = false;
    OffloadSpec offload;
    /// Gradients streamed to the host (streams_grads_to_host) over several micro-batches: each later
    /// micro-batch's slice comes down with the backward waiting for it and the host adds it into its
    /// sum on the CPU (FSDP's CPU offload: foreach_reduce's blocking D2H, then `+=` on the CPU
    /// tensor). Off: the sum comes up and is added on the GPU before the copy down (DeepSpeed's
    /// async_accumulate_grad_in_cpu_via_gpu). No effect on gradients kept on the GPU.
    bool cpu_grad_accumulation = false;
    bool lock_free_update = false;        ///< Angel-PTM: step i's optimizer overlaps step i+1's forward
    bool overlap_grad_reduce = true;      ///< DP reduce bucketed and overlapped with backward
    /// ZeRO-2 under overlap_grad_reduce as DeepSpeed runs it: before a bucket's reduction the
    /// backward waits for the reductions before it (average_tensor: torch.cuda.synchronize()
    /// until 2023, current_stream().wait_stream(reduction_stream) since June 2024), so a bucket's
    /// reduction hides only under the next bucket's backward.
    bool bucket_reduce_barrier = false;
    bool overlap_param_gather = true;     ///< ZeRO-3 / dist-opt all-gather prefetched
    /// ZeRO-3 as DeepSpeed ran it before v0.6 (2021): each parameter all-gathered and each gradient
    /// reduce-scattered by a call of its own, each gather after a device-wide synchronize, so a
    /// layer's gathers and reductions run between its neighbours' kernels, not beside them
    /// (partition_parameters.py _allgather_param; batched and overlapped since PR #1453, 2022).
    bool zero3_param_sync = false;
    bool tp_comm_overlap = false;         ///< TE userbuffers: SP all-gather / reduce-scatter pipelined with their GEMMs
    /// Under FP8 with tp_comm_overlap, the reduce-scatter's ring steps move the GEMM's FP8 output
    /// (Transformer Engine's FP8 userbuffers); false: its bf16 output (torchtitan's async TP,
    /// torch's fused_scaled_matmul_reduce_scatter). The all-gather side moves FP8 either way.
    bool tp_overlap_rs_fp8 = true;
    /// Pipeline send/recv in line with compute (DeepSpeed's PipelineEngine: blocking NCCL p2p on
    /// the compute stream) instead of beside it (Megatron's batched isend/irecv).
    bool p2p_blocking = false;
    /// Pipeline tensors cross stages in 1/tp pieces, one per TP rank, and are all-gathered over
    /// NVLink on arrival (Megatron-LM's scatter/gather of SC21 Sec. 4.1, DeepSpeed's partitioned
    /// pipe buffers). Megatron-Core sends whole tensors; with sequence parallelism they are sharded anyway.
    bool p2p_scatter_gather = false;
    /// PyTorch's allocator runs with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the
    /// ENV_VARS of Megatron-LM's examples/moe_recipes set it): pages mapped on demand, so the
    /// memory of a freed hole can be mapped again elsewhere. Only the allocator replay reads it.
    bool expandable_segments = false;
    /// With moe_act recomputed under FP8: the routed experts' SwiGLU inputs (the fc1 outputs kept
    /// for the recompute) are cached in FP8, 1 byte per element instead of 2 (DeepSeek-V3,
    /// arXiv:2412.19437 Sec. 3.3.3, "Inputs of the SwiGLU operator in MoE").
    bool moe_act_fp8_cache = false;
    /// MoE all-to-all hidden behind another micro-batch's computation (Megatron-Core's
    /// --overlap-moe-expert-parallel-comm batch-level overlap, DeepSeek's DualPipe): the dispatch
    /// and combine run beside the compute stream and are joined at the end of the pass.
    bool moe_a2a_overlap = false;
    /// With model.moe.capacity_factor: every expert processes exactly its capacity of rows, the
    /// empty slots padded (GShard's and DeepSpeed-MoE's [experts, capacity] dispatch; Megatron-Core's
    /// --moe-pad-expert-input-to-capacity). Off: the dropped choices leave and the experts process
    /// what is kept (Megatron-Core's default). Ignored without a capacity factor.
    bool moe_pad_to_capacity = false;
    MoeDispatcher moe_dispatcher = MoeDispatcher::alltoall;  ///< how MoE tokens cross the EP group
    CpCommType cp_comm_type = CpCommType::p2p;              ///< how context parallelism exchanges the sequence
    MoeProbsAt moe_probs_at = MoeProbsAt::fc2_input;
    /// Memory-bound ops (norms, activations, residual adds, RoPE, permutes) run as separate eager
    /// PyTorch kernels, as in llm-foundry or a Hugging Face Trainer, instead of the fused kernels
    /// of Megatron-Core / Transformer Engine: they cost kEagerElementwiseFactor (cost.hpp) times more.
    bool eager_elementwise = false;
    std::int64_t dp_bucket_bytes = 40'000'000;  ///< DP gradient bucket (Megatron default 40 MB)
    /// The embedding and the output layer hold the vocabulary padded to a multiple of this x tp
    /// rows (Megatron's --make-vocab-size-divisible-by, 128 there; padded_vocab() in model.hpp).
    /// 1: padded to a multiple of tp only, which a vocabulary-parallel split needs.
    int vocab_divisible_by = 1;
    std::vector<int> layer_split;         ///< uneven pipeline: layers per stage (empty = even)
    /// Interleaved pipelines laid out by hand (Megatron-Core's --pipeline-model-parallel-layout):
    /// decoder layers per virtual stage in model order, virtual stage i on pipeline rank i mod pp,
    /// pp x vpp entries; 0 is allowed (a stage of only the embedding, or of MTP and the loss).
    /// Excludes layer_split; empty = from layer_split.
    std::vector<int> virtual_layer_split;
    /// The training framework that runs the plan (plan.framework, lowering/frameworks.hpp): its
    /// preset supplied the knobs the plan file did not set. Empty = none stated.
    std::string framework;
    /// Where the reader found each key (explain_plan): written in the plan, or filled in by the
    /// framework's preset. Neither is written back or compared.
    std::vector<std::string> keys_in_file, keys_from_preset;
    bool in_file(std::string_view key) const;      ///< `key` is written in the plan's file
    bool from_preset(std::string_view key) const;  ///< `key` was filled by plan.framework's preset
    std::string name;                     ///< optional label (JSON "name")
    std::string description;              ///< free text: where the plan comes from

    int gpus() const { return tp * pp * dp * cp; }
    int etp() const { return expert_tp > 0 ? expert_tp : tp; }
    /// Expert data parallelism: the stage's ranks over the expert groups (tp cp dp / (etp ep)).
    int edp() const { return std::max(1, tp * cp * dp / std::max(1, etp() * ep)); }
    int micro_batches() const { return global_batch / (micro_batch * dp); }
    /// ZeRO-3 under a pipeline schedule runs as FSDP does there (torch.distributed.pipelining with
    /// FSDP2, torchtitan's default reshard_after_forward = not pp_enabled): a stage's layers are
    /// gathered at their first forward of the step and stay gathered until their last backward;
    /// gradients accumulate unsharded and are reduce-scattered once, at that last backward.
    /// DeepSpeed's PipelineEngine refuses ZeRO-3 (validation).
    bool pipelined_fsdp() const { return zero_stage == 3 && pp > 1; }
    /// Weights split between the GPU and host memory (Angel-PTM): each layer homed wholly on one
    /// side, the host homing every one (the lowering's build_resident_units; docs/runtime.md).
    bool splits_weights_by_layer() const { return offload.params.gpu > 0 && offload.params.gpu < 1 && offload.params.ssd == 0; }
    /// DeepSpeed's gradients homed in host memory (ZeRO-2's cpu_offload, ZeRO-3's
    /// offload_optimizer): each reduction's slice goes down to the host as soon as it is reduced,
    /// summed there over the micro-batches, and the GPU holds only the buckets being reduced. With
    /// part of the optimizer on the GPU, or the lock-free update, the gradients stay on the GPU
    /// until the step's end and the offloaded share is copied down then.
    bool streams_grads_to_host() const {
        return zero_stage >= 2 && offload.grads.cpu >= 1.0 && offload.optimizer.gpu == 0.0 && !lock_free_update;
    }
    /// Bytes per element of the gradients the host holds for the update: streamed, DeepSpeed's
    /// fp32 partition (stage_1_and_2.py pins an fp32 .grad beside each fp32 partition, and the
    /// boundary's copy down is `.float()`); else the copy down of the GPU's gradients.
    double host_grad_bytes() const { return streams_grads_to_host() ? 4.0 : grad_bytes(); }
    /// ZeRO-Infinity's update stages each sub-group's 16-bit weights in host memory on their way
    /// home: into the SSD file with the weights homed there, or up to the GPU's weights (a mixed-
    /// precision copy_() from the fp32 master converts on the host; lock-free, only the master is
    /// written). The runtime holds them; the memory model counts two sub-groups.
    bool stages_host_weights() const {
        return offload.params.ssd >= 1.0 ||
               (offload.optimizer.ssd >= 1.0 && offload.params.all_gpu() && precision != Precision::fp32 && !lock_free_update);
    }
    /// Selective recomputation of this module is on.
    bool recomputes(RecomputeModule mod) const {
        return recompute == Recompute::selective && recompute_policy == RecomputePolicy::modules &&
               ((recompute_modules >> static_cast<unsigned>(mod)) & 1u) != 0;
    }
    /// torchtitan's op-level selective activation checkpointing is on.
    bool op_sac() const { return recompute == Recompute::selective && recompute_policy == RecomputePolicy::op; }
    /// The eager loss runs as loss_parallel's decomposition (plan.loss_parallel takes effect).
    bool eager_loss_parallel() const { return loss_parallel && eager_cross_entropy && tp > 1; }
};

/// A scenario file: a model, a cluster and (optionally) a plan.
struct Scenario {
    std::string name;
    std::string description;
    ModelSpec model;
    ClusterSpec cluster;
    std::optional<PlanSpec> plan;
};

/// Virtual stage (model order) that chunk `chunk` of pipeline rank `stage` runs: chunk x pp + stage,
/// or for DualPipeV's V: stage on the way down (chunk 0), 2pp - 1 - stage on the way back.
int virtual_stage_of(const PlanSpec& p, int stage, int chunk);
/// The pipeline rank that runs virtual stage v (the inverse).
int rank_of_virtual_stage(const PlanSpec& p, int v);
/// Chunk `chunk` of rank `stage` sends its output to another rank: not the model's last virtual
/// stage, nor the turn of DualPipeV's V (the same rank runs both sides).
bool chunk_sends_to_other_rank(const PlanSpec& p, int stage, int chunk);
/// The pipeline rank holding the output head and loss (and MTP): the last, or 0 under DualPipeV.
int head_stage(const PlanSpec& p);
/// Layer indices (model order) one rank of `stage` holds, chunk by chunk.
std::vector<int> stage_layer_ids(const ModelSpec& m, const PlanSpec& p, int stage);

/// Megatron-Core's rule for the interleaved schedule's micro-batch groups: pp <= group <= m, and the
/// last group (m mod group micro-batches) empty or at least pp long, so no rank waits on a
/// dependency it cannot meet.
bool valid_microbatch_group(int micro_batches, int pp, int group);
/// The smallest valid group for m micro-batches on pp stages (pp itself when pp divides m; m when
/// nothing smaller works); 0 when m < pp, which interleaving cannot run.
int smallest_microbatch_group(int micro_batches, int pp);

/// Layers of each pipeline stage (uneven split honoured; with virtual stages laid out by hand or
/// under DualPipeV, the sum of each rank's virtual stages; else as even as possible, remainder to
/// the middle, with each MTP module counted as a layer of the last stage).
std::vector<int> stage_layers(const ModelSpec& m, const PlanSpec& p);
/// Layers of each virtual stage in model order (virtual stage 0 holds the first layers; chunk c of
/// rank s runs virtual_stage_of(p, s, c)): plan.virtual_layer_split as given; for DualPipeV a V
/// balanced by forward FLOPs (rank 0 carries the head and MTP modules beside its layers, its last
/// virtual stage possibly no layer); else each stage's stage_layers spread over its vpp chunks, the
/// first n mod vpp chunks getting one more.
std::vector<int> virtual_stage_layers(const ModelSpec& m, const PlanSpec& p);

// Names used in JSON and in output.
const char* to_string(FfnKind);
const char* to_string(NormKind);
const char* to_string(PositionKind);
const char* to_string(Schedule);
const char* to_string(MoeDispatcher);
const char* to_string(CpCommType);
const char* to_string(MoeProbsAt);
const char* to_string(AttentionKernel);
const char* to_string(RecomputeModule);
/// The bit of a module in PlanSpec::recompute_modules.
constexpr unsigned recompute_bit(RecomputeModule m) { return 1u << static_cast<unsigned>(m); }
/// The module a Megatron name denotes (false if none).
bool recompute_module_from(const std::string& name, RecomputeModule& out);
/// A precision by its JSON / Megatron name (fp32, bf16, fp16, fp8); false if unknown.
bool precision_from(const std::string& name, Precision& out);
/// Names of the modules a selective plan recomputes, in RecomputeModule order.
std::vector<std::string> recompute_module_names(const PlanSpec& p);
/// All module names, comma-separated, for error messages.
std::string recompute_module_choices();
const char* to_string(Recompute);
const char* to_string(RecomputePolicy);
const char* to_string(Precision);
const char* to_string(Tier);
const char* to_string(NetTopology);
/// Bytes per element of the compute precision (fp8 = 1, bf16/fp16 = 2, fp32 = 4).
int bytes_per_element(Precision p);

}  // namespace strata::sim
