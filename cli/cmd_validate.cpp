// `strata validate`: predict a scenario with the simulator, run the very same Program with the
// runtime, and print predicted against measured: the step time, the time per instruction class
// (where each prediction came from: measured, fitted, datasheet), peak memory per tier, each with
// its signed error, the largest named. Both timelines are written in the simulator's trace format
// next to the --json report, so Perfetto shows them side by side. On a machine hwdb has no
// measurements of, it profiles first (the cpu backend's quick profile). docs/validation.md.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <unistd.h>

#include "cli.hpp"
#include "run_support.hpp"
#include "strata/common/error.hpp"
#include "strata/common/text.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/profiler/profiler.hpp"
#include "strata/sim/simulate.hpp"
#include "strata/sim/trace.hpp"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

struct ValidateArgs {
    SpecArgs specs;
    RuntimeArgs rt;
    std::string db, json, calibration;
    bool no_profile = false, profile = false;
};

/// The class of an instruction in the comparison (docs/validation.md).
std::string class_of(const sim::Instr& in) {
    using sim::InstrKind;
    using sim::Op;
    switch (in.kind) {
        case InstrKind::compute:
            switch (in.op) {
                case Op::gemm: return "gemm";
                case Op::attention_fwd:
                case Op::attention_bwd: return "attention";
                case Op::optimizer_gpu: return "optimizer (gpu)";
                default: return "memory-bound";
            }
        case InstrKind::collective: return std::string(sim::to_string(in.coll)) + "(" + sim::to_string(in.group) + ")";
        case InstrKind::send:
        case InstrKind::recv: return "p2p";
        case InstrKind::copy: return in.copy == sim::CopyKind::ssd_read || in.copy == sim::CopyKind::ssd_write ? "ssd" : "copy h2d/d2h";
        case InstrKind::optimizer: return "optimizer (cpu)";
        default: return "";
    }
}

struct ClassRow {
    std::string name;
    double predicted_s = 0, measured_s = 0;
    std::array<int, 3> provenance{};  // hwdb::Provenance counts of the predicted spans
    std::string provenance_name() const {
        const int best = static_cast<int>(std::max_element(provenance.begin(), provenance.end()) - provenance.begin());
        if (provenance[static_cast<std::size_t>(best)] == 0) return "none";
        return hwdb::to_string(static_cast<hwdb::Provenance>(best));
    }
};

double signed_pct(double predicted, double measured) { return measured > 0 ? 100.0 * (predicted - measured) / measured : 0.0; }

std::string pct(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%+.1f%%", v);
    return b;
}

/// The profile of a Program's own GEMM and attention shapes, in the dtype the runtime runs them:
/// bf16 for a bf16 plan on the cuda backend, else fp32 (the cpu backend computes a bf16 plan in
/// fp32). At most 64 GEMMs and 16 attention shapes, largest work first.
profiler::Options plan_shape_profile(const sim::Program& prog, const std::string& dtype) {
    std::map<std::array<long, 3>, double> gemms;
    std::map<std::array<long, 3>, double> attn;  // heads (x sequences), seq, head_dim
    for (const sim::RankProgram& r : prog.ranks)
        for (const sim::Instr& in : r.instrs) {
            if (in.kind != sim::InstrKind::compute) continue;
            const long b = std::max<long>(1, static_cast<long>(in.batch));
            if (in.op == sim::Op::gemm && in.m > 0 && in.n > 0 && in.k > 0) gemms[{static_cast<long>(in.m) * b, static_cast<long>(in.n), static_cast<long>(in.k)}] += in.flops;
            if ((in.op == sim::Op::attention_fwd || in.op == sim::Op::attention_bwd) && in.m > 0 && in.m == in.n && in.k > 0)
                attn[{b, static_cast<long>(in.m), static_cast<long>(in.k)}] += in.flops;
        }
    auto largest = [](const auto& m, std::size_t cap) {
        std::vector<std::pair<double, std::array<long, 3>>> v;
        for (const auto& [k, f] : m) v.push_back({-f, k});
        std::sort(v.begin(), v.end());
        if (v.size() > cap) v.resize(cap);
        return v;
    };
    profiler::Options po;
    po.plan_shapes = true;
    po.plan_dtype = dtype;
    po.only = {"gemm", "attention"};
    for (const auto& [f, k] : largest(gemms, 64)) po.gemm_shapes.push_back({k[0], k[1], k[2]});
    for (const auto& [f, k] : largest(attn, 16)) po.attention_shapes.push_back({1, k[0], k[1], k[2]});
    return po;
}

bool has_measurements(const hwdb::HardwareView& hw) { return !hw.gemm_points.empty() || (hw.hbm && hw.hbm->provenance != hwdb::Provenance::datasheet); }

void run_validate(const ValidateArgs& a) {
    const std::vector<Output> outputs{{"--json", a.json}};
    check_outputs(outputs);  // before the profile and the run
    std::ostream& report = report_stream(outputs);
    const sim::Scenario s = resolve_specs(a.specs, true);
    const std::string db_path = a.db.empty() ? hwdb::default_db_path() : a.db;
    fs::path scratch_db;  // a private copy of a database this user cannot write, removed at the end
    struct RemoveOnExit {
        const fs::path& path;
        ~RemoveOnExit() {
            std::error_code ec;
            if (!path.empty())
                for (const char* tail : {"", "-wal", "-shm"}) fs::remove(path.string() + tail, ec);
        }
    } remove_scratch{scratch_db};
    hwdb::HardwareView hw;
    {
        hwdb::Database db = open_db(a.db);
        hw = view_for(db, s.cluster, a.specs);
    }
    // A profile goes into hwdb; where this user may not write it, into a private copy for this
    // run: its figures are used, not kept.
    std::string write_path;
    auto store = [&](const profiler::Profile& p) {
        if (write_path.empty()) {
            write_path = db_path;
            const std::string refusal = hwdb::write_refusal(db_path);
            if (!refusal.empty()) {
                scratch_db = fs::temp_directory_path() / ("strata-validate-" + std::to_string(::getpid()) + ".db");
                fs::copy_file(db_path, scratch_db, fs::copy_options::overwrite_existing);
                fs::permissions(scratch_db, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
                write_path = scratch_db.string();
                report << "hwdb " << db_path << " cannot be written by this user (" << refusal
                       << "): the profile goes into a copy for this run and is not kept (--db a writable file keeps it)\n";
            }
        }
        hwdb::Database w = open_db_for_write(write_path);
        const std::int64_t run = w.write_run(p.run, p.measurements, p.fits);
        report << "wrote run " << run << " (" << p.measurements.size() << " measurements) to " << write_path << "\n";
        hw = view_for(w, s.cluster, a.specs);
    };
    // The emulated backend runs the cpu kernels: it is timed, and predicted, as the cpu backend.
    const bool host_kernels = a.rt.backend != "cuda";
    if (host_kernels && !a.no_profile && (a.profile || !has_measurements(hw))) {
        report << "profiling this machine first (strata profile --backend cpu --quick): hwdb has no measurements of gpu '"
               << s.cluster.gpu << "'\n";
        profiler::Options po;
        po.backend = "cpu";
        po.quick = true;
        store(profiler::run_profile(po));
    }
    // The plan's own GEMM and attention shapes, timed as the runtime runs them: a grid's nearest
    // points describe other shapes (a micro-batch of one sequence fills fewer SMs).
    if (!a.no_profile) {
        sim::LowerOptions lo;  // the instructions alone: no simulation, no memory events
        lo.full_mode = true;
        lo.emit_memory = false;
        // The cuda backend stores a 16-bit plan's tensors in its format; the cpu backend computes in fp32.
        const bool cuda = a.rt.backend == "cuda";
        const sim::Precision pr = s.plan->precision;
        const char* dtype = cuda && pr == sim::Precision::bf16 ? "bf16" : cuda && pr == sim::Precision::fp16 ? "fp16" : "fp32";
        profiler::Options po = plan_shape_profile(sim::lower(s.model, s.cluster, *s.plan, lo), dtype);
        if (!po.gemm_shapes.empty() || !po.attention_shapes.empty()) {
            po.backend = host_kernels ? "cpu" : "cuda";
            report << "timing the plan's own shapes on the " << po.backend << " backend: " << po.gemm_shapes.size() << " GEMMs, "
                   << po.attention_shapes.size() << " attention\n";
            // A failure here costs the prediction its exact points, not the validation.
            try {
                store(profiler::run_profile(po));
            } catch (const profiler::Cancelled&) {
                throw;
            } catch (const RuntimeError& e) {
                report << "could not time them (" << e.what() << "): predicting from the grid\n";
            }
        }
    }
    // The prediction: the full-mode Program (the instructions the runtime executes).
    sim::SimOptions so;
    so.full = true;
    so.trace = true;
    std::string cal = a.calibration.empty() && host_kernels ? std::string("none") : a.calibration, cal_line;
    so.calibration = calibration_for(cal, hw, &cal_line);
    so.runtime_kernels = true;  // the runtime's kernels, where hwdb timed them, not a framework's
    const sim::SimOutput pred = sim::simulate(s.model, s.cluster, *s.plan, hw, so);

    // The measurement: warm-up step(s), then the median of the rest; the last step's timeline.
    runtime::RunOptions ro = runtime_options(a.rt, s, hw);
    ro.record_spans = true;
    runtime::Session session(s.model, s.cluster, *s.plan, ro);
    std::vector<double> times;
    double last_loss = 0;
    for (int i = 0; i < a.rt.steps; ++i) {
        const runtime::StepReport r = session.step();
        if (i > 0 || a.rt.steps == 1) times.push_back(r.step_s);
        last_loss = r.loss;
    }
    std::sort(times.begin(), times.end());
    const double measured_step = times[times.size() / 2];
    const sim::SimResult meas = measured_result(session.program(), session.traces());

    // Per class: the time every rank spends in it, averaged over ranks.
    std::map<std::string, ClassRow> rows;
    const double ranks = static_cast<double>(pred.program.ranks.size());
    for (const sim::TraceSpan& sp : pred.result.spans) {
        const std::string c = class_of(pred.program.ranks[static_cast<std::size_t>(sp.rank)].instrs[static_cast<std::size_t>(sp.instr)]);
        if (c.empty()) continue;
        ClassRow& r = rows[c];
        r.name = c;
        r.predicted_s += static_cast<double>(sp.end_ns - sp.start_ns) * 1e-9 / ranks;
        if (sp.provenance >= 0 && sp.provenance < 3) ++r.provenance[static_cast<std::size_t>(sp.provenance)];
    }
    for (const sim::TraceSpan& sp : meas.spans) {
        const std::string c = class_of(session.program().ranks[static_cast<std::size_t>(sp.rank)].instrs[static_cast<std::size_t>(sp.instr)]);
        if (c.empty()) continue;
        rows[c].name = c;
        rows[c].measured_s += static_cast<double>(sp.end_ns - sp.start_ns) * 1e-9 / ranks;
    }
    // Memory: the engine's peaks (blocks allocated on the gpu tier) against the runtime's.
    std::array<double, 3> pm{};
    for (const sim::RankStats& r : pred.result.ranks) {
        pm[0] = std::max(pm[0], r.gpu_peak_allocated_bytes);
        pm[1] = std::max(pm[1], r.peak_bytes[1]);
        pm[2] = std::max(pm[2], r.peak_bytes[2]);
    }
    // The runtime's gpu tier counts the dataflow's tensors: neither backend's pool holds a CUDA
    // context or NCCL buffers (the cuda backend's context, cuBLAS workspace and attention scratch
    // sit outside it), so the model's reserve for them is left out of the prediction on both.
    pm[0] = std::max(0.0, pm[0] - sim::kFrameworkReserveBytes);
    const std::array<double, 3> mm = session.peak_bytes();

    // Report.
    std::string t;
    char buf[256];
    std::snprintf(buf, sizeof buf, "validate %s on the %s backend (%zu ranks), gpu '%s', calibration %s\n", s.name.c_str(), a.rt.backend.c_str(),
                  session.program().ranks.size(), s.cluster.gpu.c_str(), cal_line.c_str());
    t += buf;
    std::snprintf(buf, sizeof buf, "%-26s %14s %14s %9s  %s\n", "", "predicted", "measured", "error", "cost from");
    t += buf;
    std::snprintf(buf, sizeof buf, "%-26s %11.3f ms %11.3f ms %9s\n", "step time", pred.step_time_s * 1e3, measured_step * 1e3,
                  pct(signed_pct(pred.step_time_s, measured_step)).c_str());
    t += buf;
    std::vector<ClassRow> list;
    for (auto& [k, r] : rows) list.push_back(r);
    std::sort(list.begin(), list.end(), [](const ClassRow& x, const ClassRow& y) { return x.measured_s > y.measured_s; });
    for (const ClassRow& r : list) {
        std::snprintf(buf, sizeof buf, "  %-24s %11.3f ms %11.3f ms %9s  %s\n", r.name.c_str(), r.predicted_s * 1e3, r.measured_s * 1e3,
                      pct(signed_pct(r.predicted_s, r.measured_s)).c_str(), r.provenance_name().c_str());
        t += buf;
    }
    const char* tiers[] = {"gpu", "cpu", "ssd"};
    for (int k = 0; k < 3; ++k) {
        if (pm[static_cast<std::size_t>(k)] <= 0 && mm[static_cast<std::size_t>(k)] <= 0) continue;
        std::snprintf(buf, sizeof buf, "peak memory %-14s %14s %14s %9s\n", tiers[k], human_bytes(pm[static_cast<std::size_t>(k)]).c_str(),
                      human_bytes(mm[static_cast<std::size_t>(k)]).c_str(), pct(signed_pct(pm[static_cast<std::size_t>(k)], mm[static_cast<std::size_t>(k)])).c_str());
        t += buf;
    }
    if (const double dev = session.device_reserved_peak_bytes(); dev > 0) {
        // What the device gave the run, beside the dataflow's tensors: the allocator's cached
        // blocks and the kernels' workspace (not the CUDA context), against the model's whole
        // prediction, its context and NCCL reserve included.
        std::snprintf(buf, sizeof buf, "device memory reserved       %14s %14s %9s  (allocator and workspace; the prediction with its %s reserve)\n",
                      human_bytes(pm[0] + sim::kFrameworkReserveBytes).c_str(), human_bytes(dev).c_str(),
                      pct(signed_pct(pm[0] + sim::kFrameworkReserveBytes, dev)).c_str(), human_bytes(sim::kFrameworkReserveBytes).c_str());
        t += buf;
    }
    // The classes that account for most of the step time's error.
    std::vector<ClassRow> worst = list;
    std::sort(worst.begin(), worst.end(), [](const ClassRow& x, const ClassRow& y) {
        return std::fabs(x.predicted_s - x.measured_s) > std::fabs(y.predicted_s - y.measured_s);
    });
    t += "largest errors:";
    for (std::size_t i = 0; i < std::min<std::size_t>(3, worst.size()); ++i) {
        std::snprintf(buf, sizeof buf, "%s %s %+.3f ms (%s)", i ? "," : "", worst[i].name.c_str(), (worst[i].predicted_s - worst[i].measured_s) * 1e3,
                      worst[i].provenance_name().c_str());
        t += buf;
    }
    std::snprintf(buf, sizeof buf, "\nmeasured over %zu steps after a warm-up (median); last loss %.4f\n", times.size(), last_loss);
    t += buf;

    // Files: the report and both timelines beside it.
    std::string json;
    std::string pred_path, meas_path;
    if (!a.json.empty() && a.json != "-") {
        const fs::path base = fs::path(a.json).replace_extension("");
        pred_path = base.string() + ".predicted.trace.json";
        meas_path = base.string() + ".measured.trace.json";
    }
    if (!a.json.empty()) {
        json = "{\n  \"schema\": \"strata.validate/1\",\n  \"scenario\": " + json_quote(s.name) + ",\n  \"backend\": " + json_quote(a.rt.backend) +
               ",\n  \"device\": " + json_quote(s.cluster.gpu) + ",\n  \"steps\": " + std::to_string(a.rt.steps) + ",\n  \"calibration\": " +
               json_quote(cal_line) + ",\n  \"step_time\": {\"predicted_s\": " + json_num(pred.step_time_s, 9) + ", \"measured_s\": " +
               json_num(measured_step, 9) + ", \"error_pct\": " + json_num(signed_pct(pred.step_time_s, measured_step), 2) + "},\n  \"classes\": [";
        for (std::size_t i = 0; i < list.size(); ++i)
            json += std::string(i ? ",\n" : "\n") + "    {\"class\": " + json_quote(list[i].name) + ", \"predicted_s\": " + json_num(list[i].predicted_s, 9) +
                    ", \"measured_s\": " + json_num(list[i].measured_s, 9) + ", \"error_pct\": " +
                    json_num(signed_pct(list[i].predicted_s, list[i].measured_s), 2) + ", \"provenance\": " + json_quote(list[i].provenance_name()) + "}";
        json += "\n  ],\n  \"memory\": [";
        for (int k = 0; k < 3; ++k)
            json += std::string(k ? ",\n" : "\n") + "    {\"tier\": " + json_quote(tiers[k]) + ", \"predicted_bytes\": " + json_num(pm[static_cast<std::size_t>(k)], 0) +
                    ", \"measured_bytes\": " + json_num(mm[static_cast<std::size_t>(k)], 0) + ", \"error_pct\": " +
                    json_num(signed_pct(pm[static_cast<std::size_t>(k)], mm[static_cast<std::size_t>(k)]), 2) + "}";
        json += "\n  ],\n  \"predicted_trace\": " + json_quote(fs::path(pred_path).filename().string()) + ",\n  \"measured_trace\": " +
                json_quote(fs::path(meas_path).filename().string()) + "\n}\n";
    }
    const std::string pred_trace = pred_path.empty() ? "" : sim::trace_text(pred);
    const std::string meas_trace = meas_path.empty() ? "" : sim::to_chrome_trace(session.program(), meas);
    if (!pred_path.empty()) write_output(pred_path, pred_trace);
    if (!meas_path.empty()) write_output(meas_path, meas_trace);
    if (!json.empty()) write_output(a.json, json);
    report << t;
}

void add_validate(CLI::App& app) {
    auto a = std::make_shared<ValidateArgs>();
    auto* cmd = app.add_subcommand("validate", "Predict a plan, run it for real, and print predicted against measured, class by class");
    add_spec_options(cmd, a->specs);
    add_db_option(cmd, a->db);
    add_calibration_option(cmd, a->calibration);
    add_runtime_options(cmd, a->rt, 4);
    cmd->add_option("--json", a->json, "write the report (schema strata.validate/1) to FILE, and both timelines beside it");
    cmd->add_flag("--profile", a->profile, "profile this machine first even if hwdb has measurements of it (cpu backend)");
    cmd->add_flag("--no-profile", a->no_profile, "never profile first: predict from whatever hwdb holds");
    cmd->callback([a] { run_validate(*a); });
}

STRATA_COMMAND(36, add_validate);

}  // namespace
}  // namespace strata::cli
