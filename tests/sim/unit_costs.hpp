// Unit costs for tests that check ordering, completion and schedule arithmetic rather than
// hardware: compute = 100 ns + 1 ns per MFLOP (and per kB moved); a data movement keeps one class
// busy 1 ns per kB after a 50 ns latency (NVLink for collectives and p2p, its own class for copies,
// the CPU for the host optimizer).
#pragma once
#include "strata/sim/cost.hpp"

namespace strata::sim::test {

struct UnitCosts : CostModel {
    Estimate compute(const Instr& in, const RankProgram&) const override {
        return Estimate{100 + static_cast<std::int64_t>(in.flops * 1e-6 + in.bytes * 1e-3), hwdb::Provenance::measured};
    }
    Demand transfer(const Instr& in, const RankProgram&) const override {
        Demand d;
        d.latency_ns = 50;
        LinkClass c = LinkClass::nvlink;
        if (in.kind == InstrKind::copy) c = in.copy == CopyKind::h2d ? LinkClass::pcie_h2d : in.copy == CopyKind::d2h ? LinkClass::pcie_d2h
                                         : in.copy == CopyKind::ssd_read ? LinkClass::ssd_read : LinkClass::ssd_write;
        if (in.kind == InstrKind::optimizer) c = LinkClass::cpu;
        d.busy_s[static_cast<std::size_t>(c)] = (in.bytes + in.count) * 1e-12 + 1e-9;
        return d;
    }
};

}  // namespace strata::sim::test
