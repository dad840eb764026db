// libFuzzer entry for the planner's search space (issue #32: the enumeration crashed on a large
// global batch and nothing fuzzed it). The bytes choose a model (dense or MoE, any head layout), a
// cluster, a global batch anywhere in [1, INT_MAX] and the search space's switches and limits. The
// model and cluster go through the strict readers, as a user's files would (bad ones end there).
// Then every plan the enumerator yields must pass validate_plan (space.hpp: "every plan the
// enumerator yields is valid"), cover the cluster and carry the batch, and the counters must add
// up. A plan that validate_plan rejects, a crash, a hang or a sanitizer report is a bug.
#include <fuzzer/FuzzedDataProvider.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "strata/common/error.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/planner/space.hpp"

using namespace strata::sim;
using strata::planner::SearchSpace;

namespace {

const ModelSpec* g_model = nullptr;
const ClusterSpec* g_cluster = nullptr;

[[noreturn]] void bug(const std::string& what, const PlanSpec* p) {
    std::fprintf(stderr, "fuzz_plan_space: %s\nmodel: %s\ncluster: %s\nplan: %s\n", what.c_str(),
                 g_model ? to_json_text(*g_model).c_str() : "", g_cluster ? to_json_text(*g_cluster).c_str() : "",
                 p ? to_json_text(*p).c_str() : "");
    std::abort();
}

ModelSpec model_from(FuzzedDataProvider& f) {
    ModelSpec m;
    m.name = "fuzz";
    m.layers = f.ConsumeIntegralInRange<int>(1, 160);
    m.heads = f.ConsumeIntegralInRange<int>(1, 128);
    const int head_dims[] = {8, 16, 32, 64, 80, 96, 128, 256};
    m.head_dim = head_dims[f.ConsumeIntegralInRange<int>(0, 7)];
    m.hidden = f.ConsumeBool() ? m.heads * m.head_dim : f.ConsumeIntegralInRange<std::int64_t>(1, 32768);
    if (m.hidden == m.heads * m.head_dim) m.head_dim = 0;  // the reader's default, hidden / heads
    m.kv_heads = f.ConsumeBool() ? m.heads : f.ConsumeIntegralInRange<int>(1, m.heads);
    m.ffn_hidden = f.ConsumeIntegralInRange<std::int64_t>(1, 65536);
    m.ffn = f.ConsumeBool() ? FfnKind::swiglu : FfnKind::gelu;
    m.vocab = f.ConsumeIntegralInRange<std::int64_t>(1, 262144);
    m.seq_len = f.ConsumeIntegralInRange<std::int64_t>(1, 1 << 17);
    m.position = PositionKind::rope;
    m.tied_embeddings = f.ConsumeBool();
    m.mtp_depth = f.ConsumeIntegralInRange<int>(0, 2);
    if (f.ConsumeBool()) {
        MoeSpec e;
        e.experts = f.ConsumeIntegralInRange<int>(1, 256);
        e.top_k = f.ConsumeIntegralInRange<int>(1, std::min(8, e.experts));
        e.expert_ffn_hidden = f.ConsumeBool() ? 0 : f.ConsumeIntegralInRange<std::int64_t>(1, 16384);
        e.moe_every = f.ConsumeIntegralInRange<int>(1, std::min(4, m.layers));
        e.first_k_dense = f.ConsumeIntegralInRange<int>(0, std::min(3, m.layers));
        e.shared_experts = f.ConsumeIntegralInRange<int>(0, 2);
        m.moe = e;
    }
    return m;
}

SearchSpace space_from(FuzzedDataProvider& f) {
    SearchSpace s;
    s.global_batch = f.ConsumeBool() ? f.ConsumeIntegralInRange<int>(1, 4096)
                                     : f.ConsumeIntegralInRange<int>(1, INT_MAX);  // the library takes any int
    s.tp_within_node = f.ConsumeBool();
    s.max_tp = f.ConsumeIntegralInRange<int>(1, 16);
    s.max_cp = f.ConsumeIntegralInRange<int>(1, 16);
    s.max_pp = f.ConsumeIntegralInRange<int>(1, 64);
    s.max_vpp = f.ConsumeIntegralInRange<int>(1, 8);
    s.max_micro_batch = f.ConsumeIntegralInRange<int>(1, 32);
    s.zero_stages.clear();
    for (int z = 0; z <= 3; ++z)
        if (f.ConsumeBool()) s.zero_stages.push_back(z);
    s.recomputes.clear();
    for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
        if (f.ConsumeBool()) s.recomputes.push_back(r);
    s.search_gpipe = f.ConsumeBool();
    s.search_sequence_parallel = f.ConsumeBool();
    s.search_expert_tp = f.ConsumeBool();
    s.search_deepep = f.ConsumeBool();
    s.search_offload = f.ConsumeBool();
    s.offload_to_ssd = f.ConsumeBool();
    s.search_uneven_pipeline = f.ConsumeBool();
    s.precision = f.ConsumeBool() ? Precision::bf16 : Precision::fp8;
    s.expandable_segments = f.ConsumeBool();
    s.search_cp_comm_type = f.ConsumeBool();
    return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    FuzzedDataProvider f(data, size);
    ModelSpec m;
    ClusterSpec c;
    try {
        m = model_from_json_text(to_json_text(model_from(f)), "fuzz-model.json");
        ClusterSpec raw;
        raw.name = "fuzz";
        raw.gpu = "H100-SXM5-80GB";
        raw.nodes = f.ConsumeIntegralInRange<int>(1, 32);
        raw.gpus_per_node = f.ConsumeIntegralInRange<int>(1, 16);
        c = cluster_from_json_text(to_json_text(raw), "fuzz-cluster.json");
    } catch (const strata::InputError&) {
        return 0;  // not a model or cluster a user could give
    }
    g_model = &m;
    g_cluster = &c;
    const SearchSpace s = space_from(f);
    const int shards = f.ConsumeIntegralInRange<int>(1, 3);
    const int shard = f.ConsumeIntegralInRange<int>(0, shards - 1);

    constexpr std::int64_t kMaxVisits = 5000;  // enough to reach every loop; bounded time per input
    std::int64_t visits = 0;
    const auto k = strata::planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        ++visits;
        if (p.gpus() != c.gpu_count()) bug("the plan does not cover the cluster's GPUs", &p);
        if (p.global_batch != (s.global_batch > 0 ? s.global_batch : 512)) bug("the plan lost the global batch", &p);
        try {
            validate_plan(m, c, p, "enumerated");
        } catch (const strata::InputError& e) {
            bug(std::string("an enumerated plan is invalid: ") + e.what(), &p);
        }
        return visits < kMaxVisits;
    }, shard, shards);
    if (k.valid != visits) bug("counters: valid != plans yielded", nullptr);
    if (visits < kMaxVisits && k.considered != k.valid + k.invalid) bug("counters: considered != valid + invalid", nullptr);
    return 0;
}
