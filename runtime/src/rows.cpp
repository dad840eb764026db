// Where a rank's rows sit among every rank's: the first sample of a micro-batch, and the dropout
// sites' names for its elements (dropout.hpp), so that every split draws one rank's masks.
#include "rank.hpp"

namespace strata::runtime {

using namespace sim;

i64 RankState::first_sample(int microbatch) const {
    const PlanSpec& p = w_.plan;
    const i64 m = p.micro_batches(), b = p.micro_batch;
    const i64 step = w_.options.data.fixed_batch ? 0 : w_.step;
    return step * p.global_batch + static_cast<i64>(dp_rank_) * m * b + (microbatch % m) * b;
}

// Keyed by what the elements are, not by who holds them (dropout.hpp); a fixed batch keeps its
// masks too, so that a gradient check sees one function of the parameters.
Dropout RankState::dropout(const Instr& in, DropoutSite site, const DataTensor& t) const {
    Dropout d;
    if (!(w_.model.dropout > 0)) return d;
    const i64 step = w_.options.data.fixed_batch ? 0 : w_.step;
    d.p = static_cast<float>(w_.model.dropout);
    d.key = dropout_key(w_.options.seed, step, in.layer, site);
    d.sample0 = first_sample(t.microbatch);
    const i64 rows = w_.plan.micro_batch * positions().local();
    d.row0 = t.rows < rows ? tp_rank_ * t.rows : 0;  // a sequence-parallel shard
    d.heads = w_.model.heads;
    d.head0 = tp_rank_ * (d.heads / tp_size_);
    return d;
}

Dropout RankState::attention_dropout(const Instr& in, const DataTensor& qkv, i64 hq) const {
    Dropout d = dropout(in, DropoutSite::attention_probs, qkv);
    if (cp_size_ > 1 && qkv.rows > w_.plan.micro_batch * positions().local()) d.head0 += cp_rank_ * hq;
    return d;
}

}  // namespace strata::runtime
