// A rank's model states: initialisation that does not depend on the parallel split (every element
// is drawn from its index in the whole tensor), Adam's moments created where each optimizer
// instruction runs, the host copies of an offloaded optimizer, and checkpoints that resume bit for
// bit (the ssd tier's file: ssd.cpp).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <memory>
#include <unistd.h>

#include "rank.hpp"
#include "strata/common/error.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::runtime {

using namespace sim;

namespace {

constexpr double kInitStd = 0.02;  // GPT-2 / Megatron's init_method_std

std::uint64_t hash_name(const std::string& s, int layer) {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return splitmix64(h ^ static_cast<std::uint64_t>(layer + 7));
}

// N(0, 1) from two counter-based uniforms (Box-Muller).
double normal(std::uint64_t key, std::int64_t index) {
    const std::uint64_t a = splitmix64(key + 2 * static_cast<std::uint64_t>(index));
    const std::uint64_t b = splitmix64(key + 2 * static_cast<std::uint64_t>(index) + 1);
    const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53, u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// The row of the whole tensor that row r of a rank's piece (rows_local of them) is, for the row
// splits of params.hpp; the rank's heads of Q, K and V, or its halves of SwiGLU's gate and up.
std::int64_t whole_row(ParamSplit split, const ModelSpec& m, std::int64_t r, std::int64_t rows_local, std::int64_t full_rows,
                       int t, int tp) {
    switch (split) {
        case ParamSplit::rows: return t * rows_local + r;
        case ParamSplit::gated_rows: {
            const std::int64_t half = rows_local / 2;
            return r < half ? t * half + r : full_rows / 2 + t * half + (r - half);
        }
        case ParamSplit::qkv_rows: {
            const std::int64_t hd = m.head_dim > 0 ? m.head_dim : m.hidden / m.heads;
            const std::int64_t kvh = m.kv_heads > 0 ? m.kv_heads : m.heads;
            const std::int64_t q = m.heads / tp * hd, kv = kvh / tp * hd, qw = m.heads * hd, kvw = kvh * hd;
            return r < q ? t * q + r : r < q + kv ? qw + t * kv + (r - q) : qw + kvw + t * kv + (r - q - kv);
        }
        default: return r;
    }
}

// The element of the whole tensor (row-major) that a rank's piece holds at (r, c).
std::int64_t whole_index(const ParamEntry& e, const ModelSpec& m, std::int64_t r, std::int64_t c, int t, int tp) {
    if (e.split == ParamSplit::replicated) return r * e.full_cols + c;
    STRATA_ASSERT(e.split != ParamSplit::expert_rows && e.split != ParamSplit::expert_cols, "whole_index: experts need expert_whole_index");
    if (e.full_rows == 1) return whole_row(e.split, m, c, e.cols, e.full_cols, t, tp);  // a split bias vector
    if (e.split == ParamSplit::cols) return r * e.full_cols + t * e.cols + c;
    return whole_row(e.split, m, r, e.rows, e.full_rows, t, tp) * e.full_cols + c;
}

// Stacked experts [experts x out, in]: element (r, c) of the piece of EP rank `e` and expert-TP
// rank `t` of `etp` (params.hpp's expert_rows / expert_cols).
std::int64_t expert_whole_index(const ParamEntry& p, const ModelSpec& m, std::int64_t r, std::int64_t c, int e, int t, int etp) {
    const std::int64_t out = p.full_rows / m.moe->experts;  // one expert's rows in the whole tensor
    if (p.split == ParamSplit::expert_cols) return (e * p.rows + r) * p.full_cols + t * p.cols + c;
    const std::int64_t out_local = out / etp, experts_local = p.rows / out_local;
    const std::int64_t j = r / out_local, q = r % out_local;
    const ParamSplit within = gated(m.ffn) ? ParamSplit::gated_rows : ParamSplit::rows;
    return ((e * experts_local + j) * out + whole_row(within, m, q, out_local, out, t, etp)) * p.full_cols + c;
}

std::string fingerprint(const ModelSpec& m, const PlanSpec& p) {
    ModelSpec mm = m;
    PlanSpec pp = p;
    mm.name.clear();
    mm.description.clear();
    pp.name.clear();
    pp.description.clear();
    return to_json_text(mm) + to_json_text(pp);
}

template <typename T>
void put(std::string& out, const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_floats(std::string& out, const float* p, std::int64_t n) {
    out.append(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n) * sizeof(float));
}
constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'C', '1'};

}  // namespace

void RankState::init_params() {
    const std::string who = "rank " + std::to_string(rank_) + " tier gpu, ";
    // Parameters homed on the host (plan.offload.params) live there; the GPU fetches them a unit at a time.
    // Homed on the host, a bf16 plan's weights are bf16 there; their fp32 master sits with the moments.
    // Homed on the SSD, their home is the file's region (written below).
    if (params_on_ssd_) ssd_fd();
    else if (params_on_host_)
        params_host_ = buffer(host_ranges_.elements, Tier::cpu, "rank " + std::to_string(rank_) + " tier cpu, parameters", true, weight_bytes());
    else params_ = buffer(home_elements(), Tier::gpu, who + (params_sharded_ ? "parameter shard" : "parameters"), true,
                          params_sharded_ ? shard_weight_bytes() : weight_bytes());
    // Weights split between the GPU and the host under ZeRO-3: the host homes them all, and the
    // resident units' shards on the GPU are refilled from there at each step's first use (the
    // lowering's fetch_params), so they need no values here.
    if (params_on_host_ && params_sharded_)
        params_ = buffer(param_shard_.elements, Tier::gpu, who + "resident parameter shard", true, shard_weight_bytes());
    grads_ = buffer(grads_sharded_ ? grad_shard_.elements : layout_.elements(), Tier::gpu, who + (grads_sharded_ ? "gradient shard" : "gradients"),
                    true, grads_sharded_ ? w_.plan.kept_grad_bytes() : w_.plan.grad_bytes());
    if (w_.options.memory_only) return;
    decay_.assign(static_cast<std::size_t>(layout_.elements()), 0);
    // Drawn on the host; on the cuda backend copied to the device afterwards, and where the host
    // homes only this rank's shard, packed into it.
    const bool whole_home = host_ranges_.segs.size() == 1 && host_ranges_.elements == layout_.elements();
    const bool stage = params_on_ssd_ || (params_on_host_ ? !whole_home : dev_ != nullptr || params_sharded_);
    std::vector<float> staged(stage ? static_cast<std::size_t>(layout_.elements()) : 0);
    float* base = stage ? staged.data() : params_home();
    const double out_std = kInitStd / std::sqrt(2.0 * std::max(1, w_.model.layers));  // scaled residual projections
    for (const ParamEntry& e : layout_.entries) {
        float* p = base + e.offset;
        std::fill(decay_.begin() + e.offset, decay_.begin() + e.end(), e.decay ? 1 : 0);
        const bool norm = e.name.find("ln") == 0 || e.name.find("final_norm") == 0 || e.name.find("_norm.weight") != std::string::npos;
        if (e.name.find(".bias") != std::string::npos) continue;  // zeros
        if (norm) {
            std::fill(p, p + e.elements(), 1.0f);
            continue;
        }
        const double sd = e.name == "proj.weight" || e.name == "fc2.weight" || e.name == "experts.fc2.weight" || e.name == "shared.fc2.weight" ? out_std : kInitStd;
        const std::uint64_t key = hash_name(e.name, e.layer) ^ w_.options.seed;
        const bool expert = e.split == ParamSplit::expert_rows || e.split == ParamSplit::expert_cols;  // cut over the expert-TP group
        // Rows on all cores where this rank has them to itself (billions of draws for a 7B model).
        parallel_chunks(e.rows * e.cols, host_threads(), [&](std::int64_t lo, std::int64_t hi) {
            for (std::int64_t i = lo; i < hi; ++i)
                p[i] = static_cast<float>(sd * normal(key, expert ? expert_whole_index(e, w_.model, i / e.cols, i % e.cols, ep_rank_, etp_rank_, etp_size_)
                                                                   : whole_index(e, w_.model, i / e.cols, i % e.cols, tp_rank_, tp_size_)));
        });
    }
    // A bf16 plan's weights are bf16 from the start; the optimizer's fp32 master copies start from
    // them (Megatron casts the model, then clones its weights to fp32).
    if (w_.plan.precision != Precision::fp32) round_half(base, layout_.elements());
    // Weights staged through the host: the SSD state's fp32 master starts as them (its m and v
    // as the sparse file's zeros), since no host copy of the weights is kept for the first update.
    if (host_weights_staged_ && state_floats() == 3 && !ssd_slot_.empty()) {
        ssd_fd();
        for (const auto& [range, at] : ssd_slot_) write_ssd_floats(at, base + range.first, range.second);
    }
    if (params_on_ssd_) {
        for (const PackedRanges::Seg& g : host_ranges_.segs) param_file_io(g.offset, g.count, staged.data() + g.offset, false);
    } else if (stage && params_on_host_) {
        for (const PackedRanges::Seg& g : host_ranges_.segs)
            std::memcpy(params_host_.data() + g.at, staged.data() + g.offset, static_cast<std::size_t>(g.count) * sizeof(float));
    } else if (stage && params_sharded_) {
        for (const PackedRanges::Seg& g : param_shard_.segs) from_host(params_.data() + g.at, staged.data() + g.offset, g.count);
    } else if (stage) {
        dev_->copy(params_.data(), staged.data(), layout_.elements());
    }
}

void RankState::init(const std::string& resume_dir) {
    if (dev_) dev_->bind_thread();  // this thread's calls go to the rank's GPU
    init_params();
    adam_step_ = 0;
    if (resume_dir.empty()) return;
    const std::string path = resume_dir + "/rank-" + std::to_string(rank_) + ".bin";
    std::ifstream f(path, std::ios::binary);
    if (!f) throw InputError(path, "checkpoint", "cannot read it (no checkpoint for this rank)");
    std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::size_t at = 0;
    auto get = [&](void* dst, std::size_t n) {
        if (at + n > data.size()) throw InputError(path, "checkpoint", "is truncated");
        std::memcpy(dst, data.data() + at, n);
        at += n;
    };
    char magic[8];
    get(magic, 8);
    if (std::memcmp(magic, kMagic, 8) != 0) throw InputError(path, "checkpoint", "is not a Strata runtime checkpoint");
    std::int64_t steps = 0, elems = 0, fp_len = 0;
    get(&steps, sizeof steps);
    get(&elems, sizeof elems);
    get(&fp_len, sizeof fp_len);
    if (fp_len < 0 || fp_len > (1 << 24)) throw InputError(path, "checkpoint", "is corrupt");
    std::string fp(static_cast<std::size_t>(fp_len), '\0');
    get(fp.data(), fp.size());
    if (fp != fingerprint(w_.model, w_.plan) || elems != layout_.elements())
        throw InputError(path, "checkpoint", "was saved from a different model or plan");
    adam_step_ = static_cast<int>(steps);
    // Read into host memory, then to wherever the buffer lives.
    auto get_floats = [&](float* dst, std::int64_t n) {
        std::vector<float> h(static_cast<std::size_t>(n));
        get(h.data(), h.size() * sizeof(float));
        from_host(dst, h.data(), n);
    };
    if (params_on_ssd_) {  // the ssd file's copy, restored below, holds them
        std::vector<float> h(static_cast<std::size_t>(home_elements()));
        get(h.data(), h.size() * sizeof(float));
    } else {
        get_floats(params_home(), home_elements());
    }
    std::int64_t blocks = 0;
    get(&blocks, sizeof blocks);
    for (std::int64_t b = 0; b < blocks; ++b) {
        std::int64_t off = 0, n = 0, tier = 0;
        get(&off, sizeof off);
        get(&n, sizeof n);
        get(&tier, sizeof tier);
        if (off < 0 || n <= 0 || off + n > elems || tier < 0 || tier > 1) throw InputError(path, "checkpoint", "is corrupt");
        MomentBlock& mb = moments(off, n, static_cast<Tier>(tier));
        get_floats(mb.m.data(), n);
        get_floats(mb.v.data(), n);
        if (!mb.master.empty()) get_floats(mb.master.data(), n);
    }
    std::int64_t ssd = 0;
    get(&ssd, sizeof ssd);
    if (ssd > 0) {
        if (ssd != ssd_bytes_) throw InputError(path, "checkpoint", "holds an ssd tier of another layout");
        std::vector<char> buf(static_cast<std::size_t>(ssd));
        get(buf.data(), buf.size());
        ssd_fd();
        if (!ssd_whole_file(buf, false)) throw RuntimeError("cannot restore the ssd tier's file " + ssd_path_);
    }
    // Lock-free: the last step's gradients, which the next step's host update applies.
    std::int64_t pending = 0;
    get(&pending, sizeof pending);
    if (pending != 0 && pending != host_ranges_.elements) throw InputError(path, "checkpoint", "is corrupt");
    if (pending > 0) get_floats(host_grads(), pending);
    if (w_.plan.precision == Precision::fp16) {  // the loss scaler, the same on every rank
        std::int64_t skipped = 0, growth = 0, hysteresis = 0;
        double scale = 0;
        get(&skipped, sizeof skipped);
        get(&scale, sizeof scale);
        get(&growth, sizeof growth);
        get(&hysteresis, sizeof hysteresis);
        if (!(scale > 0) || skipped < 0 || skipped > steps) throw InputError(path, "checkpoint", "is corrupt");
        w_.skipped = static_cast<int>(skipped);
        w_.loss_scale = scale;
        w_.growth_tracker = static_cast<int>(growth);
        w_.hysteresis_tracker = static_cast<int>(hysteresis);
    }
    if (at != data.size()) throw InputError(path, "checkpoint", "has bytes after its end");
}

void RankState::save(const std::string& dir) const {
    if (dev_) dev_->bind_thread();  // this thread's calls go to the rank's GPU
    std::string out;
    out.append(kMagic, 8);
    const std::string fp = fingerprint(w_.model, w_.plan);
    put(out, static_cast<std::int64_t>(adam_step_));
    put(out, static_cast<std::int64_t>(layout_.elements()));
    put(out, static_cast<std::int64_t>(fp.size()));
    out += fp;
    auto put_from = [&](const float* src, std::int64_t n) {
        std::vector<float> h(static_cast<std::size_t>(n));
        to_host(h.data(), src, n);
        put_floats(out, h.data(), n);
    };
    if (params_on_ssd_) {
        std::vector<float> h(static_cast<std::size_t>(home_elements()));
        for (const PackedRanges::Seg& g : host_ranges_.segs) param_file_io(g.offset, g.count, h.data() + g.at, true);
        put_floats(out, h.data(), home_elements());
    } else {
        put_from(params_home(), home_elements());
    }
    put(out, static_cast<std::int64_t>(gpu_moments_.size() + cpu_moments_.size()));
    for (int tier = 0; tier < 2; ++tier)
        for (const MomentBlock& mb : tier == 0 ? gpu_moments_ : cpu_moments_) {
            put(out, mb.offset);
            put(out, mb.count);
            put(out, static_cast<std::int64_t>(tier));
            put_from(mb.m.data(), mb.count);
            put_from(mb.v.data(), mb.count);
            if (!mb.master.empty()) put_from(mb.master.data(), mb.count);
        }
    std::int64_t ssd = 0;
    std::vector<char> buf;
    if (ssd_fd_ >= 0) {
        ssd = ssd_bytes_;
        buf.resize(static_cast<std::size_t>(ssd));
        if (!ssd_whole_file(buf, true)) throw RuntimeError("cannot read the ssd tier's file " + ssd_path_);
    }
    put(out, ssd);
    out.append(buf.data(), buf.size());
    const bool pending = w_.plan.lock_free_update && !grads_host_.empty() && adam_step_ > 0;
    put(out, static_cast<std::int64_t>(pending ? host_ranges_.elements : 0));
    if (pending) put_from(grads_host_.data(), host_ranges_.elements);
    if (w_.plan.precision == Precision::fp16) {
        put(out, static_cast<std::int64_t>(w_.skipped));
        put(out, w_.loss_scale);
        put(out, static_cast<std::int64_t>(w_.growth_tracker));
        put(out, static_cast<std::int64_t>(w_.hysteresis_tracker));
    }
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/rank-" + std::to_string(rank_) + ".bin", tmp = path + ".partial";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        f.write(out.data(), static_cast<std::streamsize>(out.size()));
        if (!f) throw RuntimeError("cannot write checkpoint " + tmp);
    }
    std::filesystem::rename(tmp, path);
}

MomentBlock& RankState::moments(i64 offset, i64 count, Tier tier) {
    auto& blocks = tier == Tier::gpu ? gpu_moments_ : cpu_moments_;
    for (MomentBlock& b : blocks)
        if (b.offset == offset && b.count == count) return b;
    const std::string who = "rank " + std::to_string(rank_) + " tier " + to_string(tier) + ", Adam moments";
    MomentBlock b;
    b.offset = offset;
    b.count = count;
    // Moments at their plan's width (Megatron's precision-aware optimizer narrows them to bf16;
    // the update rounds them each step, optimizer_job).
    b.m = buffer(count, tier, who, true, bytes_per_element(w_.plan.exp_avg_dtype), true);
    b.v = buffer(count, tier, who, true, bytes_per_element(w_.plan.exp_avg_sq_dtype), true);
    // A bf16 plan's update keeps fp32 master weights beside the moments, from the bf16 weights at
    // the first update (or the checkpoint's): on the GPU, and on the host where the weights are
    // homed there (else the host's copy of the weights is the fp32 master itself). Without a
    // master (plan.master_weights) AdamW updates the 2-byte weights themselves, rounded after.
    // FSDP's fp32 shards (plan.fp32_param_shards) are the master themselves: updated in place.
    // Pipelined FSDP keeps the stage's weights whole on the GPU (the gathered copy the model
    // counts), so its fp32 shard is this block.
    const bool shard_is_master = w_.plan.fsdp_fp32_shards() && params_sharded_;
    if (w_.plan.has_master() && !shard_is_master && (tier == Tier::gpu || params_on_host_)) {
        b.master = buffer(count, tier, "rank " + std::to_string(rank_) + " tier " + to_string(tier) + ", master weights");
        if (!w_.options.memory_only) {
            const float* from = home_at(offset, count);
            if (dev_ && tier == Tier::gpu) dev_->copy(b.master.data(), from, count);
            else std::memcpy(b.master.data(), from, static_cast<std::size_t>(count) * sizeof(float));
        }
    }
    blocks.push_back(std::move(b));
    return blocks.back();
}

// The offloaded optimizer's fp32 parameters on the host start as the device's (and follow them
// through every H2D after the update), so a resumed run needs nothing more in its checkpoint.
float* RankState::host_params() {
    if (params_host_.empty()) {
        params_host_ = buffer(host_ranges_.elements, Tier::cpu, "rank " + std::to_string(rank_) + " tier cpu, parameters");
        if (!w_.options.memory_only)
            for (const PackedRanges::Seg& g : host_ranges_.segs) to_host(params_host_.data() + g.at, params_.data() + gpu_index(g.offset, g.count), g.count);
    }
    return params_host_.data();
}

const float* RankState::home_at(i64 offset, i64 n) const {
    return params_on_host_ ? params_host_.data() + host_index(offset, n) : params_.data() + gpu_index(offset, n);
}

i64 RankState::gpu_index(i64 offset, i64 n) const {
    if (!params_sharded_) return offset;
    const i64 at = param_shard_.index(offset, n);
    if (at < 0)
        throw RuntimeError("runtime: rank " + std::to_string(rank_) + " keeps no copy of elements [" + std::to_string(offset) + ", " +
                           std::to_string(offset + n) + ") of its parameters (another data-parallel rank's shard)");
    return at;
}

// The host copies of the flat parameters and gradients hold what the program names on the cpu
// tier: a data-parallel rank's ZeRO shard of the offloaded optimizer, or every parameter it homes
// there. dp copies of the whole model would hold dp times what the ZeRO paper's partitioning keeps.
void PackedRanges::build(std::vector<std::pair<i64, i64>> lo_hi) {
    std::sort(lo_hi.begin(), lo_hi.end());
    segs.clear();
    for (const auto& [lo, hi] : lo_hi) {
        if (!segs.empty() && lo <= segs.back().offset + segs.back().count) segs.back().count = std::max(segs.back().count, hi - segs.back().offset);
        else segs.push_back({lo, hi - lo, 0});
    }
    elements = 0;
    for (Seg& g : segs) {
        g.at = elements;
        elements += g.count;
    }
}

i64 PackedRanges::index(i64 offset, i64 n) const {
    auto it = std::upper_bound(segs.begin(), segs.end(), offset, [](i64 v, const Seg& g) { return v < g.offset; });
    if (it == segs.begin() || offset + n > std::prev(it)->offset + std::prev(it)->count) return -1;
    --it;
    return it->at + (offset - it->offset);
}

void RankState::precompute_host_ranges() {
    const Program& prog = w_.program;
    std::vector<std::pair<i64, i64>> r;
    for (const int id : rp_.operand_ids) {
        const DataTensor& t = prog.tensors[static_cast<std::size_t>(id)];
        if ((t.role != TensorRole::param && t.role != TensorRole::param_grad) || t.tier != Tier::cpu) continue;
        r.emplace_back(t.offset, t.offset + t.elements());
    }
    host_ranges_.build(std::move(r));
}

i64 RankState::host_index(i64 offset, i64 n) const {
    const i64 at = host_ranges_.index(offset, n);
    if (at < 0)
        throw RuntimeError("runtime: rank " + std::to_string(rank_) + " keeps no host copy of elements [" + std::to_string(offset) + ", " +
                           std::to_string(offset + n) + ") of its parameters (another data-parallel rank's shard)");
    return at;
}

// Sharded gradients (DeepSpeed's ZeRO-2/3, FSDP): the flat gradient buffer on the GPU holds the
// ranges the program names as the rank's shard. Whole ranges are values per reduction, which the
// lowering numbers (DataTensor::version): a value spans the ranges its tensors overlap (buckets
// cut through a tensor are one), and lives until the last of its reduce-scatters.
void RankState::precompute_grad_values() {
    const Program& prog = w_.program;
    std::vector<std::pair<i64, i64>> shard, whole, param_shard;
    for (std::size_t k = 0; k < rp_.operand_ids.size(); ++k) {
        const DataTensor& t = prog.tensors[static_cast<std::size_t>(rp_.operand_ids[k])];
        if (t.tier != Tier::gpu) continue;
        if (t.role == TensorRole::param && t.shard) param_shard.emplace_back(t.offset, t.offset + t.elements());
        if (t.role != TensorRole::param_grad) continue;
        if (t.shard) shard.emplace_back(t.offset, t.offset + t.elements());
        else if (t.version >= 0) whole.emplace_back(t.offset, t.offset + t.elements());
    }
    params_sharded_ = !param_shard.empty();
    param_shard_.build(std::move(param_shard));
    // Streamed to the host (PlanSpec::streams_grads_to_host), the GPU keeps no shard, only values.
    grads_sharded_ = !shard.empty() || !whole.empty();
    grad_shard_.build(std::move(shard));
    std::sort(whole.begin(), whole.end());
    grad_values_.clear();
    for (const auto& [lo, hi] : whole) {
        if (!grad_values_.empty() && lo < grad_values_.back().first + grad_values_.back().second)
            grad_values_.back().second = std::max(grad_values_.back().second, hi - grad_values_.back().first);
        else grad_values_.emplace_back(lo, hi - lo);
    }
    grad_readers_.clear();
    for (std::size_t i = 0; i < rp_.instrs.size(); ++i) {
        if (rp_.operands.empty() || !consumes_grad_values(rp_.instrs[i])) continue;
        const Operands& o = rp_.operands[i];
        for (int k = 0; k < o.n_in; ++k) {
            const DataTensor& t = prog.tensors[static_cast<std::size_t>(rp_.operand_ids[o.first + static_cast<std::size_t>(k)])];
            if (t.role == TensorRole::param_grad && t.version >= 0) ++grad_readers_[{value_at(t.offset), t.version}];
        }
    }
}

int RankState::value_at(i64 offset) const {
    auto it = std::upper_bound(grad_values_.begin(), grad_values_.end(), offset, [](i64 v, const std::pair<i64, i64>& r) { return v < r.first; });
    STRATA_ASSERT(it != grad_values_.begin(), "runtime: a gradient outside every reduced range");
    return static_cast<int>(it - grad_values_.begin()) - 1;
}

// A range of one reduction's gradients: a buffer of the whole value, zeroed when first used (the
// kernels accumulate into it), freed when its last reduce-scatter completes.
float* RankState::grad_value(const DataTensor& t, std::size_t at) {
    const int v = value_at(t.offset);
    const auto& [off, count] = grad_values_[static_cast<std::size_t>(v)];
    const std::pair<int, int> key{v, t.version};
    if (t.offset + t.elements() > off + count || !grad_readers_.count(key))
        fail(at, "names gradients [" + std::to_string(t.offset) + ", " + std::to_string(t.offset + t.elements()) +
                     ") of version " + std::to_string(t.version) + " that no reduce-scatter or copy down of this rank consumes");
    if (grad_reduced_.count(key)) fail(at, "uses gradients of version " + std::to_string(t.version) + " after their last reader (reduce-scatter or copy down)");
    auto live = grad_live_.find(key);
    if (live == grad_live_.end()) {
        try {
            Live l;
            l.buf = buffer(count, Tier::gpu, "rank " + std::to_string(rank_) + " tier gpu, gradients being reduced", true, w_.plan.grad_bytes());
            l.pending = grad_readers_.at(key);
            live = grad_live_.emplace(key, std::move(l)).first;
        } catch (const OutOfMemory& e) {
            fail(at, e.what());
        }
        sample_memory(Tier::gpu);
    }
    return live->second.buf.data() + (t.offset - off);
}

// A value's last readers: its reduce-scatters, and where the gradients stream to the host the
// copies down of the rank's slice.
bool RankState::consumes_grad_values(const Instr& in) {
    return (in.kind == InstrKind::collective && in.coll == CollKind::reduce_scatter) || (in.kind == InstrKind::copy && in.copy == CopyKind::d2h);
}

void RankState::finish_grad_values(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    if (grad_values_.empty() || !consumes_grad_values(in)) return;
    const Operands& o = rp_.operands[i];
    for (int k = 0; k < o.n_in; ++k) {
        const DataTensor& t = w_.program.tensors[static_cast<std::size_t>(rp_.operand_ids[o.first + static_cast<std::size_t>(k)])];
        if (t.role != TensorRole::param_grad || t.version < 0) continue;
        const std::pair<int, int> key{value_at(t.offset), t.version};
        auto it = grad_live_.find(key);
        if (it == grad_live_.end() || --it->second.pending > 0) continue;
        grad_live_.erase(it);
        grad_reduced_.insert(key);
        sample_memory(Tier::gpu);
    }
}

float* RankState::host_grads() {
    if (grads_host_.empty())
        grads_host_ = buffer(host_ranges_.elements, Tier::cpu, "rank " + std::to_string(rank_) + " tier cpu, gradients", true,
                             w_.plan.host_grad_bytes());
    return grads_host_.data();
}

const ParamEntry& RankState::entry(const std::string& name, int layer) const {
    const ParamEntry* e = layout_.find(name, layer);
    if (!e) throw InputError("runtime", name, "rank " + std::to_string(rank_) + " holds no such parameter on layer " + std::to_string(layer));
    return *e;
}

float* RankState::param_ptr(const std::string& name, int layer) {
    const ParamEntry& e = entry(name, layer);
    return home_at(e.offset, e.elements());
}

float RankState::read_param(const std::string& name, int layer, bool grad, i64 index) const {
    if (dev_) dev_->bind_thread();  // this thread's calls go to the rank's GPU
    const ParamEntry& e = entry(name, layer);
    float v = 0;
    if (grad && w_.plan.streams_grads_to_host()) {  // streamed to the host: its partition holds them
        const i64 at = host_ranges_.index(e.offset + index, 1);
        if (at < 0 || grads_host_.empty())
            throw InputError("runtime", name, "rank " + std::to_string(rank_) + " holds element " + std::to_string(index) +
                                                  " of no gradient in host memory (another data-parallel rank's, or none yet)");
        return grads_host_.data()[at];
    }
    if (grad && grads_sharded_) {  // the rank's shard holds only its slice of the reduced gradients
        const i64 at = grad_shard_.index(e.offset + index, 1);
        if (at < 0) throw InputError("runtime", name, "rank " + std::to_string(rank_) + " keeps only its shard of the gradients; element " +
                                                          std::to_string(index) + " is another data-parallel rank's");
        to_host(&v, grads_.data() + at, 1);
        return v;
    }
    if (!grad && params_on_ssd_) {
        param_file_io(e.offset + index, 1, &v, true);
        return v;
    }
    // One element: a sharded rank may hold part of a tensor (its slice of each tensor under
    // plan.zero3_param_sync).
    to_host(&v, grad ? grads_.data() + e.offset + index : home_at(e.offset + index, 1), 1);
    return v;
}

void RankState::write_param(const std::string& name, int layer, i64 index, float value) {
    if (dev_) dev_->bind_thread();  // this thread's calls go to the rank's GPU
    if (params_on_ssd_) {  // stored as bf16, as the update stores them
        const ParamEntry& e = entry(name, layer);
        param_file_io(e.offset + index, 1, &value, false);
        return;
    }
    from_host(param_ptr(name, layer) + index, &value, 1);
}

}  // namespace strata::runtime
