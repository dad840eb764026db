// Dropout masks from a counter-based hash, shared by the cpu kernels and the cuda module. An
// element's fate depends only on what it is (the site, the step, the global sequence, the
// position, the column or the attention head and key), never on which rank holds it or in which
// order it is drawn: every parallel split, a recomputation and a resumed run draw the same mask
// (Megatron keeps per-rank RNG states and a tracker for the same end; Philox in cuRAND and
// FlashAttention is the same idea with a different mixer).
#pragma once
#include <cstdint>

#include "strata/runtime/splitmix.hpp"

namespace strata::runtime {

/// What a dropout site needs to name its elements: the probability, the site's key
/// (dropout_key), and where the kernel's rows sit among every rank's.
struct Dropout {
    float p = 0;             ///< probability of dropping an element (0: no dropout)
    std::uint64_t key = 0;   ///< dropout_key(seed, step, layer, site)
    std::int64_t sample0 = 0;  ///< global index of the sequence the rank's rows start with
    std::int64_t row0 = 0;   ///< the tensor's first row among the rank's rows (a sequence shard's offset)
    std::int64_t head0 = 0;  ///< attention: the rank's first head of the model's
    std::int64_t heads = 0;  ///< attention: the model's heads
    bool on() const { return p > 0; }
};

/// The sites of one layer (the embedding's is layer -1).
enum class DropoutSite : int { embedding = 0, attention_probs = 1, attention_out = 2, mlp_out = 3 };

inline std::uint64_t dropout_key(std::uint64_t seed, std::int64_t step, int layer, DropoutSite site) {
    return splitmix64(splitmix64(splitmix64(seed) + static_cast<std::uint64_t>(step)) + static_cast<std::uint64_t>(layer + 2) * 4u +
                 static_cast<std::uint64_t>(site));
}

/// The first hash word of a hidden-state element: its token, sequence (the rank's `seq_index`-th
/// after d.sample0) times seq plus its position. The column is the second.
STRATA_HD std::uint64_t dropout_token(const Dropout& d, std::int64_t seq_index, std::int64_t seq, std::int64_t pos) {
    return static_cast<std::uint64_t>((d.sample0 + seq_index) * seq + pos);
}
/// The first hash word of an attention probability: (sequence, the model's head, query
/// position); the key's position is the second. `head` counts the rank's heads (from d.head0).
STRATA_HD std::uint64_t dropout_attention_row(const Dropout& d, std::int64_t seq_index, std::int64_t head, std::int64_t seq,
                                              std::int64_t qpos) {
    return static_cast<std::uint64_t>(((d.sample0 + seq_index) * d.heads + d.head0 + head) * seq + qpos);
}

/// The factor element (a, b) of a site is multiplied by: 0 with probability p, else 1 / (1 - p).
/// Hidden states: a = the token (sequence x seq + position), b = the column; attention
/// probabilities: a = (sequence x heads + head) x seq + query position, b = the key's.
STRATA_HD float dropout_scale(std::uint64_t key, std::uint64_t a, std::uint64_t b, float p) {
    const std::uint64_t h = splitmix64(splitmix64(key + a) ^ (b * 0xd6e8feb86659fd93ull));
    const std::uint32_t u = static_cast<std::uint32_t>(h >> 40);  // 24 uniform bits
    return static_cast<float>(u) >= p * 16777216.0f ? 1.0f / (1.0f - p) : 0.0f;
}

}  // namespace strata::runtime
