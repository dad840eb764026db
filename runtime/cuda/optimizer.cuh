// Part of the cuda backend's one translation unit (device_cuda.cu includes it inside its unnamed
// namespace, after the CudaDevice class): AdamW on the compute lane, each buffer read and written
// in its own width (an fp32 master, or bf16 weights and moments under pure 16-bit training).
#pragma once

void CudaDevice::adamw(float* p, float* m, float* v, const float* g, const unsigned char* decay, i64 n, float lr, float b1, float b2,
                       float eps, float wd, int step) {
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(step)), c2 = 1.0f - std::pow(b2, static_cast<float>(step));
    launch1(k_adamw, n, tv(p), tv(m), tv(v), tv(g), decay, n, lr, b1, b2, eps, wd, c1, c2);
}
void CudaDevice::adamw_ranges(float* p, float* m, float* v, const float* g, float* weights, const std::vector<i64>& begin,
                              const std::vector<i64>& len, const std::vector<float>& wd, float lr, float b1, float b2, float eps,
                              int step) {
    if (begin.size() != len.size() || begin.size() != wd.size()) throw std::runtime_error("cuda: adamw_ranges: tables of different lengths");
    std::vector<AdamChunk> chunks;
    for (std::size_t r = 0; r < begin.size(); ++r)
        for (i64 at = 0; at < len[r]; at += kAdamChunk)
            chunks.push_back({begin[r] + at, static_cast<int>(std::min<i64>(kAdamChunk, len[r] - at)), wd[r]});
    if (chunks.empty()) return;
    // The same parameters are updated every step: the table is uploaded once.
    auto& cached = adam_tables_[p];
    const std::size_t bytes = chunks.size() * sizeof(AdamChunk);
    if (cached.host.size() != chunks.size() ||
        std::memcmp(cached.host.data(), chunks.data(), bytes) != 0) {
        if (cached.dev) cudaFree(cached.dev);
        cached.dev = nullptr;
        CK(cudaMalloc(&cached.dev, bytes));
        CK(cudaMemcpy(cached.dev, chunks.data(), bytes, cudaMemcpyHostToDevice));
        cached.host = std::move(chunks);
    }
    const float c1 = 1.0f - std::pow(b1, static_cast<float>(step)), c2 = 1.0f - std::pow(b2, static_cast<float>(step));
    k_adamw_chunks<<<static_cast<unsigned>(cached.host.size()), kThreads, 0, lanes_[lane_compute]>>>(
        tv(p), tv(m), tv(v), tv(g), tv(weights), static_cast<const AdamChunk*>(cached.dev), lr, b1, b2, eps, c1, c2);
    LAUNCHED();
}
