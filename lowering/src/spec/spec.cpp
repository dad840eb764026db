#include <algorithm>
#include <cmath>

#include "strata/lowering/model.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::sim {

const char* to_string(FfnKind k) {
    switch (k) {
        case FfnKind::gelu: return "gelu";
        case FfnKind::swiglu: return "swiglu";
        case FfnKind::relu2: return "relu2";
        case FfnKind::relu: return "relu";
        case FfnKind::geglu: return "geglu";
    }
    return "gelu";
}
const char* to_string(NormKind k) { return k == NormKind::layernorm ? "layernorm" : "rmsnorm"; }
const char* to_string(PositionKind k) {
    switch (k) {
        case PositionKind::learned: return "learned";
        case PositionKind::rope: return "rope";
        case PositionKind::none: return "none";
    }
    return "?";
}
const char* to_string(Schedule s) {
    switch (s) {
        case Schedule::gpipe: return "gpipe";
        case Schedule::one_f_one_b: return "1f1b";
        case Schedule::interleaved_1f1b: return "interleaved-1f1b";
        case Schedule::dualpipe_v: return "dualpipev";
    }
    return "?";
}
const char* to_string(MoeDispatcher d) { return d == MoeDispatcher::deepep ? "deepep" : "alltoall"; }
const char* to_string(CpCommType c) { return c == CpCommType::a2a ? "a2a" : c == CpCommType::allgather ? "allgather" : "p2p"; }
const char* to_string(MoeProbsAt a) { return a == MoeProbsAt::fc2_output ? "fc2_output" : "fc2_input"; }
const char* to_string(AttentionKernel k) {
    switch (k) {
        case AttentionKernel::fa2: return "fa2";
        case AttentionKernel::fa1: return "fa1";
        case AttentionKernel::fa3: break;
    }
    return "fa3";
}
const char* to_string(RecomputeModule r) {
    switch (r) {
        case RecomputeModule::core_attn: return "core_attn";
        case RecomputeModule::layernorm: return "layernorm";
        case RecomputeModule::mla_up_proj: return "mla_up_proj";
        case RecomputeModule::mlp: return "mlp";
        case RecomputeModule::moe_act: return "moe_act";
        case RecomputeModule::shared_experts: return "shared_experts";
        case RecomputeModule::moe: return "moe";
        case RecomputeModule::count: break;
    }
    return "?";
}

bool recompute_module_from(const std::string& name, RecomputeModule& out) {
    for (int k = 0; k < static_cast<int>(RecomputeModule::count); ++k)
        if (name == to_string(static_cast<RecomputeModule>(k))) {
            out = static_cast<RecomputeModule>(k);
            return true;
        }
    return false;
}

std::vector<std::string> recompute_module_names(const PlanSpec& p) {
    std::vector<std::string> out;
    for (int k = 0; k < static_cast<int>(RecomputeModule::count); ++k)
        if (p.recomputes(static_cast<RecomputeModule>(k))) out.emplace_back(to_string(static_cast<RecomputeModule>(k)));
    return out;
}

std::string recompute_module_choices() {
    std::string s;
    for (int k = 0; k < static_cast<int>(RecomputeModule::count); ++k)
        s += std::string(k ? ", " : "") + to_string(static_cast<RecomputeModule>(k));
    return s;
}

const char* to_string(Recompute r) {
    switch (r) {
        case Recompute::none: return "none";
        case Recompute::selective: return "selective";
        case Recompute::full: return "full";
    }
    return "?";
}
const char* to_string(RecomputePolicy r) { return r == RecomputePolicy::op ? "op" : "modules"; }
const char* to_string(Precision p) {
    switch (p) {
        case Precision::fp32: return "fp32";
        case Precision::bf16: return "bf16";
        case Precision::fp16: return "fp16";
        case Precision::fp8: return "fp8";
    }
    return "?";
}
const char* to_string(Tier t) {
    switch (t) {
        case Tier::gpu: return "gpu";
        case Tier::cpu: return "cpu";
        case Tier::ssd: return "ssd";
    }
    return "?";
}
const char* to_string(NetTopology t) { return t == NetTopology::fat_tree ? "fat-tree" : "rail-optimized"; }

bool precision_from(const std::string& name, Precision& out) {
    for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16, Precision::fp8})
        if (name == to_string(p)) {
            out = p;
            return true;
        }
    return false;
}

double PlanSpec::grad_bytes() const { return fp32_grads || precision == Precision::fp32 ? 4.0 : 2.0; }

double PlanSpec::adam_moment_bytes() const {
    return bytes_per_element(exp_avg_dtype) + bytes_per_element(exp_avg_sq_dtype);
}

double PlanSpec::adam_gpu_bytes_per_param() const {
    // fp32 weights read and written (the master under mixed precision, then the 2-byte weights
    // written); without a master the 2-byte weights themselves read and written.
    // FSDP's fp32 shards are the weights and the master at once: no 2-byte copy to write.
    const double weights = precision == Precision::fp32 || fsdp_fp32_shards() ? 2 * 4.0 : has_master() ? 2 * 4.0 + 2.0 : 2 * 2.0;
    return weights + kept_grad_bytes() + 2 * adam_moment_bytes();
}

int bytes_per_element(Precision p) {
    switch (p) {
        case Precision::fp32: return 4;
        case Precision::bf16:
        case Precision::fp16: return 2;
        case Precision::fp8: return 1;
    }
    return 2;
}

int virtual_stage_of(const PlanSpec& p, int stage, int chunk) {
    const int pp = std::max(1, p.pp);
    if (p.schedule == Schedule::dualpipe_v) return chunk == 0 ? stage : 2 * pp - 1 - stage;
    return chunk * pp + stage;
}

int rank_of_virtual_stage(const PlanSpec& p, int v) {
    const int pp = std::max(1, p.pp);
    if (p.schedule == Schedule::dualpipe_v) return v < pp ? v : 2 * pp - 1 - v;
    return v % pp;
}

bool chunk_sends_to_other_rank(const PlanSpec& p, int stage, int chunk) {
    const int v = virtual_stage_of(p, stage, chunk);
    return v < std::max(1, p.pp) * std::max(1, p.vpp) - 1 && rank_of_virtual_stage(p, v + 1) != stage;
}

bool PlanSpec::in_file(std::string_view key) const { return std::find(keys_in_file.begin(), keys_in_file.end(), key) != keys_in_file.end(); }
bool PlanSpec::from_preset(std::string_view key) const {
    return std::find(keys_from_preset.begin(), keys_from_preset.end(), key) != keys_from_preset.end();
}

int head_stage(const PlanSpec& p) { return p.schedule == Schedule::dualpipe_v ? 0 : std::max(1, p.pp) - 1; }

namespace {
/// `layers` over `n` pipeline pieces as evenly as possible, the remainder to the middle ones first
/// (the ends also carry the embedding and the logits). Each MTP module weighs about a layer on the
/// last piece: split layers + mtp_depth units and take the modules off the last piece's share,
/// unless that would leave it without a layer.
std::vector<int> even_split(int layers, int mtp_depth, int n) {
    const auto even = [&](int units) {
        std::vector<int> out(static_cast<std::size_t>(n), units / n);
        for (int i = 0, rem = units % n; rem > 0; ++i, --rem) out[static_cast<std::size_t>((n / 2 + i) % n)] += 1;
        return out;
    };
    if (mtp_depth > 0 && n > 1) {
        std::vector<int> out = even(layers + mtp_depth);
        if (out.back() - mtp_depth >= 1) {
            out.back() -= mtp_depth;
            return out;
        }
    }
    return even(layers);
}

// DualPipeV folds the model into a V, so rank 0 holds both ends: the embedding with the first
// layers, and the last layers with the head, the loss and the MTP modules. An even split by layer
// count would add the head and MTP on top of rank 0's share (DeepSeek-V3 on pp 16: about 7
// layers' worth of work against 4). Balance by forward FLOPs instead: rank 0 takes as many layers
// as keep it no busier than the others (at least one, in its first virtual stage), the other ranks
// share the rest evenly (remainder to the V's turn), and each rank's layers split over its two
// legs, the down leg taking the odd one. The last virtual stage may hold no layer, only the head
// and the MTP modules, as Megatron's pipeline layouts allow ("...|mL").
std::vector<int> dualpipe_v_split(const ModelSpec& m, int pp) {
    const int n_layers = m.layers;
    // matmul FLOPs, one pass over the layers: the head and MTP modules in mean layers
    const ForwardFlops f = forward_flops(m, 1.0);
    const double per_layer = f.layers_matmul / std::max(1, n_layers);
    const double rank0_extra = per_layer > 0 ? (f.logits + f.mtp) / per_layer : 0.0;

    const int others = pp - 1;
    int best_n0 = 1;
    double best_load = 1e300;
    // the other ranks keep at least one layer per leg where the model has enough layers
    for (int n0 = 1; n0 <= std::max(1, n_layers - 2 * others); ++n0) {
        const double others_share = std::ceil(static_cast<double>(n_layers - n0) / others);
        const double load = std::max(n0 + rank0_extra, others_share);
        if (load < best_load - 1e-9) best_load = load, best_n0 = n0;
    }
    std::vector<int> per_rank(static_cast<std::size_t>(pp), 0);
    per_rank[0] = best_n0;
    const int rest = n_layers - best_n0;
    for (int r = 1; r < pp; ++r) per_rank[static_cast<std::size_t>(r)] = rest / others;
    for (int i = 0, rem = rest % others; i < rem; ++i) per_rank[static_cast<std::size_t>(pp - 1 - i)] += 1;

    std::vector<int> v(static_cast<std::size_t>(2 * pp), 0);
    for (int r = 0; r < pp; ++r) {
        const int n = per_rank[static_cast<std::size_t>(r)];
        v[static_cast<std::size_t>(r)] = n - n / 2;
        v[static_cast<std::size_t>(2 * pp - 1 - r)] = n / 2;
    }
    return v;
}
}  // namespace

std::vector<int> stage_layer_ids(const ModelSpec& m, const PlanSpec& p, int stage) {
    const std::vector<int> vm = virtual_stage_layers(m, p);
    const int vpp = std::max(1, p.vpp);
    std::vector<int> start(vm.size() + 1, 0);
    for (std::size_t v = 0; v < vm.size(); ++v) start[v + 1] = start[v] + vm[v];
    std::vector<int> ids;
    for (int c = 0; c < vpp; ++c) {
        const int v = virtual_stage_of(p, stage, c);
        for (int l = start[static_cast<std::size_t>(v)]; l < start[static_cast<std::size_t>(v) + 1]; ++l) ids.push_back(l);
    }
    return ids;
}

bool valid_microbatch_group(int micro_batches, int pp, int group) {
    if (group < pp || group > micro_batches) return false;
    const int last = micro_batches % group;
    return last == 0 || last >= pp;
}

int smallest_microbatch_group(int micro_batches, int pp) {
    for (int g = pp; g <= micro_batches; ++g)
        if (valid_microbatch_group(micro_batches, pp, g)) return g;
    return 0;
}

std::vector<int> stage_layers(const ModelSpec& m, const PlanSpec& p) {
    if (!p.layer_split.empty()) return p.layer_split;
    if (p.schedule == Schedule::dualpipe_v || !p.virtual_layer_split.empty()) {
        const std::vector<int> vm = virtual_stage_layers(m, p);
        std::vector<int> out(static_cast<std::size_t>(std::max(1, p.pp)), 0);
        for (std::size_t v = 0; v < vm.size(); ++v) out[static_cast<std::size_t>(rank_of_virtual_stage(p, static_cast<int>(v)))] += vm[v];
        return out;
    }
    return even_split(m.layers, m.mtp_depth, std::max(1, p.pp));
}

std::vector<int> virtual_stage_layers(const ModelSpec& m, const PlanSpec& p) {
    const int pp = std::max(1, p.pp), vpp = std::max(1, p.vpp);
    if (!p.virtual_layer_split.empty()) return p.virtual_layer_split;
    // DualPipeV: the V's 2 x pp virtual stages, balanced by FLOPs around rank 0's two ends.
    if (p.schedule == Schedule::dualpipe_v) return dualpipe_v_split(m, pp);
    // Standard placement: virtual stage c * pp + s is chunk c of rank s; each rank's layers spread
    // over its chunks.
    const std::vector<int> per_stage = stage_layers(m, p);
    std::vector<int> v(static_cast<std::size_t>(pp * vpp), 0);
    for (int s = 0; s < pp; ++s) {
        const int n = per_stage[static_cast<std::size_t>(s)];
        for (int c = 0; c < vpp; ++c) v[static_cast<std::size_t>(c * pp + s)] = n / vpp + (c < n % vpp ? 1 : 0);
    }
    return v;
}

}  // namespace strata::sim
