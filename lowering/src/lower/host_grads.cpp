// DeepSpeed's gradients homed in host memory (PlanSpec::streams_grads_to_host; ZeRO-2's
// cpu_offload, ZeRO-3's offload_optimizer): the rank's slice of each reduced range goes down to
// the host's fp32 partition as soon as it is reduced (stage_1_and_2.py copy_grads_in_partition
// after each bucket's reduction, stage3.py partition_grads after each layer's). Over several
// micro-batches the host keeps the sum: each later micro-batch brings it up into a scratch and
// adds it on the GPU before the copy down (async_accumulate_grad_in_cpu_via_gpu), 16-bit until the
// last, whose copy is the fp32 one the optimizer reads (`.float()`, then the copy).
#include <algorithm>
#include <cmath>

#include "lower_impl.hpp"

namespace strata::sim::lower_detail {

void RankLowering::grads_to_host(double off, double count, bool expert) {
    // The previous range's tail first: its sum and copy down were left for now (below).
    flush_host_grads();
    const Group g = expert ? Group::edp : Group::dp;
    // Pipelined FSDP reduces once, in the last backward; ZeRO-2 and ZeRO-3 every micro-batch.
    const bool every_mb = p_.zero_stage == 2 || !pipelined_fsdp();
    const bool summed = every_mb && !first_backward_, last = !every_mb || last_backward_;
    const auto [lo, n] = group_size(g) > 1 ? dp_slice(off, count, expert) : std::pair<double, double>{off, count};
    // The dataflow: the reduced value's slice, the host's range of it.
    const bool named = df_ && shard_grads_;
    int value = -1, slice = -1, host = -1;
    if (named) {
        value = grad_value_of(off, count);
        slice = range(TensorRole::param_grad, lo, n, Tier::gpu, false, grad_version_[static_cast<std::size_t>(value)]);
        host = range(TensorRole::param_grad, lo, n, Tier::cpu);
        // The next gradients of the value's range are a new value once its last bucket is down.
        const auto& v = grad_values_[static_cast<std::size_t>(value)];
        if (off + count == v.first + v.second) ++grad_version_[static_cast<std::size_t>(value)];
    }
    if (n <= 0) return;
    const int reduced = record(group_size(g) > 1 ? Stream::dp_comm : Stream::compute);
    // Without overlap_comm the reduction stream is the compute stream: everything in line. ZeRO-2's
    // copy at the boundary is also checked for overflow a parameter at a time, and the check's
    // truth value syncs the host with the reduction stream (stage_1_and_2.py
    // update_offload_overflow_tracker: `if self._has_inf_or_nan(...)`; 2021's stage2.py:
    // float(x.float().sum())), so the backward waits for each copy even under overlap_comm.
    // ZeRO-3's boundary copy is not checked there (stage3.py _offload_grad_partition_at_boundary).
    const bool serial = !p_.overlap_grad_reduce;
    const bool blocking = serial || (last && p_.zero_stage == 2);
    if (summed && p_.cpu_grad_accumulation) {
        host_sum_on_cpu(lo, n, reduced, slice, host, named);
        return;
    }
    int up = -1, scratch = -1;
    if (summed) {
        wait(Stream::h2d, record(Stream::d2h));  // the earlier micro-batches' sum is down
        up = copy(Stream::h2d, CopyKind::h2d, n * p_.grad_bytes(), n_.grad_h2d, serial ? reduced : -1);
        if (named) {
            scratch = grads_copy(n_.t_grads_host, Tier::gpu, lo, n);
            io({host}, {scratch});
        }
    }
    // The sum and the copy down: in line without overlap; under overlap_comm they run on the
    // reduction stream, beside the next range's backward, which a kernel on the compute stream
    // waiting for this reduction would stall. So they follow that backward (the next range's
    // grads_to_host, or the end of the pass), when the reduction is long done.
    auto tail = [this, summed, last, blocking, reduced, up, scratch, slice, host, n, named] {
        int ready = reduced;
        if (summed) {
            wait(Stream::compute, reduced);
            wait(Stream::compute, up);
            compute(Op::grad_accum, n_.grad_accum, 0, 3 * p_.grad_bytes() * n);
            if (named) io({scratch, slice}, {slice});
            ready = record(Stream::compute);
        }
        const int down = copy(Stream::d2h, CopyKind::d2h, n * (last ? p_.host_grad_bytes() : p_.grad_bytes()), n_.grad_d2h, ready);
        if (named) io({slice}, {host});
        if (blocking) wait(Stream::compute, down);
    };
    if (serial || !summed) tail();
    else host_grads_tail_ = tail;
}

// FSDP's CPU offload (plan.cpu_grad_accumulation): a micro-batch whose gradient accumulates
// copies its slice down with the backward waiting (the copy is not overlapped, the CPU add needs
// its result) and the host adds it into its sum, the backward's thread busy meanwhile
// (_fsdp_collectives.py foreach_reduce). Bytes as they are reduced (the reduce dtype).
void RankLowering::host_sum_on_cpu(double lo, double n, int reduced, int slice, int host, bool named) {
    const int down = copy(Stream::d2h, CopyKind::d2h, n * p_.grad_bytes(), n_.grad_d2h, reduced);
    int scratch = -1;
    if (named) {
        scratch = grads_copy(n_.t_grads_device, Tier::cpu, lo, n);
        io({slice}, {scratch});
    }
    wait(Stream::cpu, down);
    Instr& add = push(InstrKind::optimizer, Stream::cpu, n_.grad_host_accum);
    add.bytes = 3 * 4.0 * n;  // the fp32 sum read and written, the copy read (a host memory pass)
    if (named) io({scratch, host}, {host});
    wait(Stream::compute, record(Stream::cpu));
}

// A micro-batch's copy of the gradients [lo, lo + n) on `tier`: the host's sum brought up, or a
// slice brought down for the host to add.
int RankLowering::grads_copy(int name, Tier tier, double lo, double n) {
    DataTensor t;
    t.name = name;
    t.role = TensorRole::weight_grad;
    t.tier = tier;
    t.microbatch = mb_;
    t.offset = std::llround(lo);
    t.rows = 1;
    t.cols = std::llround(n);
    return table_->intern(t);
}

void RankLowering::flush_host_grads() {
    if (!host_grads_tail_) return;
    auto tail = std::move(host_grads_tail_);
    host_grads_tail_ = nullptr;
    tail();
}

}  // namespace strata::sim::lower_detail
