// Checks the runtime's tests share: a parameter's gradient against central differences, and a
// parallel variant's loss curve against the single rank's (test_runtime.cpp, test_parallel.cpp,
// test_moe.cpp).
#pragma once
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime_fixtures.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"

namespace strata::test {

using namespace strata::sim;

// The directional derivative of the loss along a random +-1 direction over a whole parameter
// tensor (on one rank's piece of a split one), by central differences, against the backward's
// gradient dotted with that direction. lr 0 keeps the parameters, a fixed batch the data.
inline void check_gradients(const ModelSpec& m, const PlanSpec& p, int rank, const std::vector<std::pair<std::string, int>>& params,
                     const std::function<void(runtime::Session&)>& prepare = {}, bool along_sign = false, double step = 1e-3,
                     const std::function<double(const runtime::StepReport&)>& objective = {}) {
    // What the backward differentiates: the loss, or with MTP modules the loss and their weighted mean.
    auto J = [&](const runtime::StepReport& r) { return objective ? objective(r) : r.loss; };
    runtime::RunOptions o;
    o.lr = 0;
    o.weight_decay = 0;
    o.data.fixed_batch = true;
    runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
    if (prepare) prepare(s);
    const double eps = step;
    for (const auto& [name, layer] : params) {
        s.step();  // the gradient at the unperturbed parameters (the differences below step too)
        const std::int64_t n = s.param_elements(rank, name, layer);
        std::vector<float> x(static_cast<std::size_t>(n));
        std::vector<int> dir(static_cast<std::size_t>(n));
        double g_dot = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            x[static_cast<std::size_t>(i)] = s.param(rank, name, layer, i);
            const float g = s.grad(rank, name, layer, i);
            // along_sign: the direction of the gradient's signs, so that a small gradient (a
            // router's at initialisation) sums to a derivative well above the differences' noise.
            dir[static_cast<std::size_t>(i)] = along_sign ? (g < 0 ? -1 : 1) : ((i * 2654435761u) >> 7) % 2 ? 1 : -1;
            g_dot += dir[static_cast<std::size_t>(i)] * static_cast<double>(g);
        }
        // A TP replica or the tied copy holds the same elements: move every holder alike (split
        // weights are perturbed on `rank` only).
        auto shift = [&](double by) {
            for (int r = 0; r < p.gpus(); ++r) {
                if (r != rank && p.tp > 1) continue;
                for (std::int64_t i = 0; i < n; ++i)
                    s.set_param(r, name, layer, i, static_cast<float>(x[static_cast<std::size_t>(i)] + by * dir[static_cast<std::size_t>(i)]));
            }
        };
        shift(eps);
        const double up = J(s.step());
        shift(-eps);
        const double down = J(s.step());
        shift(0);
        const double fd = (up - down) / (2 * eps);
        INFO(name << " layer " << layer << ": backward " << g_dot << ", finite difference " << fd);
        CHECK(std::fabs(fd - g_dot) <= 1e-2 * std::fabs(g_dot) + 2e-4);
    }
}

// Every parallel variant differs from one rank only in the order floating-point sums are taken:
// 1e-4 relative per step over 4 steps of AdamW, where rounding differences measured about 1e-6.
constexpr int kSteps = 4;
constexpr double kTol = 1e-4;

struct Variant {
    const char* name;
    PlanSpec plan;
    runtime::RunOptions options{};
};

/// Each variant's curve against `one`'s (a single-rank plan), step by step.
inline void check_against(const ModelSpec& m, const PlanSpec& one, const std::vector<Variant>& variants) {
    const std::vector<double> ref = losses(m, one, kSteps);
    // Starts at chance over the rows the softmax spans: padded rows take part (Megatron's loss).
    REQUIRE(ref.front() == Approx(std::log(static_cast<double>(padded_vocab(m, one)))).epsilon(0.02));
    REQUIRE(ref.back() < ref.front());
    for (const Variant& v : variants) {
        INFO(m.name << ", " << v.name);
        const std::vector<double> got = losses(m, v.plan, kSteps, v.options);
        for (int i = 0; i < kSteps; ++i) {
            INFO("step " << i + 1 << ": " << got[static_cast<std::size_t>(i)] << " against " << ref[static_cast<std::size_t>(i)]);
            CHECK(got[static_cast<std::size_t>(i)] == Approx(ref[static_cast<std::size_t>(i)]).epsilon(kTol));
        }
    }
}

/// A memory-only walk over two steps (Adam's moments exist from the second's start): its peaks per
/// tier, and the memory model's report of the same plan on one node.
struct WalkAndModel {
    std::array<double, sim::kTierCount> walk{};
    sim::MemoryReport model;
    /// The model's GPU bytes less its framework reserve (no CUDA context on the cpu backend).
    double model_gpu() const { return model.hbm_bytes - sim::kFrameworkReserveBytes; }
};
inline WalkAndModel walk_and_model(const ModelSpec& m, const PlanSpec& p) {
    runtime::RunOptions o;
    o.memory_only = true;
    runtime::Session s(m, cpu_cluster(p.gpus()), p, o);
    s.step();
    s.step();
    sim::Capacities caps;
    caps.gpus_per_node = p.gpus();
    return {s.peak_bytes(), memory_estimate(m, p, caps)};
}

inline void check_against_single_rank(const ModelSpec& m, const std::vector<Variant>& variants) { check_against(m, cpu_plan(), variants); }

}  // namespace strata::test
