// Part of the cuda backend's one translation unit (device_cuda.cu includes it inside its unnamed
// namespace, after the CudaDevice class): multi-head latent attention's RoPE and column copies,
// defined out of the class (their kernels: mla_kernels.cuh).
#pragma once

void CudaDevice::copy_columns(float* dst, i64 dst_stride, const float* src, i64 src_stride, i64 cols, i64 rows) {
    launch1(k_copy_columns, rows * cols, tv(dst), dst_stride, tv(src), src_stride, cols, rows * cols);
}

void CudaDevice::mla_rope_forward(float* qkv, const float* q, const float* kv, const float* k_rope, i64 T, const cpu::Positions& where,
                                  i64 heads, i64 nope, i64 rope, i64 dv) {
    launch1(k_mla_rope_fwd, T * heads * (2 * (nope + rope) + dv), tv(qkv), tv(q), tv(kv), tv(k_rope), T, where, heads, nope, rope, dv);
}

void CudaDevice::mla_rope_backward(float* dq, float* dkv, float* dk_rope, const float* dqkv, i64 T, const cpu::Positions& where, i64 heads,
                                   i64 nope, i64 rope, i64 dv) {
    launch1(k_mla_rope_bwd, T * heads * (2 * nope + rope + dv), tv(dq), tv(dkv), tv(dqkv), T, where, heads, nope, rope, dv);
    launch1(k_mla_rope_bwd_key, T * rope, tv(dk_rope), tv(dqkv), T, where, heads, nope, rope, dv);
}
