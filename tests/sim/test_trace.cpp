// The Chrome trace: valid JSON object with traceEvents, a process per RankProgram, a thread per
// stream, X events with exact microsecond timestamps, C counters for memory.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "strata/sim/engine.hpp"
#include "strata/sim/trace.hpp"

using namespace strata::sim;

namespace {
struct NsCost : CostModel {
    Estimate compute(const Instr& in, const RankProgram&) const override { return Estimate{static_cast<std::int64_t>(in.flops)}; }
    Demand transfer(const Instr& in, const RankProgram&) const override {
        Demand d;
        d.busy_s[static_cast<std::size_t>(LinkClass::nic)] = in.bytes * 1e-9;
        return d;
    }
};
}  // namespace

TEST_CASE("trace: microseconds with three decimals, exact", "[trace]") {
    CHECK(trace_us(0) == "0.000");
    CHECK(trace_us(1) == "0.001");
    CHECK(trace_us(12345) == "12.345");
    CHECK(trace_us(1234567890123) == "1234567890.123");
}

TEST_CASE("trace: structure of a small run", "[trace]") {
    Program p;
    p.events = 1;
    p.names = {"", "fc1"};
    RankProgram r;
    r.id = 0;
    r.pp_stage = 3;
    r.global_rank = 24;
    r.multiplicity = 8;
    Instr k;
    k.kind = InstrKind::compute;
    k.op = Op::gemm;
    k.name = 1;
    k.flops = 1500;  // 1.5 us
    Instr a;
    a.kind = InstrKind::alloc;
    a.bytes = 4096;
    a.tensor = 1;
    Instr c;
    c.kind = InstrKind::collective;
    c.stream = Stream::dp_comm;
    c.bytes = 2001;
    r.instrs = {a, k, c};
    p.ranks.push_back(r);
    NsCost cost;
    EngineOptions o;
    o.record_trace = true;
    o.memory.fragmentation = 0;
    auto res = simulate_program(p, cost, nullptr, o);
    const std::string text = to_chrome_trace(p, res);
    auto j = nlohmann::json::parse(text);
    REQUIRE(j.is_object());
    CHECK(j["displayTimeUnit"] == "ns");
    const auto& ev = j["traceEvents"];
    REQUIRE(ev.is_array());
    int xs = 0, cs = 0;
    bool named = false, stream_named = false;
    for (const auto& e : ev) {
        if (e["ph"] == "M" && e["name"] == "process_name") named = e["args"]["name"] == "stage 3 (ranks 24..31)";
        if (e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == 4) stream_named = e["args"]["name"] == "dp-comm";
        if (e["ph"] == "X") {
            ++xs;
            if (e["name"] == "fc1") {
                CHECK(e["dur"].get<double>() == Approx(1.5));
                CHECK(e["tid"] == 0);
                CHECK(e["args"]["flops"] == 1500);
                CHECK(e["args"]["provenance"] == "datasheet");  // Estimate's default
            } else {
                // The all-reduce: 2001 ns of nic alone, on dp-comm from 0.
                CHECK(e["name"] == "all_reduce(tp)");
                CHECK(e["ts"].get<double>() == Approx(0.0));
                CHECK(e["dur"].get<double>() == Approx(2.001));
            }
        }
        if (e["ph"] == "C") {
            ++cs;
            CHECK(e["args"]["bytes"] == 4096);  // 4096 rounds to itself (a multiple of 512 B)
        }
    }
    CHECK(named);
    CHECK(stream_named);
    CHECK(xs == 2);
    CHECK(cs == 1);
    // The raw text keeps nanosecond precision: "dur": 2.001 exactly.
    CHECK(text.find("\"dur\": 2.001") != std::string::npos);
}

TEST_CASE("trace: nothing recorded unless asked", "[trace]") {
    Program p;
    RankProgram r;
    Instr k;
    k.flops = 10;
    r.instrs = {k};
    p.ranks.push_back(r);
    NsCost cost;
    auto res = simulate_program(p, cost, nullptr);
    CHECK(res.spans.empty());
    CHECK(res.memory_samples.empty());
}
