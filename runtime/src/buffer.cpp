// Buffers charged to a memory pool while they live (TrackedBuffer), and the cache of host buffers
// they come from: page-aligned, whole pages, kept for the next request of the same size.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "rank.hpp"

namespace strata::runtime {

namespace {
std::string gib(double b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f MiB", b / (1 << 20));
    return buf;
}
void atomic_max(std::atomic<double>& a, double v) {
    double cur = a.load();
    while (v > cur && !a.compare_exchange_weak(cur, v)) {
    }
}
}  // namespace

namespace {
float g_unbacked[1];  // what an unbacked buffer's data() points at (never read or written)

// Host memory on whole 4 KiB pages, zero-filled: the ssd tier's O_DIRECT reads and writes move
// whole pages into and out of these buffers (as DeepSpeed's aligned swap buffers). Pinned when
// there is a device. nullptr if refused.
float* alloc_host_pages(Device* dev, std::size_t bytes) {
    float* p = dev ? dev->alloc_host(static_cast<i64>(bytes / sizeof(float)))  // pinned: page-aligned
                   : static_cast<float*>(std::aligned_alloc(kSsdAlign, std::max<std::size_t>(bytes, kSsdAlign)));
    if (p) std::memset(p, 0, bytes);
    return p;
}
void free_host_pages(Device* dev, float* p) {
    if (dev) dev->release_host(p);
    else std::free(p);
}
}  // namespace

float* HostCache::take(std::size_t bytes, bool zero) {
    float* p = nullptr;
    {
        std::lock_guard<std::mutex> lk(mu_);
        auto it = free_.find(bytes);
        if (it != free_.end()) {
            p = it->second;
            free_.erase(it);
        }
    }
    if (p == nullptr) return alloc_host_pages(dev_, bytes);  // touched here, not in the first copy
    if (dev_) dev_->host_settle(p);  // a copy given before it was given back may still run
    if (zero) std::memset(p, 0, bytes);
    return p;
}

void HostCache::give(float* p, std::size_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    free_.emplace(bytes, p);
}

void HostCache::clear() {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& [bytes, p] : free_) free_host_pages(dev_, p);
    free_.clear();
}

TrackedBuffer::TrackedBuffer(i64 n, Pool* pool, const std::string& what, Device* dev, bool on_device, bool backed, HostCache* cache,
                             bool zero, double elem_bytes, Storage half)
    : n_(n), charged_bytes_(static_cast<double>(n) * elem_bytes), pool_(pool), dev_(dev), on_device_(on_device && dev != nullptr),
      backed_(backed), cache_(on_device_ ? nullptr : cache) {
    const double bytes = charged_bytes_;
    if (pool_) {
        const double now = pool_->used.fetch_add(bytes) + bytes;
        if (pool_->capacity > 0 && now > pool_->capacity) {
            pool_->used.fetch_sub(bytes);
            pool_ = nullptr;
            throw OutOfMemory(what + ": " + gib(bytes) + " more would make " + gib(now) + " of " + gib(pool->capacity));
        }
        atomic_max(pool_->peak, now);
    }
    if (!backed_) {
        data_ = g_unbacked;
        return;
    }
    try {
        if (on_device_) data_ = dev_->alloc(n, elem_bytes == 2.0 ? half : Storage::fp32);
        else if (cache_) data_ = cache_->take(ssd_padded_bytes(n), zero);
        else data_ = alloc_host_pages(dev_, ssd_padded_bytes(n));
    } catch (const std::bad_alloc&) {
        data_ = nullptr;
    }
    if (data_ == nullptr) {
        if (pool_) pool_->used.fetch_sub(bytes);
        pool_ = nullptr;
        n_ = 0;
        throw OutOfMemory(what + ": the " + std::string(dev_ && on_device_ ? "device's" : "host's") + " allocator refused " + gib(bytes));
    }
}

void TrackedBuffer::release() {
    if (pool_) pool_->used.fetch_sub(charged_bytes_);
    if (data_ && backed_) {
        if (on_device_) dev_->release(data_, n_);
        else if (cache_) cache_->give(data_, ssd_padded_bytes(n_));
        else free_host_pages(dev_, data_);
    }
    data_ = nullptr;
    pool_ = nullptr;
    n_ = 0;
}

TrackedBuffer::~TrackedBuffer() { release(); }

TrackedBuffer& TrackedBuffer::operator=(TrackedBuffer&& o) noexcept {
    if (this != &o) {
        release();
        data_ = o.data_;
        n_ = o.n_;
        charged_bytes_ = o.charged_bytes_;
        pool_ = o.pool_;
        dev_ = o.dev_;
        on_device_ = o.on_device_;
        backed_ = o.backed_;
        cache_ = o.cache_;
        o.data_ = nullptr;
        o.n_ = 0;
        o.pool_ = nullptr;
    }
    return *this;
}

// Staging (rank.hpp): a device operand of a collective or transfer of several ranks, copied to
// the host; the same range twice is one copy.
float* RankState::stage(std::size_t i, float* dev, i64 n, bool fill, bool back) {
    Staging& st = staged_[i];
    const auto* lo = dev;
    for (std::size_t j = 0; j < st.dev.size(); ++j) {
        if (st.dev[j] == dev && st.n[j] == n) {  // an in-place operand: one host copy
            st.back[j] = st.back[j] || back;
            return st.host[j].data();
        }
        if (lo < st.dev[j] + st.n[j] && st.dev[j] < lo + n) fail(i, "staged operands overlap without being the same");
    }
    st.host.emplace_back(static_cast<std::size_t>(n));
    st.dev.push_back(dev);
    st.n.push_back(n);
    st.back.push_back(back);
    if (fill && n > 0) dev_->copy(st.host.back().data(), dev, n);
    return st.host.back().data();
}

void RankState::unstage(std::size_t i) {
    auto it = staged_.find(i);
    if (it == staged_.end()) return;
    Staging& st = it->second;
    for (std::size_t j = 0; j < st.dev.size(); ++j)
        if (st.back[j] && st.n[j] > 0) dev_->copy(st.dev[j], st.host[j].data(), st.n[j]);
    staged_.erase(it);
}

}  // namespace strata::runtime
