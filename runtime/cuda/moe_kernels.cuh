// The cuda backend's mixture-of-experts kernels, each with the contract of its namesake in
// cpu_kernels.hpp (runtime/src/moe_kernels.cpp is the reference). Included by device_cuda.cu after
// kernels.cuh, inside its unnamed namespace, and by the emulated test. The token order (`pos`: per
// token and choice, its row in expert order, -1 when dropped) is the host's, copied to the device
// (CudaDevice::moe_set_order), as Megatron's dispatcher takes its split sizes from the host.
#pragma once

constexpr int kRouteThreads = 256;
constexpr int kMaxTopK = 64;
constexpr int kMaxGroups = 64;  ///< expert groups of group-limited routing

// One block per token: k passes of a block argmax over the logits not chosen yet (ties to the lower
// id, as std::partial_sort with the cpu kernel's order), then the softmax over the chosen, from the
// largest, in one thread.
// Group-limited routing (groups > 0; DeepSeek-V3's node-limited routing): a group scores the sum
// of its best k / group_topk logits, and the token picks its experts from its group_topk best
// groups only (thread 0 scores them; ties to the lower group, as cpu::moe_route).
__global__ void k_moe_route(TV routing, TV logits, i64 E, i64 k, i64 groups, i64 group_topk) {
    __shared__ float sv[kRouteThreads];
    __shared__ i64 si[kRouteThreads];
    __shared__ i64 chosen[kMaxTopK];
    __shared__ unsigned char allowed[kMaxGroups];
    const i64 t = blockIdx.x;
    const TV l = logits + t * E;
    const i64 per = groups > 0 ? E / groups : E;
    if (groups > 0 && threadIdx.x == 0) {
        const i64 best = k / group_topk > 1 ? k / group_topk : 1;
        float score[kMaxGroups];
        for (i64 g = 0; g < groups; ++g) {
            i64 taken[kMaxTopK];
            double sum = 0;
            for (i64 b = 0; b < best; ++b) {  // the b-th best of the group
                i64 bi = -1;
                for (i64 e = g * per; e < (g + 1) * per; ++e) {
                    bool used = false;
                    for (i64 q = 0; q < b; ++q) used = used || taken[q] == e;
                    if (!used && (bi < 0 || static_cast<float>(l[e]) > static_cast<float>(l[bi]))) bi = e;
                }
                taken[b] = bi;
                sum += static_cast<float>(l[bi]);
            }
            score[g] = static_cast<float>(sum);
            allowed[g] = 0;
        }
        for (i64 q = 0; q < group_topk; ++q) {
            i64 bg = -1;
            for (i64 g = 0; g < groups; ++g)
                if (!allowed[g] && (bg < 0 || score[g] > score[bg])) bg = g;
            allowed[bg] = 1;
        }
    }
    __syncthreads();
    for (i64 j = 0; j < k; ++j) {
        float bv = -INFINITY;
        i64 bi = E;
        for (i64 e = threadIdx.x; e < E; e += blockDim.x) {
            bool taken = groups > 0 && !allowed[e / per];
            for (i64 q = 0; q < j; ++q) taken = taken || chosen[q] == e;
            const float v = l[e];
            if (!taken && (bi == E || v > bv || (v == bv && e < bi))) bv = v, bi = e;
        }
        sv[threadIdx.x] = bv;
        si[threadIdx.x] = bi;
        __syncthreads();
        for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
            if (threadIdx.x < half) {
                const float ov = sv[threadIdx.x + half];
                const i64 oi = si[threadIdx.x + half];
                if (oi < E && (si[threadIdx.x] == E || ov > sv[threadIdx.x] || (ov == sv[threadIdx.x] && oi < si[threadIdx.x])))
                    sv[threadIdx.x] = ov, si[threadIdx.x] = oi;
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) chosen[j] = si[0];
        __syncthreads();
    }
    if (threadIdx.x != 0) return;
    const float top = l[chosen[0]];
    float sum = 0;
    for (i64 j = 0; j < k; ++j) sum += expf(l[chosen[j]] - top);
    const TV r = routing + t * 2 * k;
    for (i64 j = 0; j < k; ++j) {
        r[j] = static_cast<float>(chosen[j]);
        r[k + j] = expf(l[chosen[j]] - top) / sum;
    }
}
// One block per token: the row zeroed, then the softmax's backward into the chosen logits.
__global__ void k_moe_route_bwd(TV dlogits, TV routing, TV dprobs, i64 E, i64 k) {
    const i64 t = blockIdx.x;
    for (i64 e = threadIdx.x; e < E; e += blockDim.x) dlogits[t * E + e] = 0.0f;
    __syncthreads();
    if (threadIdx.x != 0) return;
    const TV r = routing + t * 2 * k, dp = dprobs + t * k;
    float dot = 0;
    for (i64 j = 0; j < k; ++j) dot += r[k + j] * dp[j];
    for (i64 j = 0; j < k; ++j) {
        const float id = r[j];
        const i64 e = id < 0 ? static_cast<i64>(-id) - 1 : static_cast<i64>(id);
        dlogits[t * E + e] = r[k + j] * (dp[j] - dot);
    }
}
// Elementwise over T k C: each kept choice's row, a copy of its token's.
__global__ void k_moe_permute(TV xp, TV x, const i64* pos, i64 T, i64 k, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * k * C) return;
    const i64 tk = i / C, c = i % C, p = pos[tk];
    if (p >= 0) xp[p * C + c] = x[(tk / k) * C + c];
}
// Elementwise over T C: a token's gradient, the sum over its kept rows.
__global__ void k_moe_permute_bwd(TV dx, TV dxp, const i64* pos, i64 T, i64 k, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * C) return;
    const i64 t = i / C, c = i % C;
    float s = 0;
    for (i64 j = 0; j < k; ++j)
        if (const i64 p = pos[t * k + j]; p >= 0) s += dxp[p * C + c];
    dx[i] = s;
}
// Elementwise over T C: a token's output, its kept rows weighted by the router (routing null: 1).
__global__ void k_moe_unpermute(TV y, TV ye, TV routing, const i64* pos, i64 T, i64 k, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * C) return;
    const i64 t = i / C, c = i % C;
    float s = 0;
    for (i64 j = 0; j < k; ++j)
        if (const i64 p = pos[t * k + j]; p >= 0) s += (routing ? static_cast<float>(routing[t * 2 * k + k + j]) : 1.0f) * ye[p * C + c];
    y[i] = s;
}
// Elementwise over T k C: each kept row's gradient, its token's weighted.
__global__ void k_moe_unpermute_bwd_rows(TV dye, TV dy, TV routing, const i64* pos, i64 T, i64 k, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * k * C) return;
    const i64 tk = i / C, c = i % C, p = pos[tk], t = tk / k;
    if (p >= 0) dye[p * C + c] = (routing ? static_cast<float>(routing[t * 2 * k + k + tk % k]) : 1.0f) * dy[t * C + c];
}
// One block per choice: the weight's gradient, dY . the expert's output row (0 where dropped).
__global__ void k_moe_unpermute_bwd_probs(TV dprobs, TV dy, TV ye, const i64* pos, i64 k, i64 C) {
    __shared__ float sh[32];
    const i64 tk = blockIdx.x, p = pos[tk], t = tk / k;
    float s = 0;
    if (p >= 0)
        for (i64 c = threadIdx.x; c < C; c += blockDim.x) s += static_cast<float>(dy[t * C + c]) * ye[p * C + c];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) dprobs[tk] = p >= 0 ? s : 0.0f;
}
__global__ void k_moe_probs(TV pr, TV routing, const i64* pos, i64 T, i64 k) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * k) return;
    if (const i64 p = pos[i]; p >= 0) pr[p] = routing[(i / k) * 2 * k + k + i % k];
}
__global__ void k_moe_probs_bwd(TV dp, TV dr, const i64* pos, i64 T, i64 k) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i >= T * k) return;
    const i64 p = pos[i];
    dp[i] = p < 0 ? 0.0f : static_cast<float>(dr[p]);
}
__global__ void k_scale_rows(TV y, TV x, TV w, i64 rows, i64 C) {
    const i64 i = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x;
    if (i < rows * C) y[i] = static_cast<float>(x[i]) * w[i / C];
}
// One block per row.
__global__ void k_row_dot(TV out, TV a, TV b, i64 C) {
    __shared__ float sh[32];
    const i64 r = blockIdx.x;
    float s = 0;
    for (i64 c = threadIdx.x; c < C; c += blockDim.x) s += static_cast<float>(a[r * C + c]) * b[r * C + c];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[r] = s;
}
