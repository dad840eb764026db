// The emulated device's communicators (device.hpp's DeviceComm): NCCL's semantics between emulated
// devices, which are threads of one process. An operation completes once every member has posted
// it; members are paired by the order they posted in, as NCCL pairs them, and the last to post
// performs it for all: sums in member order in fp32 (as the cpu backend's transport does), each
// output rounded to its storage. What NCCL would pair wrongly or refuse (members posting in
// different orders, sizes that differ, storages it cannot convert) stops the run here, naming both
// sides, so CI finds it before a GPU does.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "device_emulated.hpp"
#include "transport.hpp"

namespace strata::runtime {
namespace emulated_comm {

using i64 = std::int64_t;
enum class Kind { all_reduce, all_gather, reduce_scatter, all_to_all, ring_shift, ulysses, send, recv };
const char* name_of(Kind k) {
    switch (k) {
        case Kind::all_reduce: return "all_reduce";
        case Kind::all_gather: return "all_gather";
        case Kind::reduce_scatter: return "reduce_scatter";
        case Kind::all_to_all: return "all_to_all";
        case Kind::ring_shift: return "ring_shift";
        case Kind::ulysses: return "ulysses";
        case Kind::send: return "send";
        case Kind::recv: return "recv";
    }
    return "?";
}

struct Span {
    float* p = nullptr;
    i64 n = 0;
    Storage fmt = Storage::fp32;
};

struct Part {
    bool posted = false;
    Kind kind = Kind::all_reduce;
    std::int64_t tag = 0;
    i64 n = 0;
    std::vector<i64> offset, recv;  ///< all_to_all: offset is what the member sends, recv what it receives
    DeviceComm::Reduce mode = DeviceComm::Reduce::write;
    i64 rows = 0, stride = 0, col0 = 0, cols = 0;  ///< ring_shift (rows, and Ulysses' sequence length in stride)
    int shift = 0;                                  ///< ring_shift; ulysses: 1 to the heads, 2 back
    Span in, out;
};

void narrow(Storage fmt, float* p, i64 n) {
    if (fmt == Storage::bf16) cpu::round_bf16(p, n);
    else if (fmt == Storage::fp16) cpu::round_fp16(p, n);
}

struct Group {
    std::mutex mu;
    int members = 0;
    std::map<std::uint64_t, std::vector<Part>> pending;  ///< by the posting order
    std::vector<std::uint64_t> posted, completed;        ///< per member
    std::vector<std::function<void()>> notify;
    bool aborted = false;
};

std::string describe(const Part& p, int member) {
    return "member " + std::to_string(member) + " posted " + name_of(p.kind) + " of match " + std::to_string(p.tag) + " (" +
           std::to_string(p.n) + " elements)";
}

// Every member's part of one operation agrees, or the run stops naming the first that does not.
void check(const std::vector<Part>& parts) {
    const Part& a = parts[0];
    const bool p2p = a.kind == Kind::send || a.kind == Kind::recv;
    for (std::size_t m = 1; m < parts.size(); ++m) {
        const Part& b = parts[m];
        const bool kinds = p2p ? (b.kind == Kind::send || b.kind == Kind::recv) && b.kind != a.kind : b.kind == a.kind;
        const bool a2a = a.kind == Kind::all_to_all;
        if (!kinds || b.tag != a.tag || (!a2a && (b.n != a.n || b.offset != a.offset)) || b.shift != a.shift || b.cols != a.cols || b.rows != a.rows)
            throw std::runtime_error("emulated device: a communicator's members posted different operations in the same place: " +
                                     describe(a, 0) + ", " + describe(b, static_cast<int>(m)) +
                                     " (NCCL would pair them; the members' orders or sizes differ)");
    }
    if (a.kind != Kind::all_to_all) return;
    for (std::size_t s = 0; s < parts.size(); ++s)  // what s sends to d is what d expects from s
        for (std::size_t d = 0; d < parts.size(); ++d)
            if (parts[s].offset[d + 1] - parts[s].offset[d] != parts[d].recv[s + 1] - parts[d].recv[s])
                throw std::runtime_error("emulated device: all_to_all of match " + std::to_string(a.tag) + ": member " + std::to_string(s) + " sends " +
                                         std::to_string(parts[s].offset[d + 1] - parts[s].offset[d]) + " elements to member " + std::to_string(d) +
                                         ", which expects " + std::to_string(parts[d].recv[s + 1] - parts[d].recv[s]));
}

void perform(std::vector<Part>& parts) {
    const Part& a = parts[0];
    switch (a.kind) {
        case Kind::all_reduce: {
            std::vector<float> sum(static_cast<std::size_t>(a.n), 0.0f);
            for (const Part& p : parts)
                for (i64 i = 0; i < a.n; ++i) sum[static_cast<std::size_t>(i)] += p.in.p[i];
            for (Part& p : parts) {
                std::memcpy(p.out.p, sum.data(), static_cast<std::size_t>(a.n) * sizeof(float));
                narrow(p.out.fmt, p.out.p, a.n);
            }
            break;
        }
        case Kind::all_gather:
            for (std::size_t q = 0; q < parts.size(); ++q) {
                const i64 lo = a.offset[q], len = a.offset[q + 1] - lo;
                for (Part& dst : parts) {
                    if (dst.out.p + lo != parts[q].in.p && len > 0)
                        std::memmove(dst.out.p + lo, parts[q].in.p, static_cast<std::size_t>(len) * sizeof(float));
                    narrow(dst.out.fmt, dst.out.p + lo, len);
                }
            }
            break;
        case Kind::reduce_scatter: {
            std::vector<std::vector<float>> sums(parts.size());
            for (std::size_t r = 0; r < parts.size(); ++r) {
                const i64 lo = a.offset[r], len = a.offset[r + 1] - lo;
                sums[r].assign(static_cast<std::size_t>(len), 0.0f);
                for (const Part& p : parts)
                    for (i64 i = 0; i < len; ++i) sums[r][static_cast<std::size_t>(i)] += p.in.p[lo + i];
            }
            for (std::size_t r = 0; r < parts.size(); ++r) {
                Part& p = parts[r];
                const i64 lo = a.offset[r], hi = a.offset[r + 1], len = hi - lo;
                const bool whole = p.mode == DeviceComm::Reduce::zero_rest;
                float* o = whole ? p.out.p + lo : p.out.p;
                for (i64 i = 0; i < len; ++i)
                    o[i] = (p.mode == DeviceComm::Reduce::accumulate ? o[i] : 0.0f) + sums[r][static_cast<std::size_t>(i)];
                narrow(p.out.fmt, o, len);
                if (whole) {
                    std::fill(p.out.p, p.out.p + lo, 0.0f);
                    std::fill(p.out.p + hi, p.out.p + p.out.n, 0.0f);
                }
            }
            break;
        }
        case Kind::all_to_all:
            for (std::size_t s = 0; s < parts.size(); ++s)
                for (std::size_t d = 0; d < parts.size(); ++d) {
                    const i64 len = parts[s].offset[d + 1] - parts[s].offset[d];
                    float* to = parts[d].out.p + parts[d].recv[s];
                    if (len > 0) std::memcpy(to, parts[s].in.p + parts[s].offset[d], static_cast<std::size_t>(len) * sizeof(float));
                    narrow(parts[d].out.fmt, to, len);
                }
            break;
        case Kind::ring_shift: {
            const int n = static_cast<int>(parts.size());
            std::vector<std::vector<float>> got(parts.size());  // every block read before any is written
            for (int d = 0; d < n; ++d) {
                const Part& s = parts[static_cast<std::size_t>(((d - a.shift) % n + n) % n)];
                auto& g = got[static_cast<std::size_t>(d)];
                g.resize(static_cast<std::size_t>(a.rows * a.cols));
                for (i64 r = 0; r < a.rows; ++r)
                    std::memcpy(g.data() + r * a.cols, s.in.p + r * s.stride + s.col0, static_cast<std::size_t>(a.cols) * sizeof(float));
            }
            for (int d = 0; d < n; ++d) {
                Part& p = parts[static_cast<std::size_t>(d)];
                const auto& g = got[static_cast<std::size_t>(d)];
                for (i64 e = 0; e < a.rows * a.cols; ++e) p.out.p[e] = (p.mode == DeviceComm::Reduce::accumulate ? p.out.p[e] : 0.0f) + g[static_cast<std::size_t>(e)];
                narrow(p.out.fmt, p.out.p, a.rows * a.cols);
            }
            break;
        }
        case Kind::ulysses: {  // the transport's exchange (transport.cpp), on the members' device buffers
            std::vector<CollPart> moves(parts.size());
            for (std::size_t r = 0; r < parts.size(); ++r) {
                CollPart& m = moves[r];
                m.group_rank = static_cast<int>(r);
                m.in = {parts[r].in.p};
                m.in_n = {parts[r].in.n};
                m.out = {parts[r].out.p};
                m.out_n = {parts[r].out.n};
                m.ulysses = a.shift;
                m.segments = a.offset;
                m.seq = a.stride;
            }
            ulysses_exchange(moves);
            for (Part& p : parts) narrow(p.out.fmt, p.out.p, p.out.n);
            break;
        }
        case Kind::send:
        case Kind::recv: {
            const Part& s = parts[0].kind == Kind::send ? parts[0] : parts[1];
            Part& r = parts[0].kind == Kind::recv ? parts[0] : parts[1];
            if (a.n > 0) std::memcpy(r.out.p, s.in.p, static_cast<std::size_t>(a.n) * sizeof(float));
            narrow(r.out.fmt, r.out.p, a.n);
            break;
        }
    }
}

class EmulatedComm final : public DeviceComm {
public:
    EmulatedComm(std::shared_ptr<Group> g, EmulatedBase* dev, int rank) : g_(std::move(g)), dev_(dev), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return g_->members; }

    void all_reduce(float* out, const float* in, i64 n, std::int64_t tag) override {
        Part p = part(Kind::all_reduce, tag, n);
        p.in = span(in, n, "all_reduce in");
        p.out = span(out, n, "all_reduce out");
        same_storage(p, "all_reduce");
        post(std::move(p));
    }
    void all_gather(float* out, const float* in, const std::vector<i64>& offset, std::int64_t tag) override {
        Part p = part(Kind::all_gather, tag, offsets(offset, "all_gather"));
        p.offset = offset;
        p.in = span(in, offset[static_cast<std::size_t>(rank_) + 1] - offset[static_cast<std::size_t>(rank_)], "all_gather in");
        p.out = span(out, p.n, "all_gather out");
        post(std::move(p));
    }
    void reduce_scatter(float* out, const float* in, const std::vector<i64>& offset, Reduce mode, std::int64_t tag) override {
        Part p = part(Kind::reduce_scatter, tag, offsets(offset, "reduce_scatter"));
        p.offset = offset;
        p.mode = mode;
        const i64 lo = offset[static_cast<std::size_t>(rank_)];
        p.in = span(in, p.n, "reduce_scatter in");
        p.out = span(out, mode == Reduce::zero_rest ? p.n : offset[static_cast<std::size_t>(rank_) + 1] - lo, "reduce_scatter out");
        if (mode != Reduce::accumulate) same_storage(p, "reduce_scatter");
        post(std::move(p));
    }
    void all_to_all(float* out, const float* in, const std::vector<i64>& send, const std::vector<i64>& recv, std::int64_t tag) override {
        Part p = part(Kind::all_to_all, tag, offsets(send, "all_to_all"));
        p.offset = send;
        p.recv = recv;
        p.in = span(in, p.n, "all_to_all in");
        p.out = span(out, offsets(recv, "all_to_all"), "all_to_all out");
        same_storage(p, "all_to_all");
        post(std::move(p));
    }
    void ring_shift(float* out, const float* in, i64 rows, i64 stride, i64 col0, i64 cols, int shift, bool accumulate,
                    std::int64_t tag) override {
        if (col0 < 0 || cols < 0 || col0 + cols > stride) throw std::runtime_error("emulated device: comm ring_shift: the columns are not in the rows");
        Part p = part(Kind::ring_shift, tag, rows * cols);
        p.rows = rows, p.stride = stride, p.col0 = col0, p.cols = cols, p.shift = shift;
        p.mode = accumulate ? Reduce::accumulate : Reduce::write;
        p.in = span(in, rows > 0 ? (rows - 1) * stride + col0 + cols : 0, "ring_shift in");
        p.out = span(out, rows * cols, "ring_shift out");
        same_storage(p, "ring_shift");
        post(std::move(p));
    }
    void ulysses(float* out, const float* in, i64 rows, const std::vector<i64>& segments, i64 seq, bool to_heads, std::int64_t tag) override {
        i64 W = 0;
        for (i64 g : segments) {
            if (g % g_->members != 0) throw std::runtime_error("emulated device: comm ulysses: a segment's columns do not split over the members");
            W += g;
        }
        if (seq % (2 * g_->members) != 0 || rows % (seq / g_->members) != 0)
            throw std::runtime_error("emulated device: comm ulysses: the sequence does not split over the members");
        Part p = part(Kind::ulysses, tag, W);
        p.offset = segments;
        p.rows = rows, p.stride = seq, p.shift = to_heads ? 1 : 2;
        p.in = span(in, rows * W, "ulysses in");
        p.out = span(out, rows * W, "ulysses out");
        same_storage(p, "ulysses");
        post(std::move(p));
    }
    void send(const float* data, i64 n, int peer, std::int64_t tag) override {
        if (peer != 1 - rank_ || g_->members != 2) throw std::runtime_error("emulated device: comm send: a pipeline communicator is two members");
        Part p = part(Kind::send, tag, n);
        p.in = span(data, n, "send");
        post(std::move(p));
    }
    void recv(float* data, i64 n, int peer, std::int64_t tag) override {
        if (peer != 1 - rank_ || g_->members != 2) throw std::runtime_error("emulated device: comm recv: a pipeline communicator is two members");
        Part p = part(Kind::recv, tag, n);
        p.out = span(data, n, "recv");
        post(std::move(p));
    }
    bool done() override {
        std::lock_guard<std::mutex> lk(g_->mu);
        if (g_->aborted) throw std::runtime_error("stopped: a communicator was aborted after a rank failed");
        return g_->completed[static_cast<std::size_t>(rank_)] == g_->posted[static_cast<std::size_t>(rank_)];
    }
    void abort() override {
        std::vector<std::function<void()>> wake;
        {
            std::lock_guard<std::mutex> lk(g_->mu);
            g_->aborted = true;
            wake = g_->notify;
        }
        for (auto& f : wake)
            if (f) f();
    }
    void set_notify(std::function<void()> notify) override {
        std::lock_guard<std::mutex> lk(g_->mu);
        g_->notify[static_cast<std::size_t>(rank_)] = std::move(notify);
    }

private:
    Part part(Kind k, std::int64_t tag, i64 n) const {
        Part p;
        p.kind = k;
        p.tag = tag;
        p.n = n;
        return p;
    }
    i64 offsets(const std::vector<i64>& offset, const char* what) const {
        if (static_cast<int>(offset.size()) != g_->members + 1 || offset.front() != 0)
            throw std::runtime_error(std::string("emulated device: comm ") + what + ": offsets are not members + 1 from 0");
        for (std::size_t q = 1; q < offset.size(); ++q)
            if (offset[q] < offset[q - 1]) throw std::runtime_error(std::string("emulated device: comm ") + what + ": offsets decrease");
        return offset.back();
    }
    // The operand's storage, after what the lane waits for (the cuda device queues the operation
    // behind it).
    Span span(const float* p, i64 n, const char* what) {
        while (!dev_->q_[dev_->lane_].empty()) dev_->step(dev_->lane_);
        const std::string w = std::string("comm ") + what;
        if (n == 0 && !p) return Span{};
        const EmulatedBase::Ref r = dev_->dev(p, n, w.c_str());
        return Span{r.p, r.n, r.fmt};
    }
    static void same_storage(const Part& p, const char* what) {
        if (p.in.p && p.out.p && p.in.fmt != p.out.fmt)
            throw std::runtime_error(std::string("emulated device: comm ") + what + ": input and output are stored differently (NCCL does not convert)");
    }
    void post(Part p) {
        p.posted = true;
        std::vector<std::function<void()>> wake;
        {
            std::lock_guard<std::mutex> lk(g_->mu);
            if (g_->aborted) throw std::runtime_error("stopped: a communicator was aborted after a rank failed");
            const std::uint64_t seq = g_->posted[static_cast<std::size_t>(rank_)]++;
            std::vector<Part>& slot = g_->pending[seq];
            if (slot.empty()) slot.resize(static_cast<std::size_t>(g_->members));
            slot[static_cast<std::size_t>(rank_)] = std::move(p);
            for (const Part& q : slot)
                if (!q.posted) return;
            check(slot);
            perform(slot);
            g_->pending.erase(seq);
            for (auto& c : g_->completed) ++c;
            wake = g_->notify;
        }
        for (auto& f : wake)
            if (f) f();
    }

    std::shared_ptr<Group> g_;
    EmulatedBase* dev_;
    int rank_;
};

}  // namespace emulated_comm

std::vector<std::unique_ptr<DeviceComm>> EmulatedBase::comms_with(const std::vector<Device*>& members) {
    using namespace emulated_comm;
    auto g = std::make_shared<Group>();
    g->members = static_cast<int>(members.size());
    g->posted.assign(members.size(), 0);
    g->completed.assign(members.size(), 0);
    g->notify.resize(members.size());
    std::vector<std::unique_ptr<DeviceComm>> out;
    for (std::size_t m = 0; m < members.size(); ++m) {
        auto* d = dynamic_cast<EmulatedBase*>(members[m]);
        if (!d) throw std::runtime_error("emulated device: a communicator's member is not an emulated device");
        out.push_back(std::make_unique<EmulatedComm>(g, d, static_cast<int>(m)));
    }
    return out;
}

}  // namespace strata::runtime
