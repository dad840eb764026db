// DeepSpeed's ZeRO-3 before v0.6 (plan.zero3_param_sync) in the dataflow. It partitioned each
// parameter tensor on its own over the data-parallel ranks, gathered a module's parameters one
// call per tensor after a device synchronize (partition_parameters.py _allgather_param), and
// reduce-scattered their gradients a tensor at a time. A rank's shard of a layer is then its
// slice of every tensor, not one slice of the layer's range: the pieces built here are what the
// gathers, the reductions, the host's copies and the optimizer's owned ranges all cut by, so the
// runtime moves each call's real bytes. (The cost-only lowering has no parameter layout: it
// prices the same calls from the layer's shape, zero3_calls_before.)
#include <algorithm>

#include "lower_impl.hpp"
#include "strata/common/error.hpp"

namespace strata::sim::lower_detail {

void RankLowering::build_zero3_pieces() {
    zero3_pieces_.assign(units_.size(), {});
    if (!df_ || !zero3_sync()) return;
    for (std::size_t i = 0; i < units_.size(); ++i) {
        const Unit& u = units_[i];
        if (u.layer < 0 || u.dense <= 0) continue;
        auto& pieces = zero3_pieces_[i];
        for (const ParamEntry& e : layout_.entries)
            if (e.layer == u.layer && e.buffer == FlatBuffer::dense)
                pieces.emplace_back(static_cast<double>(e.offset), static_cast<double>(e.rows * e.cols));
        std::sort(pieces.begin(), pieces.end());
        double at = u.dense_off;
        for (const auto& [off, n] : pieces) {
            STRATA_ASSERT(off == at, "lower: a layer's parameter tensors do not tile its range");
            at += n;
        }
        STRATA_ASSERT(at == u.dense_off + u.dense, "lower: a layer's parameter tensors do not tile its range");
    }
}

std::vector<std::pair<double, double>> RankLowering::layer_pieces(int unit) const {
    const auto k = static_cast<std::size_t>(unit);
    if (k < zero3_pieces_.size() && !zero3_pieces_[k].empty()) return zero3_pieces_[k];
    const Unit& u = units_[k];
    return {{u.dense_off, u.dense}};
}

int RankLowering::zero3_gather_pieces(int unit, int after_ev) {
    int ev = after_ev;
    for (const auto& [off, n] : layer_pieces(unit)) {
        ev = collective(Stream::dp_comm, CollKind::all_gather, Group::dp, n * d_.act_bytes, n_.zero3_ag, ev);
        gather_operands(off, n, false, resident(unit));
    }
    return ev;
}

// A layer's dense gradients after its backward: reduce-scattered over dp (per tensor and waited
// for under zero3_param_sync), then, streamed to the host, each reduced slice taken down.
void RankLowering::zero3_reduce_dense(int layer, double dense) {
    const int unit = unit_of_layer(layer);
    if (group_size(Group::dp) > 1) {
        if (df_ && zero3_sync()) {
            int done = record(Stream::compute);
            for (const auto& [off, n] : layer_pieces(unit)) {
                done = collective(Stream::dp_comm, CollKind::reduce_scatter, Group::dp, n * p_.grad_bytes(), n_.zero3_rs, done);
                reduce_scatter_operands(off, n);
            }
            wait(Stream::compute, done);  // the next parameter fetch's synchronize waits for them
        } else {
            int after = kAfterCompute;
            double last = dense * p_.grad_bytes();
            if (zero3_sync()) {
                after = record(Stream::compute);
                last = zero3_calls_before(Stream::dp_comm, CollKind::reduce_scatter, Group::dp, layer, dense, p_.grad_bytes(), n_.zero3_rs, after);
            }
            const int done = collective(Stream::dp_comm, CollKind::reduce_scatter, Group::dp, last, n_.zero3_rs, after);
            const Unit& u = units_[static_cast<std::size_t>(unit)];
            reduce_scatter_operands(u.dense_off, u.dense);
            if (zero3_sync()) wait(Stream::compute, done);
        }
    }
    if (p_.streams_grads_to_host() && dense > 0)
        for (const auto& [off, n] : layer_pieces(unit)) grads_to_host(off, n, false);
}

}  // namespace strata::sim::lower_detail
