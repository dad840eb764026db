// Data races in the lowered Program (dataflow_hazards): every read waits for its write and every
// write for the reads before it, over many plans (pipelines, ZeRO, CP's exchanges, DualPipeV's
// weight passes, the lock-free update across two steps); and the check itself sees a missing wait.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "strata/lowering/hazards.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/params.hpp"
#include "dataflow_checks.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;
using namespace strata::test;

TEST_CASE("no data races: every read waits for its write, every write for the reads before it", "[dataflow][hazards]") {
    // The runtime found two such races in its first runs (the SP gradients' all-reduce not waiting
    // for the backward; ZeRO-3 edge gathers marking a unit ready before its last bucket arrived):
    // the check walks many plans for them instead.
    ModelSpec gpt = small_gpt();
    gpt.linear_bias = true;
    gpt.tied_embeddings = true;
    ModelSpec llama = small_gpt();
    llama.ffn = FfnKind::swiglu;
    llama.norm = NormKind::rmsnorm;
    llama.position = PositionKind::rope;
    llama.kv_heads = 2;
    int plans = 0;
    for (const ModelSpec* m : {&gpt, &llama})
        for (int tp : {1, 2})
            for (int pp : {1, 2})
                for (int zero : {0, 1, 2, 3})
                    for (int flags = 0; flags < 8; ++flags) {
                        PlanSpec p = plan(tp, pp, 2, 16);
                        p.zero_stage = zero;
                        p.sequence_parallel = tp > 1 && (flags & 1);
                        p.overlap_grad_reduce = p.overlap_param_gather = (flags & 2) == 0;
                        p.recompute = (flags & 4) ? Recompute::full : Recompute::none;
                        p.dp_bucket_bytes = 60000;  // several buckets per stage
                        if (pp > 1 && (flags & 1)) p.schedule = Schedule::gpipe;
                        if (zero >= 1 && (flags & 4)) p.offload.optimizer = TierSplit{0.5, 0.25, 0.25};
                        if (!dataflow_unsupported(*m, p).empty()) continue;
                        const Program prog = lower_df(*m, p);
                        const std::vector<std::string> h = dataflow_hazards(prog, 3);
                        INFO("tp " << tp << " pp " << pp << " zero " << zero << " flags " << flags << (h.empty() ? "" : "\n" + h[0]));
                        CHECK(h.empty());
                        ++plans;
                    }
    CHECK(plans > 100);
    // Context parallelism: the ring's blocks and returns.
    for (int cp : {2, 4}) {
        PlanSpec c = plan(1, 1, 1, 4);
        c.cp = cp;
        CHECK(dataflow_hazards(lower_df(llama, c)).empty());
        c.tp = 2;
        c.sequence_parallel = true;
        c.dp = 2;
        c.zero_stage = 1;
        CHECK(dataflow_hazards(lower_df(gpt, c)).empty());
    }
    // K/V all-gathered at once: the remote blocks written by one all-gather, their gradients
    // returned by one reduce-scatter.
    for (int cp : {2, 4}) {
        PlanSpec c = plan(1, 1, 1, 4);
        c.cp = cp;
        c.cp_comm_type = CpCommType::allgather;
        CHECK(dataflow_hazards(lower_df(llama, c)).empty());
        c.tp = 2;
        c.sequence_parallel = true;
        c.dp = 2;
        c.zero_stage = 1;
        c.recompute = Recompute::full;
        CHECK(dataflow_hazards(lower_df(gpt, c)).empty());
    }
    // Interleaving with micro-batch groups.
    PlanSpec p = plan(1, 2, 1, 8);
    p.schedule = Schedule::interleaved_1f1b;
    p.vpp = 2;
    p.microbatch_group = 3;
    CHECK(dataflow_hazards(lower_df(llama, p)).empty());
    // DualPipeV: its split backwards' weight gradients run in later weight slots, and a bucket's
    // reduction (the embedding's too, whose bucket holds layers) must wait for them.
    for (const ModelSpec* m : {&gpt, &llama})
        for (int tp : {1, 2})
            for (int zero : {0, 1})
                for (bool overlap : {false, true}) {
                    PlanSpec d = plan(tp, 2, 2, 16);
                    d.schedule = Schedule::dualpipe_v;
                    d.vpp = 2;
                    d.zero_stage = zero;
                    d.sequence_parallel = tp > 1;
                    d.overlap_grad_reduce = d.overlap_param_gather = overlap;
                    d.dp_bucket_bytes = 60000;
                    // Autograd's accumulation in bf16: the first backward's gradient is the sum the
                    // later ones add into, also when weight passes run out of order.
                    d.grad_accum_fusion = tp == 1;
                    d.precision = Precision::bf16;
                    const std::vector<std::string> h = dataflow_hazards(lower_df(*m, d), 3);
                    INFO("DualPipeV tp " << tp << " zero " << zero << " overlap " << overlap << (h.empty() ? "" : "\n" + h[0]));
                    CHECK(h.empty());
                }
}

TEST_CASE("lock-free update: no races across two steps, and the update runs under the next step's compute", "[dataflow][hazards]") {
    // The host's update of step i's gradients runs at step i+1's start, beside its forward and
    // backward, which read the parameters it has not changed yet; its result goes up at step
    // i+1's end, and the D2H of step i+1's gradients waits for it to have read step i's. Two
    // steps, so the hazards between them are checked too.
    ModelSpec m = small_gpt();
    int plans = 0;
    for (int tp : {1, 2})
        for (int pp : {1, 2})
            for (int zero : {0, 1})
                for (int tiers = 0; tiers < 3; ++tiers)
                    for (bool lock_free : {false, true}) {
                        PlanSpec p = plan(tp, pp, 2, 16);
                        p.zero_stage = zero;
                        p.dp_bucket_bytes = 60000;
                        p.offload.optimizer = tiers == 0 ? TierSplit{0, 1, 0} : tiers == 1 ? TierSplit{0, 0, 1} : TierSplit{0.5, 0.25, 0.25};
                        p.lock_free_update = lock_free;
                        REQUIRE(dataflow_unsupported(m, p).empty());
                        const Program prog = lower_df(m, p, true, 2);
                        const std::vector<std::string> h = dataflow_hazards(prog, 3);
                        INFO("tp " << tp << " pp " << pp << " zero " << zero << " tiers " << tiers << " lock-free " << lock_free
                                   << (h.empty() ? "" : "\n" + h[0]));
                        CHECK(h.empty());
                        ++plans;
                        // Where the host update sits: lock-free, before the step's first forward
                        // GEMM in program order, else after its last backward one.
                        const RankProgram& r = prog.ranks[0];
                        std::size_t first_adam = r.instrs.size(), first_gemm = r.instrs.size(), last_gemm = 0;
                        for (std::size_t i = 0; i < r.instrs.size(); ++i) {
                            const Instr& in = r.instrs[i];
                            if (in.kind == InstrKind::optimizer && first_adam == r.instrs.size()) first_adam = i;
                            if (in.kind == InstrKind::compute && in.op == Op::gemm) {
                                if (first_gemm == r.instrs.size()) first_gemm = i;
                                if (in.microbatch < p.micro_batches()) last_gemm = i;  // step 0's
                            }
                        }
                        CHECK((first_adam < first_gemm) == lock_free);
                        if (!lock_free) CHECK(first_adam > last_gemm);
                    }
    CHECK(plans == 48);
    // Parameters homed on the host (Angel-PTM): the delayed update writes the fp32 master (version
    // 1), published to the weights after the step's last fetch; race-free over two steps, on one
    // rank and sharded over two. Without the publish's wait the update would write the weights
    // being fetched. In fp32 there is no master to write: refused.
    for (int dp : {1, 2}) {
        PlanSpec q = plan(1, 1, dp, 4 * dp);
        q.precision = Precision::bf16;
        q.zero_stage = 3;
        q.offload.params = TierSplit{0, 1, 0};
        q.offload.optimizer = TierSplit{0, 1, 0};
        q.lock_free_update = true;
        REQUIRE(dataflow_unsupported(m, q).empty());
        const Program prog = lower_df(m, q, true, 2);
        const std::vector<std::string> h = dataflow_hazards(prog, 3);
        INFO("dp " << dp << (h.empty() ? "" : "\n" + h[0]));
        CHECK(h.empty());
        int publishes = 0;
        for (const RankProgram& r : prog.ranks)
            for (const Instr& in : r.instrs) publishes += in.kind == InstrKind::optimizer && prog.names[static_cast<std::size_t>(in.name)] == "optimizer.publish";
        CHECK(publishes == 2 * dp);  // one a step a rank
        q.precision = Precision::fp32;
        CHECK(dataflow_unsupported(m, q).find("plan.lock_free_update") != std::string::npos);
    }
}

TEST_CASE("the hazard check sees a missing wait", "[dataflow][hazards]") {
    // Remove the wait that orders the first TP all-reduce after the GEMM writing its input.
    PlanSpec p = plan(2, 1, 1, 2);
    Program prog = lower_df(small_gpt(), p);
    RankProgram& r = prog.ranks[0];
    for (std::size_t i = 0; i + 1 < r.instrs.size(); ++i)
        if (r.instrs[i].kind == InstrKind::wait && r.instrs[i].stream == Stream::tp_comm && r.instrs[i + 1].kind == InstrKind::collective &&
            r.instrs[i + 1].layer == 0) {
            r.instrs[i].event = prog.events - 1;  // an event recorded much later: no longer an edge
            break;
        }
    const auto h = dataflow_hazards(prog);
    REQUIRE_FALSE(h.empty());
    CHECK(h[0].find("without waiting for") != std::string::npos);
}
