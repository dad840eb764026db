// Multi-token prediction's instructions (lowering's edges.cpp, mtp_forward/backward): the two
// norms whose outputs are concatenated, the projection's output gathered along the hidden
// dimension, and what the modules' losses need: which module a loss is, its rows' mask and its
// sum. The lookups, the projection's GEMMs, the layer and the head are every model's.
#include <cstring>

#include "rank.hpp"
#include "strata/lowering/params.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::runtime {

using namespace sim;

#define KERNEL(fn, ...) (dev_ ? dev_->fn(__VA_ARGS__) : cpu::fn(__VA_ARGS__))

int RankState::mtp_depth_of(const DataTensor& t) const {
    const ModelSpec& m = w_.model;
    if (m.mtp_depth <= 0) return 0;
    if (w_.program.tensor_names[static_cast<std::size_t>(t.name)] == "tokens.mtp") return t.layer;
    return mtp_module_of_layer(m, t.layer);
}

std::vector<float> RankState::mtp_mask(int k, i64 rows) const {
    const cpu::Positions where = positions();
    std::vector<float> mask(static_cast<std::size_t>(rows));
    for (i64 r = 0; r < rows; ++r) mask[static_cast<std::size_t>(r)] = where(r % where.local()) + k < w_.model.seq_len ? 1.0f : 0.0f;
    return mask;
}

void RankState::mask_rows(std::size_t i, float* x, int k, i64 rows, i64 cols) {
    const std::vector<float> mask = mtp_mask(k, rows);
    if (!dev_) {
        for (i64 r = 0; r < rows; ++r)
            if (mask[static_cast<std::size_t>(r)] == 0.0f) std::memset(x + r * cols, 0, static_cast<std::size_t>(cols) * sizeof(float));
        return;
    }
    Sum m(*this, i, rows);  // the mask on the device
    dev_->copy(m.p, mask.data(), rows);
    dev_->scale_rows(x, x, m.p, rows, cols);
}

// The per-row losses into the step's sums: the model's, or MTP module k's over the rows its
// shift leaves (zeroed past the end, in place).
void RankState::add_loss(std::size_t i, float* loss, i64 T, int k) {
    double sum = 0;
    if (k > 0) mask_rows(i, loss, k, T, 1);
    if (dev_) sum = dev_->sum(loss, T);
    else
        for (i64 t = 0; t < T; ++t) sum += loss[t];
    if (k > 0) mtp_loss_sum_[static_cast<std::size_t>(k)] += sum;
    else loss_sum_ += sum;
}

bool RankState::mtp_op(std::size_t i) {
    const Instr& in = rp_.instrs[i];
    const std::string& name = w_.program.names[static_cast<std::size_t>(in.name)];
    if (name != "mtp.norms" && name != "mtp.proj.gather") return false;
    const OperandView a{w_.program, rp_, rp_.operands[i]};
    const int nin = a.o.n_in;
    auto I = [&](int k) { return tensor(a.id(k), false, i); };
    auto O = [&](int k) { return tensor(a.id(nin + k), true, i); };
    const bool bwd = in.phase == Phase::backward;
    if (name == "mtp.proj.gather") {
        // Forward {column blocks of every TP rank, in rank order} -> {this rank's rows of them side
        // by side}; backward {the whole rows' gradient} -> {this rank's column block}.
        const DataTensor &x = a.in(0), &y = a.out(0);
        if (!bwd) {
            const i64 cw = x.cols, T = x.rows / tp_size_, row0 = y.rows < T ? tp_rank_ * y.rows : 0;
            for (int r = 0; r < tp_size_; ++r) KERNEL(copy_columns, O(0) + r * cw, y.cols, I(0) + (r * T + row0) * cw, cw, cw, y.rows);
        } else {
            KERNEL(copy_columns, O(0), y.cols, I(0) + tp_rank_ * y.cols, x.cols, y.cols, y.rows);
        }
        return true;
    }
    // RMSNorm of the embedding rows (E) and of the hidden state (H), concatenated [E | H]:
    // forward {e, h, wE, wH} -> {cat}; backward {e, h, dcat, wE, wH} -> {de, dh, dwE, dwH}, dh
    // this module's part of the hidden state's gradient.
    const DataTensor& e = a.in(0);
    const i64 T = e.rows, H = e.cols;
    Sum part(*this, i, T * H);
    if (!bwd) {
        for (int s = 0; s < 2; ++s) {
            KERNEL(norm_forward, part.p, I(s), I(2 + s), nullptr, T, H);
            KERNEL(copy_columns, O(0) + s * H, 2 * H, part.p, H, H, T);
        }
        return true;
    }
    for (int s = 0; s < 2; ++s) {
        KERNEL(copy_columns, part.p, H, I(2) + s * H, 2 * H, H, T);
        KERNEL(norm_backward, O(s), O(2 + s), nullptr, I(s), part.p, I(3 + s), nullptr, false, T, H);
    }
    return true;
}

}  // namespace strata::runtime
