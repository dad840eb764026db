// Closed-form per-rank memory (memory.hpp): sums the tensor list (tensors.hpp) per pipeline stage,
// multiplies stashed activations by the micro-batches the schedule keeps in flight, splits every
// tensor over tiers by its TierSplit, and checks the worst GPU and the worst node against the
// capacities. Does not simulate time: the engine's simulated peak is the reference for that.
#include "strata/sim/memory.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "strata/sim/model.hpp"

namespace strata::sim {

double in_flight_microbatches(const PlanSpec& p, int stage) {
    const double m = std::max(1, p.micro_batches());
    switch (p.schedule) {
        case Schedule::gpipe:
            return m;  // all forwards before any backward
        case Schedule::one_f_one_b:
            return std::min(static_cast<double>(p.pp - stage), m);  // warm-up (pp - stage - 1) + 1
        case Schedule::interleaved_1f1b: {
            // Megatron's interleaved schedule: warm-up = 2·(pp - stage - 1) + (vpp - 1)·pp
            // micro-batch chunks, one more in flight at the first backward, each chunk 1/vpp of the
            // stage's layers. Stage 0: pp·(1 + (pp - 1)/(pp·vpp)) micro-batches (Korthikanti §4.2.3).
            const int vpp = std::max(1, p.vpp);
            const double total_chunks = m * vpp;
            const double warmup = 2.0 * (p.pp - stage - 1) + static_cast<double>(vpp - 1) * p.pp;
            return std::min(warmup + 1.0, total_chunks) / vpp;
        }
        case Schedule::dualpipe_v:
            // Every rank runs 2·pp chunk forwards (its two legs) before the steady state, whose
            // F0 B1 F1 B0 rhythm peaks one higher: (2·pp + 1) half-stage chunks, pp + 1/2
            // micro-batches (DeepSeek-V3 Table 2: DualPipe holds PP + 1).
            return std::min(2.0 * p.pp + 1.0, 2.0 * m) / 2.0;
    }
    return m;
}

namespace {

void add_to(StageMemory& s, const TensorDesc& d, double times) {
    const double bytes = d.bytes * times;
    switch (d.tag) {
        case TensorTag::weights: s.weights_bytes += bytes; break;
        case TensorTag::grads: s.grads_bytes += bytes; break;
        case TensorTag::optimizer: s.optimizer_bytes += bytes; break;
        case TensorTag::activations: s.activations_bytes += bytes; break;
        default: s.buffers_bytes += bytes; break;
    }
    for (int t = 0; t < kTierCount; ++t) s.tier_bytes[static_cast<std::size_t>(t)] += bytes * d.tiers.of(static_cast<Tier>(t));
}

double sum_bytes(const std::vector<TensorDesc>& v) {
    double b = 0;
    for (const TensorDesc& d : v) b += d.bytes;
    return b;
}

// Layers differ only by (MoE or dense, recomputed or not): size each kind once per estimate, and
// once per layer shape across estimates when a MemoryCache is given.
struct LayerKindBytes {
    double activations = 0, workspace = 0;
    bool known = false;
};

// Everything full_layer_activations reads from the plan (tensors.cpp), selective modules included.
using LayerKey = std::tuple<int, int, int, int, int, int, int, int, int, int, int, unsigned, int, int>;
LayerKey layer_key(const PlanSpec& p, bool moe, bool recomputed) {
    return {moe ? 1 : 0, recomputed ? 1 : 0, p.tp, p.cp, p.ep, p.micro_batch, p.sequence_parallel ? 1 : 0,
            p.flash_attention ? 1 : 0, static_cast<int>(p.recompute), static_cast<int>(p.precision), p.etp(),
            p.recompute_modules, p.moe_act_fp8_cache ? 1 : 0, static_cast<int>(p.moe_probs_at)};
}

// Everything stage_model_states / stage_buffers read from the plan (tensors.cpp), so a cached list
// is exactly what the call would return.
using StageKey = std::tuple<int, int, int, int, int, int, int, int, int, int, int, std::int64_t, std::vector<int>,
                            std::array<double, 9>, int, int, int>;
StageKey stage_key(const PlanSpec& p, int stage) {
    const OffloadSpec& o = p.offload;
    // The split, per stage or per virtual stage (a -1 marks where the second list starts).
    std::vector<int> split = p.layer_split;
    if (!p.virtual_layer_split.empty()) {
        split.push_back(-1);
        split.insert(split.end(), p.virtual_layer_split.begin(), p.virtual_layer_split.end());
    }
    const int dtypes = static_cast<int>(p.precision) + 4 * static_cast<int>(p.exp_avg_dtype) + 16 * static_cast<int>(p.exp_avg_sq_dtype);
    return {stage, p.tp, p.pp, p.dp, p.cp, p.ep, p.zero_stage, dtypes, p.micro_batch,
            (p.sequence_parallel ? 1 : 0) + (p.overlap_grad_reduce ? 2 : 0) + (p.overlap_param_gather ? 4 : 0),
            static_cast<int>(p.recompute), p.dp_bucket_bytes, split,
            {o.params.gpu, o.params.cpu, o.params.ssd, o.grads.gpu, o.grads.cpu, o.grads.ssd, o.optimizer.gpu,
             o.optimizer.cpu, o.optimizer.ssd},
            p.etp(), p.vpp, static_cast<int>(p.schedule)};  // vpp and schedule place a stage's layers
}

}  // namespace

struct MemoryCache::Impl {
    std::map<LayerKey, LayerKindBytes> layers;
    std::map<StageKey, std::vector<TensorDesc>> stages;
};
MemoryCache::MemoryCache() : impl_(std::make_unique<Impl>()) {}
MemoryCache::~MemoryCache() = default;

namespace {

struct LayerKinds {
    LayerKindBytes kinds[2][2];
    MemoryCache::Impl* cache = nullptr;
    const LayerKindBytes& get(const ModelSpec& m, const PlanSpec& p, int layer, bool recomputed) {
        const bool moe = m.layer_is_moe(layer);
        LayerKindBytes& k = kinds[moe ? 1 : 0][recomputed ? 1 : 0];
        if (k.known) return k;
        if (cache) {
            auto [it, inserted] = cache->layers.try_emplace(layer_key(p, moe, recomputed));
            if (inserted) {
                it->second.activations = sum_bytes(layer_activations(m, p, layer, recomputed));
                it->second.workspace = sum_bytes(layer_backward_workspace(m, p, layer, recomputed));
                it->second.known = true;
            }
            k = it->second;
            return k;
        }
        k.activations = sum_bytes(layer_activations(m, p, layer, recomputed));
        k.workspace = sum_bytes(layer_backward_workspace(m, p, layer, recomputed));
        k.known = true;
        return k;
    }
};

const std::vector<TensorDesc>& stage_states_and_buffers(const ModelSpec& m, const PlanSpec& p, int stage,
                                                        MemoryCache::Impl* cache, std::vector<TensorDesc>& scratch) {
    auto build = [&](std::vector<TensorDesc>& out) {
        out = stage_model_states(m, p, stage);
        for (TensorDesc& d : stage_buffers(m, p, stage)) out.push_back(std::move(d));
    };
    if (!cache) {
        build(scratch);
        return scratch;
    }
    auto [it, inserted] = cache->stages.try_emplace(stage_key(p, stage));
    if (inserted) build(it->second);
    return it->second;
}

}  // namespace

MemoryReport memory_estimate(const ModelSpec& m, const PlanSpec& p, const Capacities& caps) {
    return memory_estimate(m, p, caps, nullptr);
}

MemoryReport memory_estimate(const ModelSpec& m, const PlanSpec& p, const Capacities& caps, MemoryCache* cache) {
    MemoryReport r;
    r.capacities = caps;
    const std::vector<int> sl = stage_layers(m, p);
    LayerKinds kinds;
    kinds.cache = cache ? &cache->impl() : nullptr;
    std::vector<TensorDesc> scratch;
    for (int stage = 0; stage < p.pp; ++stage) {
        const std::vector<int> ids = stage_layer_ids(m, p, stage);
        StageMemory s;
        s.stage = stage;
        s.layers = sl[static_cast<std::size_t>(stage)];
        s.in_flight_microbatches = in_flight_microbatches(p, stage);
        for (const TensorDesc& d : stage_states_and_buffers(m, p, stage, kinds.cache, scratch)) add_to(s, d, 1.0);
        double workspace = 0;
        for (int i = 0; i < s.layers; ++i) {
            const bool rc = layer_recomputed(m, p, stage, i);
            const LayerKindBytes& k = kinds.get(m, p, ids[static_cast<std::size_t>(i)], rc);
            TensorDesc d;  // all of a layer's activations share plan.offload.activations
            d.tag = TensorTag::activations;
            d.bytes = k.activations;
            d.tiers = p.offload.activations;
            add_to(s, d, s.in_flight_microbatches);
            workspace = std::max(workspace, k.workspace);
        }
        // Embedding and logits belong to whole micro-batches: round the interleaved fraction up.
        // The last stage starts each micro-batch's backward right after its loss, so it holds the
        // logits of one micro-batch (all of them under GPipe).
        if (stage == 0)
            for (const TensorDesc& d : embedding_activations(m, p)) add_to(s, d, std::ceil(s.in_flight_microbatches));
        if (stage == head_stage(p)) {
            const double n = p.schedule == Schedule::gpipe ? s.in_flight_microbatches : 1.0;
            for (const TensorDesc& d : logits_activations(m, p)) add_to(s, d, n);
        }
        // The backward workspace is transient and always on the GPU.
        s.workspace_bytes = workspace;
        s.tier_bytes[0] += workspace;
        r.stages.push_back(s);
    }
    for (const StageMemory& s : r.stages)
        if (s.tier_bytes[0] > r.hbm_bytes) {
            r.hbm_bytes = s.tier_bytes[0];
            r.worst_hbm_stage = s.stage;
        }
    // Host DRAM and SSD are per node: sum the ranks a node holds. Ranks are ordered tp, cp, dp
    // fastest to pp slowest (Megatron's default order), so a node's ranks map to stages by
    // rank / (tp·cp·dp).
    const int gpn = std::max(1, caps.gpus_per_node);
    const int ranks = p.gpus();
    const int per_stage = std::max(1, p.tp * p.cp * p.dp);
    // A node holding ranks of one stage only (the usual case) needs no per-rank walk.
    const bool one_stage_per_node = per_stage % gpn == 0;
    for (int first_rank = 0; first_rank < ranks; first_rank += one_stage_per_node ? per_stage : gpn) {
        double cpu = 0, ssd = 0;
        for (int rk = first_rank; rk < std::min(ranks, first_rank + gpn); ++rk) {
            const StageMemory& s = r.stages[static_cast<std::size_t>(std::min(p.pp - 1, rk / per_stage))];
            cpu += s.tier_bytes[1];
            ssd += s.tier_bytes[2];
        }
        r.cpu_bytes = std::max(r.cpu_bytes, cpu);
        r.ssd_bytes = std::max(r.ssd_bytes, ssd);
    }
    r.fits_hbm = r.hbm_bytes <= caps.hbm_bytes;
    r.fits_cpu = r.cpu_bytes <= caps.cpu_bytes_per_node;
    r.fits_ssd = r.ssd_bytes <= caps.ssd_bytes_per_node;
    return r;
}

std::string to_json_text(const MemoryReport& r) {
    // nlohmann::ordered_json keeps insertion order; bytes are rounded to whole bytes so the text
    // does not depend on float printing.
    using J = nlohmann::ordered_json;
    auto B = [](double v) { return static_cast<std::int64_t>(std::llround(v)); };
    J j;
    J stages = J::array();
    for (const StageMemory& s : r.stages) {
        J o;
        o["stage"] = s.stage;
        o["layers"] = s.layers;
        o["in_flight_microbatches"] = std::round(s.in_flight_microbatches * 1e6) / 1e6;
        o["weights_bytes"] = B(s.weights_bytes);
        o["grads_bytes"] = B(s.grads_bytes);
        o["optimizer_bytes"] = B(s.optimizer_bytes);
        o["activations_bytes"] = B(s.activations_bytes);
        o["workspace_bytes"] = B(s.workspace_bytes);
        o["buffers_bytes"] = B(s.buffers_bytes);
        o["hbm_bytes"] = B(s.tier_bytes[0]);
        o["cpu_bytes"] = B(s.tier_bytes[1]);
        o["ssd_bytes"] = B(s.tier_bytes[2]);
        stages.push_back(o);
    }
    j["stages"] = stages;
    J worst;
    worst["hbm_stage"] = r.worst_hbm_stage;
    worst["hbm_bytes_per_gpu"] = B(r.hbm_bytes);
    worst["cpu_bytes_per_node"] = B(r.cpu_bytes);
    worst["ssd_bytes_per_node"] = B(r.ssd_bytes);
    j["worst"] = worst;
    J caps;
    caps["hbm_bytes_per_gpu"] = B(r.capacities.hbm_bytes);
    caps["cpu_bytes_per_node"] = B(r.capacities.cpu_bytes_per_node);
    caps["ssd_bytes_per_node"] = B(r.capacities.ssd_bytes_per_node);
    caps["gpus_per_node"] = r.capacities.gpus_per_node;
    j["capacities"] = caps;
    J fits;
    fits["hbm"] = r.fits_hbm;
    fits["cpu"] = r.fits_cpu;
    fits["ssd"] = r.fits_ssd;
    fits["all"] = r.fits();
    j["fits"] = fits;
    j["reserve_bytes"] = B(kFrameworkReserveBytes);
    return j.dump(2) + "\n";
}

}  // namespace strata::sim
