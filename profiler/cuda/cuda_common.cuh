// Private to the CUDA backend: checked-call macros (every CUDA, cuBLASLt and NCCL call throws
// strata::RuntimeError with file:line, the call and the library's error string), RAII device and
// host buffers, and an event timer. C++17 (nvcc dialect); included only by profiler/cuda/*.cu.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <mutex>
#include <string>

#include "strata/common/error.hpp"

namespace strata::profiler::cudab {

[[noreturn]] inline void fail_call(const char* what, const std::string& err, const char* file, int line) {
    throw RuntimeError(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " + err);
}

}  // namespace strata::profiler::cudab

#define STRATA_CUDA(call)                                                                                      \
    do {                                                                                                       \
        const cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess) ::strata::profiler::cudab::fail_call(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
#define STRATA_CUBLAS(call)                                                                                     \
    do {                                                                                                        \
        const cublasStatus_t s_ = (call);                                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                        \
            ::strata::profiler::cudab::fail_call(#call, std::string(cublasLtGetStatusName(s_)) + " (" + cublasLtGetStatusString(s_) + ")", \
                                                 __FILE__, __LINE__);                                           \
    } while (0)
#define STRATA_NCCL(call)                                                                                       \
    do {                                                                                                        \
        const ncclResult_t r_ = (call);                                                                         \
        if (r_ != ncclSuccess) ::strata::profiler::cudab::fail_call(#call, ncclGetErrorString(r_), __FILE__, __LINE__); \
    } while (0)
/// After every kernel launch: launch errors surface here, not at the next unrelated call.
#define STRATA_CUDA_LAUNCHED() STRATA_CUDA(cudaGetLastError())

namespace strata::profiler::cudab {

/// Device memory owned by a scope (the current device at construction).
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
        if (bytes > 0) STRATA_CUDA(cudaMalloc(&p_, bytes));
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(p_, o.p_);
        std::swap(bytes_, o.bytes_);
        return *this;
    }
    ~DeviceBuffer() {
        if (p_ != nullptr) cudaFree(p_);  // errors here cannot be reported from a destructor
    }
    template <class T = void>
    T* get() const { return static_cast<T*>(p_); }
    char* bytes_at(std::size_t off) const { return static_cast<char*>(p_) + off; }
    std::size_t size() const { return bytes_; }

private:
    void* p_ = nullptr;
    std::size_t bytes_ = 0;
};

class Stream {
public:
    Stream() { STRATA_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
    ~Stream() { cudaStreamDestroy(s_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return s_; }

private:
    cudaStream_t s_{};
};

/// A pair of events on one stream: start(), stop(), then seconds() (synchronises on stop).
class EventTimer {
public:
    EventTimer() {
        STRATA_CUDA(cudaEventCreate(&a_));
        STRATA_CUDA(cudaEventCreate(&b_));
    }
    ~EventTimer() {
        cudaEventDestroy(a_);
        cudaEventDestroy(b_);
    }
    EventTimer(const EventTimer&) = delete;
    EventTimer& operator=(const EventTimer&) = delete;
    void start(cudaStream_t s) { STRATA_CUDA(cudaEventRecord(a_, s)); }
    void stop(cudaStream_t s) { STRATA_CUDA(cudaEventRecord(b_, s)); }
    double seconds() {
        STRATA_CUDA(cudaEventSynchronize(b_));
        float ms = 0;
        STRATA_CUDA(cudaEventElapsedTime(&ms, a_, b_));
        return static_cast<double>(ms) * 1e-3;
    }

private:
    cudaEvent_t a_{}, b_{};
};

/// std::barrier is C++20; the .cu files are C++17, so the rank threads use this one.
class ThreadBarrier {
public:
    explicit ThreadBarrier(int n) : n_(n) {}
    void wait() {
        std::unique_lock<std::mutex> lk(m_);
        const long gen = gen_;
        if (++waiting_ == n_) {
            waiting_ = 0;
            ++gen_;
            cv_.notify_all();
            return;
        }
        cv_.wait(lk, [&] { return gen_ != gen; });
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    int n_, waiting_ = 0;
    long gen_ = 0;
};

}  // namespace strata::profiler::cudab
