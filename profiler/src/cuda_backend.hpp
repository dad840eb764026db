// Private: the CUDA backend's entry points, implemented in profiler/cuda/*.cu (compiled only when
// STRATA_HAVE_CUDA). Every CUDA/cuBLASLt/NCCL call there is checked and throws RuntimeError with
// file:line and the library's error string.
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

}  // namespace strata::profiler::cudab
