// Ulysses' index maps for the cuda backend's NCCL path (comm.cuh), in plain C++ callable from a
// kernel, so that tests/runtime/test_ulysses.cpp checks them on the CPU against the transport's
// exchange. A member packs one block per member, blk[m][i][p] (m a member, i < rows, p < w = W/n):
// heads side, element (m, i, p) is column p of member m's share of each segment in row i of the
// member's sequence-split rows [rows x W]; sequence side, it is column p of the row that member m's
// row i is in sequence order, in the [n rows x w] head-split rows.
#pragma once
#include <cstdint>

#include "strata/runtime/cpu_kernels.hpp"

namespace strata::runtime {

struct UlyssesSegments {
    std::int64_t g[4];  ///< the column segments' widths ([q | k | v] or [out])
    int count;
};

/// Column of a sequence-split row holding column p of member r's share (each segment's r-th 1/n).
STRATA_HD std::int64_t ulysses_share_column(const UlyssesSegments& sg, int n, int r, std::int64_t p) {
    std::int64_t full = 0, part = 0;
    for (int k = 0; k < sg.count; ++k) {
        const std::int64_t cg = sg.g[k] / n;
        if (p < part + cg) return full + r * cg + (p - part);
        full += sg.g[k];
        part += cg;
    }
    return -1;
}
/// Block element e's place in the sequence-split rows [rows x W].
STRATA_HD std::int64_t ulysses_heads_at(std::int64_t e, std::int64_t rows, std::int64_t W, const UlyssesSegments& sg, int n) {
    const std::int64_t w = W / n;
    const int r = static_cast<int>(e / (rows * w));
    return (e / w) % rows * W + ulysses_share_column(sg, n, r, e % w);
}
/// Block element e's place in the head-split rows [n rows x w], sequences of `seq` in order.
STRATA_HD std::int64_t ulysses_seq_at(std::int64_t e, std::int64_t rows, std::int64_t w, std::int64_t seq, int n) {
    const int s = static_cast<int>(e / (rows * w));
    const std::int64_t i = (e / w) % rows;
    const cpu::Positions where{seq, n, s};
    return (i / where.local() * seq + where(i)) * w + e % w;
}

}  // namespace strata::runtime
