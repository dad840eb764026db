// Ranks-as-threads collectives (see cpu_collectives.hpp). Ring schedule with the chunk shifted so
// that rank r ends the reduce-scatter phase owning the reduced chunk r (NCCL's reduce-scatter
// result layout). Race freedom per step: rank r+1 reads rank r's chunk c and writes its own chunk
// c, while rank r writes its chunk c-1; a barrier ends every step.
#include "strata/profiler/cpu_collectives.hpp"

#include <cstring>

namespace strata::profiler::cpu {

namespace {
int mod(int a, int n) { return ((a % n) + n) % n; }

// n-1 steps: at step s rank r adds chunk (r-s-1) of its left neighbour into its own copy, so that
// after the last step rank r holds the full sum of chunk r.
void reduce_scatter_steps(int rank, int n, const std::vector<float*>& bufs, std::size_t count, Barrier& bar) {
    const int left = mod(rank - 1, n);
    for (int s = 0; s < n - 1; ++s) {
        const int c = mod(left - s - 1, n);
        const std::size_t b = chunk_begin(count, n, c), e = chunk_begin(count, n, c + 1);
        const float* src = bufs[static_cast<std::size_t>(left)];
        float* dst = bufs[static_cast<std::size_t>(rank)];
        for (std::size_t i = b; i < e; ++i) dst[i] += src[i];
        bar.arrive_and_wait();
    }
}

// n-1 steps: at step s rank r copies chunk (r-1-s) from its left neighbour.
void all_gather_steps(int rank, int n, const std::vector<float*>& bufs, std::size_t count, Barrier& bar) {
    const int left = mod(rank - 1, n);
    for (int s = 0; s < n - 1; ++s) {
        const int c = mod(left - s, n);
        const std::size_t b = chunk_begin(count, n, c), e = chunk_begin(count, n, c + 1);
        if (e > b)
            std::memcpy(bufs[static_cast<std::size_t>(rank)] + b, bufs[static_cast<std::size_t>(left)] + b,
                        (e - b) * sizeof(float));
        bar.arrive_and_wait();
    }
}
}  // namespace

void ring_all_reduce(int rank, int n, const std::vector<float*>& bufs, std::size_t count, Barrier& bar) {
    reduce_scatter_steps(rank, n, bufs, count, bar);
    all_gather_steps(rank, n, bufs, count, bar);
}

void ring_reduce_scatter(int rank, int n, const std::vector<float*>& work, const std::vector<float*>& out,
                         std::size_t count, Barrier& bar) {
    // The work buffers hold n chunks of exactly `count` elements: chunk_begin(n*count, n, c) = c*count.
    reduce_scatter_steps(rank, n, work, count * static_cast<std::size_t>(n), bar);
    std::memcpy(out[static_cast<std::size_t>(rank)], work[static_cast<std::size_t>(rank)] + count * static_cast<std::size_t>(rank),
                count * sizeof(float));
    bar.arrive_and_wait();
}

void ring_all_gather(int rank, int n, const std::vector<const float*>& in, const std::vector<float*>& out,
                     std::size_t count, Barrier& bar) {
    std::memcpy(out[static_cast<std::size_t>(rank)] + count * static_cast<std::size_t>(rank), in[static_cast<std::size_t>(rank)],
                count * sizeof(float));
    bar.arrive_and_wait();
    all_gather_steps(rank, n, out, count * static_cast<std::size_t>(n), bar);
}

void all_to_all(int rank, int n, const std::vector<const float*>& in, const std::vector<float*>& out,
                std::size_t block, Barrier& bar) {
    // Inputs are read-only, so all n copies can run at once; one barrier marks completion. Start
    // with the right neighbour so ranks do not all read rank 0 first.
    for (int i = 0; i < n; ++i) {
        const int p = mod(rank + i, n);
        std::memcpy(out[static_cast<std::size_t>(rank)] + block * static_cast<std::size_t>(p),
                    in[static_cast<std::size_t>(p)] + block * static_cast<std::size_t>(rank), block * sizeof(float));
    }
    bar.arrive_and_wait();
}

void ring_send_recv(int rank, int n, const std::vector<const float*>& in, const std::vector<float*>& out,
                    std::size_t count, Barrier& bar) {
    std::memcpy(out[static_cast<std::size_t>(rank)], in[static_cast<std::size_t>(mod(rank - 1, n))], count * sizeof(float));
    bar.arrive_and_wait();
}

}  // namespace strata::profiler::cpu
