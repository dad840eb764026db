// Strict JSON readers for ModelSpec, ClusterSpec, PlanSpec and Scenario (the file formats of
// docs/formats.md). Every field is range-checked here and every error names the file, the JSON
// path and the rule; unknown keys are rejected with a did-you-mean. Cross-checks between model,
// cluster and plan live in spec_io_validate.cpp; writing lives in spec_io_write.cpp.
#include <climits>
#include <cmath>
#include <algorithm>
#include <filesystem>
#include <set>

#include "strata/common/json_reader.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/lowering/frameworks.hpp"
#include "plan_knobs_io.hpp"
#include "readers.hpp"

namespace strata::sim {

namespace {

using nlohmann::json;
using namespace spec_readers;

// parse_json_text reports syntax errors; nlohmann also throws other exceptions for well-formed text
// it cannot represent (out_of_range 406: a number beyond double range, found by fuzz_plan). Those
// are bad input too.
json parse(const std::string& text, const std::string& file) {
    try {
        return parse_json_text(text, file);
    } catch (const nlohmann::json::exception& e) {
        throw InputError(file, "", std::string("is not valid JSON: ") + e.what());
    }
}

// A file may hold the object itself or wrap it: {"model": {...}}.
const json& unwrap(const json& j, const char* key) {
    if (j.is_object() && j.size() == 1 && j.contains(key) && j.at(key).is_object()) return j.at(key);
    return j;
}

// ---- model ----

// Group-limited routing: both fields or neither; the groups split the experts evenly, a token
// picks from 1..groups of them, and those groups must hold at least top_k experts (Megatron's
// group-limited top-k selects top_k among group_topk x experts/groups candidates).
void read_router_groups(JsonReader& r, MoeSpec& m) {
    const bool has_groups = r.has("router_groups"), has_topk = r.has("router_group_topk");
    m.router_groups = has_groups ? int_in(r, "router_groups", 0, kMaxCount, "0 (no group-limited routing) or a positive number of groups") : (r.get("router_groups"), 0);
    m.router_group_topk = has_topk ? int_in(r, "router_group_topk", 0, kMaxCount, "0 (no group-limited routing) or a positive number of groups") : (r.get("router_group_topk"), 0);
    const std::string g = std::to_string(m.router_groups), t = std::to_string(m.router_group_topk);
    if (m.router_groups == 0) {
        if (m.router_group_topk > 0)
            r.fail("router_group_topk", "= " + t + " needs model.moe.router_groups > 0 (group-limited routing sets both)");
        return;
    }
    if (m.experts % m.router_groups != 0)
        r.fail("router_groups", "= " + g + " does not divide model.moe.experts = " + std::to_string(m.experts));
    if (m.router_group_topk < 1)
        r.fail("router_group_topk", "must be in [1, model.moe.router_groups = " + g + "] with group-limited routing (got " + t + ")");
    if (m.router_group_topk > m.router_groups)
        r.fail("router_group_topk", "= " + t + " exceeds model.moe.router_groups = " + g);
    const std::int64_t candidates = static_cast<std::int64_t>(m.router_group_topk) * (m.experts / m.router_groups);
    if (m.top_k > candidates)
        r.fail("top_k", "= " + std::to_string(m.top_k) + " exceeds the " + std::to_string(candidates) + " experts of the model.moe.router_group_topk = " + t +
                            " groups a token may pick from");
}

MoeSpec read_moe(JsonReader r, int layers) {
    MoeSpec m;
    m.experts = pos_int(r, "experts", kMaxCount);
    m.top_k = pos_int_or(r, "top_k", 1, kMaxCount);
    if (m.top_k > m.experts)
        r.fail("top_k", "= " + std::to_string(m.top_k) + " exceeds moe.experts = " + std::to_string(m.experts));
    m.expert_ffn_hidden = pos_i64_or(r, "expert_ffn_hidden", 0, kMaxFfn);
    m.moe_every = pos_int_or(r, "moe_every", 1, kMaxCount);
    if (m.moe_every > layers)
        r.fail("moe_every", "= " + std::to_string(m.moe_every) + " exceeds model.layers = " + std::to_string(layers) +
                                " (no layer would be MoE)");
    m.shared_experts = nonneg_int_or(r, "shared_experts", 0);
    m.first_k_dense = nonneg_int_or(r, "first_k_dense", 0);
    if (m.first_k_dense >= layers)
        r.fail("first_k_dense", "= " + std::to_string(m.first_k_dense) + " leaves no MoE layer of model.layers = " + std::to_string(layers));
    m.capacity_factor = num_in(r, "capacity_factor", 0.0, 0.0, kHuge, "0 (dropless) or a positive number");
    if (m.capacity_factor > 0 && m.capacity_factor < 1.0)
        r.fail("capacity_factor", "must be 0 (dropless) or at least 1 (got " + describe_json(json(m.capacity_factor)) + ")");
    m.load_skew = num_in(r, "load_skew", 0.0, 0.0, kHuge, "a non-negative number");
    read_router_groups(r, m);
    const std::string routing = r.str_or("routing", "learned");
    if (routing == "round_robin") m.routing = MoeSpec::Routing::round_robin;
    else if (routing != "learned") r.fail("routing", "must be \"learned\" or \"round_robin\" (got \"" + routing + "\")");
    if (m.routing == MoeSpec::Routing::round_robin && m.load_skew > 0)
        r.fail("load_skew", "must be 0 with routing \"round_robin\": that gate balances the experts exactly");
    if (m.routing == MoeSpec::Routing::round_robin && m.router_groups > 0)
        r.fail("routing", "= \"round_robin\" ignores the router: model.moe.router_groups must be 0");
    r.reject_unknown();
    return m;
}

MlaSpec read_mla(JsonReader r) {
    MlaSpec a;
    a.q_lora_rank = r.has("q_lora_rank") ? int_in(r, "q_lora_rank", 0, kMaxWidth, "0 (no query compression) or a positive rank") : (r.get("q_lora_rank"), 0);
    a.kv_lora_rank = pos_i64(r, "kv_lora_rank", kMaxWidth);
    a.qk_nope_head_dim = pos_i64(r, "qk_nope_head_dim", kMaxWidth);
    a.qk_rope_head_dim = pos_i64(r, "qk_rope_head_dim", kMaxWidth);
    a.v_head_dim = pos_i64(r, "v_head_dim", kMaxWidth);
    r.reject_unknown();
    return a;
}

ModelSpec read_model(const json& j, const std::string& file, const std::string& path) {
    JsonReader r(j, file, path);
    ModelSpec m;
    m.name = r.str("name");
    if (m.name.empty()) r.fail("name", "must not be empty");
    m.description = r.str_or("description", "");
    m.layers = pos_int(r, "layers", kMaxCount);
    m.hidden = pos_i64(r, "hidden", kMaxWidth);
    m.heads = pos_int(r, "heads", kMaxCount);
    m.kv_heads = pos_int_or(r, "kv_heads", m.heads, kMaxCount);
    if (m.heads % m.kv_heads != 0)
        r.fail("kv_heads", "= " + std::to_string(m.kv_heads) + " does not divide model.heads = " + std::to_string(m.heads));
    if (r.has("head_dim")) {
        m.head_dim = pos_i64(r, "head_dim", kMaxWidth);
    } else {
        r.get("head_dim");
        if (m.hidden % m.heads != 0)
            r.fail("heads", "= " + std::to_string(m.heads) + " does not divide model.hidden = " + std::to_string(m.hidden) +
                                " (give model.head_dim explicitly)");
        m.head_dim = m.hidden / m.heads;
    }
    const std::string ffn = r.choice_or("ffn", {"gelu", "swiglu", "relu2", "relu", "geglu"}, "gelu");
    m.ffn = ffn == "gelu"     ? FfnKind::gelu
            : ffn == "swiglu" ? FfnKind::swiglu
            : ffn == "relu2"  ? FfnKind::relu2
            : ffn == "relu"   ? FfnKind::relu
                              : FfnKind::geglu;
    // Megatron's default FFN width is 4h (for SwiGLU models the width is always given explicitly).
    m.ffn_hidden = pos_i64_or(r, "ffn_hidden", 4 * m.hidden, kMaxFfn);
    m.vocab = pos_i64(r, "vocab", kMaxVocab);
    m.seq_len = pos_i64(r, "seq_len", kMaxTokens);
    // ALiBi (BLOOM, MPT) has no position table: its bias in the scores costs what "none" costs.
    std::string pos = r.choice_or("position", {"learned", "rope", "none"}, "learned", {{"alibi", "none"}});
    m.position = pos == "learned" ? PositionKind::learned : pos == "rope" ? PositionKind::rope : PositionKind::none;
    m.max_position = pos_i64_or(r, "max_position", m.seq_len, kMaxTokens);
    if (m.position == PositionKind::learned && m.max_position < m.seq_len)
        r.fail("max_position", "= " + std::to_string(m.max_position) + " is shorter than model.seq_len = " +
                                   std::to_string(m.seq_len) + " (a learned position table needs a row per position)");
    m.norm = r.choice_or("norm", {"layernorm", "rmsnorm"}, "layernorm") == "layernorm" ? NormKind::layernorm : NormKind::rmsnorm;
    m.tied_embeddings = r.boolean_or("tied_embeddings", false);
    m.linear_bias = r.boolean_or("linear_bias", false);
    m.qkv_bias = r.boolean_or("qkv_bias", false);
    m.qk_norm = r.boolean_or("qk_norm", false);
    if (r.has("sliding_window")) {
        const json* w = r.get("sliding_window");
        if (!w->is_null()) m.sliding_window = pos_i64(r, "sliding_window", kMaxTokens);
    } else {
        r.get("sliding_window");
    }
    m.window_attn_skip_freq = r.has("window_attn_skip_freq")
                                  ? int_in(r, "window_attn_skip_freq", 0, kMaxCount,
                                           "an integer >= 0 (every N-th layer attends to the whole context; 0: every layer is windowed)")
                                  : (r.get("window_attn_skip_freq"), 0);
    if (m.window_attn_skip_freq > 0 && m.sliding_window == 0)
        r.fail("window_attn_skip_freq", "needs model.sliding_window (the window of the other layers)");
    m.dropout = r.num_or("dropout", 0.0);
    if (!(m.dropout >= 0.0 && m.dropout < 1.0))
        r.fail("dropout", "must be in [0, 1) (got " + describe_json(json(m.dropout)) + ")");
    if (r.has("moe")) m.moe = read_moe(r.object("moe"), m.layers);
    else r.get("moe");
    if (m.is_moe() && m.moe->expert_ffn_hidden == 0) m.moe->expert_ffn_hidden = m.ffn_hidden;
    if (r.has("mla")) {
        m.mla = read_mla(r.object("mla"));
        if (m.kv_heads != m.heads)
            r.fail("kv_heads", "= " + std::to_string(m.kv_heads) + " with model.mla: latent attention has one key and value per head (kv_heads = heads = " +
                                   std::to_string(m.heads) + ")");
        if (m.linear_bias || m.qkv_bias) r.fail("mla", "has no linear biases (model.linear_bias and model.qkv_bias must be false)");
        if (m.qk_norm) r.fail("qk_norm", "must be false with model.mla: latent attention normalises its latents (mla.q_lora_rank, mla.kv_lora_rank), not each head's query and key");
    } else {
        r.get("mla");
    }
    m.mtp_depth = r.has("mtp_depth") ? int_in(r, "mtp_depth", 0, 16, "an integer from 0 (no multi-token prediction) to 16")
                                     : (r.get("mtp_depth"), 0);
    r.reject_unknown();
    return m;
}

// ---- cluster ----

// Optional keys of a run's operations: absent (or null) leaves the planner's default; a value
// outside its range (NaN included) is refused naming the key.
void read_cluster_operations(JsonReader& r, ClusterOperations& o) {
    auto opt = [&](const char* key, double lo, double hi, const char* what, double scale = 1.0) -> std::optional<double> {
        const json* v = r.get(key);
        if (!v || v->is_null()) return std::nullopt;
        return num_in(r, key, 0.0, lo, hi, what) * scale;
    };
    o.interruptions_per_gpu_hour = opt("interruptions_per_gpu_hour", 0.0, 1.0, "a rate in [0, 1] interruptions per GPU-hour");
    o.restart_s = opt("restart_s", 0.0, 1e7, "a non-negative number of seconds");
    o.checkpoint_Bps = opt("checkpoint_gbyte_per_s", 1e-6, 1e9, "a positive number of GB/s", 1e9);
    o.checkpoint_async = r.boolean_or("checkpoint_async", false);
    o.checkpoint_interval_s = opt("checkpoint_interval_s", 1e-3, 1e9, "a positive number of seconds");
    o.pue = opt("pue", 1.0, 10.0, "a power usage effectiveness in [1, 10] (facility power / IT power)");
    o.usd_per_kwh = opt("energy_usd_per_kwh", 0.0, 1e3, "a non-negative number of USD per kWh");
    o.host_power_w = opt("host_power_w_per_node", 0.0, 1e6, "a non-negative number of watts");
    o.network_power_w = opt("network_power_w_per_node", 0.0, 1e6, "a non-negative number of watts");
    o.gpu_power_w = opt("gpu_power_w", 1.0, 1e5, "a positive number of watts");
}

ClusterSpec read_cluster(const json& j, const std::string& file, const std::string& path) {
    JsonReader r(j, file, path);
    ClusterSpec c;
    c.name = r.str("name");
    if (c.name.empty()) r.fail("name", "must not be empty");
    c.description = r.str_or("description", "");
    c.gpu = r.str("gpu");
    if (c.gpu.empty()) r.fail("gpu", "must name a GPU of the hardware database (e.g. \"H100-SXM5-80GB\")");
    c.nodes = pos_int_or(r, "nodes", 1);
    c.gpus_per_node = pos_int_or(r, "gpus_per_node", 8);
    if (static_cast<std::int64_t>(c.nodes) * c.gpus_per_node > INT_MAX)
        r.fail("nodes", "x cluster.gpus_per_node is too large (more than 2^31-1 GPUs)");
    c.node = r.str_or("node", "");
    c.intra_link = r.str_or("intra_link", "");
    c.nic = r.str_or("nic", "");
    c.nics_per_node = nonneg_int_or(r, "nics_per_node", 0);
    // Human unit at the edge: Gbit/s per NIC per direction -> bytes/s.
    c.nic_Bps = num_in(r, "nic_gbit_per_s", 0.0, 0.0, 1e9, "a non-negative number of Gbit/s") * 1e9 / 8.0;
    c.topology = r.choice_or("topology", {"fat-tree", "rail-optimized"}, "rail-optimized") == "fat-tree"
                     ? NetTopology::fat_tree
                     : NetTopology::rail_optimized;
    c.oversubscription = num_in(r, "oversubscription", 1.0, 1.0, 1e6, "at least 1 (1 = non-blocking)");
    c.nodes_per_leaf = pos_int_or(r, "nodes_per_leaf", 32);
    c.gpus_per_pcie_switch = pos_int_or(r, "gpus_per_pcie_switch", 2);
    c.host_dram_bytes = num_in(r, "host_dram_gb", 0.0, 0.0, 1e12, "a non-negative number of GB") * 1e9;
    c.cpu = r.str_or("cpu", "");
    c.ssd = r.str_or("ssd", "");
    c.ssds_per_node = nonneg_int_or(r, "ssds_per_node", 0);
    c.price_per_gpu_hour = num_in(r, "price_per_gpu_hour", 0.0, 0.0, 1e9, "a non-negative number of USD");
    if (const json* sg = r.get("slow_gpus")) {
        const std::string sp = r.child_path("slow_gpus");
        if (!sg->is_array()) throw InputError(file, sp, "must be an array of {\"rank\", \"factor\"} (got " + describe_json(*sg) + ")");
        std::set<int> ranks;
        for (std::size_t i = 0; i < sg->size(); ++i) {
            JsonReader e((*sg)[i], file, sp + "[" + std::to_string(i) + "]");
            int rank = int_in(e, "rank", 0, c.gpu_count() - 1, "a GPU rank in [0, " + std::to_string(c.gpu_count() - 1) + "]");
            double factor = e.num("factor");
            if (!(factor > 0.0 && factor <= 1e6))
                e.fail("factor", "must be a positive slowdown factor (1 = nominal; got " + describe_json(json(factor)) + ")");
            e.reject_unknown();
            if (!ranks.insert(rank).second) e.fail("rank", "= " + std::to_string(rank) + " is listed twice");
            c.slow_gpus.emplace_back(rank, factor);
        }
    }
    read_cluster_operations(r, c.ops);
    r.reject_unknown();
    return c;
}

// ---- plan: the knobs are read by the table in plan_knobs.cpp ----

PlanSpec read_plan_keys(const json& j, const std::string& file, const std::string& path);

/// plan.framework: the preset's knobs fill the keys the plan does not set (they may depend on the
/// stated fields, so the plan is read once without them first), then the plan is read again.
PlanSpec read_plan(const json& j, const std::string& file, const std::string& path) {
    PlanSpec stated = read_plan_keys(j, file, path);
    if (j.is_object())
        for (const auto& [key, value] : j.items()) stated.keys_in_file.push_back(key);
    if (stated.framework.empty()) return stated;
    json merged = j;
    std::vector<std::string> filled;
    for (const FrameworkKnob& k : framework_knobs(stated.framework, stated)) {
        const json value = json::parse(k.value_json);
        if (!merged.contains(k.key)) {
            merged[k.key] = value;
            filled.push_back(k.key);
        } else if (value.is_object() && merged[k.key].is_object()) {
            // An object-valued knob (offload) completes the plan's object: the parts it leaves out.
            bool added = false;
            for (const auto& [part, v] : value.items())
                if (!merged[k.key].contains(part)) {
                    merged[k.key][part] = v;
                    added = true;
                }
            if (added) filled.push_back(k.key);
        }
    }
    PlanSpec p = read_plan_keys(merged, file, path);
    p.keys_in_file = std::move(stated.keys_in_file);
    p.keys_from_preset = std::move(filled);
    return p;
}

PlanSpec read_plan_keys(const json& j, const std::string& file, const std::string& path) {
    JsonReader r(j, file, path);
    PlanSpec p;
    read_plan_knobs(r, p);
    r.reject_unknown();
    return p;
}

std::string parent_dir(const std::string& file) {
    std::filesystem::path p(file);
    return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

// A scenario part: an inline object, or a path (relative to the scenario's folder) to a file that
// holds the object or wraps it.
template <class T, class Fn>
T read_part(JsonReader& r, const std::string& key, const std::string& dir, Fn read) {
    const json* v = r.get(key);
    if (v->is_string()) {
        std::string rel = v->get<std::string>();
        std::filesystem::path full = std::filesystem::path(rel).is_absolute() ? std::filesystem::path(rel)
                                                                               : std::filesystem::path(dir) / rel;
        std::error_code ec;
        if (!std::filesystem::is_regular_file(full, ec))
            r.fail(key, "= \"" + rel + "\" names no file (looked for " + full.string() + ")");
        std::string f = full.lexically_normal().string();
        json j = parse(read_text_file(f), f);
        return read(unwrap(j, key.c_str()), f, key);
    }
    if (!v->is_object()) r.fail(key, "must be an object or a path to a JSON file (got " + describe_json(*v) + ")");
    return read(*v, r.file(), r.child_path(key));
}

}  // namespace

ModelSpec model_from_json_text(const std::string& text, const std::string& file) {
    json j = parse(text, file);
    return read_model(unwrap(j, "model"), file, "model");
}

ClusterSpec cluster_from_json_text(const std::string& text, const std::string& file) {
    json j = parse(text, file);
    return read_cluster(unwrap(j, "cluster"), file, "cluster");
}

PlanSpec plan_from_json_text(const std::string& text, const std::string& file) {
    json j = parse(text, file);
    return read_plan(unwrap(j, "plan"), file, "plan");
}

Scenario scenario_from_json_text(const std::string& text, const std::string& file) {
    json j = parse(text, file);
    JsonReader r(j, file, "");
    const std::string dir = parent_dir(file);
    Scenario s;
    s.name = r.has("name") ? r.str("name") : (r.get("name"), std::filesystem::path(file).stem().string());
    s.description = r.str_or("description", "");
    if (!r.has("model")) r.fail("model", "is required (an object or a path to a model file)");
    if (!r.has("cluster")) r.fail("cluster", "is required (an object or a path to a cluster file)");
    s.model = read_part<ModelSpec>(r, "model", dir, read_model);
    s.cluster = read_part<ClusterSpec>(r, "cluster", dir, read_cluster);
    std::string plan_file = file;
    if (r.has("plan")) {
        const json* pv = r.get("plan");
        if (pv->is_string())
            plan_file = (std::filesystem::path(dir) / pv->get<std::string>()).lexically_normal().string();
        s.plan = read_part<PlanSpec>(r, "plan", dir, read_plan);
    } else {
        r.get("plan");
    }
    r.reject_unknown();
    // A scenario is only useful if its plan fits its model and cluster: check it here, naming the
    // file that holds the plan.
    if (s.plan) {
        derive_unstated_dp(s.cluster, *s.plan);
        validate_plan(s.model, s.cluster, *s.plan, plan_file);
    }
    return s;
}

void derive_unstated_dp(const ClusterSpec& c, PlanSpec& p) {
    if (p.in_file("dp")) return;
    const std::int64_t rest = static_cast<std::int64_t>(p.tp) * p.pp * p.cp;
    const std::int64_t gpus = c.gpu_count();
    if (rest <= 0 || gpus <= 0 || gpus % rest != 0) return;  // validate_plan says why
    p.dp = static_cast<int>(gpus / rest);
}

ModelSpec load_model(const std::string& path) { return model_from_json_text(read_text_file(path), path); }
ClusterSpec load_cluster(const std::string& path) { return cluster_from_json_text(read_text_file(path), path); }
PlanSpec load_plan(const std::string& path) { return plan_from_json_text(read_text_file(path), path); }
Scenario load_scenario(const std::string& path) { return scenario_from_json_text(read_text_file(path), path); }

}  // namespace strata::sim
