// Private: the CUDA backend's entry points, implemented in profiler/cuda/*.cu (compiled only when
// STRATA_HAVE_CUDA). Every CUDA/cuBLASLt/NCCL call there is checked and throws RuntimeError with
// file:line and the library's error string.
//
// The backend is a loadable module (libstrata_profiler_cuda.so beside the strata binary), opened
// with dlopen only when a CUDA profile runs: linking it would map cuBLASLt (over 500 MB) into
// every strata command at start-up. The module needs no symbol back from strata (Context and
// the measurement types are header-only), and hands out its entry points as one table.
#pragma once
#include <string>

#include "context.hpp"

namespace strata::profiler::cudab {

struct DeviceInfo {
    int count = 0;                   ///< visible GPUs
    std::string name;                ///< device 0's name (all visible GPUs are listed in `names`)
    std::string names;
    int sm_count = 0, cc_major = 0, cc_minor = 0;
    double sm_clock_mhz = 0, mem_clock_mhz = 0, l2_bytes = 0, hbm_bytes = 0;
    std::string driver, runtime, cublaslt, nccl;
};

DeviceInfo query_devices();

// Each appends measurements to ctx (device = the hwdb id given). cuda_compute.cu:
void bench_gemm(Context& ctx, const std::string& device);
void bench_attention(Context& ctx, const std::string& device);
void bench_membw(Context& ctx, const std::string& device);
// cuda_transfer.cu:
void bench_memcpy(Context& ctx, const std::string& device);
void bench_collectives(Context& ctx, const std::string& device);
// cuda_overlap.cu: GEMM slowdown while a stand-in communication kernel holds S SMs.
void bench_overlap(Context& ctx, const std::string& device);
// cuda_moe.cu: the routed experts' GEMMs at MoE token counts (batched, grouped, sequential).
void bench_grouped_gemm(Context& ctx, const std::string& device);

/// The module's entry points. kApiVersion changes whenever this table or the types it passes do,
/// so that a stale module from an older build is refused rather than called.
constexpr int kApiVersion = 3;  // 2: Options carries a plan's shapes; 3: plan_dtype, grouped GEMMs
struct Api {
    int version = kApiVersion;
    DeviceInfo (*query_devices)() = nullptr;
    void (*bench_gemm)(Context&, const std::string&) = nullptr;
    void (*bench_attention)(Context&, const std::string&) = nullptr;
    void (*bench_membw)(Context&, const std::string&) = nullptr;
    void (*bench_memcpy)(Context&, const std::string&) = nullptr;
    void (*bench_collectives)(Context&, const std::string&) = nullptr;
    void (*bench_overlap)(Context&, const std::string&) = nullptr;
    void (*bench_grouped_gemm)(Context&, const std::string&) = nullptr;
};
constexpr const char* kModuleFile = "libstrata_profiler_cuda.so";
constexpr const char* kApiSymbol = "strata_profiler_cuda_api";

}  // namespace strata::profiler::cudab
