// TP communication overlap in the Program (plan.tp_comm_overlap; Transformer Engine's ring
// exchange): each SP GEMM cut into tp row blocks, a ring step bringing each other member's block,
// counted and sized by hand; no data race between a block's GEMM and the next block's transfer;
// and the race checker, told a GEMM no longer waits for its block, reports it.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "strata/lowering/hazards.hpp"
#include "strata/lowering/lower.hpp"
#include "dataflow_checks.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;
using namespace strata::test;

namespace {

const std::string& name_of(const Program& p, const Instr& in) { return p.names[static_cast<std::size_t>(in.name)]; }

}  // namespace

TEST_CASE("TP overlap cuts each SP GEMM into tp blocks with a ring step per other member", "[dataflow][tp_overlap]") {
    ModelSpec m = small_gpt();
    m.ffn = FfnKind::swiglu;
    m.norm = NormKind::rmsnorm;
    m.position = PositionKind::rope;
    const int tp = 4;
    PlanSpec p = plan(tp, 1, 1, 4);
    p.sequence_parallel = true;
    const Program plain = lower_df(m, p);
    p.tp_comm_overlap = true;
    const Program over = lower_df(m, p);
    const double T = static_cast<double>(p.micro_batch) * m.seq_len, S = T / tp, H = m.hidden;
    // Forward QKV of layer 0, micro-batch 0: one GEMM of T rows without overlap, tp of S rows with.
    std::map<int, const Instr*> blocks;
    double plain_flops = 0, block_flops = 0;
    for (const Instr& in : plain.ranks[0].instrs)
        if (in.op == Op::gemm && name_of(plain, in) == "qkv" && in.phase == Phase::forward && in.layer == 0 && in.microbatch == 0) plain_flops += in.flops;
    int ag_steps = 0, rs_steps = 0;
    for (const Instr& in : over.ranks[0].instrs) {
        if (in.layer != 0 || in.microbatch != 0) continue;
        if (in.op == Op::gemm && name_of(over, in) == "qkv" && in.phase == Phase::forward) {
            blocks[in.ring_step] = &in;
            block_flops += in.flops;
        }
        if (in.kind == InstrKind::collective && name_of(over, in) == "tp.all_gather.ring") {
            ++ag_steps;
            CHECK(in.ring_step >= 1);
            CHECK(in.ring_step < tp);
            // One block per rank per step: an all-gather of S x H bf16 x tp / (tp - 1) moves it.
            CHECK(in.bytes == Approx(S * H * 2 * tp / (tp - 1)));
        }
        if (in.kind == InstrKind::collective && name_of(over, in) == "tp.reduce_scatter.ring") ++rs_steps;
        // Overlap replaces the whole-tensor SP gather before QKV / fc1 and the forward reductions.
        if (in.kind == InstrKind::collective && in.phase == Phase::forward) CHECK(name_of(over, in).find(".ring") != std::string::npos);
    }
    REQUIRE(blocks.size() == static_cast<std::size_t>(tp));
    for (int j = 0; j < tp; ++j) {
        REQUIRE(blocks.count(j) == 1);
        CHECK(blocks[j]->m == static_cast<int>(S));
    }
    CHECK(block_flops == Approx(plain_flops));
    // Forward: QKV and fc1 gathered, proj and fc2 reduced; backward: the proj and fc2 dgrads' dY.
    CHECK(ag_steps == 4 * (tp - 1));
    CHECK(rs_steps == 2 * (tp - 1));
    CHECK(dataflow_hazards(over).empty());
    check_def_before_use(over);
}

TEST_CASE("TP overlap under FP8: blocks of one byte, the reduce-scatter's two where it reduces bf16", "[tp_overlap][fp8]") {
    // Transformer Engine's FP8 userbuffers move the FP8 cast both ways; torchtitan's async TP
    // (torch's fused_scaled_matmul_reduce_scatter) reduces the scaled matmul's bf16 output.
    const ModelSpec m = small_gpt();
    const int tp = 4;
    PlanSpec p = plan(tp, 1, 1, 4);
    p.sequence_parallel = true;
    p.tp_comm_overlap = true;
    p.precision = Precision::fp8;
    const double S = static_cast<double>(p.micro_batch) * m.seq_len / tp, H = m.hidden;
    for (bool rs_fp8 : {true, false}) {
        p.tp_overlap_rs_fp8 = rs_fp8;
        LowerOptions o;
        o.full_mode = true;
        const Program prog = lower(m, cluster(tp), p, o);
        int ag = 0, rs = 0;
        for (const Instr& in : prog.ranks[0].instrs) {
            if (in.kind != InstrKind::collective) continue;
            if (name_of(prog, in) == "tp.all_gather.ring") {
                ++ag;
                CHECK(in.bytes == Approx(S * H * 1 * tp / (tp - 1)));
            } else if (name_of(prog, in) == "tp.reduce_scatter.ring") {
                ++rs;
                CHECK(in.bytes == Approx(S * H * (rs_fp8 ? 1 : 2) * tp / (tp - 1)));
            }
        }
        CHECK(ag > 0);
        CHECK(rs > 0);
    }
}

TEST_CASE("TP overlap: no race over the blocks, and a GEMM that stops waiting for its block is one", "[dataflow][tp_overlap][hazards]") {
    ModelSpec m = small_gpt();
    m.linear_bias = true;
    for (int tp : {2, 4})
        for (int pp : {1, 2})
            for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full}) {
                PlanSpec p = plan(tp, pp, 1, 8);
                p.sequence_parallel = p.tp_comm_overlap = true;
                p.recompute = r;
                const Program prog = lower_df(m, p);
                const std::vector<std::string> h = dataflow_hazards(prog, 3);
                INFO("tp " << tp << " pp " << pp << " recompute " << static_cast<int>(r) << (h.empty() ? "" : "\n" + h[0]));
                CHECK(h.empty());
            }
    // Point the wait before the first block GEMM of ring step 1 at an event recorded at the very
    // start: the GEMM then reads its block while the ring step may still be writing it.
    PlanSpec p = plan(2, 1, 1, 4);
    p.sequence_parallel = p.tp_comm_overlap = true;
    Program prog = lower_df(m, p);
    auto& instrs = prog.ranks[0].instrs;
    int first_event = -1;
    std::size_t broken = 0;
    for (std::size_t i = 0; i < instrs.size() && !broken; ++i) {
        if (instrs[i].kind == InstrKind::record && first_event < 0) first_event = instrs[i].event;
        if (instrs[i].op == Op::gemm && instrs[i].ring_step == 1)
            for (std::size_t j = i; j-- > 0;)
                if (instrs[j].kind == InstrKind::wait && instrs[j].stream == Stream::compute) {
                    instrs[j].event = first_event;
                    broken = i;
                    break;
                }
    }
    REQUIRE(broken > 0);
    CHECK_FALSE(dataflow_hazards(prog).empty());
}
