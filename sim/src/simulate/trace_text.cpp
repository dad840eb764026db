// Chrome Trace Event JSON of a simulated step (the "JSON Object Format" of the Trace Event spec:
// {"traceEvents": [...]}; ts/dur in microseconds). Processes are RankPrograms, threads are streams.
// Fixed number formatting and emission order keep the bytes identical for identical input.
#include <string>

#include "strata/sim/engine.hpp"
#include "strata/sim/simulate.hpp"

namespace strata::sim {

namespace {
std::string us(std::int64_t ns) { return json_num(static_cast<double>(ns) * 1e-3, 3); }
}  // namespace

std::string trace_text(const SimOutput& out) {
    const Program& prog = out.program;
    const SimResult& r = out.result;
    std::string s;
    s.reserve(r.spans.size() * 160 + 4096);
    s += "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"model\":" + json_quote(out.job.model) +
         ",\"cluster\":" + json_quote(out.job.cluster) + ",\"plan\":" + json_quote(out.job.plan) + "},\"traceEvents\":[\n";
    bool first = true;
    auto emit = [&](const std::string& e) {
        if (!first) s += ",\n";
        first = false;
        s += e;
    };
    for (const auto& rp : prog.ranks) {
        const std::string pid = std::to_string(rp.id);
        emit("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":" +
             json_quote("stage " + std::to_string(rp.pp_stage) + " (rank " + std::to_string(rp.global_rank) + ", node " +
                        std::to_string(rp.node) + ", x" + std::to_string(rp.multiplicity) + ")") +
             "}}");
        emit("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"sort_index\":" + pid + "}}");
        for (int st = 0; st < kStreamCount; ++st)
            emit("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" + std::to_string(st) +
                 ",\"args\":{\"name\":" + json_quote(to_string(static_cast<Stream>(st))) + "}}");
    }
    for (const auto& sp : r.spans) {
        if (sp.rank < 0 || sp.rank >= static_cast<int>(prog.ranks.size())) continue;
        const auto& instrs = prog.ranks[static_cast<std::size_t>(sp.rank)].instrs;
        if (sp.instr < 0 || sp.instr >= static_cast<int>(instrs.size())) continue;
        const Instr& in = instrs[static_cast<std::size_t>(sp.instr)];
        std::string name = in.name >= 0 && in.name < static_cast<int>(prog.names.size()) ? prog.names[static_cast<std::size_t>(in.name)] : "";
        if (name.empty()) name = instr_label(in);
        std::string args = "\"kind\":" + json_quote(to_string(in.kind)) + ",\"phase\":" + json_quote(to_string(in.phase));
        if (in.layer >= 0) args += ",\"layer\":" + std::to_string(in.layer);
        if (in.microbatch >= 0) args += ",\"microbatch\":" + std::to_string(in.microbatch);
        if (in.flops > 0) args += ",\"flops\":" + json_num(in.flops, 0);
        if (in.bytes > 0) args += ",\"bytes\":" + json_num(in.bytes, 0);
        emit("{\"ph\":\"X\",\"name\":" + json_quote(name) + ",\"cat\":" + json_quote(to_string(in.kind)) + ",\"pid\":" +
             std::to_string(sp.rank) + ",\"tid\":" + std::to_string(static_cast<int>(in.stream)) + ",\"ts\":" + us(sp.start_ns) +
             ",\"dur\":" + us(sp.end_ns - sp.start_ns) + ",\"args\":{" + args + "}}");
    }
    for (const auto& m : r.memory_samples)
        emit("{\"ph\":\"C\",\"name\":" + json_quote(std::string("memory ") + to_string(m.tier)) + ",\"pid\":" +
             std::to_string(m.rank) + ",\"ts\":" + us(m.time_ns) + ",\"args\":{\"bytes\":" + json_num(m.bytes, 0) + "}}");
    s += "\n]}\n";
    return s;
}

}  // namespace strata::sim
