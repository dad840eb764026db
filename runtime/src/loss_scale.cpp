// fp16's loss scaling, the executor's side (Megatron's mixed-precision optimizer): the loss was
// scaled up before the backward (ops.cpp, loss.backward) so that small gradients survive fp16;
// before the update the gradients are scaled back down and checked for inf and NaN, which an
// overflow leaves. The flag is summed over the ranks by the Program's all-reduce; a step that
// found one is skipped (ops.cpp, optimizer_job) and the scale halved (session.cpp).
#include <cmath>

#include "rank.hpp"

namespace strata::runtime {

using namespace sim;

// {grads..} -> {grads.., found_inf}: each range unscaled in place where it lives (on the device
// by its kernel, in host memory by the host), the flag set where any held an inf or NaN.
void RankState::unscale(std::size_t i) {
    const OperandView a{w_.program, rp_, rp_.operands[i]};
    const int nin = a.o.n_in;
    if (a.o.n_out != nin + 1) fail(i, "the unscale pairs each gradient range with itself and writes one flag");
    const float inv = static_cast<float>(1.0 / w_.loss_scale);
    float* found = tensor(a.id(2 * nin), true, i);
    const bool flag_on_device = dev_ && a.out(nin).tier == Tier::gpu;
    if (flag_on_device) dev_->zero(found, 1);
    bool bad = false;
    for (int k = 0; k < nin; ++k) {
        float* g = tensor(a.id(nin + k), true, i);
        const i64 n = a.in(k).elements();
        if (dev_ && a.in(k).tier == Tier::gpu) {
            if (!flag_on_device) fail(i, "gradients on the GPU with their overflow flag in host memory");
            dev_->unscale(g, n, inv, found);
            continue;
        }
        for (i64 e = 0; e < n; ++e) {
            bad |= !std::isfinite(g[e]);
            g[e] *= inv;
        }
    }
    const float flag = bad ? 1.0f : 0.0f;
    if (!flag_on_device) *found = flag;
    else if (bad) dev_->copy(found, &flag, 1);
}

}  // namespace strata::runtime
