// Closed-form per-rank memory (memory.hpp): sums the tensor list (tensors.hpp) per pipeline stage,
// multiplies stashed activations by the micro-batches the schedule keeps in flight, splits every
// tensor over tiers by its TierSplit, and checks the worst GPU and the worst node against the
// capacities. Does not simulate time: the engine's simulated peak is the reference for that.
#include "strata/lowering/memory.hpp"
#include "strata/lowering/plan_knobs.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>

#include "strata/common/error.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/model.hpp"

namespace strata::sim {

double in_flight_microbatches(const PlanSpec& p, int stage) {
    const double m = std::max(1, p.micro_batches());
    switch (p.schedule) {
        case Schedule::gpipe:
            return m;  // all forwards before any backward
        case Schedule::one_f_one_b:  // warm-up (pp - stage - 1) + 1
            return std::min(static_cast<double>(p.pp - stage), m);
        case Schedule::interleaved_1f1b: {
            // Megatron's interleaved schedule: warm-up = 2·(pp - stage - 1) + (vpp - 1)·group
            // micro-batch chunks (group = pp by default), one more in flight at the first backward,
            // each chunk 1/vpp of the stage's layers. Stage 0 with group pp: pp·(1 + (pp - 1)/(pp·vpp))
            // micro-batches (Korthikanti §4.2.3).
            const int vpp = std::max(1, p.vpp);
            const double total_chunks = m * vpp;
            const double warmup = 2.0 * (p.pp - stage - 1) + static_cast<double>(vpp - 1) * p.vpp_group() + (p.moe_a2a_overlap ? 1.0 : 0.0);
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

void add_to(StageMemory& s, TensorTag tag, double tensor_bytes, const TierSplit& tiers, double times, Lifetime life = Lifetime::persistent) {
    const double bytes = tensor_bytes * times;
    if (life == Lifetime::layers_backward) s.layers_backward_gpu_bytes += bytes * tiers.gpu;
    if (life == Lifetime::after_loss) s.after_loss_gpu_bytes += bytes * tiers.gpu;
    switch (tag) {
        case TensorTag::weights: s.weights_bytes += bytes; break;
        case TensorTag::grads: s.grads_bytes += bytes; break;
        case TensorTag::optimizer: s.optimizer_bytes += bytes; break;
        case TensorTag::activations: s.activations_bytes += bytes; break;
        default: s.buffers_bytes += bytes; break;
    }
    for (int t = 0; t < kTierCount; ++t) s.tier_bytes[static_cast<std::size_t>(t)] += bytes * tiers.of(static_cast<Tier>(t));
}

void add_to(StageMemory& s, const TensorDesc& d, double times) { add_to(s, d.tag, d.bytes, d.tiers, times, d.lifetime); }

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
// The last entry: whether the workspace holds an unfused weight gradient (layer_backward_workspace).
// A layer's activations and backward workspace read the layer's shape (tp, cp, ep, etp, micro_batch,
// SP), its kernels and precision, and what is recomputed. The key is the plan's encoding
// (plan_knobs.hpp) less what they are known not to read: the pipeline and its schedule, the batch
// and DP (but whether unfused gradient sums arise, appended), ZeRO and offload, the optimizer's
// types, the loss, overlap flags and buckets. tests/planner/test_cache_keys.cpp checks each.
using LayerKey = std::vector<std::int64_t>;
void layer_key(const PlanSpec& p, bool moe, bool recomputed, LayerKey& k) {
    static const PlanKnobSet unread{"framework", "pp", "dp", "vpp", "microbatch_group", "global_batch", "schedule", "zero_stage",
                                    "recompute_layers", "recompute_every", "exp_avg_dtype", "exp_avg_sq_dtype", "fp32_grads",
                                    "grad_accum_fusion", "loss_upcast", "eager_cross_entropy", "loss_parallel", "torch_pipelining", "offload", "cpu_grad_accumulation", "lock_free_update",
                                    "overlap_grad_reduce", "bucket_reduce_barrier", "overlap_param_gather", "tp_comm_overlap", "p2p_blocking",
                                    "p2p_scatter_gather", "expandable_segments", "moe_a2a_overlap", "moe_dispatcher",
                                    "eager_elementwise", "dp_bucket_mb", "vocab_divisible_by", "layer_split", "virtual_layer_split"};
    k.assign({moe ? 1 : 0, recomputed ? 1 : 0, p.adds_unfused_grads() ? 1 : 0});
    encode_plan(p, k, &unread);
}

// What a rank's schedule can hold at once: the distinct per-chunk counts of micro-batches between
// forward and backward that no other state of the step dominates (few: the warm-up's last state
// and the steady state's), each with the chunk whose backward comes next as its last element (-1:
// none), since the head chunk's backward frees its logits before its layers' backward. Keyed by
// pipeline_schedule()'s arguments.
using HeldKey = std::tuple<int, int, int, int, int, int, bool>;  // exactly pipeline_schedule()'s arguments
using HeldStates = std::vector<std::vector<int>>;

HeldStates held_states(const PlanSpec& p, int stage) {
    HeldStates out;
    const std::size_t chunks = static_cast<std::size_t>(std::max(1, p.vpp));
    std::vector<int> held(chunks + 1, 0);
    bool rising = false;  // a forward since the last backward: `held` may be a maximal state
    auto keep = [&](int next_backward) {
        held.back() = next_backward;
        auto le = [&](const std::vector<int>& a, const std::vector<int>& b) {  // a dominated by b, the same backward next
            return a.back() == b.back() && std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(chunks), b.begin(),
                                                      [](int x, int y) { return x <= y; });
        };
        for (const auto& h : out)
            if (le(held, h)) return;
        std::erase_if(out, [&](const std::vector<int>& h) { return le(h, held); });
        out.push_back(held);
    };
    const std::vector<PipeSlot> slots = pipeline_schedule(p.schedule, p.pp, stage, std::max(1, p.micro_batches()), std::max(1, p.vpp),
                                                          p.vpp_group(), p.moe_a2a_overlap);
    for (std::size_t k = 0; k < slots.size(); ++k) {
        const PipeSlot& s = slots[k];
        if (k + 1 < slots.size() && merged_pair(p, s, slots[k + 1])) {
            // A merged step: the backward frees a layer for each the forward takes (one layer over,
            // which stage_memory adds), so its states are the one before and the one after it.
            if (rising) keep(slots[k + 1].chunk);
            ++held[static_cast<std::size_t>(s.chunk)];
            --held[static_cast<std::size_t>(slots[k + 1].chunk)];
            keep(slots[k + 1].chunk);
            rising = false;
            ++k;
            continue;
        }
        if (s.defer_weights) continue;  // the zero-bubble split keeps its activations to its weight slot
        if (s.forward) {
            ++held[static_cast<std::size_t>(s.chunk)];
            rising = true;
        } else {
            if (rising) keep(s.chunk);
            rising = false;
            --held[static_cast<std::size_t>(s.chunk)];
        }
    }
    if (rising) keep(-1);
    return out;
}

}  // namespace

struct MemoryCache::Impl {
    std::map<LayerKey, LayerKindBytes> layers;
    LayerKey scratch;  // the key being looked up (no allocation on a hit)
    std::map<HeldKey, HeldStates> held;
};

MemoryCache::MemoryCache() : impl_(std::make_unique<Impl>()) {}
MemoryCache::~MemoryCache() = default;

namespace {

struct LayerKinds {
    LayerKindBytes kinds[2][2];
    MemoryCache::Impl* cache = nullptr;
    const HeldStates& held(const PlanSpec& p, int stage, HeldStates& scratch) {
        if (!cache) return scratch = held_states(p, stage);
        auto [it, inserted] = cache->held.try_emplace(HeldKey{static_cast<int>(p.schedule), p.pp, stage, p.micro_batches(), p.vpp, p.vpp_group(), p.moe_a2a_overlap});
        if (inserted) it->second = held_states(p, stage);
        return it->second;
    }
    const LayerKindBytes& get(const ModelSpec& m, const PlanSpec& p, int layer, bool recomputed) {
        const bool moe = m.layer_is_moe(layer);
        LayerKindBytes& k = kinds[moe ? 1 : 0][recomputed ? 1 : 0];
        if (k.known) return k;
        if (cache) {
            layer_key(p, moe, recomputed, cache->scratch);
            auto it = cache->layers.find(cache->scratch);
            if (it == cache->layers.end()) {
                it = cache->layers.emplace(cache->scratch, LayerKindBytes{}).first;
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

// How many micro-batches each of a stage's layers, its embedding and its logits hold at the peak,
// and whether the head chunk's backward comes next (its logits then go before its layers' backward).
struct HeldTimes {
    std::vector<double> per_layer;
    double embedding = 0, logits = 0;
    bool head_next = true;
};

// With vpp >= 2 the chunks differ (uneven virtual stages, dense-first layers, the embedding on
// virtual stage 0, the head and MTP on the last), and the schedule holds each chunk's micro-batches
// in its own count: take the held state of the schedule that needs the most bytes with the
// backward that follows it: the layers' workspace, beside which the head chunk's backward has
// freed its micro-batch's logits, or the head's own workspace.
HeldTimes chunk_held_times(const PlanSpec& p, int stage, const std::vector<int>& virtual_layers, const std::vector<double>& layer_bytes,
                           double embedding_bytes, double logits_bytes, double layer_ws, double head_ws, const HeldStates& states) {
    const int vpp = p.vpp;
    std::vector<int> chunk_of_layer;
    for (int c = 0; c < vpp; ++c)
        chunk_of_layer.insert(chunk_of_layer.end(), static_cast<std::size_t>(virtual_layers[static_cast<std::size_t>(virtual_stage_of(p, stage, c))]), c);
    STRATA_ASSERT(chunk_of_layer.size() == layer_bytes.size(), "the virtual stages of a stage add up to its layers");
    const std::size_t embedding_chunk = 0;  // virtual stage 0 is chunk 0 of stage 0 in every placement
    std::size_t head_chunk = static_cast<std::size_t>(vpp - 1);
    for (int c = 0; c < vpp; ++c)
        if (virtual_stage_of(p, stage, c) == p.pp * vpp - 1) head_chunk = static_cast<std::size_t>(c);
    std::vector<double> chunk_bytes(static_cast<std::size_t>(vpp), 0.0);
    for (std::size_t i = 0; i < layer_bytes.size(); ++i) chunk_bytes[static_cast<std::size_t>(chunk_of_layer[i])] += layer_bytes[i];
    chunk_bytes[embedding_chunk] += embedding_bytes;
    chunk_bytes[head_chunk] += logits_bytes;
    const std::vector<int>* best = &states.front();
    double best_bytes = -1;
    for (const std::vector<int>& h : states) {
        double b = 0;
        for (std::size_t c = 0; c < chunk_bytes.size(); ++c) b += h[c] * chunk_bytes[c];
        const bool head_next = h.back() == static_cast<int>(head_chunk) && h[head_chunk] > 0;
        b += head_next ? std::max(layer_ws - logits_bytes, head_ws) : layer_ws;
        if (b > best_bytes) {
            best_bytes = b;
            best = &h;
        }
    }
    HeldTimes t;
    for (int c : chunk_of_layer) t.per_layer.push_back((*best)[static_cast<std::size_t>(c)]);
    t.embedding = (*best)[embedding_chunk];
    t.logits = (*best)[head_chunk];
    t.head_next = best->back() == static_cast<int>(head_chunk) && t.logits > 0;
    return t;
}

// A stage's model states and buffers, summed by tag and tier. Not cached: a planner sweep meets
// hundreds of thousands of (plan, stage) keys, and a map of them cost more than rebuilding
// (GPT-3 on 512 GPUs, the whole space: 14.0 s with a cache of tensor lists, 5.9 s with a cache
// of these sums, 4.2 s without).
StageMemory stage_states_and_buffers(const ModelSpec& m, const PlanSpec& p, int stage) {
    StageMemory sums;
    for (const TensorDesc& d : stage_model_states(m, p, stage)) add_to(sums, d, 1.0);
    for (const TensorDesc& d : stage_buffers(m, p, stage)) add_to(sums, d, 1.0);
    return sums;
}

// The same sums from the byte-only list (the cached path): no names, no per-layer parameter
// walks. tests/planner/test_memory_cache.cpp holds it equal to the named lists, byte for byte.
StageMemory stage_states_and_buffers(const ModelSpec& m, const PlanSpec& p, int stage, const std::vector<int>& layer_ids,
                                     LayerParamsByKind& layers) {
    StageTensorBytes list;
    stage_tensor_bytes(m, p, stage, layer_ids, layers, list);
    StageMemory sums;
    for (int i = 0; i < list.count; ++i) {
        const TensorBytes& b = list.items[static_cast<std::size_t>(i)];
        add_to(sums, b.tag, b.bytes, b.tiers, 1.0, b.lifetime);
    }
    return sums;
}

}  // namespace

MemoryReport memory_estimate(const ModelSpec& m, const PlanSpec& p, const Capacities& caps) {
    return memory_estimate(m, p, caps, nullptr);
}

MemoryReport memory_estimate(const ModelSpec& m, const PlanSpec& p, const Capacities& caps, MemoryCache* cache) {
    MemoryReport r;
    r.capacities = caps;
    const std::vector<int> sl = stage_layers(m, p);
    // The cached (planner) path lays every stage's layer ids out from one virtual_stage_layers
    // (stage_layer_ids rebuilds it for each stage: O(pp^2) per plan).
    const std::vector<int> vsl = p.vpp > 1 || cache ? virtual_stage_layers(m, p) : std::vector<int>{};
    std::vector<int> first_layer;  // of each virtual stage, then the layer count
    if (cache) {
        first_layer.assign(vsl.size() + 1, 0);
        for (std::size_t v = 0; v < vsl.size(); ++v) first_layer[v + 1] = first_layer[v] + vsl[v];
    }
    const double kept_bytes = sum_bytes(pipe_output_slice(m, p));  // a sent output kept to its backward
    HeldStates held_scratch;
    LayerKinds kinds;
    kinds.cache = cache ? &cache->impl() : nullptr;
    LayerParamsByKind layer_params;
    std::vector<int> ids;
    std::vector<double> layer_bytes;
    r.stages.reserve(static_cast<std::size_t>(std::max(0, p.pp)));
    for (int stage = 0; stage < p.pp; ++stage) {
        if (cache) {  // as stage_layer_ids
            ids.clear();
            for (int c = 0; c < std::max(1, p.vpp); ++c) {
                const std::size_t v = static_cast<std::size_t>(virtual_stage_of(p, stage, c));
                for (int l = first_layer[v]; l < first_layer[v + 1]; ++l) ids.push_back(l);
            }
        } else {
            ids = stage_layer_ids(m, p, stage);
        }
        StageMemory s = cache ? stage_states_and_buffers(m, p, stage, ids, layer_params) : stage_states_and_buffers(m, p, stage);
        s.stage = stage;
        s.layers = sl[static_cast<std::size_t>(stage)];
        s.in_flight_microbatches = in_flight_microbatches(p, stage);
        double workspace = 0;
        layer_bytes.assign(static_cast<std::size_t>(s.layers), 0.0);
        for (int i = 0; i < s.layers; ++i) {
            const bool rc = layer_recomputed(m, p, stage, i);
            const LayerKindBytes& k = kinds.get(m, p, ids[static_cast<std::size_t>(i)], rc);
            layer_bytes[static_cast<std::size_t>(i)] = k.activations;
            workspace = std::max(workspace, k.workspace);
        }
        std::vector<TensorDesc> embedding, logits;
        if (stage == 0) embedding = embedding_activations(m, p);
        if (stage == head_stage(p)) logits = logits_activations(m, p);
        // The head's backward, and before it the MTP modules' (their layer's gradients beside
        // every held tensor: they are never recomputed), run before the layers'.
        double head_ws = logits.empty() ? 0.0 : sum_bytes(head_workspace(m, p));
        if (!logits.empty() && m.mtp_depth > 0 && m.layers > 0)
            head_ws = std::max(head_ws, sum_bytes(layer_backward_workspace(m, p, mtp_layer_kind(m), false)));
        // The buffers summed below are all held beside every workspace; those of the layers'
        // backward alone are not beside the head's, which the head's term gives back.
        if (!logits.empty()) head_ws -= s.layers_backward_gpu_bytes;
        // The head's whole gradients (ZeRO-3) come with its weight gradient, after the loss's
        // backward has freed the stashed logits (the fp32 copy once its gradient is cast back, or
        // a loss that writes its gradient apart): beside the loss's peak only by what they exceed
        // those by (the bound holds both moments). In fp32 Megatron's loss turns its stash into the
        // gradient in place, which the weight gradient reads: no credit.
        const bool stash_is_grad = p.loss_upcast && !p.eager_cross_entropy && p.precision == Precision::fp32;
        for (const TensorDesc& d : logits)
            if (d.name == "lm_head.logits" && !stash_is_grad) head_ws -= std::min(s.after_loss_gpu_bytes, d.bytes * p.offload.activations.gpu);
        // What the embedding's backward finds released (below): its chunk's layers, not a kept output.
        double chunk0_layers = 0;
        if (stage == 0) {
            const int chunk0 = std::min(static_cast<int>(layer_bytes.size()), p.vpp > 1 ? vsl.front() : s.layers);
            chunk0_layers = std::accumulate(layer_bytes.begin(), layer_bytes.begin() + chunk0, 0.0);
        }
        // A sent output kept until its micro-batch's backward has run (DeepSpeed's slice, torch's
        // whole output) is held with its chunk's first layer, whose stash goes last; the lowering
        // allocates it there. A chunk without a layer (a layout's embedding-only chunk) is left out.
        if (kept_bytes > 0) {
            std::size_t begin = 0;
            for (int c = 0; c < std::max(1, p.vpp); ++c) {
                const auto n = static_cast<std::size_t>(p.vpp > 1 ? vsl[static_cast<std::size_t>(virtual_stage_of(p, stage, c))] : s.layers);
                if (n > 0 && chunk_sends_to_other_rank(p, stage, c)) layer_bytes[begin] += kept_bytes;
                begin += n;
            }
        }
        HeldTimes held;
        if (p.vpp <= 1) {
            // One chunk per rank: every layer holds the same micro-batches. The last stage starts
            // each micro-batch's backward right after its loss, so it holds the logits of one
            // micro-batch (all of them under GPipe).
            const double n = s.in_flight_microbatches;
            held = {std::vector<double>(layer_bytes.size(), n), n, p.schedule == Schedule::gpipe ? n : 1.0};
        } else {
            const double logits_gpu = sum_bytes(logits) * p.offload.activations.gpu;
            held = chunk_held_times(p, stage, vsl, layer_bytes, sum_bytes(embedding), logits_gpu, workspace,
                                    head_ws, kinds.held(p, stage, held_scratch));
            // Reported as micro-batch equivalents of the stage's layers.
            const double total = std::accumulate(layer_bytes.begin(), layer_bytes.end(), 0.0);
            if (total > 0) s.in_flight_microbatches = std::inner_product(held.per_layer.begin(), held.per_layer.end(), layer_bytes.begin(), 0.0) / total;
        }
        // A merged step of combined 1F1B (moe_a2a_overlap) holds one layer more than the states
        // around it: the forward's next layer is taken before the backward's layer beside it is
        // freed (the lowering's merged_passes).
        if (p.moe_a2a_overlap && p.ep > 1 && p.micro_batches() > 1 && !layer_bytes.empty())
            held.per_layer[static_cast<std::size_t>(std::max_element(layer_bytes.begin(), layer_bytes.end()) - layer_bytes.begin())] += 1;
        for (int i = 0; i < s.layers; ++i) {
            TensorDesc d;  // all of a layer's activations share plan.offload.activations
            d.tag = TensorTag::activations;
            d.bytes = layer_bytes[static_cast<std::size_t>(i)];
            d.tiers = p.offload.activations;
            add_to(s, d, held.per_layer[static_cast<std::size_t>(i)]);
        }
        for (const TensorDesc& d : embedding) add_to(s, d, held.embedding);
        for (const TensorDesc& d : logits) add_to(s, d, held.logits);
        const bool sends_output = stage < p.pp - 1;  // DeepSpeed's regathered output, below
        if (stage == 0) {
            // The embedding's backward comes after the micro-batch's chunk-0 layers have released
            // their activations (their GPU part): it adds to the peak only by what exceeds those.
            // Chunk 0 (virtual stage 0) comes first among the stage's layers.
            const double released = chunk0_layers * p.offload.activations.gpu;
            workspace = std::max(workspace, sum_bytes(embedding_backward_workspace(m, p)) - released);
        }
        // The head's forward and backward run beside every held micro-batch's logits. The layers'
        // backward (and the embedding's) after the head's find its own micro-batch's freed (their
        // GPU part; until stop 57 counted beside the layers' workspace too); with several chunks a
        // rank, a chunk without the head runs its backward beside all of them, and the held state
        // says which comes next (Megatron's last rank runs a head chunk's backward right after its
        // forward, so none is held there; until stop 64 one was).
        if (stage == head_stage(p)) {
            const double freed = held.head_next ? sum_bytes(logits) * p.offload.activations.gpu : 0.0;
            workspace = held.head_next ? std::max(workspace - freed, head_ws) : workspace;
        }
        // DeepSpeed's regathered output lives through the whole backward pass of the stage.
        if (sends_output) workspace += sum_bytes(pipe_output_regathered(m, p));
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
