// Internal to lowering: the value types the per-rank builder (lower_impl.hpp) works with: the
// interned labels, the dataflow's tensor table, gradient units and buckets, a micro-batch's
// per-rank sizes, a layer's parameters per reduction group and a rank's coordinates.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "strata/lowering/lower.hpp"
#include "strata/lowering/model.hpp"

namespace strata::sim::lower_detail {

/// Labels, interned once per Program (Instr::name indexes Program::names).
struct Names {
    int norm1, qkv, qk_norm, rope, attn, attn_local, attn_remote, proj, residual1, norm2, fc1, act, fc2, residual2;
    int router_gemm, router, experts_fc1, experts_act, experts_fc2, shared_fc1, shared_act, shared_fc2;
    int moe_permute, moe_unpermute, moe_counts, moe_sort, moe_unsort;
    int q_down, kv_down, q, q_up, kv_up, latent_norm;
    int t_mla_q_lat, t_mla_kv_lat, t_mla_q_n, t_mla_kv_n, t_mla_k_rope, t_mla_q_g, t_mla_kv_g, t_mla_k_rope_g, t_mla_q, t_mla_kv;
    int g_mla_q, g_mla_kv, g_mla_k_rope_g, g_mla_q_g, g_mla_kv_g, g_mla_q_n, g_mla_kv_n, g_mla_k_rope, g_mla_q_lat, g_mla_kv_lat;
    int embedding, final_norm, logits, loss, mtp_embedding, mtp_norms, mtp_proj, mtp_proj_gather;
    int t_tokens_mtp, t_mtp_e, t_mtp_cat, t_mtp_cat_g, t_mtp_y, t_mtp_y_g, g_mtp_dh, g_mtp_e, g_mtp_e_g, g_mtp_cat, g_mtp_cat_g, g_mtp_y, g_mtp_x_g;
    int tp_ar, tp_ag, tp_rs, tp_ag_input, tp_ring_local, tp_ag_ring, tp_rs_ring, tp_ring_combine, cp_kv_ag, cp_dkv_rs, cp_kv_gather_all, cp_dkv_rs_all, cp_a2a_qkv, cp_a2a_out, ep_dispatch, ep_combine;
    int pp_act, pp_grad, pp_gather;
    int dp_grads, edp_grads, dp_params, edp_params, zero3_ag, zero3_rs, zero3_ag_expert, zero3_rs_expert, emb_ar;
    int opt_gpu, opt_cpu, opt_ssd, opt_publish, grad_d2h, grad_h2d, grad_host_accum, param_h2d, param_ssd_write, state_read, state_write, grad_accum;
    int fetch_ssd, fetch_h2d, act_d2h, act_h2d, act_ssd_write, act_ssd_read;
    int emb_position, loss_combine, loss_cast, sp_grads, zero3_edges, cp_dkv_combine, emb_dropout, grad_unscale, found_inf;
    // Dataflow tensor names (LowerOptions::dataflow): activations and their gradients.
    int t_qkv_pre, g_qkv_pre, t_attn_probs, t_attn_pmask, t_attn_pdrop, g_attn_probs;
    int t_tokens, t_x, t_ln1, t_ln1_g, t_qkv, t_attn, t_attn_lse, t_proj, t_proj_s, t_x1, t_ln2, t_ln2_g, t_fc1, t_act,
        t_fc2, t_fc2_s, t_emb, t_xf, t_xf_g, t_logits, t_logits_lp, g_logits_lp, t_loss_stats, t_loss_stats_g, t_loss, t_x_recomputed, t_kv_ring,
        t_qkv_heads, t_attn_heads;
    int g_x, g_x_g, g_x1, g_x1_g, g_ln2, g_ln2_s, g_act, g_fc1, g_attn, g_qkv, g_ln1, g_ln1_s, g_xf, g_xf_s, g_logits, g_emb_g, g_kv_ring, g_kv_acc,
        g_qkv_heads, g_attn_heads;
    int t_mask_emb, t_mask_attn, t_mask_mlp, g_proj, g_proj_s, g_fc2, g_fc2_s, t_found_inf, t_tp_ring_part, t_tp_ring_recv;
    // The MoE block's (ep = 1): router logits and choices, tokens in expert order, the experts' outputs.
    int t_router_logits, t_routing, t_moe_in, t_efc1, t_eact, t_efc2, g_router_logits, g_probs, g_moe_in, g_efc1, g_eact, g_efc2;
    int t_moe_disp, t_moe_comb, g_moe_disp, g_moe_comb, t_moe_gath, t_moe_scat, g_moe_gath, g_moe_scat;
    int t_sfc1, t_sact, t_sfc2, g_sfc1, g_sact, g_shared_x, t_sfc2_s, g_shared_x_s, t_moe_p, t_moe_disp_p, t_moe_gath_p, g_moe_p, g_moe_disp_p, g_moe_gath_p;
    int t_grads, t_params, t_state, t_grads_host, t_grads_device;
    void intern(Program& p);
};

/// Intern a dataflow tensor label (Program::tensor_names).
int tensor_name_id(Program& p, const std::string& s);

/// The dataflow's tensor table, shared by every RankLowering of one lower() call: the same key
/// gives the same id on every rank.
struct TensorTable {
    Program& prog;
    std::map<std::tuple<int, int, int, int, int, int, std::int64_t, std::int64_t, std::int64_t, int, std::int32_t, bool>, int> ids;
    int intern(const DataTensor& t);
};

/// A unit of gradients that become final together (params.hpp GradUnit), with its sizes for the
/// byte counts the engine needs (dense and expert parameters of this rank).
struct Unit {
    int chunk = 0;
    int layer = -1;               ///< global layer; -1 for head / embedding / the shared table
    bool head = false, embedding = false;
    bool shared = false;          ///< the tied word-embedding table (or its head-stage copy), pp > 1
    double dense = 0, expert = 0; ///< parameters
    double dense_off = 0, expert_off = 0;  ///< first element in each flat buffer
};

/// A gradient bucket: a contiguous range of one flat buffer, reduced by one collective; the same
/// ranges carry the distributed optimizer's parameter all-gathers.
struct Bucket {
    int chunk = 0;
    bool expert = false;
    double off = 0, count = 0;    ///< elements
    int last_unit = -1;           ///< overlapped reduction: emitted once this unit's grads are final
};

/// Per-rank sizes of one micro-batch (after TP/SP/CP), as doubles: products overflow int64 for
/// large models only in FLOPs, but keeping one type avoids mixed arithmetic mistakes.
struct Dims {
    double b = 1, s = 1, tp = 1, cp = 1, ep = 1, etp = 1;
    double tokens = 1;     ///< b * s / cp: tokens a rank's GEMMs see
    double tokens_sp = 1;  ///< tokens / tp with sequence parallelism (norms, residuals), else tokens
    double h = 0, q_w = 0, kv_w = 0, heads = 0, head_dim = 0, ffn = 0, vocab = 0;
    double qk_dim = 0, v_dim = 0;  ///< per-head widths of scores and values (= head_dim unless MLA)
    double mats = 2;       ///< MLP weight matrices: 2 (GELU), 3 (SwiGLU)
    double experts = 0, top_k = 1, expert_ffn = 0, shared = 0;
    bool sp = false;
    double act_bytes = 2;  ///< activations, weights and comm payloads: bf16 (fp16, fp8 plans too), 4 in a pure fp32 plan
    /// One pass over this rank's queries and keys (RoPE, QK-norm): the K part as kv_w / tp.
    double qk_bytes() const { return tokens * (q_w + kv_w) / tp * act_bytes; }
};
Dims make_dims(const ModelSpec& m, const PlanSpec& p);

/// Parameters of one layer held by one rank (after TP and EP), split by reduction group.
struct LayerParamsRank {
    double dense = 0;   ///< reduced over dp x cp
    double expert = 0;  ///< reduced over edp
};
LayerParamsRank layer_params_rank(const ModelSpec& m, const PlanSpec& p, int layer);
double embedding_params_rank(const ModelSpec& m, const PlanSpec& p);  ///< first stage
double output_params_rank(const ModelSpec& m, const PlanSpec& p);     ///< last stage (untied head, tied/MTP copy)

/// Useful forward FLOPs of one step of the whole job (GEMMs + causal attention core, no skew, no
/// recomputation): the basis of Program::model_flops_per_step = 3 x this.
double forward_flops_per_step(const ModelSpec& m, const PlanSpec& p);

/// Where a rank sits (Megatron order: tp fastest, then cp, then dp, then pp).
struct Coord {
    int t = 0, c = 0, d = 0, s = 0;
};

}  // namespace strata::sim::lower_detail
