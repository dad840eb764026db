// Where tokens come from: a byte-level text file or a deterministic synthetic stream. Sample i of
// the run is a window of seq_len + 1 tokens; a micro-batch's rows follow Megatron's order (each
// data-parallel rank takes a contiguous slice of the global batch), so every parallel split of a
// plan trains on the same samples in the same optimizer steps.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "strata/runtime/splitmix.hpp"

namespace strata::runtime {

class TokenSource {
public:
    /// `path` empty: the synthetic stream over `vocab` tokens. A text file needs vocab >= 256.
    TokenSource(const std::string& path, std::int64_t vocab, std::uint64_t seed);
    /// Fills `out` (seq_len rows of {input, target}) with sample `index`.
    void sample(std::int64_t index, std::int64_t seq_len, float* out) const;
    bool synthetic() const { return text_.empty(); }

private:
    std::vector<unsigned char> text_;
    std::int64_t vocab_ = 0;
    std::uint64_t seed_ = 0;
    std::vector<std::int64_t> next_;  ///< synthetic: the successor most tokens take
};


}  // namespace strata::runtime
