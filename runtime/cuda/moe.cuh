// Part of the cuda backend's one translation unit (device_cuda.cu includes it inside its unnamed
// namespace, after the CudaDevice class): the mixture-of-experts calls of one rank, on the compute
// lane (moe_kernels.cuh has the kernels). The grouped GEMMs need no call of their own: the
// executor runs each expert's rows through the dense GEMMs at their offsets.
#pragma once

void CudaDevice::moe_set_order(const i64* pos, i64 n) {
    void* dev = grow(order_, order_bytes_, 2 * std::max<i64>(n, 1));  // i64: two floats' room each
    // From pageable memory: returns once the host's array has been read (CUDA's rule for such copies).
    if (n > 0) CK(cudaMemcpyAsync(dev, pos, static_cast<std::size_t>(n) * sizeof(i64), cudaMemcpyHostToDevice, lanes_[lane_compute]));
}
void CudaDevice::moe_route(float* routing, const float* logits, i64 T, i64 E, i64 k, i64 groups, i64 group_topk) {
    if (T == 0) return;
    if (k > kMaxTopK) throw std::runtime_error("cuda: moe_route: top-k above " + std::to_string(kMaxTopK));
    if (groups > kMaxGroups) throw std::runtime_error("cuda: moe_route: more than " + std::to_string(kMaxGroups) + " expert groups");
    k_moe_route<<<static_cast<unsigned>(T), kRouteThreads, 0, lanes_[lane_compute]>>>(tv(routing), tv(logits), E, k, groups, group_topk);
    LAUNCHED();
}
void CudaDevice::moe_route_backward(float* dlogits, const float* routing, const float* dprobs, i64 T, i64 E, i64 k) {
    if (T == 0) return;
    k_moe_route_bwd<<<static_cast<unsigned>(T), kThreads, 0, lanes_[lane_compute]>>>(tv(dlogits), tv(routing), tv(dprobs), E, k);
    LAUNCHED();
}
void CudaDevice::moe_permute(float* xp, const float* x, i64 T, i64 k, i64 C) {
    launch1(k_moe_permute, T * k * C, tv(xp), tv(x), static_cast<const i64*>(order_), T, k, C);
}
void CudaDevice::moe_permute_backward(float* dx, const float* dxp, i64 T, i64 k, i64 C) {
    launch1(k_moe_permute_bwd, T * C, tv(dx), tv(dxp), static_cast<const i64*>(order_), T, k, C);
}
void CudaDevice::moe_unpermute(float* y, const float* ye, const float* routing, i64 T, i64 k, i64 C) {
    launch1(k_moe_unpermute, T * C, tv(y), tv(ye), tv(routing), static_cast<const i64*>(order_), T, k, C);
}
void CudaDevice::moe_unpermute_backward(float* dye, float* dprobs, const float* dy, const float* ye, const float* routing, i64 T,
                                        i64 k, i64 C) {
    const auto* pos = static_cast<const i64*>(order_);
    launch1(k_moe_unpermute_bwd_rows, T * k * C, tv(dye), tv(dy), tv(routing), pos, T, k, C);
    if (dprobs && T > 0) {
        k_moe_unpermute_bwd_probs<<<static_cast<unsigned>(T * k), kThreads, 0, lanes_[lane_compute]>>>(tv(dprobs), tv(dy), tv(ye), pos,
                                                                                                        k, C);
        LAUNCHED();
    }
}
void CudaDevice::moe_permute_probs(float* pr, const float* routing, i64 T, i64 k) {
    launch1(k_moe_probs, T * k, tv(pr), tv(routing), static_cast<const i64*>(order_), T, k);
}
void CudaDevice::moe_permute_probs_backward(float* dp, const float* dr, i64 T, i64 k) {
    launch1(k_moe_probs_bwd, T * k, tv(dp), tv(dr), static_cast<const i64*>(order_), T, k);
}
void CudaDevice::scale_rows(float* y, const float* x, const float* w, i64 rows, i64 C) {
    launch1(k_scale_rows, rows * C, tv(y), tv(x), tv(w), rows, C);
}
void CudaDevice::row_dot(float* out, const float* a, const float* b, i64 rows, i64 C) {
    if (rows == 0) return;
    k_row_dot<<<static_cast<unsigned>(rows), kThreads, 0, lanes_[lane_compute]>>>(tv(out), tv(a), tv(b), C);
    LAUNCHED();
}
