// Human tables and the JSON dump of a profile. Tables follow the tools people know: nccl-tests'
// "size count type time(us) algbw busbw" (decimal GB/s) for collectives, "m n k dtype TFLOP/s eff%"
// for GEMMs. Fixed float formatting and sorted keys: identical input, identical bytes.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <sstream>

#include "strata/profiler/profiler.hpp"

namespace strata::profiler {

namespace {
std::string fmt(const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}
std::string label_of(const hwdb::Measurement& m, const std::string& k) {
    auto it = m.labels.find(k);
    return it == m.labels.end() ? "" : it->second;
}
double param_of(const hwdb::Measurement& m, const std::string& k) {
    auto it = m.params.find(k);
    return it == m.params.end() ? 0 : it->second;
}
}  // namespace

std::string format_tables(const Profile& p, const hwdb::Gpu* peak) {
    std::ostringstream o;
    o << "# strata profile: backend " << p.run.backend << ", host " << p.run.host << ", devices " << p.run.devices << "\n";
    if (!p.run.driver.empty()) o << "# versions: " << p.run.driver << "\n";

    // Collectives, one nccl-tests-style table per (collective, scope, group).
    std::map<std::string, std::vector<const hwdb::Measurement*>> colls;
    for (const auto& m : p.measurements)
        if (m.kind == "collective")
            colls[label_of(m, "collective") + " scope " + label_of(m, "scope") + " group " +
                  std::to_string(static_cast<int>(param_of(m, "group")))].push_back(&m);
    for (const auto& [title, rows] : colls) {
        o << "\n# " << title << (label_of(*rows.front(), "representative") == "0" ? "  (NOT representative: 1 rank or shared GPU)" : "")
          << "\n";
        o << "#        size         count   type    time(us)  algbw(GB/s)  busbw(GB/s)\n";
        for (const auto* m : rows) {
            o << fmt("%14.0f", param_of(*m, "bytes")) << fmt("%14.0f", param_of(*m, "count"))
              << "   " << label_of(*m, "dtype") << fmt("%12.2f", param_of(*m, "time_s") * 1e6) << fmt("%13.2f", param_of(*m, "algbw_Bps") / 1e9)
              << fmt("%13.2f", param_of(*m, "busbw_Bps") / 1e9) << "\n";
        }
    }

    bool head = false;
    for (const auto& m : p.measurements) {
        if (m.kind != "gemm") continue;
        if (!head) {
            o << "\n# GEMM (median of timed launches; eff% = achieved / datasheet dense peak)\n"
              << "#      m       n       k  dtype   TFLOP/s       p10-p90        eff%\n";
            head = true;
        }
        const std::string dt = label_of(m, "dtype");
        double pk = 0;
        if (peak != nullptr)
            if (auto d = hwdb::dtype_from_string(dt)) pk = peak->peak(*d);
        o << fmt("%8.0f", param_of(m, "m")) << fmt("%8.0f", param_of(m, "n")) << fmt("%8.0f", param_of(m, "k")) << "  "
          << dt << std::string(dt.size() < 5 ? 5 - dt.size() : 0, ' ') << fmt("%10.2f", m.value / 1e12) << fmt("%10.2f", m.p10 / 1e12) << "-"
          << fmt("%-10.2f", m.p90 / 1e12) << (pk > 0 ? fmt("%6.1f", 100.0 * m.value / pk) : std::string("     -")) << "\n";
    }
    head = false;
    for (const auto& m : p.measurements) {
        if (m.kind != "attention") continue;
        if (!head) {
            o << "\n# Attention (" << label_of(m, "impl") << "; FLOPs fwd 4*b*h*s^2*d, x0.5 causal; bwd 2.5 x fwd)\n"
              << "#  batch heads   seq  dim causal dir  dtype  TFLOP/s\n";
            head = true;
        }
        o << fmt("%8.0f", param_of(m, "batch")) << fmt("%6.0f", param_of(m, "heads")) << fmt("%6.0f", param_of(m, "seq")) << fmt("%5.0f", param_of(m, "head_dim"))
          << "   " << label_of(m, "causal") << "    " << label_of(m, "direction") << "  " << label_of(m, "dtype") << fmt("%9.1f", m.value / 1e12) << "\n";
    }
    head = false;
    for (const auto& m : p.measurements) {
        if (m.kind != "membw" && m.kind != "memcpy") continue;
        if (!head) {
            o << "\n# Memory bandwidth and copies (GB/s, decimal)\n#  kind    what             bytes      GB/s  p10-p90\n";
            head = true;
        }
        const std::string what = m.kind == "membw" ? label_of(m, "kernel")
                                                   : label_of(m, "direction") + (label_of(m, "pinned") == "1" ? "/pinned" : "/pageable");
        char b[160];
        std::snprintf(b, sizeof b, "  %-7s %-14s %12.0f %9.2f  %.2f-%.2f\n", m.kind.c_str(), what.c_str(), param_of(m, "bytes"), m.value / 1e9,
                      m.p10 / 1e9, m.p90 / 1e9);
        o << b;
    }
    head = false;
    for (const auto& m : p.measurements) {
        if (m.kind != "ssd" && m.kind != "cpu_adam" && m.kind != "host_mem") continue;
        if (!head) {
            o << "\n# Host: SSD (GB/s), CPU AdamW (Mparams/s), DRAM copy (GB/s, read + write)\n";
            head = true;
        }
        char b[200];
        if (m.kind == "ssd")
            std::snprintf(b, sizeof b, "  ssd %-5s block %8.0f KiB qd %3.0f  %8.3f GB/s  (O_DIRECT %s)\n", label_of(m, "op").c_str(),
                          param_of(m, "block_bytes") / 1024, param_of(m, "queue_depth"), m.value / 1e9, label_of(m, "direct") == "1" ? "yes" : "no");
        else if (m.kind == "host_mem")
            std::snprintf(b, sizeof b, "  dram copy %10.0f bytes  %2.0f threads  %8.2f GB/s\n", param_of(m, "bytes"), param_of(m, "threads"), m.value / 1e9);
        else
            std::snprintf(b, sizeof b, "  adamw %10.0f params  %2.0f threads  %10.1f Mparams/s\n", param_of(m, "params"), param_of(m, "threads"),
                          m.value / 1e6);
        o << b;
    }
    head = false;
    for (const auto& m : p.measurements) {
        if (m.kind != "overlap") continue;
        if (!head) {
            o << "\n# Interference: GEMM slowdown while a stand-in communication kernel holds S SMs (copy: streams HBM; spin: idle)\n"
              << "#  (sm_target: the GEMM is told the SMs left to it)\n"
              << "#  proxy              m      n      k    S  SM share  slowdown  p10-p90          stand-in GB/s\n";
            head = true;
        }
        const std::string mode = label_of(m, "proxy") + (label_of(m, "gemm_sms") == "target" ? " sm_target" : "");
        char b[200];
        std::snprintf(b, sizeof b, "  %-14s %6.0f %6.0f %6.0f %4.0f   %5.1f%%   %6.1f%%  %5.1f%%-%5.1f%%  %10.0f\n", mode.c_str(),
                      param_of(m, "m"), param_of(m, "n"), param_of(m, "k"), param_of(m, "sms"), param_of(m, "sm_fraction") * 100, m.value * 100, m.p10 * 100,
                      m.p90 * 100, param_of(m, "proxy_Bps") / 1e9);
        o << b;
    }
    if (!p.fits.empty()) {
        o << "\n# Fits (t = alpha + S*f(n)/busbw for collectives; t = latency + bytes/Bps for bandwidths)\n";
        for (const auto& f : p.fits) {
            char b[240];
            if (f.model == "alpha_beta")
                std::snprintf(b, sizeof b, "  %-10s %-26s alpha %9.2f us  busbw %8.2f GB/s  n=%d mape %.1f%%\n", f.kind.c_str(), f.key.c_str(),
                              f.params.at("alpha_ns") / 1e3, f.params.at("busbw_Bps") / 1e9, f.n_points, f.mape * 100);
            else if (f.model == "bandwidth")
                std::snprintf(b, sizeof b, "  %-10s %-26s latency %7.2f us  %8.2f GB/s  n=%d mape %.1f%%\n", f.kind.c_str(), f.key.c_str(),
                              f.params.at("latency_ns") / 1e3, f.params.at("Bps") / 1e9, f.n_points, f.mape * 100);
            else if (f.model == "proportional")
                std::snprintf(b, sizeof b, "  %-10s %-26s slowdown %.3f x SM share  n=%d mean abs err %.1f points\n", f.kind.c_str(),
                              f.key.c_str(), f.params.at("slowdown_per_sm_share"), f.n_points, f.mape * 100);
            else
                std::snprintf(b, sizeof b, "  %-10s %-26s %.4g params/s\n", f.kind.c_str(), f.key.c_str(), f.params.count("params_per_s") ? f.params.at("params_per_s") : 0.0);
            o << b;
        }
    }
    for (const auto& w : p.warnings) o << "\nwarning: " << w;
    if (!p.warnings.empty()) o << "\n";
    return o.str();
}

std::string to_json(const Profile& p) {
    using nlohmann::json;
    json run = {{"host", p.run.host},         {"devices", p.run.devices},       {"driver", p.run.driver},
                {"tool_version", p.run.tool_version}, {"backend", p.run.backend}, {"started_at", p.run.started_at},
                {"finished_at", p.run.finished_at},   {"representative", p.run.representative}, {"notes", p.run.notes}};
    json ms = json::array();
    for (const auto& m : p.measurements)
        ms.push_back({{"kind", m.kind}, {"device", m.device}, {"key", m.key}, {"params", m.params}, {"labels", m.labels},
                      {"value", m.value}, {"unit", m.unit}, {"p10", m.p10}, {"p90", m.p90}, {"samples", m.samples}});
    json fs = json::array();
    for (const auto& f : p.fits)
        fs.push_back({{"kind", f.kind}, {"device", f.device}, {"key", f.key}, {"model", f.model}, {"params", f.params},
                      {"valid_min", f.valid_min}, {"valid_max", f.valid_max}, {"n_points", f.n_points}, {"mape", f.mape}});
    // hwdb's document format (schema 1, one run), so `strata hwdb import` reads it as written;
    // the warnings are in run.notes.
    json doc = {{"schema", 1}, {"runs", json::array({json{{"run", run}, {"measurements", ms}, {"fits", fs}}})}};
    return doc.dump(2) + "\n";
}

}  // namespace strata::profiler
