// The flat parameter layout of a pipeline rank (params.hpp), and what the dataflow lowering does
// not cover yet.
#include "strata/lowering/params.hpp"

#include <algorithm>

#include "strata/common/error.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/tensors.hpp"

namespace strata::sim {

const ParamEntry* ParamLayout::find(const std::string& name, int layer) const {
    for (const ParamEntry& e : entries)
        if (e.layer == layer && e.name == name) return &e;
    return nullptr;
}

namespace {

class LayoutBuilder {
public:
    LayoutBuilder(const ModelSpec& m, const PlanSpec& p, ParamLayout& out) : m_(m), p_(p), out_(out) {}

    void add(const char* name, int layer, int chunk, std::int64_t full_rows, std::int64_t full_cols, ParamSplit split,
             bool decay, bool sp = false, bool shared = false, bool expert = false) {
        ParamEntry e;
        e.name = name;
        e.layer = layer;
        e.chunk = chunk;
        e.full_rows = full_rows;
        e.full_cols = full_cols;
        e.split = split;
        const std::int64_t tp = p_.tp;
        // A bias is a [1, n] row: a row split of the vector it stands for cuts its columns.
        const bool vector_split = full_rows == 1 && split != ParamSplit::replicated;
        const std::int64_t etp = p_.etp();
        if (split == ParamSplit::expert_rows || split == ParamSplit::expert_cols) {
            e.rows = full_rows / p_.ep / (split == ParamSplit::expert_rows ? etp : 1);
            e.cols = full_cols / (split == ParamSplit::expert_cols ? etp : 1);
        } else {
            e.rows = split == ParamSplit::cols || split == ParamSplit::replicated || vector_split ? full_rows : full_rows / tp;
            e.cols = split == ParamSplit::cols || vector_split ? full_cols / tp : full_cols;
        }
        e.decay = decay;
        e.sequence_parallel = sp && p_.sequence_parallel && p_.tp > 1;
        e.shared_embedding = shared;
        if (expert) {  // placed after the dense buffer once its size is known (finish)
            e.buffer = FlatBuffer::expert;
            e.offset = out_.expert_elements;
            out_.expert_elements += e.elements();
        } else {
            e.offset = out_.dense_elements;
            out_.dense_elements += e.elements();
        }
        out_.entries.push_back(std::move(e));
    }

    /// The expert buffer follows the dense one in a rank's flat address space (ParamLayout).
    void finish() {
        for (ParamEntry& e : out_.entries)
            if (e.buffer == FlatBuffer::expert) e.offset += out_.dense_elements;
        for (GradUnit& g : out_.expert_units) g.offset += out_.dense_elements;
    }

    void norm(const char* weight, const char* bias, int layer, int chunk) {
        if (m_.norm == NormKind::layernorm) add(bias, layer, chunk, 1, m_.hidden, ParamSplit::replicated, false, true);
        add(weight, layer, chunk, 1, m_.hidden, ParamSplit::replicated, false, true);
    }

    // Reverse registration order inside a layer, as Megatron's buffer holds it.
    void layer(int l, int chunk) {
        const std::int64_t h = m_.hidden, f = m_.ffn_hidden, qkv = q_width(m_) + 2 * kv_width(m_);
        const bool glu = gated(m_.ffn);
        if (m_.layer_is_moe(l)) {  // Megatron-Core's router and grouped experts: no biases
            const std::int64_t E = m_.moe->experts, fe = m_.moe->expert_ffn_hidden > 0 ? m_.moe->expert_ffn_hidden : f;
            add("experts.fc2.weight", l, chunk, E * h, fe, ParamSplit::expert_cols, true, false, false, true);
            add("experts.fc1.weight", l, chunk, E * (glu ? 2 : 1) * fe, h, ParamSplit::expert_rows, true, false, false, true);
            // Under SP each TP rank routes its own tokens: the router's gradient is summed over TP
            // (Megatron-Core marks its weight sequence_parallel). A round-robin gate has none.
            if (m_.moe->has_router()) add("router.weight", l, chunk, E, h, ParamSplit::replicated, true, true);
            if (const std::int64_t fs = m_.moe->shared_experts * fe; fs > 0) {  // an MLP of shared x fe
                add("shared.fc2.weight", l, chunk, h, fs, ParamSplit::cols, true);
                add("shared.fc1.weight", l, chunk, (glu ? 2 : 1) * fs, h, glu ? ParamSplit::gated_rows : ParamSplit::rows, true);
            }
        } else {
            mlp(l, chunk, h, f, glu);
        }
        norm("ln2.weight", "ln2.bias", l, chunk);
        if (m_.mla) {
            mla(l, chunk, h);
            norm("ln1.weight", "ln1.bias", l, chunk);
            return;
        }
        if (m_.linear_bias) add("proj.bias", l, chunk, 1, h, ParamSplit::replicated, false, true);
        add("proj.weight", l, chunk, h, q_width(m_), ParamSplit::cols, true);
        if (m_.qk_norm) {
            // One weight of head_dim each, shared by the heads: a TP rank's heads give part of its
            // gradient, summed over TP like the sequence-parallel norms' (Megatron-Core's
            // _allreduce_layernorm_grads runs for qk_layernorm too).
            const std::int64_t hd = head_dim_of(m_);
            auto per_head = [&](const char* name) {
                add(name, l, chunk, 1, hd, ParamSplit::replicated, false);
                out_.entries.back().sequence_parallel = p_.tp > 1;
            };
            if (m_.norm == NormKind::layernorm) per_head("k_norm.bias");
            per_head("k_norm.weight");
            if (m_.norm == NormKind::layernorm) per_head("q_norm.bias");
            per_head("q_norm.weight");
        }
        if (m_.linear_bias || m_.qkv_bias) add("qkv.bias", l, chunk, 1, qkv, ParamSplit::qkv_rows, false);
        add("qkv.weight", l, chunk, qkv, h, ParamSplit::qkv_rows, true);
        norm("ln1.weight", "ln1.bias", l, chunk);
    }

    // Multi-head latent attention (RMSNorm, no biases: dataflow_unsupported): the up-projections
    // split over TP by heads (a head's rows contiguous: qk for the query, nope then v for the
    // key/value), the down-projections and latent norms replicated, and under SP applied to each
    // rank's own tokens, so their gradients are summed over TP like the norms'.
    void mla(int l, int chunk, std::int64_t h) {
        const MlaSpec& a = *m_.mla;
        const std::int64_t heads = m_.heads, qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
        add("proj.weight", l, chunk, h, heads * a.v_head_dim, ParamSplit::cols, true);
        add("kv_up.weight", l, chunk, heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank, ParamSplit::rows, true);
        add("kv_latent_norm.weight", l, chunk, 1, a.kv_lora_rank, ParamSplit::replicated, false, true);
        add("kv_down.weight", l, chunk, a.kv_lora_rank + a.qk_rope_head_dim, h, ParamSplit::replicated, true, true);
        if (a.q_lora_rank > 0) {
            add("q_up.weight", l, chunk, heads * qk, a.q_lora_rank, ParamSplit::rows, true);
            add("q_latent_norm.weight", l, chunk, 1, a.q_lora_rank, ParamSplit::replicated, false, true);
            add("q_down.weight", l, chunk, a.q_lora_rank, h, ParamSplit::replicated, true, true);
        } else {
            add("q.weight", l, chunk, heads * qk, h, ParamSplit::rows, true);
        }
    }

    void mlp(int l, int chunk, std::int64_t h, std::int64_t f, bool glu) {
        if (m_.linear_bias) add("fc2.bias", l, chunk, 1, h, ParamSplit::replicated, false, true);
        add("fc2.weight", l, chunk, h, f, ParamSplit::cols, true);
        if (m_.linear_bias) add("fc1.bias", l, chunk, 1, (glu ? 2 : 1) * f, glu ? ParamSplit::gated_rows : ParamSplit::rows, false);
        add("fc1.weight", l, chunk, (glu ? 2 : 1) * f, h, glu ? ParamSplit::gated_rows : ParamSplit::rows, true);
    }

private:
    const ModelSpec& m_;
    const PlanSpec& p_;
    ParamLayout& out_;
};

}  // namespace

ParamLayout param_layout(const ModelSpec& m, const PlanSpec& p, int stage) {
    STRATA_ASSERT(dataflow_unsupported(m, p).empty(), "param_layout: model or plan outside the dataflow lowering");
    ParamLayout L;
    LayoutBuilder b(m, p, L);
    const std::int64_t vocab = padded_vocab(m, p);
    const int pp = std::max(1, p.pp), vpp = std::max(1, p.vpp), vlast = pp * vpp - 1;
    const std::vector<int> vsize = virtual_stage_layers(m, p);
    for (int c = 0; c < vpp; ++c) {
        const int v = virtual_stage_of(p, stage, c);
        int first = 0;
        for (int u = 0; u < v; ++u) first += vsize[static_cast<std::size_t>(u)];
        const int count = vsize[static_cast<std::size_t>(v)];
        // The experts added since `start` (an MoE layer's, or the MTP modules'): a unit of the
        // expert buffer (its offset made absolute by finish()).
        auto grad_unit = [&](int layer, bool head, bool emb, std::int64_t start, std::int64_t end) {
            GradUnit g;
            g.chunk = c;
            g.layer = layer;
            g.head = head;
            g.embedding = emb;
            g.offset = start;
            g.count = end - start;
            return g;
        };
        auto expert_unit = [&](int layer, bool head, std::int64_t start) {
            if (L.expert_elements > start) L.expert_units.push_back(grad_unit(layer, head, false, start, L.expert_elements));
        };
        auto unit = [&](int layer, bool head, bool emb, std::int64_t start) {
            L.units.push_back(grad_unit(layer, head, emb, start, L.dense_elements));
        };
        // The shared word table (tied, pp > 1) is a unit of its own on both ends: under the
        // distributed optimizer it gets its own bucket (lower's build_buckets).
        const bool shared = head_stage_embedding_copy(m, p);
        if (v == vlast) {
            const std::int64_t start = L.dense_elements;
            b.norm("final_norm.weight", "final_norm.bias", -1, c);
            if (!m.tied_embeddings) b.add("lm_head.weight", -1, c, vocab, m.hidden, ParamSplit::rows, true);
            // The MTP modules (their layers' experts in the expert buffer): part of the head's unit.
            const std::int64_t expert_start = L.expert_elements;
            for (int k = m.mtp_depth; k >= 1; --k) {
                const int lk = mtp_layer_id(m, k);
                b.norm("mtp.final_norm.weight", "mtp.final_norm.bias", lk, c);
                b.layer(lk, c);
                b.add("mtp.eh_proj.weight", lk, c, m.hidden, 2 * m.hidden, ParamSplit::rows, true);
                b.norm("mtp.hnorm.weight", "mtp.hnorm.bias", lk, c);
                b.norm("mtp.enorm.weight", "mtp.enorm.bias", lk, c);
            }
            unit(-1, true, false, start);
            expert_unit(-1, true, expert_start);
            if (shared) {
                const std::int64_t t = L.dense_elements;
                b.add("word_embedding.weight", -1, c, vocab, m.hidden, ParamSplit::rows, true, false, true);
                unit(-1, true, false, t);
            }
        }
        for (int l = first + count - 1; l >= first; --l) {
            const std::int64_t start = L.dense_elements, expert_start = L.expert_elements;
            b.layer(l, c);
            unit(l, false, false, start);
            expert_unit(l, false, expert_start);
        }
        if (v == 0) {
            const std::int64_t start = L.dense_elements;
            if (m.position == PositionKind::learned)
                b.add("position_embedding.weight", -1, c, m.max_position > 0 ? m.max_position : m.seq_len, m.hidden,
                      ParamSplit::replicated, false);
            if (shared && L.dense_elements > start) unit(-1, false, true, start);
            const std::int64_t t = shared ? L.dense_elements : start;
            b.add("word_embedding.weight", -1, c, vocab, m.hidden, ParamSplit::rows, true, false, shared);
            unit(-1, false, true, t);
        }
    }
    b.finish();
    return L;
}

std::string dataflow_unsupported(const ModelSpec& m, const PlanSpec& p) {
    auto n = [](const char* field, const std::string& value) { return std::string(field) + " = " + value; };
    if (m.is_moe()) {
        // Routed experts spread over EP ranks (all-to-all dispatch), without TP: their own buffer,
        // reduced over the expert-data-parallel group like Megatron-Core's.
        const MoeSpec& e = *m.moe;
        if (e.experts % p.ep != 0) return n("plan.ep", std::to_string(p.ep)) + ": must divide model.moe.experts";
        if (p.tp > 1 && !p.sequence_parallel)
            return n("plan.tp", std::to_string(p.tp)) + ": MoE layers under TP need plan.sequence_parallel (as Megatron-Core does)";
        if (p.etp() > 1 && p.tp == 1)
            return n("plan.expert_tp", std::to_string(p.etp())) + ": experts split over an expert-TP group need TP with sequence "
                   "parallelism (the lowering gathers the group's rows under SP)";
        const std::int64_t fe = e.expert_ffn_hidden > 0 ? e.expert_ffn_hidden : m.ffn_hidden;
        if (fe % p.etp() != 0)
            return n("model.moe.expert_ffn_hidden", std::to_string(fe)) + ": must be a multiple of plan.expert_tp = " + std::to_string(p.etp());
        if (p.tp > 1 && e.shared_experts > 0 && (e.shared_experts * fe) % p.tp != 0)
            return n("model.moe.shared_experts", std::to_string(e.shared_experts)) + ": the shared experts' width must be a multiple of plan.tp";
        if (e.top_k < 1 || e.top_k > e.experts)
            return n("model.moe.top_k", std::to_string(e.top_k)) + ": must be between 1 and model.moe.experts";
    }
    if (m.mla) {
        // DeepSeek's shape of it: RMSNorm, RoPE on the decoupled key, no biases.
        if (m.norm != NormKind::rmsnorm) return "model.mla with model.norm = layernorm: MLA's latent norms are executed as RMSNorm";
        if (m.position != PositionKind::rope) return "model.mla: its decoupled key is rotated (RoPE); set model.position = rope";
        if (m.linear_bias || m.qkv_bias) return "model.mla with linear or QKV biases: MLA's projections are executed without biases";
        if (m.qk_norm) return "model.mla with model.qk_norm: MLA normalises its latents, not per-head queries and keys";
        if (m.mla->q_lora_rank == 0 && p.recompute == Recompute::selective && p.recomputes(RecomputeModule::mla_up_proj))
            return "plan.recompute_modules mla_up_proj without model.mla.q_lora_rank: the query projection reads the hidden "
                   "states, outside the up-projections' checkpoint (not executed)";
    }
    if (m.mtp_depth > 0) {
        // Megatron-Core's MTP (DeepSeek-V3): the shifted tokens' embedding rows and RoPE; a module's
        // layer is lowered under its own layer number (mtp_layer_id), which must be of the last
        // layer's kind.
        const std::string f = n("model.mtp_depth", std::to_string(m.mtp_depth));
        if (m.position != PositionKind::rope) return f + " with learned positions: the MTP modules are executed with RoPE";
        if (m.norm != NormKind::rmsnorm) return f + " with LayerNorm: the MTP modules' norms are executed as RMSNorm";
        if (m.dropout > 0) return f + " with model.dropout: MTP modules with dropout are not executed";
        for (int k = 1; k <= m.mtp_depth; ++k)
            if (m.layer_is_moe(mtp_layer_id(m, k)) != m.layer_is_moe(mtp_layer_kind(m)) ||
                m.window_of(mtp_layer_id(m, k)) != m.window_of(mtp_layer_kind(m)))
                return f + ": an MTP module's layer is built like the last layer, which this model's layer pattern does not give it";
    }
    if (p.cp > 1 && m.seq_len % (2 * p.cp) != 0)
        return n("plan.cp", std::to_string(p.cp)) + ": model.seq_len = " + std::to_string(m.seq_len) +
               " must split into 2 x cp equal chunks (the load-balanced layout context parallelism runs)";
    if (!p.offload.grads.all_gpu()) {
        // Executed as DeepSpeed streams them (PlanSpec::streams_grads_to_host, the lowering's
        // grads_to_host); what the data-parallel reduction's aftermath needs on the GPU is not.
        const std::string f = "plan.offload.grads: gradients homed in host memory ";
        if (!p.streams_grads_to_host())
            return f + "are executed as DeepSpeed's optimizer offload streams them: wholly \"cpu\", under ZeRO-2/3, with the optimizer "
                       "wholly off the GPU and without the lock-free update; plan.offload.grads = \"gpu\" runs the plan with them on "
                       "the GPU (the optimizer offload of Megatron-Core)";
        if (p.pp > 1) return f + "with plan.pp > 1 are not executed (DeepSpeed's pipeline engine runs ZeRO-1)";
        if (p.tp > 1 && (p.sequence_parallel || m.qk_norm || m.mla))
            return f + "with plan.tp > 1 and replicated norms (sequence parallelism, QK-norm, MLA) are not executed: their TP sum "
                       "follows the data-parallel reduction, on the GPU";
    }
    if (!p.offload.activations.all_gpu()) {
        if (p.offload.activations.cpu < 1.0)
            return "plan.offload.activations: activations offloaded wholly to host memory (\"cpu\", DeepSpeed's cpu_checkpointing) are "
                   "executed; a share kept on the GPU or on the SSD is not executed yet";
    }
    if (!p.offload.params.all_gpu()) {
        const TierSplit& pf = p.offload.params;
        // A share kept on the GPU: layer units homed wholly on one side (the lowering's
        // build_resident_units), the host homing every unit.
        if (pf.ssd > 0 && pf.ssd < 1.0)
            return "plan.offload.params: parameters homed wholly on the SSD (\"ssd\"), in host memory (\"cpu\") or split "
                   "between the GPU and host memory are executed; a share on the SSD beside another tier is not executed yet";
        if (pf.ssd >= 1.0) {
            // ZeRO-Infinity with offload_param and offload_optimizer both on NVMe: each sub-group's
            // update writes its 2-byte weights back to the file (stage3.py's swap-out per sub-group).
            if (p.offload.optimizer.ssd < 1.0)
                return "plan.offload.params = ssd: needs plan.offload.optimizer wholly on the SSD too (ZeRO-Infinity's NVMe "
                       "offload of both; the weights go back to the file a sub-group at a time)";
            if (p.precision == Precision::fp32)
                return "plan.offload.params = ssd with plan.precision = fp32: the SSD file holds 2-byte weights beside the fp32 "
                       "master (set bf16 or fp16)";
            if (p.lock_free_update) return "plan.offload.params = ssd with plan.lock_free_update: the delayed update is not executed there";
        }
        if (p.offload.optimizer.gpu > 0)
            return std::string("plan.offload.params = ") + (pf.ssd >= 1.0 ? "ssd" : "cpu") +
                   ": needs plan.offload.optimizer wholly off the GPU (the update runs where the parameters live)";
        if (p.dp * p.cp > 1 && p.zero_stage != 3)
            return std::string("plan.offload.params = ") + (pf.ssd >= 1.0 ? "ssd" : "cpu") + " with dp x cp = " + std::to_string(p.dp * p.cp) +
                   ": data-parallel ranks home their shard of the parameters off the GPU under ZeRO-3 (offload_param); "
                   "set plan.zero_stage = 3";
    }
    if (p.lock_free_update && !p.offload.params.all_gpu() && (p.precision == Precision::fp32 || p.offload.optimizer.ssd > 0))
        return "plan.lock_free_update = true with plan.offload.params on the host: executed in bf16 with the optimizer in host "
               "memory (the delayed update writes the fp32 master, published to the weights at the step's end); in fp32, "
               "or with the optimizer on SSD, it would need a second copy of the weights";
    if (p.p2p_scatter_gather && p.tp > 1 && p.sequence_parallel)
        return "plan.p2p_scatter_gather = true with plan.sequence_parallel: a sequence shard split again over TP is not executed "
               "(Megatron-Core turns the scatter/gather off under sequence parallelism)";
    if (p.p2p_scatter_gather && p.tp > 1 && (static_cast<std::int64_t>(p.micro_batch) * m.seq_len / std::max(1, p.cp)) % p.tp != 0)
        return "plan.p2p_scatter_gather = true: micro_batch x seq_len / cp must be a multiple of plan.tp (each TP rank sends 1/tp of the rows)";
    // Each dense tensor is gathered and reduced on its own (zero3_pieces.cpp); the experts' buffer
    // has no per-tensor pieces.
    if (p.zero3_param_sync && p.zero_stage == 3 && m.moe)
        return "plan.zero3_param_sync = true with MoE layers: DeepSpeed 2021's per-parameter ZeRO-3 calls are executed for "
               "dense layers; the experts' buffer is not cut per tensor";
    const std::int64_t tp = p.tp;
    if (m.ffn_hidden % tp != 0) return n("model.ffn_hidden", std::to_string(m.ffn_hidden)) + ": must be a multiple of plan.tp = " + std::to_string(tp);
    if (m.heads % tp != 0 || (m.kv_heads > 0 ? m.kv_heads : m.heads) % tp != 0)
        return "model.heads / model.kv_heads: must be multiples of plan.tp = " + std::to_string(tp);
    if (p.sequence_parallel && tp > 1 && (static_cast<std::int64_t>(p.micro_batch) * m.seq_len) % tp != 0)
        return "plan.sequence_parallel: micro_batch x seq_len must be a multiple of plan.tp";
    return {};
}

}  // namespace strata::sim
