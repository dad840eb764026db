#include "transport.hpp"

#include <algorithm>
#include <cstring>

#include "strata/common/error.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::runtime {

namespace {
using i64 = std::int64_t;
// Member r's slice of a flat range of n elements over `members` (the lowering's rule).
std::pair<i64, i64> slice(i64 n, int r, int members) {
    const i64 lo = n * r / members, hi = n * (r + 1) / members;
    return {lo, hi};
}
}  // namespace

// A sequence-split row (member s's local row i) is row seq_index x seq + position of the
// head-split side; each column segment's r-th 1/members goes to (or comes from) member r.
void ulysses_exchange(std::vector<CollPart>& parts) {
    std::sort(parts.begin(), parts.end(), [](const CollPart& a, const CollPart& b) { return a.group_rank < b.group_rank; });
    const int n = static_cast<int>(parts.size());
    const CollPart& p0 = parts[0];
    const bool to_heads = p0.ulysses == 1;
    i64 W = 0;
    for (i64 g : p0.segments) W += g;
    STRATA_ASSERT(W > 0 && W % n == 0 && p0.seq % (2 * n) == 0, "ulysses: columns or sequence do not split over the members");
    const i64 w = W / n, local = p0.seq / n;
    for (const CollPart& side : parts) {
        const i64 rows = (to_heads ? side.in_n[0] : side.out_n[0]) / W;  // the member's sequence-split rows
        STRATA_ASSERT((to_heads ? side.out_n[0] : side.in_n[0]) == rows * W, "ulysses: a member's two layouts differ in size");
        const cpu::Positions where{p0.seq, n, side.group_rank};
        for (i64 i = 0; i < rows; ++i) {
            const i64 whole = i / local * p0.seq + where(i);  // the row in sequence order
            i64 full = 0, part = 0;
            for (i64 g : p0.segments) {
                const i64 cg = g / n;
                for (const CollPart& other : parts) {
                    const i64 at_full = i * W + full + other.group_rank * cg, at_part = whole * w + part;
                    if (to_heads) std::memcpy(other.out[0] + at_part, side.in[0] + at_full, static_cast<std::size_t>(cg) * sizeof(float));
                    else std::memcpy(side.out[0] + at_full, other.in[0] + at_part, static_cast<std::size_t>(cg) * sizeof(float));
                }
                full += g;
                part += cg;
            }
        }
    }
}

void Transport::perform(Coll& c) {
    std::sort(c.parts.begin(), c.parts.end(), [](const CollPart& a, const CollPart& b) { return a.group_rank < b.group_rank; });
    const int n = c.members;
    const CollPart& p0 = c.parts[0];
    for (const CollPart& p : c.parts)
        STRATA_ASSERT(p.in.size() == p0.in.size() && p.out.size() == p0.out.size(), "transport: members disagree on operands");
    if (p0.ulysses != 0) return ulysses_exchange(c.parts);
    if (!p0.rings.empty()) {  // context parallelism by all-gather: every block by its ring place at once
        const i64 rows = p0.in_n[0] / p0.in_cols;
        for (std::size_t k = 0; k < p0.rings.size(); ++k) {
            const int ring = p0.rings[k];
            for (CollPart& dst : c.parts) {
                if (c.kind == sim::CollKind::all_gather) {
                    const CollPart& src = c.parts[static_cast<std::size_t>((dst.group_rank - ring % n + n) % n)];
                    for (i64 r = 0; r < rows; ++r)
                        std::memcpy(dst.out[k] + r * dst.out_cols, src.in[0] + r * src.in_cols + (src.in_cols - dst.out_cols),
                                    static_cast<std::size_t>(dst.out_cols) * sizeof(float));
                } else {
                    const CollPart& src = c.parts[static_cast<std::size_t>((dst.group_rank + ring) % n)];
                    for (i64 r = 0; r < rows; ++r) {
                        float* o = dst.out[0] + r * dst.out_cols;
                        const float* x = src.in[k] + r * src.in_cols;
                        for (i64 q = 0; q < dst.out_cols; ++q) o[q] = (k > 0 ? o[q] : 0.0f) + x[q];
                    }
                }
            }
        }
        return;
    }
    if (p0.ring != 0) {  // context parallelism's ring: a block moves by `ring` places
        const i64 rows = p0.in_n[0] / p0.in_cols;
        for (const CollPart& dst : c.parts) {
            const int from = c.kind == sim::CollKind::all_gather ? (dst.group_rank - p0.ring % n + n) % n : (dst.group_rank + p0.ring) % n;
            const CollPart& src = c.parts[static_cast<std::size_t>(from)];
            for (i64 r = 0; r < rows; ++r) {
                if (c.kind == sim::CollKind::all_gather) {
                    const float* a = src.in[0] + r * src.in_cols + (src.in_cols - dst.out_cols);
                    std::memcpy(dst.out[0] + r * dst.out_cols, a, static_cast<std::size_t>(dst.out_cols) * sizeof(float));
                } else {
                    float* o = dst.out[0] + r * dst.out_cols;
                    const float* a = src.in[0] + r * src.in_cols;
                    for (i64 k = 0; k < dst.out_cols; ++k) o[k] = (dst.accumulate ? o[k] : 0.0f) + a[k];
                }
            }
        }
        return;
    }
    switch (c.kind) {
        case sim::CollKind::all_reduce: {
            STRATA_ASSERT(p0.in.size() == p0.out.size(), "all_reduce: inputs and outputs differ");
            for (std::size_t k = 0; k < p0.in.size(); ++k) {
                const i64 len = p0.in_n[k];
                std::vector<float> sum(static_cast<std::size_t>(len), 0.0f);
                for (const CollPart& p : c.parts) {
                    STRATA_ASSERT(p.in_n[k] == len, "all_reduce: sizes differ");
                    for (i64 i = 0; i < len; ++i) sum[static_cast<std::size_t>(i)] += p.in[k][i];
                }
                for (const CollPart& p : c.parts) std::memmove(p.out[k], sum.data(), static_cast<std::size_t>(len) * sizeof(float));
            }
            break;
        }
        case sim::CollKind::all_gather: {
            for (std::size_t k = 0; k < p0.in.size(); ++k) {
                if (p0.ranges) {  // each member's slice of the range, to everyone
                    const i64 len = p0.from_slice ? p0.out_n[k] : p0.in_n[k];
                    for (const CollPart& src : c.parts) {
                        const auto [lo, hi] = slice(len, src.group_rank, n);
                        STRATA_ASSERT(!src.from_slice || src.in_n[k] == hi - lo, "all_gather: the slice's size is not the member's share");
                        const float* from = src.from_slice ? src.in[k] : src.in[k] + lo;
                        for (const CollPart& dst : c.parts)
                            if ((&dst != &src || src.from_slice) && !dst.keep_out) std::memcpy(dst.out[k] + lo, from, static_cast<std::size_t>(hi - lo) * sizeof(float));
                    }
                } else {  // row blocks in group order
                    const i64 len = p0.in_n[k];
                    for (const CollPart& dst : c.parts) {
                        STRATA_ASSERT(dst.out_n[k] == len * n, "all_gather: output is not members x input");
                        for (const CollPart& src : c.parts)
                            if (len > 0) std::memcpy(dst.out[k] + len * src.group_rank, src.in[k], static_cast<std::size_t>(len) * sizeof(float));
                    }
                }
            }
            break;
        }
        case sim::CollKind::reduce_scatter: {
            for (std::size_t k = 0; k < p0.in.size(); ++k) {
                const i64 len = p0.in_n[k];
                std::vector<float> sum(static_cast<std::size_t>(len), 0.0f);
                for (const CollPart& p : c.parts)
                    for (i64 i = 0; i < len; ++i) sum[static_cast<std::size_t>(i)] += p.in[k][i];
                for (const CollPart& p : c.parts) {
                    const auto [lo, hi] = slice(len, p.group_rank, n);
                    if (p.into_slice) {
                        STRATA_ASSERT(p.out_n[k] == hi - lo, "reduce_scatter: the slice's size is not the member's share");
                        for (i64 i = lo; i < hi; ++i) p.out[k][i - lo] += sum[static_cast<std::size_t>(i)];
                    } else if (p.ranges) {
                        if (p.zero_rest) {
                            std::fill(p.out[k], p.out[k] + lo, 0.0f);
                            std::fill(p.out[k] + hi, p.out[k] + len, 0.0f);
                        }
                        std::memcpy(p.out[k] + lo, sum.data() + lo, static_cast<std::size_t>(hi - lo) * sizeof(float));
                    } else {
                        STRATA_ASSERT(p.out_n[k] * n == len, "reduce_scatter: output is not input / members");
                        std::memcpy(p.out[k], sum.data() + lo, static_cast<std::size_t>(hi - lo) * sizeof(float));
                    }
                }
            }
            break;
        }
        case sim::CollKind::all_to_all: {
            const i64 L = p0.local_experts;
            const std::size_t tensors = p0.in.size();
            for (const CollPart& dst : c.parts) {
                STRATA_ASSERT(dst.received != nullptr, "all_to_all: a member has nowhere to receive");
                A2aReceived& r = *dst.received;
                const auto d = static_cast<std::size_t>(dst.group_rank);
                r.rows = 0;
                for (const CollPart& src : c.parts) r.rows += src.send_rows[d];
                r.data.assign(tensors, {});
                for (std::size_t q = 0; q < tensors; ++q) r.data[q].assign(static_cast<std::size_t>(r.rows * p0.row_cols[q]), 0.0f);
                r.counts.assign(static_cast<std::size_t>(n * L), 0);
                r.from_rows.assign(static_cast<std::size_t>(n), 0);
                i64 at = 0;
                for (const CollPart& src : c.parts) {
                    STRATA_ASSERT(static_cast<int>(src.send_rows.size()) == n && src.row_cols == p0.row_cols, "all_to_all: members disagree on the split");
                    i64 from = 0;
                    for (std::size_t k = 0; k < d && !src.broadcast; ++k) from += src.send_rows[k];
                    const i64 rows = src.send_rows[d];
                    for (std::size_t q = 0; q < tensors; ++q) {
                        const i64 C = p0.row_cols[q];
                        if (rows > 0)  // a member sending none may hold an empty (null) tensor
                            std::memcpy(r.data[q].data() + at * C, src.in[q] + from * C, static_cast<std::size_t>(rows * C) * sizeof(float));
                    }
                    at += rows;
                    r.from_rows[static_cast<std::size_t>(src.group_rank)] = rows;
                    for (i64 j = 0; j < L; ++j)
                        r.counts[static_cast<std::size_t>(src.group_rank * L + j)] = src.send_counts[static_cast<std::size_t>(static_cast<i64>(d) * L + j)];
                }
            }
            break;
        }
        default: STRATA_ASSERT(false, std::string("transport: ") + sim::to_string(c.kind) + " is not implemented");
    }
}

bool Transport::collective(Key key, sim::CollKind kind, int members, CollPart part) {
    Coll* ready = nullptr;
    {
        std::lock_guard<std::mutex> lk(mu_);
        Coll& c = colls_[key];
        c.kind = kind;
        c.members = members;
        c.parts.push_back(std::move(part));
        STRATA_ASSERT(static_cast<int>(c.parts.size()) <= members, "transport: more members than the group holds");
        if (static_cast<int>(c.parts.size()) < members) return false;
        ready = &c;  // map nodes are stable; no other member touches it until done
    }
    perform(*ready);
    std::vector<Waker*> wake;
    {
        std::lock_guard<std::mutex> lk(mu_);
        ready->done = true;
        ready->at = std::chrono::steady_clock::now();
        ready->consumed = 1;  // the performer
        for (const CollPart& p : ready->parts) wake.push_back(p.waker);
        if (ready->consumed == ready->members) colls_.erase(key);
    }
    for (Waker* w : wake)
        if (w) w->notify();
    return true;
}

bool Transport::collective_done(Key key, std::chrono::steady_clock::time_point* at) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = colls_.find(key);
    STRATA_ASSERT(it != colls_.end(), "transport: no such collective");
    if (!it->second.done) return false;
    if (at) *at = it->second.at;
    if (++it->second.consumed == it->second.members) colls_.erase(it);
    return true;
}

bool Transport::p2p(Key key, bool send, float* data, std::int64_t n, Waker* waker) {
    Waker* other = nullptr;
    {
        std::lock_guard<std::mutex> lk(mu_);
        P2P& q = p2p_[key];
        (send ? q.src : q.dst) = data;
        (send ? q.src_n : q.dst_n) = n;
        q.posted[send ? 0 : 1] = true;
        q.wakers[send ? 0 : 1] = waker;
        if (!q.posted[0] || !q.posted[1]) return false;
        STRATA_ASSERT(q.src_n == q.dst_n, "p2p: send and receive sizes differ");
        if (n > 0) std::memcpy(q.dst, q.src, static_cast<std::size_t>(n) * sizeof(float));
        q.done = true;
        q.at = std::chrono::steady_clock::now();
        q.consumed = 1;
        other = q.wakers[send ? 1 : 0];
    }
    if (other) other->notify();
    return true;
}

bool Transport::p2p_done(Key key, bool send, std::chrono::steady_clock::time_point* at) {
    (void)send;
    std::lock_guard<std::mutex> lk(mu_);
    auto it = p2p_.find(key);
    STRATA_ASSERT(it != p2p_.end(), "transport: no such transfer");
    if (!it->second.done) return false;
    if (at) *at = it->second.at;
    if (++it->second.consumed == 2) p2p_.erase(it);
    return true;
}

void Transport::abort(const std::string& why) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (!aborted_.load()) why_ = why;
        aborted_ = true;
    }
    for (Waker* w : wakers_) w->notify();
}

std::string Transport::why() const {
    auto& self = const_cast<Transport&>(*this);
    std::lock_guard<std::mutex> lk(self.mu_);
    return why_;
}

}  // namespace strata::runtime
