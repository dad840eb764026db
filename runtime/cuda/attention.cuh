// Part of the cuda backend's one translation unit (device_cuda.cu includes it inside its unnamed
// namespace, after the CudaDevice class): its attention, forward and backward, defined out of the
// class. bf16 with 64- or 128-wide heads runs the flash kernels (flash.cuh); everything else the
// exact kernels below.
#pragma once

// Causal attention as batched GEMMs over every (sequence, head), in row blocks of queries so
// that keys after a block's last query are never multiplied: with blocks of `rows` queries the
// GEMMs do (n + 1) / 2n of the full seq x seq work (n blocks), near the causal half a flash
// kernel does. Scores live in scratch for `chunk` heads at a time (at most 1 GiB). With bf16
// Q, K and V (a bf16 plan) the per-head copies, the probabilities and the score gradients
// that feed a GEMM are bf16 (tensor cores, fp32 accumulation, as FlashAttention feeds P V);
// scores, the softmax and the accumulated dQ, dK, dV stay fp32.
CudaDevice::AttnPlan CudaDevice::attn_plan(i64 T, i64 seq, i64 hq, i64 bytes_per_score) {
    AttnPlan a;
    a.items = T / seq * hq;
    const i64 per = bytes_per_score * seq * seq;
    a.chunk = std::max<i64>(1, std::min<i64>({a.items, i64{65535}, (i64{1} << 30) / std::max<i64>(per, 1)}));  // grid.y
    a.rows = std::max<i64>(std::min<i64>(seq, 128), (seq + 15) / 16);
    a.blocks = (seq + a.rows - 1) / a.rows;
    return a;
}
// Carves the scratch into buffers of the given widths and lengths, each 256-byte aligned.
std::vector<TV> CudaDevice::carve(const std::vector<std::pair<int, i64>>& parts) {
    std::vector<std::size_t> at;
    std::size_t bytes = 0;
    for (const auto& [fmt, n] : parts) {
        at.push_back(bytes);
        bytes += (static_cast<std::size_t>(n) * (fmt ? 2 : 4) + 255) / 256 * 256;
    }
    char* base = reinterpret_cast<char*>(scratch(static_cast<i64>((bytes + 3) / 4)));
    std::vector<TV> out;
    for (std::size_t k = 0; k < parts.size(); ++k) out.push_back(TV{base + at[k], parts[k].first});
    return out;
}
// bf16 with 64- or 128-wide heads, every operand bf16 with 16-byte-aligned rows: the flash
// kernels (flash.cuh; fp16 takes the exact kernels, in halves); STRATA_RUNTIME_EXACT_ATTENTION=1 keeps the exact ones below (to compare, or
// should a flash kernel misbehave on a new GPU).
bool CudaDevice::flash_for(i64 d, i64 items, std::initializer_list<const float*> operands) const {
    if (!(d == 64 || d == 128) || items > 65535 || exact_attention_) return false;
    for (const float* p : operands) {
        const TV t = tv(p);
        if (t.fmt != 1 || reinterpret_cast<std::uintptr_t>(t.p) % 16 != 0) return false;
    }
    return true;
}
void CudaDevice::flash_forward(float* out, float* lse, const float* qkv, i64 seq, i64 items, i64 hq, i64 hkv, i64 d, float scale,
                               const Dropout& drop, i64 window) {
    const dim3 grid(static_cast<unsigned>((seq + kFlashTile - 1) / kFlashTile), static_cast<unsigned>(items));
    auto* q = static_cast<const bf16*>(tv(qkv).p);
    auto* o = static_cast<bf16*>(tv(out).p);
    if (d == 64) {
        constexpr std::size_t smem = flash_fwd_smem<64>();
        smem_opt_in(reinterpret_cast<const void*>(k_flash_fwd<64>), smem);
        k_flash_fwd<64><<<grid, kFlashThreads, smem, lanes_[lane_compute]>>>(q, o, tv(lse), seq, hq, hkv, scale, drop, window);
    } else {
        constexpr std::size_t smem = flash_fwd_smem<128>();
        smem_opt_in(reinterpret_cast<const void*>(k_flash_fwd<128>), smem);
        k_flash_fwd<128><<<grid, kFlashThreads, smem, lanes_[lane_compute]>>>(q, o, tv(lse), seq, hq, hkv, scale, drop, window);
    }
    LAUNCHED();
}
void CudaDevice::flash_backward(const float* qkv, const float* dout, const float* lse, const float* D, float* dQ, float* dK, float* dV, i64 seq,
                                i64 items, i64 hq, i64 hkv, i64 d, float scale, const Dropout& drop, i64 window) {
    const dim3 grid(static_cast<unsigned>((seq + kFlashTile - 1) / kFlashTile), static_cast<unsigned>(items));
    auto* q = static_cast<const bf16*>(tv(qkv).p);
    auto* o = static_cast<const bf16*>(tv(dout).p);
    if (d == 64) {
        constexpr std::size_t smem = flash_bwd_smem<64>();
        smem_opt_in(reinterpret_cast<const void*>(k_flash_bwd<64>), smem);
        k_flash_bwd<64><<<grid, kFlashThreads, smem, lanes_[lane_compute]>>>(q, o, tv(lse), D, dQ, dK, dV, seq, hq, hkv, scale, drop, window);
    } else {
        constexpr std::size_t smem = flash_bwd_smem<128>();
        smem_opt_in(reinterpret_cast<const void*>(k_flash_bwd<128>), smem);
        k_flash_bwd<128><<<grid, kFlashThreads, smem, lanes_[lane_compute]>>>(q, o, tv(lse), D, dQ, dK, dV, seq, hq, hkv, scale, drop, window);
    }
    LAUNCHED();
}
void CudaDevice::attention_forward(float* out, float* lse, const float* qkv, i64 T, i64 seq, i64 hq, i64 hkv, i64 d, const Dropout& drop,
                                   i64 window) {
    const int h = tv(qkv).fmt;  // 2-byte Q, K, V: the copies feeding a GEMM in their format
    if (flash_for(d, T / seq * hq, {qkv, out})) {
        flash_forward(out, lse, qkv, seq, T / seq * hq, hq, hkv, d, 1.0f / std::sqrt(static_cast<float>(d)), drop, window);
        return;
    }
    const AttnPlan a = attn_plan(T, seq, hq, h ? 6 : 4);
    const i64 n = a.items * seq * d, hs = seq * d, ss = seq * seq;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const auto b = carve({{h, n}, {h, n}, {h, n}, {false, n}, {false, a.chunk * ss}, {h, h ? a.chunk * ss : 0}});
    const TV Q = b[0], K = b[1], V = b[2], O = b[3], S = b[4], P = h ? b[5] : S;
    launch1(k_attn_split, n, Q, K, V, tv(qkv), seq, hq, hkv, d, n);
    for (i64 i0 = 0; i0 < a.items; i0 += a.chunk) {
        const i64 ni = std::min(a.chunk, a.items - i0);
        for (i64 k = 0; k < a.blocks; ++k) {  // S[rows of block k, keys up to its last query]
            const i64 r0 = k * a.rows, m = std::min(a.rows, seq - r0), keys = r0 + m;
            gemm(false, true, m, keys, d, Q + (i0 * hs + r0 * d), d, hs, K + i0 * hs, d, hs, S + r0 * seq, seq, ss, ni, 1.0f, 0.0f);
        }
        k_softmax_causal<<<dim3(static_cast<unsigned>(seq), static_cast<unsigned>(ni)), kThreads, 0, lanes_[lane_compute]>>>(
            static_cast<float*>(S.p), P, tv(lse), seq, hq, i0, scale, drop, window);
        LAUNCHED();
        for (i64 k = 0; k < a.blocks; ++k) {  // O[block k] = P[block k, keys] V[keys]
            const i64 r0 = k * a.rows, m = std::min(a.rows, seq - r0), keys = r0 + m;
            gemm(false, false, m, d, keys, P + r0 * seq, seq, ss, V + i0 * hs, d, hs, O + (i0 * hs + r0 * d), d, hs, ni, 1.0f, 0.0f);
        }
    }
    launch1(k_attn_heads, n, tv(out), O, seq, hq, d, n, true);
}
void CudaDevice::attention_backward(float* dqkv, const float* qkv, const float* out, const float* lse, const float* dout, i64 T, i64 seq,
                        i64 hq, i64 hkv, i64 d, const Dropout& drop, i64 window) {
    const int h = tv(qkv).fmt;  // 2-byte Q, K, V: the copies feeding a GEMM in their format
    if (flash_for(d, T / seq * hq, {qkv, out, dout, dqkv})) {
        const i64 items = T / seq * hq, n = items * seq * d;
        const auto b = carve({{false, n}, {false, 2 * n}, {false, items * seq}});
        const TV dQ = b[0], dK = b[1], dV = dK + n;
        float* D = static_cast<float*>(b[2].p);
        zero_raw(dQ, n);  // added atomically
        k_attn_rowdot_rows<<<static_cast<unsigned>((items * seq + 7) / 8), dim3(32, 8), 0, lanes_[lane_compute]>>>(D, tv(dout), tv(out), seq,
                                                                                                                  hq, d, items * seq);
        LAUNCHED();
        flash_backward(qkv, dout, lse, D, static_cast<float*>(dQ.p), static_cast<float*>(dK.p), static_cast<float*>(dV.p), seq, items, hq, hkv,
                       d, 1.0f / std::sqrt(static_cast<float>(d)), drop, window);
        launch1(k_attn_merge_grads, T * (hq + 2 * hkv) * d, tv(dqkv), static_cast<const float*>(dQ.p), static_cast<const float*>(dK.p),
                static_cast<const float*>(dV.p), seq, hq, hkv, d, T * (hq + 2 * hkv) * d);
        return;
    }
    const AttnPlan a = attn_plan(T, seq, hq, h ? 12 : 8);
    const i64 n = a.items * seq * d, hs = seq * d, ss = seq * seq, cs = a.chunk * ss;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const auto b = carve({{h, n}, {h, n}, {h, n}, {h, n}, {h, n}, {false, n}, {false, 2 * n}, {false, a.items * seq}, {false, cs},
                          {false, cs}, {h, h ? cs : 0}, {h, h ? cs : 0}});
    const TV Q = b[0], K = b[1], V = b[2], O = b[3], dO = b[4], dQ = b[5], dK = b[6], dV = dK + n, S = b[8], dP = b[9];
    const TV P = h ? b[10] : S, dS = h ? b[11] : dP;
    float* D = static_cast<float*>(b[7].p);
    launch1(k_attn_split, n, Q, K, V, tv(qkv), seq, hq, hkv, d, n);
    launch1(k_attn_heads, n, O, tv(out), seq, hq, d, n, false);
    launch1(k_attn_heads, n, dO, tv(dout), seq, hq, d, n, false);
    zero_raw(dK, 2 * n);  // dK and dV accumulate over the query blocks
    const i64 rows = a.items * seq;
    k_attn_rowdot<<<static_cast<unsigned>((rows + 7) / 8), dim3(32, 8), 0, lanes_[lane_compute]>>>(D, dO, O, d, rows);
    LAUNCHED();
    for (i64 i0 = 0; i0 < a.items; i0 += a.chunk) {
        const i64 ni = std::min(a.chunk, a.items - i0), q0 = i0 * hs;
        for (i64 k = 0; k < a.blocks; ++k) {
            const i64 r0 = k * a.rows, m = std::min(a.rows, seq - r0), keys = r0 + m;
            gemm(false, true, m, keys, d, Q + (q0 + r0 * d), d, hs, K + q0, d, hs, S + r0 * seq, seq, ss, ni, 1.0f, 0.0f);
            gemm(false, true, m, keys, d, dO + (q0 + r0 * d), d, hs, V + q0, d, hs, dP + r0 * seq, seq, ss, ni, 1.0f, 0.0f);
        }
        k_softmax_causal_bwd<<<dim3(static_cast<unsigned>(seq), static_cast<unsigned>(ni)), kThreads, 0, lanes_[lane_compute]>>>(
            static_cast<const float*>(S.p), static_cast<const float*>(dP.p), P, dS, tv(lse), D, seq, hq, i0, scale, drop, window);
        LAUNCHED();
        for (i64 k = 0; k < a.blocks; ++k) {
            const i64 r0 = k * a.rows, m = std::min(a.rows, seq - r0), keys = r0 + m;
            // dV[keys] += P^T[block] dO[block]; dQ[block] = dS[block] K[keys]; dK[keys] += dS^T[block] Q[block]
            gemm(true, false, keys, d, m, P + r0 * seq, seq, ss, dO + (q0 + r0 * d), d, hs, dV + q0, d, hs, ni, 1.0f, 1.0f);
            gemm(false, false, m, d, keys, dS + r0 * seq, seq, ss, K + q0, d, hs, dQ + (q0 + r0 * d), d, hs, ni, 1.0f, 0.0f);
            gemm(true, false, keys, d, m, dS + r0 * seq, seq, ss, Q + (q0 + r0 * d), d, hs, dK + q0, d, hs, ni, 1.0f, 1.0f);
        }
    }
    launch1(k_attn_merge_grads, T * (hq + 2 * hkv) * d, tv(dqkv), static_cast<const float*>(dQ.p), static_cast<const float*>(dK.p),
            static_cast<const float*>(dV.p), seq, hq, hkv, d, T * (hq + 2 * hkv) * d);
}

void CudaDevice::attention_probs(float* probs, float* mask, float* dropped, const float* qkv, const float* lse, i64 T, i64 seq, i64 hq,
                                 i64 hkv, i64 d, const Dropout& drop, i64 window) {
    const i64 n = T / seq * hq * seq * seq;
    launch1(k_attn_probs, n, tv(probs), mask ? tv(mask) : TV{}, dropped ? tv(dropped) : TV{}, tv(qkv), tv(lse), seq, hq, hkv, d,
            1.0f / std::sqrt(static_cast<float>(d)), drop, window, n);
}

void CudaDevice::attention_probs_grad(float* dprobs, const float* qkv, const float* dout, i64 T, i64 seq, i64 hq, i64 hkv, i64 d) {
    const i64 n = T / seq * hq * seq * seq;
    launch1(k_attn_probs_grad, n, tv(dprobs), tv(qkv), tv(dout), seq, hq, hkv, d, n);
}

// Context parallelism's ring blocks (ring_attention.cuh).
void CudaDevice::attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, i64 kv_stride, const cpu::Positions& qpos,
                                         const cpu::Positions& kpos, i64 T, i64 hq, i64 hkv, i64 d, bool merge, const Dropout& drop) {
    if (d > kRingMaxHeadDim) throw std::runtime_error("cuda: the ring's attention blocks take heads of at most 256");
    launch1(k_ring_block_fwd, T * hq, tv(out), tv(lse), tv(qkv), tv(kv), kv_stride, qpos, kpos, T, hq, hkv, d, merge, drop);
}

void CudaDevice::attention_block_backward(float* dqkv, float* dkv, i64 kv_stride, const float* qkv, const float* kv, const float* out,
                                          const float* lse, const float* dout, const cpu::Positions& qpos, const cpu::Positions& kpos, i64 T,
                                          i64 hq, i64 hkv, i64 d, bool accumulate, const Dropout& drop) {
    if (d > kRingMaxHeadDim) throw std::runtime_error("cuda: the ring's attention blocks take heads of at most 256");
    const i64 G = 2 * hkv * d;
    if (!accumulate) zero(dqkv, T * (hq + G / d) * d);
    float* dkv32 = scratch(T * G);
    zero_raw(TV{dkv32, 0}, T * G);
    launch1(k_ring_block_bwd, T * hq, tv(dqkv), dkv32, tv(qkv), tv(kv), kv_stride, tv(out), tv(lse), tv(dout), qpos, kpos, T, hq, hkv, d, drop);
    launch1(k_ring_kv_out, T * G, tv(dqkv), dkv ? tv(dkv) : TV{}, kv_stride, static_cast<const float*>(dkv32), T, hq, hkv, d);
}

void CudaDevice::add_columns(float* dst, i64 dst_cols, const float* src, i64 src_cols, i64 rows) {
    launch1(k_add_columns, rows * src_cols, tv(dst), dst_cols, tv(src), src_cols, rows);
}
