// Canonical JSON for the spec value types: every key written, in a fixed order, 2-space indent,
// human units at the edge (Gbit/s, GB, MB) exactly as the readers in spec_io.cpp expect, so that
// parse(to_json(x)) == x. Doubles print in nlohmann's shortest round-trip form (deterministic).
#include "strata/common/json_reader.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/lowering/frameworks.hpp"

#include <algorithm>

namespace strata::sim {

namespace {

using ojson = nlohmann::ordered_json;

ojson model_json(const ModelSpec& m) {
    ojson j;
    j["name"] = m.name;
    j["description"] = m.description;
    j["layers"] = m.layers;
    j["hidden"] = m.hidden;
    j["heads"] = m.heads;
    j["kv_heads"] = m.kv_heads;
    j["head_dim"] = m.head_dim;
    j["ffn_hidden"] = m.ffn_hidden;
    j["ffn"] = to_string(m.ffn);
    j["vocab"] = m.vocab;
    j["seq_len"] = m.seq_len;
    j["max_position"] = m.max_position > 0 ? m.max_position : m.seq_len;
    j["norm"] = to_string(m.norm);
    j["position"] = to_string(m.position);
    j["tied_embeddings"] = m.tied_embeddings;
    j["linear_bias"] = m.linear_bias;
    j["qkv_bias"] = m.qkv_bias;
    if (m.qk_norm) j["qk_norm"] = true;
    j["dropout"] = m.dropout;
    if (m.mtp_depth > 0) j["mtp_depth"] = m.mtp_depth;
    if (m.is_moe()) {
        ojson e;
        e["experts"] = m.moe->experts;
        e["top_k"] = m.moe->top_k;
        e["expert_ffn_hidden"] = m.moe->expert_ffn_hidden > 0 ? m.moe->expert_ffn_hidden : m.ffn_hidden;
        e["moe_every"] = m.moe->moe_every;
        e["shared_experts"] = m.moe->shared_experts;
        e["first_k_dense"] = m.moe->first_k_dense;
        e["capacity_factor"] = m.moe->capacity_factor;
        e["load_skew"] = m.moe->load_skew;
        e["router_groups"] = m.moe->router_groups;
        e["router_group_topk"] = m.moe->router_group_topk;
        j["moe"] = e;
    } else {
        j["moe"] = nullptr;
    }
    if (m.mla) {
        ojson a;
        a["q_lora_rank"] = m.mla->q_lora_rank;
        a["kv_lora_rank"] = m.mla->kv_lora_rank;
        a["qk_nope_head_dim"] = m.mla->qk_nope_head_dim;
        a["qk_rope_head_dim"] = m.mla->qk_rope_head_dim;
        a["v_head_dim"] = m.mla->v_head_dim;
        j["mla"] = a;
    }
    return j;
}

ojson cluster_json(const ClusterSpec& c) {
    ojson j;
    j["name"] = c.name;
    j["description"] = c.description;
    j["gpu"] = c.gpu;
    j["nodes"] = c.nodes;
    j["gpus_per_node"] = c.gpus_per_node;
    j["node"] = c.node;
    j["intra_link"] = c.intra_link;
    j["nic"] = c.nic;
    j["nics_per_node"] = c.nics_per_node;
    j["nic_gbit_per_s"] = c.nic_Bps * 8.0 / 1e9;
    j["topology"] = to_string(c.topology);
    j["oversubscription"] = c.oversubscription;
    j["nodes_per_leaf"] = c.nodes_per_leaf;
    j["gpus_per_pcie_switch"] = c.gpus_per_pcie_switch;
    j["host_dram_gb"] = c.host_dram_bytes / 1e9;
    j["cpu"] = c.cpu;
    j["ssd"] = c.ssd;
    j["ssds_per_node"] = c.ssds_per_node;
    j["price_per_gpu_hour"] = c.price_per_gpu_hour;
    ojson sg = ojson::array();
    for (const auto& [rank, factor] : c.slow_gpus) sg.push_back(ojson{{"rank", rank}, {"factor", factor}});
    j["slow_gpus"] = sg;
    // Operations keys only where given, so a cluster without them is written as before.
    const ClusterOperations& o = c.ops;
    auto put = [&](const char* key, const std::optional<double>& v, double scale = 1.0) {
        if (v) j[key] = *v / scale;
    };
    put("interruptions_per_gpu_hour", o.interruptions_per_gpu_hour);
    put("restart_s", o.restart_s);
    put("checkpoint_gbyte_per_s", o.checkpoint_Bps, 1e9);
    if (o.checkpoint_async) j["checkpoint_async"] = true;
    put("checkpoint_interval_s", o.checkpoint_interval_s);
    put("pue", o.pue);
    put("energy_usd_per_kwh", o.usd_per_kwh);
    put("host_power_w_per_node", o.host_power_w);
    put("network_power_w_per_node", o.network_power_w);
    put("gpu_power_w", o.gpu_power_w);
    return j;
}

// A split wholly on one tier is written as that tier's name; anything else as the fractions.
ojson tier_json(const TierSplit& t) {
    if (t.gpu == 1.0 && t.cpu == 0.0 && t.ssd == 0.0) return "gpu";
    if (t.gpu == 0.0 && t.cpu == 1.0 && t.ssd == 0.0) return "cpu";
    if (t.gpu == 0.0 && t.cpu == 0.0 && t.ssd == 1.0) return "ssd";
    ojson j;
    j["gpu"] = t.gpu;
    j["cpu"] = t.cpu;
    j["ssd"] = t.ssd;
    return j;
}

ojson plan_json(const PlanSpec& p) {
    ojson j;
    j["name"] = p.name;
    j["description"] = p.description;
    // Written with every knob explicit as well: reading it back gives the same plan.
    if (!p.framework.empty()) j["framework"] = p.framework;
    j["tp"] = p.tp;
    j["pp"] = p.pp;
    j["dp"] = p.dp;
    j["cp"] = p.cp;
    j["ep"] = p.ep;
    if (p.expert_tp > 0) j["expert_tp"] = p.expert_tp;
    j["vpp"] = p.vpp;
    if (p.microbatch_group > 0) j["microbatch_group"] = p.microbatch_group;
    j["micro_batch"] = p.micro_batch;
    j["global_batch"] = p.global_batch;
    j["sequence_parallel"] = p.sequence_parallel;
    j["flash_attention"] = p.flash_attention;
    j["attention_kernel"] = to_string(p.attention_kernel);
    j["schedule"] = to_string(p.schedule);
    j["zero_stage"] = p.zero_stage;
    j["recompute"] = to_string(p.recompute);
    j["recompute_layers"] = p.recompute_layers;
    if (p.recompute_every > 0) j["recompute_every"] = p.recompute_every;
    if (p.op_sac()) j["recompute_policy"] = to_string(p.recompute_policy);
    if (p.recompute == Recompute::selective && !p.op_sac()) {
        ojson mods = ojson::array();
        for (const std::string& n : recompute_module_names(p)) mods.push_back(n);
        j["recompute_modules"] = mods;
    }
    j["precision"] = to_string(p.precision);
    if (p.exp_avg_dtype != Precision::fp32) j["exp_avg_dtype"] = to_string(p.exp_avg_dtype);
    if (p.exp_avg_sq_dtype != Precision::fp32) j["exp_avg_sq_dtype"] = to_string(p.exp_avg_sq_dtype);
    // Written when not the default, and always under a framework, whose preset would otherwise
    // supply its own value on reading back.
    const bool preset = !p.framework.empty();
    if (p.fp32_grads || preset) j["fp32_grads"] = p.fp32_grads;
    if (!p.grad_accum_fusion || preset) j["grad_accum_fusion"] = p.grad_accum_fusion;
    if (!p.loss_upcast || preset) j["loss_upcast"] = p.loss_upcast;
    if (p.eager_cross_entropy) j["eager_cross_entropy"] = true;
    ojson o;
    o["optimizer"] = tier_json(p.offload.optimizer);
    o["params"] = tier_json(p.offload.params);
    o["grads"] = tier_json(p.offload.grads);
    o["activations"] = tier_json(p.offload.activations);
    j["offload"] = o;
    j["lock_free_update"] = p.lock_free_update;
    j["overlap_grad_reduce"] = p.overlap_grad_reduce;
    j["overlap_param_gather"] = p.overlap_param_gather;
    j["tp_comm_overlap"] = p.tp_comm_overlap;
    j["p2p_blocking"] = p.p2p_blocking;
    j["p2p_scatter_gather"] = p.p2p_scatter_gather;
    j["expandable_segments"] = p.expandable_segments;
    j["moe_act_fp8_cache"] = p.moe_act_fp8_cache;
    j["moe_a2a_overlap"] = p.moe_a2a_overlap;
    j["moe_dispatcher"] = to_string(p.moe_dispatcher);
    j["moe_probs_at"] = to_string(p.moe_probs_at);
    j["eager_elementwise"] = p.eager_elementwise;
    j["dp_bucket_mb"] = static_cast<double>(p.dp_bucket_bytes) / 1e6;
    ojson ls = ojson::array();
    for (int n : p.layer_split) ls.push_back(n);
    j["layer_split"] = ls;
    if (!p.virtual_layer_split.empty()) {
        ojson vs = ojson::array();
        for (int n : p.virtual_layer_split) vs.push_back(n);
        j["virtual_layer_split"] = vs;
    }
    return j;
}

std::string dump(const ojson& j) { return j.dump(2) + "\n"; }

}  // namespace

std::string to_json_text(const ModelSpec& m) { return dump(model_json(m)); }
std::string to_json_text(const ClusterSpec& c) { return dump(cluster_json(c)); }
std::string to_json_text(const PlanSpec& p) { return dump(plan_json(p)); }

std::vector<PlanValueOrigin> explain_plan(const PlanSpec& p) {
    const auto has = [](const std::vector<std::string>& v, const std::string& k) {
        return std::find(v.begin(), v.end(), k) != v.end();
    };
    const std::vector<FrameworkKnob> knobs = p.framework.empty() ? std::vector<FrameworkKnob>{} : framework_knobs(p.framework, p);
    std::vector<PlanValueOrigin> out;
    const ojson canonical = plan_json(p);
    for (const auto& [key, value] : canonical.items()) {
        std::string origin = "default";
        if (has(p.keys_in_file, key)) {
            origin = "plan";
        } else if (has(p.keys_from_preset, key)) {
            for (const FrameworkKnob& k : knobs)
                if (k.key == key) origin = "framework " + p.framework + ": " + k.source;
        }
        out.push_back({key, value.dump(), origin});
    }
    return out;
}

std::string to_json_text(const Scenario& s) {
    ojson j;
    j["name"] = s.name;
    j["description"] = s.description;
    j["model"] = model_json(s.model);
    j["cluster"] = cluster_json(s.cluster);
    if (s.plan) j["plan"] = plan_json(*s.plan);
    return dump(j);
}

}  // namespace strata::sim
