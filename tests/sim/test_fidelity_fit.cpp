// The calibration fit on synthetic data (known multipliers recovered, the interference term on
// its grid) and calibration.json's reading and canonical round trip.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "strata/common/error.hpp"
#include "strata/sim/fidelity.hpp"

using namespace strata;
using namespace strata::sim;

namespace {

// A train row of a synthetic fit: simulated at `applied` in `step_s` seconds, of which `class_s`
// per calibration class (the rest is other_s); the source published `published_step_s`. Rates are
// 1000 / step, so a rate row errs by the inverse ratio.
FidelityRow synthetic_row(std::size_t i, Quantity q, const Calibration& applied, double step_s, double published_step_s,
                          const std::array<double, Calibration::kFactors>& class_s) {
    FidelityRow r;
    r.id = "e" + std::to_string(i);
    r.split = "train";
    r.quantity = q;
    r.applied = applied;
    r.step_time_s = step_s;
    r.class_s = class_s;
    double classified = 0;
    for (double t : class_s) classified += t;
    r.other_s = std::max(0.0, step_s - classified);
    const bool time = q == Quantity::step_time_s;
    r.published = time ? published_step_s : 1000.0 / published_step_s;
    r.predicted = time ? step_s : 1000.0 / step_s;
    r.error = r.predicted / r.published - 1;
    return r;
}

}  // namespace

TEST_CASE("fidelity fit recovers known multipliers on synthetic data", "[fidelity]") {
    // Synthetic entries: step time = sum over classes of (seconds of that class x its multiplier),
    // in Calibration::at order (gemm, gemm_fp8, attention, memory_bound, collective, p2p). The
    // "published" times were generated with gemm = 1.3 and p2p = 1.6; elsewhere the truth is 1. The
    // MAPE is zero exactly there. A critical-path-like nonlinearity (the step never drops below a
    // floor of 1 s) checks that re-simulating each round corrects the linear surrogate.
    using Classes = std::array<double, Calibration::kFactors>;
    const std::vector<Classes> ents = {{5, 0, 1, 1, 0.5, 0.1}, {2, 0, 2, 0.5, 1, 0.3}, {8, 0, 0.5, 2, 2, 0},
                                       {1, 0, 0.2, 0.3, 3, 0.5},  {3, 0, 1.5, 1, 0.2, 0.2}, {6, 0, 0.1, 0.6, 0.8, 1.0},
                                       {0.2, 0, 0.1, 0.1, 0.1, 2.0}};
    auto step = [](const Classes& c, const Calibration& f) {
        double t = 0;
        for (int i = 0; i < Calibration::kFactors; ++i) t += c[static_cast<std::size_t>(i)] * f.at(i);
        return std::max(t, 1.0);
    };
    Calibration truth;
    truth.gemm = 1.3;
    truth.p2p = 1.6;
    int calls = 0;
    auto evaluate = [&](const Calibration& f) {
        ++calls;
        std::vector<FidelityRow> rows;
        for (std::size_t i = 0; i < ents.size(); ++i) {
            Classes cls{};
            for (int c = 0; c < Calibration::kFactors; ++c)
                cls[static_cast<std::size_t>(c)] = ents[i][static_cast<std::size_t>(c)] * f.at(c);
            const Quantity q = i % 2 ? Quantity::step_time_s : Quantity::tokens_per_s;  // both error forms
            rows.push_back(synthetic_row(i, q, f, step(ents[i], f), step(ents[i], truth), cls));
        }
        return rows;
    };
    // The surrogate is exact where no floor binds: a row at the identity predicts its error at truth.
    const std::vector<FidelityRow> at_identity = evaluate({});
    CHECK(surrogate_error(at_identity[0], truth) == Approx(0.0).margin(1e-12));

    const FitResult fit = fit_calibration(evaluate);
    CHECK(fit.calibration.gemm == Approx(1.3).margin(0.02));
    CHECK(fit.calibration.p2p == Approx(1.6).margin(0.05));
    CHECK(fit.calibration.attention == Approx(1.0).margin(0.05));
    CHECK(fit.calibration.gemm_fp8 == 1.0);  // no FP8 work: the flat direction is never moved
    CHECK(fit.before > 0.1);
    CHECK(fit.after < 0.01);
    CHECK(fit.simulations >= 2);
    CHECK(fit.simulations == calls - 1);

    // Deterministic, and an evaluation that ignores the multipliers leaves the identity.
    CHECK(fit_calibration(evaluate).calibration.gemm == fit.calibration.gemm);
    // A publisher-reported regression does not pull the fit: a row published 2.3x slower than the
    // truth, flagged, leaves the result exactly where it was; unflagged, it moves it.
    auto with_outlier = [&](bool flagged) {
        return [&, flagged](const Calibration& f) {
            std::vector<FidelityRow> rows = evaluate(f);
            FidelityRow odd = synthetic_row(99, Quantity::tokens_per_s, f, step(ents[0], f), 2.3 * step(ents[0], truth), rows[0].class_s);
            if (flagged) odd.publisher_regression = "https://example.org/regression";
            rows.push_back(odd);
            return rows;
        };
    };
    const FitResult flagged = fit_calibration(with_outlier(true));
    CHECK(flagged.calibration.gemm == fit.calibration.gemm);
    CHECK(flagged.calibration.p2p == fit.calibration.p2p);
    CHECK(flagged.after == Approx(fit.after));
    CHECK(fit_calibration(with_outlier(false)).after > 0.05);
    auto flat = [&](const Calibration&) {
        std::vector<FidelityRow> rows = evaluate({});
        for (FidelityRow& r : rows) r.class_s.fill(0), r.other_s = r.step_time_s;
        return rows;
    };
    const FitResult none = fit_calibration(flat);
    CHECK(none.calibration.is_identity());
    CHECK(none.after == Approx(none.before));

    // A class too small to matter: the published times were made with memory_bound = 0.6, but no
    // row spends more than 0.1 % of its time there, so the best factor lowers the MAPE by less than
    // min_gain (0.1 point) and the fit keeps the datasheet value.
    auto tiny = [&](const Calibration& f) {
        std::vector<FidelityRow> rows;
        for (std::size_t i = 0; i < ents.size(); ++i) {
            Classes e = ents[i];
            const double total = e[0] + e[1] + e[2] + e[4] + e[5];
            e[3] = 0.001 * total;
            Classes cls{};
            for (int c = 0; c < Calibration::kFactors; ++c) cls[static_cast<std::size_t>(c)] = e[static_cast<std::size_t>(c)] * f.at(c);
            Calibration t = truth;
            t.memory_bound = 0.6;
            rows.push_back(synthetic_row(i, Quantity::step_time_s, f, step(e, f), step(e, t), cls));
        }
        return rows;
    };
    const FitResult pruned = fit_calibration(tiny);
    CHECK(pruned.calibration.memory_bound == 1.0);
    CHECK(pruned.calibration.gemm == Approx(1.3).margin(0.02));  // the factors that matter still move
    FitOptions keep_all;
    keep_all.min_gain = 0;
    // Without the rule the factor moves, and not even towards 0.6: the direction is flat.
    CHECK(fit_calibration(tiny, keep_all).calibration.memory_bound != 1.0);
}

TEST_CASE("fidelity fit finds the interference term on its grid", "[fidelity]") {
    // Synthetic rows whose step time is gemm_s * gemm + overlapped_s * overlap (interference adds
    // time in proportion to the compute that ran beside transfers), published with gemm = 1.2 and
    // overlap = 0.2. The grid holds 0.2, so the fit lands there with zero error; the row whose
    // overlapped time is zero pins gemm, the others then pin the term.
    const std::vector<std::pair<double, double>> ents = {{5, 0}, {2, 4}, {8, 1}, {1, 3}, {3, 2}};
    auto step = [](const std::pair<double, double>& e, const Calibration& f) { return e.first * f.gemm + e.second * (1 + f.overlap); };
    Calibration truth;
    truth.gemm = 1.2;
    truth.overlap = 0.2;
    auto evaluate = [&](const Calibration& f) {
        std::vector<FidelityRow> rows;
        for (std::size_t i = 0; i < ents.size(); ++i) {
            std::array<double, Calibration::kFactors> cls{};
            cls[0] = ents[i].first * f.gemm;
            rows.push_back(synthetic_row(i, Quantity::step_time_s, f, step(ents[i], f), step(ents[i], truth), cls));
        }
        return rows;
    };
    const FitResult fit = fit_calibration_overlap(evaluate);
    CHECK(fit.calibration.overlap == Approx(0.2));
    CHECK(fit.calibration.gemm == Approx(1.2).margin(0.01));
    CHECK(fit.after < 0.005);
    CHECK(fit.before == Approx(fit_calibration(evaluate).before));  // identity, no interference
}

TEST_CASE("calibration.json round trip and strict reading", "[fidelity]") {
    CalibrationRecord r;
    CalibrationGroup all, hopper;
    all.factors.gemm = 1.125;
    all.factors.p2p = 0.75;
    all.train_entries = 33;
    all.train_mape_before = 0.25;
    all.train_mape_after = 0.125;
    hopper.arch = "Hopper";
    hopper.factors.gemm_fp8 = 1.5;
    hopper.factors.host_launch_us = 4.7;
    r.groups = {all, hopper};
    r.fitted = true;
    r.date = "2026-11-22";
    r.note = "test";
    const std::string text = to_json_text(r);
    const CalibrationRecord back = calibration_from_json_text(text, "cal.json");
    REQUIRE(back.groups.size() == 2);
    CHECK(back.for_arch("Volta").gemm == Approx(1.125));  // no group of its own: "*"
    CHECK(back.for_arch("Volta").p2p == Approx(0.75));
    CHECK(back.for_arch("Hopper").gemm_fp8 == Approx(1.5));
    CHECK(back.for_arch("Hopper").gemm == Approx(1.0));
    CHECK(back.for_arch("Hopper").host_launch_us == Approx(4.7));
    CHECK(back.for_arch("Volta").host_launch_us == 0);  // absent: no host model
    CHECK(back.fitted);
    CHECK(back.date == "2026-11-22");
    CHECK(back.groups[0].train_entries == 33);
    CHECK(back.groups[0].train_mape_after == Approx(0.125));
    CHECK(to_json_text(back) == text);
    CHECK(CalibrationRecord{}.for_arch("Hopper").is_identity());
    const char* bad[] = {
        R"({"schema": 2, "groups": [{"arch": "*", "factors": {"gemm": 0}}]})",
        R"({"schema": 2, "groups": [{"arch": "*", "factors": {"gem": 1.1}}]})",
        R"({"schema": 2, "groups": [{"arch": "*", "factors": {"host_launch_us": -1}}]})",
        R"({"schema": 2, "groups": [{"arch": "*", "factors": {"host_launch_us": 1000}}]})",
        R"({"schema": 2, "split": "test", "groups": []})",
        R"({"schema": 1, "factors": {}})",
        R"({"schema": 2})",
        R"({"schema": 2, "groups": [{"arch": "*", "factors": {}}, {"arch": "*", "factors": {}}]})",
    };
    for (const char* t : bad) CHECK_THROWS_AS(calibration_from_json_text(t, "c.json"), InputError);
}

TEST_CASE("architecture families", "[fidelity]") {
    CHECK(arch_family("Hopper") == "Hopper");
    CHECK(arch_family("Blackwell (Grace-Blackwell superchip)") == "Blackwell");
    CHECK(arch_family("Ada Lovelace") == "Ada");
    CHECK(arch_family("") == "");
}

TEST_CASE("a calibration file survives the canonical round trip with a huge value in it", "[fidelity][calibration]") {
    // The calibration fuzzer's find (tests/fuzz/corpus/calibration/huge-mape.json): a train MAPE of
    // 0.327E98 was written cut to 63 characters and read back as another number.
    std::ifstream in(STRATA_SOURCE_DIR "/tests/fuzz/corpus/calibration/huge-mape.json");
    REQUIRE(in);
    const std::string once = to_json_text(calibration_from_json_text(std::string(std::istreambuf_iterator<char>(in), {}), "huge-mape.json"));
    CHECK(to_json_text(calibration_from_json_text(once, "canonical.json")) == once);
    CHECK(calibration_from_json_text(once, "canonical.json").groups[1].train_mape_before == 0.327e98);
}
