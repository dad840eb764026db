// The memory view's data agrees with the engine's own figures: each GPU curve peaks at its rank's
// peak, the stacked breakdown adds up to it, the worst is marked, an OOM is placed where the
// engine found it; the per-pixel envelope holds every value the curve takes in a column.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "gui_fixtures.hpp"
#include "strata/gui/models/memory_view.hpp"

using namespace strata;
using namespace strata::gui;

TEST_CASE("memory: curves, capacity and breakdown agree with the engine", "[gui][memory]") {
    const auto& snap = test::tiny_snapshot();
    const sim::SimOutput& out = *snap.out;
    const MemoryView v = memory_view(out);
    REQUIRE_FALSE(v.tiers.empty());
    const TierMemory& gpu = v.tiers.front();
    CHECK(gpu.tier == sim::Tier::gpu);
    CHECK(gpu.capacity_bytes == out.capacities.gpu_bytes);
    REQUIRE(gpu.curves.size() == out.result.ranks.size());
    double worst = 0;
    for (std::size_t r = 0; r < gpu.curves.size(); ++r) {
        CHECK(gpu.curves[r].peak_bytes == Approx(out.result.ranks[r].peak_bytes[0]));
        CHECK(std::is_sorted(gpu.curves[r].t_ns.begin(), gpu.curves[r].t_ns.end()));
        worst = std::max(worst, gpu.curves[r].peak_bytes);
    }
    int marked = 0;
    for (const auto& c : gpu.curves)
        if (c.worst) {
            ++marked;
            CHECK(c.peak_bytes == worst);
        }
    CHECK(marked == 1);
    REQUIRE(v.stages.size() == out.result.ranks.size());
    for (std::size_t r = 0; r < v.stages.size(); ++r) {
        CHECK(v.stages[r].total() == Approx(out.result.ranks[r].peak_bytes[0]));
        CHECK(v.stages[r].bytes[0] > 0);  // weights
        CHECK(v.stages[r].analytical_bytes > 0);
    }
    CHECK(v.stages[static_cast<std::size_t>(v.worst_stage)].worst);
    CHECK_FALSE(gpu.oom);
}

TEST_CASE("memory: an OOM is marked at the engine's time and tier", "[gui][memory]") {
    // LLaMA-3 8B on 8 H100 with tp 1 pp 1 and no ZeRO: model states alone (16 bytes a parameter)
    // outgrow 80 GB.
    sim::Scenario s = sim::load_scenario(test::kSrc + "/scenarios/llama-3-8b-8xh100.json");
    sim::PlanSpec p = *s.plan;
    p.tp = 1;
    p.pp = 1;
    p.cp = 1;
    p.dp = 8;
    p.zero_stage = 0;
    p.vpp = 1;
    p.schedule = sim::Schedule::one_f_one_b;
    p.micro_batch = 4;
    p.sequence_parallel = false;
    p.recompute = sim::Recompute::none;
    const auto view = test::hardware().view(s.cluster, "t");
    const Snapshot snap = simulate_snapshot(s.model, s.cluster, p, view, test::hardware().calibration(view), "t");
    REQUIRE(snap.out->result.oom);
    const MemoryView v = memory_view(*snap.out);
    REQUIRE(v.tiers.front().oom);
    const OomMark& m = *v.tiers.front().oom;
    std::int64_t first = snap.out->result.ooms.front().time_ns;
    for (const auto& o : snap.out->result.ooms)
        if (o.tier == sim::Tier::gpu) first = std::min(first, o.time_ns);
    CHECK(m.time_ns == first);
    CHECK(m.in_use_bytes > m.capacity_bytes);
    CHECK(m.where.find("asks") != std::string::npos);
    CHECK_FALSE(figures_of(*snap.out).fits);
}

TEST_CASE("memory: the envelope holds every value a column's time range sees", "[gui][memory]") {
    std::mt19937 rng(3);
    MemoryCurve c;
    std::int64_t t = 100;
    for (int i = 0; i < 5000; ++i) {
        t += 1 + static_cast<std::int64_t>(rng() % 50);
        c.t_ns.push_back(t);
        c.bytes.push_back(static_cast<double>(rng() % 1000));
    }
    const TimeWindow w{5000, 90000};
    const int cols = 300;
    const Envelope e = envelope(c, w, cols);
    REQUIRE(e.lo.size() == static_cast<std::size_t>(cols));
    const double per_col = static_cast<double>(w.length_ns()) / cols;
    for (int col = 0; col < cols; ++col) {
        const auto a = w.start_ns + static_cast<std::int64_t>(std::ceil(col * per_col));
        const auto b = w.start_ns + static_cast<std::int64_t>(std::ceil((col + 1) * per_col));
        double lo = INFINITY, hi = -INFINITY;
        for (std::size_t i = 0; i < c.t_ns.size(); ++i) {
            const bool held_at_a = c.t_ns[i] <= a && (i + 1 == c.t_ns.size() || c.t_ns[i + 1] > a);
            if (held_at_a || (c.t_ns[i] > a && c.t_ns[i] < b)) lo = std::min(lo, c.bytes[i]), hi = std::max(hi, c.bytes[i]);
        }
        CHECK(e.lo[static_cast<std::size_t>(col)] <= lo);
        CHECK(e.hi[static_cast<std::size_t>(col)] >= hi);
    }
    // Before the first sample there is no value.
    const Envelope early = envelope(c, TimeWindow{0, 50}, 5);
    CHECK(std::isnan(early.lo[0]));
}
