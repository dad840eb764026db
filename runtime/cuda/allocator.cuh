// Part of the cuda backend's one translation unit (device_cuda.cu includes it inside its unnamed
// namespace, after the CudaDevice class): the caching allocator's blocks. A freed block waits in a
// list of its size; the lane that takes it next first waits for what last touched it elsewhere.
#pragma once

void* CudaDevice::alloc_block(std::size_t bytes) {
    void* p = nullptr;
    auto& list = cache_[bytes];
    if (!list.empty()) {
        FreeBlock b = list.back();
        list.pop_back();
        p = b.p;
        // What touched the block on another lane finishes before this lane writes it.
        for (int l = 0; l < lane_count; ++l) {
            if (!b.fence[l]) continue;
            if (l != lane_) CK(cudaStreamWaitEvent(stream_, b.fence[l], 0));
            spare_.push_back(b.fence[l]);
        }
    } else {
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
            cudaGetLastError();
            drop_cache();
            if (cudaMalloc(&p, bytes) != cudaSuccess) {
                cudaGetLastError();
                return nullptr;
            }
        }
        reserved_ += static_cast<double>(bytes);
        reserved_peak_ = std::max(reserved_peak_, reserved_);
    }
    live_[static_cast<char*>(p)] = Use{bytes, {}};
    CK(cudaMemsetAsync(p, 0, bytes, stream_));
    return p;
}
void CudaDevice::release_block(void* p, std::size_t bytes) {
    FreeBlock b{p, {}};
    if (auto it = live_.find(reinterpret_cast<char*>(p)); it != live_.end()) {
        for (int l = 0; l < lane_count; ++l) b.fence[l] = it->second.last[l];
        live_.erase(it);
    }
    // Kernels do not say what they touch: everything the compute lane was given so far.
    if (!b.fence[lane_compute]) b.fence[lane_compute] = event();
    CK(cudaEventRecord(b.fence[lane_compute], lanes_[lane_compute]));
    cache_[bytes].push_back(b);
}
