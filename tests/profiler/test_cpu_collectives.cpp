// The CPU backend's ranks-as-threads collectives are numerically correct: rank r fills its input
// with values that identify (rank, index), so each result element has a closed-form expected value.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "strata/profiler/cpu_collectives.hpp"

using namespace strata::profiler;

namespace {
// Run f(rank) on n threads.
template <class F>
void on_ranks(int n, F f) {
    std::vector<std::thread> th;
    for (int r = 0; r < n; ++r) th.emplace_back(f, r);
    for (auto& t : th) t.join();
}
float val(int rank, std::size_t i) { return static_cast<float>(rank + 1) * 1000.f + static_cast<float>(i % 997); }
}  // namespace

TEST_CASE("ring all-reduce sums over ranks", "[profiler][cpu]") {
    for (int n : {1, 2, 3, 4, 7}) {
        for (std::size_t count : {std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{4099}}) {
            std::vector<std::vector<float>> buf(static_cast<std::size_t>(n));
            std::vector<float*> p;
            for (int r = 0; r < n; ++r) {
                auto& b = buf[static_cast<std::size_t>(r)];
                b.resize(count);
                for (std::size_t i = 0; i < count; ++i) b[i] = val(r, i);
                p.push_back(b.data());
            }
            cpu::Barrier bar(n);
            on_ranks(n, [&](int r) { cpu::ring_all_reduce(r, n, p, count, bar); });
            // sum_r ((r+1)*1000 + i%997) = 1000 n(n+1)/2 + n (i%997)
            bool ok = true;
            for (int r = 0; r < n; ++r)
                for (std::size_t i = 0; i < count; ++i) {
                    const double expect = 1000.0 * n * (n + 1) / 2 + n * static_cast<double>(i % 997);
                    if (buf[static_cast<std::size_t>(r)][i] != Approx(expect)) ok = false;
                }
            INFO("n=" << n << " count=" << count);
            CHECK(ok);
        }
    }
}

TEST_CASE("ring reduce-scatter gives rank r the sum of chunk r", "[profiler][cpu]") {
    for (int n : {1, 2, 4, 5}) {
        const std::size_t count = 333;  // per-rank output elements
        std::vector<std::vector<float>> work(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(n));
        std::vector<float*> pw, po;
        for (int r = 0; r < n; ++r) {
            work[static_cast<std::size_t>(r)].resize(count * static_cast<std::size_t>(n));
            for (std::size_t i = 0; i < work[static_cast<std::size_t>(r)].size(); ++i) work[static_cast<std::size_t>(r)][i] = val(r, i);
            out[static_cast<std::size_t>(r)].assign(count, -1.f);
            pw.push_back(work[static_cast<std::size_t>(r)].data());
            po.push_back(out[static_cast<std::size_t>(r)].data());
        }
        cpu::Barrier bar(n);
        on_ranks(n, [&](int r) { cpu::ring_reduce_scatter(r, n, pw, po, count, bar); });
        bool ok = true;
        for (int r = 0; r < n; ++r)
            for (std::size_t j = 0; j < count; ++j) {
                const std::size_t i = static_cast<std::size_t>(r) * count + j;  // global index of chunk r
                const double expect = 1000.0 * n * (n + 1) / 2 + n * static_cast<double>(i % 997);
                if (out[static_cast<std::size_t>(r)][j] != Approx(expect)) ok = false;
            }
        INFO("n=" << n);
        CHECK(ok);
    }
}

TEST_CASE("ring all-gather, all-to-all and send/recv move the right blocks", "[profiler][cpu]") {
    for (int n : {1, 2, 3, 6}) {
        const std::size_t c = 101;
        const auto N = static_cast<std::size_t>(n);
        std::vector<std::vector<float>> in(N), out(N);
        std::vector<const float*> pi;
        std::vector<float*> po;
        for (int r = 0; r < n; ++r) {
            in[static_cast<std::size_t>(r)].resize(c * N);
            for (std::size_t i = 0; i < c * N; ++i) in[static_cast<std::size_t>(r)][i] = val(r, i);
            out[static_cast<std::size_t>(r)].assign(c * N, -1.f);
            pi.push_back(in[static_cast<std::size_t>(r)].data());
            po.push_back(out[static_cast<std::size_t>(r)].data());
        }
        cpu::Barrier bar(n);
        INFO("n=" << n);
        // all-gather of the first c elements: out[r] block p = in[p][0..c)
        on_ranks(n, [&](int r) { cpu::ring_all_gather(r, n, pi, po, c, bar); });
        bool ag = true;
        for (int r = 0; r < n; ++r)
            for (int p = 0; p < n; ++p)
                for (std::size_t j = 0; j < c; ++j)
                    if (out[static_cast<std::size_t>(r)][static_cast<std::size_t>(p) * c + j] != val(p, j)) ag = false;
        CHECK(ag);
        // all-to-all: out[r] block p = in[p] block r
        on_ranks(n, [&](int r) { cpu::all_to_all(r, n, pi, po, c, bar); });
        bool a2a = true;
        for (int r = 0; r < n; ++r)
            for (int p = 0; p < n; ++p)
                for (std::size_t j = 0; j < c; ++j)
                    if (out[static_cast<std::size_t>(r)][static_cast<std::size_t>(p) * c + j] != val(p, static_cast<std::size_t>(r) * c + j))
                        a2a = false;
        CHECK(a2a);
        // send/recv ring: out[r] = in[r-1 mod n]
        on_ranks(n, [&](int r) { cpu::ring_send_recv(r, n, pi, po, c, bar); });
        bool sr = true;
        for (int r = 0; r < n; ++r)
            for (std::size_t j = 0; j < c; ++j)
                if (out[static_cast<std::size_t>(r)][j] != val((r + n - 1) % n, j)) sr = false;
        CHECK(sr);
    }
}
