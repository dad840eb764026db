// The cpu backend's mixture-of-experts kernels: the router's top-k and its softmax, and the moves
// of tokens into and out of expert order (cpu_kernels.hpp). Deterministic: a token's choices are
// visited in order, and expert order keeps tokens in their order within an expert.
#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <vector>

#include "strata/runtime/cpu_kernels.hpp"

namespace strata::runtime::cpu {

void moe_route_round_robin(float* routing, i64 T, i64 E, i64 k) {
    for (i64 t = 0; t < T; ++t)
        for (i64 j = 0; j < k; ++j) {
            routing[t * 2 * k + j] = static_cast<float>((t * k + j) % E);
            routing[t * 2 * k + k + j] = 1.0f / static_cast<float>(k);
        }
}

void moe_route(float* routing, const float* logits, i64 T, i64 E, i64 k, i64 groups, i64 group_topk) {
    std::vector<i64> ids(static_cast<std::size_t>(E)), gids(static_cast<std::size_t>(std::max<i64>(groups, 1)));
    std::vector<float> group_score(gids.size()), in_group;
    const i64 per = groups > 0 ? E / groups : E, best_of_group = std::max<i64>(1, groups > 0 ? k / group_topk : 1);
    for (i64 t = 0; t < T; ++t) {
        const float* l = logits + t * E;
        auto better = [l](i64 a, i64 b) { return l[a] > l[b] || (l[a] == l[b] && a < b); };  // best first; ties to the lower id
        for (i64 e = 0; e < E; ++e) ids[static_cast<std::size_t>(e)] = e;
        auto candidates_end = ids.end();
        if (groups > 0) {
            // Group-limited: a group scores the sum of its best k / group_topk logits; the token
            // picks its experts from its group_topk best groups only.
            for (i64 g = 0; g < groups; ++g) {
                in_group.assign(l + g * per, l + (g + 1) * per);
                std::partial_sort(in_group.begin(), in_group.begin() + best_of_group, in_group.end(), std::greater<float>());
                double sum = 0;
                for (i64 j = 0; j < best_of_group; ++j) sum += in_group[static_cast<std::size_t>(j)];
                group_score[static_cast<std::size_t>(g)] = static_cast<float>(sum);
                gids[static_cast<std::size_t>(g)] = g;
            }
            const float* gs = group_score.data();
            std::partial_sort(gids.begin(), gids.begin() + group_topk, gids.end(),
                              [gs](i64 a, i64 b) { return gs[a] > gs[b] || (gs[a] == gs[b] && a < b); });
            candidates_end = std::stable_partition(ids.begin(), ids.end(), [&](i64 e) {
                return std::find(gids.begin(), gids.begin() + group_topk, e / per) != gids.begin() + group_topk;
            });
        }
        std::partial_sort(ids.begin(), ids.begin() + k, candidates_end, better);
        float* r = routing + t * 2 * k;
        const float top = l[ids[0]];
        double sum = 0;
        for (i64 j = 0; j < k; ++j) sum += std::exp(static_cast<double>(l[ids[static_cast<std::size_t>(j)]] - top));
        for (i64 j = 0; j < k; ++j) {
            const i64 e = ids[static_cast<std::size_t>(j)];
            r[j] = static_cast<float>(e);
            r[k + j] = static_cast<float>(std::exp(static_cast<double>(l[e] - top)) / sum);
        }
    }
}

void moe_drop(float* routing, i64 T, i64 E, i64 k, i64 capacity) {
    std::vector<std::vector<std::pair<float, i64>>> by_expert(static_cast<std::size_t>(E));  // (weight, choice)
    for (i64 c = 0; c < T * k; ++c) {
        const float* r = routing + (c / k) * 2 * k;
        by_expert[static_cast<std::size_t>(r[c % k])].push_back({r[k + c % k], c});
    }
    for (auto& list : by_expert) {
        if (static_cast<i64>(list.size()) <= capacity) continue;
        // Highest weight first, ties to the earlier token: the kept ones are the first `capacity`.
        std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        for (std::size_t q = static_cast<std::size_t>(capacity); q < list.size(); ++q) {
            float& id = routing[(list[q].second / k) * 2 * k + list[q].second % k];
            id = -(id + 1);
        }
    }
}

i64 moe_capacity(i64 T, i64 E, i64 k, double capacity_factor) {
    if (!(capacity_factor > 0)) return 0;
    return static_cast<i64>(std::ceil(static_cast<double>(T * k) / static_cast<double>(E) * capacity_factor));
}

void moe_route_backward(float* dlogits, const float* routing, const float* dprobs, i64 T, i64 E, i64 k) {
    std::fill(dlogits, dlogits + T * E, 0.0f);
    for (i64 t = 0; t < T; ++t) {
        const float *r = routing + t * 2 * k, *p = r + k, *dp = dprobs + t * k;
        double dot = 0;
        for (i64 j = 0; j < k; ++j) dot += static_cast<double>(p[j]) * dp[j];
        // Softmax over the chosen logits: dl_j = p_j (dp_j - sum_i p_i dp_i); a dropped choice's
        // weight was multiplied by 0 after the softmax, so its dp_j is 0, but it is still in it.
        for (i64 j = 0; j < k; ++j) {
            const i64 e = r[j] < 0 ? static_cast<i64>(-r[j]) - 1 : static_cast<i64>(r[j]);
            dlogits[t * E + e] = static_cast<float>(p[j] * (dp[j] - dot));
        }
    }
}

void moe_order(i64* pos, i64* counts, const float* routing, i64 T, i64 E, i64 k, i64 capacity) {
    std::fill(counts, counts + E, i64{0});
    for (i64 t = 0; t < T; ++t)
        for (i64 j = 0; j < k; ++j) {
            const float id = routing[t * 2 * k + j];
            if (id < 0 && -id - 1 < static_cast<float>(E)) continue;  // dropped (moe_drop)
            if (!(id >= 0 && id < static_cast<float>(E))) throw std::out_of_range("moe_order: an expert id outside [0, experts)");
            ++counts[static_cast<i64>(id)];
        }
    if (capacity > 0)
        for (i64 e = 0; e < E; ++e) {
            if (counts[e] > capacity) throw std::out_of_range("moe_order: an expert keeps more choices than its capacity");
            counts[e] = capacity;  // padded
        }
    std::vector<i64> next(static_cast<std::size_t>(E));
    for (i64 e = 0, at = 0; e < E; at += counts[e], ++e) next[static_cast<std::size_t>(e)] = at;
    for (i64 t = 0; t < T; ++t)
        for (i64 j = 0; j < k; ++j) {
            const float id = routing[t * 2 * k + j];
            pos[t * k + j] = id < 0 ? -1 : next[static_cast<std::size_t>(id)]++;
        }
}

void moe_permute(float* xp, const float* x, const i64* pos, i64 T, i64 k, i64 C) {
    for (i64 t = 0; t < T; ++t)
        for (i64 j = 0; j < k; ++j)
            if (pos[t * k + j] >= 0) std::copy(x + t * C, x + (t + 1) * C, xp + pos[t * k + j] * C);
}

void moe_permute_backward(float* dx, const float* dxp, const i64* pos, i64 T, i64 k, i64 C) {
    for (i64 t = 0; t < T; ++t) {
        float* d = dx + t * C;
        std::fill(d, d + C, 0.0f);
        for (i64 j = 0; j < k; ++j) {
            if (pos[t * k + j] < 0) continue;
            const float* s = dxp + pos[t * k + j] * C;
            for (i64 c = 0; c < C; ++c) d[c] += s[c];
        }
    }
}

void moe_unpermute(float* y, const float* ye, const float* routing, const i64* pos, i64 T, i64 k, i64 C) {
    for (i64 t = 0; t < T; ++t) {
        float* out = y + t * C;
        std::fill(out, out + C, 0.0f);
        const float* w = routing + t * 2 * k + k;
        for (i64 j = 0; j < k; ++j) {
            if (pos[t * k + j] < 0) continue;
            const float* s = ye + pos[t * k + j] * C;
            for (i64 c = 0; c < C; ++c) out[c] += w[j] * s[c];
        }
    }
}

void moe_unpermute_backward(float* dye, float* dprobs, const float* dy, const float* ye, const float* routing, const i64* pos, i64 T,
                            i64 k, i64 C) {
    for (i64 t = 0; t < T; ++t) {
        const float* d = dy + t * C;
        const float* w = routing + t * 2 * k + k;
        for (i64 j = 0; j < k; ++j) {
            const i64 row = pos[t * k + j];
            if (row < 0) {
                if (dprobs) dprobs[t * k + j] = 0.0f;
                continue;
            }
            float* o = dye + row * C;
            for (i64 c = 0; c < C; ++c) o[c] = w[j] * d[c];
            if (!dprobs) continue;  // constant weights (a round-robin gate): no gradient for them
            const float* s = ye + row * C;
            double dot = 0;
            for (i64 c = 0; c < C; ++c) dot += static_cast<double>(d[c]) * s[c];
            dprobs[t * k + j] = static_cast<float>(dot);
        }
    }
}

}  // namespace strata::runtime::cpu
