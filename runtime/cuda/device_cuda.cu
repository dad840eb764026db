// The runtime's cuda backend (device.hpp). Arithmetic is fp32, as the cpu backend's, so that the
// two backends agree to rounding and the cpu kernels are the reference of every kernel here
// (tests/runtime/test_cuda.cpp); storage is fp32, bf16 or fp16 per buffer, as the plan's precision
// gives each tensor (2-byte buffers are handed out as handles: halves.hpp). GEMMs go through
// cublasGemmEx: fp32 operands in plain fp32 math (no TF32, which is what a plan of precision fp32
// is priced as), bf16 or fp16 operands on the tensor cores with fp32 accumulation. Attention
// (attention.cuh): flash kernels for bf16 with 64- or 128-wide heads (flash.cuh), else exact
// batched GEMMs over causal row blocks with the scores in scratch. Everything else is an own
// kernel in the style of llm.c's reference kernels (kernels.cuh). Three lanes, each a CUDA stream:
// kernels, H2D copies and D2H copies, as the Program's compute, h2d and d2h streams, ordered by
// its record/wait pairs (events). A block freed on one lane is fenced: the lane that gets it next
// waits for the last work that touched it on the others (its last copies, and the kernels issued
// before it was freed), as PyTorch's caching allocator does with record_stream. One translation
// unit: the .cuh files are parts of it, included in order.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "device.hpp"
#include "halves.hpp"
#include "ulysses_index.hpp"

namespace strata::runtime {
namespace {

using i64 = std::int64_t;

std::string where(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

#define CK(call)                                                                                                   \
    do {                                                                                                           \
        const cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess)                                                                                     \
            throw std::runtime_error(std::string("cuda: ") + #call + " failed at " + where(__FILE__, __LINE__) + \
                                     ": " + cudaGetErrorString(e_));                                               \
    } while (0)
#define CB(call)                                                                                                      \
    do {                                                                                                              \
        const cublasStatus_t s_ = (call);                                                                             \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                              \
            throw std::runtime_error(std::string("cublas: ") + #call + " failed at " + where(__FILE__, __LINE__) + \
                                     ": " + cublasGetStatusString(s_));                                               \
    } while (0)
#define LAUNCHED() CK(cudaGetLastError())

#include "kernels.cuh"  // inside this unnamed namespace
#include "flash.cuh"
#include "moe_kernels.cuh"
#include "ring_attention.cuh"
#include "mla_kernels.cuh"
#include "comm_kernels.cuh"


class CudaComm;

class CudaDevice final : public Device {
    // Every cudaEvent_t below is owned by one place: a Use's last copy on a lane, a FreeBlock's
    // fence, or spare_ (re-recording an event others already waited for is safe: a wait takes the
    // event's state when it is queued).
    struct Use {
        std::size_t bytes = 0;
        cudaEvent_t last[lane_count] = {};  ///< after the last copy on each lane that touched it
    };
    struct FreeBlock {
        void* p = nullptr;
        cudaEvent_t fence[lane_count] = {};
    };

public:
    explicit CudaDevice(int gpu) : gpu_(gpu) {
        CK(cudaSetDevice(gpu));
        require_kernel_image();
        for (auto& l : lanes_) CK(cudaStreamCreateWithFlags(&l, cudaStreamNonBlocking));
        stream_ = lanes_[lane_compute];
        CB(cublasCreate(&blas_));
        CB(cublasSetStream(blas_, lanes_[lane_compute]));  // kernels run on the compute lane only
        CB(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));  // plain fp32 SGEMM: no TF32 behind the plan's back
        CK(cudaMalloc(&sum_, sizeof(double)));
        cudaDeviceProp prop{};
        CK(cudaGetDeviceProperties(&prop, gpu));
        int drv = 0, rt = 0, blas = 0;
        cudaDriverGetVersion(&drv);
        cudaRuntimeGetVersion(&rt);
        cublasGetVersion(blas_, &blas);
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s, sm_%d%d, %d SMs, %.1f GiB, driver %d.%d, runtime %d.%d, cuBLAS %d", prop.name, prop.major,
                      prop.minor, prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1u << 30), drv / 1000,
                      (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10, blas);
        desc_ = buf;
    }
    ~CudaDevice() override {
        cudaSetDevice(gpu_);
        cudaDeviceSynchronize();
        for (auto& [bytes, list] : cache_)
            for (FreeBlock& b : list) cudaFree(b.p);
        for (cudaEvent_t e : events_) cudaEventDestroy(e);
        for (cudaEvent_t e : program_events_) cudaEventDestroy(e);
        for (auto& [key, t] : adam_tables_) cudaFree(t.dev);
        for (cudaEvent_t e : spare_) cudaEventDestroy(e);
        for (auto& [p, u] : live_)
            for (cudaEvent_t e : u.last) if (e) cudaEventDestroy(e);
        for (auto& [p, u] : pinned_)
            for (cudaEvent_t e : u.last) if (e) cudaEventDestroy(e);
        cudaFree(sum_);
        cudaFree(scratch_);
        cudaFree(wide_);
        cudaFree(order_);
        for (std::uint16_t* st : host_staging_) cudaFreeHost(st);
        cublasDestroy(blas_);
        for (auto& l : lanes_) cudaStreamDestroy(l);
    }

    std::string describe() const override { return desc_; }
    void bind_thread() override { CK(cudaSetDevice(gpu_)); }
    std::vector<std::unique_ptr<DeviceComm>> comms_with(const std::vector<Device*>& members) override;  ///< comm.cuh
    // The current lane's stream (for comm.cuh), and the allocations at these real addresses
    // remember the work queued there so far: a copy's ends, a communicator's buffers.
    cudaStream_t stream() const { return stream_; }
    void touched(std::initializer_list<const void*> ends) {
        for (const void* end : ends) {
            Use* u = end ? use_of(end) : nullptr;
            if (!u) continue;
            cudaEvent_t& slot = u->last[lane_];
            if (!slot) slot = event();
            CK(cudaEventRecord(slot, stream_));
        }
    }

    float* alloc(i64 n, Storage fmt) override {
        if (fmt == Storage::fp32) return static_cast<float*>(alloc_block(elem_bytes(n, false)));
        void* real = alloc_block(elem_bytes(n, true));
        if (!real) return nullptr;
        char* handle = halves_.add(static_cast<char*>(real), elem_bytes(n, false), static_cast<int>(fmt));
        if (!handle) release_block(real, elem_bytes(n, true));
        return reinterpret_cast<float*>(handle);
    }
    void release(float* p, i64 n) override {
        if (!p) return;
        if (char* real = halves_.remove(reinterpret_cast<char*>(p))) release_block(real, elem_bytes(n, true));
        else release_block(p, elem_bytes(n, false));
    }
    // The caching allocator's blocks (allocator.cuh).
    void* alloc_block(std::size_t bytes);
    void release_block(void* p, std::size_t bytes);
    // Pinned host memory and copies between any two ends (copies.cuh).
    float* alloc_host(i64 n) override;
    void release_host(float* p) override;
    void copy(float* dst, const float* src, i64 n) override;
    void copy_async(float* dst, const float* src, i64 n) override;
    void host_settle(const float* host) override;
    void set_lane(int lane) override {
        if (lane < 0 || lane >= lane_count) throw std::runtime_error("cuda: no lane " + std::to_string(lane));
        lane_ = lane;
        stream_ = lanes_[lane];
    }
    void record(std::size_t event_id) override {
        while (program_events_.size() <= event_id) {
            cudaEvent_t e;
            CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
            program_events_.push_back(e);
        }
        CK(cudaEventRecord(program_events_[event_id], stream_));
    }
    void wait(std::size_t event_id) override {
        if (event_id >= program_events_.size()) throw std::runtime_error("cuda: a wait for an event never recorded");
        CK(cudaStreamWaitEvent(stream_, program_events_[event_id], 0));
    }
    bool reached(std::size_t event_id) override {
        if (event_id >= program_events_.size()) throw std::runtime_error("cuda: a query of an event never recorded");
        const cudaError_t e = cudaEventQuery(program_events_[event_id]);
        if (e == cudaErrorNotReady) {
            cudaGetLastError();
            return false;
        }
        CK(e);
        return true;
    }
    void zero(float* p, i64 n) override {  // a kernel's: on the compute lane
        const TV t = tv(p);
        if (n > 0) CK(cudaMemsetAsync(t.p, 0, static_cast<std::size_t>(n) * (t.fmt ? 2 : 4), lanes_[lane_compute]));
    }
    void zero_raw(TV t, i64 n) {
        if (n > 0) CK(cudaMemsetAsync(t.p, 0, static_cast<std::size_t>(n) * (t.fmt ? 2 : 4), lanes_[lane_compute]));
    }
    void sync() override {
        for (auto& l : lanes_) CK(cudaStreamSynchronize(l));
    }
    double sum(const float* p, i64 n) override {
        cudaStream_t ks = lanes_[lane_compute];  // a kernel's
        CK(cudaMemsetAsync(sum_, 0, sizeof(double), ks));
        if (n > 0) {
            k_sum<<<std::min<unsigned>(blocks_for(n), 1024), kThreads, 0, ks>>>(sum_, tv(p), n);
            LAUNCHED();
        }
        double h = 0;
        CK(cudaMemcpyAsync(&h, sum_, sizeof(double), cudaMemcpyDeviceToHost, ks));
        CK(cudaStreamSynchronize(ks));
        return h;
    }
    double reserved_peak_bytes() override { return reserved_peak_; }

    void timing_reset(std::size_t slots) override {
        while (events_.size() < slots) {
            cudaEvent_t e;
            CK(cudaEventCreate(&e));
            events_.push_back(e);
        }
        marked_.assign(slots, 0);
    }
    void mark(std::size_t slot) override {
        if (slot >= marked_.size()) throw std::runtime_error("cuda: timing slot out of range");
        CK(cudaEventRecord(events_[slot], stream_));
        marked_[slot] = 1;
    }
    void times(std::vector<std::int64_t>& out) override {
        out.assign(marked_.size(), -1);
        if (marked_.empty() || !marked_[0]) return;
        CK(cudaEventSynchronize(events_[0]));
        for (std::size_t s = 0; s < marked_.size(); ++s) {
            if (!marked_[s]) continue;
            float ms = 0;
            CK(cudaEventSynchronize(events_[s]));
            CK(cudaEventElapsedTime(&ms, events_[0], events_[s]));
            out[s] = static_cast<std::int64_t>(static_cast<double>(ms) * 1e6);
        }
    }

    // Row-major C[M,N] = op(A) op(B) (batched with strides): cuBLAS sees the transposes. fp32
    // operands in plain fp32 math; bf16 (or fp16) A and B on the tensor cores into a C of their width or fp32 (the fp32
    // gradient accumulated in place: Megatron's fused wgrad into main_grad). Other mixes (none in
    // today's dataflow) are widened to fp32 first.
    void gemm(bool ta, bool tb, i64 M, i64 N, i64 K, TV A, i64 lda, i64 sa, TV B, i64 ldb, i64 sb, TV C, i64 ldc, i64 sc, i64 batch,
              float alpha, float beta) {
        if (A.fmt != B.fmt || (C.fmt && C.fmt != A.fmt)) {
            if (batch != 1) throw std::runtime_error("cuda: a batched GEMM of mixed widths");
            const i64 na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
            float* w = wide_scratch(na + nb + nc);
            const TV wa{w, 0}, wb{w + na, 0}, wc{w + na + nb, 0};
            for (auto [to, from, n] : {std::tuple<TV, TV, i64>{wa, A, na}, {wb, B, nb}, {wc, C, beta != 0 ? nc : 0}})
                launch1(k_convert, n, to, from, n);
            gemm(ta, tb, M, N, K, wa, lda, 0, wb, ldb, 0, wc, ldc, 0, 1, alpha, beta);
            launch1(k_convert, nc, C, wc, nc);
            return;
        }
        auto type = [](int fmt) { return fmt == 1 ? CUDA_R_16BF : fmt == 2 ? CUDA_R_16F : CUDA_R_32F; };
        const cudaDataType ab = type(A.fmt), c = type(C.fmt);
        CB(cublasGemmStridedBatchedEx(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                                      static_cast<int>(M), static_cast<int>(K), &alpha, B.p, ab, static_cast<int>(ldb), sb, A.p, ab,
                                      static_cast<int>(lda), sa, &beta, C.p, c, static_cast<int>(ldc), sc, static_cast<int>(batch),
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }

    void matmul_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 K, i64 N) override {
        gemm(false, true, T, N, K, tv(x), K, 0, tv(w), K, 0, tv(y), N, 0, 1, 1.0f, 0.0f);
        if (b) launch1(k_bias_rows, T * N, tv(y), tv(b), T, N);
    }
    void matmul_dgrad(float* dx, const float* dy, const float* w, i64 T, i64 K, i64 N) override {
        gemm(false, false, T, K, N, tv(dy), N, 0, tv(w), K, 0, tv(dx), K, 0, 1, 1.0f, 0.0f);
    }
    void matmul_dgrad_add(float* dx, const float* dy, const float* w, i64 T, i64 K, i64 N) override {
        gemm(false, false, T, K, N, tv(dy), N, 0, tv(w), K, 0, tv(dx), K, 0, 1, 1.0f, 1.0f);
    }
    void matmul_wgrad(float* dw, float* db, const float* x, const float* dy, i64 T, i64 K, i64 N) override {
        gemm(true, false, N, K, T, tv(dy), N, 0, tv(x), K, 0, tv(dw), K, 0, 1, 1.0f, 1.0f);
        if (db) bias_grad(db, dy, T, N);
    }
    void bias_grad(float* db, const float* d, i64 T, i64 N) override {
        if (T == 0 || N == 0) return;
        k_col_sum<<<col_grid(T, N), dim3(32, kColLanes), 0, lanes_[lane_compute]>>>(tv(db), tv(d), T, N);
        LAUNCHED();
    }
    // Norms (norms.cuh): rows back to back, or QK-norm's heads inside the fused QKV rows.
    void norm_rows(float* y, const float* x, const float* w, const float* b, i64 T, i64 C, RowMap map);
    void norm_rows_backward(float* dx, float* dw, float* db, const float* x, const float* dy, const float* w, const float* residual,
                            bool layernorm, i64 T, i64 C, RowMap map);
    void norm_forward(float* y, const float* x, const float* w, const float* b, i64 T, i64 C) override {
        norm_rows(y, x, w, b, T, C, RowMap{});
    }
    void norm_backward(float* dx, float* dw, float* db, const float* x, const float* dy, const float* w, const float* residual,
                       bool layernorm, i64 T, i64 C) override {
        norm_rows_backward(dx, dw, db, x, dy, w, residual, layernorm, T, C, RowMap{});
    }
    void qk_norm_forward(float* y, const float* x, const float* wq, const float* bq, const float* wk, const float* bk, i64 T, i64 W,
                         i64 hq, i64 hkv, i64 hd) override;
    void qk_norm_backward(float* dx, float* dwq, float* dbq, float* dwk, float* dbk, const float* x, const float* dy, const float* wq,
                          const float* wk, bool layernorm, i64 T, i64 W, i64 hq, i64 hkv, i64 hd) override;
    void gelu_forward(float* y, const float* x, i64 n) override { launch1(k_gelu_fwd, n, tv(y), tv(x), n); }
    void gelu_backward(float* dx, const float* x, const float* dy, i64 n) override { launch1(k_gelu_bwd, n, tv(dx), tv(x), tv(dy), n); }
    void glu_forward(float* y, const float* x, i64 T, i64 F, cpu::Gate gate) override {
        launch1(k_glu_fwd, T * F, tv(y), tv(x), T, F, gate == cpu::Gate::gelu);
    }
    void glu_backward(float* dx, const float* x, const float* dy, i64 T, i64 F, cpu::Gate gate) override {
        launch1(k_glu_bwd, T * F, tv(dx), tv(x), tv(dy), T, F, gate == cpu::Gate::gelu);
    }
    void relu2_forward(float* y, const float* x, i64 n) override { launch1(k_relu2_fwd, n, tv(y), tv(x), n); }
    void relu2_backward(float* dx, const float* x, const float* dy, i64 n) override { launch1(k_relu2_bwd, n, tv(dx), tv(x), tv(dy), n); }
    void relu_forward(float* y, const float* x, i64 n) override { launch1(k_relu_fwd, n, tv(y), tv(x), n); }
    void relu_backward(float* dx, const float* y, const float* dy, i64 n) override { launch1(k_relu_bwd, n, tv(dx), tv(y), tv(dy), n); }
    void add(float* out, const float* a, const float* b, const float* bias, i64 T, i64 C) override {
        launch1(k_add, T * C, tv(out), tv(a), tv(b), tv(bias), T, C);
    }
    void rope(float* qkv, i64 T, const cpu::Positions& where, i64 hq, i64 hkv, i64 d, bool inverse) override {
        launch1(k_rope, T * (hq + hkv) * (d / 2), tv(qkv), T, where, hq + hkv, (hq + 2 * hkv) * d, d, inverse ? -1.0f : 1.0f);
    }

    // Attention (attention.cuh): flash kernels for bf16 with 64- or 128-wide heads, else exact
    // batched GEMMs in causal row blocks.
    struct AttnPlan {
        i64 items, chunk, rows, blocks;
    };
    static AttnPlan attn_plan(i64 T, i64 seq, i64 hq, i64 bytes_per_score);
    std::vector<TV> carve(const std::vector<std::pair<int, i64>>& parts);
    bool flash_for(i64 d, i64 items, std::initializer_list<const float*> operands) const;
    void flash_forward(float* out, float* lse, const float* qkv, i64 seq, i64 items, i64 hq, i64 hkv, i64 d, float scale, const Dropout& drop,
                       i64 window);
    void flash_backward(const float* qkv, const float* dout, const float* lse, const float* D, float* dQ, float* dK, float* dV, i64 seq,
                        i64 items, i64 hq, i64 hkv, i64 d, float scale, const Dropout& drop, i64 window);
    void attention_forward(float* out, float* lse, const float* qkv, i64 T, i64 seq, i64 hq, i64 hkv, i64 d, const Dropout& drop,
                           i64 window) override;
    void attention_backward(float* dqkv, const float* qkv, const float* out, const float* lse, const float* dout, i64 T, i64 seq,
                            i64 hq, i64 hkv, i64 d, const Dropout& drop, i64 window) override;
    void attention_probs(float* probs, float* mask, float* dropped, const float* qkv, const float* lse, i64 T, i64 seq, i64 hq, i64 hkv,
                         i64 d, const Dropout& drop, i64 window) override;
    void attention_probs_grad(float* dprobs, const float* qkv, const float* dout, i64 T, i64 seq, i64 hq, i64 hkv, i64 d) override;
    // Context parallelism's ring blocks (ring_attention.cuh).
    void attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, i64 kv_stride, const cpu::Positions& qpos,
                                 const cpu::Positions& kpos, i64 T, i64 hq, i64 hkv, i64 d, bool merge, const Dropout& drop) override;
    void attention_block_backward(float* dqkv, float* dkv, i64 kv_stride, const float* qkv, const float* kv, const float* out, const float* lse,
                                  const float* dout, const cpu::Positions& qpos, const cpu::Positions& kpos, i64 T, i64 hq, i64 hkv, i64 d,
                                  bool accumulate, const Dropout& drop) override;
    void add_columns(float* dst, i64 dst_cols, const float* src, i64 src_cols, i64 rows) override;
    // Multi-head latent attention (mla.cuh).
    void copy_columns(float* dst, i64 dst_stride, const float* src, i64 src_stride, i64 cols, i64 rows) override;
    void mla_rope_forward(float* qkv, const float* q, const float* kv, const float* k_rope, i64 T, const cpu::Positions& where, i64 heads,
                          i64 nope, i64 rope, i64 dv) override;
    void mla_rope_backward(float* dq, float* dkv, float* dk_rope, const float* dqkv, i64 T, const cpu::Positions& where, i64 heads, i64 nope,
                           i64 rope, i64 dv) override;
    // MoE on one rank (moe.cuh).
    void moe_set_order(const i64* pos, i64 n) override;
    void moe_route(float* routing, const float* logits, i64 T, i64 E, i64 k, i64 groups, i64 group_topk) override;
    void moe_route_backward(float* dlogits, const float* routing, const float* dprobs, i64 T, i64 E, i64 k) override;
    void moe_permute(float* xp, const float* x, i64 T, i64 k, i64 C) override;
    void moe_permute_backward(float* dx, const float* dxp, i64 T, i64 k, i64 C) override;
    void moe_unpermute(float* y, const float* ye, const float* routing, i64 T, i64 k, i64 C) override;
    void moe_unpermute_backward(float* dye, float* dprobs, const float* dy, const float* ye, const float* routing, i64 T, i64 k,
                                i64 C) override;
    void moe_permute_probs(float* pr, const float* routing, i64 T, i64 k) override;
    void moe_permute_probs_backward(float* dp, const float* dr, i64 T, i64 k) override;
    void scale_rows(float* y, const float* x, const float* w, i64 rows, i64 C) override;
    void row_dot(float* out, const float* a, const float* b, i64 rows, i64 C) override;
    void unscale(float* g, i64 n, float inv, float* found) override {
        const TV f = tv(found);
        if (f.fmt != 0) throw std::runtime_error("cuda: unscale's overflow flag must be an fp32 buffer");
        launch1(k_unscale, n, tv(g), inv, static_cast<float*>(f.p), n);
    }
    void dropout_forward(float* y, float* mask, const float* x, i64 T, i64 C, const Dropout& drop, const cpu::Positions& where) override {
        launch1(k_dropout_fwd, T * C, tv(y), tv(mask), tv(x), T * C, C, where, drop);
    }
    void dropout_add(float* out, float* mask, const float* a, const float* b, const float* bias, i64 T, i64 C, const Dropout& drop,
                     const cpu::Positions& where) override {
        launch1(k_dropout_add, T * C, tv(out), tv(mask), tv(a), tv(b), tv(bias), T * C, C, where, drop);
    }
    void mul(float* out, const float* a, const float* b, i64 n) override { launch1(k_mul, n, tv(out), tv(a), tv(b), n); }
    void embedding_forward(float* out, const float* tokens, const float* table, i64 first, i64 rows, i64 T, i64 C) override {
        launch1(k_embedding_fwd, T * C, tv(out), tv(tokens), tv(table), first, rows, T, C);
    }
    void embedding_backward(float* dtable, const float* tokens, const float* dout, i64 first, i64 rows, i64 T, i64 C) override {
        launch1(k_embedding_bwd, T * C, tv(dtable), tv(tokens), tv(dout), first, rows, T, C);
    }
    void position_forward(float* out, const float* e, const float* pos, i64 row0, i64 rows_out, const cpu::Positions& where, i64 C) override {
        launch1(k_position_fwd, rows_out * C, tv(out), tv(e), tv(pos), row0, rows_out, where, C);
    }
    void position_backward(float* dpos, const float* d, i64 T, const cpu::Positions& where, i64 C) override {
        launch1(k_position_bwd, std::min(T, where.local()) * C, tv(dpos), tv(d), T, where, C);
    }
    void loss_stats(float* stats, const float* logits, const float* tokens, i64 first, i64 T, i64 V) override {
        if (T == 0) return;
        k_loss_stats<<<static_cast<unsigned>(T), 1024, 0, lanes_[lane_compute]>>>(tv(stats), tv(logits), tv(tokens), first, V);
        LAUNCHED();
    }
    void loss_combine(float* loss, float* lse, const float* stats, i64 n, i64 T) override { launch1(k_loss_combine, T, tv(loss), tv(lse), tv(stats), n, T); }
    void loss_backward(float* dlogits, const float* logits, const float* tokens, const float* stats, i64 shards, i64 first, i64 T,
                       i64 V, float scale) override {
        if (T == 0) return;
        k_loss_bwd<<<static_cast<unsigned>(T), 1024, 0, lanes_[lane_compute]>>>(tv(dlogits), tv(logits), tv(tokens), tv(stats), shards, first, T, V, scale);
        LAUNCHED();
    }
    // AdamW (optimizer.cuh).
    void adamw(float* p, float* m, float* v, const float* g, const unsigned char* decay, i64 n, float lr, float b1, float b2, float eps,
               float wd, int step) override;
    void adamw_ranges(float* p, float* m, float* v, const float* g, float* weights, const std::vector<i64>& begin, const std::vector<i64>& len,
                      const std::vector<float>& wd, float lr, float b1, float b2, float eps, int step) override;

private:
    friend class CudaComm;
    template <typename... K, typename... A>
    void launch1(void (*kernel)(K...), i64 n, A... args) {
        if (n <= 0) return;
        kernel<<<blocks_for(n), kThreads, 0, lanes_[lane_compute]>>>(args...);
        LAUNCHED();
    }
    static std::size_t round_up(std::size_t b) { return (b + 511) / 512 * 512; }
    // A module built for other GPUs (CMAKE_CUDA_ARCHITECTURES; cmake/StrataCuda.cmake) would fail
    // at its first launch with "no kernel image": say so at once, with the fix.
    static void require_kernel_image() {
        cudaFuncAttributes fa{};
        if (cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(k_convert)) == cudaSuccess) return;
        cudaGetLastError();
        cudaDeviceProp prop{};
        int gpu = 0;
        CK(cudaGetDevice(&gpu));
        CK(cudaGetDeviceProperties(&prop, gpu));
        throw std::runtime_error(std::string("cuda: ") + prop.name + " is sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
                                 ", and this module was built for CUDA architectures " STRATA_CUDA_ARCHS
                                 " only: rebuild with cmake -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(prop.major) +
                                 std::to_string(prop.minor) + " (the flash and bf16 kernels need sm_80 or newer)");
    }
    // Dynamic shared memory beyond the default 48 KiB must be opted into, per kernel (a norm of a
    // 16384-wide row caches 128 KiB backward).
    void smem_opt_in(const void* kernel, std::size_t bytes) {
        if (bytes <= 48 * 1024) return;
        std::size_t& have = smem_opted_[kernel];
        if (bytes <= have) return;
        CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
        have = bytes;
    }
    static std::size_t elem_bytes(i64 n, bool bf16) { return round_up(static_cast<std::size_t>(std::max<i64>(n, 1)) * (bf16 ? 2 : 4)); }
    TV tv(const float* p) const {
        const Halves::Real r = halves_.resolve(p);
        return TV{r.p, r.fmt};
    }
    static bool on_device(const void* p) {
        cudaPointerAttributes a{};
        CK(cudaPointerGetAttributes(&a, p));
        return a.type == cudaMemoryTypeDevice;
    }
    void move(TV a, TV b, i64 n);  ///< copies.cuh
    void drop_cache() {
        sync();
        for (auto& [bytes, list] : cache_)
            for (FreeBlock& b : list) {
                cudaFree(b.p);
                reserved_ -= static_cast<double>(bytes);
                for (cudaEvent_t e : b.fence)
                    if (e) spare_.push_back(e);
            }
        cache_.clear();
    }
    cudaEvent_t event() {
        if (!spare_.empty()) {
            cudaEvent_t e = spare_.back();
            spare_.pop_back();
            return e;
        }
        cudaEvent_t e;
        CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        return e;
    }
    // The allocation (device block or pinned host buffer) that holds an address, or null.
    Use* use_of(const void* at) {
        const char* c = static_cast<const char*>(at);
        for (auto* m : {&live_, &pinned_}) {
            auto it = m->upper_bound(const_cast<char*>(c));
            if (it == m->begin()) continue;
            --it;
            if (c < it->first + it->second.bytes) return &it->second;
        }
        return nullptr;
    }
    // The kernels' own workspace (attention's scores, a norm's row statistics): grown when needed,
    // outside the tiers the Program accounts for (reserved_bytes counts it).
    float* scratch(i64 n) { return grow(scratch_, scratch_bytes_, n); }
    float* wide_scratch(i64 n) { return grow(wide_, wide_bytes_, n); }  ///< a mixed-width GEMM's fp32 operands
    float* grow(void*& buf, std::size_t& have, i64 n) {
        const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
        if (bytes > have) {
            sync();
            if (buf) cudaFree(buf);
            reserved_ -= static_cast<double>(have);
            buf = nullptr;
            have = 0;
            if (cudaMalloc(&buf, bytes) != cudaSuccess) {
                cudaGetLastError();
                drop_cache();
                CK(cudaMalloc(&buf, bytes));
            }
            have = bytes;
            reserved_ += static_cast<double>(bytes);
            reserved_peak_ = std::max(reserved_peak_, reserved_);
        }
        return static_cast<float*>(buf);
    }

    cudaStream_t lanes_[lane_count] = {};
    cudaStream_t stream_ = nullptr;  ///< the current lane's
    int lane_ = lane_compute;
    std::map<char*, Use> live_, pinned_;
    std::vector<cudaEvent_t> program_events_, spare_;
    cublasHandle_t blas_ = nullptr;
    double* sum_ = nullptr;
    void *scratch_ = nullptr, *wide_ = nullptr, *order_ = nullptr;
    std::size_t scratch_bytes_ = 0, wide_bytes_ = 0, order_bytes_ = 0;  ///< order_: the MoE moves' token order (i64)
    static constexpr i64 kStagingFloats = i64{1} << 24;  ///< elements a lane narrows at a time (32 MiB of pinned bf16)
    std::uint16_t* host_staging_[lane_count] = {};
    Halves halves_;
    bool exact_attention_ = std::getenv("STRATA_RUNTIME_EXACT_ATTENTION") != nullptr;
    std::map<const void*, std::size_t> smem_opted_;  ///< kernels opted into more shared memory (smem_opt_in)
    std::map<std::size_t, std::vector<FreeBlock>> cache_;
    double reserved_ = 0, reserved_peak_ = 0;
    std::vector<cudaEvent_t> events_;
    std::vector<char> marked_;
    struct AdamTable {
        std::vector<AdamChunk> host;
        void* dev = nullptr;
    };
    std::map<const float*, AdamTable> adam_tables_;  ///< adamw_ranges' chunks, by parameter array
    std::string desc_;
    int gpu_ = 0;  ///< the CUDA ordinal this device's calls go to
};

#include "allocator.cuh"  // CudaDevice's caching allocator
#include "attention.cuh"  // CudaDevice's attention, defined out of the class
#include "copies.cuh"     // its copies that convert between widths
#include "mla.cuh"        // multi-head latent attention's RoPE and column copies
#include "moe.cuh"        // its mixture-of-experts moves
#include "norms.cuh"      // its norms, QK-norm's too
#include "optimizer.cuh"  // its AdamW
#include "comm.cuh"       // NCCL communicators between its GPUs

}  // namespace
}  // namespace strata::runtime

extern "C" __attribute__((visibility("default"))) strata::runtime::Device* strata_runtime_cuda_create(int api_version, int gpu,
                                                                                                     std::string* why) {
    if (api_version != strata::runtime::kDeviceApiVersion) {
        if (why) *why = "the cuda module is of another build (api " + std::to_string(api_version) + " asked for); rebuild";
        return nullptr;
    }
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why) *why = std::string("no CUDA device here (") + (e != cudaSuccess ? cudaGetErrorString(e) : "none visible") + ")";
        return nullptr;
    }
    if (gpu < 0 || gpu >= n) {
        if (why)
            *why = "the plan puts a rank on GPU " + std::to_string(gpu) + ", and this machine shows " + std::to_string(n) +
                   " (strata run puts rank r on GPU r of one machine: a plan of more ranks needs RunOptions::ranks_share_gpu, "
                   "or --backend cpu)";
        return nullptr;
    }
    try {
        return new strata::runtime::CudaDevice(gpu);
    } catch (const std::exception& ex) {
        if (why) *why = ex.what();
        return nullptr;
    }
}
