// Private to lowering/src/model: what the tensor list (tensors.cpp) and the stage lists of model
// states and buffers (stage_states.cpp) share.
#pragma once
#include "strata/lowering/spec.hpp"
#include "strata/lowering/tensors.hpp"

namespace strata::sim::detail {

// Local sizes of one rank for one micro-batch.
struct Local {
    double t = 1;          // tensor-parallel degree
    double tokens = 0;     // s/cp · b: tokens of this rank's sequence chunk
    double tok_rep = 0;    // tokens in the TP-replicated regions (divided by t under SP)
    double s_q = 0;        // query rows per sequence on this rank (s/cp)
    double s_k = 0;        // key columns per sequence (the full s: CP exchanges K,V)
    double b = 1;
    double h = 0;
    double heads = 0;      // query heads on this rank
    double kv_heads = 0;   // K/V heads on this rank (replicated when kv_heads < tp)
    double hd = 0;
    double act = 2;        // bytes per activation element
    double gemm_in = 2;    // bytes per element of a GEMM input saved for the backward
    bool dropout = false;
};

Local local_of(const ModelSpec& m, const PlanSpec& p);
/// Per-rank parameters of one layer (TP-split where Megatron splits them).
StageParams layer_params_local(const ModelSpec& m, const PlanSpec& p, int layer);

}  // namespace strata::sim::detail
