// Gradient units and buckets of one rank, and the dataflow helpers. Every data-parallel
// reduction and every distributed-optimizer gather of a rank uses the bucket ranges built here
// once, so the slices a reduce-scatter leaves each rank are the slices its all-gather later
// sends (the runtime depends on it; the engine only sees the byte counts).
#include <algorithm>
#include <cmath>
#include <limits>

#include "lower_impl.hpp"
#include "strata/common/error.hpp"
#include "strata/lowering/groups.hpp"

namespace strata::sim::lower_detail {

int TensorTable::intern(const DataTensor& t) {
    const auto key = std::make_tuple(t.name, static_cast<int>(t.role), static_cast<int>(t.buffer), static_cast<int>(t.tier),
                                     static_cast<int>(t.layer), t.microbatch, t.offset, t.rows, t.cols, static_cast<int>(t.ring), t.version, t.shard);
    auto it = ids.find(key);
    if (it != ids.end()) return it->second;
    STRATA_ASSERT(prog.tensors.size() < static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), "lower: too many dataflow tensors");
    const int id = static_cast<int>(prog.tensors.size());
    prog.tensors.push_back(t);
    ids.emplace(key, id);
    return id;
}

// ---- units and buckets --------------------------------------------------------------------

void RankLowering::build_units() {
    const int vlast = pp_ * vpp_ - 1;
    const bool shared = head_stage_embedding_copy(m_, p_);
    const double table = d_.vocab * d_.h / d_.tp;
    double dense_off = 0, expert_off = 0;
    auto push = [&](Unit u) {
        u.dense_off = dense_off;
        u.expert_off = expert_off;
        dense_off += u.dense;
        expert_off += u.expert;
        units_.push_back(u);
    };
    for (int c = 0; c < vpp_; ++c) {
        const int v = virtual_stage_of(p_, stage_, c);
        if (v == vlast) {
            const StageParams mtp = mtp_params_local(m_, p_);
            Unit u;
            u.chunk = c;
            u.head = true;
            u.dense = output_params_rank(m_, p_) - (shared ? table : 0) + mtp.dense;
            u.expert = mtp.expert;
            push(u);
            if (shared) {
                Unit t;
                t.chunk = c;
                t.head = true;
                t.shared = true;
                t.dense = table;
                push(t);
            }
        }
        for (int li = chunk_layers(c) - 1; li >= 0; --li) {
            const int layer = chunk_first_layer(c) + li;
            const LayerParamsRank lp = layer_params_rank(m_, p_, layer);
            Unit u;
            u.chunk = c;
            u.layer = layer;
            u.dense = lp.dense;
            u.expert = lp.expert;
            push(u);
        }
        if (v == 0) {
            Unit u;
            u.chunk = c;
            u.embedding = true;
            if (shared) {  // the position table alone, then the word table as its own unit
                u.dense = embedding_params_rank(m_, p_) - table;
                if (u.dense > 0) push(u);
                u.shared = true;
                u.dense = table;
            } else {
                u.dense = embedding_params_rank(m_, p_);
            }
            push(u);
        }
    }
    dense_elements_ = dense_off;
    expert_elements_ = expert_off;
    build_resident_units();
}

// Weights split between the GPU and the host (plan.offload.params, Angel-PTM's GPU cache of
// parameter pages): each layer unit is homed wholly on one side, and the resident ones are spread
// over the stage by error diffusion so they hold the GPU's share of all the rank's parameters (as
// far as whole layers reach; the embedding and the head are fetched). The host homes every unit's
// weights, the update writes them there, and a resident unit's copy comes up once a step, at its
// first use, where an offloaded one comes up at each use (fetch_params).
void RankLowering::build_resident_units() {
    resident_.assign(units_.size(), 0);
    if (!split_params()) return;
    double all = 0, layers = 0;
    for (const Unit& u : units_) {
        all += u.dense + u.expert;
        if (u.layer >= 0) layers += u.dense + u.expert;
    }
    if (layers <= 0) return;
    const double frac = std::min(1.0, p_.offload.params.gpu * all / layers);
    double acc = 0;
    for (std::size_t i = 0; i < units_.size(); ++i) {
        const Unit& u = units_[i];
        if (u.layer < 0) continue;
        const double n = u.dense + u.expert;
        acc += frac * n;
        if (acc >= 0.5 * n) {
            resident_[i] = 1;
            acc -= n;
        }
    }
}

// Megatron's DDP: a bucket closes once it holds dp_bucket_bytes of gradients or its chunk's
// backward ends. Under the distributed optimizer the shared embedding table gets a bucket of its
// own, so the first and the head stage slice it alike and its embedding-group all-reduce can follow
// the reduce-scatter (Megatron-Core's _does_param_require_new_bucket). Without overlap the
// gradients are cut into dp_bucket_bytes pieces (per chunk for ZeRO-2, whole stage otherwise);
// ZeRO-3 reduces layers one by one (zero3_rs) and only the edges here.
void RankLowering::build_buckets() {
    buckets_.clear();
    const double gb = p_.grad_bytes();
    const double cap = static_cast<double>(std::max<std::int64_t>(1, p_.dp_bucket_bytes));
    const bool dist_opt = p_.zero_stage == 1 || p_.zero_stage == 2;
    // Buckets that close at a unit's end, reduced once it is final: overlapped (Megatron's DDP), or
    // ZeRO-2's, which DeepSpeed reduces as each bucket fills in the backward even without
    // overlap_comm (the compute stream then waits for each): only a bucket of whole gradients
    // lives at a time beside the shard.
    const bool overlap = (p_.overlap_grad_reduce || p_.zero_stage == 2) && p_.zero_stage != 3;
    if (overlap) {
        double acc[2] = {0, 0}, start[2] = {0, 0};
        int prev_unit = -1, chunk = -1;
        auto close = [&](int k, int last) {
            if (acc[k] <= 0) return;
            Bucket b;
            b.chunk = units_[static_cast<std::size_t>(last)].chunk;
            b.expert = k == 1;
            b.off = start[k];
            b.count = acc[k] / gb;
            b.last_unit = last;
            buckets_.push_back(b);
            start[k] += b.count;
            acc[k] = 0;
        };
        for (std::size_t i = 0; i < units_.size(); ++i) {
            const Unit& u = units_[i];
            if (u.chunk != chunk && prev_unit >= 0) {  // a chunk's backward ends: flush
                close(0, prev_unit);
                close(1, prev_unit);
            }
            chunk = u.chunk;
            if (u.shared && dist_opt) close(0, prev_unit);
            acc[0] += u.dense * gb;
            acc[1] += u.expert * gb;
            if (acc[0] > 0 && (acc[0] >= cap || (u.shared && dist_opt))) close(0, static_cast<int>(i));
            if (acc[1] > 0 && acc[1] >= cap) close(1, static_cast<int>(i));
            prev_unit = static_cast<int>(i);
        }
        if (prev_unit >= 0) {
            close(0, prev_unit);
            close(1, prev_unit);
        }
        return;
    }
    // Pieces of at most cap bytes over a run of units, cut again around a shared table.
    auto pieces = [&](std::size_t first, std::size_t last, bool expert, int chunk) {
        double run_off = -1, run_len = 0;
        auto flush = [&]() {
            const double cap_elems = cap / gb;
            for (double done = 0; done < run_len; done += cap_elems) {
                Bucket b;
                b.chunk = chunk;
                b.expert = expert;
                b.off = run_off + done;
                b.count = std::min(cap_elems, run_len - done);
                buckets_.push_back(b);
            }
            run_off = -1;
            run_len = 0;
        };
        for (std::size_t i = first; i < last; ++i) {
            const Unit& u = units_[i];
            const double n = expert ? u.expert : u.dense;
            const double off = expert ? u.expert_off : u.dense_off;
            if (n <= 0) continue;
            if ((u.shared && dist_opt) || (run_off >= 0 && off != run_off + run_len)) flush();
            if (run_off < 0) run_off = off;
            run_len += n;
            if (u.shared && dist_opt) flush();
        }
        flush();
    };
    if (p_.zero_stage == 3) {  // the edges: head and embedding units (layers go one by one)
        for (int k = 0; k < 2; ++k)
            for (std::size_t i = 0; i < units_.size(); ++i)
                if (units_[i].layer < 0) pieces(i, i + 1, k == 1, units_[i].chunk);
    } else {
        pieces(0, units_.size(), false, -1);
        pieces(0, units_.size(), true, -1);
    }
}

int RankLowering::unit_of_layer(int layer) const {
    for (std::size_t i = 0; i < units_.size(); ++i)
        if (units_[i].layer == layer) return static_cast<int>(i);
    return -1;
}
int RankLowering::head_unit(int chunk) const {
    for (std::size_t i = 0; i < units_.size(); ++i)
        if (units_[i].chunk == chunk && units_[i].head) return static_cast<int>(i);
    return -1;
}
int RankLowering::embedding_unit(int chunk) const {
    for (std::size_t i = 0; i < units_.size(); ++i)
        if (units_[i].chunk == chunk && units_[i].embedding) return static_cast<int>(i);
    return -1;
}

void RankLowering::reduce_bucket(const Bucket& b) {
    const CollKind k = p_.zero_stage == 0 ? CollKind::all_reduce : CollKind::reduce_scatter;
    const Group g = b.expert ? Group::edp : Group::dp;
    const double off = b.off + (b.expert ? dense_elements_ : 0);  // the expert buffer's ranges count past the dense one's (range())
    if (group_size(g) > 1) {
        collective(Stream::dp_comm, k, g, b.count * p_.grad_bytes(), b.expert ? n_.edp_grads : n_.dp_grads);
        if (df_ && shard_grads_) {
            reduce_scatter_operands(off, b.count, b.expert);
        } else if (df_) {
            const int r = range(TensorRole::param_grad, off, b.count);
            io({r}, {r});
        }
    }
    if (p_.streams_grads_to_host()) grads_to_host(off, b.count, b.expert);
}

// Gradients kept as shards (DataTensor::version): the ranges a reduce-scatter consumes, each a
// value per reduction. ZeRO-2 reduces its buckets, ZeRO-3 its layers one by one and the edges'
// buckets; pipelined FSDP accumulates whole gradients and keeps the flat buffer.
void RankLowering::build_grad_values() {
    grad_values_.clear();
    // Gradients streamed to the host are values per reduction even on one rank: the GPU holds a
    // bucket only until its copy down.
    shard_grads_ = df_ && p_.zero_stage >= 2 && (group_size(Group::dp) > 1 || p_.streams_grads_to_host()) && !pipelined_fsdp();
    // Pipelined FSDP keeps whole gradients but a shard of the weights, beside the stage gathered
    // from its first forward to its last backward (FSDP2's sharded and unsharded parameters).
    shard_params_ = df_ && p_.zero_stage == 3 && group_size(Group::dp) > 1 && p_.offload.params.all_gpu();
    if (!shard_grads_) return;
    // The expert buffer's buckets are values too where the edp group reduces them (with edp 1 a
    // rank's expert gradients are its shard already: expert_shard_whole()), or where they go to
    // the host as they are formed.
    for (const Bucket& b : buckets_)
        if (!b.expert) grad_values_.emplace_back(b.off, b.count);
        else if (!expert_grads_in_shard()) grad_values_.emplace_back(b.off + dense_elements_, b.count);
    if (p_.zero_stage == 3)
        for (const Unit& u : units_) {
            if (u.layer >= 0 && u.dense > 0) grad_values_.emplace_back(u.dense_off, u.dense);
            if (u.layer >= 0 && u.expert > 0 && !expert_grads_in_shard()) grad_values_.emplace_back(u.expert_off + dense_elements_, u.expert);
        }
    std::sort(grad_values_.begin(), grad_values_.end());
    // Buckets cut through a tensor (no overlap: dp_bucket_bytes pieces) are one value: a kernel
    // writes the tensor's gradient whole. Its reduce-scatters are the bucket's, in buffer order.
    std::vector<std::pair<double, double>> merged;
    for (const auto& r : grad_values_) {
        STRATA_ASSERT(merged.empty() || merged.back().first + merged.back().second <= r.first, "lower: reduced gradient ranges overlap");
        const double x = r.first;
        const bool crossed = !merged.empty() && merged.back().first + merged.back().second == x &&
                             std::any_of(layout_.entries.begin(), layout_.entries.end(), [&](const ParamEntry& e) {
                                 return static_cast<double>(e.offset) < x && x < static_cast<double>(e.end());
                             });
        if (crossed) merged.back().second += r.second;
        else merged.push_back(r);
    }
    grad_values_ = std::move(merged);
    grad_version_.assign(grad_values_.size(), 0);
}

int RankLowering::grad_value_of(double off, double count) const {
    auto it = std::upper_bound(grad_values_.begin(), grad_values_.end(), off,
                               [](double v, const std::pair<double, double>& r) { return v < r.first; });
    STRATA_ASSERT(it != grad_values_.begin(), "lower: a gradient outside every reduced range");
    --it;
    STRATA_ASSERT(off + count <= it->first + it->second, "lower: a gradient across two reduced ranges");
    return static_cast<int>(it - grad_values_.begin());
}

// {this reduction's whole range} -> {the rank's slice of it, in the shard}; the next gradients of
// the range are a new value.
void RankLowering::reduce_scatter_operands(double off, double count, bool expert) {
    if (!df_) return;
    if (!shard_grads_) {
        const int r = range(TensorRole::param_grad, off, count);
        io({r}, {r});
        return;
    }
    const int v = grad_value_of(off, count);
    const int whole = range(TensorRole::param_grad, off, count, Tier::gpu, false, grad_version_[static_cast<std::size_t>(v)]);
    if (p_.streams_grads_to_host()) {  // reduced in place, the rank's slice summed (grads_to_host takes it down)
        io({whole}, {whole});
        return;
    }
    const auto [lo, n] = dp_slice(off, count, expert);
    io({whole}, {range(TensorRole::param_grad, lo, n, Tier::gpu, false, -1, true)});
    const auto& value = grad_values_[static_cast<std::size_t>(v)];
    if (off + count == value.first + value.second) ++grad_version_[static_cast<std::size_t>(v)];  // its last bucket
}

// ZeRO-3's gather of [off, off + count): in place, or with the parameters kept as shards
// (shard_params_) {the rank's slice, from the shard} -> {the whole range}, which an executor holds
// only until its last reader (FSDP's unsharded parameters, freed after use).
void RankLowering::gather_operands(double off, double count, bool expert, bool from_shard) {
    if (!df_) return;
    const int whole = range(TensorRole::param, off, count);
    if (!shard_params_ && !from_shard) {
        io({whole}, {whole});
        return;
    }
    const auto [lo, n] = dp_slice(off, count, expert);
    io({range(TensorRole::param, lo, n, Tier::gpu, false, -1, true)}, {whole});
}

std::vector<int> RankLowering::lf_master(std::vector<int> ids) {
    if (!df_ || !p_.lock_free_update || p_.offload.params.all_gpu()) return ids;
    for (int& id : ids) {
        DataTensor t = prog_.tensors[static_cast<std::size_t>(id)];
        t.version = 1;
        id = table_->intern(t);
    }
    return ids;
}

// The rank's shard of [off, off + count): its intersections with the owned ranges.
std::vector<int> RankLowering::grad_shard(double off, double count) {
    std::vector<int> out;
    for (const auto& [o, n] : owned_ranges()) {
        const double a = std::max(o, off), b = std::min(o + n, off + count);
        if (b > a) out.push_back(range(TensorRole::param_grad, a, b - a, Tier::gpu, false, -1, true));
    }
    return out;
}

void RankLowering::unit_ready(int u) {
    if (u < 0) return;
    bool reduced = false;
    // DeepSpeed's ZeRO-2 under overlap_comm: the backward waits for the earlier buckets' reductions
    // before it issues this one's (plan.bucket_reduce_barrier).
    const bool barrier = p_.bucket_reduce_barrier && p_.overlap_grad_reduce && p_.zero_stage == 2;
    for (const Bucket& b : buckets_)
        if (b.last_unit == u) {
            if (barrier) wait(Stream::compute, record(Stream::dp_comm));
            reduce_bucket(b), reduced = true;
        }
    if (reduced && !p_.overlap_grad_reduce) wait(Stream::compute, record(Stream::dp_comm));  // ZeRO-2 without overlap_comm
}

void RankLowering::reduce_buckets(int chunk) {
    for (const Bucket& b : buckets_)
        if (chunk < 0 || b.chunk == chunk) reduce_bucket(b);
}


std::pair<double, double> RankLowering::dp_slice(double off, double count, bool expert) const {
    const Group g = expert ? Group::edp : Group::dp;
    const int n = group_size(g), r = group_rank_of(g, p_, rank_);
    const double lo = std::floor(count * r / n), hi = std::floor(count * (r + 1) / n);
    return {off + lo, hi - lo};
}

std::vector<std::pair<double, double>> RankLowering::owned_ranges() const {
    // The expert buffer follows the dense one (ParamLayout): its ranges are offset past it.
    std::vector<std::pair<double, double>> out;
    if (p_.zero_stage == 0) {
        if (dense_elements_ > 0) out.emplace_back(0.0, dense_elements_);
        if (expert_elements_ > 0) out.emplace_back(dense_elements_, expert_elements_);
        return out;
    }
    auto slice = [&](double off, double count, bool expert = false) {
        const auto [lo, n] = dp_slice(off, count, expert);
        if (n > 0) out.emplace_back(lo + (expert ? dense_elements_ : 0), n);
    };
    for (const Bucket& b : buckets_) slice(b.off, b.count, b.expert);
    if (p_.zero_stage == 3)
        for (std::size_t i = 0; i < units_.size(); ++i) {
            const Unit& u = units_[i];
            if (u.layer < 0) continue;
            for (const auto& [off, n] : layer_pieces(static_cast<int>(i))) slice(off, n);  // per tensor under zero3_param_sync
            if (u.expert > 0) slice(u.expert_off, u.expert, true);
        }
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<int> RankLowering::ranges_part(const std::vector<std::pair<double, double>>& ranges, double lo, double hi,
                                           TensorRole role, Tier tier) const {
    double total = 0;
    for (const auto& r : ranges) total += r.second;
    const double a = std::round(total * lo), b = std::round(total * hi);
    std::vector<int> out;
    double at = 0;
    for (const auto& r : ranges) {
        const double s = std::max(a, at), e = std::min(b, at + r.second);
        if (e > s)
            out.push_back(const_cast<RankLowering*>(this)->range(
                role, r.first + (s - at), e - s, tier, false, -1,
                tier == Tier::gpu && ((shard_grads_ && role == TensorRole::param_grad) || (shard_params_ && role == TensorRole::param))));
        at += r.second;
    }
    return out;
}

// Sequence parallelism leaves each TP rank the gradient of its own tokens for the parameters it
// replicates and applies token by token (norms, row-parallel biases): Megatron sums them over TP
// after the data-parallel reduction (finalize_model_grads' _allreduce_layernorm_grads), one
// coalesced all-reduce. Lowered on dp_comm, so the optimizer's wait on that stream covers it.
void RankLowering::sp_grads_all_reduce() {
    // QK-norm's per-head norms: each TP rank's heads give part of their weights' gradient, with or
    // without SP (Megatron-Core runs _allreduce_layernorm_grads for qk_layernorm too).
    const bool qk = m_.qk_norm && !m_.mla;
    if (d_.tp <= 1 || !(d_.sp || qk)) return;
    double params = 0;
    const double norm = m_.norm == NormKind::layernorm ? 2 * d_.h : d_.h;
    // Per layer (SP) its two norms and row-parallel biases (an MoE layer has no fc2 bias), and an
    // MoE layer's router, which routes each TP rank's own tokens under SP.
    for (int c = 0; c < vpp_; ++c)
        for (int li = 0; li < chunk_layers(c); ++li) {
            const bool moe = m_.layer_is_moe(chunk_first_layer(c) + li);
            if (d_.sp) params += 2 * norm + (m_.linear_bias ? (moe ? 1 : 2) * d_.h : 0) + (moe ? d_.experts * d_.h : 0);
            if (qk) params += static_cast<double>(attention_norm_params(m_));
            if (d_.sp && m_.mla)  // its replicated down-projections and latent norms, applied to the rank's own tokens
                params += static_cast<double>(attention_norm_params(m_)) +
                          d_.h * static_cast<double>(m_.mla->q_lora_rank + m_.mla->kv_lora_rank + m_.mla->qk_rope_head_dim);
        }
    if (d_.sp && stage_ == head_stage(p_)) params += norm;
    if (params <= 0) return;
    std::vector<int> ids;
    if (df_) {
        for (const ParamEntry& e : layout_.entries) {
            if (!e.sequence_parallel) continue;
            const double off = static_cast<double>(e.offset), n = static_cast<double>(e.elements());
            if (!shard_grads_) {
                ids.push_back(range(TensorRole::param_grad, off, n));
                continue;
            }
            const std::vector<int> part = grad_shard(off, n);  // the TP peers' shards are cut alike
            ids.insert(ids.end(), part.begin(), part.end());
        }
        // A ZeRO-2/3 shard may hold none of them (its slices of the buckets miss every norm): then
        // neither do its TP peers', and there is nothing to sum.
        if (ids.empty()) return;
    }
    collective(Stream::dp_comm, CollKind::all_reduce, Group::tp, params * p_.grad_bytes(), n_.sp_grads);  // after the backward
    io_lists(ids, ids);
}

// ---- dataflow helpers -----------------------------------------------------------------------

void RankLowering::set_operands(std::size_t at, const std::vector<int>& in, const std::vector<int>& out) {
    rp_.operands.resize(rp_.instrs.size());  // instructions pushed without operands get none
    STRATA_ASSERT(rp_.operands[at].n_in + rp_.operands[at].n_out == 0, "io: operands named twice");
    Operands o;
    o.first = static_cast<std::uint32_t>(rp_.operand_ids.size());
    for (int t : in)
        if (t >= 0) rp_.operand_ids.push_back(t), ++o.n_in;
    for (int t : out)
        if (t >= 0) rp_.operand_ids.push_back(t), ++o.n_out;
    rp_.operands[at] = o;
}

void RankLowering::io_lists(const std::vector<int>& in, const std::vector<int>& out) {
    if (!df_) return;
    STRATA_ASSERT(!rp_.instrs.empty() && last_op_ < rp_.instrs.size(), "io: no instruction");
    set_operands(last_op_, in, out);
    if (touch_)
        for (const std::vector<int>* list : {&in, &out})
            for (int t : *list)
                if (t >= 0) {
                    const TensorRole r = table_->prog.tensors[static_cast<std::size_t>(t)].role;
                    if (r == TensorRole::activation || r == TensorRole::stats || r == TensorRole::mask) touch_->push_back(t);
                }
}

void RankLowering::io(std::initializer_list<int> in, std::initializer_list<int> out) {
    if (!df_) return;
    io_lists(std::vector<int>(in), std::vector<int>(out));
}

void RankLowering::finish_operands() {
    if (df_) rp_.operands.resize(rp_.instrs.size());
}

int RankLowering::act(int name, int layer, double rows, double cols, TensorRole role, int ring) {
    if (!df_) return -1;
    DataTensor t;
    t.ring = static_cast<std::int16_t>(ring);
    t.name = name;
    t.role = role;
    t.layer = static_cast<std::int16_t>(layer);
    t.microbatch = mb_;
    t.rows = std::llround(rows);
    t.cols = std::llround(cols);
    return table_->intern(t);
}

int RankLowering::range(TensorRole role, double off, double count, Tier tier, bool expert, int version, bool shard) {
    if (!df_) return -1;
    DataTensor t;
    t.version = version;
    t.shard = shard;
    t.name = role == TensorRole::param ? n_.t_params : role == TensorRole::optimizer_state ? n_.t_state : n_.t_grads;
    t.role = role;
    // One address space: an expert-buffer offset counts past the dense buffer (ParamLayout), and
    // a range there belongs to the expert buffer whichever way it was named.
    if (expert) off += dense_elements_;
    t.buffer = off >= dense_elements_ && expert_elements_ > 0 ? FlatBuffer::expert : FlatBuffer::dense;
    t.tier = tier;
    t.offset = std::llround(off);
    t.rows = 1;
    t.cols = std::llround(count);
    return table_->intern(t);
}

int RankLowering::prm(const char* name, int layer) {
    if (!df_) return -1;
    const ParamEntry* e = layout_.find(name, layer);
    STRATA_ASSERT(e != nullptr, "lower: dataflow names a parameter this rank does not hold");
    DataTensor t;
    t.name = tensor_name_id(prog_, e->name);
    t.role = TensorRole::param;
    t.buffer = e->buffer;
    t.shard = shard_params_ && e->buffer == FlatBuffer::expert && expert_shard_whole();  // no edp gather: the shard is whole
    t.layer = static_cast<std::int16_t>(e->layer);
    t.offset = e->offset;
    t.rows = e->rows;
    t.cols = e->cols;
    return table_->intern(t);
}

int RankLowering::prm_grad(const char* name, int layer) {
    if (!df_) return -1;
    DataTensor t = prog_.tensors[static_cast<std::size_t>(prm(name, layer))];
    t.role = TensorRole::param_grad;
    t.shard = false;  // a weight's shard flag is not its gradient's (pipelined FSDP: sharded weights, whole gradients)
    if (shard_grads_ && t.buffer == FlatBuffer::expert && expert_grads_in_shard()) {
        t.shard = true;  // no edp reduction: the rank's expert gradients are its shard
    } else if (shard_grads_) {  // this reduction's value of its range
        const int v = grad_value_of(static_cast<double>(t.offset), static_cast<double>(t.elements()));
        t.version = grad_version_[static_cast<std::size_t>(v)];
    }
    const int range_id = table_->intern(t);
    if (!unfused_capture_) return range_id;
    // Unfused accumulation (autograd's): this micro-batch's gradient is a tensor of its own, added
    // into the accumulated one by the layer's grads.accumulate (accumulate_grads).
    DataTensor g;
    g.name = tensor_name_id(prog_, std::string("grad.") + name);
    g.role = TensorRole::weight_grad;
    g.layer = t.layer;
    g.microbatch = mb_;
    g.rows = t.rows;
    g.cols = t.cols;
    // A weight used twice in the window (the shared head and embedding under MTP) gets a fresh
    // gradient for each use, each added to its range (autograd sums them before accumulating).
    for (const auto& [f, r] : unfused_grads_) g.ring = static_cast<std::int16_t>(g.ring + (r == range_id ? 1 : 0));
    const int fresh = table_->intern(g);
    unfused_grads_.emplace_back(fresh, range_id);
    return fresh;
}

int RankLowering::bias(const char* name, int layer, bool grad_of) {
    if (!df_ || layout_.find(name, layer) == nullptr) return -1;
    return grad_of ? prm_grad(name, layer) : prm(name, layer);
}

int RankLowering::tokens() {
    if (!df_) return -1;
    return act(n_.t_tokens, -1, d_.tokens, 2, TensorRole::tokens);
}

}  // namespace strata::sim::lower_detail
