// Part of the cuda backend's one translation unit (device_cuda.cu includes it inside its unnamed
// namespace, after the CudaDevice class): its norms, defined out of the class. One block per row
// (kernels.cuh); the row map makes QK-norm's heads rows of their own inside the fused QKV rows.
#pragma once

void CudaDevice::norm_rows(float* y, const float* x, const float* w, const float* b, i64 T, i64 C, RowMap map) {
    if (T == 0) return;
    const std::size_t smem = static_cast<std::size_t>(C) * sizeof(float);  // the row
    smem_opt_in(reinterpret_cast<const void*>(k_norm_fwd), smem);
    k_norm_fwd<<<static_cast<unsigned>(T), kThreads, smem, lanes_[lane_compute]>>>(tv(y), tv(x), tv(w), tv(b), C, map);
    LAUNCHED();
}
void CudaDevice::norm_rows_backward(float* dx, float* dw, float* db, const float* x, const float* dy, const float* w,
                                    const float* residual, bool layernorm, i64 T, i64 C, RowMap map) {
    if (T == 0) return;
    const TV stats{scratch(2 * T), 0};
    const std::size_t smem = 2 * static_cast<std::size_t>(C) * sizeof(float);  // the rows of x and dy w
    smem_opt_in(reinterpret_cast<const void*>(k_norm_bwd_dx), smem);
    k_norm_bwd_dx<<<static_cast<unsigned>(T), kThreads, smem, lanes_[lane_compute]>>>(tv(dx), stats, tv(x), tv(dy), tv(w), tv(residual),
                                                                                        layernorm, C, map);
    LAUNCHED();
    k_norm_bwd_dw<<<col_grid(T, C), dim3(32, kColLanes), 0, lanes_[lane_compute]>>>(tv(dw), tv(db), tv(x), tv(dy), stats, T, C, map);
    LAUNCHED();
}
// QK-norm: V's columns pass through (copied first), then Q's heads and K's heads are normed in
// place in the copy.
void CudaDevice::qk_norm_forward(float* y, const float* x, const float* wq, const float* bq, const float* wk, const float* bk, i64 T,
                                 i64 W, i64 hq, i64 hkv, i64 hd) {
    launch1(k_convert, T * W, tv(y), tv(x), T * W);
    norm_rows(y, x, wq, bq, T * hq, hd, RowMap{hq, W, 0});
    norm_rows(y, x, wk, bk, T * hkv, hd, RowMap{hkv, W, hq * hd});
}
void CudaDevice::qk_norm_backward(float* dx, float* dwq, float* dbq, float* dwk, float* dbk, const float* x, const float* dy,
                                  const float* wq, const float* wk, bool layernorm, i64 T, i64 W, i64 hq, i64 hkv, i64 hd) {
    launch1(k_convert, T * W, tv(dx), tv(dy), T * W);
    norm_rows_backward(dx, dwq, dbq, x, dy, wq, nullptr, layernorm, T * hq, hd, RowMap{hq, W, 0});
    norm_rows_backward(dx, dwk, dbk, x, dy, wk, nullptr, layernorm, T * hkv, hd, RowMap{hkv, W, hq * hd});
}
