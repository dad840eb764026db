// Closed-form per-rank memory (memory.hpp): sums the tensor list (tensors.hpp) per pipeline stage,
// multiplies stashed activations by the micro-batches the schedule keeps in flight, splits every
// tensor over tiers by its TierSplit, and checks the worst GPU and the worst node against the
// capacities. Does not simulate time: the engine's simulated peak is the reference for that.
#include "strata/sim/memory.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

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

// Layers differ only by (MoE or dense, recomputed or not): size each kind once, since the planner
// calls memory_estimate for every candidate plan.
struct LayerKindBytes {
    double activations = 0, workspace = 0;
    bool known = false;
};
struct LayerKinds {
    LayerKindBytes kinds[2][2];
    const LayerKindBytes& get(const ModelSpec& m, const PlanSpec& p, int layer, bool recomputed) {
        LayerKindBytes& k = kinds[m.layer_is_moe(layer) ? 1 : 0][recomputed ? 1 : 0];
        if (!k.known) {
            k.activations = sum_bytes(layer_activations(m, p, layer, recomputed));
            k.workspace = sum_bytes(layer_backward_workspace(m, p, layer, recomputed));
            k.known = true;
        }
        return k;
    }
};

}  // namespace

MemoryReport memory_estimate(const ModelSpec& m, const PlanSpec& p, const Capacities& caps) {
    MemoryReport r;
    r.capacities = caps;
    const std::vector<int> sl = stage_layers(m, p);
    LayerKinds kinds;
    int first = 0;
    for (int stage = 0; stage < p.pp; ++stage) {
        StageMemory s;
        s.stage = stage;
        s.layers = sl[static_cast<std::size_t>(stage)];
        s.in_flight_microbatches = in_flight_microbatches(p, stage);
        for (const TensorDesc& d : stage_model_states(m, p, stage)) add_to(s, d, 1.0);
        for (const TensorDesc& d : stage_buffers(m, p, stage)) add_to(s, d, 1.0);
        double workspace = 0;
        for (int i = 0; i < s.layers; ++i) {
            const bool rc = layer_recomputed(m, p, stage, i);
            const LayerKindBytes& k = kinds.get(m, p, first + i, rc);
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
        if (stage == p.pp - 1) {
            const double n = p.schedule == Schedule::gpipe ? s.in_flight_microbatches : 1.0;
            for (const TensorDesc& d : logits_activations(m, p)) add_to(s, d, n);
        }
        // The backward workspace is transient and always on the GPU.
        s.workspace_bytes = workspace;
        s.tier_bytes[0] += workspace;
        r.stages.push_back(s);
        first += s.layers;
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
    for (int first_rank = 0; first_rank < ranks; first_rank += gpn) {
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
