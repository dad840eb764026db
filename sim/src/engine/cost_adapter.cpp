// RealCostModel: the engine's CostModel over the pure cost functions of cost.hpp. Kept in its own
// file so that programs (tests) that use only fake costs do not link the cost library's code.
#include "strata/sim/engine.hpp"

namespace strata::sim {

CostContext RealCostModel::context_for(const RankProgram& rank) const {
    CostContext c = ctx_;
    if (c.cluster)
        for (const auto& [gpu, factor] : c.cluster->slow_gpus)
            if (gpu == rank.global_rank) c.gpu_slowdown = factor;
    return c;
}

Estimate RealCostModel::compute(const Instr& in, const RankProgram& rank) const {
    return compute_cost(in, context_for(rank));
}

Demand RealCostModel::transfer(const Instr& in, const RankProgram& rank) const {
    return transfer_demand(in, context_for(rank));
}

}  // namespace strata::sim
