// DualPipe's zero-bubble split (deepseek-ai/DualPipe, WeightGradStore): a backward chunk run with
// enable_zb computes the input gradients and leaves each linear layer's weight gradient as a
// closure in a queue; a later W step pops the oldest chunk's closures and runs them, filling the
// ramps where the rank would otherwise wait for its neighbours.
//
// Lowered as a move of instructions: the split backward is lowered whole, its weight-gradient
// GEMMs (and, per layer, the gradient handling after them and the frees of the activations they
// read) marked as they are emitted; at the pass's end the marked instructions leave the stream
// in their order and wait in a queue, and the weight slot appends them. Each stream keeps its
// order, events order the rest, so the engine and the runtime execute what is lowered. The
// activations stay held until the weight pass (the closures keep each linear's input and output
// gradient; the memory model counts the layer's saved activations, memory.cpp).
#include <algorithm>

#include "lower_impl.hpp"
#include "strata/common/error.hpp"

namespace strata::sim::lower_detail {

// A stream's cached record must not stand for instructions that move, nor the moved part take
// a record of the part that stays: records restart at each boundary.
std::size_t RankLowering::weight_begin() {
    if (!defer_weights_) return 0;
    last_record_ev_.fill(-1);
    return rp_.instrs.size();
}

void RankLowering::weight_end(std::size_t begin) {
    if (!defer_weights_) return;
    if (rp_.instrs.size() > begin) weight_ranges_.emplace_back(begin, rp_.instrs.size());
    last_record_ev_.fill(-1);
}

void RankLowering::split_weight_pass(std::size_t begin) {
    const std::size_t end = rp_.instrs.size();
    if (df_) rp_.operands.resize(end);
    std::vector<char> to_w(end - begin, 0);
    for (const auto& [a, b] : weight_ranges_)
        for (std::size_t i = a; i < b; ++i) to_w[i - begin] = 1;
    weight_ranges_.clear();
    constexpr std::size_t kGone = static_cast<std::size_t>(-1);
    std::vector<std::size_t> moved(end - begin, kGone);  // old index - begin -> new index (kept ones)
    WeightPass w;
    std::size_t kept = begin;
    for (std::size_t i = begin; i < end; ++i) {
        if (to_w[i - begin]) {
            w.instrs.push_back(rp_.instrs[i]);
            if (df_) w.operands.push_back(rp_.operands[i]);
            continue;
        }
        moved[i - begin] = kept;
        rp_.instrs[kept] = rp_.instrs[i];
        if (df_) rp_.operands[kept] = rp_.operands[i];
        ++kept;
    }
    rp_.instrs.resize(kept);
    if (df_) rp_.operands.resize(kept);
    // What still names instructions of the range: allocation runs (their allocs stay), activation
    // offload's copies, the last op and collective (only read right after their own push).
    auto remap = [&](std::size_t& i, bool must_stay) {
        if (i < begin || i >= end) return;
        STRATA_ASSERT(!must_stay || moved[i - begin] != kGone, "lower: a weight pass took an instruction still referred to");
        i = moved[i - begin] != kGone ? moved[i - begin] : (kept > 0 ? kept - 1 : 0);
    };
    for (auto& [key, run] : stashed_)
        if (run.count > 0) remap(run.first, true);
    for (auto& [key, c] : act_copies_) remap(c.d2h, true), remap(c.h2d, true);
    remap(last_op_, false);
    remap(last_collective_, false);
    weight_queue_.push_back(std::move(w));
    last_record_ev_.fill(-1);
}

void RankLowering::weight_pass() {
    STRATA_ASSERT(!weight_queue_.empty(), "lower: a weight slot with no deferred backward");
    WeightPass w = std::move(weight_queue_.front());
    weight_queue_.pop_front();
    last_record_ev_.fill(-1);
    if (df_) rp_.operands.resize(rp_.instrs.size());
    for (std::size_t i = 0; i < w.instrs.size(); ++i) {
        rp_.instrs.push_back(w.instrs[i]);
        if (df_) rp_.operands.push_back(w.operands[i]);
    }
    if (!w.instrs.empty()) last_op_ = rp_.instrs.size() - 1;
    last_record_ev_.fill(-1);
}

}  // namespace strata::sim::lower_detail
