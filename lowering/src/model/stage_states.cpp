// The stage lists of model states and buffers (tensors.hpp): per-rank bytes of weights, gradients,
// optimizer states (the ZeRO paper's 2 + 2 + 12 bytes a parameter, sharded by stage) and the
// host-side tensors an offloaded optimizer needs, then the runtime buffers; one definition for
// the named lists and the planner's byte-only ones.
#include <algorithm>
#include <cmath>

#include "strata/common/error.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/tensors.hpp"
#include "tensors_local.hpp"

namespace strata::sim {

using detail::Local;
using detail::local_of;
using detail::layer_params_local;

StageEdgeParams stage_edge_params(const ModelSpec& m, const PlanSpec& p, int stage) {
    StageEdgeParams e;
    const ParamCounts pc = edge_param_counts(m, p);
    const double t = std::max(1, p.tp);
    if (stage == 0) e.embedding = static_cast<double>(pc.embedding) / t + static_cast<double>(pc.position);
    if (stage == head_stage(p)) {
        // Untied: the lm head. Tied with pp > 1: Megatron keeps a copy of the word embedding on the
        // last stage (its gradient is all-reduced with the first stage's).
        const StageParams mtp = mtp_params_local(m, p);
        e.head = static_cast<double>(pc.final_norm) + (m.tied_embeddings ? 0.0 : static_cast<double>(pc.lm_head) / t) +
                 (head_stage_embedding_copy(m, p) ? static_cast<double>(pc.embedding) / t : 0.0) + mtp.dense;
        e.head_expert = mtp.expert;
    }
    return e;
}

namespace {

// One definition of the stage's parameters, model states and buffers for both the named lists and
// the planner's byte-only lists (stage_tensor_bytes): `layer` gives one layer's local parameters.
template <class LayerParamsFn>
StageParams stage_params_of(const ModelSpec& m, const PlanSpec& p, int stage, const std::vector<int>& layer_ids, LayerParamsFn&& layer) {
    StageParams sp;
    for (int l : layer_ids) {
        const StageParams lp = layer(l);
        sp.dense += lp.dense;
        sp.expert += lp.expert;
    }
    const StageEdgeParams e = stage_edge_params(m, p, stage);
    sp.dense += e.embedding + e.head;
    sp.expert += e.head_expert;
    return sp;
}

// `emit(name, tag, lifetime, bytes, tiers, shape, shape_suffix)`, in list order.
template <class Emit>
void emit_model_states(const PlanSpec& p, const StageParams& sp, Emit&& emit) {
    // Mixed precision (ZeRO paper §3.1): 2-byte weights and grads, K = 12 bytes of fp32 Adam
    // state (master copy, m, v); 8 with bf16 moments. Pure fp32: 4 + 4 + 8 (m, v; the weights are
    // the master copy).
    const bool fp32 = p.precision == Precision::fp32;
    const double wb = fp32 ? 4.0 : 2.0, gb = p.grad_bytes();
    const double nd = std::max(1, p.dp * p.cp);
    const double nd_expert = p.edp();  // expert data parallel
    auto sharded = [&](double per_param, bool shard) {
        return per_param * (shard ? sp.dense / nd + sp.expert / nd_expert : sp.total());
    };
    const int z = p.zero_stage;
    const Lifetime life = Lifetime::persistent;
    // PyTorch FSDP's shards are the fp32 parameters the optimizer updates: no 16-bit shard and no
    // master besides them (their 16-bit copies are the gathers', zero3.gathered_params).
    const bool fsdp = p.fsdp_fp32_shards();
    if (fsdp) emit("weights", TensorTag::weights, life, sharded(4.0, true), p.offload.params, "(params) fp32 shards, the optimizer's", nullptr);
    else emit("weights", TensorTag::weights, life, sharded(wb, z >= 3), p.offload.params, "(params)", nullptr);
    // Split between the GPU and the host (Angel-PTM), the host homes every unit's weights: the
    // resident share's too, which the GPU refreshes from there once a step (the lowering's
    // build_resident_units).
    if (!fsdp && p.splits_weights_by_layer())
        emit("params.host_home", TensorTag::weights, life, p.offload.params.gpu * sharded(wb, z >= 3), TierSplit{0.0, 1.0, 0.0},
             "(params) resident share", nullptr);
    // Pipelined FSDP accumulates unsharded gradients over the step's micro-batches.
    const bool grads_sharded = z >= 2 && !p.pipelined_fsdp();
    // Streamed to the host, DeepSpeed's fp32 partition there (PlanSpec::host_grad_bytes).
    const double kept = p.streams_grads_to_host() ? p.host_grad_bytes() : p.kept_grad_bytes();
    emit("grads", TensorTag::grads, life, sharded(grads_sharded ? kept : gb, grads_sharded), p.offload.grads,
         fsdp && grads_sharded ? "(params) fp32 shards" : "(params)", nullptr);
    if (p.has_master() && !fsdp) emit("optimizer.master", TensorTag::optimizer, life, sharded(4.0, z >= 1), p.offload.optimizer, "(params) fp32", nullptr);
    // Moments fp32 unless the plan narrows them (Megatron's precision-aware optimizer).
    emit("optimizer.m", TensorTag::optimizer, life, sharded(bytes_per_element(p.exp_avg_dtype), z >= 1), p.offload.optimizer, "(params) ",
         to_string(p.exp_avg_dtype));
    emit("optimizer.v", TensorTag::optimizer, life, sharded(bytes_per_element(p.exp_avg_sq_dtype), z >= 1), p.offload.optimizer, "(params) ",
         to_string(p.exp_avg_sq_dtype));
    // An optimizer updated on the host (ZeRO-Offload, ZeRO-Infinity's sub-groups) reads its
    // gradients there: the offloaded share of them is copied into host memory (the ZeRO-Offload
    // paper's g16 on the CPU; DeepSpeed keeps a pinned buffer). In pure fp32 the host also holds
    // the fp32 weights it updates and copies back, which mixed precision counts as optimizer.master.
    const double off = p.offload.optimizer.cpu + p.offload.optimizer.ssd;
    if (off > 0) {
        const TierSplit host{0.0, 1.0, 0.0};
        // Gradients homed on the host (plan.offload.grads, ZeRO-Offload's CPU partition) are the
        // buffer the update reads: only the offloaded share beyond them needs a host copy.
        const double grads_homed = std::min(off, p.offload.grads.cpu);
        if (off > grads_homed)
            emit("grads.host", TensorTag::grads, life, (off - grads_homed) * sharded(gb, z >= 1), host, "(params) offloaded share", nullptr);
        // Weights homed in host memory (plan.offload.params) are the ones the update writes.
        const double homed = std::min(off, p.offload.params.cpu);
        if (fp32 && off > homed)
            emit("optimizer.host_weights", TensorTag::optimizer, life, (off - homed) * sharded(4.0, z >= 1), host, "(params) offloaded share fp32", nullptr);
    }
    // ZeRO-Infinity stages the SSD share's optimizer state through host buffers, a sub-group at a
    // time (DeepSpeed's sub_group_size), reading the next while the current one updates.
    if (p.offload.optimizer.ssd > 0) {
        const double params = p.offload.optimizer.ssd * sharded(1.0, z >= 1);
        const double sub = std::max(1.0, LowerOptions{}.ssd_sub_group_params);
        const double groups = std::clamp(std::ceil(params / sub), 1.0, 4096.0);
        const double state = (fp32 ? 0.0 : 4.0) + bytes_per_element(p.exp_avg_dtype) + bytes_per_element(p.exp_avg_sq_dtype);
        emit("optimizer.ssd_staging", TensorTag::optimizer, life, std::min(groups, 2.0) * params / groups * state, TierSplit{0.0, 1.0, 0.0},
             "min(2, sub-groups) x sub-group state", nullptr);
        // Weights homed on the SSD as well: each sub-group's updated weights wait in host memory
        // for their write to the file (stage3.py's swap-out after the sub-group's step), while the
        // next sub-group's update writes its own.
        if (p.offload.params.ssd > 0)
            emit("params.ssd_staging", TensorTag::weights, life, std::min(groups, 2.0) * params / groups * wb * p.offload.params.ssd,
                 TierSplit{0.0, 1.0, 0.0}, "min(2, sub-groups) x sub-group weights", nullptr);
        // Weights kept on the GPU under mixed precision: each sub-group's updated fp32 master is cast
        // to 16-bit weights in host memory before its copy up (stage3.py copy_()s it into the GPU's
        // 16-bit partition, and PyTorch converts a host source on the host), the next sub-group's
        // update writing its own meanwhile.
        else if (p.stages_host_weights())
            emit("params.host_cast", TensorTag::weights, life, std::min(groups, 2.0) * params / groups * wb, TierSplit{0.0, 1.0, 0.0},
                 "min(2, sub-groups) x sub-group 16-bit weights", nullptr);
    }
}

template <class LayerParamsFn, class Emit>
void emit_buffers(const ModelSpec& m, const PlanSpec& p, int stage, const std::vector<int>& layer_ids, const StageParams& sp,
                  LayerParamsFn&& layer, Emit&& emit) {
    const int nd = p.dp * p.cp;
    const double wb = p.precision == Precision::fp32 ? 4.0 : 2.0;  // weights (the ZeRO-3 gathers)
    const TierSplit gpu{};
    // Streamed to the host, the gradients are reduced a bucket at a time even on one rank.
    const bool streamed = p.streams_grads_to_host();
    const bool zero2 = p.zero_stage == 2 && (nd > 1 || streamed);
    // ZeRO-3 has no DDP buckets: it reduce-scatters a layer's gradients at the end of the layer's
    // backward (the lowering's layer_grads, FSDP's post-backward), and at the backward's peak, its
    // start, no layer's are whole yet (the head's are: zero3.head_grads below).
    const bool zero3_per_layer = nd > 1 && p.zero_stage == 3 && !p.pipelined_fsdp();
    // What a ZeRO-3 gather makes whole: the dense parameters, and the experts where edp > 1.
    const auto gathered = [&](const StageParams& x) { return x.dense + (p.edp() > 1 ? x.expert : 0.0); };
    // The widest unit's gradients, a layer's dense or expert block, or (with `edges`) the
    // embedding's or the head's: the largest value a reduction holds whole.
    // (The edges' counts are taken only where a branch needs them: the planner meets this list
    // for every plan it sizes.)
    const auto widest_unit_grads = [&](bool edges) {
        double widest = 0;
        for (int l : layer_ids) widest = std::max({widest, layer(l).dense, layer(l).expert});
        if (edges) {
            const StageEdgeParams e = stage_edge_params(m, p, stage);
            widest = std::max({widest, e.embedding, e.head, e.head_expert});
        }
        return widest * p.grad_bytes();
    };
    // ZeRO-3's head gradients (the tied table's where the head reads it), whole from the head's
    // backward through the layers' (the edges are reduced at the micro-batch's end).
    const auto head_grads = [&] {
        const StageEdgeParams e = stage_edge_params(m, p, stage);
        const double head = e.head + (head_reads_embedding_table(m, p) ? e.embedding : 0.0);
        if (head > 0) emit("zero3.head_grads", TensorTag::buffers, Lifetime::after_loss, p.grad_bytes() * head, gpu, "the head's whole gradients", nullptr);
    };
    if (nd > 1 && (p.overlap_grad_reduce || zero2) && !zero3_per_layer && !streamed) {
        // One bucket being reduced while the next fills (Megatron's DDP), never more than all grads.
        const double all = p.grad_bytes() * sp.total();
        const double bucket = std::min(static_cast<double>(p.dp_bucket_bytes), all);
        if (!zero2) {
            emit("dp.grad_buckets", TensorTag::buffers, Lifetime::persistent, 2.0 * bucket, gpu, "2 x bucket", nullptr);
        } else {
            // ZeRO-2 keeps a shard: a bucket's whole gradients are a value of their own until its
            // reduce-scatter, and a bucket closes at the end of a unit (the lowering's build_buckets,
            // overlapped or not): a unit above the bucket size (a MoE layer's experts, the embedding
            // table, the head) is reduced whole while the next bucket fills (FSDP's per-module
            // reduce-scatter; until stop 63 two buckets of the size: DeepSeek-V3's layers at ep 1
            // 22.5 GB under the walk).
            const double widest = widest_unit_grads(true);
            emit("zero2.grad_buckets", TensorTag::buffers, Lifetime::persistent, std::min(all, std::max(bucket, widest) + bucket), gpu,
                 "widest bucket + bucket", nullptr);
        }
    }
    if (streamed) {
        // Streamed to the host (the lowering's grads_to_host): a value (ZeRO-2's bucket, closed at
        // a unit's end once it holds dp_bucket_bytes, so up to a unit more; ZeRO-3's layer) lives
        // whole until its slice is down. Under overlap_comm the next one fills meanwhile (DeepSpeed's
        // two ipg buffers), and with several micro-batches the host's sum of a slice comes up into a
        // scratch beside it (async_accumulate_grad_in_cpu_via_gpu).
        // ZeRO-3's edges are reduced at the micro-batch's end: the head's whole gradients are
        // zero3.head_grads, not one of the layers' values.
        const double widest = widest_unit_grads(p.zero_stage == 2);
        const double all = p.grad_bytes() * sp.total();
        const double value = std::min(all, p.zero_stage == 2 ? widest + static_cast<double>(p.dp_bucket_bytes) : widest);
        // ZeRO-2's boundary copies hold the backward (the overflow check): with one micro-batch a
        // step every copy is a boundary's, and a value goes before the next one fills.
        const bool two = p.overlap_grad_reduce && !(p.zero_stage == 2 && p.micro_batches() == 1);
        // ZeRO-3's values are layers' (the edges': zero3.head_grads), and the pass ends with the
        // last one's copy down: none exists at a head's backward. ZeRO-2's first bucket fills there.
        const Lifetime values_life = p.zero_stage == 3 ? Lifetime::layers_backward : Lifetime::persistent;
        emit("grads.streamed_values", TensorTag::buffers, values_life, std::min(all, (two ? 2.0 : 1.0) * value), gpu,
             two ? "2 x (widest unit + bucket)" : "widest unit + bucket", nullptr);
        // FSDP adds on the host instead (plan.cpu_grad_accumulation): the copy down waits there.
        if (p.micro_batches() > 1 && p.cpu_grad_accumulation)
            emit("grads.from_device", TensorTag::buffers, Lifetime::transient, value / nd, TierSplit{0.0, 1.0, 0.0}, "a value's slice", nullptr);
        else if (p.micro_batches() > 1)
            emit("grads.from_host", TensorTag::buffers, p.zero_stage == 3 ? Lifetime::layers_backward : Lifetime::transient, value / nd, gpu,
                 "a value's slice", nullptr);
        if (p.zero_stage == 3 && nd == 1 && stage == head_stage(p)) head_grads();  // over dp > 1: below
    } else if (zero3_per_layer) {
        // A layer's whole gradients are a value from its backward's first weight gradient to its
        // reduce-scatter (FSDP's unsharded gradients before its post-backward reduce-scatter;
        // DeepSpeed's bucket of a layer): present at a layer's backward peak, not at the head's,
        // which runs first (until stop 67 not counted: 0.64 GB under the walk for Llama 2 13B).
        double widest = 0;
        for (int l : layer_ids) widest = std::max(widest, layer(l).dense + (p.edp() > 1 ? layer(l).expert : 0.0));
        emit("zero3.layer_grads", TensorTag::buffers, Lifetime::layers_backward, widest * p.grad_bytes(), gpu, "a layer's whole gradients", nullptr);
    }
    if (p.pipelined_fsdp() && nd > 1) {
        // Pipelined FSDP holds every layer of the stage gathered from its first forward to its
        // last backward, and the embedding and head from the step's start: the stage's whole
        // (TP-local) weights, besides the shards; experts only where the expert-data-parallel
        // group shards them (with edp 1 a rank holds its experts whole: nothing to gather).
        emit("zero3.gathered_params", TensorTag::buffers, Lifetime::persistent, wb * gathered(sp), gpu, "stage params", nullptr);
    } else if (p.zero_stage >= 3 && nd > 1) {
        // ZeRO-3 gathers a layer's full (TP-local) weights before use; with prefetch the next
        // layer's gather is in flight too.
        double widest = 0, layers = 0;
        for (int l : layer_ids) {
            widest = std::max(widest, gathered(layer(l)));
            layers += layer(l).total();
        }
        const double depth = p.overlap_param_gather ? 2.0 : 1.0;
        emit("zero3.gathered_params", TensorTag::buffers, Lifetime::transient, depth * wb * widest, gpu, "depth x layer params", nullptr);
        // The embedding, the head and the final norm are gathered at the step's start and held to
        // its end (the lowering's gather_edges_zero3; FSDP's root module, which it does not
        // reshard after forward): with a large vocabulary, gigabytes.
        const double edges = std::max(0.0, sp.total() - layers);
        if (edges > 0 && p.offload.params.all_gpu())
            emit("zero3.gathered_edges", TensorTag::buffers, Lifetime::persistent, wb * edges, gpu, "embedding + head params", nullptr);
        // The edges' gradients are reduce-scattered at the end of each micro-batch's backward
        // (FSDP's root unit in its post-backward; the lowering's edge buckets): the head's whole
        // gradient lives from the head's backward through the layers', beside their peak.
        if (stage == head_stage(p)) head_grads();
    } else if (!p.offload.params.all_gpu()) {
        // Offloaded parameters are fetched to the GPU before use: a layer while the next one is
        // prefetched, or the embedding and head (fetched when used) beside one layer.
        double widest = 0, layers = 0;
        for (int l : layer_ids) {
            widest = std::max(widest, layer(l).total());
            layers += layer(l).total();
        }
        const double edges = std::max(0.0, sp.total() - layers);
        emit("params.fetched", TensorTag::buffers, Lifetime::transient, wb * std::max(2.0 * widest, widest + edges), gpu,
             "max(2 x layer, layer + edges) params", nullptr);
    }
    if (p.pp > 1 && p.torch_pipelining) {
        // torch.distributed.pipelining: a gradient receive buffer per micro-batch for each of the
        // rank's stages that sends its output to another rank, held for the step; it sends from
        // the kept output itself, and a forward receive buffer is the first layer's stashed input.
        const Local L = local_of(m, p);
        int receiving = 0;
        for (int c = 0; c < std::max(1, p.vpp); ++c) receiving += chunk_sends_to_other_rank(p, stage, c) ? 1 : 0;
        emit("pp.grad_recv", TensorTag::buffers, Lifetime::persistent, receiving * p.micro_batches() * L.act * L.tok_rep * L.h, gpu,
             "micro-batches x sending stages x (s/cp[/tp], b, h)", nullptr);
    } else if (p.pp > 1) {
        // One micro-batch's boundary activation, a send and a receive buffer.
        const Local L = local_of(m, p);
        emit("pp.p2p", TensorTag::buffers, Lifetime::persistent, 2.0 * L.act * L.tok_rep * L.h, gpu, "2 x (s/cp[/tp], b, h)", nullptr);
    }
    emit("framework.reserve", TensorTag::buffers, Lifetime::persistent, kFrameworkReserveBytes, gpu, "CUDA context + NCCL", nullptr);
}

// Appends to a named list.
struct ListEmit {
    std::vector<TensorDesc>& out;
    void operator()(const char* name, TensorTag tag, Lifetime life, double bytes, const TierSplit& tiers, const char* shape,
                    const char* shape_suffix) const {
        out.push_back(TensorDesc{name, tag, life, bytes, tiers, shape_suffix ? std::string(shape) + shape_suffix : std::string(shape)});
    }
};

// Appends to a byte-only list.
struct BytesEmit {
    StageTensorBytes& out;
    void operator()(const char*, TensorTag tag, Lifetime life, double bytes, const TierSplit& tiers, const char*, const char*) const {
        STRATA_ASSERT(out.count < static_cast<int>(out.items.size()), "StageTensorBytes holds every model state and buffer");
        out.items[static_cast<std::size_t>(out.count++)] = TensorBytes{tag, bytes, tiers, life};
    }
};

}  // namespace

StageParams stage_params(const ModelSpec& m, const PlanSpec& p, int stage) {
    return stage_params_of(m, p, stage, stage_layer_ids(m, p, stage), [&](int l) { return layer_params_local(m, p, l); });
}

std::vector<TensorDesc> stage_model_states(const ModelSpec& m, const PlanSpec& p, int stage) {
    std::vector<TensorDesc> out;
    emit_model_states(p, stage_params(m, p, stage), ListEmit{out});
    return out;
}

std::vector<TensorDesc> stage_buffers(const ModelSpec& m, const PlanSpec& p, int stage) {
    std::vector<TensorDesc> out;
    const std::vector<int> ids = stage_layer_ids(m, p, stage);
    const auto layer = [&](int l) { return layer_params_local(m, p, l); };
    emit_buffers(m, p, stage, ids, stage_params_of(m, p, stage, ids, layer), layer, ListEmit{out});
    return out;
}

const StageParams& LayerParamsByKind::get(const ModelSpec& m, const PlanSpec& p, int layer) {
    const std::size_t k = m.layer_is_moe(layer) ? 1 : 0;
    if (!known_[k]) kinds_[k] = layer_params_local(m, p, layer), known_[k] = true;
    return kinds_[k];
}

void stage_tensor_bytes(const ModelSpec& m, const PlanSpec& p, int stage, const std::vector<int>& layer_ids, LayerParamsByKind& layers,
                        StageTensorBytes& out) {
    out.count = 0;
    const auto layer = [&](int l) -> const StageParams& { return layers.get(m, p, l); };
    const StageParams sp = stage_params_of(m, p, stage, layer_ids, layer);
    emit_model_states(p, sp, BytesEmit{out});
    emit_buffers(m, p, stage, layer_ids, sp, layer, BytesEmit{out});
}

}  // namespace strata::sim
