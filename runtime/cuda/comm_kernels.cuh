// The cuda backend's kernels for its communicators (comm.cuh), included by device_cuda.cu inside its
// unnamed namespace and by tests/runtime/test_cuda_emulated.cpp, which runs them on the CPU.
// Ulysses packs one block per member before the exchange and unpacks what arrives
// (ulysses_index.hpp's maps): pack reads the rows into the blocks, else the blocks are written into
// the rows.
#pragma once

__global__ void k_ulysses_heads(TV blk, TV rows_, i64 rows, i64 W, UlyssesSegments sg, int n, bool pack) {
    const i64 e = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= rows * W) return;
    const i64 at = ulysses_heads_at(e, rows, W, sg, n);
    if (pack) blk[e] = rows_[at];
    else rows_[at] = blk[e];
}
__global__ void k_ulysses_seq(TV blk, TV rows_, i64 rows, i64 w, i64 seq, int n, bool pack) {
    const i64 e = static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= n * rows * w) return;
    const i64 at = ulysses_seq_at(e, rows, w, seq, n);
    if (pack) blk[e] = rows_[at];
    else rows_[at] = blk[e];
}
