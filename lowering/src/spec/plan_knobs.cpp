// The plan knob table (plan_knobs.hpp). Rows are in the canonical writer's order; the reader walks
// them in the same order, so a row's cross-checks may read the rows above it (recompute_layers
// reads recompute). Field-level rules live here; rules across model, cluster and plan live in
// validate_plan (spec_io_validate.cpp).
#include "strata/lowering/plan_knobs.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <type_traits>
#include <utility>

#include "plan_knobs_io.hpp"
#include "readers.hpp"
#include "strata/common/error.hpp"
#include "strata/lowering/frameworks.hpp"

namespace strata::sim {

namespace {

using namespace spec_readers;
using ojson = nlohmann::ordered_json;
using i64 = std::int64_t;

enum class Written {
    always,       ///< the plan's shape: every canonical file shows it
    if_changed,   ///< where it differs from the default (or a preset could have set it)
    custom,       ///< by the row's own predicate
};

struct KnobRow {
    const char* key;
    void (*read)(JsonReader&, const char* key, PlanSpec&);
    ojson (*write)(const PlanSpec&);
    void (*encode)(const PlanSpec&, std::vector<i64>&);
    PlanKnobAssign assign;  ///< null: no preset sets it
    Written written;
    bool (*write_if)(const PlanSpec&);  ///< Written::custom only
    std::string samples;                ///< JSON array text
};

const PlanSpec& defaults() {
    static const PlanSpec d;
    return d;
}

template <auto M>
using member_t = std::remove_cvref_t<decltype(std::declval<PlanSpec&>().*M)>;

// ---- generic rows: booleans, integers, enums ----

template <auto M>
void encode_scalar(const PlanSpec& p, std::vector<i64>& k) {
    k.push_back(static_cast<i64>(p.*M));
}
template <auto M>
ojson write_scalar(const PlanSpec& p) {
    return p.*M;
}
template <auto M>
void assign_scalar(PlanSpec& p, const nlohmann::json& v) {
    p.*M = v.get<member_t<M>>();
}

template <auto M>
void read_bool(JsonReader& r, const char* key, PlanSpec& p) {
    p.*M = r.boolean_or(key, defaults().*M);
}
template <auto M>
KnobRow bool_knob(const char* key, Written w) {
    return {key, read_bool<M>, write_scalar<M>, encode_scalar<M>, assign_scalar<M>, w, nullptr, "[false, true]"};
}

template <auto M>
void read_positive(JsonReader& r, const char* key, PlanSpec& p) {
    p.*M = pos_int_or(r, key, defaults().*M);
}
template <auto M>
KnobRow positive_knob(const char* key, const char* samples) {
    return {key, read_positive<M>, write_scalar<M>, encode_scalar<M>, assign_scalar<M>, Written::always, nullptr, samples};
}

/// 0 = unset (a derived default), else a positive integer.
template <auto M>
void read_optional_positive(JsonReader& r, const char* key, PlanSpec& p) {
    p.*M = r.has(key) ? pos_int(r, key) : (r.get(key), 0);
}
template <auto M>
KnobRow optional_positive_knob(const char* key, const char* samples) {
    return {key, read_optional_positive<M>, write_scalar<M>, encode_scalar<M>, assign_scalar<M>, Written::if_changed, nullptr, samples};
}

template <class E>
const std::vector<E>& all_of();
template <>
const std::vector<AttentionKernel>& all_of() {
    static const std::vector<AttentionKernel> v{AttentionKernel::fa3, AttentionKernel::fa2, AttentionKernel::fa1};
    return v;
}
template <>
const std::vector<Schedule>& all_of() {
    static const std::vector<Schedule> v{Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved_1f1b, Schedule::dualpipe_v};
    return v;
}
template <>
const std::vector<Recompute>& all_of() {
    static const std::vector<Recompute> v{Recompute::none, Recompute::selective, Recompute::full};
    return v;
}
template <>
const std::vector<RecomputePolicy>& all_of() {
    static const std::vector<RecomputePolicy> v{RecomputePolicy::modules, RecomputePolicy::op};
    return v;
}
template <>
const std::vector<Precision>& all_of() {
    static const std::vector<Precision> v{Precision::fp32, Precision::bf16, Precision::fp16, Precision::fp8};
    return v;
}
template <>
const std::vector<MoeDispatcher>& all_of() {
    static const std::vector<MoeDispatcher> v{MoeDispatcher::alltoall, MoeDispatcher::deepep};
    return v;
}
template <>
const std::vector<CpCommType>& all_of() {
    static const std::vector<CpCommType> v{CpCommType::p2p, CpCommType::a2a, CpCommType::allgather};
    return v;
}
template <>
const std::vector<MoeProbsAt>& all_of() {
    static const std::vector<MoeProbsAt> v{MoeProbsAt::fc2_input, MoeProbsAt::fc2_output};
    return v;
}

template <class E>
std::vector<std::string> names_of() {
    std::vector<std::string> out;
    for (E e : all_of<E>()) out.emplace_back(to_string(e));
    return out;
}

// Names users copy from other tools: PyTorch's dtype names; Megatron's --virtual-pipeline wording.
template <class E>
JsonReader::Aliases aliases_of() {
    return {};
}
template <>
JsonReader::Aliases aliases_of<Precision>() {
    return {{"bfloat16", "bf16"}, {"float16", "fp16"}, {"half", "fp16"}, {"float32", "fp32"}, {"float", "fp32"}};
}
template <>
JsonReader::Aliases aliases_of<Schedule>() {
    return {{"interleaved", "interleaved-1f1b"}, {"interleaved_1f1b", "interleaved-1f1b"}};
}

// Megatron-Core's --cp-comm-type spells the gather "all_gather"; the ring and Ulysses by name.
template <>
JsonReader::Aliases aliases_of<CpCommType>() {
    return {{"all_gather", "allgather"}, {"ring", "p2p"}, {"ulysses", "a2a"}};
}

template <class E>
E enum_named(const std::string& s) {
    for (E e : all_of<E>())
        if (s == to_string(e)) return e;
    return all_of<E>().front();  // unreachable after a choice check; presets are tested
}

template <auto M>
void read_enum(JsonReader& r, const char* key, PlanSpec& p) {
    using E = member_t<M>;
    p.*M = enum_named<E>(r.choice_or(key, names_of<E>(), to_string(defaults().*M), aliases_of<E>()));
}
template <auto M>
ojson write_enum(const PlanSpec& p) {
    return to_string(p.*M);
}
template <auto M>
void assign_enum(PlanSpec& p, const nlohmann::json& v) {
    p.*M = enum_named<member_t<M>>(v.get<std::string>());
}
template <auto M>
KnobRow enum_knob(const char* key, Written w, bool (*write_if)(const PlanSpec&) = nullptr) {
    std::string samples = "[";
    for (const std::string& n : names_of<member_t<M>>()) samples += (samples.size() > 1 ? ", \"" : "\"") + n + "\"";
    return {key, read_enum<M>, write_enum<M>, encode_scalar<M>, assign_enum<M>, w, write_if, samples + "]"};
}

void encode_text(const std::string& s, std::vector<i64>& k) {
    k.push_back(static_cast<i64>(s.size()));
    k.push_back(static_cast<i64>(std::hash<std::string>{}(s)));
}

void encode_list(const std::vector<int>& v, std::vector<i64>& k) {
    k.push_back(static_cast<i64>(v.size()));
    k.insert(k.end(), v.begin(), v.end());
}

ojson list_json(const std::vector<int>& v) {
    ojson a = ojson::array();
    for (int n : v) a.push_back(n);
    return a;
}

// ---- rows with rules of their own ----

template <auto M>
void read_text(JsonReader& r, const char* key, PlanSpec& p) {
    p.*M = r.str_or(key, "");
}

void read_framework(JsonReader& r, const char* key, PlanSpec& p) {
    if (const nlohmann::json* f = r.get(key)) {
        if (!f->is_string() || canonical_framework(f->get<std::string>()).empty())
            r.fail(key, "must be one of " + framework_choices() + " (got " + describe_json(*f) + ")");
        p.framework = canonical_framework(f->get<std::string>());
    }
}

void read_batch(JsonReader& r, const char* key, PlanSpec& p) {
    if (std::string_view(key) == "micro_batch")
        p.micro_batch = pos_int_or(r, key, 1, kMaxGlobalBatch);
    else
        p.global_batch = pos_int(r, key, kMaxGlobalBatch);  // required: nothing sensible to assume
}

void read_zero(JsonReader& r, const char* key, PlanSpec& p) {
    p.zero_stage = r.has(key) ? int_in(r, key, 0, 3, "0, 1, 2 or 3") : (r.get(key), 0);
}

void read_recompute_layers(JsonReader& r, const char* key, PlanSpec& p) {
    p.recompute_layers = r.has(key) ? int_in(r, key, -1, INT_MAX, "-1 (all) or a non-negative integer") : (r.get(key), -1);
    if (p.recompute_layers != -1 && p.recompute != Recompute::full)
        r.fail(key, "= " + std::to_string(p.recompute_layers) + " needs plan.recompute = \"full\" (got \"" + to_string(p.recompute) + "\")");
}

// torchtitan's layer-level selective checkpointing (docs/formats.md).
void read_recompute_every(JsonReader& r, const char* key, PlanSpec& p) {
    p.recompute_every = r.has(key) ? int_in(r, key, 1, INT_MAX, "a positive integer") : (r.get(key), 0);
    if (p.recompute_every > 0 && (p.recompute != Recompute::full || p.recompute_layers != -1))
        r.fail(key, "needs plan.recompute = \"full\" without recompute_layers");
}

// torchtitan's op-level selective checkpointing.
void read_recompute_policy(JsonReader& r, const char* key, PlanSpec& p) {
    read_enum<&PlanSpec::recompute_policy>(r, key, p);
    if (p.recompute_policy == RecomputePolicy::op && (p.recompute != Recompute::selective || r.get("recompute_modules")))
        r.fail(key, "= \"op\" needs plan.recompute = \"selective\" and no recompute_modules");
}

// Megatron's --recompute-modules: names, each once; only with selective granularity.
void read_recompute_modules(JsonReader& r, const char* key, PlanSpec& p) {
    const nlohmann::json* rm = r.get(key);
    if (!rm) return;
    const std::string mp = r.child_path(key);
    if (p.recompute != Recompute::selective)
        throw InputError(r.file(), mp, std::string("needs plan.recompute = \"selective\" (got \"") + to_string(p.recompute) + "\")");
    if (!rm->is_array() || rm->empty())
        throw InputError(r.file(), mp, "must be a non-empty array of module names (got " + describe_json(*rm) + ")");
    p.recompute_modules = 0;
    for (std::size_t i = 0; i < rm->size(); ++i) {
        const nlohmann::json& e = (*rm)[i];
        const std::string ep = mp + "[" + std::to_string(i) + "]";
        RecomputeModule mod{};
        if (!e.is_string() || !recompute_module_from(e.get<std::string>(), mod))
            throw InputError(r.file(), ep, "must be one of " + recompute_module_choices() + " (got " + describe_json(e) + ")");
        const unsigned bit = recompute_bit(mod);
        if (p.recompute_modules & bit) throw InputError(r.file(), ep, "names " + describe_json(e) + " twice");
        p.recompute_modules |= bit;
    }
}

ojson write_recompute_modules(const PlanSpec& p) {
    ojson mods = ojson::array();
    for (const std::string& n : recompute_module_names(p)) mods.push_back(n);
    return mods;
}

// Precision-aware optimizer: Adam's moments in a narrower type (Megatron --exp-avg[-sq]-dtype),
// only under mixed precision (checked once both are read).
void read_moment_dtype(JsonReader& r, const char* key, PlanSpec& p) {
    const bool second = std::string_view(key) == "exp_avg_sq_dtype";
    (second ? p.exp_avg_sq_dtype : p.exp_avg_dtype) = enum_named<Precision>(r.choice_or(key, names_of<Precision>(), "fp32"));
    if (second && p.precision == Precision::fp32 && (p.exp_avg_dtype != Precision::fp32 || p.exp_avg_sq_dtype != Precision::fp32))
        r.fail(p.exp_avg_dtype != Precision::fp32 ? "exp_avg_dtype" : "exp_avg_sq_dtype",
               "needs mixed precision: with plan.precision = \"fp32\" the optimizer works on the fp32 weights themselves");
}

void read_fp32_grads(JsonReader& r, const char* key, PlanSpec& p) {
    p.fp32_grads = r.boolean_or(key, false);
    if (p.precision == Precision::fp32 && p.fp32_grads)
        r.fail(key, "needs mixed precision: with plan.precision = \"fp32\" the gradients are fp32 already");
}

void read_master_weights(JsonReader& r, const char* key, PlanSpec& p) {
    p.master_weights = r.boolean_or(key, true);
    if (p.precision == Precision::fp32 && !p.master_weights)
        r.fail(key, "= false needs 16-bit precision: with plan.precision = \"fp32\" the weights are their own master");
}

TierSplit read_tier_split(JsonReader& parent, const std::string& key) {
    TierSplit t;
    const nlohmann::json* v = parent.get(key);
    if (!v) return t;
    if (v->is_string()) {
        std::string s = v->get<std::string>();
        // DeepSpeed's own words read as well (offload_optimizer.device: "none", "cpu", "nvme").
        if (s == "gpu" || s == "none") return t;
        if (s == "cpu") return TierSplit{0.0, 1.0, 0.0};
        if (s == "ssd" || s == "nvme") return TierSplit{0.0, 0.0, 1.0};
        parent.fail(key, "= \"" + s + "\" is not one of: gpu, cpu, ssd, or an object {\"gpu\": f, \"cpu\": f, \"ssd\": f} "
                              "(DeepSpeed's none and nvme read as gpu and ssd)");
    }
    if (!v->is_object()) parent.fail(key, "must be \"gpu\", \"cpu\", \"ssd\" or an object of tier fractions (got " + describe_json(*v) + ")");
    JsonReader r = parent.object(key);
    t.gpu = num_in(r, "gpu", 0.0, 0.0, 1.0, "a fraction in [0, 1]");
    t.cpu = num_in(r, "cpu", 0.0, 0.0, 1.0, "a fraction in [0, 1]");
    t.ssd = num_in(r, "ssd", 0.0, 0.0, 1.0, "a fraction in [0, 1]");
    r.reject_unknown();
    double sum = t.gpu + t.cpu + t.ssd;
    if (std::fabs(sum - 1.0) > 1e-6) r.fail("", "tier fractions gpu + cpu + ssd = " + describe_json(nlohmann::json(sum)) + " must sum to 1");
    return t;
}

// The tiers of model states and activations (ZeRO-Offload / ZeRO-Infinity, Angel-PTM).
constexpr std::pair<const char*, TierSplit OffloadSpec::*> kOffloadParts[] = {
    {"optimizer", &OffloadSpec::optimizer}, {"params", &OffloadSpec::params}, {"grads", &OffloadSpec::grads}, {"activations", &OffloadSpec::activations}};

void read_offload(JsonReader& r, const char* key, PlanSpec& p) {
    if (!r.has(key)) {
        r.get(key);
        return;
    }
    JsonReader o = r.object(key);
    for (const auto& [part, member] : kOffloadParts) p.offload.*member = read_tier_split(o, part);
    o.reject_unknown();
}

// A preset's assignment: the whole object (apply_framework merges a preset's parts into the
// plan's current value first), read as a plan file's would be.
void assign_offload(PlanSpec& p, const nlohmann::json& v) {
    const nlohmann::json wrapped{{"offload", v}};
    JsonReader r(wrapped, "preset", "plan");
    read_offload(r, "offload", p);
}

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

ojson write_offload(const PlanSpec& p) {
    ojson o;
    for (const auto& [part, member] : kOffloadParts) o[part] = tier_json(p.offload.*member);
    return o;
}

void encode_offload(const PlanSpec& p, std::vector<i64>& k) {
    for (const auto& [part, member] : kOffloadParts) {
        const TierSplit& t = p.offload.*member;
        for (double f : {t.gpu, t.cpu, t.ssd}) k.push_back(std::bit_cast<i64>(f));
    }
}

// Human unit at the edge: MB (1e6 bytes, as Megatron's --ddp-bucket-size counts) -> bytes.
void read_bucket(JsonReader& r, const char* key, PlanSpec& p) {
    const double mb = num_in(r, key, 40.0, 1e-6, 1e9, "a positive number of MB");
    p.dp_bucket_bytes = std::llround(mb * 1e6);
    if (p.dp_bucket_bytes < 1) r.fail(key, "must be at least one byte");
}

// [] (or absent) = an even split. Per pipeline stage each count is at least 1; per virtual stage 0
// is allowed (a stage of only the embedding, or of MTP and the loss).
std::vector<int> read_layer_counts(JsonReader& r, const char* key, int min, const char* per) {
    std::vector<int> out;
    const nlohmann::json* a = r.get(key);
    if (!a) return out;
    const std::string at = r.child_path(key);
    if (!a->is_array()) throw InputError(r.file(), at, std::string("must be an array of layer counts, one per ") + per + " (got " + describe_json(*a) + ")");
    for (std::size_t i = 0; i < a->size(); ++i) {
        const nlohmann::json& e = (*a)[i];
        // Integers may be written 8 or 8.0, as everywhere else.
        const double d = e.is_number() ? e.get<double>() : -1.0;
        if (!e.is_number() || !(d >= min && d <= static_cast<double>(kMaxCount)) || d != std::floor(d))
            throw InputError(r.file(), at + "[" + std::to_string(i) + "]",
                             std::string(min >= 1 ? "must be a positive integer" : "must be a non-negative integer") + " (got " + describe_json(e) + ")");
        out.push_back(static_cast<int>(d));
    }
    return out;
}

const std::vector<KnobRow>& table() {
    static const std::vector<KnobRow> rows = [] {
        using P = PlanSpec;
        const auto nothing = [](const PlanSpec&, std::vector<i64>&) {};
        std::vector<KnobRow> t;
        t.push_back({"name", read_text<&P::name>, write_scalar<&P::name>, nothing, nullptr, Written::always, nullptr, "[\"a\"]"});
        t.push_back({"description", read_text<&P::description>, write_scalar<&P::description>, nothing, nullptr, Written::always, nullptr, "[\"a\"]"});
        t.push_back({"framework", read_framework, [](const P& p) -> ojson { return p.framework; },
                     [](const P& p, std::vector<i64>& k) { encode_text(p.framework, k); }, nullptr, Written::custom,
                     [](const P& p) { return !p.framework.empty(); }, "[\"megatron-core\", \"torchtitan\", \"deepspeed\"]"});
        t.push_back(positive_knob<&P::tp>("tp", "[1, 2, 4]"));
        t.push_back(positive_knob<&P::pp>("pp", "[1, 2, 4]"));
        t.push_back(positive_knob<&P::dp>("dp", "[1, 2, 4]"));
        t.push_back(positive_knob<&P::cp>("cp", "[1, 2]"));
        t.push_back(positive_knob<&P::ep>("ep", "[1, 2, 4]"));
        t.push_back(optional_positive_knob<&P::expert_tp>("expert_tp", "[0, 1, 2]"));
        t.push_back(positive_knob<&P::vpp>("vpp", "[1, 2]"));
        t.push_back(optional_positive_knob<&P::microbatch_group>("microbatch_group", "[0, 4]"));
        t.push_back({"micro_batch", read_batch, write_scalar<&P::micro_batch>, encode_scalar<&P::micro_batch>, nullptr, Written::always, nullptr, "[1, 2]"});
        t.push_back({"global_batch", read_batch, write_scalar<&P::global_batch>, encode_scalar<&P::global_batch>, nullptr, Written::always, nullptr, "[8, 16]"});
        t.push_back(bool_knob<&P::sequence_parallel>("sequence_parallel", Written::always));
        t.push_back(bool_knob<&P::flash_attention>("flash_attention", Written::always));
        t.push_back(enum_knob<&P::attention_kernel>("attention_kernel", Written::always));
        t.push_back(enum_knob<&P::schedule>("schedule", Written::always));
        t.push_back({"zero_stage", read_zero, write_scalar<&P::zero_stage>, encode_scalar<&P::zero_stage>, assign_scalar<&P::zero_stage>, Written::always,
                     nullptr, "[0, 1, 2, 3]"});
        t.push_back(enum_knob<&P::recompute>("recompute", Written::always));
        t.push_back({"recompute_layers", read_recompute_layers, write_scalar<&P::recompute_layers>, encode_scalar<&P::recompute_layers>, nullptr,
                     Written::always, nullptr, "[-1, 1]"});
        t.push_back({"recompute_every", read_recompute_every, write_scalar<&P::recompute_every>, encode_scalar<&P::recompute_every>, nullptr,
                     Written::if_changed, nullptr, "[0, 2]"});
        t.push_back({"recompute_policy", read_recompute_policy, write_enum<&P::recompute_policy>, encode_scalar<&P::recompute_policy>,
                     assign_enum<&P::recompute_policy>,
                     Written::custom, [](const P& p) { return p.op_sac(); }, "[\"modules\", \"op\"]"});
        t.push_back({"recompute_modules", read_recompute_modules, write_recompute_modules, encode_scalar<&P::recompute_modules>, nullptr, Written::custom,
                     [](const P& p) { return p.recompute == Recompute::selective && !p.op_sac(); },
                     "[[\"core_attn\"], [\"mlp\"], [\"core_attn\", \"layernorm\"], [\"moe_act\"]]"});
        t.push_back(enum_knob<&P::precision>("precision", Written::always));
        t.push_back({"exp_avg_dtype", read_moment_dtype, write_enum<&P::exp_avg_dtype>, encode_scalar<&P::exp_avg_dtype>,
                     assign_enum<&P::exp_avg_dtype>, Written::if_changed, nullptr, "[\"fp32\", \"bf16\"]"});
        t.push_back({"exp_avg_sq_dtype", read_moment_dtype, write_enum<&P::exp_avg_sq_dtype>, encode_scalar<&P::exp_avg_sq_dtype>,
                     assign_enum<&P::exp_avg_sq_dtype>, Written::if_changed, nullptr, "[\"fp32\", \"bf16\"]"});
        t.push_back({"fp32_grads", read_fp32_grads, write_scalar<&P::fp32_grads>, encode_scalar<&P::fp32_grads>, assign_scalar<&P::fp32_grads>,
                     Written::if_changed, nullptr, "[false, true]"});
        t.push_back({"master_weights", read_master_weights, write_scalar<&P::master_weights>, encode_scalar<&P::master_weights>,
                     assign_scalar<&P::master_weights>, Written::if_changed, nullptr, "[true, false]"});
        t.push_back(bool_knob<&P::fp32_param_shards>("fp32_param_shards", Written::if_changed));
        t.push_back(bool_knob<&P::grad_accum_fusion>("grad_accum_fusion", Written::if_changed));
        t.push_back(bool_knob<&P::loss_upcast>("loss_upcast", Written::if_changed));
        t.push_back(bool_knob<&P::eager_cross_entropy>("eager_cross_entropy", Written::if_changed));
        t.push_back(bool_knob<&P::loss_parallel>("loss_parallel", Written::if_changed));
        t.push_back(bool_knob<&P::torch_pipelining>("torch_pipelining", Written::if_changed));
        t.push_back({"offload", read_offload, write_offload, encode_offload, assign_offload, Written::always, nullptr,
                     "[{\"optimizer\": \"cpu\"}, {\"optimizer\": \"cpu\", \"params\": \"cpu\"}, {\"optimizer\": {\"gpu\": 0.5, \"cpu\": 0.5}}, "
                     "{\"activations\": \"cpu\"}, {\"optimizer\": \"ssd\"}]"});
        t.push_back(bool_knob<&P::cpu_grad_accumulation>("cpu_grad_accumulation", Written::if_changed));
        t.push_back(bool_knob<&P::lock_free_update>("lock_free_update", Written::always));
        t.push_back(bool_knob<&P::overlap_grad_reduce>("overlap_grad_reduce", Written::always));
        t.push_back(bool_knob<&P::bucket_reduce_barrier>("bucket_reduce_barrier", Written::if_changed));
        t.push_back(bool_knob<&P::overlap_param_gather>("overlap_param_gather", Written::always));
        t.push_back(bool_knob<&P::zero3_param_sync>("zero3_param_sync", Written::if_changed));
        t.push_back(bool_knob<&P::tp_comm_overlap>("tp_comm_overlap", Written::always));
        t.push_back(bool_knob<&P::tp_overlap_rs_fp8>("tp_overlap_rs_fp8", Written::if_changed));
        t.push_back(bool_knob<&P::p2p_blocking>("p2p_blocking", Written::always));
        t.push_back(bool_knob<&P::p2p_scatter_gather>("p2p_scatter_gather", Written::always));
        t.push_back(bool_knob<&P::expandable_segments>("expandable_segments", Written::always));
        t.push_back(bool_knob<&P::moe_act_fp8_cache>("moe_act_fp8_cache", Written::always));
        t.push_back(bool_knob<&P::moe_a2a_overlap>("moe_a2a_overlap", Written::always));
        t.push_back(bool_knob<&P::moe_pad_to_capacity>("moe_pad_to_capacity", Written::if_changed));
        t.push_back(enum_knob<&P::moe_dispatcher>("moe_dispatcher", Written::always));
        t.push_back(enum_knob<&P::cp_comm_type>("cp_comm_type", Written::if_changed));
        t.push_back(enum_knob<&P::moe_probs_at>("moe_probs_at", Written::always));
        t.push_back(bool_knob<&P::eager_elementwise>("eager_elementwise", Written::always));
        t.push_back({"dp_bucket_mb", read_bucket, [](const P& p) -> ojson { return static_cast<double>(p.dp_bucket_bytes) / 1e6; },
                     encode_scalar<&P::dp_bucket_bytes>, nullptr, Written::always, nullptr, "[40, 1]"});
        t.push_back({"vocab_divisible_by",
                     [](JsonReader& r, const char* key, P& p) {
                         p.vocab_divisible_by = r.has(key) ? int_in(r, key, 1, 65536, "an integer from 1 to 65536")
                                                           : (r.get(key), defaults().vocab_divisible_by);
                     },
                     write_scalar<&P::vocab_divisible_by>, encode_scalar<&P::vocab_divisible_by>, assign_scalar<&P::vocab_divisible_by>,
                     Written::if_changed, nullptr, "[1, 128]"});
        t.push_back({"layer_split", [](JsonReader& r, const char* key, P& p) { p.layer_split = read_layer_counts(r, key, 1, "pipeline stage"); },
                     [](const P& p) { return list_json(p.layer_split); }, [](const P& p, std::vector<i64>& k) { encode_list(p.layer_split, k); }, nullptr,
                     Written::always, nullptr, "[[], [1, 1]]"});
        t.push_back({"virtual_layer_split",
                     [](JsonReader& r, const char* key, P& p) { p.virtual_layer_split = read_layer_counts(r, key, 0, "virtual stage"); },
                     [](const P& p) { return list_json(p.virtual_layer_split); },
                     [](const P& p, std::vector<i64>& k) { encode_list(p.virtual_layer_split, k); }, nullptr, Written::if_changed, nullptr,
                     "[[], [1, 1, 1, 1]]"});
        return t;
    }();
    return rows;
}

const KnobRow* find_knob(std::string_view key) {
    for (const KnobRow& k : table())
        if (key == k.key) return &k;
    return nullptr;
}

bool differs_from_default(const KnobRow& k, const PlanSpec& p) {
    std::vector<i64> mine, dflt;
    k.encode(p, mine);
    k.encode(defaults(), dflt);
    return mine != dflt;
}

}  // namespace

const std::vector<std::string>& plan_knob_keys() {
    static const std::vector<std::string> keys = [] {
        std::vector<std::string> out;
        for (const KnobRow& k : table()) out.emplace_back(k.key);
        return out;
    }();
    return keys;
}

std::string plan_knob_value(const PlanSpec& p, const std::string& key) {
    const KnobRow* k = find_knob(key);
    return k ? k->write(p).dump() : std::string();
}

std::string plan_knob_samples(const std::string& key) {
    const KnobRow* k = find_knob(key);
    return k ? k->samples : std::string("[]");
}

PlanKnobAssign plan_knob_assign(std::string_view key) {
    const KnobRow* k = find_knob(key);
    return k ? k->assign : nullptr;
}

PlanKnobSet::PlanKnobSet(std::initializer_list<std::string_view> keys) {
    static_assert(sizeof(bits_) * 8 >= 64);
    STRATA_ASSERT(table().size() <= 64, "a knob set is one 64-bit word");
    for (std::string_view key : keys) {
        const KnobRow* k = find_knob(key);
        STRATA_ASSERT(k != nullptr, "a knob set names plan knobs");
        bits_ |= std::uint64_t{1} << static_cast<unsigned>(k - table().data());
    }
}

void encode_plan(const PlanSpec& p, std::vector<std::int64_t>& out, const PlanKnobSet* skip) {
    const std::vector<KnobRow>& t = table();
    for (std::size_t i = 0; i < t.size(); ++i)
        if (!skip || !skip->contains(i)) t[i].encode(p, out);
}

std::vector<std::int64_t> encode_plan(const PlanSpec& p) {
    std::vector<std::int64_t> out;
    encode_plan(p, out);
    return out;
}

void read_plan_knobs(JsonReader& r, PlanSpec& p) {
    for (const KnobRow& k : table()) k.read(r, k.key, p);
}

ojson plan_knobs_json(const PlanSpec& p) {
    // Under a framework, every key its preset may set is written too: reading the file back
    // applies the preset to the keys it lacks, which would undo a value the plan chose.
    const std::vector<std::string>& preset_keys = framework_knob_keys();
    const auto preset_may_set = [&](const char* key) {
        return !p.framework.empty() && std::find(preset_keys.begin(), preset_keys.end(), key) != preset_keys.end();
    };
    ojson j;
    for (const KnobRow& k : table()) {
        const bool write = k.written == Written::always || preset_may_set(k.key) ||
                           (k.written == Written::if_changed ? differs_from_default(k, p) : k.write_if(p));
        if (write) j[k.key] = k.write(p);
    }
    return j;
}

}  // namespace strata::sim
