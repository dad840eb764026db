// The hwdb JSON document (docs/hwdb.md "Export format"): one codec per row type, strict reading
// through JsonReader (unknown keys are errors naming the file and JSON path), and
// Database::export_json / import_json. Import writes everything in one transaction. The built-in
// seed uses this same format.
#include <nlohmann/json.hpp>

#include "impl.hpp"
#include "sqlite_util.hpp"

namespace strata::hwdb {

using nlohmann::json;

namespace detail {

const std::vector<std::string>& confidence_levels() {
    static const std::vector<std::string> v = {"high", "medium", "low"};
    return v;
}

// Stored names are the ones the seed uses ("scale-up", "switch", "host", "scale-out").
std::string link_kind_name(LinkKind k) { return to_string(k); }
LinkKind link_kind_from_name(const std::string& s) {
    if (s == "scale-up") return LinkKind::scale_up;
    if (s == "switch") return LinkKind::switch_fabric;
    if (s == "scale-out") return LinkKind::scale_out;
    return LinkKind::host;
}

std::string params_to_text(const std::map<std::string, double>& m) { return json(m).dump(); }
std::string labels_to_text(const std::map<std::string, std::string>& m) { return json(m).dump(); }
std::map<std::string, double> params_from_text(const std::string& t) {
    std::map<std::string, double> out;
    json j = json::parse(t.empty() ? "{}" : t, nullptr, false);
    if (j.is_object())
        for (auto it = j.begin(); it != j.end(); ++it)
            if (it->is_number()) out[it.key()] = it->get<double>();
    return out;
}
std::map<std::string, std::string> labels_from_text(const std::string& t) {
    std::map<std::string, std::string> out;
    json j = json::parse(t.empty() ? "{}" : t, nullptr, false);
    if (j.is_object())
        for (auto it = j.begin(); it != j.end(); ++it)
            if (it->is_string()) out[it.key()] = it->get<std::string>();
    return out;
}

// ---- writers: every field, SI units, fixed key order (nlohmann's object is sorted) ----

json to_json(const Gpu& g) {
    json peak = json::object();
    for (int d = 0; d < kDtypeCount; ++d) peak[to_string(static_cast<Dtype>(d))] = g.peak_flops[static_cast<std::size_t>(d)];
    return {{"id", g.id}, {"vendor", g.vendor}, {"arch", g.arch}, {"compute_capability", g.compute_capability},
            {"sm_count", g.sm_count}, {"boost_clock_mhz", g.boost_clock_mhz}, {"l2_bytes", g.l2_bytes},
            {"hbm_bytes", g.hbm_bytes}, {"hbm_Bps", g.hbm_Bps}, {"peak_flops", peak},
            {"scale_up_link", g.scale_up_link}, {"scale_up_per_dir_Bps", g.scale_up_per_dir_Bps},
            {"host_link", g.host_link}, {"tdp_w", g.tdp_w}, {"notes", g.notes}, {"source", g.source},
            {"confidence", g.confidence}};
}
json to_json(const Link& l) {
    return {{"id", l.id}, {"kind", link_kind_name(l.kind)}, {"per_dir_Bps", l.per_dir_Bps},
            {"achievable_Bps", l.achievable_Bps}, {"achievable_fraction", l.achievable_fraction},
            {"latency_ns", l.latency_ns}, {"notes", l.notes}, {"source", l.source}, {"confidence", l.confidence}};
}
json to_json(const Node& n) {
    return {{"id", n.id}, {"gpu_hint", n.gpu_hint}, {"gpus_per_node", n.gpus_per_node}, {"fabric", n.fabric},
            {"intra_link", n.intra_link}, {"nic_count", n.nic_count}, {"nic_link", n.nic_link}, {"cpu", n.cpu},
            {"cpu_dram_bytes", n.cpu_dram_bytes}, {"ssd", n.ssd}, {"ssd_count", n.ssd_count},
            {"ssd_aggregate_read_Bps", n.ssd_aggregate_read_Bps}, {"h2d_per_gpu_Bps", n.h2d_per_gpu_Bps},
            {"gpus_per_pcie_switch", n.gpus_per_pcie_switch}, {"notes", n.notes}, {"source", n.source},
            {"confidence", n.confidence}};
}
json to_json(const Ssd& s) {
    return {{"id", s.id}, {"interface", s.interface}, {"example", s.example}, {"seq_read_Bps", s.seq_read_Bps},
            {"seq_write_Bps", s.seq_write_Bps}, {"notes", s.notes}, {"source", s.source}, {"confidence", s.confidence}};
}
json to_json(const Cpu& c) {
    return {{"id", c.id}, {"sockets", c.sockets}, {"cores", c.cores}, {"dram_Bps", c.dram_Bps},
            {"adam_params_per_s", c.adam_params_per_s}, {"notes", c.notes}, {"source", c.source},
            {"confidence", c.confidence}};
}
json to_json(const Run& r) {
    return {{"id", r.id}, {"host", r.host}, {"devices", r.devices}, {"driver", r.driver},
            {"tool_version", r.tool_version}, {"backend", r.backend}, {"started_at", r.started_at},
            {"finished_at", r.finished_at}, {"representative", r.representative}, {"notes", r.notes}};
}
json to_json(const Measurement& m) {
    return {{"kind", m.kind}, {"device", m.device}, {"key", m.key}, {"params", json(m.params)},
            {"labels", json(m.labels)}, {"value", m.value}, {"unit", m.unit}, {"p10", m.p10}, {"p90", m.p90},
            {"samples", m.samples}};
}
json to_json(const Fit& f) {
    return {{"kind", f.kind}, {"device", f.device}, {"key", f.key}, {"model", f.model}, {"params", json(f.params)},
            {"points_json", f.points_json}, {"valid_min", f.valid_min}, {"valid_max", f.valid_max},
            {"n_points", f.n_points}, {"mape", f.mape}};
}

// ---- readers ----

namespace {
int int_field(JsonReader& r, const std::string& key, int dflt, int min_value) {
    std::int64_t v = r.i64_or(key, dflt);
    if (v < min_value || v > 1000000000) r.fail(key, "must be an integer >= " + std::to_string(min_value));
    return static_cast<int>(v);
}
double nonneg(JsonReader& r, const std::string& key, double dflt = 0) {
    double v = r.num_or(key, dflt);
    if (v < 0) r.fail(key, "must not be negative (got " + std::to_string(v) + ")");
    return v;
}
void provenance(JsonReader& r, std::string& notes, std::string& source, std::string& confidence) {
    notes = r.str_or("notes", "");
    source = r.str("source");
    if (source.empty()) r.fail("source", "must name where the figures come from");
    confidence = r.choice("confidence", confidence_levels());
}
std::map<std::string, double> num_map(JsonReader& r, const std::string& key) {
    std::map<std::string, double> out;
    const json* j = r.get(key);
    if (!j) return out;
    if (!j->is_object()) r.fail(key, "must be an object of numbers");
    for (auto it = j->begin(); it != j->end(); ++it) {
        if (!it->is_number()) r.fail(key + "." + it.key(), "must be a number (got " + describe_json(*it) + ")");
        out[it.key()] = it->get<double>();
    }
    return out;
}
std::map<std::string, std::string> str_map(JsonReader& r, const std::string& key) {
    std::map<std::string, std::string> out;
    const json* j = r.get(key);
    if (!j) return out;
    if (!j->is_object()) r.fail(key, "must be an object of strings");
    for (auto it = j->begin(); it != j->end(); ++it) {
        if (!it->is_string()) r.fail(key + "." + it.key(), "must be a string (got " + describe_json(*it) + ")");
        out[it.key()] = it->get<std::string>();
    }
    return out;
}
}  // namespace

Gpu gpu_from_json(JsonReader& r) {
    Gpu g;
    g.id = r.str("id");
    g.vendor = r.str_or("vendor", ""), g.arch = r.str_or("arch", ""), g.compute_capability = r.str_or("compute_capability", "");
    g.sm_count = int_field(r, "sm_count", 0, 0);
    g.boost_clock_mhz = nonneg(r, "boost_clock_mhz"), g.l2_bytes = nonneg(r, "l2_bytes");
    g.hbm_bytes = nonneg(r, "hbm_bytes"), g.hbm_Bps = nonneg(r, "hbm_Bps");
    if (r.has("peak_flops")) {
        JsonReader p = r.object("peak_flops");
        for (int d = 0; d < kDtypeCount; ++d)
            g.peak_flops[static_cast<std::size_t>(d)] = nonneg(p, to_string(static_cast<Dtype>(d)));
        p.reject_unknown();
    } else {
        r.get("peak_flops");
    }
    g.scale_up_link = r.str_or("scale_up_link", ""), g.scale_up_per_dir_Bps = nonneg(r, "scale_up_per_dir_Bps");
    g.host_link = r.str_or("host_link", ""), g.tdp_w = nonneg(r, "tdp_w");
    provenance(r, g.notes, g.source, g.confidence);
    r.reject_unknown();
    return g;
}

Link link_from_json(JsonReader& r) {
    Link l;
    l.id = r.str("id");
    l.kind = link_kind_from_name(r.choice("kind", {"scale-up", "switch", "host", "scale-out"}));
    l.per_dir_Bps = nonneg(r, "per_dir_Bps"), l.achievable_Bps = nonneg(r, "achievable_Bps");
    l.achievable_fraction = r.num_or("achievable_fraction", 0.8);
    if (l.achievable_fraction <= 0 || l.achievable_fraction > 1) r.fail("achievable_fraction", "must be in (0, 1]");
    l.latency_ns = nonneg(r, "latency_ns");
    provenance(r, l.notes, l.source, l.confidence);
    r.reject_unknown();
    return l;
}

Node node_from_json(JsonReader& r) {
    Node n;
    n.id = r.str("id");
    n.gpu_hint = r.str_or("gpu_hint", ""), n.gpus_per_node = int_field(r, "gpus_per_node", 8, 1);
    n.fabric = r.str_or("fabric", ""), n.intra_link = r.str_or("intra_link", "");
    n.nic_count = int_field(r, "nic_count", 0, 0), n.nic_link = r.str_or("nic_link", "");
    n.cpu = r.str_or("cpu", ""), n.cpu_dram_bytes = nonneg(r, "cpu_dram_bytes");
    n.ssd = r.str_or("ssd", ""), n.ssd_count = int_field(r, "ssd_count", 0, 0);
    n.ssd_aggregate_read_Bps = nonneg(r, "ssd_aggregate_read_Bps"), n.h2d_per_gpu_Bps = nonneg(r, "h2d_per_gpu_Bps");
    n.gpus_per_pcie_switch = int_field(r, "gpus_per_pcie_switch", 2, 1);
    provenance(r, n.notes, n.source, n.confidence);
    r.reject_unknown();
    return n;
}

Ssd ssd_from_json(JsonReader& r) {
    Ssd s;
    s.id = r.str("id");
    s.interface = r.str_or("interface", ""), s.example = r.str_or("example", "");
    s.seq_read_Bps = nonneg(r, "seq_read_Bps"), s.seq_write_Bps = nonneg(r, "seq_write_Bps");
    provenance(r, s.notes, s.source, s.confidence);
    r.reject_unknown();
    return s;
}

Cpu cpu_from_json(JsonReader& r) {
    Cpu c;
    c.id = r.str("id");
    c.sockets = int_field(r, "sockets", 1, 1), c.cores = int_field(r, "cores", 0, 0);
    c.dram_Bps = nonneg(r, "dram_Bps"), c.adam_params_per_s = nonneg(r, "adam_params_per_s");
    provenance(r, c.notes, c.source, c.confidence);
    r.reject_unknown();
    return c;
}

Run run_from_json(JsonReader& r) {
    Run x;
    x.id = r.i64_or("id", 0);  // informational: imported runs get fresh ids
    x.host = r.str_or("host", ""), x.devices = r.str_or("devices", ""), x.driver = r.str_or("driver", "");
    x.tool_version = r.str_or("tool_version", ""), x.backend = r.str_or("backend", "");
    x.started_at = r.str_or("started_at", ""), x.finished_at = r.str_or("finished_at", "");
    x.representative = r.boolean_or("representative", true), x.notes = r.str_or("notes", "");
    r.reject_unknown();
    return x;
}

Measurement measurement_from_json(JsonReader& r) {
    Measurement m;
    m.kind = r.str("kind");
    if (m.kind.empty()) r.fail("kind", "must not be empty");
    m.device = r.str("device");
    if (m.device.empty()) r.fail("device", "must not be empty");
    m.key = r.str_or("key", ""), m.params = num_map(r, "params"), m.labels = str_map(r, "labels");
    m.value = r.num("value"), m.unit = r.str_or("unit", "");
    m.p10 = r.num_or("p10", 0), m.p90 = r.num_or("p90", 0), m.samples = int_field(r, "samples", 0, 0);
    r.reject_unknown();
    return m;
}

Fit fit_from_json(JsonReader& r) {
    Fit f;
    f.kind = r.str("kind");
    if (f.kind.empty()) r.fail("kind", "must not be empty");
    f.device = r.str("device");
    if (f.device.empty()) r.fail("device", "must not be empty");
    f.key = r.str_or("key", ""), f.model = r.str("model");
    if (f.model.empty()) r.fail("model", "must not be empty");
    f.params = num_map(r, "params"), f.points_json = r.str_or("points_json", "");
    f.valid_min = r.num_or("valid_min", 0), f.valid_max = r.num_or("valid_max", 0);
    f.n_points = int_field(r, "n_points", 0, 0), f.mape = nonneg(r, "mape");
    r.reject_unknown();
    return f;
}

}  // namespace detail

// ---- export / import ----

std::string Database::export_json(std::optional<std::int64_t> run_id) const {
    json doc = json::object();
    doc["schema"] = 1;
    if (!run_id) {
        auto rows = [](const auto& v) {
            json a = json::array();
            for (const auto& x : v) a.push_back(detail::to_json(x));
            return a;
        };
        doc["gpus"] = rows(gpus()), doc["links"] = rows(links()), doc["nodes"] = rows(nodes());
        doc["ssds"] = rows(ssds()), doc["cpus"] = rows(cpus());
    }
    json runs_j = json::array();
    bool found = false;
    for (const Run& r : runs()) {
        if (run_id && r.id != *run_id) continue;
        found = true;
        json ms = json::array(), fs = json::array();
        for (const Measurement& m : measurements(r.id)) ms.push_back(detail::to_json(m));
        for (const Fit& f : fits(r.id)) fs.push_back(detail::to_json(f));
        runs_j.push_back({{"run", detail::to_json(r)}, {"measurements", ms}, {"fits", fs}});
    }
    if (run_id && !found) throw InputError("--run", "", std::to_string(*run_id) + " is not a run in " + path());
    doc["runs"] = runs_j;
    return doc.dump(1) + "\n";
}

void Database::import_json(const std::string& text, const std::string& file) {
    const json doc = parse_json_text(text, file);
    JsonReader top(doc, file, "");
    const std::int64_t schema = top.i64("schema");
    if (schema != 1) top.fail("schema", "must be 1 (this build reads hwdb documents of schema 1; got " + std::to_string(schema) + ")");

    // Parse and validate everything first, then write in one transaction.
    auto each = [&](const std::string& key, auto&& fn) {
        const json* a = top.get(key);
        if (!a) return;
        if (!a->is_array()) top.fail(key, "must be an array");
        for (std::size_t i = 0; i < a->size(); ++i) {
            JsonReader r((*a)[i], file, key + "[" + std::to_string(i) + "]");
            fn(r);
        }
    };
    std::vector<Gpu> gs;
    std::vector<Link> ls;
    std::vector<Node> ns;
    std::vector<Ssd> ss;
    std::vector<Cpu> cs;
    each("gpus", [&](JsonReader& r) { gs.push_back(detail::gpu_from_json(r)); });
    each("links", [&](JsonReader& r) { ls.push_back(detail::link_from_json(r)); });
    each("nodes", [&](JsonReader& r) { ns.push_back(detail::node_from_json(r)); });
    each("ssds", [&](JsonReader& r) { ss.push_back(detail::ssd_from_json(r)); });
    each("cpus", [&](JsonReader& r) { cs.push_back(detail::cpu_from_json(r)); });
    struct RunDoc {
        Run run;
        std::vector<Measurement> ms;
        std::vector<Fit> fs;
    };
    std::vector<RunDoc> rds;
    each("runs", [&](JsonReader& r) {
        RunDoc d;
        JsonReader rr = r.object("run");
        d.run = detail::run_from_json(rr);
        auto list = [&](const std::string& key, auto&& fn) {
            const json* a = r.get(key);
            if (!a) return;
            if (!a->is_array()) r.fail(key, "must be an array");
            for (std::size_t i = 0; i < a->size(); ++i) {
                JsonReader x((*a)[i], file, r.child_path(key) + "[" + std::to_string(i) + "]");
                fn(x);
            }
        };
        list("measurements", [&](JsonReader& x) { d.ms.push_back(detail::measurement_from_json(x)); });
        list("fits", [&](JsonReader& x) { d.fs.push_back(detail::fit_from_json(x)); });
        r.reject_unknown();
        rds.push_back(std::move(d));
    });
    top.reject_unknown();

    detail::Transaction tx(impl_->db, impl_->path);
    try {
        impl_->upsert_rows(gs, ls, ns, ss, cs);
        for (const RunDoc& d : rds) impl_->insert_run(d.run, d.ms, d.fs);
    } catch (const InputError& e) {
        // Row-level rules raised below name no file; attach this one.
        throw InputError(file, e.path(), e.rule());
    }
    tx.commit();
}

}  // namespace strata::hwdb
