// A rank's executor: the RankProgram's instructions per stream, in order, with the engine's
// semantics (a record completes when its stream reaches it, a wait blocks its stream until the
// event is recorded, collectives and transfers complete when their peers have posted them). The
// streams are interleaved on the rank's one thread; nothing here decides an order of its own.
// Memory follows the dataflow: a tensor is allocated when first written and freed after the last
// read of that value, so a recomputed layer's activations really are dropped in between.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <unistd.h>

#include "rank.hpp"
#include "strata/common/error.hpp"

namespace strata::runtime {

using namespace sim;

namespace {
bool tracked(TensorRole r, Tier t) {
    return r == TensorRole::activation || r == TensorRole::grad || r == TensorRole::weight_grad || r == TensorRole::stats || r == TensorRole::tokens ||
           r == TensorRole::mask ||
           (r == TensorRole::optimizer_state && t == Tier::cpu);
}
}  // namespace

World::World(const ModelSpec& m, const PlanSpec& p, const RunOptions& o, const Program& prog)
    : model(m), plan(p), options(o), program(prog), data(o.data.text_path, m.vocab, o.data.seed) {}

RankState::RankState(World& w, int index) : w_(w), rp_(w.program.ranks[static_cast<std::size_t>(index)]), rank_(rp_.global_rank) {
    STRATA_ASSERT(w.program.full_mode, "runtime: the Program is not in full mode");
    const int rank = rank_;
    layout_ = param_layout(w.model, w.plan, rp_.pp_stage);
    units_ = layout_.units;  // by offset: the dense buffer's, then the expert buffer's
    units_.insert(units_.end(), layout_.expert_units.begin(), layout_.expert_units.end());
    const auto& tp = rp_.groups[static_cast<std::size_t>(Group::tp)];
    tp_size_ = static_cast<int>(tp.size());
    tp_rank_ = static_cast<int>(std::find(tp.begin(), tp.end(), rank) - tp.begin());
    const auto& cp = rp_.groups[static_cast<std::size_t>(Group::cp)];
    cp_size_ = static_cast<int>(cp.size());
    cp_rank_ = static_cast<int>(std::find(cp.begin(), cp.end(), rank) - cp.begin());
    const auto& ep = rp_.groups[static_cast<std::size_t>(Group::ep)];
    ep_size_ = static_cast<int>(ep.size());
    ep_rank_ = static_cast<int>(std::find(ep.begin(), ep.end(), rank) - ep.begin());
    const auto& etp = rp_.groups[static_cast<std::size_t>(Group::etp)];
    etp_size_ = static_cast<int>(etp.size());
    etp_rank_ = static_cast<int>(std::find(etp.begin(), etp.end(), rank) - etp.begin());
    // The data-parallel replica: Megatron's dp rank, shared by a CP group's members (they split
    // one sequence), not the rank in the dp x cp gradient group.
    dp_rank_ = (rank / (w.plan.tp * w.plan.cp)) % w.plan.dp;
    gpu_.capacity = w.options.capacity_bytes[0];
    dev_ = w.device_of(rank);
    lanes_ = dev_ != nullptr && !w.options.memory_only;
    params_on_host_ = !w.plan.offload.params.all_gpu();
    params_on_ssd_ = w.plan.offload.params.ssd >= 1.0;
    host_weights_staged_ = w.plan.stages_host_weights();
    precompute();
}

RankState::~RankState() {
    join_host_job();
    if (ssd_fd_ >= 0) {
        ::close(ssd_fd_);
        ::unlink(ssd_path_.c_str());
        pool_of(Tier::ssd)->used.fetch_sub(static_cast<double>(ssd_bytes_));
    }
}

// Per stream, its instructions in program order; per output operand, how many reads of the value
// it writes follow before the tensor is written again (the rank's program order is the order the
// lowering guarantees its data dependencies in).
void RankState::precompute() {
    const Program& prog = w_.program;
    const auto logits = std::find(prog.tensor_names.begin(), prog.tensor_names.end(), "logits.out");
    logits_name_ = logits == prog.tensor_names.end() ? -1 : static_cast<int>(logits - prog.tensor_names.begin());
    for (std::size_t i = 0; i < rp_.instrs.size(); ++i) streams_[static_cast<std::size_t>(rp_.instrs[i].stream)].push_back(i);
    version_reads_.assign(rp_.operand_ids.size(), 0);
    std::unordered_map<int, std::size_t> writer;  // tensor -> operand position of its current version's write
    for (std::size_t i = 0; i < rp_.instrs.size(); ++i) {
        const Operands& o = rp_.operands[i];
        const auto* ids = rp_.operand_ids.data() + o.first;
        for (int k = 0; k < o.n_in; ++k) {
            const DataTensor& t = prog.tensors[static_cast<std::size_t>(ids[k])];
            if (!tracks(t)) continue;
            if (t.role == TensorRole::tokens) {
                ++token_reads_[ids[k]];
                continue;
            }
            auto it = writer.find(ids[k]);
            if (it == writer.end())
                throw RuntimeError("runtime: rank " + std::to_string(rank_) + " instruction " + std::to_string(i) + " reads " +
                                   prog.tensor_names[static_cast<std::size_t>(t.name)] + " before anything writes it");
            ++version_reads_[it->second];  // an in-place update reads the old value too
        }
        for (int j = 0; j < o.n_out; ++j) {
            const DataTensor& t = prog.tensors[static_cast<std::size_t>(ids[o.n_in + j])];
            if (tracks(t) && !block_continues(i, t)) writer[ids[o.n_in + j]] = o.first + static_cast<std::size_t>(o.n_in + j);
        }
    }
    recorded_.assign(static_cast<std::size_t>(std::max(1, prog.events)), 0);
    posted_.assign(rp_.instrs.size(), 0);
    started_ns_.assign(rp_.instrs.size(), 0);
    ended_ns_.assign(rp_.instrs.size(), -1);
    precompute_host_ranges();
    precompute_grad_values();
    if (w_.plan.precision == Precision::fp8) precompute_fp8_charges();
    if (units_fetched()) precompute_fetches();
    // The ssd tier's file: a page-aligned slot per range of optimizer state, in program order.
    i64 at = 0;
    for (std::size_t i = 0; i < rp_.operand_ids.size(); ++i) {
        const DataTensor& t = prog.tensors[static_cast<std::size_t>(rp_.operand_ids[i])];
        if (t.role != TensorRole::optimizer_state || t.tier != Tier::ssd) continue;
        if (ssd_slot_.emplace(std::make_pair(t.offset, t.elements()), at).second) at += static_cast<i64>(ssd_padded_bytes(state_floats() * t.elements()));
    }
    // Homed on the SSD, the weights follow: 2 B an element of the ranges the rank homes.
    if (params_on_ssd_) {
        params_ssd_at_ = at;
        at += static_cast<i64>(ssd_padded_bytes((host_ranges_.elements + 1) / 2));
    }
    ssd_bytes_ = at;
}

// What Transformer Engine keeps for a backward under FP8: a linear layer saves the FP8 cast of its
// input (1 B an element) for its wgrad, not the 16-bit input, which is kept only where another
// backward needs it (attention's output for the fused attention backward, the router's input): 2 B
// and the cast beside it. The runtime holds the 16-bit values and quantizes them as its GEMMs read
// them (the cast is a function of the value), and charges an activation what TE keeps, by its
// backward readers: FP8 GEMMs only, 1 B; FP8 GEMMs and other kernels, 2 + 1 B. A gather or copy
// passes its output's readers to its input (SP's input all-gathered again for the wgrad). Unfused
// attention's backward reads the output only as this runtime's kernel's shortcut (Megatron's
// CoreAttention keeps the probabilities), so it does not count.
void RankState::precompute_fp8_charges() {
    const Program& prog = w_.program;
    enum : unsigned { fp8_gemm = 1, high = 2 };
    std::unordered_map<int, unsigned> readers;
    auto activation = [&](int id) { return prog.tensors[static_cast<std::size_t>(id)].role == TensorRole::activation; };
    for (std::size_t i = 0; i < rp_.instrs.size(); ++i) {
        const Instr& in = rp_.instrs[i];
        if (in.kind != InstrKind::compute || in.phase != Phase::backward) continue;
        if (in.op == Op::attention_bwd && !w_.plan.flash_attention) continue;
        const Operands& o = rp_.operands[i];
        const auto* ids = rp_.operand_ids.data() + o.first;
        const unsigned kind = in.op == Op::gemm && in.dtype == DType::fp8 ? fp8_gemm : high;
        for (int k = 0; k < o.n_in; ++k)
            if (activation(ids[k])) readers[ids[k]] |= kind;
    }
    for (std::size_t n = rp_.instrs.size(); n-- > 0;) {  // backwards: a gather's output before its input
        const Instr& in = rp_.instrs[n];
        if (in.phase != Phase::backward || (in.kind != InstrKind::collective && in.kind != InstrKind::copy)) continue;
        const Operands& o = rp_.operands[n];
        const auto* ids = rp_.operand_ids.data() + o.first;
        for (int j = 0; j < o.n_out; ++j) {
            auto it = readers.find(ids[o.n_in + j]);
            if (it == readers.end()) continue;
            for (int k = 0; k < o.n_in; ++k)
                if (activation(ids[k]) && ids[k] != ids[o.n_in + j]) readers[ids[k]] |= it->second;
        }
    }
    for (const auto& [id, r] : readers)
        if (r & fp8_gemm) fp8_charge_[id] = r & high ? elem_bytes(prog.tensors[static_cast<std::size_t>(id)]) + 1.0 : 1.0;
}

bool RankState::tracks(const DataTensor& t) const {
    return tracked(t.role, t.tier) || (host_weights_staged_ && t.role == TensorRole::param && t.tier == Tier::cpu && t.version != 1);
}

Pool* RankState::pool_of(Tier t) {
    if (t == Tier::gpu) return &gpu_;
    if (w_.options.memory_only) return t == Tier::cpu ? &cpu_own_ : &ssd_own_;
    auto& v = t == Tier::cpu ? w_.node_cpu : w_.node_ssd;
    return v[static_cast<std::size_t>(rp_.node)].get();
}

TrackedBuffer RankState::buffer(i64 n, Tier t, const std::string& what, bool zero, double elem_bytes, bool bf16_moment) {
    const Storage half = w_.plan.precision == Precision::fp16 && !bf16_moment ? Storage::fp16 : Storage::bf16;
    return TrackedBuffer(n, pool_of(t), what, dev_, t == Tier::gpu, !w_.options.memory_only, w_.cache_of(rank_), zero, elem_bytes, half);
}

double RankState::elem_bytes(const DataTensor& t) const {
    const PlanSpec& p = w_.plan;
    if (p.precision == Precision::fp32 && t.role != TensorRole::mask) return 4.0;
    switch (t.role) {
        // Megatron's loss upcasts the logits and keeps the fp32 copy (its softmax, in place) for
        // the backward, as the memory model counts them (tensors.cpp, lm_head.logits).
        case TensorRole::activation: return p.loss_upcast && t.name == logits_name_ ? 4.0 : 2.0;
        case TensorRole::grad:
        // FSDP's copy down for the host's sum (plan.cpu_grad_accumulation) is in the reduce dtype.
        case TensorRole::weight_grad: return t.tier == Tier::cpu ? p.grad_bytes() : 2.0;
        // The host's weights are the fp32 master, unless the weights are homed there (bf16; the
        // master beside the moments).
        // FSDP's fp32 shards (plan.fp32_param_shards): the update writes them unrounded, and each
        // gather's whole range is their bf16 cast.
        case TensorRole::param:
            if (t.shard && p.fsdp_fp32_shards()) return 4.0;
            return t.version == 1 ? 4.0 : t.tier == Tier::gpu || params_on_host_ || host_weights_staged_ ? 2.0 : 4.0;
        // Streamed to the host, they land in DeepSpeed's fp32 partition there.
        case TensorRole::param_grad: return t.shard ? p.kept_grad_bytes() : t.tier != Tier::gpu ? p.host_grad_bytes() : p.grad_bytes();
        case TensorRole::tokens:
        case TensorRole::stats:
        case TensorRole::optimizer_state: return 4.0;
        case TensorRole::mask: return 1.0;  // PyTorch's bool mask, whatever the precision
    }
    return 4.0;
}

const float* RankState::gemm_operand(const Instr& in, const float* p, i64 n, cpu::Fp8 f, int slot) {
    if (in.dtype != DType::fp8 || dev_) return p;
    std::vector<float>& q = fp8_scratch_[static_cast<std::size_t>(slot)];
    q.resize(static_cast<std::size_t>(n));
    cpu::fp8_quantize(q.data(), p, n, f);
    return q.data();
}

void RankState::round_half(float* p, i64 n) const {
    if (w_.plan.precision == Precision::fp16) cpu::round_fp16(p, n);
    else cpu::round_bf16(p, n);
}

void RankState::to_host(float* host, const float* src, i64 n) const {
    if (dev_) dev_->copy(host, src, n);
    else std::memcpy(host, src, static_cast<std::size_t>(n) * sizeof(float));
}

void RankState::from_host(float* dst, const float* host, i64 n) const {
    if (dev_) dev_->copy(dst, host, n);
    else std::memcpy(dst, host, static_cast<std::size_t>(n) * sizeof(float));
}

// The device lane of a Program stream: copies to and from the host on lanes of their own, beside
// the kernels; -1 for the streams the host runs (the CPU optimizer, SSD I/O).
int RankState::lane_of(Stream s) {
    switch (s) {
        case Stream::h2d: return Device::lane_h2d;
        case Stream::d2h: return Device::lane_d2h;
        case Stream::cpu:
        case Stream::ssd: return -1;
        default: return Device::lane_compute;
    }
}

// What runs on the GPU (timed there by events): kernels, device copies, a one-rank collective's
// copy. The offloaded optimizer and the ssd tier's file I/O run on the host.
bool RankState::device_instr(std::size_t i) const {
    const Instr& in = rp_.instrs[i];
    switch (in.kind) {
        case InstrKind::compute:
        case InstrKind::collective: return true;
        case InstrKind::copy: return in.copy != CopyKind::ssd_read && in.copy != CopyKind::ssd_write;
        default: return false;
    }
}

int RankState::host_threads() const {
    if (w_.program.ranks.size() > 1) return 1;
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void RankState::sample_memory(Tier t) {
    if (!w_.options.record_spans) return;
    const auto now = std::chrono::steady_clock::now() - w_.step_start;
    trace_.memory.push_back({t, std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(), pool_of(t)->used.load()});
}

i64 RankState::ring_block_at(std::size_t i, const DataTensor& t, i64 block_rows) const {
    const Instr& in = rp_.instrs[i];
    if (!ring_blocked(in, block_rows, t)) return 0;
    if (t.rows != block_rows * tp_size_) fail(i, "names a tensor that is not tp blocks of its block's rows");
    const int block = ((tp_rank_ - in.ring_step) % tp_size_ + tp_size_) % tp_size_;
    return block * block_rows * t.cols;
}

bool RankState::block_continues(std::size_t i, const DataTensor& t) const {
    const Instr& in = rp_.instrs[i];
    if (in.ring_step <= 0 || rp_.operands.empty() || rp_.operands[i].n_in == 0) return false;
    const Operands& o = rp_.operands[i];
    const DataTensor& first = w_.program.tensors[static_cast<std::size_t>(rp_.operand_ids[o.first])];
    return ring_blocked(in, ring_block_rows(in, first), t);
}

i64 RankState::elements(int id) const {
    const DataTensor& t = w_.program.tensors[static_cast<std::size_t>(id)];
    return t.role == TensorRole::optimizer_state ? state_floats() * t.elements() : rows_of(id) * t.cols;
}

i64 RankState::rows_of(int id) const {
    if (auto it = dyn_rows_.find(id); it != dyn_rows_.end()) return it->second;
    return w_.program.tensors[static_cast<std::size_t>(id)].rows;
}

// The memory behind a tensor: a range of a flat buffer, or a live tensor of this step (allocated
// here when written first; a tokens tensor is filled from the data on first read).
float* RankState::tensor(int id, bool write, std::size_t at) {
    const DataTensor& t = w_.program.tensors[static_cast<std::size_t>(id)];
    switch (t.role) {
        case TensorRole::param:
            if (t.tier != Tier::gpu && t.version == 1) {  // the lock-free update's fp32 master
                MomentBlock& mb = moments(t.offset, t.elements(), Tier::cpu);
                if (mb.master.empty()) fail(at, "names the fp32 master of a plan that keeps none");
                return mb.master.data();
            }
            // Staged through the host, a host range is a live value of the step (below).
            if (t.tier == Tier::cpu && host_weights_staged_) break;
            if (t.tier != Tier::gpu) return host_params() + host_index(t.offset, t.elements());
            if (t.shard) {
                if (const i64 k = param_shard_.index(t.offset, t.elements()); params_sharded_ && k >= 0) return params_.data() + k;
                fail(at, "names parameters outside this rank's shard");
            }
            if (units_fetched()) {  // the unit's fetched or gathered copy
                const int u = unit_at(t.offset);
                const GradUnit& g = units_[static_cast<std::size_t>(u)];
                Live& f = fetched_[static_cast<std::size_t>(u)];
                if (f.buf.empty()) {
                    if (!write) fail(at, "reads parameters of unit " + std::to_string(u) + " while none is fetched to the GPU");
                    try {
                        f.buf = buffer(g.count, Tier::gpu, "rank " + std::to_string(rank_) + " tier gpu, " + (params_on_host_ ? "fetched" : "gathered") + " parameters",
                                       true, weight_bytes());
                    } catch (const OutOfMemory& e) {
                        fail(at, e.what());
                    }
                    sample_memory(Tier::gpu);
                }
                return f.buf.data() + (t.offset - g.offset);
            }
            return params_.data() + t.offset;
        case TensorRole::param_grad:
            if (t.tier != Tier::gpu) return host_grads() + host_index(t.offset, t.elements());
            if (!grads_sharded_) return grads_.data() + t.offset;
            if (t.version >= 0) return grad_value(t, at);
            if (!t.shard) fail(at, "names whole gradients of a rank that keeps a shard of them");
            if (const i64 k = grad_shard_.index(t.offset, t.elements()); k >= 0) return grads_.data() + k;
            fail(at, "names gradients outside this rank's shard");
            break;
        default: break;
    }
    STRATA_ASSERT(t.tier != Tier::ssd, "runtime: the ssd tier has no address");
    auto it = live_.find(id);
    if (it != live_.end()) return it->second.buf.data();
    const std::string& name = w_.program.tensor_names[static_cast<std::size_t>(t.name)];
    if (!write && t.role != TensorRole::tokens) fail(at, "reads " + name + ", which nothing has written this step");
    const Tier tier = live_tier(t);
    Live l;
    try {
        // Zero-filled like the device's allocations, which some kernels accumulate into; the host
        // tier's staging buffers are written whole by their first writer (an SSD read).
        const auto fp8 = fp8_charge_.find(id);
        l.buf = buffer(elements(id), tier, "rank " + std::to_string(rank_) + " tier " + to_string(tier) + ", " + name, tier != Tier::cpu,
                       fp8 != fp8_charge_.end() ? fp8->second : elem_bytes(t));
    } catch (const OutOfMemory& e) {
        fail(at, e.what());
    }
    if (t.role == TensorRole::tokens && w_.options.memory_only) {
        l.pending = token_reads_[id];
    } else if (t.role == TensorRole::tokens) {
        const i64 b = w_.plan.micro_batch, s = w_.model.seq_len;
        const i64 first = first_sample(t.microbatch);
        const cpu::Positions where = positions();
        std::vector<float> whole(static_cast<std::size_t>(s * 2));
        std::vector<float> staged(dev_ ? static_cast<std::size_t>(l.buf.size()) : 0);  // the device's tokens, built here
        float* dst = dev_ ? staged.data() : l.buf.data();
        // An MTP module's tokens (tokens.mtp, its depth as the layer): each row's token and target
        // `shift` places on; past the sequence's end token 0 and no target (-1), as Megatron-Core
        // rolls them and masks the loss.
        const i64 shift = w_.program.tensor_names[static_cast<std::size_t>(t.name)] == "tokens.mtp" ? t.layer : 0;
        for (i64 i = 0; i < b; ++i) {
            w_.data.sample(first + i, s, whole.data());
            float* rows = dst + i * where.local() * 2;  // this CP rank's rows of the sequence
            for (i64 r = 0; r < where.local(); ++r) {
                const i64 pos = where(r) + shift;
                rows[r * 2] = pos < s ? whole[static_cast<std::size_t>(pos * 2)] : 0.0f;
                rows[r * 2 + 1] = pos < s ? whole[static_cast<std::size_t>(pos * 2 + 1)] : -1.0f;
            }
        }
        if (dev_) dev_->copy(l.buf.data(), staged.data(), l.buf.size());
        l.pending = token_reads_[id];
    }
    float* ptr = l.buf.data();
    live_.emplace(id, std::move(l));
    sample_memory(tier);
    return ptr;
}

std::string RankState::describe(std::size_t i) const {
    const Instr& in = rp_.instrs[i];
    const std::string name = in.name > 0 ? w_.program.names[static_cast<std::size_t>(in.name)] : to_string(in.kind);
    return "instruction " + std::to_string(i) + " (" + name + ", " + to_string(in.phase) + ", layer " + std::to_string(in.layer) +
           ", micro-batch " + std::to_string(in.microbatch) + ", stream " + to_string(in.stream) + ")";
}

void RankState::fail(std::size_t i, const std::string& what) const {
    const std::string where = "rank " + std::to_string(rank_) + ", " + describe(i);
    if (what.find("refused") != std::string::npos || what.find("would make") != std::string::npos)
        throw OutOfMemory("out of memory at " + where + ": " + what);
    throw RuntimeError(where + ": " + what);
}

}  // namespace strata::runtime
