// The small GPT, node and plan the lowering tests share; their hand-derived expectations refer to
// these numbers.
#pragma once
#include "strata/lowering/spec.hpp"
#include "support/gpt.hpp"

namespace strata::test {

// Small GPT: L = 4, h = 64, 4 heads of 16, ffn = 4h = 256, vocab 128, s = 32, learned positions.
inline sim::ModelSpec small_gpt() {
    sim::ModelSpec m = gpt_shape("tiny-gpt", 4, 64, 4, 128, 32);
    m.max_position = 32;
    return m;
}

inline sim::ClusterSpec cluster(int gpus) {
    sim::ClusterSpec c;
    c.gpu = "H100-SXM5-80GB";
    c.gpus_per_node = 8;
    c.nodes = (gpus + 7) / 8;
    return c;
}

inline sim::PlanSpec plan(int tp, int pp, int dp, int global_batch) {
    sim::PlanSpec p;
    p.tp = tp;
    p.pp = pp;
    p.dp = dp;
    p.micro_batch = 1;
    p.global_batch = global_batch;
    return p;
}

}  // namespace strata::test
