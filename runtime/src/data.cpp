#include "data.hpp"

#include <fstream>
#include <iterator>

#include "strata/common/error.hpp"

namespace strata::runtime {

TokenSource::TokenSource(const std::string& path, std::int64_t vocab, std::uint64_t seed) : vocab_(vocab), seed_(seed) {
    if (!path.empty()) {
        std::ifstream f(path, std::ios::binary);
        if (!f) throw InputError(path, "data", "cannot read the text file");
        text_.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
        if (vocab < 256) throw InputError(path, "model.vocab", "a byte-level text needs model.vocab >= 256");
        if (text_.size() < 1024) throw InputError(path, "data", "the text has fewer than 1024 bytes");
        return;
    }
    // A learnable stream: each token has a fixed successor, taken 7 times in 8; otherwise a
    // uniform one. Its entropy floor is about 0.38 + ln(V) / 8 nats a token.
    next_.resize(static_cast<std::size_t>(vocab));
    for (std::int64_t v = 0; v < vocab; ++v)
        next_[static_cast<std::size_t>(v)] = static_cast<std::int64_t>(splitmix64(seed ^ (0xA5A5ull + static_cast<std::uint64_t>(v))) %
                                                                       static_cast<std::uint64_t>(vocab));
}

void TokenSource::sample(std::int64_t index, std::int64_t seq_len, float* out) const {
    const std::uint64_t key = splitmix64(seed_ + 0x51ull * static_cast<std::uint64_t>(index));
    std::vector<std::int64_t> tok(static_cast<std::size_t>(seq_len + 1));
    if (!text_.empty()) {
        const std::uint64_t span = text_.size() - static_cast<std::uint64_t>(seq_len) - 1;
        if (static_cast<std::int64_t>(text_.size()) <= seq_len + 1)
            throw InputError("data", "model.seq_len", "longer than the text");
        const std::uint64_t at = key % span;
        for (std::int64_t i = 0; i <= seq_len; ++i) tok[static_cast<std::size_t>(i)] = text_[at + static_cast<std::uint64_t>(i)];
    } else {
        std::int64_t cur = static_cast<std::int64_t>(key % static_cast<std::uint64_t>(vocab_));
        for (std::int64_t i = 0; i <= seq_len; ++i) {
            tok[static_cast<std::size_t>(i)] = cur;
            const std::uint64_t r = splitmix64(key + static_cast<std::uint64_t>(i) + 1);
            cur = (r & 7u) != 0 ? next_[static_cast<std::size_t>(cur)] : static_cast<std::int64_t>((r >> 3) % static_cast<std::uint64_t>(vocab_));
        }
    }
    for (std::int64_t i = 0; i < seq_len; ++i) {
        out[i * 2] = static_cast<float>(tok[static_cast<std::size_t>(i)]);
        out[i * 2 + 1] = static_cast<float>(tok[static_cast<std::size_t>(i + 1)]);
    }
}

}  // namespace strata::runtime
