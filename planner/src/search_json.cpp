// JSON of a search (what `strata plan --json` writes) and the merge of sharded searches.
#include <nlohmann/json.hpp>

#include <algorithm>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/planner/search.hpp"
#include "strata/lowering/spec_io.hpp"

namespace strata::planner {

using nlohmann::ordered_json;

namespace {

double round6(double v) { return std::round(v * 1e6) / 1e6; }

ordered_json plan_json(const RankedPlan& p) {
    ordered_json j;
    j["plan"] = ordered_json::parse(sim::to_json_text(p.plan));
    ordered_json e;
    e["step_time_s"] = round6(p.estimate.step_time_s);
    e["tokens_per_s"] = std::round(p.estimate.tokens_per_s);
    e["mfu"] = round6(p.estimate.mfu);
    e["bubble_s"] = round6(p.estimate.bubble_s);
    e["exposed_comm_s"] = round6(p.estimate.exposed_comm_s);
    e["recompute_s"] = round6(p.estimate.recompute_s);
    e["optimizer_s"] = round6(p.estimate.optimizer_s);
    e["offload_s"] = round6(p.estimate.offload_s);
    e["hbm_bytes"] = std::llround(p.estimate.hbm_bytes);
    e["fits"] = p.estimate.fits;
    j["estimate"] = e;
    j["simulated"] = p.simulated;
    if (p.simulated) {
        ordered_json s;
        s["step_time_s"] = round6(p.sim.step_time_s);
        s["tokens_per_s"] = std::round(p.sim.tokens_per_s);
        s["tflops_per_gpu"] = round6(p.sim.tflops_per_gpu);
        s["mfu"] = round6(p.sim.mfu);
        s["bubble_fraction"] = round6(p.sim.bubble_fraction);
        s["exposed_comm_s"] = round6(p.sim.exposed_comm_s);
        s["peak_hbm_bytes"] = std::llround(p.sim.peak_hbm_bytes);
        s["peak_cpu_bytes"] = std::llround(p.sim.peak_cpu_bytes);
        s["peak_ssd_bytes"] = std::llround(p.sim.peak_ssd_bytes);
        s["oom"] = p.sim.oom;
        s["critical_path"] = p.sim.critical_path;
        j["simulation"] = s;
    }
    j["why"] = p.why;
    return j;
}

double plan_rate(const ordered_json& p) {
    if (p.value("simulated", false) && !p["simulation"].value("oom", false)) return p["simulation"]["tokens_per_s"].get<double>();
    return -1;
}

}  // namespace

std::string search_to_json(const sim::ModelSpec& m, const sim::ClusterSpec& c, const SearchResult& r) {
    ordered_json j;
    j["model"] = ordered_json::parse(sim::to_json_text(m));
    j["cluster"] = ordered_json::parse(sim::to_json_text(c));
    ordered_json k;
    k["considered"] = r.space.considered;
    k["invalid"] = r.space.invalid;
    k["valid"] = r.space.valid;
    k["pruned_memory"] = r.pruned_memory;
    k["estimated"] = r.estimated;
    k["simulated"] = r.simulated;
    k["simulated_oom"] = r.simulated_oom;
    k["too_large_to_simulate"] = r.too_large_to_simulate;
    k["cancelled"] = r.cancelled;
    j["counts"] = k;
    ordered_json plans = ordered_json::array();
    for (const auto& p : r.ranked) plans.push_back(plan_json(p));
    j["plans"] = plans;
    return j.dump(2) + "\n";
}

std::string merge_search_json(const std::vector<std::string>& texts, const std::vector<std::string>& files, int top_k) {
    ordered_json out;
    ordered_json counts = ordered_json::object();
    std::vector<ordered_json> plans;
    for (std::size_t i = 0; i < texts.size(); ++i) {
        const std::string& file = files[i];
        parse_json_text(texts[i], file);  // syntax and duplicate keys, with their positions
        const ordered_json j = ordered_json::parse(texts[i]);  // again, keeping the key order
        if (!j.is_object() || !j.contains("counts") || !j.contains("plans") || !j.contains("model") || !j.contains("cluster"))
            throw InputError(file, "", "is not a `strata plan --json` output (needs model, cluster, counts, plans)");
        if (!j["counts"].is_object()) throw InputError(file, "counts", "must be an object");
        if (!j["plans"].is_array()) throw InputError(file, "plans", "must be an array");
        if (i == 0) {
            out["model"] = j["model"];
            out["cluster"] = j["cluster"];
        } else if (j["model"] != out["model"] || j["cluster"] != out["cluster"]) {
            throw InputError(file, "model", "differs from " + files[0] + ": shards of one search must share model and cluster");
        }
        for (auto it = j["counts"].begin(); it != j["counts"].end(); ++it) {
            if (it.value().is_boolean()) counts[it.key()] = counts.value(it.key(), false) || it.value().get<bool>();
            else if (it.value().is_number_integer() && it.value().get<long long>() >= 0)
                counts[it.key()] = counts.value(it.key(), 0LL) + it.value().get<long long>();
            else throw InputError(file, "counts." + it.key(), "must be a non-negative integer or true/false");
        }
        for (std::size_t k = 0; k < j["plans"].size(); ++k) {
            const ordered_json& p = j["plans"][k];
            const std::string at = "plans[" + std::to_string(k) + "]";
            if (!p.is_object() || !p.contains("estimate") || !p["estimate"].is_object() || !p["estimate"].contains("step_time_s") ||
                !p["estimate"]["step_time_s"].is_number())
                throw InputError(file, at + ".estimate.step_time_s", "must be a number");
            if (p.contains("simulated") && !p["simulated"].is_boolean()) throw InputError(file, at + ".simulated", "must be true or false");
            if (p.value("simulated", false)) {
                if (!p.contains("simulation") || !p["simulation"].is_object()) throw InputError(file, at + ".simulation", "must be an object");
                const ordered_json& sm = p["simulation"];
                if (!sm.contains("tokens_per_s") || !sm["tokens_per_s"].is_number())
                    throw InputError(file, at + ".simulation.tokens_per_s", "must be a number");
                if (sm.contains("oom") && !sm["oom"].is_boolean()) throw InputError(file, at + ".simulation.oom", "must be true or false");
            }
            plans.push_back(p);
        }
    }
    std::stable_sort(plans.begin(), plans.end(), [](const ordered_json& a, const ordered_json& b) {
        double ra = plan_rate(a), rb = plan_rate(b);
        if (ra != rb) return ra > rb;
        return a["estimate"]["step_time_s"].get<double>() < b["estimate"]["step_time_s"].get<double>();
    });
    if (top_k > 0 && plans.size() > static_cast<std::size_t>(top_k)) plans.resize(static_cast<std::size_t>(top_k));
    out["counts"] = counts;
    out["plans"] = plans;
    return out.dump(2) + "\n";
}

}  // namespace strata::planner
