// Goodput, energy and prediction intervals (issue #34): every formula against a derivation by hand
// (the numbers in the comments), the cluster's operations keys against bad input, and the engine's
// per-state GPU seconds against the step they split.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "strata/common/error.hpp"
#include "strata/hwdb/hwdb.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/planner/energy.hpp"
#include "strata/planner/goodput.hpp"
#include "strata/planner/interval.hpp"
#include "strata/planner/outlook.hpp"
#include "strata/planner/search.hpp"
#include "support/gpt.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::planner;
using Catch::Matchers::Contains;

namespace {

ClusterSpec cluster_text(const std::string& extra) {
    return cluster_from_json_text(R"({"name": "c", "gpu": "H100-SXM5-80GB", "nodes": 2)" + extra + "}", "c.json");
}

void expect_error(const std::function<void()>& f, const std::string& path, const std::string& rule) {
    try {
        f();
        FAIL("no InputError for " << path);
    } catch (const InputError& e) {
        INFO(e.what());
        CHECK(e.file() == "c.json");
        CHECK(e.path() == path);
        CHECK_THAT(e.rule(), Contains(rule));
    }
}

}  // namespace

TEST_CASE("cluster operations keys: read, refused when out of range, written only when given", "[planner][goodput]") {
    const ClusterSpec plain = cluster_text("");
    CHECK_FALSE(plain.ops.interruptions_per_gpu_hour);
    CHECK_FALSE(plain.ops.pue);
    CHECK(to_json_text(plain).find("pue") == std::string::npos);  // files without the keys are written as before

    const ClusterSpec c = cluster_text(R"(, "interruptions_per_gpu_hour": 2e-5, "restart_s": 300, "checkpoint_gbyte_per_s": 50,
        "checkpoint_async": true, "checkpoint_interval_s": 1800, "pue": 1.2, "energy_usd_per_kwh": 0.1,
        "host_power_w_per_node": 3000, "network_power_w_per_node": 200, "gpu_power_w": 650)");
    CHECK(*c.ops.interruptions_per_gpu_hour == 2e-5);
    CHECK(*c.ops.restart_s == 300);
    CHECK(*c.ops.checkpoint_Bps == 50e9);
    CHECK(c.ops.checkpoint_async);
    CHECK(*c.ops.checkpoint_interval_s == 1800);
    CHECK(*c.ops.pue == 1.2);
    CHECK(*c.ops.usd_per_kwh == 0.1);
    CHECK(*c.ops.host_power_w == 3000);
    CHECK(*c.ops.network_power_w == 200);
    CHECK(*c.ops.gpu_power_w == 650);
    const ClusterSpec back = cluster_from_json_text(to_json_text(c), "c.json");
    CHECK(to_json_text(back) == to_json_text(c));
    CHECK(*back.ops.checkpoint_Bps == 50e9);

    expect_error([] { cluster_text(R"(, "interruptions_per_gpu_hour": -0.001)"); }, "cluster.interruptions_per_gpu_hour",
                 "must be a rate in [0, 1]");
    expect_error([] { cluster_text(R"(, "pue": 0.9)"); }, "cluster.pue", "must be a power usage effectiveness in [1, 10]");
    expect_error([] { cluster_text(R"(, "energy_usd_per_kwh": -1)"); }, "cluster.energy_usd_per_kwh", "non-negative");
    // JSON has no NaN: as text the reader refuses it at its line and column, as a string by its key.
    CHECK_THROWS_AS(cluster_text(R"(, "energy_usd_per_kwh": NaN)"), InputError);
    expect_error([] { cluster_text(R"(, "energy_usd_per_kwh": "NaN")"); }, "cluster.energy_usd_per_kwh", "number");
    expect_error([] { cluster_text(R"(, "restart_s": -5)"); }, "cluster.restart_s", "non-negative");
    expect_error([] { cluster_text(R"(, "checkpoint_gbyte_per_s": 0)"); }, "cluster.checkpoint_gbyte_per_s", "positive");
    expect_error([] { cluster_text(R"(, "checkpoint_interval_s": 0)"); }, "cluster.checkpoint_interval_s", "positive");
    expect_error([] { cluster_text(R"(, "gpu_power_w": 0)"); }, "cluster.gpu_power_w", "positive");
    expect_error([] { cluster_text(R"(, "host_power_w_per_node": -1)"); }, "cluster.host_power_w_per_node", "non-negative");
    expect_error([] { cluster_text(R"(, "checkpoint_async": 1)"); }, "cluster.checkpoint_async", "");
    expect_error([] { cluster_text(R"(, "pue_factor": 1.2)"); }, "cluster.pue_factor", "is not a known key");
}

TEST_CASE("the default interruption rate is Llama 3's", "[planner][goodput]") {
    // 419 interruptions / (54 days x 24 h x 16,384 GPUs) = 419 / 21,233,664 GPU-hours.
    CHECK(kDefaultInterruptionsPerGpuHour == Approx(1.97328e-5).epsilon(1e-5));
    // At 16,384 GPUs that is one every 3.09 hours ("one failure every three hours").
    CHECK(1.0 / (kDefaultInterruptionsPerGpuHour * 16384) == Approx(3.0930).epsilon(1e-4));
}

TEST_CASE("Young/Daly interval and expected lost work by hand", "[planner][goodput]") {
    // sqrt(2 x 50 s x 10,000 s) = sqrt(1e6) = 1000 s.
    CHECK(young_daly_interval_s(50, 10000) == Approx(1000));
    // Asynchronous: no shorter than the write (1500 s) that must finish first.
    CHECK(young_daly_interval_s(50, 10000, 1500) == Approx(1500));
    CHECK(std::isinf(young_daly_interval_s(50, std::numeric_limits<double>::infinity())));
    // Sync: the failure falls uniformly over interval + stall: (1000 + 50) / 2 = 525 s.
    CHECK(expected_lost_work_s(1000, 50, 50, false) == Approx(525));
    // Async: half an interval plus the write the last finished checkpoint lags by: 500 + 300.
    CHECK(expected_lost_work_s(1000, 2, 300, true) == Approx(800));
}

TEST_CASE("goodput of a run by hand", "[planner][goodput]") {
    // 900 GPUs at 1e-4 per GPU-hour: 0.09 per hour, MTBF 40,000 s. Stall 50 s: interval
    // sqrt(2 x 50 x 40,000) = 2000 s; 1e6 s of work = 500 checkpoints = 25,000 s of stalls. Each
    // failure: 575 s restart + (2000 + 50) / 2 = 1025 s lost = 1600 s, 4 % of the wall time.
    // wall = 1,025,000 / 0.96 = 1,067,708.33 s; failures = wall / 40,000 = 26.6927.
    GoodputInputs in;
    in.work_s = 1e6;
    in.gpus = 900;
    in.interruptions_per_gpu_hour = 1e-4;
    in.restart_s = 575;
    in.checkpoint_write_s = in.checkpoint_stall_s = 50;
    const Goodput g = goodput(in);
    CHECK(g.mtbf_s == Approx(40000));
    CHECK(g.interval_s == Approx(2000));
    CHECK(g.checkpoints == Approx(500));
    CHECK(g.checkpoint_s == Approx(25000));
    CHECK(g.lost_per_failure_s == Approx(1025));
    CHECK(g.wall_s == Approx(1067708.333));
    CHECK(g.failures == Approx(26.692708));
    CHECK(g.goodput == Approx(0.96 / 1.025));
    CHECK(g.wall_s == Approx(in.work_s + g.checkpoint_s + g.restart_total_s + g.lost_total_s));

    // A fixed interval replaces Young/Daly: 4000 s -> 250 checkpoints, 2025 s lost per failure.
    in.interval_s = 4000;
    const Goodput f = goodput(in);
    CHECK(f.checkpoints == Approx(250));
    CHECK(f.wall_s == Approx((1e6 + 12500) / (1 - 2600.0 / 40000)));

    // No failures with a fixed interval: only the stalls cost, 4000 / 4050.
    in.interruptions_per_gpu_hour = 0;
    CHECK(goodput(in).goodput == Approx(4000.0 / 4050.0));
    // ... and with Young/Daly no checkpoint is worth taking: goodput 1.
    in.interval_s = 0;
    CHECK(goodput(in).goodput == 1);
    // Failures faster than a restart: it never finishes.
    in.interruptions_per_gpu_hour = 10;
    CHECK_FALSE(goodput(in).converges);
}

TEST_CASE("checkpoint size and write bandwidth of a plan", "[planner][goodput]") {
    ModelSpec m = test::gpt_shape("g", 4, 1024, 16, 32000, 1024);
    const double n = static_cast<double>(param_counts(m).total);
    PlanSpec p;
    p.global_batch = 8;
    CHECK(checkpoint_bytes(m, p) == Approx(14 * n));  // bf16 weights 2 + fp32 master 4 + m 4 + v 4
    p.exp_avg_dtype = p.exp_avg_sq_dtype = Precision::bf16;
    CHECK(checkpoint_bytes(m, p) == Approx(10 * n));  // 2 + 4 + 2 + 2
    p.precision = Precision::fp32;
    p.exp_avg_dtype = p.exp_avg_sq_dtype = Precision::fp32;
    CHECK(checkpoint_bytes(m, p) == Approx(12 * n));  // the weights are the master copy: 4 + 4 + 4
    p.precision = Precision::bf16;

    ClusterSpec c;
    c.name = "c";
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 2;
    c.gpus_per_node = 8;
    hwdb::HardwareView hw;
    hw.ssd.seq_write_Bps = 2e9;
    hw.node.ssd_count = 4;
    // Node SSDs: 2 nodes x 4 drives x 2 GB/s = 16 GB/s.
    GoodputInputs in = goodput_inputs(m, c, p, hw, 1000);
    CHECK(in.checkpoint_write_s == Approx(14 * n / 16e9));
    CHECK(in.checkpoint_stall_s == in.checkpoint_write_s);
    // A stated file system wins: 100 GB/s.
    c.ops.checkpoint_Bps = 100e9;
    CHECK(goodput_inputs(m, c, p, hw, 1000).checkpoint_write_s == Approx(14 * n / 100e9));
    // Async: the stall is a GPU's share (1/16) over its 25 GB/s D2H link.
    c.ops.checkpoint_async = true;
    hw.d2h = hwdb::BandwidthFit{0, 25e9, hwdb::Provenance::measured};
    CHECK(goodput_inputs(m, c, p, hw, 1000).checkpoint_stall_s == Approx(14 * n / 16 / 25e9));
    // Nothing known: Llama 3's storage per GPU, 2 TB/s / 16,384 x 16 GPUs.
    c.ops = {};
    hw = {};
    CHECK(goodput_inputs(m, c, p, hw, 1000).checkpoint_write_s == Approx(14 * n / (2e12 / 16384 * 16)));
}

TEST_CASE("energy of a synthetic two-state timeline by hand", "[planner][energy]") {
    // 16 GPUs, a 10 s step: 120 GPU-seconds computing at 700 W, 40 idle at 105 W; 2 nodes at
    // 1000 W; PUE 1.5. GPUs 84,000 + 4,200 = 88,200 J; nodes 20,000 J; x 1.5 = 162,300 J.
    PowerModel pm;
    pm.gpu_compute_w = 700;
    pm.gpu_comm_w = 350;
    pm.gpu_idle_w = 105;
    pm.node_w = 1000;
    pm.nodes = 2;
    pm.pue = 1.5;
    pm.usd_per_kwh = 0.1;
    GpuStateSeconds s;
    s.compute_s = 120;
    s.idle_s = 40;
    const StepEnergy e = step_energy(pm, s, 10, 1e6);
    CHECK(e.gpu_j == Approx(88200));
    CHECK(e.node_j == Approx(20000));
    CHECK(e.facility_j == Approx(162300));
    CHECK(e.per_token_j == Approx(0.1623));
    CHECK(e.mean_power_w == Approx(16230));
    // An hour at that power: 16.23 kWh, $1.623 at $0.10.
    const RunEnergy r = run_energy(pm, e, 3600);
    CHECK(r.kwh == Approx(16.23));
    CHECK(r.usd == Approx(1.623));
}

TEST_CASE("power model: TDP, overrides and the per-node defaults", "[planner][energy]") {
    ClusterSpec c;
    c.name = "c";
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 2;
    c.gpus_per_node = 8;
    hwdb::HardwareView hw;
    hw.gpu.tdp_w = 700;
    hw.node.nic_count = 8;
    PowerModel pm = power_model(c, hw);
    CHECK(pm.gpu_compute_w == 700);
    CHECK(pm.gpu_comm_w == 350);   // 0.5 x
    CHECK(pm.gpu_idle_w == 105);   // 0.15 x
    CHECK(pm.node_w == Approx(4600 + 400));  // (10.2 kW - 8 x 700 W) + 8 NICs x 50 W
    CHECK(pm.pue == 1.58);
    CHECK(pm.usd_per_kwh == 0.0806);
    c.ops.gpu_power_w = 600;
    c.ops.host_power_w = 2000;
    c.ops.network_power_w = 0;
    c.ops.pue = 1.1;
    pm = power_model(c, hw);
    CHECK(pm.gpu_idle_w == Approx(90));
    CHECK(pm.node_w == 2000);
    CHECK(pm.pue == 1.1);
    hw.gpu.tdp_w = 0;
    c.ops.gpu_power_w.reset();
    CHECK_FALSE(power_model(c, hw).known);
}

TEST_CASE("the engine's GPU state seconds split every GPU's step", "[planner][energy]") {
    ModelSpec m = test::gpt_shape("g", 8, 1024, 16, 32000, 1024);
    m.max_position = 1024;
    ClusterSpec c;
    c.name = "c";
    c.gpu = "H100-SXM5-80GB";
    c.node = "DGX-H100";
    c.nodes = 1;
    c.gpus_per_node = 8;
    PlanSpec p;
    p.tp = 2;
    p.pp = 2;
    p.dp = 2;
    p.micro_batch = 1;
    p.global_batch = 16;
    validate_plan(m, c, p, "test");
    auto db = hwdb::Database::open(hwdb::default_db_path());
    const auto hw = db.view(c.gpu, c.node, c.intra_link, c.nic, c.ssd, c.cpu);
    const SimSummary s = simulate_plan(m, c, p, hw);
    REQUIRE_FALSE(s.oom);
    // Compute + comm + idle = 8 GPUs x the step; a pipeline has a bubble, so some is idle.
    CHECK(s.gpu_compute_s + s.gpu_comm_s + s.gpu_idle_s == Approx(8 * s.step_time_s).epsilon(1e-6));
    CHECK(s.gpu_idle_s > 0);
    CHECK(s.gpu_compute_s > s.gpu_idle_s);
}

TEST_CASE("quantiles, classes and coverage on a synthetic residual set", "[planner][interval]") {
    // Type 7 on 1..10: q 0.1 -> h = 0.9 -> 1.9; q 0.9 -> h = 8.1 -> 9.1 (numpy.quantile gives the same).
    const std::vector<double> x{10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
    CHECK(quantile(x, 0.1) == Approx(1.9));
    CHECK(quantile(x, 0.9) == Approx(9.1));
    CHECK(quantile(x, 0.5) == Approx(5.5));
    CHECK(quantile({3.0}, 0.9) == 3.0);
    CHECK(std::isnan(quantile({}, 0.5)));

    ResidualTable t;
    for (int i = 1; i <= 8; ++i) t.step.push_back({"s" + std::to_string(i), "Hopper", "", false, 16, 1.0 + 0.1 * i});
    for (int i = 1; i <= 3; ++i) t.step.push_back({"l" + std::to_string(i), "Hopper", "", false, 2048, 2.0});
    // Split conformal, 80 %: the floor((n+1) 0.1)-th and ceil((n+1) 0.9)-th smallest, clamped to 1..n.
    // On 1..19 (n 19): the 2nd and 18th; on 1..10: floor 1.1 = 1st, ceil 9.9 = 10th.
    std::vector<double> y;
    for (int i = 19; i >= 1; --i) y.push_back(i);
    CHECK(conformal_bounds(y, 0.8).first == 2.0);
    CHECK(conformal_bounds(y, 0.8).second == 18.0);
    CHECK(conformal_bounds(x, 0.8).first == 1.0);
    CHECK(conformal_bounds(x, 0.8).second == 10.0);
    CHECK(conformal_bounds(x, 0.5).first == 2.0);  // floor(11 x 0.25) = 2nd, ceil(11 x 0.75) = 9th
    CHECK(conformal_bounds(x, 0.5).second == 9.0);

    // 8 small Hopper runs: their own class, ratios 1.1..1.8; floor(0.9) = 0 -> the 1st, ceil(8.1) =
    // 9 -> the 8th: 1.1 and 1.8.
    StepInterval iv = step_interval(t, "Hopper", false, 32);
    REQUIRE(iv.available);
    CHECK(iv.cls == "Hopper dense <=64 GPUs");
    CHECK(iv.n == 8);
    CHECK(iv.lo == Approx(1.1));
    CHECK(iv.hi == Approx(1.8));
    // 3 large runs are too few: the class widens to every Hopper dense run (11): sorted
    // 1.1..1.8, 2, 2, 2; floor(1.2) = 1st -> 1.1, ceil(10.8) = 11th -> 2.0.
    iv = step_interval(t, "Hopper", false, 4096);
    CHECK(iv.cls == "Hopper dense");
    CHECK(iv.n == 11);
    CHECK(iv.lo == Approx(1.1));
    CHECK(iv.hi == Approx(2.0));
    // No Ampere run: all 11.
    CHECK(step_interval(t, "Ampere", true, 64).cls == "all");
    // A framework preset: its own class once it holds 8 runs. Eight nemo runs at 1.0..1.7 beside
    // the 11 above: a nemo plan on 16 GPUs takes them (the 1st and 8th: 1.0, 1.7); a plan of
    // another framework, or of none, skips them for the classes above, which now hold the nemo
    // runs too (19 Hopper dense: 1.0..1.8, 1.1.., 2, 2, 2).
    ResidualTable f = t;
    for (int i = 0; i < 8; ++i) f.step.push_back({"n" + std::to_string(i), "Hopper", "nemo", false, 16, 1.0 + 0.1 * i});
    iv = step_interval(f, "Hopper", false, 16, "nemo");
    CHECK(iv.cls == "Hopper nemo dense <=64 GPUs");
    CHECK(iv.n == 8);
    CHECK(iv.lo == Approx(1.0));
    CHECK(iv.hi == Approx(1.7));
    CHECK(step_interval(f, "Hopper", false, 4096, "nemo").cls == "Hopper nemo dense");  // the scale class has none
    CHECK(step_interval(f, "Hopper", false, 16, "torchtitan").cls == "Hopper dense <=64 GPUs");
    CHECK(step_interval(f, "Hopper", false, 16, "torchtitan").n == 16);
    CHECK(step_interval(f, "Hopper", false, 16).n == 16);
    // Fewer than 8 in all: no interval.
    ResidualTable few;
    few.step.push_back({"a", "Hopper", "", false, 8, 1.0});
    CHECK_FALSE(step_interval(few, "Hopper", false, 8).available);

    // Leave-one-out on ratios 1..9 (one class of 9): the other 8 give [their min, their max], so
    // only leaving out 1 or 9 puts it outside. Coverage 7 / 9 (type-7 quantiles gave 5 / 9).
    ResidualTable loo;
    for (int i = 1; i <= 9; ++i) loo.step.push_back({std::to_string(i), "Hopper", "", false, 8, static_cast<double>(i)});
    CHECK(coverage(loo) == Approx(7.0 / 9.0));
}

TEST_CASE("memory verdicts against the suite's memory error", "[planner][interval]") {
    ResidualTable t;
    t.memory = {{"a", 0.05}, {"b", -0.15}};  // mean |error| = 0.10
    CHECK(memory_error(t) == Approx(0.10));
    CHECK(std::string(memory_verdict(60, 80, 0.1)) == "fits");
    CHECK(std::string(memory_verdict(75, 80, 0.1)) == "borderline");   // 5 / 80 = 6.25 % < 10 %
    CHECK(std::string(memory_verdict(85, 80, 0.1)) == "borderline");
    CHECK(std::string(memory_verdict(100, 80, 0.1)) == "does not fit");  // 25 % over
    CHECK(std::string(memory_verdict(75, 80, 0)) == "fits");
}

TEST_CASE("residual table: canonical JSON round trip and strict reading", "[planner][interval]") {
    ResidualTable t;
    t.calibration = "fitted";
    t.step = {{"x", "Hopper", "nemo", true, 64, 1.25}, {"y", "Ampere", "", false, 1024, 0.9}};
    t.memory = {{"x", -0.05}};
    const std::string text = to_json_text(t);
    const ResidualTable back = residuals_from_json_text(text, "r.json");
    CHECK(to_json_text(back) == text);
    REQUIRE(back.step.size() == 2);
    CHECK(back.step[0].moe);
    CHECK(back.step[0].framework == "nemo");
    CHECK(back.step[1].ratio == 0.9);
    try {
        residuals_from_json_text(R"({"schema": 1, "split": "test", "step": [{"id": "a", "arch": "H", "gpus": 8, "ratio": -1}], "memory": []})",
                                 "r.json");
        FAIL("a negative ratio was accepted");
    } catch (const InputError& e) {
        CHECK(e.path() == "step[0].ratio");
    }
    // The built-in table reads.
    const std::string builtin = default_residuals_json();
    if (!builtin.empty()) CHECK(residuals_from_json_text(builtin, "built-in").step.size() >= kMinClassSize);
}

TEST_CASE("a run's outlook scales by the interval and adds the energy bill when owned", "[planner][interval][energy]") {
    ModelSpec m = test::gpt_shape("g", 4, 1024, 16, 32000, 1000);
    ClusterSpec c;
    c.name = "c";
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 2;
    c.gpus_per_node = 8;
    c.price_per_gpu_hour = 3;
    hwdb::HardwareView hw;
    hw.gpu.arch = "Hopper (sm_90)";
    hw.gpu.tdp_w = 700;
    hw.gpu.hbm_bytes = 80e9;
    hw.node.nic_count = 8;
    RankedPlan rp;
    rp.plan.dp = 16;
    rp.plan.global_batch = 16;
    rp.estimate.step_time_s = 10;          // 16 x 1000 tokens per 10 s step
    rp.estimate.tokens_per_s = 1600;
    rp.estimate.compute_s = 8;
    rp.estimate.exposed_comm_s = 1;
    rp.estimate.hbm_bytes = 40e9;
    ResidualTable t;
    for (int i = 1; i <= 8; ++i) t.step.push_back({std::to_string(i), "Hopper", "", false, 16, 1.0 + 0.1 * i});  // 1.1 .. 1.8 (8 runs: min, max)
    const RunOutlook o = run_outlook(m, c, hw, rp, 1.6e7, &t, true);
    REQUIRE(o.interval.available);
    CHECK(o.step_time_s.lo == Approx(11.0));
    CHECK(o.step_time_s.hi == Approx(18.0));
    CHECK(o.tokens_per_s.lo == Approx(1600 / 1.8));  // the slow end
    CHECK(o.tokens_per_s.hi == Approx(1600 / 1.1));
    CHECK(o.wall_s.hi / o.wall_s.mid == Approx(1.8));
    CHECK(o.goodput.wall_s == Approx(1e4 / o.goodput.goodput));  // work = 1.6e7 / 1600 = 1e4 s
    // Per state, from the estimate: 8 s computing, 1 s communicating, 1 s idle on each of 16 GPUs;
    // 2 nodes x 5000 W; x 1.58.
    CHECK(o.energy.gpu_j == Approx(16 * (8 * 700 + 1 * 350 + 1 * 105)));
    CHECK(o.energy.facility_j == Approx((16 * 6055.0 + 2 * 5000 * 10) * 1.58));
    // Owned: 16 GPUs x $3/h over the wall time, plus the energy.
    CHECK(o.rental_usd.mid == Approx(16 * 3 * o.goodput.wall_s / 3600));
    CHECK(o.cost_usd.mid == Approx(o.rental_usd.mid + o.run_energy.usd));
    CHECK(std::string(o.memory) == "fits");
    // Without residuals: no interval, lo = mid = hi.
    const RunOutlook p = run_outlook(m, c, hw, rp, 1.6e7, nullptr, false);
    CHECK_FALSE(p.interval.available);
    CHECK(p.wall_s.lo == p.wall_s.hi);
    CHECK(p.cost_usd.mid == p.rental_usd.mid);
}
