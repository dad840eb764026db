// Private: benchmarks of the host side, shared by both backends (SSD I/O, CPU Adam, DRAM), and the CPU
// backend's stand-ins for the GPU kinds (Eigen GEMM, memcpy, triad bandwidth, thread collectives).
#pragma once
#include "context.hpp"

namespace strata::profiler::host {

void bench_ssd(Context& ctx);
void bench_cpu_adam(Context& ctx);
void bench_host_dram(Context& ctx);

void bench_gemm_cpu(Context& ctx);
void bench_membw_cpu(Context& ctx);
void bench_memcpy_cpu(Context& ctx);
void bench_collectives_cpu(Context& ctx);
/// The runtime's own cpu kernels (runtime_bench.cpp): attention points, and the memory-bound
/// kernels' achieved bandwidth.
void bench_runtime_attention_cpu(Context& ctx);
/// The runtime's cuda attention as fp32 attention points (runtime_bench.cpp).
void bench_runtime_attention_cuda(Context& ctx);
void bench_runtime_memory_bound_cpu(Context& ctx);
void bench_runtime_memory_bound_cuda(Context& ctx);

int thread_count(const Options& o);

}  // namespace strata::profiler::host
