// Lowering of memory (sim/lower.hpp): what the program allocates and frees beyond the layers'
// stashes, on the small GPT: activation offload copies and the no_grad forward of checkpointed
// layers. Expected values are derived by hand in the comments.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "strata/lowering/lower.hpp"
#include "strata/lowering/tensors.hpp"
#include "support/gpt.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;
using strata::test::cluster;
using strata::test::plan;
using strata::test::small_gpt;

TEST_CASE("activation offload: D2H after forward, H2D before backward, equal bytes", "[lower]") {
    PlanSpec p = plan(1, 1, 1, 2);
    p.offload.activations = TierSplit{0.25, 0.75, 0};
    const Program prog = lower(small_gpt(), cluster(1), p);
    double d2h = 0, h2d = 0, stashed_cpu = 0;
    for (const auto& in : prog.ranks[0].instrs) {
        if (in.kind == InstrKind::copy && in.copy == CopyKind::d2h && in.phase == Phase::forward) d2h += in.bytes;
        if (in.kind == InstrKind::copy && in.copy == CopyKind::h2d && in.phase == Phase::backward) h2d += in.bytes;
        if (in.kind == InstrKind::alloc && in.phase == Phase::forward && in.tier == Tier::cpu && in.layer >= 0) stashed_cpu += in.bytes;
    }
    CHECK(d2h > 0);
    CHECK(d2h == Approx(h2d));
    // What goes to the host is exactly the cpu share the tensor list places there.
    CHECK(d2h == Approx(stashed_cpu));
}

// A checkpointed layer's forward runs under no_grad: each intermediate is allocated and dropped
// once the next exists, so at most two are live and none survives the layer. The small GPT (one
// GPU, m = 2, 4 layers): the list is the layer's activations but its stashed input.
TEST_CASE("full recompute: the forward's intermediates come and go two at a time", "[lower]") {
    const ModelSpec m = small_gpt();
    PlanSpec p = plan(1, 1, 1, 2);
    p.recompute = Recompute::full;
    const Program prog = lower(m, cluster(1), p);
    const auto& r = prog.ranks[0];
    PlanSpec none = p;
    none.recompute = Recompute::none;
    const std::vector<TensorDesc> expect = layer_forward_transients(m, p, 0);
    REQUIRE(expect.size() + 1 == layer_activations(m, none, 0, false).size());  // all but attn.norm_in
    double live = 0, most = 0, largest_pair = 0;
    int allocs = 0;
    std::set<std::int64_t> open;
    for (std::size_t j = 1; j < expect.size(); ++j) largest_pair = std::max(largest_pair, expect[j - 1].bytes + expect[j].bytes);
    for (const auto& in : r.instrs) {
        if ((in.kind != InstrKind::alloc && in.kind != InstrKind::free) || in.name < 0) continue;
        if (prog.names[static_cast<std::size_t>(in.name)].rfind("forward.", 0) != 0) continue;
        if (in.kind == InstrKind::alloc) {
            CHECK(in.phase == Phase::forward);
            ++allocs;
            open.insert(in.tensor);
            live += in.bytes;
        } else {
            CHECK(open.erase(in.tensor) == 1);
            live -= in.bytes;
        }
        CHECK(open.size() <= 2);
        most = std::max(most, live);
    }
    CHECK(open.empty());
    CHECK(allocs == static_cast<int>(expect.size()) * 4 * 2);  // every layer, both micro-batches
    CHECK(most == Approx(largest_pair));
    // Without recompute the forward keeps its activations and allocates no such list.
    const Program kept = lower(m, cluster(1), none);
    for (const auto& in : kept.ranks[0].instrs)
        if (in.kind == InstrKind::alloc && in.name >= 0) CHECK(kept.names[static_cast<std::size_t>(in.name)].rfind("forward.", 0) != 0);
}
