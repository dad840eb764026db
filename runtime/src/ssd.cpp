// The ssd tier: one file per rank, read and written the way ZeRO-Infinity's swapper does it
// (O_DIRECT, 1 MiB requests, 8 in flight): Adam's state a slot per range, and the weights' region
// when the plan homes them there (docs/runtime.md, "The ssd tier", "Parameters on the SSD").
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <thread>
#include <unistd.h>

#include "rank.hpp"
#include "strata/common/error.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::runtime {

using namespace sim;

bool full_pio(int fd, void* buf, std::size_t bytes, std::int64_t at, bool read) {
    auto* p = static_cast<char*>(buf);
    while (bytes > 0) {
        const ssize_t got = read ? ::pread(fd, p, bytes, static_cast<off_t>(at)) : ::pwrite(fd, p, bytes, static_cast<off_t>(at));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        at += got;
        bytes -= static_cast<std::size_t>(got);
    }
    return true;
}

// The ssd tier: one file per rank holding Adam's moments (m, v) of each range it swaps, a page-
// aligned slot each (precompute), sparse until written; its size is charged to the node's ssd pool.
// Opened with O_DIRECT, as ZeRO-Infinity's swapper does: the page cache neither hides the device
// nor holds a second copy of the state in host memory.
int RankState::ssd_fd() {
    if (ssd_fd_ >= 0) return ssd_fd_;
    ssd_path_ = w_.ssd_dir + "/rank-" + std::to_string(rank_) + ".optimizer-state";
    ssd_direct_ = true;
    ssd_fd_ = ::open(ssd_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (ssd_fd_ < 0 && errno == EINVAL) {  // tmpfs and some overlay filesystems refuse O_DIRECT
        ssd_direct_ = false;
        ssd_fd_ = ::open(ssd_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    }
    if (ssd_fd_ < 0) throw RuntimeError("cannot create the ssd tier's file " + ssd_path_ + ": " + std::strerror(errno));
    if (::ftruncate(ssd_fd_, ssd_bytes_) != 0) throw RuntimeError("cannot size the ssd tier's file " + ssd_path_);
    Pool* pool = pool_of(Tier::ssd);
    const double now = pool->used.fetch_add(static_cast<double>(ssd_bytes_)) + static_cast<double>(ssd_bytes_);
    if (pool->capacity > 0 && now > pool->capacity)
        throw OutOfMemory("rank " + std::to_string(rank_) + " tier ssd: the optimizer state file needs " + std::to_string(ssd_bytes_) +
                          " bytes more than the node's capacity");
    double cur = pool->peak.load();
    while (now > cur && !pool->peak.compare_exchange_weak(cur, now)) {
    }
    return ssd_fd_;
}

// The whole file through the page cache (a checkpoint's copy of it): the kernel writes back or
// drops the cached pages around the O_DIRECT transfers, so both views agree.
bool RankState::ssd_whole_file(std::vector<char>& buf, bool read) const {
    const int fd = ::open(ssd_path_.c_str(), O_RDWR);
    if (fd < 0) return false;
    const bool ok = full_pio(fd, buf.data(), buf.size(), 0, read) && (read || ::fdatasync(fd) == 0);
    ::close(fd);
    return ok;
}

// DeepSpeed's aio defaults (block_size 1 MiB, queue_depth 8): 1 MiB requests, 8 in flight, each
// of 8 threads taking every 8th block. One large request per thread is slower on a virtual disk
// (351 MB/s for 84 MiB writes where 16 MiB ones reached 680 MB/s on this project's VM), and the
// profiler times the same shape (host_bench.cpp bench_ssd, 1 MiB at queue depth 8).
bool ssd_io(int fd, char* host, std::size_t bytes, i64 at, bool read) {
    constexpr std::size_t kBlock = std::size_t{1} << 20;
    constexpr std::size_t kQueueDepth = 8;
    const std::size_t blocks = (bytes + kBlock - 1) / kBlock, threads = std::min(kQueueDepth, blocks);
    std::atomic<bool> ok{true};
    auto run = [&](std::size_t t) {
        for (std::size_t b = t; b < blocks && ok; b += threads) {
            const std::size_t off = b * kBlock, len = std::min(kBlock, bytes - off);
            if (!full_pio(fd, host + off, len, at + static_cast<i64>(off), read)) ok = false;
        }
    };
    if (threads <= 1) {
        run(0);
        return ok;
    }
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(run, t);
    run(0);
    for (auto& th : pool) th.join();
    return ok;
}

i64 RankState::ssd_slot(const DataTensor& t) const {
    auto it = ssd_slot_.find({t.offset, t.elements()});
    STRATA_ASSERT(it != ssd_slot_.end(), "runtime: a range of optimizer state with no slot in the ssd file");
    return it->second;
}

// The weights' region of the ssd file (plan.offload.params = ssd): bf16 or fp16, 2 B an element, packed in
// the order of the host ranges (host_index). O_DIRECT moves whole pages, so each chunk goes
// through a page-aligned buffer of its own; a write first reads the partial pages at its two ends,
// which neighbouring ranges share. The rank's ssd stream issues these one at a time, and the first
// update's master read happens between its writes, so no two touch a page at once.
void RankState::param_file_io(i64 offset, i64 n, float* host, bool read) const {
    STRATA_ASSERT(ssd_fd_ >= 0 && params_on_ssd_, "runtime: the weights' region of the ssd file is not open");
    const i64 page = static_cast<i64>(kSsdAlign), chunk = i64{16} << 20;  // 16 MiB: 8 requests of 1 MiB in flight, twice
    const i64 first = params_ssd_at_ + 2 * host_index(offset, n), last = first + 2 * n;
    const i64 lo = first / page * page, hi = (last + page - 1) / page * page;
    const bool fp16 = w_.plan.precision == Precision::fp16;  // else bf16 (dataflow_unsupported)
    std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(std::aligned_alloc(kSsdAlign, static_cast<std::size_t>(std::min(chunk, hi - lo)))),
                                                    &std::free);
    if (!buf) throw RuntimeError("runtime: no host memory for the ssd file's staging of the weights");
    for (i64 c = lo; c < hi; c += chunk) {
        const i64 end = std::min(hi, c + chunk), a = std::max(first, c), b = std::min(last, end);
        char* base = buf.get();
        if (read) {
            if (!ssd_io(ssd_fd_, base, static_cast<std::size_t>(end - c), c, true))
                throw RuntimeError("the ssd file read of the weights failed: " + ssd_path_);
        } else {
            // A partial page at either end keeps the bytes around the range.
            if (a > c && !full_pio(ssd_fd_, base, kSsdAlign, c, true)) throw RuntimeError("the ssd file read failed: " + ssd_path_);
            if (b < end && (end - page > c || a == c) && !full_pio(ssd_fd_, base + (end - page - c), kSsdAlign, end - page, true))
                throw RuntimeError("the ssd file read failed: " + ssd_path_);
        }
        auto* half = reinterpret_cast<std::uint16_t*>(base + (a - c));
        float* h = host + (a - first) / 2;
        const i64 count = (b - a) / 2;
        for (i64 k = 0; k < count; ++k) {
            std::uint32_t bits = 0;
            if (fp16 && read) {
                h[k] = cpu::from_fp16_bits(half[k]);
            } else if (fp16) {
                half[k] = cpu::fp16_bits(h[k]);
            } else if (read) {
                bits = static_cast<std::uint32_t>(half[k]) << 16;
                std::memcpy(h + k, &bits, 4);
            } else {
                std::memcpy(&bits, h + k, 4);
                bits += 0x7FFFu + ((bits >> 16) & 1u);  // to nearest, ties to even (a no-op on bf16 values)
                half[k] = static_cast<std::uint16_t>(bits >> 16);
            }
        }
        if (!read && !ssd_io(ssd_fd_, base, static_cast<std::size_t>(end - c), c, false))
            throw RuntimeError("the ssd file write of the weights failed: " + ssd_path_);
    }
}

void RankState::write_ssd_floats(i64 at, const float* src, i64 n) const {
    STRATA_ASSERT(ssd_fd_ >= 0 && at % static_cast<i64>(kSsdAlign) == 0, "runtime: an unaligned write to the ssd file");
    const std::size_t chunk = std::size_t{16} << 20, bytes = static_cast<std::size_t>(n) * sizeof(float);
    std::unique_ptr<char, decltype(&std::free)> buf(static_cast<char*>(std::aligned_alloc(kSsdAlign, chunk)), &std::free);
    if (!buf) throw RuntimeError("runtime: no host memory to write the ssd file");
    for (std::size_t c = 0; c < bytes; c += chunk) {
        const std::size_t len = std::min(chunk, bytes - c), padded = (len + kSsdAlign - 1) / kSsdAlign * kSsdAlign;
        std::memcpy(buf.get(), reinterpret_cast<const char*>(src) + c, len);
        std::memset(buf.get() + len, 0, padded - len);
        if (!ssd_io(ssd_fd_, buf.get(), padded, at + static_cast<i64>(c), false)) throw RuntimeError("the ssd file write failed: " + ssd_path_);
    }
}

}  // namespace strata::runtime
