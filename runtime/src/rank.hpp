// One rank of a run: its flat parameter, gradient and optimizer buffers, the live tensors of the
// step with their remaining readers, the memory it holds per tier, and the executor that walks its
// RankProgram's streams (step.cpp) and dispatches each instruction (ops.cpp, transfers.cpp, state.cpp).
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "data.hpp"
#include "device.hpp"
#include "strata/runtime/cpu_kernels.hpp"
#include "strata/lowering/params.hpp"
#include "strata/lowering/program.hpp"
#include "strata/runtime/runtime.hpp"
#include "transport.hpp"

namespace strata::runtime {

using i64 = std::int64_t;

/// f(lo, hi) over [0, n) in `threads` contiguous chunks, one thread each (the caller's among them).
/// Each element is computed alone, so the result does not depend on the split.
template <typename F>
void parallel_chunks(i64 n, int threads, F f, i64 min_per_thread = 65536) {
    threads = static_cast<int>(std::max<i64>(1, std::min<i64>(threads, n / min_per_thread)));
    if (threads <= 1) {
        f(i64{0}, n);
        return;
    }
    std::vector<std::thread> pool;
    const i64 per = (n + threads - 1) / threads;
    for (int t = 1; t < threads; ++t) {
        const i64 lo = std::min(n, t * per), hi = std::min(n, lo + per);
        pool.emplace_back([=, &f] { f(lo, hi); });
    }
    f(i64{0}, std::min(n, per));
    for (auto& th : pool) th.join();
}

/// A gated MLP's gate kernel for the model's activation (GeGLU's GELU, else SwiGLU's SiLU).
inline cpu::Gate gate_of(sim::FfnKind k) { return k == sim::FfnKind::geglu ? cpu::Gate::gelu : cpu::Gate::silu; }

/// Where a live tensor of the step sits: optimizer state staged on the host, an offloaded
/// activation's host copy, everything else on the GPU.
inline sim::Tier live_tier(const sim::DataTensor& t) {
    return t.role == sim::TensorRole::optimizer_state || t.tier == sim::Tier::cpu ? sim::Tier::cpu : sim::Tier::gpu;
}

/// An instruction's operands (lower.hpp's dataflow): inputs, then outputs.
struct OperandView {
    const sim::Program& prog;
    const sim::RankProgram& rp;
    const sim::Operands& o;
    int id(int k) const { return rp.operand_ids[o.first + static_cast<std::size_t>(k)]; }
    const sim::DataTensor& in(int k) const { return prog.tensors[static_cast<std::size_t>(id(k))]; }
    const sim::DataTensor& out(int k) const { return in(o.n_in + k); }
};

/// pread/pwrite of all `bytes` (one call moves at most 2 GiB - 4 KiB on Linux); false on failure.
bool full_pio(int fd, void* buf, std::size_t bytes, std::int64_t at, bool read);

/// The ssd tier's file is read and written with O_DIRECT in whole 4 KiB pages: each range of
/// optimizer state has its own page-aligned slot, and host buffers are page-aligned and padded.
constexpr std::size_t kSsdAlign = 4096;
/// Read or write `bytes` (whole pages) of the ssd file at `at`: 1 MiB requests, 8 in flight.
bool ssd_io(int fd, char* host, std::size_t bytes, i64 at, bool read);
inline std::size_t ssd_padded_bytes(i64 floats) {
    return (static_cast<std::size_t>(floats) * sizeof(float) + kSsdAlign - 1) / kSsdAlign * kSsdAlign;
}

/// Bytes in use on one pool (a rank's gpu tier, a node's cpu or ssd tier), with its peak.
struct Pool {
    std::atomic<double> used{0};
    std::atomic<double> peak{0};
    double capacity = 0;  ///< 0 = unlimited
    void reset_peak() { peak = used.load(); }
};

/// Host buffers given back, kept for the next request of the same size: a step allocates the same
/// staging buffers every time, and page faults (or cudaHostAlloc's pinning) on every step would
/// price the allocator into the copies. DeepSpeed allocates its swap buffers once.
class HostCache {
public:
    explicit HostCache(Device* dev) : dev_(dev) {}
    ~HostCache() { clear(); }
    HostCache(const HostCache&) = delete;
    HostCache& operator=(const HostCache&) = delete;
    /// Page-aligned, whole pages; zero-filled when `zero`; nullptr if the allocator refuses.
    float* take(std::size_t bytes, bool zero);
    void give(float* p, std::size_t bytes);
    void clear();

private:
    std::mutex mu_;
    std::multimap<std::size_t, float*> free_;
    Device* dev_;
};

/// A float buffer charged to a pool while it lives: host memory, or on the cuda backend device
/// memory (the gpu tier) or pinned host memory (the cpu tier) from the Device.
class TrackedBuffer {
public:
    TrackedBuffer() = default;
    /// Zero-filled; throws OutOfMemory. dev null: plain host memory. backed false: charged to the
    /// pool only (RunOptions::memory_only), data() points at no usable memory. Charged at
    /// elem_bytes an element: the plan's width of what it holds (floats, whatever that is); on a
    /// device, stored as `half` where that is 2.
    TrackedBuffer(i64 n, Pool* pool, const std::string& what, Device* dev = nullptr, bool on_device = false, bool backed = true,
                  HostCache* cache = nullptr, bool zero = true, double elem_bytes = sizeof(float), Storage half = Storage::bf16);
    ~TrackedBuffer();
    TrackedBuffer(TrackedBuffer&& o) noexcept { *this = std::move(o); }
    TrackedBuffer& operator=(TrackedBuffer&& o) noexcept;
    TrackedBuffer(const TrackedBuffer&) = delete;
    TrackedBuffer& operator=(const TrackedBuffer&) = delete;
    float* data() const { return data_; }
    double charged() const { return charged_bytes_; }  ///< bytes charged to its pool
    i64 size() const { return n_; }
    bool empty() const { return n_ == 0; }

private:
    void release();
    float* data_ = nullptr;
    i64 n_ = 0;
    double charged_bytes_ = 0;  ///< what the pool was charged
    Pool* pool_ = nullptr;
    Device* dev_ = nullptr;
    bool on_device_ = false;
    bool backed_ = true;
    HostCache* cache_ = nullptr;  ///< host memory comes from and goes back to it
};

/// What the whole run shares: the Program, options, transport, data, node pools.
struct World {
    const sim::ModelSpec& model;
    const sim::PlanSpec& plan;
    const RunOptions& options;
    const sim::Program& program;
    Transport transport;
    TokenSource data;
    std::vector<std::unique_ptr<Pool>> node_cpu, node_ssd;  ///< by node
    std::string ssd_dir;
    /// The device of each rank (the cuda backend's, or the emulated one); empty on the cpu backend.
    std::vector<Device*> devices;
    /// Host buffers for reuse: one shared on the cpu backend, one a rank on a device (its pinned
    /// memory and its copies are that device's). Cleared before the devices go.
    std::vector<std::unique_ptr<HostCache>> host_caches;
    Device* device_of(int rank) const { return devices.empty() ? nullptr : devices[static_cast<std::size_t>(rank)]; }
    HostCache* cache_of(int rank) const { return host_caches[devices.empty() ? 0 : static_cast<std::size_t>(rank)].get(); }
    int step = 0;              ///< 0-based step being executed (all ranks)
    /// fp16 plans: Megatron's dynamic loss scaler (DynamicGradScaler), and the steps it skipped
    /// for an overflow, which AdamW's step count leaves out. Updated between steps (Session).
    double loss_scale = 1;
    int growth_tracker = 0, hysteresis_tracker = 0, skipped = 0;
    std::chrono::steady_clock::time_point step_start;
    World(const sim::ModelSpec& m, const sim::PlanSpec& p, const RunOptions& o, const sim::Program& prog);
};

/// Adam moments of the ranges one optimizer instruction updates, on that instruction's tier.
struct MomentBlock {
    i64 offset = 0, count = 0;
    TrackedBuffer m, v;
    TrackedBuffer master;  ///< bf16 plans, on the gpu tier: the fp32 weights (the host's are its params)
};

/// Ranges of a flat buffer that a rank holds, packed back to back: its host copies, its shard
/// of the gradients.
struct PackedRanges {
    struct Seg {
        i64 offset = 0, count = 0, at = 0;  ///< a range of the flat buffer, and where it starts packed
    };
    std::vector<Seg> segs;  ///< by offset, merged where they touch
    i64 elements = 0;
    void build(std::vector<std::pair<i64, i64>> lo_hi);
    /// Where [offset, offset + n) starts packed; -1 where it is not held whole.
    i64 index(i64 offset, i64 n) const;
};

class RankState {
public:
    /// The rank of program `index` of the world's Program (its global rank is the program's).
    RankState(World& w, int index);
    ~RankState();

    /// Initialise parameters (or read them from a checkpoint) and size the optimizer state.
    void init(const std::string& resume_dir);
    /// Execute one step of the Program; throws on failure (the caller aborts the others).
    void run_step();
    void save(const std::string& dir) const;

    int rank() const { return rank_; }
    int node() const { return rp_.node; }
    double loss_sum() const { return loss_sum_; }
    double mtp_loss_sum(int k) const { return k < static_cast<int>(mtp_loss_sum_.size()) ? mtp_loss_sum_[static_cast<std::size_t>(k)] : 0.0; }
    bool skipped() const { return skipped_; }  ///< fp16: this step's update was skipped for an overflow
    const RankTrace& trace() const { return trace_; }
    Pool& gpu_pool() { return gpu_; }
    const PeakDetail& peak_detail() const { return peak_; }
    /// A memory-only walk's host tier of this rank (cpu or ssd): the session sums a node's ranks.
    const Pool& own_host_pool(sim::Tier t) const { return t == sim::Tier::ssd ? ssd_own_ : cpu_own_; }
    Waker& waker() { return waker_; }
    float* param_ptr(const std::string& name, int layer);  ///< a parameter where it lives
    /// One element of a parameter or its gradient (wherever it lives).
    float read_param(const std::string& name, int layer, bool grad, i64 index) const;
    void write_param(const std::string& name, int layer, i64 index, float value);
    const sim::ParamEntry& entry(const std::string& name, int layer) const;
    int adam_step() const { return adam_step_; }
    /// The communicator instruction i runs on, where it runs on one (comms.cpp): a plain
    /// collective's group (members in group order) and stream, or a pipeline transfer's sender and
    /// receiver and direction (stream -1 or -2).
    bool comm_key(std::size_t i, std::vector<int>& members, int& stream) const;
    void set_comm(const std::vector<int>& members, int stream, DeviceComm* c);
    void index_comms();  ///< after the last set_comm: each instruction's communicator
    std::size_t instructions() const { return rp_.instrs.size(); }

private:
    friend struct Ops;
    struct Live {
        TrackedBuffer buf;
        int pending = 0;  ///< reads of this version still to come
    };
    /// What an instruction does to a fetched parameter unit (plan.offload.params on the host):
    /// its first write of a fetch adds that fetch's reads; a read takes one off.
    struct UnitUse {
        int unit = 0;
        int add = 0;
        bool read = false;
    };
    // executor (step.cpp; tensor resolution in rank.cpp)
    void precompute();
    bool try_execute(std::size_t i);
    void finish(std::size_t i);
    float* tensor(int id, bool write, std::size_t at);
    i64 elements(int id) const;
    Pool* pool_of(sim::Tier t);
    void sample_memory(sim::Tier t);
    /// A buffer on tier t: the device's memory for the gpu tier on the cuda backend.
    /// bf16_moment: narrowed Adam moments, bf16 whatever the plan's 2-byte format.
    TrackedBuffer buffer(i64 n, sim::Tier t, const std::string& what, bool zero = true, double elem_bytes = sizeof(float),
                         bool bf16_moment = false);
    /// Bytes an element of t takes in the plan: 2 for a bf16 plan's activations, their gradients
    /// and the GPU's weights (gradients: plan.grad_bytes()), 4 for fp32 values (the loss and the
    /// kernels' statistics, tokens, host weights, optimizer state). The cpu backend holds every
    /// element as a float; a 2-byte one is rounded to bf16 each time it is written (finish()).
    double elem_bytes(const sim::DataTensor& t) const;
    double weight_bytes() const { return w_.plan.precision == sim::Precision::fp32 ? 4.0 : 2.0; }
    /// A ZeRO-3 shard's: fp32 under FSDP's layout (plan.fp32_param_shards), else the weights'.
    double shard_weight_bytes() const { return w_.plan.fsdp_fp32_shards() ? 4.0 : weight_bytes(); }
    /// A 2-byte value of the plan: bf16, or IEEE half for an fp16 plan.
    void round_half(float* p, i64 n) const;
    /// A GEMM operand as the instruction's kernel reads it: under FP8 (an instruction of dtype fp8,
    /// cpu backend) a copy of its n values quantized to format f with their own scale
    /// (cpu::fp8_quantize), held in scratch slot 0 or 1 until the next call; else p itself.
    const float* gemm_operand(const sim::Instr& in, const float* p, i64 n, cpu::Fp8 f, int slot);
    /// Floats of optimizer state per parameter in the ssd tier: m and v, and before them the fp32
    /// master weights of a bf16 plan (fp32 weights are their own master).
    i64 state_floats() const { return w_.plan.precision == sim::Precision::fp32 ? 2 : 3; }
    /// Host <-> the memory behind a tensor or buffer (a plain copy on the cpu backend).
    void to_host(float* host, const float* src, i64 n) const;
    void from_host(float* dst, const float* host, i64 n) const;
    bool device_instr(std::size_t i) const;
    static int lane_of(sim::Stream s);
    int lane(sim::Stream s) const;  ///< lane_of, or a communication lane where the rank has communicators
    /// Host threads this rank may use for its own loops: all cores when it is the only rank.
    int host_threads() const;
    [[noreturn]] void fail(std::size_t i, const std::string& what) const;
    // instruction kinds (ops.cpp)
    void compute(std::size_t i);
    /// The MoE block's instructions (moe_ops.cpp); false when i is none of them.
    bool moe_compute(std::size_t i);
    /// Multi-head latent attention's latent norms, RoPE and attention core (mla_ops.cpp); false
    /// where the instruction is every model's.
    bool mla_compute(std::size_t i);
    void mla_attention(std::size_t i);
    void mla_attention_block(std::size_t i);  ///< a context-parallel block (ring or all-gather) on MLA's rows
    void mla_latent_norm(std::size_t i);
    bool moe_sort(std::size_t i, bool sort);
    /// MoE's collectives (moe_ops.cpp: the EP all-to-alls, the expert-TP gather and reduce-scatter):
    /// this rank's part, and on completion its output, sized by what arrived.
    /// stage_rows false: the counts alone go through the host (the rows through a communicator).
    CollPart moe_collective_part(std::size_t i, bool stage_rows = true);
    void finish_moe_collective(std::size_t i);
    bool moe_collective(const sim::Instr& in) const {
        return (in.coll == sim::CollKind::all_to_all && in.group != sim::Group::cp) || (in.group == sim::Group::etp && w_.model.is_moe());
    }
    /// Rows of a tensor: what arrived for one sized by an all-to-all this step, else its DataTensor's.
    i64 rows_of(int id) const;
    /// `refill`: a gather into a unit's copy that earlier readers still read (start_fetches).
    bool collective(std::size_t i, bool first, bool refill = false);
    bool p2p(std::size_t i, bool first);
    // On the device's communicators (comms.cpp): posts instruction i's operations; the second
    // look completes it once the communicator is done (at once on the cuda backend).
    DeviceComm* comm_of(std::size_t i) const;
    void comm_collective(std::size_t i, DeviceComm& c, const CollPart& part, sim::CollKind kind);
    bool comm_done(std::size_t i);
    /// MoE's exchanges on a communicator: the row counts through the host first (the transport, as
    /// Megatron reads its split sizes back), then the rows (comms.cpp).
    bool comm_moe(std::size_t i, bool first);
    void post_moe_rows(std::size_t i);
    std::map<std::size_t, std::vector<i64>> moe_send_rows_;  ///< by instruction, while its counts travel
    std::set<std::size_t> moe_rows_posted_;
    std::map<std::pair<std::vector<int>, int>, DeviceComm*> comms_;
    std::vector<DeviceComm*> comm_at_;  ///< by instruction (index_comms); empty without communicators
    std::map<std::size_t, std::vector<std::pair<float*, i64>>> comm_scratch_;  ///< released when the operation completes
    bool comm_lanes_ = false;  ///< the communication streams on lanes of their own (with communicators)
    /// Several ranks on one GPU (RunOptions::ranks_share_gpu), and what no communicator carries
    /// (MoE's all-to-alls, CP's exchanges): a collective's or transfer's device operands go through
    /// host copies, the transport runs on those, and the written ones are copied back when it
    /// completes.
    struct Staging {
        std::vector<std::vector<float>> host;
        std::vector<float*> dev;
        std::vector<i64> n;
        std::vector<char> back;  ///< copied back to the device when the transfer completes
    };
    float* stage(std::size_t i, float* dev, i64 n, bool fill, bool back);
    void unstage(std::size_t i);
    void copy(std::size_t i);
    /// RunOptions::memory_only: what instruction i would allocate and read, nothing more.
    void touch(std::size_t i);
    void optimizer(std::size_t i, bool on_cpu_stream);
    void unscale(std::size_t i);  ///< fp16's gradients unscaled and checked (loss_scale.cpp)
    // n floats of fp32 scratch where the rank computes: host memory, or the device's (given back
    // after the kernels queued on it, in their lane's order).
    struct Sum {
        Sum(const RankState& r, std::size_t instr, i64 count) : dev(r.dev_), n(count) {
            if (n <= 0) return;
            if (!dev) {
                host.resize(static_cast<std::size_t>(n));
                p = host.data();
            } else if (!(p = dev->alloc(n, Storage::fp32))) {
                r.fail(instr, "no device memory for a sum's scratch");
            }
        }
        ~Sum() {
            if (dev && p) dev->release(p, n);
        }
        Sum(const Sum&) = delete;
        Sum& operator=(const Sum&) = delete;
        Device* dev;
        i64 n;
        float* p = nullptr;
        std::vector<float> host;
    };
    /// The update of instruction i with its operands resolved: a job that only computes.
    std::function<void()> optimizer_job(std::size_t i, bool on_cpu_stream);
    std::function<void()> skipped_ssd_update(std::size_t i, int n_in);  ///< fp16 overflow: the staged weights stay as they were
    std::function<void()> host_copies(std::size_t i, int from_in, int to_out, int count);
    std::function<void()> host_sums(std::size_t i);
    int update_number(bool on_cpu_stream) const;  ///< AdamW's step count of this update (0: none)
    // A host update runs on a thread of its own, as DeepSpeed's CPU Adam runs beside the GPU's
    // queue: the rank's thread goes on issuing kernels and transfers, and finishes the
    // instruction once the job is done (one at a time: the cpu stream runs in order).
    void start_host_job(std::size_t i, std::function<void()> job);
    bool host_job_done();
    void join_host_job();
    // state (state.cpp)
    void init_params();
    MomentBlock& moments(i64 offset, i64 count, sim::Tier tier);
    float* host_params();
    float* host_grads();
    /// Where the parameters' values live: the gpu tier, or the host when the plan homes them there.
    float* params_home() { return params_on_host_ ? host_params() : params_.data(); }
    const float* params_home() const { return params_on_host_ ? params_host_.data() : params_.data(); }
    i64 home_elements() const { return params_on_host_ ? host_ranges_.elements : params_sharded_ ? param_shard_.elements : layout_.elements(); }
    /// Elements [offset, offset + n) of the flat parameters, wherever they live.
    float* home_at(i64 offset, i64 n) { return params_on_host_ ? host_params() + host_index(offset, n) : params_.data() + gpu_index(offset, n); }
    /// Where elements [offset, offset + n) sit in params_: the whole buffer, or the rank's shard.
    i64 gpu_index(i64 offset, i64 n) const;
    const float* home_at(i64 offset, i64 n) const;
    /// Where elements [offset, offset + n) of the flat buffers sit in this rank's host copies, which
    /// hold only the ranges its program touches on the cpu tier (its ZeRO shard: host_ranges_.segs).
    i64 host_index(i64 offset, i64 n) const;
    void precompute_host_ranges();
    /// The unit (units_) holding element `offset` of the flat buffers.
    int unit_at(i64 offset) const;
    void precompute_fetches();
    bool start_fetches(std::size_t i);  ///< true: refills a copy that still has readers
    void finish_fetches(std::size_t i);
    int ssd_fd();
    i64 ssd_slot(const sim::DataTensor& t) const;
    bool ssd_whole_file(std::vector<char>& buf, bool read) const;

    World& w_;
    const sim::RankProgram& rp_;
    const int rank_;
    sim::ParamLayout layout_;
    std::vector<sim::GradUnit> units_;  ///< what is fetched or gathered whole: layout_'s units, then its expert units
    int tp_rank_ = 0, tp_size_ = 1, dp_rank_ = 0, cp_rank_ = 0, cp_size_ = 1, ep_rank_ = 0, ep_size_ = 1, etp_rank_ = 0, etp_size_ = 1;
    // MoE under expert parallelism: the rows a rank's experts receive vary with the routing.
    std::unordered_map<int, i64> dyn_rows_;  ///< tensor id -> rows, for those sized by what arrived
    std::unordered_map<std::size_t, Staging> staged_;  ///< by instruction, while its transfer is under way
    /// (layer, micro-batch) -> the rows the rank's experts see, before the expert-TP gather: from
    /// each sender per local expert (without EP: per expert of its own tokens), and after it:
    /// [expert-TP rank][that rank's moe_recv_].
    std::map<std::pair<int, int>, std::vector<i64>> moe_recv_, moe_gath_;
    /// (layer, micro-batch) -> the routed rows the rank kept, where token dropping without padding
    /// makes them fewer than tokens x top_k: what the combine must bring back.
    std::map<std::pair<int, int>, i64> moe_kept_;
    /// (layer, micro-batch)s whose expert-side rows were sorted into expert order (the lowering's
    /// moe.sort_by_expert): their grouped GEMMs run expert by expert.
    std::set<std::pair<int, int>> moe_sorted_;
    /// cuda backend: (layer, micro-batch) -> its token order (cpu::moe_order's pos), read back once
    /// at the forward permute; whose order the device holds now.
    std::map<std::pair<int, int>, std::vector<i64>> moe_pos_;
    std::pair<int, int> moe_pos_on_device_{-1, -1};
    std::unordered_map<std::size_t, A2aReceived> a2a_;          ///< by instruction: where a posted all-to-all's rows land
    /// Where this rank's rows (or those of the CP rank `owner`) sit in their sequences.
    cpu::Positions positions(int owner = -1) const { return {w_.model.seq_len, cp_size_, owner < 0 ? cp_rank_ : owner}; }
    /// Global index of the first sequence of a micro-batch (DataTensor::microbatch) on this rank:
    /// Megatron's order, the data-parallel rank's contiguous slice of the global batch.
    i64 first_sample(int microbatch) const;
    /// The dropout of instruction `in` at `site` over the rows of tensor t (off without dropout).
    Dropout dropout(const sim::Instr& in, DropoutSite site, const sim::DataTensor& t) const;
    /// The attention probabilities' dropout over Q/K/V rows `qkv` of `hq` query heads: under
    /// Ulysses (whole sequences, 1/cp of the TP rank's heads) the heads start cp_rank x hq further.
    Dropout attention_dropout(const sim::Instr& in, const sim::DataTensor& qkv, i64 hq) const;
    /// The CP rank whose block arrives `ring` places back along the ring.
    int ring_source(int ring) const { return ((cp_rank_ - ring) % cp_size_ + cp_size_) % cp_size_; }
    /// TP overlap's row blocks (program.hpp ring_blocked): where instruction i's block of `t`
    /// starts, in elements (0 for a whole operand), and the block's rows.
    i64 ring_block_at(std::size_t i, const sim::DataTensor& t, i64 block_rows) const;
    /// A write of a block after the first (ring_step > 0) adds to the value the first began: its
    /// readers are that value's, and it starts none of its own.
    bool block_continues(std::size_t i, const sim::DataTensor& t) const;
    Pool gpu_;  ///< this rank's gpu tier
    PeakDetail peak_;  ///< what it held at its gpu peak (RunOptions::peak_detail)
    void note_peak(std::size_t i);
    /// Instruction i in words: its index, name, phase, layer, micro-batch and stream.
    std::string describe(std::size_t i) const;
    /// A memory-only walk's host tiers, one per rank: its ranks walk at their own pace, so a node's
    /// shared pool would sum them at whatever instants the threads happened to reach, not the
    /// step's (a node's ranks update their optimizer shards at the same time); the walk reports
    /// the sum of each rank's peak, as the memory model does (memory.cpp).
    Pool cpu_own_, ssd_own_;
    TrackedBuffer params_, grads_, params_host_, grads_host_;
    PackedRanges host_ranges_;  ///< what each host copy (parameters, gradients) holds
    /// Gradients kept as shards (ZeRO 2/3; DataTensor::version): grads_ holds the rank's shard;
    /// each reduction's whole range is a value of its own, from its first use to its reduce-scatter.
    bool grads_sharded_ = false;
    PackedRanges grad_shard_;
    /// ZeRO-3 on the GPU over dp > 1: params_ holds the rank's shard, and each gather's range is
    /// a unit's GPU copy held until its last reader, as host-homed parameters' fetches are.
    bool params_sharded_ = false;
    PackedRanges param_shard_;
    bool units_fetched() const { return params_on_host_ || params_sharded_; }
    std::vector<std::pair<i64, i64>> grad_values_;  ///< the values' ranges, (offset, count) by offset
    std::map<std::pair<int, int>, int> grad_readers_;  ///< (value, version) -> its last readers: reduce-scatters, copies down (consumes_grad_values)
    std::map<std::pair<int, int>, Live> grad_live_;       ///< (value, version) -> its buffer, reductions to come
    std::set<std::pair<int, int>> grad_reduced_;          ///< (value, version) consumed this step
    void precompute_grad_values();
    int value_at(i64 offset) const;
    float* grad_value(const sim::DataTensor& t, std::size_t at);
    void finish_grad_values(std::size_t i);
    static bool consumes_grad_values(const sim::Instr& in);
    bool params_on_host_ = false;  ///< plan.offload.params: the GPU holds a unit only while fetched
    /// plan.offload.params = ssd (ZeRO-Infinity's offload_param to NVMe): the weights' home is a
    /// region of the ssd file, bf16 or fp16 (2 B an element) packed as host_ranges_, from params_ssd_at_.
    /// Their host copies are staging, alive from a read (or an update) to its H2D (or its write).
    bool params_on_ssd_ = false;
    i64 params_ssd_at_ = 0;
    /// Reads or writes elements [offset, offset + n) of the weights' region of the ssd file (bf16 or fp16),
    /// `host` holding them as floats (O_DIRECT in page-aligned chunks; a write keeps the bytes of
    /// the partial pages it shares with its neighbours).
    void param_file_io(i64 offset, i64 n, float* host, bool read) const;
    /// The host's weights are staging, not a home: values of the step from the update (or a
    /// fetch's read) to their way home (H2D, or the file). Weights homed on the SSD; or the
    /// optimizer wholly on the SSD with a master in its state and the weights on the GPU, not
    /// lock-free (the state file holds the master from the start: init_params).
    bool host_weights_staged_ = false;
    int logits_name_ = -1;  ///< Program::tensor_names' id of the head's logits (fp32 under plan.loss_upcast)
    /// FP8 plans: the bytes an element charged for an activation a backward FP8 GEMM reads, by
    /// tensor id (precompute_fp8_charges); others charge elem_bytes.
    std::unordered_map<int, double> fp8_charge_;
    void precompute_fp8_charges();
    /// Writes n floats at `at` of the ssd file, zero-padded to a whole page (at init).
    void write_ssd_floats(i64 at, const float* src, i64 n) const;
    /// Whether a tensor is a value of the step, allocated when written and freed after its last read.
    bool tracks(const sim::DataTensor& t) const;
    std::vector<Live> fetched_;    ///< by layout unit: its GPU copy and the reads still to come
    std::vector<std::vector<UnitUse>> unit_uses_;  ///< by instruction
    Device* dev_ = nullptr;  ///< w_.device
    bool lanes_ = false;     ///< a device that runs the Program's work (not a memory walk): copies on lanes
    std::vector<unsigned char> decay_;
    std::vector<MomentBlock> gpu_moments_, cpu_moments_;
    int adam_step_ = 0;
    int ssd_fd_ = -1;
    bool ssd_direct_ = false;  ///< O_DIRECT (false where the filesystem refuses it, e.g. tmpfs)
    std::string ssd_path_;
    i64 ssd_bytes_ = 0;
    std::map<std::pair<i64, i64>, i64> ssd_slot_;  ///< (state offset, elements) -> byte offset in the file

    // per-program precomputation
    std::array<std::vector<std::size_t>, sim::kStreamCount> streams_;
    std::vector<int> version_reads_;  ///< parallel to rp_.operand_ids: reads of the version an output writes
    std::unordered_map<int, int> token_reads_;  ///< tokens tensors: reads in the step
    // per-step state
    std::array<std::size_t, sim::kStreamCount> pc_{};
    std::vector<char> recorded_;  ///< 1: on the host; 2: on a device lane (a CUDA event)
    bool polling_ = false;        ///< a host stream waits for the device
    std::vector<char> posted_;
    std::vector<std::int64_t> started_ns_;
    std::vector<std::int64_t> ended_ns_;  ///< collectives and transfers: when the transport completed them (-1: at finish)
    std::unordered_map<int, Live> live_;
    double loss_sum_ = 0;
    std::vector<double> mtp_loss_sum_;  ///< by MTP module (1-based), this step
    /// MTP (model.mtp_depth): the module a loss instruction belongs to (0: the model's own), read
    /// off its tokens or its loss tensor's layer number (layers + 2k); its rows' mask (1, or 0
    /// where the shift passed the sequence's end); and the scale of its gradient.
    int mtp_depth_of(const sim::DataTensor& t) const;
    std::vector<float> mtp_mask(int k, i64 rows) const;
    std::array<std::vector<float>, 2> fp8_scratch_;  ///< gemm_operand's quantized copies
    void mask_rows(std::size_t i, float* x, int k, i64 rows, i64 cols);
    void add_loss(std::size_t i, float* loss, i64 T, int k);
    bool mtp_op(std::size_t i);  ///< the MTP modules' norms and projection gather (mtp_ops.cpp)
    bool skipped_ = false;
    RankTrace trace_;
    Waker waker_;
    std::thread host_job_;
    std::atomic<bool> host_job_done_{false};
    std::exception_ptr host_job_error_;
    std::size_t host_job_instr_ = 0;
    /// Weights a host update leaves for the device (dst, src, elements): copied by the rank's
    /// thread once the job is done, since the Device is not to be called from two threads.
    std::vector<std::tuple<float*, const float*, i64>> host_uploads_;
};

/// Creates the communicators the ranks' instructions run on (RankState::comm_key), one per group
/// and stream and one per pipeline direction, over the ranks' devices, and gives each rank its
/// ends; `owned` keeps them (comms.cpp). Throws where the Program's sends and receives do not pair.
void connect_comms(World& w, const std::vector<std::unique_ptr<RankState>>& ranks, std::vector<std::unique_ptr<DeviceComm>>& owned);

}  // namespace strata::runtime
