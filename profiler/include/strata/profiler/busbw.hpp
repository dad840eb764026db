// nccl-tests' bandwidth conventions (NVIDIA/nccl-tests doc/PERFORMANCE.md and src/<coll>.cu
// *GetBw): algbw = S / t with S the message size as nccl-tests defines it per collective, and
// busbw = algbw * factor(n), which makes numbers comparable to the per-GPU link rate for any n.
// Header-only: the CPU and CUDA backends and the fitting code share it. No timing here.
#pragma once
#include <string>

namespace strata::profiler {

enum class Collective { all_reduce, all_gather, reduce_scatter, all_to_all, send_recv };

inline const char* to_string(Collective c) {
    switch (c) {
        case Collective::all_reduce: return "all_reduce";
        case Collective::all_gather: return "all_gather";
        case Collective::reduce_scatter: return "reduce_scatter";
        case Collective::all_to_all: return "all_to_all";
        case Collective::send_recv: return "send_recv";
    }
    return "?";
}

inline bool collective_from_string(const std::string& s, Collective& out) {
    for (Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                         Collective::all_to_all, Collective::send_recv}) {
        if (s == to_string(c)) {
            out = c;
            return true;
        }
    }
    return false;
}

/// busbw/algbw for n ranks. all_reduce: each element crosses 2(n-1) of n links -> 2(n-1)/n;
/// all_gather, reduce_scatter, all_to_all: half of that -> (n-1)/n; send_recv: 1 (one link).
inline double busbw_factor(Collective c, int n) {
    if (n < 1) return 0;
    const double nn = static_cast<double>(n);
    switch (c) {
        case Collective::all_reduce: return 2.0 * (nn - 1.0) / nn;
        case Collective::all_gather:
        case Collective::reduce_scatter:
        case Collective::all_to_all: return (nn - 1.0) / nn;
        case Collective::send_recv: return 1.0;
    }
    return 0;
}

/// S (nccl-tests) from the per-rank element count and element size:
/// all_reduce, all_to_all, send_recv: the per-rank buffer (count * size);
/// all_gather: the whole output (sendcount * size * n); reduce_scatter: the whole input
/// (recvcount * size * n). `count` is the per-rank send count for all_gather and the per-rank
/// receive count for reduce_scatter; for all_to_all it is the whole per-rank buffer.
inline double nccl_tests_bytes(Collective c, double count, double elem_bytes, int n) {
    switch (c) {
        case Collective::all_gather:
        case Collective::reduce_scatter: return count * elem_bytes * n;
        default: return count * elem_bytes;
    }
}

inline double algbw_Bps(double S_bytes, double time_s) { return time_s > 0 ? S_bytes / time_s : 0; }
inline double busbw_Bps(Collective c, int n, double S_bytes, double time_s) {
    return algbw_Bps(S_bytes, time_s) * busbw_factor(c, n);
}

}  // namespace strata::profiler
