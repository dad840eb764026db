// Canonical JSON for the spec value types: every key written, in a fixed order, 2-space indent,
// human units at the edge (Gbit/s, GB, MB) exactly as the readers in spec_io.cpp expect, so that
// parse(to_json(x)) == x. Doubles print in nlohmann's shortest round-trip form (deterministic).
#include "strata/common/json_reader.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/lowering/frameworks.hpp"
#include "plan_knobs_io.hpp"

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
    if (m.sliding_window > 0) j["sliding_window"] = m.sliding_window;
    if (m.window_attn_skip_freq > 0) j["window_attn_skip_freq"] = m.window_attn_skip_freq;
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
        if (m.moe->routing == MoeSpec::Routing::round_robin) e["routing"] = "round_robin";
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
ojson plan_json(const PlanSpec& p) { return plan_knobs_json(p); }

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
        if (has(p.keys_in_file, key) && has(p.keys_from_preset, key)) {
            origin = "plan, completed by framework " + p.framework + ": " + framework_knob_source(p.framework, key);
        } else if (has(p.keys_in_file, key)) {
            origin = "plan";
        } else if (has(p.keys_from_preset, key)) {
            for (const FrameworkKnob& k : knobs)
                if (k.key == key) origin = "framework " + p.framework + ": " + k.source;
        } else if (key == "dp" && p.dp != 1) {
            origin = "cluster: its GPUs / (tp x pp x cp)";  // derive_unstated_dp
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
