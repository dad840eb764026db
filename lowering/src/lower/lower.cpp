// Lowering driver: builds each RankProgram from the pipeline schedule (schedule.cpp) and the
// layer bodies (layer_ops.cpp), adding pipeline send/recv, data-parallel gradient reduction
// (ZeRO 0-3), parameter/activation offload prefetch, the optimizer (GPU, CPU Adam, SSD) and
// Alloc/Free from tensors.hpp. Costs are not computed here (cost.hpp); see docs/lowering.md.
#include <algorithm>
#include <cmath>
#include <limits>

#include "lower_impl.hpp"
#include "strata/common/error.hpp"
#include "strata/lowering/groups.hpp"

namespace strata::sim {
namespace lower_detail {

void Names::intern(Program& p) {
    auto id = [&](const char* s) { return p.name_id(s); };
    norm1 = id("norm1"); qkv = id("qkv"); qk_norm = id("qk_norm"); rope = id("rope"); attn = id("attention");
    attn_local = id("attention.local"); attn_remote = id("attention.remote"); proj = id("proj");
    residual1 = id("residual1"); norm2 = id("norm2"); fc1 = id("fc1"); act = id("act"); fc2 = id("fc2");
    residual2 = id("residual2"); router_gemm = id("router.gemm"); router = id("router.topk");
    experts_fc1 = id("experts.fc1"); experts_act = id("experts.act"); experts_fc2 = id("experts.fc2");
    q_down = id("q_down"); kv_down = id("kv_down"); q = id("q"); q_up = id("q_up"); kv_up = id("kv_up"); latent_norm = id("latent_norm");
    moe_permute = id("moe.permute"); moe_unpermute = id("moe.unpermute"); moe_counts = id("moe.token_counts_to_host");
    moe_sort = id("moe.sort_by_expert"); moe_unsort = id("moe.unsort_by_expert");
    shared_fc1 = id("shared.fc1"); shared_act = id("shared.act"); shared_fc2 = id("shared.fc2");
    embedding = id("embedding"); final_norm = id("final_norm"); logits = id("logits"); loss = id("loss");
    mtp_embedding = id("mtp.embedding"); mtp_norms = id("mtp.norms"); mtp_proj = id("mtp.proj"); mtp_proj_gather = id("mtp.proj.gather");
    tp_ar = id("tp.all_reduce"); tp_ag = id("tp.all_gather"); tp_rs = id("tp.reduce_scatter");
    tp_ag_input = id("tp.all_gather_input"); tp_ring_local = id("tp.ring.local_block"); tp_ag_ring = id("tp.all_gather.ring");
    tp_rs_ring = id("tp.reduce_scatter.ring"); tp_ring_combine = id("tp.ring.combine"); cp_kv_ag = id("cp.kv_all_gather"); cp_dkv_rs = id("cp.dkv_reduce_scatter");
    cp_kv_gather_all = id("cp.kv_allgather"); cp_dkv_rs_all = id("cp.dkv_reduce_scatter_all");
    cp_a2a_qkv = id("cp.qkv_all_to_all"); cp_a2a_out = id("cp.out_all_to_all");
    ep_dispatch = id("ep.dispatch"); ep_combine = id("ep.combine"); pp_act = id("pp.activation");
    pp_grad = id("pp.gradient"); pp_gather = id("pp.all_gather"); dp_grads = id("dp.grads"); edp_grads = id("edp.grads");
    dp_params = id("dp.params"); edp_params = id("edp.params"); zero3_ag = id("zero3.params");
    zero3_rs = id("zero3.grads"); zero3_ag_expert = id("zero3.expert_params");
    zero3_rs_expert = id("zero3.expert_grads"); emb_ar = id("embedding.grad_all_reduce");
    opt_gpu = id("optimizer.gpu"); opt_cpu = id("optimizer.cpu"); opt_ssd = id("optimizer.ssd"); opt_publish = id("optimizer.publish");
    grad_d2h = id("grads.d2h"); grad_h2d = id("grads.h2d"); grad_host_accum = id("grads.host_accumulate"); param_h2d = id("params.h2d"); param_ssd_write = id("params.ssd_write"); state_read = id("optimizer_state.read");
    state_write = id("optimizer_state.write"); fetch_ssd = id("params.fetch_ssd"); fetch_h2d = id("params.fetch_h2d");
    act_d2h = id("activations.d2h"); act_h2d = id("activations.h2d"); act_ssd_write = id("activations.ssd_write");
    act_ssd_read = id("activations.ssd_read"); grad_accum = id("grads.accumulate");
    emb_position = id("embedding.position"); loss_combine = id("loss.combine"); loss_cast = id("loss.cast");
    sp_grads = id("tp.sp_grads_all_reduce");
    zero3_edges = id("zero3.edge_params"); cp_dkv_combine = id("cp.dkv_combine"); emb_dropout = id("embedding.dropout");
    grad_unscale = id("optimizer.unscale"); found_inf = id("optimizer.found_inf");
    // Dataflow tensors have their own label table, so interning them leaves Instr::name alone.
    auto tid = [&](const char* n) { return tensor_name_id(p, n); };
    t_tokens = tid("tokens"); t_x = tid("x"); t_ln1 = tid("ln1"); t_ln1_g = tid("ln1.gathered"); t_qkv = tid("qkv.out");
    t_attn = tid("attn.out"); t_attn_lse = tid("attn.lse"); t_proj = tid("proj.out"); t_proj_s = tid("proj.out.shard");
    t_x1 = tid("x1"); t_ln2 = tid("ln2"); t_ln2_g = tid("ln2.gathered"); t_fc1 = tid("fc1.out"); t_act = tid("act.out");
    t_fc2 = tid("fc2.out"); t_fc2_s = tid("fc2.out.shard"); t_emb = tid("embedding.out"); t_xf = tid("final_norm.out");
    t_xf_g = tid("final_norm.gathered"); t_logits = tid("logits.out"); t_logits_lp = tid("logits.out.lp"); t_loss_stats = tid("loss.stats");
    t_loss_stats_g = tid("loss.stats.gathered"); t_loss = tid("loss.out"); t_x_recomputed = tid("x.recomputed"); t_kv_ring = tid("kv.ring");
    t_qkv_heads = tid("qkv.heads"); t_attn_heads = tid("attn.out.heads");
    t_attn_probs = tid("attn.probs"); t_attn_pmask = tid("attn.probs.dropout_mask"); t_attn_pdrop = tid("attn.probs.dropped");
    g_attn_probs = tid("d.attn.probs");
    t_tokens_mtp = tid("tokens.mtp"); t_mtp_e = tid("mtp.embedding.out"); t_mtp_cat = tid("mtp.normed"); t_mtp_cat_g = tid("mtp.normed.gathered");
    t_mtp_y = tid("mtp.proj.out"); t_mtp_y_g = tid("mtp.proj.gathered"); g_mtp_dh = tid("d.mtp.hidden"); g_mtp_e = tid("d.mtp.embedding.out");
    g_mtp_e_g = tid("d.mtp.embedding.gathered"); g_mtp_cat = tid("d.mtp.normed"); g_mtp_cat_g = tid("d.mtp.normed.gathered");
    g_mtp_y = tid("d.mtp.proj.out"); g_mtp_x_g = tid("d.mtp.x.gathered");
    t_mla_q_lat = tid("mla.q_latent"); t_mla_kv_lat = tid("mla.kv_latent"); t_mla_q_n = tid("mla.q_latent.normed");
    t_mla_kv_n = tid("mla.kv_latent.normed"); t_mla_k_rope = tid("mla.k_rope"); t_mla_q_g = tid("mla.q_latent.gathered");
    t_mla_kv_g = tid("mla.kv_latent.gathered"); t_mla_k_rope_g = tid("mla.k_rope.gathered"); t_mla_q = tid("mla.q.out");
    t_mla_kv = tid("mla.kv.out");
    g_mla_q = tid("d.mla.q.out"); g_mla_kv = tid("d.mla.kv.out"); g_mla_k_rope_g = tid("d.mla.k_rope.gathered");
    g_mla_q_g = tid("d.mla.q_latent.gathered"); g_mla_kv_g = tid("d.mla.kv_latent.gathered"); g_mla_q_n = tid("d.mla.q_latent.normed");
    g_mla_kv_n = tid("d.mla.kv_latent.normed"); g_mla_k_rope = tid("d.mla.k_rope"); g_mla_q_lat = tid("d.mla.q_latent");
    g_mla_kv_lat = tid("d.mla.kv_latent");
    g_x = tid("d.x"); g_x_g = tid("d.x.gathered"); g_x1 = tid("d.x1"); g_x1_g = tid("d.x1.gathered"); g_ln2 = tid("d.ln2");
    g_ln2_s = tid("d.ln2.shard"); g_act = tid("d.act.out"); g_fc1 = tid("d.fc1.out"); g_attn = tid("d.attn.out");
    g_qkv = tid("d.qkv.out"); g_ln1 = tid("d.ln1"); g_ln1_s = tid("d.ln1.shard"); g_xf = tid("d.final_norm.out");
    g_xf_s = tid("d.final_norm.shard"); g_logits = tid("d.logits.out"); g_logits_lp = tid("d.logits.out.lp"); g_emb_g = tid("d.embedding.gathered");
    g_kv_ring = tid("d.kv.ring"); g_kv_acc = tid("d.kv.returned");
    g_qkv_heads = tid("d.qkv.heads"); g_attn_heads = tid("d.attn.out.heads");
    t_mask_emb = tid("embed.dropout_mask"); t_mask_attn = tid("attn.dropout_mask"); t_mask_mlp = tid("mlp.dropout_mask");
    g_proj = tid("d.proj.out"); g_proj_s = tid("d.proj.out.shard"); g_fc2 = tid("d.fc2.out"); g_fc2_s = tid("d.fc2.out.shard");
    t_found_inf = tid("found_inf"); t_tp_ring_part = tid("tp.ring.partial"); t_tp_ring_recv = tid("tp.ring.received");
    t_router_logits = tid("router.logits"); t_routing = tid("router.routing"); t_moe_in = tid("moe.permuted");
    t_efc1 = tid("experts.fc1.out"); t_eact = tid("experts.act.out"); t_efc2 = tid("experts.fc2.out");
    g_router_logits = tid("d.router.logits"); g_probs = tid("d.router.probs"); g_moe_in = tid("d.moe.permuted");
    g_efc1 = tid("d.experts.fc1.out"); g_eact = tid("d.experts.act.out"); g_efc2 = tid("d.experts.fc2.out");
    t_moe_disp = tid("moe.dispatched"); t_moe_comb = tid("moe.combined"); g_moe_disp = tid("d.moe.dispatched");
    t_qkv_pre = tid("qkv.pre_norm"); g_qkv_pre = tid("d.qkv.pre_norm");
    g_moe_comb = tid("d.moe.combined"); t_moe_gath = tid("moe.gathered"); t_moe_scat = tid("moe.scattered");
    g_moe_gath = tid("d.moe.gathered"); g_moe_scat = tid("d.moe.scattered");
    t_sfc1 = tid("shared.fc1.out"); t_sact = tid("shared.act.out"); t_sfc2 = tid("shared.fc2.out");
    g_sfc1 = tid("d.shared.fc1.out"); g_sact = tid("d.shared.act.out"); g_shared_x = tid("d.shared.x");
    t_sfc2_s = tid("shared.fc2.out.shard"); g_shared_x_s = tid("d.shared.x.shard");
    t_moe_p = tid("moe.permuted.probs"); t_moe_disp_p = tid("moe.dispatched.probs"); t_moe_gath_p = tid("moe.gathered.probs");
    g_moe_p = tid("d.moe.permuted.probs"); g_moe_disp_p = tid("d.moe.dispatched.probs"); g_moe_gath_p = tid("d.moe.gathered.probs");
    t_grads = tid("grads"); t_params = tid("params"); t_state = tid("optimizer_state"); t_grads_host = tid("grads.from_host"); t_grads_device = tid("grads.from_device");
}

int tensor_name_id(Program& p, const std::string& s) {
    for (std::size_t i = 0; i < p.tensor_names.size(); ++i)
        if (p.tensor_names[i] == s) return static_cast<int>(i);
    p.tensor_names.push_back(s);
    return static_cast<int>(p.tensor_names.size() - 1);
}

}  // namespace lower_detail

Kernel kernel_of(Op op, const PlanSpec& p) {
    switch (op) {
        case Op::attention_fwd:
        case Op::attention_bwd:
            if (!p.flash_attention) return Kernel::unfused_attention;
            return p.attention_kernel == AttentionKernel::fa2 ? Kernel::flash_fa2
                   : p.attention_kernel == AttentionKernel::fa1 ? Kernel::flash_fa1 : Kernel::flash_fa3;
        case Op::norm:
        case Op::elementwise: return p.eager_elementwise ? Kernel::eager : Kernel::fused;
        default: return Kernel::fused;
    }
}

namespace lower_detail {

Dims make_dims(const ModelSpec& m, const PlanSpec& p) {
    Dims d;
    d.b = p.micro_batch;
    d.s = static_cast<double>(m.seq_len);
    d.tp = p.tp;
    d.cp = p.cp;
    d.ep = p.ep;
    d.etp = p.etp();
    d.sp = p.sequence_parallel && p.tp > 1;
    d.tokens = d.b * d.s / d.cp;
    d.tokens_sp = d.sp ? d.tokens / d.tp : d.tokens;
    d.h = static_cast<double>(m.hidden);
    d.heads = m.heads;
    d.head_dim = static_cast<double>(m.head_dim > 0 ? m.head_dim : m.hidden / std::max(1, m.heads));
    d.q_w = d.heads * d.head_dim;
    d.kv_w = (m.kv_heads > 0 ? m.kv_heads : m.heads) * d.head_dim;
    d.qk_dim = static_cast<double>(qk_head_dim_of(m));
    d.v_dim = static_cast<double>(v_head_dim_of(m));
    if (m.mla) {  // the core's widths: queries and keys qk_dim per head, values v_dim (K/V travel as one kv_w each way)
        d.q_w = d.heads * d.qk_dim;
        d.kv_w = d.heads * (d.qk_dim + d.v_dim) / 2;
    }
    d.ffn = static_cast<double>(m.ffn_hidden);
    d.vocab = static_cast<double>(padded_vocab(m, p));  // the tables' rows; forward_flops_per_step's unsplit plan keeps model.vocab
    d.mats = gated(m.ffn) ? 3 : 2;
    d.act_bytes = p.precision == Precision::fp32 ? 4 : 2;
    if (m.is_moe()) {
        d.experts = m.moe->experts;
        d.top_k = m.moe->top_k;
        d.expert_ffn = static_cast<double>(m.moe->expert_ffn_hidden > 0 ? m.moe->expert_ffn_hidden : m.ffn_hidden);
        d.shared = m.moe->shared_experts;
    }
    return d;
}

LayerParamsRank layer_params_rank(const ModelSpec& m, const PlanSpec& p, int layer) {
    const Dims d = make_dims(m, p);
    LayerParamsRank r;
    const bool bias_qkv = m.linear_bias || m.qkv_bias;
    for (const AttentionLinear& a : attention_linears(m))
        r.dense += static_cast<double>(a.in) * static_cast<double>(a.out) / (a.tp_split ? d.tp : 1);
    r.dense += static_cast<double>(attention_norm_params(m)) + (bias_qkv ? (d.q_w + 2 * d.kv_w) / d.tp : 0) + (m.linear_bias ? d.h : 0);
    r.dense += m.norm == NormKind::layernorm ? 4 * d.h : 2 * d.h;
    if (m.layer_is_moe(layer)) {
        r.dense += (m.moe->has_router() ? d.h * d.experts : 0.0) + d.shared * d.mats * d.h * d.expert_ffn / d.tp;
        r.expert = d.experts / d.ep * d.mats * d.h * d.expert_ffn / d.etp;
    } else {
        r.dense += d.mats * d.h * d.ffn / d.tp + (m.linear_bias ? (d.mats - 1) * d.ffn / d.tp + d.h : 0);
    }
    return r;
}

double embedding_params_rank(const ModelSpec& m, const PlanSpec& p) {
    const double pos = m.position == PositionKind::learned
                           ? static_cast<double>(m.max_position > 0 ? m.max_position : m.seq_len) * static_cast<double>(m.hidden)
                           : 0;
    return static_cast<double>(padded_vocab(m, p)) * static_cast<double>(m.hidden) / p.tp + pos;
}

double output_params_rank(const ModelSpec& m, const PlanSpec& p) {
    const double norm = (m.norm == NormKind::layernorm ? 2.0 : 1.0) * static_cast<double>(m.hidden);
    const double table = static_cast<double>(padded_vocab(m, p)) * static_cast<double>(m.hidden) / p.tp;
    // An untied head, and the stage's copy of the embedding (tied, or for the MTP lookups).
    return (m.tied_embeddings ? 0.0 : table) + (head_stage_embedding_copy(m, p) ? table : 0.0) + norm;
}

double forward_flops_per_step(const ModelSpec& m, const PlanSpec& p) {
    PlanSpec unsplit;  // per-token counts of the whole model: no TP/EP division
    const Dims d = make_dims(m, unsplit);
    const auto layer = [&](int l) {
        // Causal QK^T + PV: 2*s*heads*(dqk + dv) per token, halved; a windowed layer's share of it.
        double f = d.s * d.heads * (d.qk_dim + d.v_dim) * window_fraction(m, l);
        for (const AttentionLinear& a : attention_linears(m)) f += 2 * static_cast<double>(a.in) * static_cast<double>(a.out);
        if (m.layer_is_moe(l)) return f + 2 * d.h * d.experts + 2 * (d.top_k + d.shared) * d.mats * d.h * d.expert_ffn;
        return f + 2 * d.mats * d.h * d.ffn;
    };
    double per_token = 2 * d.h * d.vocab;  // logits
    for (int l = 0; l < m.layers; ++l) per_token += layer(l);
    // MTP modules: a layer, the 2h -> h projection and the head once more each.
    if (m.layers > 0) per_token += m.mtp_depth * (layer(mtp_layer_kind(m)) + 2 * 2 * d.h * d.h + 2 * d.h * d.vocab);
    return per_token * static_cast<double>(p.global_batch) * d.s;
}

// ---------------------------------------------------------------------------------------------
RankLowering::RankLowering(const ModelSpec& m, const ClusterSpec& cl, const PlanSpec& p, const LowerOptions& o,
                           Program& prog, RankProgram& rp, const Names& names, Coord coord, bool full,
                           std::int64_t& tensor_counter, TensorTable* table)
    : m_(m), cl_(cl), p_(p), o_(o), prog_(prog), rp_(rp), n_(names), co_(coord), full_(full),
      tensor_counter_(tensor_counter), d_(make_dims(m, p)), df_(table != nullptr), table_(table) {
    last_record_ev_.fill(-1);
    if (m.mla) {
        for (const AttentionLinear& l : attention_linears(m)) {
            const std::string n = l.name;
            if (n == "proj") continue;
            const int id = n == "q_down" ? n_.q_down : n == "kv_down" ? n_.kv_down : n == "q" ? n_.q : n == "q_up" ? n_.q_up : n_.kv_up;
            (l.tp_split ? mla_up_ : mla_down_).push_back({id, static_cast<double>(l.in), static_cast<double>(l.out), l.fp8_cast});
        }
    }
    dtype_ = p.precision == Precision::fp8 ? DType::fp8 : p.precision == Precision::fp16 ? DType::fp16
             : p.precision == Precision::fp32 ? DType::fp32 : DType::bf16;
    micro_ = std::max(1, p.micro_batches());
    pp_ = std::max(1, p.pp);
    vpp_ = std::max(1, p.vpp);
    stage_ = coord.s;
    // Virtual stage v (chunk * pp + stage, or DualPipeV's V) holds a contiguous run of layers, in
    // model order: find where each of this rank's chunks starts.
    const std::vector<int> vsize = virtual_stage_layers(m, p);
    chunk_start_.assign(static_cast<std::size_t>(vpp_), 0);
    chunk_count_.assign(static_cast<std::size_t>(vpp_), 0);
    for (int c = 0; c < vpp_; ++c) {
        const int v = virtual_stage_of(p, stage_, c);
        for (int u = 0; u < v; ++u) chunk_start_[static_cast<std::size_t>(c)] += vsize[static_cast<std::size_t>(u)];
        chunk_count_[static_cast<std::size_t>(c)] = vsize[static_cast<std::size_t>(v)];
    }
    schedule_ = pipeline_schedule(p.schedule, pp_, stage_, micro_, vpp_, p.vpp_group(), p.moe_a2a_overlap);
    last_bwd_mb_.assign(static_cast<std::size_t>(vpp_), 0);
    first_bwd_mb_.assign(static_cast<std::size_t>(vpp_), -1);
    for (const PipeSlot& sl : schedule_)
        if (!sl.forward && !sl.weights) {
            last_bwd_mb_[static_cast<std::size_t>(sl.chunk)] = sl.microbatch;
            if (first_bwd_mb_[static_cast<std::size_t>(sl.chunk)] < 0) first_bwd_mb_[static_cast<std::size_t>(sl.chunk)] = sl.microbatch;
        }

    // MoE load skew: the hottest expert's EP rank gets (1 + skew) x the mean load. Symmetric mode
    // models every rank as the hottest (the all-to-all makes everyone wait for it); full mode
    // gives it to EP rank 0 of each group and spreads the rest evenly so the total is kept.
    if (m.is_moe() && p.ep > 1) {
        const double skew = m.moe->load_skew;
        const int e = static_cast<int>(((coord.t + static_cast<std::int64_t>(p.tp) * (coord.c + p.cp * coord.d)) / p.etp()) % p.ep);
        moe_factor_ = !full || e == 0 ? 1 + skew : std::max(0.0, (p.ep - 1 - skew) / (p.ep - 1));
        // DeepEP sends a token once to each GPU and each node its experts reach, where the flat
        // all-to-all sends a copy per expert: the shares of the flat bytes go on the instruction,
        // and the cost model turns them into NVLink and NIC bytes (docs/lowering.md).
        if (p.moe_dispatcher == MoeDispatcher::deepep) {
            const MoeSpread spread = moe_dispatch_spread(*m.moe, group_layout(Group::ep, cl, p));
            auto ppm = [&](double reached) { return static_cast<int>(std::clamp(std::llround(reached / m.moe->top_k * 1e6), 1LL, 1000000LL)); };
            a2a_rank_ppm_ = ppm(spread.ranks);
            a2a_node_ppm_ = ppm(spread.nodes);
        }
    }

    int li_stage = 0;
    for (int c = 0; c < vpp_; ++c)
        for (int li = 0; li < chunk_layers(c); ++li, ++li_stage) {
            const int layer = chunk_first_layer(c) + li;
            const bool rec = p.recompute == Recompute::full && layer_recomputed(m, p, stage_, li_stage);
            act_desc_.push_back(layer_activations(m, p, layer, rec));
            ws_desc_.push_back(o.emit_memory ? layer_backward_workspace(m, p, layer, rec) : std::vector<TensorDesc>{});
            fwd_ws_desc_.push_back(o.emit_memory && rec ? layer_forward_transients(m, p, layer) : std::vector<TensorDesc>{});
        }
    rank_ = coord.t + p.tp * (coord.c + p.cp * (coord.d + p.dp * coord.s));
    build_units();
    build_buckets();
    if (df_) {
        layout_ = param_layout(m, p, stage_);
        // The layout and the byte counts must agree unit by unit: both describe one buffer.
        std::vector<double> offs;
        for (const GradUnit& g : layout_.units) offs.push_back(static_cast<double>(g.offset));
        STRATA_ASSERT(offs.size() == units_.size(), "lower: parameter layout and gradient units differ");
        for (std::size_t i = 0; i < offs.size(); ++i)
            STRATA_ASSERT(offs[i] == units_[i].dense_off, "lower: parameter layout and gradient units differ");
        for (int g = 0; g < kGroupCount; ++g)
            if (static_cast<Group>(g) != Group::world) rp.groups[static_cast<std::size_t>(g)] = group_ranks(static_cast<Group>(g), p, rank_);
        build_zero3_pieces();
        build_grad_values();
    }
    act_ids_.resize(act_desc_.size());
    ws_ids_.resize(ws_desc_.size());
    fwd_ws_ids_.resize(fwd_ws_desc_.size());
    if (o.emit_memory && stage_ == 0) {
        emb_desc_ = embedding_activations(m, p);
        emb_ws_desc_ = embedding_backward_workspace(m, p);
    }
    if (o.emit_memory) {  // kept for each chunk that sends (pipeline.cpp); DeepSpeed's pipeline has one a rank
        out_slice_desc_ = pipe_output_slice(m, p);
        if (stage_ < p.pp - 1) out_full_desc_ = pipe_output_regathered(m, p);
    }
    if (o.emit_memory && stage_ == head_stage(p)) {
        logits_desc_ = logits_activations(m, p);
        head_ws_desc_ = head_workspace(m, p);
        head_fwd_ws_desc_ = head_workspace(m, p, false);
        // An MTP module's layer backward (never recomputed) holds its gradients' workspace too.
        if (m.mtp_depth > 0 && m.layers > 0) mtp_ws_desc_ = layer_backward_workspace(m, p, mtp_layer_kind(m), false);
    }
}

Instr& RankLowering::gemm(int name, double m, double n, double k, double batch) {
    // bytes: read A and B, write C once (bf16); the cost model may refine it.
    Instr& in = compute(Op::gemm, name, 2 * batch * m * n * k, batch * (m * k + k * n + m * n) * d_.act_bytes);
    set_shape(in, static_cast<double>(std::llround(m)), static_cast<double>(std::llround(n)),
              static_cast<double>(std::llround(k)), static_cast<double>(std::llround(batch)));
    return in;
}

void RankLowering::set_shape(Instr& in, double m, double n, double k, double batch) {
    constexpr double kMax = 2147483647.0;  // Instr's shape fields are int32
    STRATA_ASSERT(m <= kMax && n <= kMax && k <= kMax && batch <= kMax, "lower: GEMM/attention shape past int32");
    in.m = static_cast<std::int32_t>(m);
    in.n = static_cast<std::int32_t>(n);
    in.k = static_cast<std::int32_t>(k);
    in.batch = static_cast<std::int32_t>(batch);
}

int RankLowering::record(Stream s) {
    const auto si = static_cast<std::size_t>(s);
    if (last_record_ev_[si] >= 0 && last_record_at_[si] == issued_[si]) return last_record_ev_[si];
    Instr& in = push(InstrKind::record, s, 0);
    in.event = next_event_++;
    last_record_ev_[si] = in.event;
    last_record_at_[si] = issued_[si];
    return in.event;
}

void RankLowering::wait(Stream s, int ev) {
    if (ev < 0) return;
    push(InstrKind::wait, s, 0).event = ev;
}

int RankLowering::group_size(Group g) const {
    switch (g) {
        case Group::tp: return p_.tp;
        case Group::cp: return p_.cp;
        case Group::ep: return p_.ep;
        case Group::dp: return p_.dp * p_.cp;
        case Group::edp: return p_.edp();
        case Group::etp: return p_.etp();
        case Group::pp: return p_.pp;
        case Group::embedding: return 2;
        case Group::world: return p_.gpus();
        case Group::count: break;
    }
    return 1;
}

// Matched collectives: every member of one group instance computes the same id from (group kind,
// lowest global rank of the instance, how many collectives of that kind it has issued before).
std::int64_t RankLowering::coll_match(Group g) {
    const auto gi = static_cast<std::size_t>(g);
    STRATA_ASSERT(gi < coll_seq_.size(), "coll_match: bad group");
    const std::int64_t seq = coll_seq_[gi]++;
    if (!full_ && g != Group::embedding) return 0;
    const std::int64_t tp = p_.tp, cp = p_.cp, dp = p_.dp, ep = std::max(1, p_.ep);
    const std::int64_t base = tp * cp * dp * co_.s, q = co_.c + cp * co_.d;
    // Expert groups tile the stage's ranks r = t + tp (c + cp d) as etp (fastest) x ep x edp.
    const std::int64_t etp = p_.etp(), r = co_.t + tp * q;
    std::int64_t lo = 0;
    switch (g) {
        case Group::tp: lo = tp * q + base; break;
        case Group::cp: lo = co_.t + tp * cp * co_.d + base; break;
        case Group::dp: lo = co_.t + base; break;
        case Group::ep: lo = r - ((r / etp) % ep) * etp + base; break;
        case Group::edp: lo = r % (etp * ep) + base; break;
        case Group::etp: lo = r - r % etp + base; break;
        case Group::embedding: lo = full_ ? co_.t + tp * q : 0; break;
        case Group::pp: lo = co_.t + tp * q; break;  // the rank's place in its stage: one pp group each
        default: lo = 0; break;
    }
    const std::int64_t world = static_cast<std::int64_t>(p_.gpus()) + 1;
    return ((seq * world + lo) * 16 + static_cast<std::int64_t>(gi)) + 1;
}

std::int64_t RankLowering::p2p_match(int mb_global, int sender_vstage, bool forward_dir, int lane) const {
    const std::int64_t lanes = full_ ? static_cast<std::int64_t>(p_.tp) * p_.cp * p_.dp : 1;
    const std::int64_t v = static_cast<std::int64_t>(pp_) * vpp_;
    return ((((static_cast<std::int64_t>(mb_global) * v + sender_vstage) * 2 + (forward_dir ? 1 : 0)) * lanes + lane) * 16 + 15) + 1;
}

int RankLowering::program_of_stage(int stage) const {
    if (!full_) return stage;
    return co_.t + p_.tp * (co_.c + p_.cp * (co_.d + p_.dp * stage));
}

int RankLowering::collective(Stream s, CollKind k, Group g, double bytes, int name, int after) {
    if (after == kAfterCompute) after = record(Stream::compute);
    wait(s, after);
    Instr& in = push(InstrKind::collective, s, name);
    in.coll = k;
    in.group = g;
    in.group_size = group_size(g);
    in.bytes = bytes;
    in.match_id = coll_match(g);
    in.participants = in.match_id != 0 ? in.group_size : 1;  // matched: every peer is its own RankProgram
    last_collective_ = rp_.instrs.size() - 1;
    return record(s);
}

int RankLowering::ep_all_to_all(double bytes, int name, int after) {
    // An all-to-all ends when its busiest receiver does: the hottest expert's rank takes in (and
    // sends back) (1 + skew) x the mean, at most the capacity (expert_load). Symmetric mode models
    // every rank as that one; full mode keeps each rank's mean volume (the matched collective needs
    // one size for all peers).
    if (!full_) bytes *= expert_load();
    const int ev = collective(Stream::ep_comm, CollKind::all_to_all, Group::ep, bytes, name, after);
    Instr& in = rp_.instrs[last_collective_];
    in.a2a_rank_ppm = a2a_rank_ppm_;
    in.a2a_node_ppm = a2a_node_ppm_;
    segment_cut();  // a merged step's segment ends here
    return ev;
}

int RankLowering::copy(Stream s, CopyKind k, double bytes, int name, int after_ev) {
    wait(s, after_ev);
    Instr& in = push(InstrKind::copy, s, name);
    in.copy = k;
    in.bytes = bytes;
    return record(s);
}

void RankLowering::intern_names(const std::vector<TensorDesc>& list, std::vector<int>& ids) {
    if (ids.size() == list.size()) return;
    ids.clear();
    for (const TensorDesc& t : list) {
        auto it = tensor_names_.find(t.name);
        if (it == tensor_names_.end()) it = tensor_names_.emplace(t.name, prog_.name_id(t.name)).first;
        ids.push_back(it->second);
    }
}

std::size_t RankLowering::alloc_tensor(const TensorDesc& t, int name) {
    std::size_t pushed = 0;
    for (Tier tier : {Tier::gpu, Tier::cpu, Tier::ssd}) {
        const double frac = t.tiers.of(tier);
        if (frac <= 0 || t.bytes <= 0) continue;
        Instr& in = push(InstrKind::alloc, Stream::compute, name);
        in.tier = tier;
        in.tag = static_cast<std::int32_t>(t.tag);
        in.bytes = t.bytes * frac;
        STRATA_ASSERT(tensor_counter_ < std::numeric_limits<std::int32_t>::max(), "lower: more tensors than Instr::tensor holds");
        in.tensor = static_cast<std::int32_t>(tensor_counter_++);
        ++pushed;
    }
    return pushed;
}

RankLowering::AllocRun RankLowering::alloc_list(const std::vector<TensorDesc>& list, std::vector<int>& ids) {
    AllocRun run{rp_.instrs.size(), 0};
    if (!o_.emit_memory) return run;
    intern_names(list, ids);
    for (std::size_t j = 0; j < list.size(); ++j) run.count += alloc_tensor(list[j], ids[j]);
    return run;
}

void RankLowering::churn_list(const std::vector<TensorDesc>& list, std::vector<int>& ids) {
    if (!o_.emit_memory) return;
    intern_names(list, ids);
    AllocRun prev{};  // empty: freeing it is a no-op
    for (std::size_t j = 0; j < list.size(); ++j) {
        const std::size_t first = rp_.instrs.size();
        const AllocRun run{first, alloc_tensor(list[j], ids[j])};
        free_list(prev);
        prev = run;
    }
    free_list(prev);
}

void RankLowering::free_list(AllocRun run) {
    for (std::size_t j = run.first; j < run.first + run.count; ++j) {
        const Instr a = rp_.instrs[j];  // a copy: push may reallocate
        Instr& in = push(InstrKind::free, Stream::compute, a.name);
        in.tier = a.tier;
        in.tag = a.tag;
        in.bytes = a.bytes;
        in.tensor = a.tensor;
    }
}

// Per-layer gradient handling after the layer's backward.
void RankLowering::layer_grads(int layer) {
    const LayerParamsRank lp = layer_params_rank(m_, p_, layer);
    accumulate_grads(lp.dense, lp.expert);
    // Pipelined FSDP accumulates the unsharded gradients and reduce-scatters at the last backward.
    if (p_.zero_stage == 3 && pipelined_fsdp() && mb_ != step_ * micro_ + micro_ - 1) return;
    if (p_.zero_stage == 3) {
        // ZeRO-3 (DeepSpeed): every micro-batch reduce-scatters the layer's gradients into shards.
        const Unit& u = units_[static_cast<std::size_t>(unit_of_layer(layer))];
        const bool to_host = p_.streams_grads_to_host();
        zero3_reduce_dense(layer, lp.dense);
        if (lp.expert > 0 && group_size(Group::edp) > 1) {
            const int done = collective(Stream::dp_comm, CollKind::reduce_scatter, Group::edp, lp.expert * p_.grad_bytes(), n_.zero3_rs_expert);
            reduce_scatter_operands(u.expert_off + dense_elements_, u.expert, true);
            if (zero3_sync()) wait(Stream::compute, done);
        }
        if (to_host && lp.expert > 0) grads_to_host(u.expert_off + dense_elements_, u.expert, true);
        return;
    }
    if ((p_.overlap_grad_reduce || p_.zero_stage == 2) && reduce_grads_) unit_ready(unit_of_layer(layer));
}

// Unfused gradient accumulation (plan.grad_accum_fusion off): a memory-bound add of this
// micro-batch's weight gradients into the accumulated ones, after the layer's backward. Under ZeRO
// 2/3 the sum lives in the rank's shard, after the reduce-scatter: 1/N_d of the parameters.
// In the dataflow the instruction adds each gradient the layer's backward wrote into its range
// (begin_unfused_capture). Under ZeRO 2/3 the range is then reduce-scattered in place as with fused
// accumulation, which leaves the rank's slice summed and zeroes the rest, so the next micro-batch's
// additions sum correctly: the numbers of a shard-side sum, with the cost model's shard bytes.
void RankLowering::begin_unfused_capture() {
    const bool fp32_sum = p_.grad_bytes() > 2;
    unfused_capture_ = df_ && !p_.grad_accum_fusion && (fp32_sum || !first_backward_);
    unfused_grads_.clear();
}

void RankLowering::accumulate_grads(double dense_params, double expert_params) {
    const bool captured = unfused_capture_;
    unfused_capture_ = false;
    if (p_.grad_accum_fusion) return;
    const bool fp32_sum = p_.grad_bytes() > 2;
    if (!fp32_sum && first_backward_) return;  // the first gradient becomes the sum itself
    const double per_param = fp32_sum ? 2.0 + 4.0 + 4.0 : 3 * 2.0;
    if (p_.zero_stage >= 2) {
        dense_params /= std::max(1, group_size(Group::dp));
        expert_params /= std::max(1, group_size(Group::edp));
    }
    const double params = dense_params + expert_params;
    if (params > 0) compute(Op::grad_accum, n_.grad_accum, 0, per_param * params);
    if (captured && params > 0) {  // {fresh gradients.., ranges..} -> {ranges..}
        std::vector<int> ins, outs;
        for (const auto& [fresh, range_id] : unfused_grads_) ins.push_back(fresh);
        for (const auto& [fresh, range_id] : unfused_grads_) {
            ins.push_back(range_id);
            outs.push_back(range_id);
        }
        io_lists(ins, outs);
    }
    unfused_grads_.clear();
}

// Without overlap (or for pipelined FSDP's embedding/head), reduce everything after the last backward;
// then the sequence-parallel gradients over TP and the tied embedding over the embedding group.
void RankLowering::dp_collectives_at_end() {
    phase_ = Phase::backward;
    layer_ = -1;
    mb_ = -1;
    // ZeRO-2 reduced every micro-batch's gradients in its backward (backward_pass), and overlapped
    // buckets went out as their last gradients became final.
    // ZeRO-3's edges went at each micro-batch's end but under pipelined FSDP (its last backward).
    const bool whole = (p_.zero_stage == 3 && pipelined_fsdp()) || (!p_.overlap_grad_reduce && p_.zero_stage != 2 && p_.zero_stage != 3);
    if (whole) reduce_buckets(-1);
    sp_grads_all_reduce();
    // Tied embeddings across pipeline ends: sum the two copies' gradients (Megatron's
    // _allreduce_embedding_grads, after the DP reduction).
    // MTP's copy on the last stage is kept in step the same way (Megatron-Core's embedding group).
    if (head_stage_embedding_copy(m_, p_) && (stage_ == 0 || stage_ == head_stage(p_))) {
        const double bytes = d_.vocab * d_.h / d_.tp * p_.grad_bytes();
        collective(Stream::dp_comm, CollKind::all_reduce, Group::embedding, bytes, n_.emb_ar);
        if (df_) {
            const int g = prm_grad("word_embedding.weight", -1);
            if (!shard_grads_) {
                io({g}, {g});
            } else {  // the two copies' shards, cut alike (the table is a bucket of its own on both ends)
                const DataTensor& t = prog_.tensors[static_cast<std::size_t>(g)];
                const std::vector<int> ids = grad_shard(static_cast<double>(t.offset), static_cast<double>(t.elements()));
                io_lists(ids, ids);
            }
        }
    }
}

}  // namespace lower_detail
}  // namespace strata::sim
