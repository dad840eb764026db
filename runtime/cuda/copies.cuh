// Part of the cuda backend's one translation unit (device_cuda.cu includes it inside its unnamed
// namespace, after the CudaDevice class): its copies, which convert where the two ends' widths
// differ (an fp32 master to bf16 or fp16 weights on the GPU; the host's fp32 buffers to and from
// 2-byte ones, on the host).
#pragma once

// The host's side of a copy between its fp32 buffers and a 2-byte buffer on the GPU, run by the
// lane in its order (cudaLaunchHostFunc; no CUDA call inside): what crosses PCIe is the 2-byte
// values the plan prices, through the lane's pinned staging buffer, and the host widens what
// arrives and narrows what leaves, as DeepSpeed's CPU Adam reads half gradients and writes half
// weights from all of its threads. Round to nearest even, as __float2bfloat16_rn.
struct HostConvert {
    float* wide;
    std::uint16_t* half;
    i64 n;
    bool narrow;  ///< wide -> half; else half -> wide
    int fmt;      ///< 1 bf16, 2 fp16 (cuda_fp16's host conversions, to nearest even)
};
void convert_range(const HostConvert& c, i64 lo, i64 hi) {
    if (c.fmt == 2) {
        for (i64 i = lo; i < hi; ++i) {
            if (c.narrow) {
                const __half_raw r = __float2half_rn(c.wide[i]);
                c.half[i] = r.x;
            } else {
                __half_raw r;
                r.x = c.half[i];
                c.wide[i] = __half2float(__half(r));
            }
        }
        return;
    }
    for (i64 i = lo; i < hi; ++i) {
        std::uint32_t b;
        if (!c.narrow) {
            b = static_cast<std::uint32_t>(c.half[i]) << 16;
            std::memcpy(c.wide + i, &b, 4);
            continue;
        }
        std::memcpy(&b, c.wide + i, 4);
        if ((b & 0x7F800000u) == 0x7F800000u) {  // infinities as they are; a NaN keeps a mantissa bit
            if (b & 0x007FFFFFu) b |= 0x00400000u;
        } else {
            b += 0x7FFFu + ((b >> 16) & 1u);
        }
        c.half[i] = static_cast<std::uint16_t>(b >> 16);
    }
}
void CUDART_CB convert_on_host(void* arg) {
    const HostConvert c = *static_cast<HostConvert*>(arg);
    delete static_cast<HostConvert*>(arg);
    const i64 threads = c.n < (i64{1} << 20) ? 1 : std::max<i64>(1, std::min<i64>(8, std::thread::hardware_concurrency() / 2));
    std::vector<std::thread> pool;
    for (i64 k = 1; k < threads; ++k) pool.emplace_back(convert_range, std::cref(c), c.n * k / threads, c.n * (k + 1) / threads);
    convert_range(c, 0, c.n / threads);
    for (auto& t : pool) t.join();
}

// n elements from b to a on the current lane: a byte copy when both have one width; else, between
// two device buffers, a conversion kernel, and between host and device, the bf16 bytes through
// this lane's pinned staging buffer (reused in the lane's order) with the host widening or
// narrowing them (above; the host's buffers hold fp32).
void CudaDevice::move(TV a, TV b, i64 n) {
    if (a.fmt == b.fmt) {
        CK(cudaMemcpyAsync(a.p, b.p, static_cast<std::size_t>(n) * (a.fmt ? 2 : 4), cudaMemcpyDefault, stream_));
        return;
    }
    const bool da = on_device(a.p), db = on_device(b.p);
    if (da && db) {
        k_convert<<<blocks_for(n), kThreads, 0, stream_>>>(a, b, n);
        LAUNCHED();
        return;
    }
    std::uint16_t*& st = host_staging_[lane_];
    if (!st) CK(cudaHostAlloc(reinterpret_cast<void**>(&st), static_cast<std::size_t>(kStagingFloats) * 2, cudaHostAllocPortable));
    for (i64 at = 0; at < n; at += kStagingFloats) {
        const i64 k = std::min<i64>(kStagingFloats, n - at);
        if (da) {  // host fp32 -> device 2-byte
            CK(cudaLaunchHostFunc(stream_, convert_on_host, new HostConvert{static_cast<float*>(b.p) + at, st, k, true, a.fmt}));
            CK(cudaMemcpyAsync(static_cast<char*>(a.p) + at * 2, st, static_cast<std::size_t>(k) * 2, cudaMemcpyDefault, stream_));
        } else {  // device 2-byte -> host fp32
            CK(cudaMemcpyAsync(st, static_cast<const char*>(b.p) + at * 2, static_cast<std::size_t>(k) * 2, cudaMemcpyDefault, stream_));
            CK(cudaLaunchHostFunc(stream_, convert_on_host, new HostConvert{static_cast<float*>(a.p) + at, st, k, false, b.fmt}));
        }
    }
}

// Pinned host memory, and copies between any two of device and host memory.
float* CudaDevice::alloc_host(i64 n) {
    void* p = nullptr;
    const std::size_t bytes = static_cast<std::size_t>(std::max<i64>(n, 1)) * sizeof(float);
    // Portable: pinned for every GPU of the process, not only the one current here.
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    std::memset(p, 0, bytes);
    pinned_[static_cast<char*>(p)] = Use{bytes, {}};
    return static_cast<float*>(p);
}
void CudaDevice::release_host(float* p) {
    if (!p) return;
    sync();  // no queued copy may still read it
    if (auto it = pinned_.find(reinterpret_cast<char*>(p)); it != pinned_.end()) {
        for (cudaEvent_t e : it->second.last)
            if (e) spare_.push_back(e);
        pinned_.erase(it);
    }
    cudaFreeHost(p);
}
void CudaDevice::copy(float* dst, const float* src, i64 n) {
    if (n <= 0 || dst == src) return;
    const TV a = tv(dst), b = tv(src);
    move(a, b, n);
    if (!on_device(a.p) || !on_device(b.p)) CK(cudaStreamSynchronize(stream_));
}
void CudaDevice::copy_async(float* dst, const float* src, i64 n) {
    if (n <= 0 || dst == src) return;
    const TV a = tv(dst), b = tv(src);
    move(a, b, n);
    // The allocations at both ends remember this copy: their next user on another lane waits for it.
    touched({a.p, b.p});
}
void CudaDevice::host_settle(const float* host) {
    Use* u = use_of(host);
    if (!u) return;
    for (cudaEvent_t& e : u->last)
        if (e) {
            CK(cudaEventSynchronize(e));
            spare_.push_back(e);
            e = nullptr;
        }
}
