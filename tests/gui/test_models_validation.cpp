// The validation view reads a strata.validate/1 report and its two traces (the hand-made fixture
// of tests/data/gui/validate, no runtime needed), overlays them row by row, and refuses a bad
// report with the file, the JSON path and the rule. Also: the capacity layout and axis ticks.
#include <catch2/catch.hpp>

#include <QAbstractItemModelTester>

#include <filesystem>
#include <fstream>

#include "gui_fixtures.hpp"
#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/gui/models/axis.hpp"
#include "strata/gui/models/capacity_view.hpp"
#include "strata/gui/models/validation.hpp"

using namespace strata;
using namespace strata::gui;

namespace {
const std::string kReport = test::kSrc + "/tests/data/gui/validate/report.json";

std::string report_error(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(read_text_file(kReport));
    edit(j);
    try {
        validation_report_from_json_text(j.dump(), "r.json");
    } catch (const InputError& e) {
        return e.what();
    }
    return "";
}
}  // namespace

TEST_CASE("validation: the fixture report reads, with both traces overlaid", "[gui][validation]") {
    const Validation v = load_validation(kReport);
    CHECK(v.report.backend == "cpu");
    CHECK(v.report.steps == 3);
    CHECK(v.report.calibration == "none (uncalibrated datasheet model)");
    CHECK(v.report.step_time_s.predicted == Approx(v.predicted.end_ns() * 1e-9).epsilon(1e-6));
    CHECK(v.report.step_time_s.measured == Approx(v.measured.end_ns() * 1e-9).epsilon(1e-6));
    CHECK(v.report.classes.size() == 5);
    REQUIRE(v.report.memory.size() == 1);
    CHECK(v.report.memory[0].tier == sim::Tier::gpu);
    // Each (rank, stream) row appears twice, predicted above measured.
    REQUIRE(v.overlay.rows().size() == v.predicted.rows().size() + v.measured.rows().size());
    for (std::size_t r = 0; r + 1 < v.overlay.rows().size(); r += 2) {
        const auto& a = v.overlay.rows()[r];
        const auto& b = v.overlay.rows()[r + 1];
        CHECK(a.tag == "predicted");
        CHECK(b.tag == "measured");
        CHECK(a.rank == b.rank);
        CHECK(a.stream == b.stream);
        CHECK(b.spans.size() == a.spans.size());
        // The fixture stretches measured times: its spans start later.
        CHECK(v.overlay.info(r + 1, a.spans.size() - 1).start_ns > v.overlay.info(r, a.spans.size() - 1).start_ns);
    }
    REQUIRE_FALSE(v.predicted_memory.empty());
    REQUIRE_FALSE(v.measured_memory.empty());
    double pp = 0, mp = 0;
    for (const auto& c : v.predicted_memory[0].curves) pp = std::max(pp, c.peak_bytes);
    for (const auto& c : v.measured_memory[0].curves) mp = std::max(mp, c.peak_bytes);
    CHECK(pp == Approx(v.report.memory[0].bytes.predicted));
    CHECK(mp == Approx(v.report.memory[0].bytes.measured));

    ValidationTableModel table;
    QAbstractItemModelTester tester(&table, QAbstractItemModelTester::FailureReportingMode::Fatal);
    table.set_report(v.report);
    CHECK(table.rowCount() == 1 + 5 + 1);
    CHECK(table.data(table.index(0, ValidationTableModel::Error)).toString() == "-8.2 %");
}

TEST_CASE("validation: a bad report names the file, the path and the rule", "[gui][validation]") {
    CHECK(report_error([](nlohmann::json& j) { j["schema"] = "strata.validate/2"; }) ==
          "r.json: schema = \"strata.validate/2\" is not a report this build reads (strata.validate/1)");
    CHECK(report_error([](nlohmann::json& j) { j["stepz"] = 1; }).find("r.json: stepz is not a known key (did you mean \"steps\"?)") == 0);
    CHECK(report_error([](nlohmann::json& j) { j["backend"] = "tpu"; }) == "r.json: backend = \"tpu\" is not one of: cpu, cuda (did you mean \"cpu\"?)");
    CHECK(report_error([](nlohmann::json& j) { j["classes"][1].erase("measured_s"); }) == "r.json: classes[1].measured_s is required");
    CHECK(report_error([](nlohmann::json& j) { j["memory"][0]["tier"] = "hbm"; }).find("r.json: memory[0].tier = \"hbm\" is not one of") == 0);
    CHECK(report_error([](nlohmann::json& j) { j["step_time"]["measured_s"] = -1; }) ==
          "r.json: step_time.measured_s must not be negative (got -1.0)");
    CHECK(report_error([](nlohmann::json& j) { j["steps"] = 0; }) == "r.json: steps must be a positive integer (got 0)");
    CHECK(report_error([](nlohmann::json&) {}).empty());
    CHECK(report_error([](nlohmann::json& j) { j.erase("calibration"); }).empty());  // optional
    CHECK(report_error([](nlohmann::json& j) { j["calibration"] = 1; }) == "r.json: calibration must be a string (got 1)");
}

TEST_CASE("validation: a report whose trace is missing says which file", "[gui][validation]") {
    const auto dir = std::filesystem::temp_directory_path() / "strata-gui-validate-missing";
    std::filesystem::create_directories(dir);
    nlohmann::json j = nlohmann::json::parse(read_text_file(kReport));
    j["measured_trace"] = "nowhere.json";
    std::ofstream((dir / "report.json").string()) << j.dump();
    std::ofstream((dir / "predicted.json").string()) << read_text_file(test::kSrc + "/tests/data/gui/validate/predicted.json");
    CHECK_THROWS_WITH(load_validation((dir / "report.json").string()), Catch::Contains("nowhere.json: cannot be opened"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("capacity: the sweep is set up as the CLI sets it up", "[gui][capacity]") {
    const auto clusters = capacity_clusters(test::hardware(), "", {"H100-SXM5-80GB", "A100-SXM4-80GB"});
    REQUIRE(clusters.size() == 2);
    CHECK(clusters[0].cluster.name == "dgx-h100-x1");  // the smallest bundled 8-GPU H100 node
    CHECK(clusters[0].cluster.price_per_gpu_hour > 0);
    CHECK_THROWS_WITH(capacity_clusters(test::hardware(), "", {"H100-SXM5-8GB"}), Catch::Contains("--gpu"));
    CapacityRequest req;
    req.global_batch = 256;
    const auto o = capacity_options(req);
    CHECK(o.search.space.global_batch == 256);
    CHECK(o.search.space.zero_stages == std::vector<int>{1});
}

TEST_CASE("capacity: the layout groups points by GPU and sorts the Pareto front by time", "[gui][capacity]") {
    planner::CapacityResult r;
    auto pt = [&](const std::string& gpu, int nodes, double days, double cost, bool feasible) {
        planner::CapacityPoint p;
        p.cluster.gpu = gpu;
        p.cluster.nodes = nodes;
        p.cluster.gpus_per_node = 8;
        p.feasible = feasible;
        p.time_s = days * 86400;
        p.cost_usd = cost;
        r.points.push_back(p);
    };
    pt("H100", 4, 10, 300, true);
    pt("A100", 2, 30, 200, true);
    pt("H100", 1, 0, 0, false);
    pt("H100", 2, 20, 250, true);
    for (auto& p : r.points) p.pareto = p.feasible;
    const CapacityLayout l = capacity_layout(r);
    REQUIRE(l.series.size() == 2);
    CHECK(l.series[0].gpu == "H100");
    CHECK(l.series[0].points == std::vector<int>{2, 3, 0});  // by GPU count
    CHECK(l.pareto == std::vector<int>{0, 3, 1});            // fastest first
    CHECK(l.min_gpus == 16);
    CHECK(l.max_gpus == 32);
    CHECK(l.max_days == Approx(30));
}

TEST_CASE("axis: 1-2-5 steps, powers of two, time labels in one unit", "[gui][axis]") {
    CHECK(nice_step(0.7) == Approx(1));
    CHECK(nice_step(1.5) == Approx(2));
    CHECK(nice_step(3) == Approx(5));
    CHECK(nice_step(7000) == Approx(10000));
    const auto ticks = time_ticks(TimeWindow{0, 10'000'000}, 1000, 100);  // 10 ms over 1000 px: 1 ms apart
    REQUIRE(ticks.size() == 11);
    CHECK(ticks[1].label == "1 ms");
    CHECK(time_ticks(TimeWindow{1'000'000, 1'002'000}, 1000, 100)[1].label == "1.0002 ms");
    CHECK(time_label(1'500'000'000, 500'000'000) == "1.5 s");
    CHECK(time_label(2500, 500) == "2.5 us");
    const auto g = log2_ticks(8, 1024, 20);
    CHECK(g.front().label == "8");
    CHECK(g.back().label == "1024");
    CHECK(bytes_label(80e9) == "80 GB");
    const auto d = log10_ticks(3, 700, 10, days_label);
    REQUIRE(d.size() == 7);  // 5, 10, 20, 50, 100, 200, 500
    CHECK(d.front().value == Approx(5));
    CHECK(log10_ticks(3, 700, 3, days_label).size() == 2);  // 10, 100
    CHECK(usd_label(2.5e6) == "$2.5M");
}
