// Private: what the executor asks of a GPU. The cuda backend implements it in a loadable module
// (runtime/cuda/, libstrata_runtime_cuda.so beside the strata binary), opened with dlopen only when
// a run asks for `--backend cuda`, so that no other command maps cuBLAS. The module needs no symbol
// back from strata: this header and cpu_kernels.hpp's Positions are all it shares.
//
// Every kernel keeps the contract of its namesake in cpu_kernels.hpp (same shapes, same formulas,
// fp32), on device pointers, queued in order on the compute lane. Copies may go on lanes of their
// own (the Program's h2d and d2h streams), ordered against the others by the Program's events.
// Calls come from one thread. Errors are thrown as std::runtime_error naming the call, the file
// and line and the library's message.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/runtime/cpu_kernels.hpp"

namespace strata::runtime {

/// How a device buffer stores its elements (an fp16 plan's 2-byte values are IEEE halves; a bf16
/// plan's, and narrowed Adam moments in either, bfloat16).
enum class Storage : int { fp32 = 0, bf16 = 1, fp16 = 2 };

class DeviceComm;

class Device {
public:
    using i64 = std::int64_t;
    virtual ~Device() = default;

    /// "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, driver 13.0, cuBLAS 13.1".
    virtual std::string describe() const = 0;

    // Lanes: where the calls that follow queue their work. Kernels always go on lane_compute. The
    // communicators' operations go on the lanes of the Program's communication streams
    // (lane_comm + k, one CUDA stream each, so that a pipeline's sends and receives never queue
    // behind each other).
    enum Lane : int { lane_compute = 0, lane_h2d = 1, lane_d2h = 2, lane_comm = 3, lane_count = 11 };
    /// Calls on this device from the calling thread go to its GPU (cudaSetDevice; each rank's
    /// thread, and the main thread before it touches a rank's device).
    virtual void bind_thread() = 0;
    /// A communicator over `members` (devices of this one's kind in this process, in group order,
    /// this one among them): one end per member, in that order. On the cuda backend an NCCL
    /// communicator, which needs the members on different GPUs.
    virtual std::vector<std::unique_ptr<DeviceComm>> comms_with(const std::vector<Device*>& members) = 0;
    virtual void set_lane(int lane) = 0;
    /// The Program's event `id` at this point of the current lane; a lane waits for it (on the
    /// device); the host asks whether the device has passed it.
    virtual void record(std::size_t id) = 0;
    virtual void wait(std::size_t id) = 0;
    virtual bool reached(std::size_t id) = 0;

    // Memory. The device tier comes zero-filled from a caching allocator: a freed block is reused
    // by the next request of its size, after what touched it on other lanes; nullptr when refused.
    /// Storage::bf16 or fp16 (IEEE halves): the buffer holds 2-byte values (the cpu backend rounds
    /// floats instead); its pointer is still addressed in floats, as every other, and the kernels
    /// read and write it in its width.
    virtual float* alloc(i64 n, Storage s) = 0;
    virtual void release(float* p, i64 n) = 0;
    virtual float* alloc_host(i64 n) = 0;  ///< pinned host memory, zero-filled
    virtual void release_host(float* p) = 0;
    /// n floats between any two of device and (pinned or pageable) host memory. Returns once the
    /// host may use a host-side buffer, so host code that follows reads the result.
    virtual void copy(float* dst, const float* src, i64 n) = 0;
    /// The same, queued on the current lane; the host may touch a host-side buffer once an event
    /// recorded after it is reached (or after host_settle).
    virtual void copy_async(float* dst, const float* src, i64 n) = 0;
    /// Returns when no queued copy touches the pinned buffer that holds `host` (before the host
    /// reuses a buffer it gave back).
    virtual void host_settle(const float* host) = 0;
    virtual void zero(float* p, i64 n) = 0;
    virtual void sync() = 0;                        ///< the host waits for everything queued, every lane
    virtual double sum(const float* p, i64 n) = 0;  ///< sum of n device floats, to the host
    /// The most bytes the device's allocator held at once: cached blocks and workspace included.
    virtual double reserved_peak_bytes() = 0;

    // Timing: an event at this point of the stream. After sync(), times() gives every slot marked
    // since timing_reset in nanoseconds after slot 0 (-1 for a slot not marked).
    virtual void timing_reset(std::size_t slots) = 0;
    virtual void mark(std::size_t slot) = 0;
    virtual void times(std::vector<std::int64_t>& out_ns) = 0;

    // Kernels (cpu_kernels.hpp).
    virtual void matmul_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 K, i64 N) = 0;
    virtual void matmul_dgrad(float* dx, const float* dy, const float* w, i64 T, i64 K, i64 N) = 0;
    /// dx += dy w (the MoE router's input gradient, added to the one the experts' path left).
    virtual void matmul_dgrad_add(float* dx, const float* dy, const float* w, i64 T, i64 K, i64 N) = 0;
    virtual void matmul_wgrad(float* dw, float* db, const float* x, const float* dy, i64 T, i64 K, i64 N) = 0;
    virtual void bias_grad(float* db, const float* d, i64 T, i64 N) = 0;
    virtual void norm_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 C) = 0;
    virtual void norm_backward(float* dx, float* dw, float* db, const float* x, const float* dy, const float* w,
                               const float* residual, bool layernorm, i64 T, i64 C) = 0;
    /// QK-norm over the fused QKV rows [T, W]: each of the hq query heads and hkv key heads (hd
    /// wide, at the row's start and after the queries) normed with its weight; V copied through.
    virtual void qk_norm_forward(float* y, const float* x, const float* wq, const float* bq, const float* wk, const float* bk, i64 T,
                                 i64 W, i64 hq, i64 hkv, i64 hd) = 0;
    /// dx = dy on V's columns; the heads' gradients, and their weights' accumulated.
    virtual void qk_norm_backward(float* dx, float* dwq, float* dbq, float* dwk, float* dbk, const float* x, const float* dy,
                                  const float* wq, const float* wk, bool layernorm, i64 T, i64 W, i64 hq, i64 hkv, i64 hd) = 0;
    virtual void gelu_forward(float* y, const float* x, i64 n) = 0;
    virtual void gelu_backward(float* dx, const float* x, const float* dy, i64 n) = 0;
    virtual void glu_forward(float* y, const float* x, i64 T, i64 F, cpu::Gate gate) = 0;
    virtual void glu_backward(float* dx, const float* x, const float* dy, i64 T, i64 F, cpu::Gate gate) = 0;
    virtual void relu2_forward(float* y, const float* x, i64 n) = 0;
    virtual void relu2_backward(float* dx, const float* x, const float* dy, i64 n) = 0;
    virtual void relu_forward(float* y, const float* x, i64 n) = 0;
    virtual void relu_backward(float* dx, const float* y, const float* dy, i64 n) = 0;
    virtual void add(float* out, const float* a, const float* b, const float* bias, i64 T, i64 C) = 0;
    /// Row t at position where(t): its sequence's, in context parallelism's load-balanced layout.
    virtual void rope(float* qkv, i64 T, const cpu::Positions& where, i64 hq, i64 hkv, i64 d, bool inverse) = 0;
    /// window > 0: a query sees itself and the window - 1 keys before it (model.sliding_window).
    virtual void attention_forward(float* out, float* lse, const float* qkv, i64 T, i64 seq, i64 hq, i64 hkv, i64 d,
                                   const Dropout& drop, i64 window) = 0;
    virtual void attention_backward(float* dqkv, const float* qkv, const float* out, const float* lse, const float* dout, i64 T,
                                    i64 seq, i64 hq, i64 hkv, i64 d, const Dropout& drop, i64 window) = 0;
    virtual void attention_probs(float* probs, float* mask, float* dropped, const float* qkv, const float* lse, i64 T, i64 seq, i64 hq,
                                 i64 hkv, i64 d, const Dropout& drop, i64 window) = 0;
    virtual void attention_probs_grad(float* dprobs, const float* qkv, const float* dout, i64 T, i64 seq, i64 hq, i64 hkv, i64 d) = 0;
    /// Context parallelism's ring (cpu_kernels.hpp's contract): the rank's queries against one block
    /// of keys and values (rows of stride kv_stride at kv), written into out and lse or merged in.
    virtual void attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, i64 kv_stride, const cpu::Positions& qpos,
                                         const cpu::Positions& kpos, i64 T, i64 hq, i64 hkv, i64 d, bool merge, const Dropout& drop) = 0;
    virtual void attention_block_backward(float* dqkv, float* dkv, i64 kv_stride, const float* qkv, const float* kv, const float* out,
                                          const float* lse, const float* dout, const cpu::Positions& qpos, const cpu::Positions& kpos, i64 T,
                                          i64 hq, i64 hkv, i64 d, bool accumulate, const Dropout& drop) = 0;
    /// dst[t, dst_cols - src_cols + c] += src[t, c]: the K/V gradients returned around the ring,
    /// added into the trailing columns of the rank's dqkv.
    virtual void add_columns(float* dst, i64 dst_cols, const float* src, i64 src_cols, i64 rows) = 0;
    /// Multi-head latent attention (cpu_kernels.hpp's contract): a column block copied between rows
    /// of different widths, and the RoPE that assembles the attention's rows, and its backward.
    virtual void copy_columns(float* dst, i64 dst_stride, const float* src, i64 src_stride, i64 cols, i64 rows) = 0;
    virtual void mla_rope_forward(float* qkv, const float* q, const float* kv, const float* k_rope, i64 T, const cpu::Positions& where,
                                  i64 heads, i64 nope, i64 rope, i64 dv) = 0;
    virtual void mla_rope_backward(float* dq, float* dkv, float* dk_rope, const float* dqkv, i64 T, const cpu::Positions& where, i64 heads,
                                   i64 nope, i64 rope, i64 dv) = 0;
    /// Hidden-state dropout: row r is token where(drop.row0 + r) of sequence (drop.row0 + r) / where.local().
    virtual void dropout_forward(float* y, float* mask, const float* x, i64 T, i64 C, const Dropout& drop, const cpu::Positions& where) = 0;
    virtual void dropout_add(float* out, float* mask, const float* a, const float* b, const float* bias, i64 T, i64 C, const Dropout& drop,
                             const cpu::Positions& where) = 0;
    virtual void mul(float* out, const float* a, const float* b, i64 n) = 0;
    virtual void embedding_forward(float* out, const float* tokens, const float* table, i64 first, i64 rows, i64 T, i64 C) = 0;
    virtual void embedding_backward(float* dtable, const float* tokens, const float* dout, i64 first, i64 rows, i64 T, i64 C) = 0;
    /// Row g of the rank's rows takes the position embedding of where(g).
    virtual void position_forward(float* out, const float* e, const float* pos, i64 row0, i64 rows_out, const cpu::Positions& where, i64 C) = 0;
    virtual void position_backward(float* dpos, const float* d, i64 T, const cpu::Positions& where, i64 C) = 0;
    virtual void loss_stats(float* stats, const float* logits, const float* tokens, i64 first, i64 T, i64 V) = 0;
    virtual void loss_combine(float* loss, float* lse, const float* stats, i64 n, i64 T) = 0;
    /// loss_combine's lse from `shards` shards' stats, then loss_backward (in one call: no scratch).
    virtual void loss_backward(float* dlogits, const float* logits, const float* tokens, const float* stats, i64 shards, i64 first,
                               i64 T, i64 V, float scale) = 0;
    // Mixture of experts, one rank (cpu_kernels.hpp's moe_*). The token order of the moves is the
    // host's (cpu::moe_order over the routing read back, as Megatron reads its split sizes):
    // moe_set_order copies it (T x k rows, -1 for a dropped choice) for the moves that follow.
    virtual void moe_set_order(const i64* pos, i64 n) = 0;
    /// Top-k of each token's E logits (ties to the lower id) and the softmax over the chosen:
    /// routing [T, 2k] = ids, then weights. Without expert groups.
    /// groups > 0: group-limited routing (cpu::moe_route's contract).
    virtual void moe_route(float* routing, const float* logits, i64 T, i64 E, i64 k, i64 groups, i64 group_topk) = 0;
    virtual void moe_route_backward(float* dlogits, const float* routing, const float* dprobs, i64 T, i64 E, i64 k) = 0;
    virtual void moe_permute(float* xp, const float* x, i64 T, i64 k, i64 C) = 0;
    virtual void moe_permute_backward(float* dx, const float* dxp, i64 T, i64 k, i64 C) = 0;
    /// routing null: every weight 1 (the weights applied inside the experts).
    virtual void moe_unpermute(float* y, const float* ye, const float* routing, i64 T, i64 k, i64 C) = 0;
    /// dye = w dY per kept row; dprobs (may be null) = dY . ye per choice, 0 where dropped.
    virtual void moe_unpermute_backward(float* dye, float* dprobs, const float* dy, const float* ye, const float* routing, i64 T,
                                        i64 k, i64 C) = 0;
    /// Each kept row's router weight in expert order (pr[pos] = weight), and back (dp[t k + j] = dr[pos]).
    virtual void moe_permute_probs(float* pr, const float* routing, i64 T, i64 k) = 0;
    virtual void moe_permute_probs_backward(float* dp, const float* dr, i64 T, i64 k) = 0;
    /// y[r, :] = x[r, :] w[r] (in place allowed); out[r] = a[r, :] . b[r, :].
    virtual void scale_rows(float* y, const float* x, const float* w, i64 rows, i64 C) = 0;
    virtual void row_dot(float* out, const float* a, const float* b, i64 rows, i64 C) = 0;
    /// fp16's loss scaling (Megatron's _unscale_main_grads_and_check_for_nan): g *= inv in place,
    /// and *found = 1 when an element was inf or NaN before (found is not cleared: one flag for
    /// several ranges).
    virtual void unscale(float* g, i64 n, float inv, float* found) = 0;
    /// decay: a device array of n bytes (1 = decays), or null: every element decays by wd (the
    /// executor calls it per parameter, with wd 0 for those that do not decay).
    virtual void adamw(float* p, float* m, float* v, const float* g, const unsigned char* decay, i64 n, float lr, float b1,
                       float b2, float eps, float wd, int step) = 0;
    /// adamw over several ranges [begin, begin + len) of the same arrays, each with its own weight
    /// decay, in one launch (apex's multi_tensor_apply): a step's parameters are hundreds of
    /// tensors, most of them small. The ranges' table is kept on the device for the next call.
    /// weights: where the updated p (a bf16 plan's fp32 master) is also written, in its width, in
    /// the same pass (no copy after); null: nowhere.
    virtual void adamw_ranges(float* p, float* m, float* v, const float* g, float* weights, const std::vector<i64>& begin,
                              const std::vector<i64>& len, const std::vector<float>& wd, float lr, float b1, float b2, float eps,
                              int step) = 0;
};

/// One member's end of a communicator among devices of this process (NCCL's ncclComm_t on the
/// cuda backend). Operations are queued on the owning device's current lane and must be posted in
/// the same order by every member, which is how NCCL pairs them; `tag` (the Program's match id)
/// lets the emulated device check that they were. Buffers are device buffers of one storage per
/// operation (what NCCL cannot convert, the caller converts first).
class DeviceComm {
public:
    using i64 = std::int64_t;
    virtual ~DeviceComm() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    /// out = the sum over members of in (n elements; out may be in).
    virtual void all_reduce(float* out, const float* in, i64 n, std::int64_t tag) = 0;
    /// Member q's elements [offset[q], offset[q + 1]) of out, read from its `in` (which may be
    /// out + offset[q]), to every member's out. offset has size() + 1 entries.
    virtual void all_gather(float* out, const float* in, const std::vector<i64>& offset, std::int64_t tag) = 0;
    enum class Reduce : int {
        write,       ///< out = the member's range of the sum
        accumulate,  ///< out += the member's range of the sum
        zero_rest    ///< out is the whole range (it may be in): the sum at out + offset[rank()], the rest zeroed
    };
    /// Member r receives at `out` the sum over members of in[offset[r], offset[r + 1]).
    virtual void reduce_scatter(float* out, const float* in, const std::vector<i64>& offset, Reduce mode, std::int64_t tag) = 0;
    /// Member r sends in[send[d], send[d + 1]) to each member d and receives member q's part at
    /// out[recv[q], recv[q + 1]) (MoE's dispatch and combine: counts from the routing, which the
    /// members exchanged before). send and recv have size() + 1 entries.
    virtual void all_to_all(float* out, const float* in, const std::vector<i64>& send, const std::vector<i64>& recv, std::int64_t tag) = 0;
    /// Context parallelism's ring: member r sends columns [col0, col0 + cols) of its `rows` rows of
    /// in (rows `stride` apart) to member r + shift (mod size()), and receives member r - shift's
    /// into out (rows x cols, packed), added to what out holds when `accumulate`.
    virtual void ring_shift(float* out, const float* in, i64 rows, i64 stride, i64 col0, i64 cols, int shift, bool accumulate,
                            std::int64_t tag) = 0;
    /// Ulysses (context parallelism's all-to-all, transport.hpp's CollPart::ulysses): to_heads, each
    /// member's `rows` sequence-split rows [rows x W] (W the sum of `segments`, the column widths of
    /// [q | k | v] or [out]) become every sequence row of its 1/size() of each segment's columns
    /// [size() rows x W / size()], in sequence order (`seq`-long sequences in the load-balanced
    /// layout); else the inverse.
    virtual void ulysses(float* out, const float* in, i64 rows, const std::vector<i64>& segments, i64 seq, bool to_heads,
                         std::int64_t tag) = 0;
    /// A communicator of two for one pipeline direction: member 0 sends, member 1 receives.
    virtual void send(const float* p, i64 n, int peer, std::int64_t tag) = 0;
    virtual void recv(float* p, i64 n, int peer, std::int64_t tag) = 0;
    /// Whether everything this member posted has completed as far as the host is concerned: on
    /// the cuda backend at once (the device orders it on the lane); on the emulated device once
    /// every member has posted it. `notify` is called (from any thread) when that may change.
    virtual bool done() = 0;
    virtual void set_notify(std::function<void()> notify) = 0;
    /// Gives up every pending operation, from any thread (NCCL's ncclCommAbort): after a rank has
    /// failed, its peers' operations would otherwise wait for it forever, and so would the device
    /// synchronisations queued behind them. The communicator is unusable afterwards.
    virtual void abort() = 0;
};

/// The module's entry point: a new device on GPU `gpu`, or null with the reason in `why`.
constexpr int kDeviceApiVersion = 17;  // 2: dropout; 3: lanes; 4: adamw_ranges; 5: bf16 buffers; 6: AdamW writes the weights; 7: ReLU;
                                      // 8: QK-norm; 9: MoE on one rank; 10: an accumulating dgrad; 11: sliding windows;
                                      // 12: positions in context parallelism's layout (rope, dropout, learned positions); 13: the ring's blocks;
                                      // 14: group-limited routing; 15: dropout's arguments in the cpu kernels' order;
                                      // 16: fp16 storage and the loss scale's unscale; 17: several GPUs,
                                      // communicators (NCCL) and the communication lanes
constexpr const char* kCudaModuleFile = "libstrata_runtime_cuda.so";
constexpr const char* kCudaModuleSymbol = "strata_runtime_cuda_create";
using CreateDevice = Device* (*)(int api_version, int gpu, std::string* why);

/// Opens the cuda module (once per process) and creates a device on GPU `gpu`; throws RuntimeError
/// naming every place looked in, or the module's reason (no GPU, fewer GPUs than asked for, a
/// driver too old). device_loader.cpp.
std::unique_ptr<Device> open_cuda_device(int gpu = 0);

/// The Device interface over the cpu kernels in this process, with the cuda device's rules checked
/// (Backend::emulated; device_emulated.cpp says which).
std::unique_ptr<Device> make_emulated_device();

}  // namespace strata::runtime
