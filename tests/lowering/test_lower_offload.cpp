// Lowering of the optimizer's tiers: each tier updates its own fraction of the parameters, the SSD
// share swaps its state in and out, and the lock-free update runs the host's update of a step's
// gradients at the next step's start, beside its compute. Expected values by hand in the comments.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <map>

#include "strata/lowering/lower.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;
using strata::test::cluster;
using strata::test::plan;
using strata::test::small_gpt;

namespace {

int count_if(const RankProgram& r, auto pred) { return static_cast<int>(std::count_if(r.instrs.begin(), r.instrs.end(), pred)); }

}  // namespace

TEST_CASE("CPU and SSD optimizer offload, and lock-free update", "[lower]") {
    PlanSpec p = plan(1, 1, 1, 2);
    p.offload.optimizer = TierSplit{0.5, 0.25, 0.25};
    const Program prog = lower(small_gpt(), cluster(1), p);
    const auto& r = prog.ranks[0];
    double gpu = 0, cpu = 0;
    for (const auto& in : r.instrs) {
        if (in.kind == InstrKind::compute && in.op == Op::optimizer_gpu) gpu += in.count;
        if (in.kind == InstrKind::optimizer) cpu += in.count;
    }
    // Each tier updates its own fraction of the 216192 parameters.
    CHECK(gpu == Approx(0.5 * 216192).epsilon(1e-12));
    CHECK(cpu == Approx(0.5 * 216192).epsilon(1e-12));
    CHECK(count_if(r, [](const Instr& in) { return in.kind == InstrKind::copy && in.copy == CopyKind::ssd_read; }) >= 1);
    CHECK(count_if(r, [](const Instr& in) { return in.kind == InstrKind::copy && in.copy == CopyKind::ssd_write; }) >= 1);

    // Lock-free, two steps: each step's host update (of the previous step's gradients) is emitted
    // at its start and waits for no compute of its own step; synchronous, it waits for the step's
    // backward. The next step's compute waits for the update's H2D either way.
    // Each step's update (one a step here): does the cpu stream, through any chain of waits, know
    // of a compute record after the step's first GEMM (its own step's compute)?
    auto update_waits_for_compute = [](const Program& pr, int micro) {
        const auto& rr = pr.ranks[0];
        std::map<int, std::size_t> first_gemm;
        for (std::size_t i = 0; i < rr.instrs.size(); ++i)
            if (rr.instrs[i].kind == InstrKind::compute && rr.instrs[i].op == Op::gemm) first_gemm.emplace(rr.instrs[i].microbatch / micro, i);
        std::array<long, kStreamCount> known;
        known.fill(-1);
        std::map<int, long> at_record;
        std::vector<bool> out;
        for (std::size_t i = 0; i < rr.instrs.size(); ++i) {
            const Instr& in = rr.instrs[i];
            const auto s = static_cast<std::size_t>(in.stream);
            if (in.kind == InstrKind::record) at_record[in.event] = in.stream == Stream::compute ? static_cast<long>(i) : known[s];
            if (in.kind == InstrKind::wait && at_record.count(in.event)) known[s] = std::max(known[s], at_record[in.event]);
            if (in.kind == InstrKind::optimizer) {
                const int step = static_cast<int>(out.size());
                out.push_back(known[s] > static_cast<long>(first_gemm.at(step)));
            }
        }
        return out;
    };
    PlanSpec lf = plan(1, 1, 1, 2);
    lf.offload.optimizer = TierSplit{0, 1, 0};
    lf.lock_free_update = true;
    LowerOptions two;
    two.steps = 2;
    CHECK(lower(small_gpt(), cluster(1), lf).steps == 1);  // one step is the steady state
    CHECK(update_waits_for_compute(lower(small_gpt(), cluster(1), lf, two), lf.micro_batches()) == std::vector<bool>{false, false});
    lf.lock_free_update = false;
    CHECK(update_waits_for_compute(lower(small_gpt(), cluster(1), lf, two), lf.micro_batches()) == std::vector<bool>{true, true});
}
