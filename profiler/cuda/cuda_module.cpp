// The CUDA backend module's one exported symbol: its table of entry points (cuda_backend.hpp).
#include "cuda_backend.hpp"

extern "C" __attribute__((visibility("default"))) const strata::profiler::cudab::Api* strata_profiler_cuda_api() {
    using namespace strata::profiler::cudab;
    static const Api api{kApiVersion,    &query_devices,     &bench_gemm,  &bench_attention,
                         &bench_membw,   &bench_memcpy,      &bench_collectives, &bench_overlap,
                         &bench_grouped_gemm};
    return &api;
}
