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
    if (name == "moe.sort_by_expert" || name == "moe.unsort_by_expert") return moe_sort(i, name == "moe.sort_by_expert");
    if (!grouped && in.op != Op::router && name != "moe.permute" && name != "moe.unpermute" && name != "experts.act") return false;
    // On a device: the router's kernel (expert groups included), the moves through its kernels in
    // the host's token order, and the grouped GEMMs as dense GEMMs per expert; the collectives
    // staged through the host.
    const Operands& o = rp_.operands[i];
    const OperandView a{prog, rp_, o};
    auto id = [&](int k) { return a.id(k); };
    auto T = [&](int k) -> const DataTensor& { return a.in(k); };
    auto I = [&](int k) { return tensor(id(k), false, i); };
    auto O = [&](int k) { return tensor(id(o.n_in + k), true, i); };
    // An expert-side output has the rows of the expert-side input it is computed from.
    auto rows_like = [&](int out, int from) {
        dyn_rows_[id(o.n_in + out)] = rows_of(id(from));
        return rows_of(id(from));
    };
    const bool bwd = in.phase == Phase::backward;
    const ModelSpec& m = w_.model;
    const i64 E = m.moe->experts, k = m.moe->top_k;
    if (in.op == Op::router && o.n_in == 0) {  // a round-robin gate: the routing from the token count alone
        const i64 rows = a.out(0).rows;
        std::vector<float> r(static_cast<std::size_t>(rows * 2 * k));
        cpu::moe_route_round_robin(r.data(), rows, E, k);
        if (const i64 cap = cpu::moe_capacity(rows, E, k, m.moe->capacity_factor); cap > 0) cpu::moe_drop(r.data(), rows, E, k, cap);
        if (dev_) dev_->copy(O(0), r.data(), static_cast<i64>(r.size()));
        else std::memcpy(O(0), r.data(), r.size() * sizeof(float));
        return true;
    }
    if (in.op == Op::router) {
        if (dev_) {
            if (bwd) {
                dev_->moe_route_backward(O(0), I(0), I(1), T(0).rows, E, k);
                return true;
            }
            dev_->moe_route(O(0), I(0), T(0).rows, E, k, m.moe->router_groups, m.moe->router_group_topk);
            // Token dropping decides on the host (the routing comes there at the permute anyway):
            // the choices past an expert's capacity marked dropped, as on the cpu backend.
            if (const i64 cap = cpu::moe_capacity(T(0).rows, E, k, m.moe->capacity_factor); cap > 0) {
                std::vector<float> r(static_cast<std::size_t>(T(0).rows * 2 * k));
                dev_->copy(r.data(), O(0), static_cast<i64>(r.size()));
                cpu::moe_drop(r.data(), T(0).rows, E, k, cap);
                dev_->copy(O(0), r.data(), static_cast<i64>(r.size()));
            }
            return true;
        }
        if (!bwd) {
            cpu::moe_route(O(0), I(0), T(0).rows, E, k, m.moe->router_groups, m.moe->router_group_topk);
            if (const i64 cap = cpu::moe_capacity(T(0).rows, E, k, m.moe->capacity_factor); cap > 0) cpu::moe_drop(O(0), T(0).rows, E, k, cap);
        } else {
            cpu::moe_route_backward(O(0), I(0), I(1), T(0).rows, E, k);
        }
        return true;
    }
    if (name == "experts.act") {
        // {fc1[, weights]} -> act, or {fc1, d.act[, weights]} -> {d.fc1[, d.weights]}. Under
        // fc2_input each row's activation is scaled by its router weight (Megatron-Core's
        // weighted SwiGLU); backward the weight's gradient is the row's act(x) . dY.
        const bool weighted = o.n_in == (bwd ? 3 : 2);
        const i64 rows = rows_like(0, bwd ? 1 : 0);
        if (bwd && weighted) rows_like(1, 1);
        const i64 f = bwd ? T(1).cols : T(o.n_in).cols;  // the activation's width
        if (rows == 0) {  // no row reached this rank's experts: its outputs are empty, but written
            for (int q = 0; q < o.n_out; ++q) O(q);
            return true;
        }
        // Each step on the backend's own kernels; the cpu backend's scaling and dots inline.
        const cpu::Gate gate = gate_of(m.ffn);
        auto act = [&](float* y, const float* x) {
            if (dev_) {
                if (gated(m.ffn)) dev_->glu_forward(y, x, rows, f, gate);
                else if (m.ffn == FfnKind::relu2) dev_->relu2_forward(y, x, rows * f);
                else if (m.ffn == FfnKind::relu) dev_->relu_forward(y, x, rows * f);
                else dev_->gelu_forward(y, x, rows * f);
            } else if (gated(m.ffn)) cpu::glu_forward(y, x, rows, f, gate);
            else if (m.ffn == FfnKind::relu2) cpu::relu2_forward(y, x, rows * f);
            else if (m.ffn == FfnKind::relu) cpu::relu_forward(y, x, rows * f);
            else cpu::gelu_forward(y, x, rows * f);
        };
        auto act_backward = [&](float* dx, const float* x, const float* dy) {  // ReLU's x: its output
            if (dev_) {
                if (gated(m.ffn)) dev_->glu_backward(dx, x, dy, rows, f, gate);
                else if (m.ffn == FfnKind::relu2) dev_->relu2_backward(dx, x, dy, rows * f);
                else if (m.ffn == FfnKind::relu) dev_->relu_backward(dx, x, dy, rows * f);
                else dev_->gelu_backward(dx, x, dy, rows * f);
            } else if (gated(m.ffn)) cpu::glu_backward(dx, x, dy, rows, f, gate);
            else if (m.ffn == FfnKind::relu2) cpu::relu2_backward(dx, x, dy, rows * f);
            else if (m.ffn == FfnKind::relu) cpu::relu_backward(dx, x, dy, rows * f);
            else cpu::gelu_backward(dx, x, dy, rows * f);
        };
        auto scale_rows = [&](float* y, const float* x, const float* w) {  // y[r] = x[r] w[r]
            if (dev_) return dev_->scale_rows(y, x, w, rows, f);
            for (i64 r = 0; r < rows; ++r)
                for (i64 c = 0; c < f; ++c) y[r * f + c] = x[r * f + c] * w[r];
        };
        auto row_dot = [&](float* out, const float* u, const float* v) {
            if (dev_) return dev_->row_dot(out, u, v, rows, f);
            for (i64 r = 0; r < rows; ++r) {
                double dot = 0;
                for (i64 c = 0; c < f; ++c) dot += static_cast<double>(u[r * f + c]) * v[r * f + c];
                out[r] = static_cast<float>(dot);
            }
        };
        if (!bwd) {
            if (!weighted || !dev_) {
                act(O(0), I(0));
                if (weighted) scale_rows(O(0), O(0), I(1));
                return true;
            }
            // On a device the output's width rounds each write: the activation goes to an fp32
            // scratch first, so a bf16 output is rounded once, after the weight, as the cpu
            // backend (and a fused weighted activation) rounds it.
            float* acted = dev_->alloc(rows * f, Storage::fp32);
            if (!acted) fail(i, "no device memory for the weighted activation");
            act(acted, I(0));
            scale_rows(O(0), acted, I(1));
            dev_->release(acted, rows * f);
            return true;
        }
        const float* dy = I(1);
        // Weighted: d.weights from act(x) recomputed, and dY scaled by the weight for act's backward,
        // in scratch of the backend's (host vectors, or device buffers given back after).
        std::vector<float> host[2];
        float* scratch[2] = {};
        if (weighted) {
            for (int q = 0; q < 2; ++q) {
                if (!dev_) host[q].resize(static_cast<std::size_t>(rows * f));
                scratch[q] = dev_ ? dev_->alloc(rows * f, Storage::fp32) : host[q].data();
                if (!scratch[q]) fail(i, "no device memory for the weighted activation's backward");
            }
            act(scratch[0], I(0));
            row_dot(O(1), scratch[0], dy);
            scale_rows(scratch[1], dy, I(2));
            dy = scratch[1];
        }
        act_backward(O(0), I(0), dy);
        if (dev_ && weighted)
            for (float* b : scratch) dev_->release(b, rows * f);
        return true;
    }
    // The routing is the last input of the grouped GEMMs and the second of the moves.
    const int routing_at = grouped ? o.n_in - 1 : 1;
    const DataTensor& routing = T(routing_at);
    if (routing.cols != 2 * k) fail(i, "its routing operand is not [tokens, 2 top_k]");
    const i64 tokens = routing.rows;
    // Padded to the capacity (plan.moe_pad_to_capacity) every expert's rows are its capacity; the
    // moves write only the rows a choice names, so the padding is zeroed first. Unpadded, the
    // dropped choices leave: the rows in expert order are the kept ones, however many.
    const bool pad = w_.plan.moe_pad_to_capacity;
    const i64 cap = pad ? cpu::moe_capacity(tokens, E, k, m.moe->capacity_factor) : 0;
    auto zero_out = [&](int q) {
        if (cap <= 0) return;
        if (dev_) dev_->zero(O(q), elements(id(o.n_in + q)));
        else std::fill_n(O(q), elements(id(o.n_in + q)), 0.0f);
    };
    std::vector<i64> pos(static_cast<std::size_t>(tokens * k)), counts(static_cast<std::size_t>(E));
    if (!grouped && dev_) {
        // The routing comes to the host once, at the forward permute (a sync, where Megatron reads
        // its split sizes); the other moves of the (layer, micro-batch) reuse that order, copied to
        // the device again only when another one's is there.
        const std::pair<int, int> key{in.layer, in.microbatch};
        const bool fresh = name == "moe.permute" && !bwd;
        if (fresh) {
            std::vector<float> routing_host(static_cast<std::size_t>(tokens * 2 * k));
            dev_->copy(routing_host.data(), I(routing_at), tokens * 2 * k);
            cpu::moe_order(pos.data(), counts.data(), routing_host.data(), tokens, E, k, cap);
            moe_pos_[key] = pos;
        } else {
            const auto it = moe_pos_.find(key);
            if (it == moe_pos_.end()) fail(i, "moves tokens before its layer's permute ordered them");
            pos = it->second;
        }
        if (fresh || moe_pos_on_device_ != key) dev_->moe_set_order(pos.data(), tokens * k);
        moe_pos_on_device_ = key;
    } else if (!grouped) {
        cpu::moe_order(pos.data(), counts.data(), I(routing_at), tokens, E, k, cap);
    }
    const bool kept_rows = !grouped && !pad && m.moe->capacity_factor > 0;
    i64 kept = 0;  // unpadded, the kept choices (the device path's later moves reuse the order, not the counts)
    for (i64 p : pos) kept += p >= 0 ? 1 : 0;
    // The expert-order outputs of the moves have the kept rows (before the dispatch, or without EP).
    auto size_kept = [&](int q) {
        if (kept_rows) dyn_rows_[id(o.n_in + q)] = kept;
    };
    // Without EP the rank's own rows in expert order are what its experts see.
    if (name == "moe.permute" && !bwd && ep_size_ == 1) moe_recv_[{in.layer, in.microbatch}] = counts;
    // The moves' optional inputs after the routing: a row weight's gradient (one column) and the
    // shared experts' output or dX (hidden wide), which is added in.
    int probs_at = -1, shared_at = -1;
    if (!grouped)
        for (int q = 2; q < o.n_in; ++q) (T(q).cols == 1 ? probs_at : shared_at) = q;
    auto add_shared = [&] {
        if (shared_at < 0) return;
        float* y = O(0);
        if (dev_) dev_->add(y, y, I(shared_at), nullptr, tokens, T(shared_at).cols);
        else cpu::add(y, y, I(shared_at), nullptr, tokens, T(shared_at).cols);
    };
    if (name == "moe.permute") {
        // {x, routing} -> {permuted[, each row's weight]}, or {d.permuted, routing[, d.row
        // weights][, d.shared.x]} -> {dx[, d.weights]}
        const i64 C = T(0).cols;
        if (dev_) {  // the kernels skip dropped choices; padding rows are zeroed first
            if (!bwd) {
                if (kept_rows) moe_kept_[{in.layer, in.microbatch}] = kept;
                size_kept(0);
                zero_out(0);
                dev_->moe_permute(O(0), I(0), tokens, k, C);
                if (o.n_out > 1) {
                    size_kept(1);
                    zero_out(1);
                    dev_->moe_permute_probs(O(1), I(1), tokens, k);
                }
            } else {
                dev_->moe_permute_backward(O(0), I(0), tokens, k, C);
                add_shared();
                if (o.n_out > 1) {
                    if (probs_at < 0) fail(i, "writes the weights' gradient without the rows'");
                    dev_->moe_permute_probs_backward(O(1), I(probs_at), tokens, k);
                }
            }
            return true;
        }
        if (!bwd) {
            if (kept_rows) moe_kept_[{in.layer, in.microbatch}] = kept;
            size_kept(0);
            zero_out(0);
            cpu::moe_permute(O(0), I(0), pos.data(), tokens, k, C);
            if (o.n_out > 1) {
                size_kept(1);
                zero_out(1);
                float* pr = O(1);
                const float* r = I(1);
                for (i64 t = 0; t < tokens; ++t)
                    for (i64 j = 0; j < k; ++j)
                        if (const i64 row = pos[static_cast<std::size_t>(t * k + j)]; row >= 0) pr[row] = r[t * 2 * k + k + j];
            }
        } else {
            cpu::moe_permute_backward(O(0), I(0), pos.data(), tokens, k, C);
            add_shared();
            if (o.n_out > 1) {
                if (probs_at < 0) fail(i, "writes the weights' gradient without the rows'");
                float* dp = O(1);
                const float* dr = I(probs_at);
                for (i64 t = 0; t < tokens * k; ++t) dp[t] = pos[static_cast<std::size_t>(t)] < 0 ? 0.0f : dr[pos[static_cast<std::size_t>(t)]];
            }
        }
        return true;
    }
    if (name == "moe.unpermute") {
        // {experts' out, routing[, shared out]} -> y; backward {dy, routing[, experts' out]} ->
        // {d.out[, d.weights]} (the weights' gradient here only under fc2_output).
        const i64 C = T(0).cols;
        // fc2_input: the router's weights were applied inside the experts, so it only sums.
        const bool at_input = w_.plan.moe_probs_at == MoeProbsAt::fc2_input;
        const bool round_robin = !m.moe->has_router();
        const float* route_w = I(1);  // the routing: ids, then weights
        std::vector<float> ones;
        if (at_input) {
            ones.assign(static_cast<std::size_t>(tokens * 2 * k), 1.0f);
            route_w = ones.data();
        }
        if (dev_) {
            const float* w_dev = at_input ? nullptr : I(1);
            if (!bwd) {
                dev_->moe_unpermute(O(0), I(0), w_dev, tokens, k, C);
                add_shared();
            } else {
                if (o.n_out == 1 && !at_input && !round_robin) fail(i, "drops the weights' gradient although the weights are applied here");
                size_kept(0);
                zero_out(0);
                if (o.n_out > 1) dev_->moe_unpermute_backward(O(0), O(1), I(0), I(2), w_dev, tokens, k, C);
                else dev_->moe_unpermute_backward(O(0), nullptr, I(0), nullptr, w_dev, tokens, k, C);
            }
            return true;
        }
        if (!bwd) {
            cpu::moe_unpermute(O(0), I(0), route_w, pos.data(), tokens, k, C);
            add_shared();
        } else if (o.n_out > 1) {
            size_kept(0);
            zero_out(0);
            cpu::moe_unpermute_backward(O(0), O(1), I(0), I(2), route_w, pos.data(), tokens, k, C);
        } else if (!at_input) {  // a round-robin gate's constant weights: dY scaled, no gradient for them
            if (!round_robin) fail(i, "drops the weights' gradient although the weights are applied here");
            size_kept(0);
            zero_out(0);
            cpu::moe_unpermute_backward(O(0), nullptr, I(0), nullptr, route_w, pos.data(), tokens, k, C);
        } else {  // each row gets its token's dY
            size_kept(0);
            zero_out(0);
            float* d = O(0);
            const float* dy = I(0);
            for (i64 t = 0; t < tokens; ++t)
                for (i64 j = 0; j < k; ++j)
                    if (const i64 row = pos[static_cast<std::size_t>(t * k + j)]; row >= 0)
                        std::memcpy(d + row * C, dy + t * C, static_cast<std::size_t>(C) * sizeof(float));
        }
        return true;
    }
    // Grouped GEMMs: the stacked weights [experts of the rank x out, in].
    // The rows, in order: (expert-TP rank,) sender, the rank's expert; how many of each the
    // permute, the dispatch and the expert-TP gather recorded.
    const i64 local = E / ep_size_;
    std::vector<Segment> segs;
    const auto& layouts = etp_size_ > 1 ? moe_gath_ : moe_recv_;
    const auto it = layouts.find({in.layer, in.microbatch});
    if (it == layouts.end()) fail(i, "runs before its layer's tokens reached its experts");
    i64 first = 0;
    if (moe_sorted_.count({in.layer, in.microbatch})) {  // expert order: one segment an expert
        const auto n = static_cast<i64>(it->second.size()) / local;
        for (i64 e = 0; e < local; ++e) {
            i64 rows = 0;
            for (i64 c = 0; c < n; ++c) rows += it->second[static_cast<std::size_t>(c * local + e)];
            segs.push_back({first, rows, e});
            first += rows;
        }
    } else {
        for (std::size_t c = 0; c < it->second.size(); ++c) {
            segs.push_back({first, it->second[c], static_cast<i64>(c) % local});
            first += it->second[c];
        }
    }
    if (first != rows_of(id(0))) fail(i, "its rows are not what reached its experts");
    const DataTensor& out0 = T(o.n_in);
    const bool wgrad = out0.role == TensorRole::param_grad || out0.role == TensorRole::weight_grad;
    const DataTensor& w = wgrad ? out0 : T(1);
    const i64 wout = w.rows / local, win = w.cols;
    if (w.rows % local != 0) fail(i, "its stacked expert weights do not split into the rank's experts");
    if (!wgrad) rows_like(0, 0);
    // Written even when no row reached this rank's experts (a routing that sends none here: its
    // readers then see an empty tensor, not an unwritten one).
    float* const out = O(0);
    for (const Segment& g : segs) {
        if (g.rows == 0) continue;
        const i64 wo = g.expert * wout * win;
        // Each expert's rows through the dense GEMMs at their offsets (on cuda one cuBLAS call an
        // expert, as Transformer Engine's GroupedLinear issues them).
        if (wgrad) {  // {x, dy, routing} -> dW
            if (T(0).cols != win || T(1).cols != wout) fail(i, "wgrad operand shapes disagree");
            float* dw = out + wo;
            // Under FP8 each expert's operands are quantized with their own scales, as
            // GroupedLinear's per-GEMM quantizers do (gemm_operand).
            const float* x = gemm_operand(in, I(0) + g.first * win, g.rows * win, cpu::Fp8::e4m3, 0);
            const float* dy = gemm_operand(in, I(1) + g.first * wout, g.rows * wout, cpu::Fp8::e5m2, 1);
            if (dev_) dev_->matmul_wgrad(dw, nullptr, x, dy, g.rows, win, wout);
            else cpu::matmul_wgrad(dw, nullptr, x, dy, g.rows, win, wout);
        } else if (out0.role == TensorRole::grad) {  // {dy, W, routing} -> dx
            if (T(0).cols != wout || out0.cols != win) fail(i, "dgrad operand shapes disagree");
            float* dx = out + g.first * win;
            const float* dy = gemm_operand(in, I(0) + g.first * wout, g.rows * wout, cpu::Fp8::e5m2, 0);
            const float* wexp = gemm_operand(in, I(1) + wo, wout * win, cpu::Fp8::e4m3, 1);
            if (dev_) dev_->matmul_dgrad(dx, dy, wexp, g.rows, win, wout);
            else cpu::matmul_dgrad(dx, dy, wexp, g.rows, win, wout);
        } else {  // {x, W, routing} -> y
            if (T(0).cols != win || out0.cols != wout) fail(i, "forward GEMM operand shapes disagree");
            float* y = out + g.first * wout;
            const float* x = gemm_operand(in, I(0) + g.first * win, g.rows * win, cpu::Fp8::e4m3, 0);
            const float* wexp = gemm_operand(in, I(1) + wo, wout * win, cpu::Fp8::e4m3, 1);
            if (dev_) dev_->matmul_forward(y, x, wexp, nullptr, g.rows, win, wout);
            else cpu::matmul_forward(y, x, wexp, nullptr, g.rows, win, wout);
        }
    }
    return true;
}

// Megatron's permutation 2 (the lowering's sort_by_local_expert), in place on each operand: the
// rows arrive as chunks (sender, or expert-TP rank and sender) x local expert; sorted they are
// local expert x chunk, and unsorted back. The first sort of a (layer, micro-batch) switches its
// grouped GEMMs to expert order.
bool RankState::moe_sort(std::size_t i, bool sort) {
    const Instr& in = rp_.instrs[i];
    const Operands& o = rp_.operands[i];
    const OperandView a{w_.program, rp_, o};
    if (o.n_in != o.n_out || o.n_in < 1) fail(i, "sorts its rows in place: {rows..} -> {the same}");
    const i64 local = w_.model.moe->experts / ep_size_;
    const auto& layouts = etp_size_ > 1 ? moe_gath_ : moe_recv_;
    const auto it = layouts.find({in.layer, in.microbatch});
    if (it == layouts.end()) fail(i, "runs before its layer's tokens reached its experts");
    const std::vector<i64>& counts = it->second;
    const i64 chunks = static_cast<i64>(counts.size()) / local;
    std::vector<i64> at(counts.size());  // where chunk (c, e) starts in arrival order
    for (std::size_t q = 0, first = 0; q < counts.size(); first += static_cast<std::size_t>(counts[q]), ++q) at[q] = static_cast<i64>(first);
    for (int q = 0; q < o.n_in; ++q) {
        const int id = a.id(q);
        if (a.id(o.n_in + q) != id) fail(i, "sorts its rows in place: {rows..} -> {the same}");
        const i64 cols = a.in(q).cols, rows = rows_of(id);
        float* x = tensor(id, true, i);
        // The rows as they were: a host vector, or on a device a scratch buffer of its own.
        std::vector<float> host;
        float* was = nullptr;
        if (dev_) {
            was = dev_->alloc(std::max<i64>(rows * cols, 1), Storage::fp32);
            if (!was) fail(i, "the device refused the sort's scratch buffer");
            dev_->copy(was, x, rows * cols);
        } else {
            host.assign(x, x + rows * cols);
            was = host.data();
        }
        auto move = [&](float* to_p, const float* from_p, i64 n) {
            if (dev_) dev_->copy(to_p, from_p, n);
            else std::copy(from_p, from_p + n, to_p);
        };
        i64 to = 0;  // position in expert order
        for (i64 e = 0; e < local; ++e)
            for (i64 c = 0; c < chunks; ++c) {
                const auto q2 = static_cast<std::size_t>(c * local + e);
                const i64 n = counts[q2] * cols, arrival = at[q2] * cols;
                if (sort) move(x + to, was + arrival, n);
                else move(x + arrival, was + to, n);
                to += n;
            }
        if (dev_) dev_->release(was, std::max<i64>(rows * cols, 1));
        if (to != rows * cols) fail(i, "its rows are not what reached its experts");
    }
    if (sort) moe_sorted_.insert({in.layer, in.microbatch});
    return true;
}

// The MoE block's collectives, whose rows vary with the routing (all through the transport's
// all-to-all):
// * EP all-to-all {rows in expert order, routing} -> {the rows for this rank's experts}: each row
//   to its expert's rank; {rows that arrived} -> {rows in expert order}: each back to its sender
//   (the combine, and the dispatch's backward);
// * expert-TP all-gather {this rank's expert-side rows} -> {the group's, rank after rank};
// * expert-TP reduce-scatter {the group's rows, partial sums} -> {this rank's rows, summed}.
CollPart RankState::moe_collective_part(std::size_t i, bool stage_rows) {
    const Instr& in = rp_.instrs[i];
    const Operands& o = rp_.operands[i];
    const OperandView a{w_.program, rp_, o};
    const bool a2a = in.coll == CollKind::all_to_all;
    // {rows.. [, routing]} -> {rows..}: the rows' tensors (hidden states, and under fc2_input each
    // row's router weight) move together.
    const bool by_routing = o.n_in == o.n_out + 1;
    if (!w_.model.is_moe() || o.n_out < 1 || (o.n_in != o.n_out && !(a2a && by_routing)))
        fail(i, "a MoE collective moves rows: {rows..[, routing]} -> {rows..}");
    auto id = [&](int k) { return a.id(k); };
    const auto& members = rp_.groups[static_cast<std::size_t>(in.group)];
    const int n = static_cast<int>(members.size());
    if (n != in.group_size || n != (a2a ? ep_size_ : etp_size_)) fail(i, "its group is not the expert-parallel or expert-TP group");
    const i64 E = w_.model.moe->experts, L = E / ep_size_, k = w_.model.moe->top_k;
    CollPart part;
    part.group_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    part.waker = &waker_;
    for (int q = 0; q < o.n_out; ++q) {
        if (rows_of(id(q)) != rows_of(id(0))) fail(i, "moves tensors of different rows together");
        part.row_cols.push_back(a.in(q).cols);
        if (!stage_rows) continue;
        float* rows = tensor(id(q), false, i);
        if (dev_) rows = stage(i, rows, elements(id(q)), true, false);  // sent from a host copy
        part.in.push_back(rows);
        part.in_n.push_back(elements(id(q)));
    }
    part.send_rows.assign(static_cast<std::size_t>(n), 0);
    auto layout = [&](const std::map<std::pair<int, int>, std::vector<i64>>& of) -> const std::vector<i64>& {
        const auto it = of.find({in.layer, in.microbatch});
        if (it == of.end()) fail(i, "moves rows its layer's earlier collectives never delivered");
        return it->second;
    };
    if (a2a && by_routing) {
        part.local_experts = L;
        part.send_counts.assign(static_cast<std::size_t>(E), 0);
        const int r = o.n_in - 1;
        const DataTensor& routing = a.in(r);
        std::vector<i64> pos(static_cast<std::size_t>(routing.rows * k)), counts(static_cast<std::size_t>(E));
        const float* route = tensor(id(r), false, i);
        if (dev_) route = stage(i, const_cast<float*>(route), elements(id(r)), true, false);
        cpu::moe_order(pos.data(), counts.data(), route, routing.rows, E, k,
                       w_.plan.moe_pad_to_capacity ? cpu::moe_capacity(routing.rows, E, k, w_.model.moe->capacity_factor) : 0);
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
    A2aReceived got = std::move(a2a_.at(i));
    a2a_.erase(i);
    const std::pair<int, int> key{in.layer, in.microbatch};
    const bool reduce = in.coll == CollKind::reduce_scatter;  // one block of this rank's rows from each member: their sum
    const auto n = static_cast<i64>(rp_.groups[static_cast<std::size_t>(in.group)].size());
    const i64 rows = reduce ? got.rows / n : got.rows;
    if (in.coll == CollKind::all_gather) moe_gath_[key] = got.counts;
    if (in.coll == CollKind::all_to_all && o.n_in == o.n_out + 1) moe_recv_[key] = got.counts;  // rows for this rank's experts
    const bool home = in.coll == CollKind::all_to_all && o.n_in == o.n_out;  // back to the rank's own routed rows
    const OperandView a{w_.program, rp_, o};
    for (int q = 0; q < o.n_out; ++q) {
        const int out = a.id(o.n_in + q);
        const DataTensor& y = a.out(q);
        std::vector<float>& data = got.data[static_cast<std::size_t>(q)];
        const i64 len = rows * y.cols;
        if (reduce)
            for (i64 b = 1; b < n; ++b)
                for (i64 e = 0; e < len; ++e) data[static_cast<std::size_t>(e)] += data[static_cast<std::size_t>(b * len + e)];
        const auto kept = moe_kept_.find(key);
        const i64 routed = kept != moe_kept_.end() ? kept->second : y.rows;
        if (home && rows != routed)
            fail(i, "got back " + std::to_string(rows) + " rows of its " + std::to_string(routed) + " routed tokens");
        if (!home || rows != y.rows) dyn_rows_[out] = rows;
        float* to = tensor(out, true, i);
        if (dev_) dev_->copy(to, data.data(), len);
        else if (len > 0) std::memcpy(to, data.data(), static_cast<std::size_t>(len) * sizeof(float));
    }
    if (dev_) unstage(i);  // the sent rows' host copies
}

}  // namespace strata::runtime
