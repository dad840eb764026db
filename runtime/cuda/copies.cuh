// Part of the cuda backend's one translation unit (device_cuda.cu includes it inside its unnamed
// namespace, after the CudaDevice class): its copies, which convert where the two ends' widths
// differ (an fp32 master to bf16 weights; the host's fp32 buffers to and from bf16 ones).
#pragma once

// n elements from b to a on the current lane: a byte copy when both have one width, else a
// conversion on the GPU, through this lane's staging buffer where one end is host memory (the
// host's buffers hold fp32). The staging buffer is reused in the lane's order.
void CudaDevice::move(TV a, TV b, i64 n) {
    if (a.bf16 == b.bf16) {
        CK(cudaMemcpyAsync(a.p, b.p, static_cast<std::size_t>(n) * (a.bf16 ? 2 : 4), cudaMemcpyDefault, stream_));
        return;
    }
    const bool da = on_device(a.p), db = on_device(b.p);
    if (da && db) {
        k_convert<<<blocks_for(n), kThreads, 0, stream_>>>(a, b, n);
        LAUNCHED();
        return;
    }
    float*& st = staging_[lane_];
    if (!st) {
        if (cudaMalloc(&st, kStagingFloats * sizeof(float)) != cudaSuccess) {
            cudaGetLastError();
            drop_cache();
            CK(cudaMalloc(&st, kStagingFloats * sizeof(float)));
        }
        reserved_ += static_cast<double>(kStagingFloats * sizeof(float));
        reserved_peak_ = std::max(reserved_peak_, reserved_);
    }
    for (i64 at = 0; at < n; at += kStagingFloats) {
        const i64 k = std::min<i64>(kStagingFloats, n - at);
        if (da) {  // host fp32 -> device bf16
            CK(cudaMemcpyAsync(st, static_cast<const float*>(b.p) + at, static_cast<std::size_t>(k) * sizeof(float), cudaMemcpyDefault,
                               stream_));
            k_convert<<<blocks_for(k), kThreads, 0, stream_>>>(a + at, TV{st, 0}, k);
            LAUNCHED();
        } else {  // device bf16 -> host fp32
            k_convert<<<blocks_for(k), kThreads, 0, stream_>>>(TV{st, 0}, b + at, k);
            LAUNCHED();
            CK(cudaMemcpyAsync(static_cast<float*>(a.p) + at, st, static_cast<std::size_t>(k) * sizeof(float), cudaMemcpyDefault,
                               stream_));
        }
    }
}
