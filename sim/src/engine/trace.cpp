// Writes the Chrome Trace Event format (the "JSON object" form with traceEvents) by hand, in a fixed
// order: metadata, then spans by (rank, instruction), then memory counters by time of sampling.
// Reference: "Trace Event Format" (Google, 2016), events X (complete), C (counter), M (metadata).
#include "strata/sim/trace.hpp"

#include <cstdio>

#include "strata/sim/engine.hpp"

namespace strata::sim {

std::string trace_us(std::int64_t ns) {
    const bool neg = ns < 0;
    const std::int64_t a = neg ? -ns : ns;
    char buf[40];
    std::snprintf(buf, sizeof buf, "%s%lld.%03lld", neg ? "-" : "", static_cast<long long>(a / 1000),
                  static_cast<long long>(a % 1000));
    return buf;
}

std::string to_chrome_trace(const Program& p, const SimResult& r) {
    std::string o;
    o.reserve(256 + r.spans.size() * 200);
    o += "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n";
    bool first = true;
    auto sep = [&]() {
        if (!first) o += ",\n";
        first = false;
    };
    for (const auto& rp : p.ranks) {
        std::string name = "stage " + std::to_string(rp.pp_stage);
        if (rp.multiplicity > 1)
            name += " (ranks " + std::to_string(rp.global_rank) + ".." +
                    std::to_string(rp.global_rank + rp.multiplicity - 1) + ")";
        else
            name += " (rank " + std::to_string(rp.global_rank) + ")";
        sep();
        o += "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + std::to_string(rp.id) +
             ", \"tid\": 0, \"args\": {\"name\": " + json_quote(name) + "}}";
        sep();
        o += "{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " + std::to_string(rp.id) +
             ", \"tid\": 0, \"args\": {\"sort_index\": " + std::to_string(rp.id) + "}}";
        for (int s = 0; s < kStreamCount; ++s) {
            sep();
            o += "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + std::to_string(rp.id) +
                 ", \"tid\": " + std::to_string(s) + ", \"args\": {\"name\": " +
                 json_quote(to_string(static_cast<Stream>(s))) + "}}";
        }
    }
    for (const auto& sp : r.spans) {
        const auto& rp = p.ranks[static_cast<std::size_t>(sp.rank)];
        const Instr& in = rp.instrs[static_cast<std::size_t>(sp.instr)];
        std::string name = instr_label(in);
        if (in.name > 0 && static_cast<std::size_t>(in.name) < p.names.size())
            name = p.names[static_cast<std::size_t>(in.name)];
        sep();
        o += "{\"ph\": \"X\", \"name\": " + json_quote(name) + ", \"cat\": " +
             json_quote(std::string(to_string(in.phase)) + "," + instr_label(in)) + ", \"pid\": " +
             std::to_string(rp.id) + ", \"tid\": " + std::to_string(static_cast<int>(in.stream)) +
             ", \"ts\": " + trace_us(sp.start_ns) + ", \"dur\": " + trace_us(sp.end_ns - sp.start_ns) +
             ", \"args\": {\"instr\": " + std::to_string(sp.instr) + ", \"kind\": " + json_quote(to_string(in.kind)) +
             ", \"layer\": " + std::to_string(in.layer) + ", \"microbatch\": " + std::to_string(in.microbatch) +
             ", \"flops\": " + json_num(in.flops, 0) + ", \"bytes\": " + json_num(in.bytes, 0);
        if (sp.provenance >= 0)
            o += ", \"provenance\": " + json_quote(hwdb::to_string(static_cast<hwdb::Provenance>(sp.provenance)));
        o += "}}";
    }
    for (const auto& m : r.memory_samples) {
        sep();
        std::string track = std::string("memory ") + to_string(m.tier);
        if (m.tier != Tier::gpu) track += " (node " + std::to_string(m.node) + ")";
        o += "{\"ph\": \"C\", \"name\": " + json_quote(track) + ", \"pid\": " +
             std::to_string(p.ranks[static_cast<std::size_t>(m.rank)].id) + ", \"ts\": " + trace_us(m.time_ns) +
             ", \"args\": {\"bytes\": " + json_num(m.bytes, 0) + "}}";
    }
    o += "\n]}\n";
    return o;
}

}  // namespace strata::sim
