// Collectives between ranks-as-threads over shared host buffers (the CPU backend's stand-in for
// NCCL): ring all-reduce / reduce-scatter / all-gather, direct all-to-all, ring send/recv. Each
// function is called concurrently by every rank's thread with the same arguments except `rank`;
// steps are separated by a std::barrier shared by the group. Not a message-passing library: the
// "send" of a step is the neighbour reading our buffer, which the step structure keeps race-free.
#pragma once
#include <barrier>
#include <cstddef>
#include <vector>

namespace strata::profiler::cpu {

using Barrier = std::barrier<>;

/// In place: afterwards every bufs[r][0..count) holds the element-wise sum over ranks.
/// Ring algorithm: n-1 reduce-scatter steps then n-1 all-gather steps (Patarasuk & Yuan 2009),
/// the schedule NCCL's ring uses, so each element moves 2(n-1)/n of the buffer per rank.
void ring_all_reduce(int rank, int n, const std::vector<float*>& bufs, std::size_t count, Barrier& bar);

/// work[r] holds n*count elements (rank r's input; it is overwritten as scratch); afterwards
/// out[r][0..count) = sum over ranks of chunk r of the inputs.
void ring_reduce_scatter(int rank, int n, const std::vector<float*>& work, const std::vector<float*>& out,
                         std::size_t count, Barrier& bar);

/// in[r] holds count elements; afterwards out[r] (n*count) = concat(in[0], ..., in[n-1]).
void ring_all_gather(int rank, int n, const std::vector<const float*>& in, const std::vector<float*>& out,
                     std::size_t count, Barrier& bar);

/// in[r], out[r] hold n blocks of `block` elements; afterwards out[r] block p = in[p] block r.
void all_to_all(int rank, int n, const std::vector<const float*>& in, const std::vector<float*>& out,
                std::size_t block, Barrier& bar);

/// Each rank sends count elements to rank+1 (mod n): out[r] = in[r-1 mod n].
void ring_send_recv(int rank, int n, const std::vector<const float*>& in, const std::vector<float*>& out,
                    std::size_t count, Barrier& bar);

/// [begin, end) of chunk c when `count` elements are split into n nearly equal chunks.
inline std::size_t chunk_begin(std::size_t count, int n, int c) {
    return count * static_cast<std::size_t>(c) / static_cast<std::size_t>(n);
}

}  // namespace strata::profiler::cpu
