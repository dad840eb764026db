// Part of the cuda backend's one translation unit (device_cuda.cu includes it inside its unnamed
// namespace, after the CudaDevice class): NCCL communicators between the GPUs of this process, one
// rank a GPU (device.hpp's DeviceComm). Every operation is queued on the owning device's current
// lane (a communication stream of the Program), and the buffers it touched remember it there, so
// that a block freed after it is not handed to another lane before it ends. Uneven slices of a flat
// range (the lowering cuts a range of n over m members at n q / m) go as grouped broadcasts or
// reduces, even ones as NCCL's all-gather and reduce-scatter.
#pragma once

#define NK(call)                                                                                                    \
    do {                                                                                                            \
        const ncclResult_t r_ = (call);                                                                             \
        if (r_ != ncclSuccess)                                                                                      \
            throw std::runtime_error(std::string("nccl: ") + #call + " failed at " + where(__FILE__, __LINE__) + \
                                     ": " + ncclGetErrorString(r_));                                                \
    } while (0)

ncclDataType_t nccl_type(int fmt) { return fmt == 1 ? ncclBfloat16 : fmt == 2 ? ncclFloat16 : ncclFloat32; }

class CudaComm final : public DeviceComm {
public:
    CudaComm(CudaDevice* dev, ncclComm_t comm, int rank, int size) : dev_(dev), comm_(comm), rank_(rank), size_(size) {}
    ~CudaComm() override {
        dev_->bind_thread();
        if (!aborted_.load()) ncclCommDestroy(comm_);
    }
    void abort() override {
        if (!aborted_.exchange(true)) ncclCommAbort(comm_);  // frees the communicator too
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }

    void all_reduce(float* out, const float* in, i64 n, std::int64_t) override {
        const TV o = dev_->tv(out), x = dev_->tv(in);
        same(o, x, "all_reduce");
        if (n > 0) NK(ncclAllReduce(x.p, o.p, static_cast<std::size_t>(n), nccl_type(o.fmt), ncclSum, comm_, dev_->stream()));
        dev_->touched({o.p, x.p});
    }
    void all_gather(float* out, const float* in, const std::vector<i64>& off, std::int64_t) override {
        const TV o = dev_->tv(out);
        TV x = dev_->tv(in);
        const i64 lo = off[static_cast<std::size_t>(rank_)], mine = off[static_cast<std::size_t>(rank_) + 1] - lo;
        if (x.fmt != o.fmt) {  // NCCL moves bytes: the member's slice converted into place first
            dev_->move(o + lo, x, mine);
            x = o + lo;
        }
        if (even(off)) {
            const i64 each = off[1];
            if (each > 0) NK(ncclAllGather(x.p, o.p, static_cast<std::size_t>(each), nccl_type(o.fmt), comm_, dev_->stream()));
        } else {
            NK(ncclGroupStart());
            for (int q = 0; q < size_; ++q) {
                const i64 at = off[static_cast<std::size_t>(q)], cnt = off[static_cast<std::size_t>(q) + 1] - at;
                if (cnt > 0)
                    NK(ncclBroadcast(q == rank_ ? x.p : (o + at).p, (o + at).p, static_cast<std::size_t>(cnt), nccl_type(o.fmt), q, comm_,
                                     dev_->stream()));
            }
            NK(ncclGroupEnd());
        }
        dev_->touched({o.p, x.p});
    }
    void reduce_scatter(float* out, const float* in, const std::vector<i64>& off, Reduce mode, std::int64_t) override {
        const TV x = dev_->tv(in);
        TV o = dev_->tv(out);
        const i64 lo = off[static_cast<std::size_t>(rank_)], hi = off[static_cast<std::size_t>(rank_) + 1], total = off.back();
        TV target = mode == Reduce::zero_rest ? o + lo : o;
        void* scratch = nullptr;
        if (mode == Reduce::accumulate) {  // summed beside, then added in the output's width
            scratch = dev_->alloc_block(static_cast<std::size_t>(std::max<i64>(hi - lo, 1)) * (x.fmt ? 2 : 4));
            if (!scratch) throw std::runtime_error("cuda: no device memory for a reduce-scatter's sum");
            target = TV{scratch, x.fmt};
        } else {
            same(o, x, "reduce_scatter");
        }
        if (even(off)) {
            if (off[1] > 0)
                NK(ncclReduceScatter(x.p, target.p, static_cast<std::size_t>(off[1]), nccl_type(x.fmt), ncclSum, comm_, dev_->stream()));
        } else {
            NK(ncclGroupStart());
            for (int q = 0; q < size_; ++q) {
                const i64 at = off[static_cast<std::size_t>(q)], cnt = off[static_cast<std::size_t>(q) + 1] - at;
                if (cnt > 0)
                    NK(ncclReduce((x + at).p, q == rank_ ? target.p : (x + at).p, static_cast<std::size_t>(cnt), nccl_type(x.fmt), ncclSum, q,
                                  comm_, dev_->stream()));
            }
            NK(ncclGroupEnd());
        }
        if (mode == Reduce::accumulate && hi > lo) {
            k_add<<<blocks_for(hi - lo), kThreads, 0, dev_->stream()>>>(o, o, target, TV{}, 1, hi - lo);
            LAUNCHED();
        }
        if (mode == Reduce::zero_rest) {
            const std::size_t w = o.fmt ? 2 : 4;
            if (lo > 0) CK(cudaMemsetAsync(o.p, 0, static_cast<std::size_t>(lo) * w, dev_->stream()));
            if (total > hi) CK(cudaMemsetAsync((o + hi).p, 0, static_cast<std::size_t>(total - hi) * w, dev_->stream()));
        }
        dev_->touched({o.p, x.p, scratch});
        if (scratch) dev_->release_block(scratch, static_cast<std::size_t>(std::max<i64>(hi - lo, 1)) * (x.fmt ? 2 : 4));
    }
    void all_to_all(float* out, const float* in, const std::vector<i64>& send, const std::vector<i64>& recv, std::int64_t) override {
        const TV o = dev_->tv(out), x = dev_->tv(in);
        same(o, x, "all_to_all");
        const ncclDataType_t t = nccl_type(o.fmt);
        const std::size_t w = o.fmt ? 2 : 4;
        const auto me = static_cast<std::size_t>(rank_);
        if (const i64 own = send[me + 1] - send[me]; own > 0)  // this member's own rows, a copy on the lane
            CK(cudaMemcpyAsync((o + recv[me]).p, (x + send[me]).p, static_cast<std::size_t>(own) * w, cudaMemcpyDeviceToDevice, dev_->stream()));
        NK(ncclGroupStart());
        for (int q = 0; q < size_; ++q) {
            if (q == rank_) continue;
            const auto k = static_cast<std::size_t>(q);
            if (send[k + 1] > send[k]) NK(ncclSend((x + send[k]).p, static_cast<std::size_t>(send[k + 1] - send[k]), t, q, comm_, dev_->stream()));
            if (recv[k + 1] > recv[k]) NK(ncclRecv((o + recv[k]).p, static_cast<std::size_t>(recv[k + 1] - recv[k]), t, q, comm_, dev_->stream()));
        }
        NK(ncclGroupEnd());
        dev_->touched({o.p, x.p});
    }
    void ring_shift(float* out, const float* in, i64 rows, i64 stride, i64 col0, i64 cols, int shift, bool accumulate,
                    std::int64_t) override {
        const TV o = dev_->tv(out), x = dev_->tv(in);
        same(o, x, "ring_shift");
        const i64 n = rows * cols;
        const std::size_t bytes = static_cast<std::size_t>(std::max<i64>(n, 1)) * (o.fmt ? 2 : 4);
        TV from = x + col0, into = o;
        void* packed = nullptr;
        void* sum = nullptr;
        if (stride != cols && n > 0) {  // the block's columns packed on the lane before they go
            if (!(packed = dev_->alloc_block(bytes))) throw std::runtime_error("cuda: no device memory for a ring block");
            k_copy_columns<<<blocks_for(n), kThreads, 0, dev_->stream()>>>(TV{packed, o.fmt}, cols, x + col0, stride, cols, n);
            LAUNCHED();
            from = TV{packed, o.fmt};
        }
        if (accumulate) {
            if (!(sum = dev_->alloc_block(bytes))) throw std::runtime_error("cuda: no device memory for a ring block");
            into = TV{sum, o.fmt};
        }
        const int to = ((rank_ + shift) % size_ + size_) % size_, back = ((rank_ - shift) % size_ + size_) % size_;
        if (n > 0) {
            NK(ncclGroupStart());
            NK(ncclSend(from.p, static_cast<std::size_t>(n), nccl_type(o.fmt), to, comm_, dev_->stream()));
            NK(ncclRecv(into.p, static_cast<std::size_t>(n), nccl_type(o.fmt), back, comm_, dev_->stream()));
            NK(ncclGroupEnd());
        }
        if (accumulate && n > 0) {
            k_add<<<blocks_for(n), kThreads, 0, dev_->stream()>>>(o, o, into, TV{}, 1, n);
            LAUNCHED();
        }
        dev_->touched({o.p, x.p, packed, sum});
        for (void* b : {packed, sum})
            if (b) dev_->release_block(b, bytes);
    }
    void ulysses(float* out, const float* in, i64 rows, const std::vector<i64>& segments, i64 seq, bool to_heads, std::int64_t) override {
        const TV o = dev_->tv(out), x = dev_->tv(in);
        same(o, x, "ulysses");
        if (segments.empty() || segments.size() > 4) throw std::runtime_error("cuda: ulysses: 1 to 4 column segments");
        UlyssesSegments sg{};
        sg.count = static_cast<int>(segments.size());
        i64 W = 0;
        for (int k = 0; k < sg.count; ++k) W += sg.g[k] = segments[static_cast<std::size_t>(k)];
        const i64 total = rows * W, w = W / size_;  // the member's elements, either side
        if (total <= 0) return;
        const std::size_t bytes = static_cast<std::size_t>(total) * (o.fmt ? 2 : 4);
        void* send = dev_->alloc_block(bytes);
        void* recv = dev_->alloc_block(bytes);
        if (!send || !recv) throw std::runtime_error("cuda: no device memory for Ulysses' blocks");
        const TV S{send, o.fmt}, R{recv, o.fmt};
        const unsigned grid = blocks_for(total);
        if (to_heads) k_ulysses_heads<<<grid, kThreads, 0, dev_->stream()>>>(S, x, rows, W, sg, size_, true);
        else k_ulysses_seq<<<grid, kThreads, 0, dev_->stream()>>>(S, x, rows, w, seq, size_, true);
        LAUNCHED();
        const i64 each = rows * w;  // a block per member, both ways
        NK(ncclGroupStart());
        for (int q = 0; q < size_; ++q) {
            NK(ncclSend((S + q * each).p, static_cast<std::size_t>(each), nccl_type(o.fmt), q, comm_, dev_->stream()));
            NK(ncclRecv((R + q * each).p, static_cast<std::size_t>(each), nccl_type(o.fmt), q, comm_, dev_->stream()));
        }
        NK(ncclGroupEnd());
        if (to_heads) k_ulysses_seq<<<grid, kThreads, 0, dev_->stream()>>>(R, o, rows, w, seq, size_, false);
        else k_ulysses_heads<<<grid, kThreads, 0, dev_->stream()>>>(R, o, rows, W, sg, size_, false);
        LAUNCHED();
        dev_->touched({o.p, x.p, send, recv});
        dev_->release_block(send, bytes);
        dev_->release_block(recv, bytes);
    }
    void send(const float* p, i64 n, int peer, std::int64_t) override {
        const TV x = dev_->tv(p);
        if (n > 0) NK(ncclSend(x.p, static_cast<std::size_t>(n), nccl_type(x.fmt), peer, comm_, dev_->stream()));
        dev_->touched({x.p});
    }
    void recv(float* p, i64 n, int peer, std::int64_t) override {
        const TV o = dev_->tv(p);
        if (n > 0) NK(ncclRecv(o.p, static_cast<std::size_t>(n), nccl_type(o.fmt), peer, comm_, dev_->stream()));
        dev_->touched({o.p});
    }
    bool done() override { return true; }  // ordered on the lane: what reads the result waits there
    void set_notify(std::function<void()>) override {}

private:
    static bool even(const std::vector<i64>& off) {
        for (std::size_t q = 1; q < off.size(); ++q)
            if (off[q] - off[q - 1] != off[1]) return false;
        return true;
    }
    static void same(TV a, TV b, const char* what) {
        if (a.fmt != b.fmt) throw std::runtime_error(std::string("nccl: ") + what + ": input and output are stored in different widths");
    }
    CudaDevice* dev_;
    ncclComm_t comm_;
    int rank_, size_;
    std::atomic<bool> aborted_{false};
};

// One communicator over the members' GPUs, created from this thread (NCCL's one-process pattern:
// a rank per device, initialised inside one group).
std::vector<std::unique_ptr<DeviceComm>> CudaDevice::comms_with(const std::vector<Device*>& members) {
    const int n = static_cast<int>(members.size());
    std::vector<CudaDevice*> devs;
    for (Device* d : members) {
        auto* c = dynamic_cast<CudaDevice*>(d);
        if (!c) throw std::runtime_error("cuda: a communicator's member is not a cuda device");
        for (CudaDevice* seen : devs)
            if (seen->gpu_ == c->gpu_)
                throw std::runtime_error("nccl: two ranks of one communicator on GPU " + std::to_string(c->gpu_) +
                                         " (NCCL puts one rank on a GPU; RunOptions::ranks_share_gpu stages them through the host)");
        devs.push_back(c);
    }
    ncclUniqueId id;
    NK(ncclGetUniqueId(&id));
    std::vector<ncclComm_t> comms(static_cast<std::size_t>(n));
    NK(ncclGroupStart());
    for (int r = 0; r < n; ++r) {
        CK(cudaSetDevice(devs[static_cast<std::size_t>(r)]->gpu_));
        NK(ncclCommInitRank(&comms[static_cast<std::size_t>(r)], n, id, r));
    }
    NK(ncclGroupEnd());
    std::vector<std::unique_ptr<DeviceComm>> out;
    for (int r = 0; r < n; ++r) out.push_back(std::make_unique<CudaComm>(devs[static_cast<std::size_t>(r)], comms[static_cast<std::size_t>(r)], r, n));
    bind_thread();
    return out;
}
