// Shared by the GUI tests: small real scenarios simulated once per process.
#pragma once
#include <string>

#include "strata/gui/models/workbench.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::gui::test {

inline const std::string kSrc = STRATA_SOURCE_DIR;

inline const Hardware& hardware() {
    static const Hardware hw{Settings{}};
    return hw;
}

/// Simulates a bundled model/cluster/plan with the trace kept (as the GUI does).
inline Snapshot snapshot(const std::string& model, const std::string& cluster, const std::string& plan) {
    const auto dir = kSrc + "/scenarios/";
    const sim::ModelSpec m = sim::load_model(dir + "models/" + model + ".json");
    const sim::ClusterSpec c = sim::load_cluster(dir + "clusters/" + cluster + ".json");
    const sim::PlanSpec p = sim::load_plan(dir + "plans/" + plan + ".json");
    const auto view = hardware().view(c, cluster);
    return simulate_snapshot(m, c, p, view, hardware().calibration(view), plan);
}

/// gpt-tiny on the local CPU, two pipeline stages: small, but with every stream kind a step has.
inline const Snapshot& tiny_snapshot() {
    static const Snapshot s = snapshot("gpt-tiny", "local-cpu", "gpt-tiny-pp2");
    return s;
}

}  // namespace strata::gui::test
