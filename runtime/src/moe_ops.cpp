// The MoE block's instructions on the cpu backend (lower's moe_forward / moe_backward dataflow):
// the router's top-k, the moves into and out of expert order, and the experts' grouped GEMMs, each
// expert's rows against its own slice of the stacked weights.
#include <vector>

#include "rank.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::runtime {

using namespace sim;

bool RankState::moe_compute(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const Program& prog = w_.program;
    const std::string& name = prog.names[static_cast<std::size_t>(in.name)];
    const bool grouped = name == "experts.fc1" || name == "experts.fc2";
    if (!grouped && in.op != Op::router && name != "moe.permute" && name != "moe.unpermute") return false;
    if (dev_) fail(i, "mixture-of-experts layers are not executed by the cuda backend yet");
    const Operands& o = rp_.operands[i];
    auto id = [&](int k) { return rp_.operand_ids[o.first + static_cast<std::size_t>(k)]; };
    auto T = [&](int k) -> const DataTensor& { return prog.tensors[static_cast<std::size_t>(id(k))]; };
    auto I = [&](int k) { return tensor(id(k), false, i); };
    auto O = [&](int k) { return tensor(id(o.n_in + k), true, i); };
    const bool bwd = in.phase == Phase::backward;
    const i64 E = w_.model.moe->experts, k = w_.model.moe->top_k;
    // The routing is the last input of the grouped GEMMs and the second of the moves.
    const int routing_at = grouped ? o.n_in - 1 : 1;
    if (in.op == Op::router) {
        if (!bwd) cpu::moe_route(O(0), I(0), T(0).rows, E, k);
        else cpu::moe_route_backward(O(0), I(0), I(1), T(0).rows, E, k);
        return true;
    }
    const DataTensor& routing = T(routing_at);
    if (routing.cols != 2 * k) fail(i, "its routing operand is not [tokens, 2 top_k]");
    const i64 tokens = routing.rows;
    std::vector<i64> pos(static_cast<std::size_t>(tokens * k)), counts(static_cast<std::size_t>(E));
    cpu::moe_order(pos.data(), counts.data(), I(routing_at), tokens, E, k);
    if (name == "moe.permute") {  // {x, routing} -> permuted, or {d.permuted, routing} -> dx
        const i64 C = T(0).cols;
        if (!bwd) cpu::moe_permute(O(0), I(0), pos.data(), tokens, k, C);
        else cpu::moe_permute_backward(O(0), I(0), pos.data(), tokens, k, C);
        return true;
    }
    if (name == "moe.unpermute") {  // {experts' out, routing} -> y, or {dy, routing, experts' out} -> {d.out, d.weights}
        const i64 C = T(0).cols;
        if (!bwd) cpu::moe_unpermute(O(0), I(0), I(1), pos.data(), tokens, k, C);
        else cpu::moe_unpermute_backward(O(0), O(1), I(0), I(2), I(1), pos.data(), tokens, k, C);
        return true;
    }
    // Grouped GEMMs: the stacked weights [E out, in]; expert e's rows of the permuted tensors
    // against rows e out .. (e + 1) out of them.
    const DataTensor& out0 = T(o.n_in);
    const bool wgrad = out0.role == TensorRole::param_grad || out0.role == TensorRole::weight_grad;
    const DataTensor& w = wgrad ? out0 : T(1);
    const i64 wout = w.rows / E, win = w.cols;
    if (w.rows % E != 0) fail(i, "its stacked expert weights do not split into the experts");
    i64 first = 0;
    for (i64 e = 0; e < E; first += counts[static_cast<std::size_t>(e)], ++e) {
        const i64 n = counts[static_cast<std::size_t>(e)];
        if (n == 0) continue;
        const i64 wo = e * wout * win;
        if (wgrad) {  // {x, dy, routing} -> dW
            if (T(0).cols != win || T(1).cols != wout) fail(i, "wgrad operand shapes disagree");
            cpu::matmul_wgrad(O(0) + wo, nullptr, I(0) + first * win, I(1) + first * wout, n, win, wout);
        } else if (out0.role == TensorRole::grad) {  // {dy, W, routing} -> dx
            if (T(0).cols != wout || out0.cols != win) fail(i, "dgrad operand shapes disagree");
            cpu::matmul_dgrad(O(0) + first * win, I(0) + first * wout, I(1) + wo, n, win, wout);
        } else {  // {x, W, routing} -> y
            if (T(0).cols != win || out0.cols != wout) fail(i, "forward GEMM operand shapes disagree");
            cpu::matmul_forward(O(0) + first * wout, I(0) + first * win, I(1) + wo, nullptr, n, win, wout);
        }
    }
    return true;
}

}  // namespace strata::runtime
