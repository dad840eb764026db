// The MoE block's instructions on the cpu backend (lower's moe_forward / moe_backward dataflow):
// the router's top-k, the moves into and out of expert order, the all-to-alls of expert
// parallelism, and the experts' grouped GEMMs, each expert's rows against its own slice of the
// stacked weights.
//
// Without EP a rank's experts see its own tokens in expert order (the routing says how many each).
// With EP the dispatch hands a rank, from each sender in group order, the rows for each of its
// experts; how many varies with the routing, so the tensors of those rows are sized by what
// arrived (dyn_rows_), and the counts per sender and expert (moe_recv_) cut the grouped GEMMs.
#include <cstring>
#include <vector>

#include "rank.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::runtime {

using namespace sim;

namespace {
struct Segment {
    i64 first = 0, rows = 0, expert = 0;  ///< rows of the tensor, and the rank's expert they go through
};
}  // namespace

bool RankState::moe_compute(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const Program& prog = w_.program;
    const std::string& name = prog.names[static_cast<std::size_t>(in.name)];
    const bool grouped = name == "experts.fc1" || name == "experts.fc2";
    if (!grouped && in.op != Op::router && name != "moe.permute" && name != "moe.unpermute" && name != "experts.act") return false;
    if (dev_) fail(i, "mixture-of-experts layers are not executed by the cuda backend yet");
    const Operands& o = rp_.operands[i];
    auto id = [&](int k) { return rp_.operand_ids[o.first + static_cast<std::size_t>(k)]; };
    auto T = [&](int k) -> const DataTensor& { return prog.tensors[static_cast<std::size_t>(id(k))]; };
    auto I = [&](int k) { return tensor(id(k), false, i); };
    auto O = [&](int k) { return tensor(id(o.n_in + k), true, i); };
    // An expert-side output has the rows of the expert-side input it is computed from.
    auto rows_like = [&](int out, int from) {
        if (ep_size_ > 1) dyn_rows_[id(o.n_in + out)] = rows_of(id(from));
        return rows_of(id(from));
    };
    const bool bwd = in.phase == Phase::backward;
    const ModelSpec& m = w_.model;
    const i64 E = m.moe->experts, k = m.moe->top_k;
    if (in.op == Op::router) {
        if (!bwd) cpu::moe_route(O(0), I(0), T(0).rows, E, k);
        else cpu::moe_route_backward(O(0), I(0), I(1), T(0).rows, E, k);
        return true;
    }
    if (name == "experts.act") {  // {fc1} -> act, or {fc1, d.act} -> d.fc1
        const i64 rows = rows_like(0, bwd ? 1 : 0), f = T(o.n_in).cols;
        const bool swiglu = m.ffn == FfnKind::swiglu;
        if (!bwd) {
            if (swiglu) cpu::swiglu_forward(O(0), I(0), rows, f);
            else if (m.ffn == FfnKind::relu2) cpu::relu2_forward(O(0), I(0), rows * f);
            else cpu::gelu_forward(O(0), I(0), rows * f);
        } else {
            const i64 fd = T(1).cols;
            if (swiglu) cpu::swiglu_backward(O(0), I(0), I(1), rows, fd);
            else if (m.ffn == FfnKind::relu2) cpu::relu2_backward(O(0), I(0), I(1), rows * fd);
            else cpu::gelu_backward(O(0), I(0), I(1), rows * fd);
        }
        return true;
    }
    // The routing is the last input of the grouped GEMMs and the second of the moves.
    const int routing_at = grouped ? o.n_in - 1 : 1;
    const DataTensor& routing = T(routing_at);
    if (routing.cols != 2 * k) fail(i, "its routing operand is not [tokens, 2 top_k]");
    const i64 tokens = routing.rows;
    std::vector<i64> pos(static_cast<std::size_t>(tokens * k)), counts(static_cast<std::size_t>(E));
    if (!grouped) cpu::moe_order(pos.data(), counts.data(), I(routing_at), tokens, E, k);
    // Without EP the rank's own rows in expert order are what its experts see.
    if (name == "moe.permute" && !bwd && ep_size_ == 1) moe_recv_[{in.layer, in.microbatch}] = counts;
    // The shared experts' output (forward) or dX (backward), when the block has them, is added in.
    auto add_shared = [&](int at) {
        if (o.n_in <= at) return;
        float* y = O(0);
        cpu::add(y, y, I(at), nullptr, tokens, T(at).cols);
    };
    if (name == "moe.permute") {  // {x, routing} -> permuted, or {d.permuted, routing[, d.shared.x]} -> dx
        const i64 C = T(0).cols;
        if (!bwd) {
            cpu::moe_permute(O(0), I(0), pos.data(), tokens, k, C);
        } else {
            cpu::moe_permute_backward(O(0), I(0), pos.data(), tokens, k, C);
            add_shared(2);
        }
        return true;
    }
    if (name == "moe.unpermute") {  // {experts' out, routing[, shared out]} -> y, or {dy, routing, experts' out} -> {d.out, d.weights}
        const i64 C = T(0).cols;
        if (!bwd) {
            cpu::moe_unpermute(O(0), I(0), I(1), pos.data(), tokens, k, C);
            add_shared(2);
        } else {
            cpu::moe_unpermute_backward(O(0), O(1), I(0), I(2), I(1), pos.data(), tokens, k, C);
        }
        return true;
    }
    // Grouped GEMMs: the stacked weights [experts of the rank x out, in].
    // The rows, in order: (expert-TP rank,) sender, the rank's expert; how many of each the
    // permute, the dispatch and the expert-TP gather recorded.
    const i64 local = E / ep_size_;
    std::vector<Segment> segs;
    const auto& layouts = tp_size_ > 1 ? moe_gath_ : moe_recv_;
    const auto it = layouts.find({in.layer, in.microbatch});
    if (it == layouts.end()) fail(i, "runs before its layer's tokens reached its experts");
    i64 first = 0;
    for (std::size_t c = 0; c < it->second.size(); ++c) {
        segs.push_back({first, it->second[c], static_cast<i64>(c) % local});
        first += it->second[c];
    }
    if (first != rows_of(id(0))) fail(i, "its rows are not what reached its experts");
    const DataTensor& out0 = T(o.n_in);
    const bool wgrad = out0.role == TensorRole::param_grad || out0.role == TensorRole::weight_grad;
    const DataTensor& w = wgrad ? out0 : T(1);
    const i64 wout = w.rows / local, win = w.cols;
    if (w.rows % local != 0) fail(i, "its stacked expert weights do not split into the rank's experts");
    if (!wgrad) rows_like(0, 0);
    for (const Segment& g : segs) {
        if (g.rows == 0) continue;
        const i64 wo = g.expert * wout * win;
        if (wgrad) {  // {x, dy, routing} -> dW
            if (T(0).cols != win || T(1).cols != wout) fail(i, "wgrad operand shapes disagree");
            cpu::matmul_wgrad(O(0) + wo, nullptr, I(0) + g.first * win, I(1) + g.first * wout, g.rows, win, wout);
        } else if (out0.role == TensorRole::grad) {  // {dy, W, routing} -> dx
            if (T(0).cols != wout || out0.cols != win) fail(i, "dgrad operand shapes disagree");
            cpu::matmul_dgrad(O(0) + g.first * win, I(0) + g.first * wout, I(1) + wo, g.rows, win, wout);
        } else {  // {x, W, routing} -> y
            if (T(0).cols != win || out0.cols != wout) fail(i, "forward GEMM operand shapes disagree");
            cpu::matmul_forward(O(0) + g.first * wout, I(0) + g.first * win, I(1) + wo, nullptr, g.rows, win, wout);
        }
    }
    return true;
}

// The MoE block's collectives, whose rows vary with the routing (all through the transport's
// all-to-all):
// * EP all-to-all {rows in expert order, routing} -> {the rows for this rank's experts}: each row
//   to its expert's rank; {rows that arrived} -> {rows in expert order}: each back to its sender
//   (the combine, and the dispatch's backward);
// * expert-TP all-gather {this rank's expert-side rows} -> {the group's, rank after rank};
// * expert-TP reduce-scatter {the group's rows, partial sums} -> {this rank's rows, summed}.
CollPart RankState::moe_collective_part(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const Operands& o = rp_.operands[i];
    const bool a2a = in.coll == CollKind::all_to_all;
    if (!w_.model.is_moe() || o.n_out != 1 || o.n_in < 1 || o.n_in > (a2a ? 2 : 1))
        fail(i, "a MoE collective moves one tensor: {rows[, routing]} -> {rows}");
    auto id = [&](int k) { return rp_.operand_ids[o.first + static_cast<std::size_t>(k)]; };
    const auto& members = rp_.groups[static_cast<std::size_t>(in.group)];
    const int n = static_cast<int>(members.size());
    if (n != in.group_size || n != (a2a ? ep_size_ : tp_size_)) fail(i, "its group is not the expert-parallel or expert-TP group");
    const i64 E = w_.model.moe->experts, L = E / ep_size_, k = w_.model.moe->top_k;
    CollPart part;
    part.group_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    part.waker = &waker_;
    part.in.push_back(tensor(id(0), false, i));
    part.in_n.push_back(elements(id(0)));
    part.in_cols = w_.program.tensors[static_cast<std::size_t>(id(0))].cols;
    part.send_rows.assign(static_cast<std::size_t>(n), 0);
    auto layout = [&](const std::map<std::pair<int, int>, std::vector<i64>>& of) -> const std::vector<i64>& {
        const auto it = of.find({in.layer, in.microbatch});
        if (it == of.end()) fail(i, "moves rows its layer's earlier collectives never delivered");
        return it->second;
    };
    if (a2a && o.n_in == 2) {
        part.local_experts = L;
        part.send_counts.assign(static_cast<std::size_t>(E), 0);
        const DataTensor& routing = w_.program.tensors[static_cast<std::size_t>(id(1))];
        std::vector<i64> pos(static_cast<std::size_t>(routing.rows * k)), counts(static_cast<std::size_t>(E));
        cpu::moe_order(pos.data(), counts.data(), tensor(id(1), false, i), routing.rows, E, k);
        for (i64 e = 0; e < E; ++e) {
            part.send_rows[static_cast<std::size_t>(e / L)] += counts[static_cast<std::size_t>(e)];
            part.send_counts[static_cast<std::size_t>(e)] = counts[static_cast<std::size_t>(e)];
        }
    } else if (a2a) {
        const std::vector<i64>& got = layout(moe_recv_);
        for (i64 c = 0; c < n * L; ++c) part.send_rows[static_cast<std::size_t>(c / L)] += got[static_cast<std::size_t>(c)];
    } else if (in.coll == CollKind::all_gather) {
        const std::vector<i64>& mine = layout(moe_recv_);
        const i64 rows = rows_of(id(0));
        part.broadcast = true;
        part.local_experts = static_cast<i64>(mine.size());
        for (int d = 0; d < n; ++d) {
            part.send_rows[static_cast<std::size_t>(d)] = rows;
            part.send_counts.insert(part.send_counts.end(), mine.begin(), mine.end());
        }
    } else if (in.coll == CollKind::reduce_scatter) {
        const std::vector<i64>& all = layout(moe_gath_);
        const std::size_t per = all.size() / static_cast<std::size_t>(n);
        for (std::size_t c = 0; c < all.size(); ++c) part.send_rows[c / per] += all[c];
    } else {
        fail(i, std::string("a MoE ") + to_string(in.coll) + " is not executed");
    }
    i64 total = 0;
    for (i64 r : part.send_rows) total += r;
    if (total != rows_of(id(0)) * (part.broadcast ? n : 1)) fail(i, "sends other than the rows it holds");
    A2aReceived& got = a2a_[i];
    got = A2aReceived{};
    part.received = &got;
    return part;
}

void RankState::finish_moe_collective(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const Operands& o = rp_.operands[i];
    const int out = rp_.operand_ids[o.first + static_cast<std::size_t>(o.n_in)];
    const DataTensor& y = w_.program.tensors[static_cast<std::size_t>(out)];
    A2aReceived got = std::move(a2a_.at(i));
    a2a_.erase(i);
    const std::pair<int, int> key{in.layer, in.microbatch};
    i64 rows = got.rows;
    if (in.coll == CollKind::reduce_scatter) {  // one block of this rank's rows from each member: their sum
        const auto n = static_cast<i64>(rp_.groups[static_cast<std::size_t>(in.group)].size());
        rows = got.rows / n;
        const i64 len = rows * y.cols;
        for (i64 b = 1; b < n; ++b)
            for (i64 e = 0; e < len; ++e) got.data[static_cast<std::size_t>(e)] += got.data[static_cast<std::size_t>(b * len + e)];
        dyn_rows_[out] = rows;
    } else if (in.coll == CollKind::all_gather) {
        dyn_rows_[out] = rows;
        moe_gath_[key] = got.counts;
    } else if (o.n_in == 2) {  // rows for this rank's experts: as many as arrived
        dyn_rows_[out] = rows;
        moe_recv_[key] = got.counts;
    } else if (rows != y.rows) {
        fail(i, "got back " + std::to_string(rows) + " rows of its " + std::to_string(y.rows) + " routed tokens");
    }
    float* to = tensor(out, true, i);
    std::memcpy(to, got.data.data(), static_cast<std::size_t>(rows * y.cols) * sizeof(float));
}

}  // namespace strata::runtime
