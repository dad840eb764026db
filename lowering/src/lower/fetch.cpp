// What a layer, the embedding or the head needs brought to the GPU before it runs: parameters
// offloaded to host memory or SSD (ZeRO-Infinity, Angel-PTM) and ZeRO-3's gathers, and offloaded
// activations before their backward.
#include <cmath>
#include <unordered_set>

#include "lower_impl.hpp"

namespace strata::sim::lower_detail {

// ---------------------------------------------------------------------------------------------
// Parameters a layer needs before it runs: SSD read and H2D of the offloaded fraction (ZeRO-
// Infinity / Angel-PTM), then the ZeRO-3 all-gather of the full layer. Issued one layer ahead.
int RankLowering::fetch_params(int layer, int after_ev, FetchPart part) {
    const TierSplit& pf = p_.offload.params;
    const double off = pf.cpu + pf.ssd;
    // Pipelined FSDP gathers once a step, at the layer's first forward (micro-batch 0), and keeps
    // the layer until its last backward: offloaded, its slice comes up for that gather only.
    const bool sharded = p_.zero_stage == 3 && p_.dp * p_.cp > 1;
    const bool first_use = phase_ == Phase::forward && mb_ == step_ * micro_;  // of the step
    const bool zero3 = sharded && (!pipelined_fsdp() || first_use);
    // Split between the GPU and the host (split_params), a resident unit comes up at its first use
    // a step only: into the rank's GPU shard under ZeRO-3 (gathered from there at each use), else
    // into the copy its readers hold until the step's last.
    const int unit = df_ || split_params() ? unit_of_layer(layer) : -1;  // a scan: only where needed
    const bool res = resident(unit);
    const bool up = off > 0 && !(sharded && !zero3) && (!res || first_use);
    if (!up && !zero3) return -1;
    const int saved_layer = layer_;
    layer_ = layer;  // the transfers are labelled with the layer they serve
    const LayerParamsRank lp = layer_params_rank(m_, p_, layer);
    const double shard = zero3 ? lp.dense / group_size(Group::dp) + lp.expert / group_size(Group::edp) : lp.dense + lp.expert;
    const Unit* u = df_ ? &units_[static_cast<std::size_t>(unit)] : nullptr;
    // Sharded (ZeRO-3's offload_param), a rank brings its own slice up (of each tensor under
    // zero3_param_sync) and the gather fills the rest.
    std::vector<std::pair<double, double>> slices;
    if (u)
        for (const auto& [off, n] : layer_pieces(unit)) slices.push_back(zero3 ? dp_slice(off, n) : std::make_pair(off, n));
    if (u && u->expert > 0) {  // the layer's expert range (past the dense buffer), sharded over edp
        const double e = u->expert_off + dense_elements_;
        slices.push_back(zero3 ? dp_slice(e, u->expert, true) : std::make_pair(e, u->expert));
    }
    int ev = part == FetchPart::gather || !up ? after_ev : fetch_offloaded(shard, slices, after_ev, res && zero3);
    if (zero3 && part != FetchPart::offloaded) {
        if (u && zero3_sync()) {
            ev = zero3_gather_pieces(unit, ev);
        } else {
            double last = lp.dense * d_.act_bytes;
            if (zero3_sync()) last = zero3_calls_before(Stream::dp_comm, CollKind::all_gather, Group::dp, layer, lp.dense, d_.act_bytes, n_.zero3_ag, ev);
            ev = collective(Stream::dp_comm, CollKind::all_gather, Group::dp, last, n_.zero3_ag, ev);
            gather_operands(u ? u->dense_off : 0, u ? u->dense : 0, false, res);
        }
        if (lp.expert > 0 && group_size(Group::edp) > 1) {
            ev = collective(Stream::dp_comm, CollKind::all_gather, Group::edp, lp.expert * d_.act_bytes, n_.zero3_ag_expert, -1);
            if (u) gather_operands(u->expert_off + dense_elements_, u->expert, true, res);
        }
    }
    layer_ = saved_layer;
    return ev;
}

// DeepSpeed's ZeRO-3 before v0.6 fetched a module's parameters one by one: for each, a
// torch.cuda.synchronize() and an all_gather of that tensor (partition_parameters.py,
// _allgather_param, v0.3-v0.5); gradients were reduce-scattered per parameter as well. A layer's
// tensors, as Megatron lays them out: the QKV, projection and two MLP matrices (the router and
// shared experts' under MoE), and its vectors (norm weights and biases, biases, QK-norm weights),
// about a hidden size each.
double RankLowering::zero3_calls_before(Stream s, CollKind k, Group g, int layer, double elements, double bytes_per, int name,
                                        int& after) {
    const bool ln = m_.norm == NormKind::layernorm;
    int vectors = 2 * (ln ? 2 : 1) + (m_.linear_bias ? 4 : m_.qkv_bias ? 1 : 0) + (m_.qk_norm ? 2 * (ln ? 2 : 1) : 0);
    int matrices = 2;  // QKV, projection
    if (m_.layer_is_moe(layer)) {
        matrices += 1 + (m_.moe->shared_experts > 0 ? 2 : 0);  // router, shared experts (the routed ones: their own gather)
        if (m_.linear_bias) vectors -= 2;                       // Megatron-Core's experts have no biases
    } else {
        matrices += 2;
    }
    const double vec = std::min(static_cast<double>(m_.hidden), elements / (vectors + matrices));
    const double mat = (elements - vectors * vec) / matrices;
    for (int i = 0; i < vectors; ++i) after = collective(s, k, g, vec * bytes_per, name, after);
    for (int i = 0; i + 1 < matrices; ++i) after = collective(s, k, g, mat * bytes_per, name, after);
    return mat * bytes_per;
}

// The offloaded share of `params` parameters to the GPU: each tier's share moves on its own link
// at once (the host share goes up while the SSD share is read into host memory, then follows it
// over PCIe; h2d is one serial stream). In the dataflow each H2D fills its part of `slices` (a
// unit's range, or a rank's slices of it) on the GPU from the host's copy: the host share first,
// the SSD share after it, read from the file into host memory first.
int RankLowering::fetch_offloaded(double params, const std::vector<std::pair<double, double>>& slices, int after_ev, bool to_shard) {
    // Split between the GPU and the host, a unit is homed wholly on one side: what comes up comes
    // whole from the host.
    const TierSplit pf = split_params() ? TierSplit{0.0, 1.0, 0.0} : p_.offload.params;
    const double off = pf.cpu + pf.ssd;
    if (off <= 0) return after_ev;
    int ev = after_ev;
    auto part = [&](double lo, double hi, Tier from_tier, Tier to_tier) {
        if (!df_ || slices.empty()) return;
        std::vector<int> from, to;
        for (const auto& [s_off, s_count] : slices) {
            const double a = s_off + std::round(s_count * lo / off), b = s_off + std::round(s_count * hi / off);
            if (b <= a) continue;
            from.push_back(range(TensorRole::param, a, b - a, from_tier));
            to.push_back(range(TensorRole::param, a, b - a, to_tier, false, -1, to_shard && to_tier == Tier::gpu));
        }
        if (!from.empty()) io_lists(from, to);
    };
    if (pf.cpu > 0) {
        ev = copy(Stream::h2d, CopyKind::h2d, params * pf.cpu * d_.act_bytes, n_.fetch_h2d, after_ev);
        part(0, pf.cpu, Tier::cpu, Tier::gpu);
    }
    if (pf.ssd > 0) {
        // The SSD share is read into a host staging copy (the swapper's pinned buffers), which the
        // H2D empties.
        const int read = copy(Stream::ssd, CopyKind::ssd_read, params * pf.ssd * d_.act_bytes, n_.fetch_ssd, after_ev);
        part(pf.cpu, off, Tier::ssd, Tier::cpu);
        ev = copy(Stream::h2d, CopyKind::h2d, params * pf.ssd * d_.act_bytes, n_.fetch_h2d, read);
        part(pf.cpu, off, Tier::cpu, Tier::gpu);
    }
    return ev;
}

// The embedding's or the head's parameters, offloaded like a layer's, fetched before their use
// (DeepSpeed's ZeRO-3 hooks fetch every module; the layers are prefetched, these are not; under
// pipelined FSDP once a step). The
// head of a single stage with a tied table reads the embedding's unit as well. Sharded over dp
// (ZeRO-3), each rank brings up its slice of each of the unit's buckets, which are then gathered.
void RankLowering::fetch_edge(bool head) {
    if (p_.offload.params.all_gpu()) return;
    const bool zero3 = p_.zero_stage == 3 && group_size(Group::dp) > 1;
    // Pipelined FSDP keeps the root module (embedding, final norm, head) gathered from the step's
    // first forward to its end, as it keeps the layers (torchtitan: reshard_after_forward off
    // under PP): homed on the host, it comes up once a step, not once a pass.
    if (zero3 && pipelined_fsdp() && !(phase_ == Phase::forward && mb_ == step_ * micro_)) return;
    const int saved_layer = layer_;
    layer_ = -1;
    for (const Unit& u : units_) {
        if (u.chunk != chunk_ || u.layer >= 0) continue;
        const bool wanted = head ? u.head || (u.embedding && head_reads_embedding_table(m_, p_)) : u.embedding;
        if (!wanted) continue;
        // The head's unit holds the MTP modules' experts too, past the dense buffer (fetch_params).
        const double experts_at = u.expert_off + dense_elements_;
        if (!zero3) {
            std::vector<std::pair<double, double>> whole{{u.dense_off, u.dense}};
            if (u.expert > 0) whole.emplace_back(experts_at, u.expert);
            wait(Stream::compute, fetch_offloaded(u.dense + u.expert, whole, record(Stream::compute)));
            continue;
        }
        std::vector<const Bucket*> in_unit;
        std::vector<std::pair<double, double>> slices;
        for (const Bucket& b : buckets_) {
            const bool dense = !b.expert && b.off >= u.dense_off && b.off < u.dense_off + u.dense;
            const bool expert = b.expert && u.expert > 0 && b.off >= u.expert_off && b.off < u.expert_off + u.expert;
            if (!dense && !expert) continue;
            in_unit.push_back(&b);
            slices.push_back(dp_slice(b.off + (b.expert ? dense_elements_ : 0), b.count, b.expert));
        }
        int ev = fetch_offloaded(u.dense / group_size(Group::dp) + u.expert / group_size(Group::edp), slices, record(Stream::compute));
        for (const Bucket* b : in_unit) {
            const Group g = b->expert ? Group::edp : Group::dp;
            if (group_size(g) <= 1) continue;  // with edp 1 the rank's slice is the whole range
            ev = collective(Stream::dp_comm, CollKind::all_gather, g, b->count * d_.act_bytes, b->expert ? n_.zero3_ag_expert : n_.zero3_edges, ev);
            if (df_) {
                const int r = range(TensorRole::param, b->off + (b->expert ? dense_elements_ : 0), b->count);
                io({r}, {r});
            }
        }
        wait(Stream::compute, ev);
    }
    layer_ = saved_layer;
}

int RankLowering::fetch_activations(int mb, int chunk, int li, int after_ev) {
    auto it = act_offloaded_.find({mb, chunk, li});
    if (it == act_offloaded_.end()) return -1;
    const TierSplit& af = p_.offload.activations;
    double bytes = 0;
    for (const TensorDesc& t : act_desc_[static_cast<std::size_t>(layer_in_stage(chunk, li))])
        bytes += t.bytes;
    int ev = it->second;
    act_offloaded_.erase(it);
    const int saved_layer = layer_;
    layer_ = chunk_first_layer(chunk) + li;
    // As for parameters: the host share and the SSD read proceed at once.
    const int offloaded = ev;
    wait(Stream::h2d, after_ev);
    if (af.cpu > 0) ev = copy(Stream::h2d, CopyKind::h2d, bytes * af.cpu, n_.act_h2d, offloaded);
    if (auto c = act_copies_.find({mb, chunk, li}); c != act_copies_.end() && af.cpu > 0) {
        c->second.h2d = last_op_;
        c->second.fetched = true;
    }
    if (af.ssd > 0) {
        wait(Stream::ssd, after_ev);
        const int read = copy(Stream::ssd, CopyKind::ssd_read, bytes * af.ssd, n_.act_ssd_read, offloaded);
        ev = copy(Stream::h2d, CopyKind::h2d, bytes * af.ssd, n_.act_h2d, read);
    }
    layer_ = saved_layer;
    return ev;
}

// The dataflow of a layer's activation offload (to host memory; the runtime executes no SSD
// share): of what its forward touched, the values its backward reads before writing them (the
// recomputation's input alone under full recompute) go down to a host copy after the forward and
// come back before the backward. Named once the backward is lowered, on the copies already in
// the program, so that nothing in the pass itself has to know the stash.
void RankLowering::name_act_copies(int mb, int chunk, int li, std::size_t backward_begin) {
    auto it = act_copies_.find({mb, chunk, li});
    if (it == act_copies_.end()) return;
    const ActCopies c = std::move(it->second);
    act_copies_.erase(it);
    if (!c.fetched) return;
    std::unordered_set<int> touched(c.touched.begin(), c.touched.end()), written, stash_set;
    std::vector<int> stash;
    rp_.operands.resize(rp_.instrs.size());  // the backward's last instructions may have none yet
    for (std::size_t i = backward_begin; i < rp_.instrs.size(); ++i) {
        const Operands& o = rp_.operands[i];
        const auto* ids = rp_.operand_ids.data() + o.first;
        for (int k = 0; k < o.n_in; ++k)
            if (touched.count(ids[k]) && !written.count(ids[k]) && stash_set.insert(ids[k]).second) stash.push_back(ids[k]);
        for (int k = 0; k < o.n_out; ++k) written.insert(ids[o.n_in + k]);
    }
    std::vector<int> host;
    for (int id : stash) {
        DataTensor t = prog_.tensors[static_cast<std::size_t>(id)];
        t.tier = Tier::cpu;
        host.push_back(table_->intern(t));
    }
    set_operands(c.d2h, stash, host);
    set_operands(c.h2d, host, stash);
}

}  // namespace strata::sim::lower_detail
