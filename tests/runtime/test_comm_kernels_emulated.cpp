// The kernels of the cuda backend's communicators (runtime/cuda/comm_kernels.cuh), run on the CPU
// (cuda_emulation.hpp) with comm.cuh's launch shapes, against the host transport's exchange, which
// the cpu backend runs. test_cuda.cpp runs the communicators themselves on a GPU.
#include <catch2/catch.hpp>

#include <memory>

#include "runtime_fixtures.hpp"  // before the emulation's macros
#include "transport.hpp"
#include "ulysses_index.hpp"
#include "cuda_emulation.hpp"

namespace strata::runtime::emulated {
#include "kernels.cuh"
#include "comm_kernels.cuh"
#include "cuda_emulated_checks.hpp"
}  // namespace strata::runtime::emulated

// Ulysses on the cuda backend's NCCL path (comm.cuh): each member packs a block per member with
// k_ulysses_heads or k_ulysses_seq, member q's block r lands in member r's slot q (NCCL's grouped
// sends and receives), and the receiver unpacks with the other kernel. Emulated here for 4
// members, three head segments ([q | k | v]) and 2 sequences, in fp32 and bf16, both ways: every
// value must land where the transport's exchange puts it, and come back where it started.
TEST_CASE("Ulysses' pack and unpack kernels, emulated, move every value where the transport does", "[runtime][cuda-emulated][ulysses]") {
    using namespace strata::runtime::emulated;
    using strata::runtime::CollPart;
    using strata::runtime::Transport;
    using strata::runtime::UlyssesSegments;
    const int n = 4;
    const i64 seq = 16, b = 2, rows = b * seq / n, W = 16, w = W / n, each = rows * w;
    const std::vector<i64> segments{8, 4, 4};
    const UlyssesSegments sg{{8, 4, 4, 0}, 3};
    for (int fmt : {0, 1}) {
        INFO(fmt_name(fmt));
        std::vector<float> in[n], want[n], back[n];
        for (int m = 0; m < n; ++m) {
            in[m] = rounded(randoms(static_cast<std::size_t>(rows * W), 90 + static_cast<unsigned>(m)), fmt);
            want[m].assign(in[m].size(), -1.0f);
            back[m] = want[m];
        }
        Transport t;
        auto transport = [&](int mode, std::vector<float>* from, std::vector<float>* to, std::int64_t key) {
            for (int r = 0; r < n; ++r) {
                CollPart part;
                part.group_rank = r;
                part.in = {from[r].data()};
                part.in_n = {static_cast<i64>(from[r].size())};
                part.out = {to[r].data()};
                part.out_n = {static_cast<i64>(to[r].size())};
                part.ulysses = mode;
                part.segments = segments;
                part.seq = seq;
                t.collective({0, key}, strata::sim::CollKind::all_to_all, n, part);
            }
            for (int r = 0; r + 1 < n; ++r) t.collective_done({0, key});
        };
        transport(1, in, want, 1);
        transport(2, want, back, 2);
        // comm.cuh's order, on the members' buffers.
        auto nccl_path = [&](bool to_heads, std::vector<std::unique_ptr<Buf>>& from, std::vector<std::unique_ptr<Buf>>& to) {
            std::vector<std::unique_ptr<Buf>> send, recv;
            for (int m = 0; m < n; ++m) {
                send.push_back(std::make_unique<Buf>(std::vector<float>(static_cast<std::size_t>(rows * W)), fmt));
                recv.push_back(std::make_unique<Buf>(std::vector<float>(static_cast<std::size_t>(rows * W)), fmt));
                if (to_heads) run1(rows * W, [&] { k_ulysses_heads(send[m]->tv(), from[m]->tv(), rows, W, sg, n, true); });
                else run1(rows * W, [&] { k_ulysses_seq(send[m]->tv(), from[m]->tv(), rows, w, seq, n, true); });
            }
            for (int q = 0; q < n; ++q)
                for (int r = 0; r < n; ++r)
                    for (i64 e = 0; e < each; ++e) {
                        auto& src = *send[static_cast<std::size_t>(q)];
                        auto& dst = *recv[static_cast<std::size_t>(r)];
                        if (fmt) dst.h[static_cast<std::size_t>(q * each + e)] = src.h[static_cast<std::size_t>(r * each + e)];
                        else dst.f[static_cast<std::size_t>(q * each + e)] = src.f[static_cast<std::size_t>(r * each + e)];
                    }
            for (int m = 0; m < n; ++m) {
                if (to_heads) run1(rows * W, [&] { k_ulysses_seq(recv[m]->tv(), to[m]->tv(), rows, w, seq, n, false); });
                else run1(rows * W, [&] { k_ulysses_heads(recv[m]->tv(), to[m]->tv(), rows, W, sg, n, false); });
            }
        };
        std::vector<std::unique_ptr<Buf>> x, heads, again;
        for (int m = 0; m < n; ++m) {
            x.push_back(std::make_unique<Buf>(in[m], fmt));
            heads.push_back(std::make_unique<Buf>(std::vector<float>(in[m].size(), -1.0f), fmt));
            again.push_back(std::make_unique<Buf>(std::vector<float>(in[m].size(), -1.0f), fmt));
        }
        nccl_path(true, x, heads);
        nccl_path(false, heads, again);
        for (int m = 0; m < n; ++m) {
            CHECK(heads[static_cast<std::size_t>(m)]->get() == want[static_cast<std::size_t>(m)]);
            CHECK(again[static_cast<std::size_t>(m)]->get() == back[static_cast<std::size_t>(m)]);
            CHECK(again[static_cast<std::size_t>(m)]->get() == in[static_cast<std::size_t>(m)]);
        }
    }
}
