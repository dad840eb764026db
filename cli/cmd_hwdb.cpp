// strata hwdb: look at and maintain the hardware database. list (tables of GPUs, links, nodes,
// SSDs, CPUs or runs), show (every field of one row or run), import/export (the JSON document of
// docs/hwdb.md), diff (two runs' measurements and fits side by side) and init (a new seeded
// database). Thin: all logic is in strata_hwdb; SQL never appears here.
#include <algorithm>
#include <cctype>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.hpp"
#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/common/text.hpp"

namespace strata::cli {
namespace {

using nlohmann::json;

struct HwdbArgs {
    std::string db, kind = "gpus", json_out, id, id2, file, output = "-", init_path;
    std::int64_t run = 0;
    std::int64_t run_a = 0, run_b = 0;
};

// Column-aligned table; the last column may be long (sources), others are padded.
class Table {
public:
    explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
    void add(std::vector<std::string> r) { rows_.push_back(std::move(r)); }
    std::string str() const {
        std::vector<std::size_t> w;
        for (const auto& r : rows_)
            for (std::size_t i = 0; i < r.size(); ++i) {
                if (w.size() <= i) w.push_back(0);
                w[i] = std::max(w[i], r[i].size());
            }
        std::ostringstream os;
        for (std::size_t k = 0; k < rows_.size(); ++k) {
            const auto& r = rows_[k];
            std::string line;
            for (std::size_t i = 0; i < r.size(); ++i) {
                line += r[i];
                if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
            }
            os << line << "\n";
            if (k == 0) {
                std::size_t total = 0;
                for (std::size_t i = 0; i < w.size(); ++i) total += w[i] + (i + 1 < w.size() ? 2 : 0);
                os << std::string(total, '-') << "\n";
            }
        }
        return os.str();
    }

private:
    std::vector<std::vector<std::string>> rows_;
};

std::string trunc(const std::string& s, std::size_t n) { return s.size() <= n ? s : s.substr(0, n - 3) + "..."; }
std::string num_or_dash(double v, double scale, int decimals) { return v > 0 ? fmt_fixed(v / scale, decimals) : "-"; }

std::string list_text(const hwdb::Database& db, const std::string& kind) {
    if (kind == "gpus") {
        Table t({"id", "arch", "HBM GB", "HBM TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "scale-up", "GB/s/dir", "confidence", "source"});
        for (const auto& g : db.gpus())
            t.add({g.id, trunc(g.arch, 16), num_or_dash(g.hbm_bytes, 1e9, 0), num_or_dash(g.hbm_Bps, 1e12, 2),
                   num_or_dash(g.peak(hwdb::Dtype::bf16), 1e12, 1), num_or_dash(g.peak(hwdb::Dtype::fp8), 1e12, 1),
                   g.scale_up_link.empty() ? "-" : g.scale_up_link, num_or_dash(g.scale_up_per_dir_Bps, 1e9, 0), g.confidence,
                   trunc(g.source, 48)});
        return t.str();
    }
    if (kind == "links") {
        Table t({"id", "kind", "GB/s/dir", "achievable GB/s", "latency us", "confidence", "source"});
        for (const auto& l : db.links())
            t.add({l.id, hwdb::to_string(l.kind), num_or_dash(l.per_dir_Bps, 1e9, 1), num_or_dash(l.achievable_Bps, 1e9, 1),
                   num_or_dash(l.latency_ns, 1e3, 1), l.confidence, trunc(l.source, 48)});
        return t.str();
    }
    if (kind == "nodes") {
        Table t({"id", "gpus", "gpu", "intra", "NICs", "cpu", "DRAM GB", "ssd", "confidence", "source"});
        for (const auto& n : db.nodes())
            t.add({n.id, std::to_string(n.gpus_per_node), n.gpu_hint.empty() ? "-" : n.gpu_hint, n.intra_link.empty() ? "-" : n.intra_link,
                   n.nic_count ? std::to_string(n.nic_count) + "x " + n.nic_link : "-", n.cpu, num_or_dash(n.cpu_dram_bytes, 1e9, 0),
                   std::to_string(n.ssd_count) + "x " + n.ssd, n.confidence, trunc(n.source, 40)});
        return t.str();
    }
    if (kind == "ssds") {
        Table t({"id", "interface", "read GB/s", "write GB/s", "example", "confidence", "source"});
        for (const auto& s : db.ssds())
            t.add({s.id, s.interface, num_or_dash(s.seq_read_Bps, 1e9, 2), num_or_dash(s.seq_write_Bps, 1e9, 2),
                   s.example.empty() ? "-" : s.example, s.confidence, trunc(s.source, 48)});
        return t.str();
    }
    if (kind == "cpus") {
        Table t({"id", "sockets", "cores", "DRAM GB/s", "Adam params/s", "confidence", "source"});
        for (const auto& c : db.cpus())
            t.add({c.id, std::to_string(c.sockets), std::to_string(c.cores), num_or_dash(c.dram_Bps, 1e9, 1),
                   c.adam_params_per_s > 0 ? fmt_sci(c.adam_params_per_s, 3) : "derived", c.confidence, trunc(c.source, 48)});
        return t.str();
    }
    Table t({"run", "started", "host", "backend", "devices", "measurements", "fits", "representative"});
    for (const auto& r : db.runs())
        t.add({std::to_string(r.id), r.started_at.empty() ? "-" : r.started_at, r.host.empty() ? "-" : r.host,
               r.backend.empty() ? "-" : r.backend, trunc(r.devices, 32), std::to_string(db.measurements(r.id).size()),
               std::to_string(db.fits(r.id).size()), r.representative ? "yes" : "no"});
    return t.str();
}

// One value of `show`, with a human rendering beside SI figures.
std::string show_value(const std::string& key, const json& v) {
    if (!v.is_number()) return v.is_string() ? v.get<std::string>() : v.dump();
    const double d = v.get<double>();
    std::string s = v.dump();
    auto ends = [&](const char* suf) {
        const std::string x = suf;
        return key.size() >= x.size() && key.compare(key.size() - x.size(), x.size(), x) == 0;
    };
    if (ends("_Bps") && d > 0) s += "  (" + fmt_fixed(d / 1e9, 2) + " GB/s)";
    else if (ends("_bytes") && d > 0) s += "  (" + human_bytes(d) + ")";
    else if (ends("_ns") && d > 0) s += "  (" + human_seconds(d * 1e-9) + ")";
    else if (ends("flops") && d > 0) s += "  (" + fmt_fixed(d / 1e12, 1) + " TFLOP/s)";
    return s;
}

// Nested objects (peak_flops) render their members with the parent's unit suffix.
std::string show_object(const json& o, const std::string& indent = "", const std::string& parent = "") {
    std::ostringstream os;
    for (auto it = o.begin(); it != o.end(); ++it) {
        if (it->is_object() && !it->empty() && it.key() != "params" && it.key() != "labels") {
            os << indent << it.key() << ":\n" << show_object(*it, indent + "  ", it.key());
        } else {
            os << indent << it.key() << ": " << show_value(parent.empty() ? it.key() : parent, *it) << "\n";
        }
    }
    return os.str();
}

bool all_digits(const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

void run_show(const HwdbArgs& a) {
    hwdb::Database db = open_db(a.db);
    std::string id = a.id;
    if (id == "run" && !a.id2.empty()) id = a.id2;
    if (all_digits(id) && (a.id == "run" || !db.gpu(id))) {
        if (id.size() > 18) throw InputError("hwdb show", "", id + " is not a run in " + db.path() + " (see `strata hwdb list --kind runs`)");
        const json doc = json::parse(db.export_json(std::stoll(id)));
        const json& r = doc["runs"][0];
        std::ostringstream os;
        os << "run " << id << "\n" << show_object(r["run"], "  ");
        os << "measurements (" << r["measurements"].size() << "):\n";
        for (const auto& m : r["measurements"])
            os << "  " << m["kind"].get<std::string>() << " " << m["device"].get<std::string>() << " \"" << m["key"].get<std::string>()
               << "\" = " << show_value("value", m["value"]) << " " << m["unit"].get<std::string>() << "  params " << m["params"].dump()
               << " labels " << m["labels"].dump() << "\n";
        os << "fits (" << r["fits"].size() << "):\n";
        for (const auto& f : r["fits"])
            os << "  " << f["kind"].get<std::string>() << " " << f["device"].get<std::string>() << " \"" << f["key"].get<std::string>()
               << "\" " << f["model"].get<std::string>() << " " << f["params"].dump() << "  n=" << f["n_points"].dump()
               << " mape=" << f["mape"].dump() << "\n";
        std::cout << os.str();
        return;
    }
    const json doc = json::parse(db.export_json());
    std::vector<std::string> all;
    for (const char* table : {"gpus", "links", "nodes", "ssds", "cpus"})
        for (const auto& row : doc[table]) {
            if (row["id"] == id) {
                std::string kind = table;
                kind.pop_back();
                std::cout << kind << " " << id << "\n" << show_object(row, "  ");
                return;
            }
            all.push_back(row["id"].get<std::string>());
        }
    // Ids containing what was typed first ("H100" -> "H100-SXM5-80GB"), else the closest spelling.
    std::vector<std::string> hits;
    for (const auto& x : all)
        if (hits.size() < 3 && ascii_lower(x).find(ascii_lower(id)) != std::string::npos) hits.push_back(x);
    if (hits.empty() && !did_you_mean(id, all).empty()) hits.push_back(did_you_mean(id, all));
    std::string dym;
    for (const auto& h : hits) dym += (dym.empty() ? "" : " or ") + ("\"" + h + "\"");
    throw InputError("hwdb show", "", "\"" + id + "\" is not a GPU, link, node, SSD, CPU or run number in " + db.path() +
                                          (dym.empty() ? "" : " (did you mean " + dym + "?)"));
}

// Every comparable number of a run, by a readable key.
std::map<std::string, double> run_values(const hwdb::Database& db, std::int64_t id) {
    bool found = false;
    for (const auto& r : db.runs()) found = found || r.id == id;
    if (!found) throw InputError("hwdb diff", "", std::to_string(id) + " is not a run in " + db.path() + " (see `strata hwdb list --kind runs`)");
    std::map<std::string, double> out;
    for (const auto& m : db.measurements(id)) out[m.kind + " " + m.device + " " + m.key + " [" + m.unit + "]"] = m.value;
    for (const auto& f : db.fits(id))
        for (const auto& [p, v] : f.params) out["fit " + f.kind + " " + f.device + " " + f.key + " " + p] = v;
    return out;
}

void run_diff(const HwdbArgs& a) {
    check_outputs({{"--json", a.json_out}});
    hwdb::Database db = open_db(a.db);
    const auto va = run_values(db, a.run_a), vb = run_values(db, a.run_b);
    std::map<std::string, std::pair<std::optional<double>, std::optional<double>>> rows;
    for (const auto& [k, v] : va) rows[k].first = v;
    for (const auto& [k, v] : vb) rows[k].second = v;
    Table t({"key", "run " + std::to_string(a.run_a), "run " + std::to_string(a.run_b), "B/A"});
    for (const auto& [k, p] : rows) {
        std::string ratio = "-";
        if (p.first && p.second && *p.first != 0) ratio = fmt_fixed(*p.second / *p.first, 3);
        t.add({k, p.first ? fmt_sci(*p.first, 4) : "-", p.second ? fmt_sci(*p.second, 4) : "-", ratio});
    }
    report_stream({{"--json", a.json_out}}) << t.str();
    if (!a.json_out.empty()) {
        json j = json::array();
        for (const auto& [k, p] : rows)
            j.push_back({{"key", k}, {"a", p.first ? json(*p.first) : json()}, {"b", p.second ? json(*p.second) : json()}});
        write_output(a.json_out, j.dump(1) + "\n");
    }
}

void add_hwdb(CLI::App& app) {
    auto a = std::make_shared<HwdbArgs>();
    auto* hw = app.add_subcommand("hwdb", "Inspect and maintain the hardware database (datasheets, profiling runs, fits)");
    hw->require_subcommand(1);

    auto* list = hw->add_subcommand("list", "Table of GPUs (default), links, nodes, SSDs, CPUs or runs");
    add_db_option(list, a->db);
    list->add_option("--kind,-k", a->kind, "gpus | links | nodes | ssds | cpus | runs")
        ->check(CLI::IsMember({"gpus", "links", "nodes", "ssds", "cpus", "runs"}));
    list->add_option("--json", a->json_out,
                     "also write the listed rows as JSON to FILE, a document `hwdb import` reads ('-': stdout, the table then goes to stderr)");
    list->callback([a] {
        const std::vector<Output> outputs{{"--json", a->json_out}};
        check_outputs(outputs);
        hwdb::Database db = open_db(a->db);
        const std::string table = list_text(db, a->kind);
        if (!a->json_out.empty()) {
            // The export document cut down to the listed kind (schema kept, so it imports).
            const nlohmann::ordered_json all = nlohmann::ordered_json::parse(db.export_json());
            nlohmann::ordered_json doc;
            doc["schema"] = all.at("schema");
            doc[a->kind] = all.at(a->kind);
            write_output(a->json_out, doc.dump(2) + "\n");
        }
        report_stream(outputs) << table;
    });

    auto* show = hw->add_subcommand("show", "Every field of a GPU, link, node, SSD or CPU (by id), or of run N");
    add_db_option(show, a->db);
    show->add_option("id", a->id, "row id (e.g. H100-SXM5-80GB), or a run number (also: show run N)")->required();
    show->add_option("n", a->id2, "run number after the word `run`");
    show->callback([a] { run_show(*a); });

    auto* imp = hw->add_subcommand("import", "Add datasheet rows and runs from a JSON document (one transaction)");
    add_db_option(imp, a->db);
    imp->add_option("file", a->file, "hwdb JSON document (format: docs/hwdb.md)")->required();
    imp->callback([a] {
        hwdb::Database db = open_db_for_write(a->db);
        const std::size_t runs_before = db.runs().size();
        db.import_json(read_text_file(a->file), a->file);
        std::cout << "imported " << a->file << " into " << db.path() << " (" << db.runs().size() - runs_before << " new runs)\n";
    });

    auto* exp = hw->add_subcommand("export", "Write the database (or one run) as a JSON document");
    add_db_option(exp, a->db);
    add_int_option(exp, "--run", a->run, 1, INT64_MAX, "export only run N");
    exp->add_option("--output,-o", a->output, "output file (default '-': stdout)");
    exp->callback([a] {
        check_outputs({{"--output", a->output}});
        hwdb::Database db = open_db(a->db);
        write_output(a->output, a->run > 0 ? db.export_json(a->run) : db.export_json());
    });

    auto* diff = hw->add_subcommand("diff", "Compare two runs' measurements and fits by key (value A, value B, B/A)");
    add_db_option(diff, a->db);
    add_int_option(diff, "run_a", a->run_a, 1, INT64_MAX, "first run number")->required();
    add_int_option(diff, "run_b", a->run_b, 1, INT64_MAX, "second run number")->required();
    diff->add_option("--json", a->json_out, "also write the comparison as JSON to FILE ('-': stdout, the table then goes to stderr)");
    diff->callback([a] { run_diff(*a); });

    auto* init = hw->add_subcommand("init", "Create a new database holding the built-in datasheet seed");
    add_db_option(init, a->db);
    init->add_option("path", a->init_path, "where to create it (default: --db)");
    init->callback([a] {
        const std::string p = !a->init_path.empty() ? a->init_path : a->db;
        if (p.empty()) throw InputError("hwdb init", "", "needs a PATH (or --db PATH)");
        hwdb::Database db = hwdb::Database::create_seeded(p);
        std::cout << "created " << p << ": " << db.gpus().size() << " GPUs, " << db.links().size() << " links, " << db.nodes().size()
                  << " nodes, " << db.ssds().size() << " SSDs, " << db.cpus().size() << " CPUs (schema " << db.schema_version() << ")\n";
    });
}

STRATA_COMMAND(50, add_hwdb);

}  // namespace
}  // namespace strata::cli
