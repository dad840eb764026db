// The MoE block as instructions, per rank and micro-batch (Megatron-Core's all-to-all token
// dispatcher): the router, the token moves, the EP all-to-alls, the expert-TP gather and
// reduce-scatter, the grouped experts and the shared experts, forward and backward, with the
// dataflow an executor runs (layer_ops.cpp holds the rest of the layer).
#include <cmath>

#include "lower_impl.hpp"

namespace strata::sim::lower_detail {

double RankLowering::expert_tokens() const {
    // Each EP rank routes tokens*top_k assignments into E experts; a rank hosts E/ep of them and
    // receives ep*tokens*top_k/E tokens per expert on average, times its load factor.
    // With SP the expert-TP group gathers etp ranks' shards (etp = tp: all the tokens).
    // A capacity factor caps what an expert keeps of each sender's; padded, it is exactly the
    // capacity, however the load falls.
    const double tokens = d_.tp > 1 && d_.sp ? d_.tokens_sp * d_.etp : d_.tokens;
    if (m_.moe->capacity_factor > 0 && p_.moe_pad_to_capacity) return routed_rows_k(tokens) / d_.experts * d_.ep;
    return d_.ep * tokens * d_.top_k / d_.experts * expert_load();
}

// What the hottest expert's rank takes in, over the mean: 1 + load_skew (moe_factor_), capped by
// the capacity factor, which drops the rest; padded, every expert takes its capacity alike.
double RankLowering::expert_load() const {
    const double cf = m_.moe->capacity_factor;
    if (cf > 0 && p_.moe_pad_to_capacity) return 1.0;
    return cf > 0 ? std::min(moe_factor_, cf) : moe_factor_;
}

// The rows a rank's routing of `tokens` sends towards the experts: tokens x top_k, or with a
// padded capacity every expert's capacity, ceil(tokens k / E x factor) (Megatron-Core's
// get_capacity on the rows the rank routes; GShard's [E, C] dispatch). Without padding the
// dropped choices leave, which the mean does not see.
double RankLowering::routed_rows_k(double tokens) const {
    const double cf = m_.moe->capacity_factor, E = d_.experts, k = d_.top_k;
    if (cf > 0 && p_.moe_pad_to_capacity) return E * std::ceil(tokens * k / E * cf);
    return tokens * k;
}

// Megatron-Core's all-to-all dispatcher receives each sender's rows grouped by expert, so with
// several experts on a rank it sorts them into expert order after the dispatch (and the expert-TP
// gather) for the grouped GEMM, and back before the combine: `sort_chunks_by_idxs`, "permutation
// 2" (token_dispatcher.py, dispatch_postprocess / combine_preprocess; a gather of whole rows,
// fused by moe_permute_fusion). Backward mirrors it on the gradients. DeepEP's dispatch hands over
// tokens, which the receiver permutes once (the model's permute), so it has none. Each moves the
// rank's expert-side rows once (read and write), with their router weights under fc2_input.
// Dataflow: in place (the executor reorders the rows and runs the grouped GEMMs in expert order).
void RankLowering::sort_by_local_expert(bool sort, std::initializer_list<int> tensors) {
    const bool chunks = d_.ep > 1 || (d_.tp > 1 && d_.sp && d_.etp > 1);  // rows from several senders (or expert-TP ranks)
    if (!(chunks && d_.experts / d_.ep > 1 && p_.moe_dispatcher == MoeDispatcher::alltoall)) return;
    const double rows = expert_tokens() * d_.experts / d_.ep;
    const bool with_probs = p_.moe_probs_at == MoeProbsAt::fc2_input && tensors.size() > 1;
    compute(Op::elementwise, sort ? n_.moe_sort : n_.moe_unsort, 0, 2 * rows * (d_.h * d_.act_bytes + (with_probs ? 4 : 0)));
    if (df_) io(tensors, tensors);
}

// MoE block (Megatron's all-to-all token dispatcher): router GEMM + top-k on the rank's tokens,
// all-to-all dispatch over EP, the rank's experts as one batched GEMM (batch = E/ep, m = tokens
// per expert), all-to-all combine. With sequence parallelism each TP rank routes only its
// sequence shard: it dispatches tokens/tp, the received assignments are all-gathered over the
// expert-TP group (experts are split etp ways; etp = tp by default, none with etp = 1, "MoE
// parallel folding") and reduce-scattered back before the combine; hidden states are never
// gathered (Megatron-Core MoEAlltoAllTokenDispatcher). Shared experts are a TP MLP on the gathered
// input, run while the dispatch is in flight. All-to-all bytes: routed tokens * top_k * h * 2
// (with plan.moe_dispatcher "deepep" across nodes the instruction also carries top_k and the
// node limit, and the cost model sends each token once per node: ep_all_to_all).
// The dispatcher needs the per-expert token counts on the host (the all-to-all split sizes and
// the grouped GEMM's m_splits are Python ints): the CPU waits for the router (host_sync). Tokens
// are permuted into expert order before the dispatch (read each token, write its top_k copies)
// and un-permuted after the combine (read the copies, write their weighted sum).
//
// Dataflow (moe_tensors): the router writes its logits and, per token, the top_k experts and
// their weights (router.routing, Megatron's softmax over the chosen logits). The permuted tokens
// are ordered by expert, then token. With EP the dispatch hands each rank the rows for its experts
// (by source rank, then expert) and the combine returns their outputs in the permuted order; with
// expert TP the group's rows are gathered for the experts' split GEMMs and their partial outputs
// reduce-scattered back. The un-permute writes the layer's fc2 output (with SP its shard).
void RankLowering::moe_forward(int layer) {
    const bool sp = d_.tp > 1 && d_.sp;
    const double routed = sp ? d_.tokens_sp : d_.tokens;
    const LayerTensors lt = layer_tensors(layer);
    const MoeTensors mt = moe_tensors(layer);
    router_forward(lt, mt, layer, routed);
    host_sync(Stream::compute, n_.moe_counts);
    const double permute_bytes = (routed + routed_rows_k(routed)) * d_.h * d_.act_bytes;
    compute(Op::elementwise, n_.moe_permute, 0, permute_bytes);
    if (df_) io({lt.ln2, mt.routing}, {mt.in, opt(mt.in_p)});
    const double a2a_bytes = routed_rows_k(routed) * d_.h * d_.act_bytes;
    const double tp_bytes = d_.etp * routed_rows_k(d_.tokens_sp) * d_.h * d_.act_bytes;  // the expert-TP group's assignments
    const bool etp_comm = sp && d_.etp > 1;
    int dispatched = -1;
    if (d_.ep > 1) {
        dispatched = ep_all_to_all(a2a_bytes, n_.ep_dispatch);
        if (df_) io({mt.in, opt(mt.in_p), mt.routing}, {mt.disp, opt(mt.disp_p)});  // each rank's rows for the experts it holds
    }
    if (etp_comm) {
        dispatched = collective(Stream::tp_comm, CollKind::all_gather, Group::etp, tp_bytes, n_.tp_ag, dispatched >= 0 ? dispatched : kAfterCompute);
        if (df_) io({mt.disp, opt(mt.disp_p)}, {mt.gath, opt(mt.gath_p)});  // the expert-TP group's rows, each rank's after the other
    }
    int shared_out = -1;
    if (d_.shared > 0) {
        shared_experts_forward(layer);
        if (sp) shared_out = tp_out_collective(mt.sfc2, mt.sfc2_s);
    }
    wait(Stream::compute, dispatched);
    sort_by_local_expert(true, {mt.gath, opt(mt.gath_p)});
    routed_experts_forward(mt, layer);
    sort_by_local_expert(false, {mt.fc2});
    int combined = -1;
    if (etp_comm) {
        combined = collective(Stream::tp_comm, CollKind::reduce_scatter, Group::etp, tp_bytes, n_.tp_rs);
        if (df_) io({mt.fc2}, {mt.scat});  // the partial sums over the experts' width, each rank its own rows
    }
    if (d_.ep > 1) {
        combined = ep_all_to_all(a2a_bytes, n_.ep_combine, combined >= 0 ? combined : kAfterCompute);
        if (df_) io({mt.scat}, {mt.comb});  // the outputs back to their tokens' ranks, in expert order
    }
    wait(Stream::compute, combined);
    compute(Op::elementwise, n_.moe_unpermute, 0, permute_bytes);
    // Plus the shared experts' output; with SP it is still being reduce-scattered, so the residual
    // add takes it (layer_forward).
    if (df_) io({mt.comb, mt.routing, opt(sp ? -1 : mt.sfc2)}, {sp ? lt.fc2_s : lt.fc2});
    wait(Stream::compute, shared_out);
}

// The routed experts on the rows that reached them: grouped fc1, the activation (fc2_input:
// times each row's router weight), grouped fc2.
void RankLowering::routed_experts_forward(const MoeTensors& mt, int layer) {
    const double batch = d_.experts / d_.ep, te = expert_tokens(), f = d_.expert_ffn / d_.etp;
    gemm_cast(n_.experts_fc1, te, (d_.mats - 1) * f, d_.h, batch);
    if (df_) io({mt.gath, prm("experts.fc1.weight", layer), mt.routing}, {mt.fc1});
    compute(Op::elementwise, n_.experts_act, 0, batch * d_.mats * te * f * d_.act_bytes);
    if (df_) io({mt.fc1, opt(mt.gath_p)}, {mt.act});
    gemm_cast(n_.experts_fc2, te, d_.h, f, batch);
    if (df_) io({mt.act, prm("experts.fc2.weight", layer), mt.routing}, {mt.fc2});
}

// The router: its fp32 gate GEMM over the rank's routed tokens, then the top-k and its softmax.
void RankLowering::router_forward(const LayerTensors& lt, const MoeTensors& mt, int layer, double routed) {
    if (round_robin()) {
        // NeMo AutoModel's FakeBalancedGate: token t takes experts (t k + j) mod E at weight 1/k,
        // written by a small kernel (an arange and a modulo) from nothing but the token count.
        compute(Op::router, n_.router, 0, routed * d_.top_k * 12.0);  // int64 ids and fp32 weights
        if (df_) io({}, {mt.routing});
        return;
    }
    gemm_high(n_.router_gemm, routed, d_.experts, d_.h);
    if (df_) io({lt.ln2, prm("router.weight", layer)}, {mt.logits});
    compute(Op::router, n_.router, 0, 2 * routed * d_.experts * 4);
    if (df_) io({mt.logits}, {mt.routing});
}

RankLowering::MoeTensors RankLowering::moe_tensors(int l) {
    MoeTensors t{};
    if (!df_) {
        std::fill_n(&t.logits, sizeof(MoeTensors) / sizeof(int), -1);
        return t;
    }
    // Routed tokens: with SP each TP rank routes its own sequence shard.
    const bool sp = d_.tp > 1 && d_.sp;
    const double R = sp ? d_.tokens_sp : d_.tokens, H = d_.h, E = d_.experts, k = d_.top_k, f = d_.expert_ffn, tk = routed_rows_k(R);
    const bool ep = d_.ep > 1, etp = sp && d_.etp > 1;
    const double g = etp ? d_.etp : 1, fl = f / d_.etp;  // the expert-TP group's rows; a rank's share of an expert's width
    // The router's values stay fp32 (Megatron's router runs in fp32 under bf16 too): stats.
    auto fp32 = [&](int name, double cols) { return act(name, l, R, cols, TensorRole::stats); };
    t.logits = fp32(n_.t_router_logits, E);
    t.routing = fp32(n_.t_routing, 2 * k);  // the top_k expert ids (exact in a float), then their weights
    t.dlogits = fp32(n_.g_router_logits, E);
    t.dprobs = fp32(n_.g_probs, k);
    // Forward: in -[EP dispatch]-> disp -[expert-TP gather]-> gath -> fc1 -> act -> fc2
    // -[expert-TP reduce-scatter]-> scat -[EP combine]-> comb; backward the mirror. Without EP or
    // expert TP a step is the tensor itself. Rows past the dispatch are the mean (tokens x top_k a
    // rank); an executor sizes them by what arrives.
    t.in = act(n_.t_moe_in, l, tk, H);
    t.disp = ep ? act(n_.t_moe_disp, l, tk, H) : t.in;
    t.gath = etp ? act(n_.t_moe_gath, l, g * tk, H) : t.disp;
    t.fc1 = act(n_.t_efc1, l, g * tk, (d_.mats - 1) * fl);
    t.act = act(n_.t_eact, l, g * tk, fl);
    t.fc2 = act(n_.t_efc2, l, g * tk, H);
    t.scat = etp ? act(n_.t_moe_scat, l, tk, H) : t.fc2;
    t.comb = ep ? act(n_.t_moe_comb, l, tk, H) : t.scat;
    t.din = grad(n_.g_moe_in, l, tk, H);
    t.ddisp = ep ? grad(n_.g_moe_disp, l, tk, H) : t.din;
    t.dgath = etp ? grad(n_.g_moe_gath, l, g * tk, H) : t.ddisp;
    t.dfc1 = grad(n_.g_efc1, l, g * tk, (d_.mats - 1) * fl);
    t.dact = grad(n_.g_eact, l, g * tk, fl);
    t.dfc2 = grad(n_.g_efc2, l, g * tk, H);
    t.dscat = etp ? grad(n_.g_moe_scat, l, tk, H) : t.dfc2;
    t.dcomb = ep ? grad(n_.g_moe_comb, l, tk, H) : t.dscat;
    // The router's weights inside the experts (fc2_input, Megatron-Core's default): each row's
    // weight goes with it to the experts, and its gradient comes back the same way.
    const bool at_input = p_.moe_probs_at == MoeProbsAt::fc2_input;
    auto rowp = [&](int name, double rows) { return at_input ? act(name, l, rows, 1, TensorRole::stats) : -1; };
    t.in_p = rowp(n_.t_moe_p, tk);
    t.disp_p = ep ? rowp(n_.t_moe_disp_p, tk) : t.in_p;
    t.gath_p = etp ? rowp(n_.t_moe_gath_p, g * tk) : t.disp_p;
    t.din_p = rowp(n_.g_moe_p, tk);
    t.ddisp_p = ep ? rowp(n_.g_moe_disp_p, tk) : t.din_p;
    t.dgath_p = etp ? rowp(n_.g_moe_gath_p, g * tk) : t.ddisp_p;
    // The shared experts: a TP MLP on all the tokens (with SP gathered), whose output (with SP
    // reduce-scattered to the rank's shard) joins the routed experts'.
    const double fs = d_.shared * f / d_.tp, Tg = d_.tokens;
    const bool shared = fs > 0;
    t.sfc1 = shared ? act(n_.t_sfc1, l, Tg, (d_.mats - 1) * fs) : -1;
    t.sact = shared ? act(n_.t_sact, l, Tg, fs) : -1;
    t.sfc2 = shared ? act(n_.t_sfc2, l, Tg, H) : -1;
    t.dsfc1 = shared ? grad(n_.g_sfc1, l, Tg, (d_.mats - 1) * fs) : -1;
    t.dsact = shared ? grad(n_.g_sact, l, Tg, fs) : -1;
    t.dsx = shared ? grad(n_.g_shared_x, l, Tg, H) : -1;
    t.sfc2_s = shared && sp ? act(n_.t_sfc2_s, l, R, H) : t.sfc2;
    t.dsx_s = shared && sp ? grad(n_.g_shared_x_s, l, R, H) : t.dsx;
    return t;
}

// Under SP the shared experts' output (grad: dX) reaches the rank's shard by a reduce-scatter
// that runs past the MoE block: the residual add takes the output, and the norm's backward adds
// the gradient into d.ln2 (-1 where there is none).
int RankLowering::shared_shard(int layer, bool grad_of) {
    if (!df_ || !(d_.tp > 1 && d_.sp) || d_.shared <= 0 || !m_.layer_is_moe(layer)) return -1;
    const MoeTensors mt = moe_tensors(layer);
    return grad_of ? mt.dsx_s : mt.sfc2_s;
}

// The shared experts: a TP MLP on the (with SP, gathered) input. Dataflow (tp 1): its output is
// added by the un-permute.
void RankLowering::shared_experts_forward(int layer) {
    const LayerTensors lt = layer_tensors(layer);
    const MoeTensors mt = moe_tensors(layer);
    tp_forward_in(true, lt.ln2, lt.ln2_g);
    const double f = d_.shared * d_.expert_ffn / d_.tp;
    gemm_cast(n_.shared_fc1, d_.tokens, (d_.mats - 1) * f, d_.h);
    if (df_) io({lt.ln2_g, prm("shared.fc1.weight", layer)}, {mt.sfc1});
    compute(Op::elementwise, n_.shared_act, 0, d_.mats * d_.tokens * f * d_.act_bytes);
    if (df_) io({mt.sfc1}, {mt.sact});
    gemm_cast(n_.shared_fc2, d_.tokens, d_.h, f);
    if (df_) io({mt.sact, prm("shared.fc2.weight", layer)}, {mt.sfc2});
}

// The mirror of moe_forward: combine's gradient comes back over EP (and is all-gathered over TP
// with SP), expert backward, reduce-scatter over TP and all-to-all back, then the router.
// Dataflow: the un-permute's backward gives each expert row its weighted dY and each weight its
// gradient (dY . the expert's output); the permute's backward sums a token's rows into d.ln2, and
// the router's GEMM adds its dgrad there.
void RankLowering::moe_backward(int layer) {
    const bool sp = d_.tp > 1 && d_.sp;
    const LayerTensors lt = layer_tensors(layer);
    const MoeTensors mt = moe_tensors(layer);
    const double routed = sp ? d_.tokens_sp : d_.tokens;
    const double a2a_bytes = routed_rows_k(routed) * d_.h * d_.act_bytes;
    const double tp_bytes = d_.etp * routed_rows_k(d_.tokens_sp) * d_.h * d_.act_bytes;
    const bool etp_comm = sp && d_.etp > 1;
    const double permute_bytes = (routed + routed_rows_k(routed)) * d_.h * d_.act_bytes;
    compute(Op::elementwise, n_.moe_unpermute, 0, permute_bytes);  // the un-permute's gradient: copy dY to each top_k slot
    // fc2_output: the weights' gradient is dY . the expert's output; fc2_input: the experts' act
    // backward gives it, per row.
    if (df_) {
        // A round-robin gate's weights are constants: no gradient for them.
        if (mt.in_p >= 0 || round_robin()) io({lt.dbr2, mt.routing}, {mt.dcomb});
        else io({lt.dbr2, mt.routing, mt.comb}, {mt.dcomb, mt.dprobs});
    }
    int arrived = -1;
    if (d_.ep > 1) {
        arrived = ep_all_to_all(a2a_bytes, n_.ep_combine);
        if (df_) io({mt.dcomb, mt.routing}, {mt.dscat});
    }
    if (etp_comm) {
        arrived = collective(Stream::tp_comm, CollKind::all_gather, Group::etp, tp_bytes, n_.tp_ag, arrived >= 0 ? arrived : kAfterCompute);
        if (df_) io({mt.dscat}, {mt.dfc2});
    }
    wait(Stream::compute, arrived);
    sort_by_local_expert(true, {mt.dfc2});
    const double batch = d_.experts / d_.ep, te = expert_tokens(), f = d_.expert_ffn / d_.etp;
    gemm_cast(n_.experts_fc2, te, f, d_.h, batch);
    if (df_) io({mt.dfc2, prm("experts.fc2.weight", layer), mt.routing}, {mt.dact});
    {
        const std::size_t wb = weight_begin();  // DualPipe's zero bubble: to the weight pass
        gemm(n_.experts_fc2, f, d_.h, te, batch);
        if (df_) io({mt.act, mt.dfc2, mt.routing}, {prm_grad("experts.fc2.weight", layer)});
        weight_end(wb);
    }
    compute(Op::elementwise, n_.experts_act, 0, 2 * batch * d_.mats * te * f * d_.act_bytes);
    // ReLU's backward reads its output, unless the router's weights scaled it (fc2_input) or moe_act
    // recomputes it from fc1's output: then its input, as GeLU's.
    const bool relu_from_input = p_.moe_probs_at == MoeProbsAt::fc2_input || p_.recomputes(RecomputeModule::moe_act);
    const int act_in = relu_from_input ? mt.fc1 : act_grad_reads(mt.fc1, mt.act);
    if (df_) io({act_in, mt.dact, opt(mt.gath_p)}, {mt.dfc1, opt(mt.dgath_p)});
    gemm_cast(n_.experts_fc1, te, d_.h, (d_.mats - 1) * f, batch);
    if (df_) io({mt.dfc1, prm("experts.fc1.weight", layer), mt.routing}, {mt.dgath});
    {
        const std::size_t wb = weight_begin();  // DualPipe's zero bubble: to the weight pass
        gemm(n_.experts_fc1, d_.h, (d_.mats - 1) * f, te, batch);
        if (df_) io({mt.gath, mt.dfc1, mt.routing}, {prm_grad("experts.fc1.weight", layer)});
        weight_end(wb);
    }
    sort_by_local_expert(false, {mt.dgath, opt(mt.dgath_p)});
    int back = -1;
    if (etp_comm) {
        back = collective(Stream::tp_comm, CollKind::reduce_scatter, Group::etp, tp_bytes, n_.tp_rs);
        if (df_) io({mt.dgath, opt(mt.dgath_p)}, {mt.ddisp, opt(mt.ddisp_p)});
    }
    if (d_.ep > 1) {
        back = ep_all_to_all(a2a_bytes, n_.ep_dispatch, back >= 0 ? back : kAfterCompute);
        if (df_) io({mt.ddisp, opt(mt.ddisp_p)}, {mt.din, opt(mt.din_p)});  // the rows' gradients home, in expert order
    }
    int shared_back = -1;
    if (d_.shared > 0) {
        tp_forward_in(true, lt.dbr2, lt.dbr2_g);  // SP: gather dY for the shared experts' TP MLP
        const double fs = d_.shared * d_.expert_ffn / d_.tp;
        gemm_cast(n_.shared_fc2, d_.tokens, fs, d_.h);
        if (df_) io({lt.dbr2_g, prm("shared.fc2.weight", layer)}, {mt.dsact});
        {
            const std::size_t wb = weight_begin();  // DualPipe's zero bubble: to the weight pass
            gemm(n_.shared_fc2, fs, d_.h, d_.tokens);
            if (df_) io({mt.sact, lt.dbr2_g}, {prm_grad("shared.fc2.weight", layer)});
            weight_end(wb);
        }
        compute(Op::elementwise, n_.shared_act, 0, 2 * d_.mats * d_.tokens * fs * d_.act_bytes);
        if (df_) io({act_grad_reads(mt.sfc1, mt.sact), mt.dsact}, {mt.dsfc1});
        gemm_cast(n_.shared_fc1, d_.tokens, d_.h, (d_.mats - 1) * fs);
        if (df_) io({mt.dsfc1, prm("shared.fc1.weight", layer)}, {mt.dsx});
        {
            const std::size_t wb = weight_begin();  // DualPipe's zero bubble: to the weight pass
            gemm(n_.shared_fc1, d_.h, (d_.mats - 1) * fs, d_.tokens);
            if (df_) io({lt.ln2_g, mt.dsfc1}, {prm_grad("shared.fc1.weight", layer)});
            weight_end(wb);
        }
        if (sp) shared_back = tp_out_collective(mt.dsx, mt.dsx_s);  // summed into d.ln2 by the norm's backward (layer_backward)
    }
    wait(Stream::compute, back);
    compute(Op::elementwise, n_.moe_permute, 0, permute_bytes);  // the permute's gradient: sum the top_k copies
    const int dln2 = sp ? lt.dln2_s : lt.dln2;  // with SP the rank's own tokens' gradient, no reduce-scatter
    if (df_) io({mt.din, mt.routing, opt(mt.din_p), opt(sp ? -1 : mt.dsx)}, {dln2, opt(mt.din_p >= 0 && !round_robin() ? mt.dprobs : -1)});  // plus the shared experts' dX
    if (round_robin()) {  // the gate has no backward
        wait(Stream::compute, shared_back);
        if (d_.tp > 1 && !sp) wait(Stream::compute, tp_out_collective());
        return;
    }
    compute(Op::router, n_.router, 0, 2 * routed * d_.experts * 4);
    if (df_) io({mt.routing, mt.dprobs}, {mt.dlogits});
    gemm_high(n_.router_gemm, routed, d_.h, d_.experts);
    if (df_) io({mt.dlogits, prm("router.weight", layer), dln2}, {dln2});  // adds into d.ln2
    gemm_high(n_.router_gemm, d_.h, d_.experts, routed);
    if (df_) io({lt.ln2, mt.dlogits}, {prm_grad("router.weight", layer)});
    wait(Stream::compute, shared_back);
    if (d_.tp > 1 && !sp) wait(Stream::compute, tp_out_collective());  // no SP: all-reduce dX
}

}  // namespace strata::sim::lower_detail
