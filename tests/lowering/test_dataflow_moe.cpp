// The dataflow of MoE layers: the experts' own flat buffer after the dense one, its reductions and
// ZeRO slices over the expert-data-parallel group, EP's all-to-alls and expert TP's gather and
// reduce-scatter, checked for races and for writes before reads over many plans.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "dataflow_checks.hpp"
#include "strata/lowering/groups.hpp"
#include "strata/lowering/hazards.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/params.hpp"
#include "strata/lowering/tensors.hpp"

using namespace strata::sim;
using namespace strata::test;

TEST_CASE("MoE (ep 1): the experts' own buffer, its reductions over edp, no races", "[dataflow][moe]") {
    ModelSpec m = small_gpt();
    m.ffn = FfnKind::swiglu;
    m.norm = NormKind::rmsnorm;
    m.position = PositionKind::rope;
    MoeSpec e;
    e.experts = 4;
    e.top_k = 2;
    e.expert_ffn_hidden = 32;
    e.first_k_dense = 1;
    m.moe = e;
    // Layout: the dense buffer is the model's dense count, the expert buffer follows it with the
    // expert count; by hand for tp 1, pp 1: 3 MoE layers x 4 experts x (2 x 32 x 64 + 64 x 32).
    for (const int pp : {1, 2}) {
        const PlanSpec p = plan(1, pp, 1, 4);
        for (int s = 0; s < pp; ++s) {
            const ParamLayout L = param_layout(m, p, s);
            INFO("pp " << pp << " stage " << s);
            CHECK(static_cast<double>(L.dense_elements) == stage_params(m, p, s).dense);
            CHECK(static_cast<double>(L.expert_elements) == stage_params(m, p, s).expert);
            std::int64_t dense_at = 0, expert_at = L.dense_elements;
            for (const ParamEntry& x : L.entries) {
                std::int64_t& at = x.buffer == FlatBuffer::expert ? expert_at : dense_at;
                CHECK(x.offset == at);
                at = x.end();
            }
            CHECK(dense_at == L.dense_elements);
            CHECK(expert_at == L.elements());
        }
    }
    CHECK(param_layout(m, plan(1, 1, 1, 4), 0).expert_elements == 3 * 4 * (2 * 32 * 64 + 64 * 32));
    CHECK(param_layout(m, plan(1, 1, 1, 4), 0).find("router.weight", 1)->elements() == 4 * 64);
    CHECK(param_layout(m, plan(1, 1, 1, 4), 0).find("router.weight", 0) == nullptr);  // the first layer is dense
    int plans = 0;
    for (int ep : {1, 2})
    for (int pp : {1, 2})
        for (int zero : {0, 1, 2, 3})
            for (int flags = 0; flags < 8; ++flags) {
                PlanSpec p = plan(1, pp, 2 * ep, 16);  // edp = 2: the experts are reduced over two ranks
                p.ep = ep;
                p.zero_stage = zero;
                p.overlap_grad_reduce = p.overlap_param_gather = (flags & 1) == 0;
                p.recompute = (flags & 2) ? Recompute::full : Recompute::none;
                if (flags & 4) {
                    p.recompute = Recompute::selective;
                    p.recompute_modules = recompute_bit(RecomputeModule::moe_act) | ((flags & 2) ? recompute_bit(RecomputeModule::moe) : 0u);
                }
                p.dp_bucket_bytes = 60000;
                if (zero >= 1 && (flags & 1)) p.offload.optimizer = TierSplit{0.5, 0.25, 0.25};  // the expert buffer's host copies too
                REQUIRE(dataflow_unsupported(m, p).empty());
                ModelSpec mm = m;
                mm.moe->shared_experts = flags & 1;  // DeepSeek's shared expert in half the plans
                const Program a = lower_df(mm, p, false, 2), b = lower_df(mm, p, true, 2);
                INFO("ep " << ep << " pp " << pp << " zero " << zero << " flags " << flags);
                for (std::size_t r = 0; r < a.ranks.size(); ++r) {
                    REQUIRE(a.ranks[r].instrs.size() == b.ranks[r].instrs.size());
                    CHECK(std::memcmp(a.ranks[r].instrs.data(), b.ranks[r].instrs.data(), a.ranks[r].instrs.size() * sizeof(Instr)) == 0);
                }
                check_def_before_use(b);
                const std::vector<std::string> h = dataflow_hazards(b, 3);
                INFO((h.empty() ? "" : h[0]));
                CHECK(h.empty());
                // Each rank reduces the expert buffer over edp and gathers the same ranges back;
                // its ranges lie past the dense buffer. With EP the dispatch and combine move
                // the routed rows over the ep group, four all-to-alls a MoE layer and micro-batch.
                for (const RankProgram& r : b.ranks) {
                    const ParamLayout L = param_layout(mm, p, r.pp_stage);
                    std::set<std::pair<std::int64_t, std::int64_t>> reduced, gathered;
                    for (std::size_t i = 0; i < r.instrs.size(); ++i) {
                        const Instr& in = r.instrs[i];
                        if (in.kind != InstrKind::collective || in.group != Group::edp) continue;
                        const DataTensor& t = b.tensors[static_cast<std::size_t>(ins(b, r, i).at(0))];
                        CHECK(t.buffer == FlatBuffer::expert);
                        CHECK(t.offset >= L.dense_elements);
                        CHECK(t.offset + t.elements() <= L.elements());
                        // (a ZeRO-3 gather reads the rank's slice and writes the whole range)
                        const DataTensor& g = b.tensors[static_cast<std::size_t>(outs(b, r, i).at(0))];
                        if (in.coll == CollKind::all_gather) gathered.insert({g.offset, g.elements()});
                        else reduced.insert({t.offset, t.elements()});
                    }
                    CHECK(r.groups[static_cast<std::size_t>(Group::edp)].size() == 2);
                    int a2a = 0;
                    for (const Instr& in : r.instrs)
                        if (in.kind == InstrKind::collective && in.coll == CollKind::all_to_all) {
                            CHECK(in.group == Group::ep);
                            ++a2a;
                        }
                    const bool recomputed = p.recompute == Recompute::full || (flags & 6) == 6;  // the dispatch and combine again
                    int moe_layers = 0;
                    for (int l = 0; l < m.layers; ++l)
                        if (m.layer_is_moe(l) && std::find_if(L.entries.begin(), L.entries.end(), [&](const ParamEntry& x) { return x.layer == l; }) != L.entries.end())
                            ++moe_layers;
                    const int per_mb = ep > 1 ? 4 + (recomputed ? 2 : 0) : 0;
                    CHECK(a2a == per_mb * moe_layers * p.micro_batches() * 2);  // two steps
                    if (zero >= 1) CHECK(reduced == gathered);
                    CHECK_FALSE(reduced.empty());
                }
                ++plans;
            }
    CHECK(plans == 128);
    // MoE parallel folding: attention under tp 2 with SP, the experts whole (etp 1) over EP groups
    // that take in the TP ranks.
    for (int ep : {1, 2, 4}) {
        PlanSpec p = plan(2, 1, 2, 16);
        p.sequence_parallel = true;
        p.expert_tp = 1;
        p.ep = ep;
        p.zero_stage = 1;
        REQUIRE(dataflow_unsupported(m, p).empty());
        const Program b = lower_df(m, p, true, 2);
        check_def_before_use(b);
        const std::vector<std::string> h = dataflow_hazards(b, 3);
        INFO("etp 1 ep " << ep << (h.empty() ? "" : "\n" + h[0]));
        CHECK(h.empty());
    }
    // ZeRO-3's offload_param: each rank fetches its slices of a layer's dense and expert ranges
    // from the host, and the gathers fill the rest.
    for (int ep : {1, 2}) {
        PlanSpec p = plan(1, 1, 2, 16);
        p.ep = ep;
        p.zero_stage = 3;
        p.offload.optimizer = p.offload.params = TierSplit{0, 1, 0};
        REQUIRE(dataflow_unsupported(m, p).empty());
        const Program b = lower_df(m, p, true, 2);
        check_def_before_use(b);
        const std::vector<std::string> h = dataflow_hazards(b, 3);
        INFO("offload_param ep " << ep << (h.empty() ? "" : "\n" + h[0]));
        CHECK(h.empty());
    }
    // TP 2 with SP: the expert-TP gather and reduce-scatter, with EP and a pipeline, with and
    // without a shared expert (its output and dX reduce-scattered past the MoE block).
    for (int ep : {1, 2})
        for (int pp : {1, 2}) {
            PlanSpec p = plan(2, pp, 2, 16);
            p.sequence_parallel = true;
            p.ep = ep;
            p.zero_stage = 1;
            ModelSpec mm = m;
            mm.moe->shared_experts = pp - 1;
            REQUIRE(dataflow_unsupported(mm, p).empty());
            const Program b = lower_df(mm, p, true, 2);
            check_def_before_use(b);
            const std::vector<std::string> h = dataflow_hazards(b, 3);
            INFO("tp 2 ep " << ep << " pp " << pp << (h.empty() ? "" : "\n" + h[0]));
            CHECK(h.empty());
        }
}
