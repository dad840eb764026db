// Multi-token prediction on the runtime (DeepSeek-V3 Sec. 2.2, Megatron-Core's MTP; lowering's
// edges.cpp, runtime's mtp_ops.cpp): each module predicts the token k + 1 places on from the
// hidden state below and the next token's embedding; its loss, over the rows the shift leaves,
// joins the objective weighted mtp_loss_scale / depth.
#include <catch2/catch.hpp>

#include <cmath>

#include "runtime_checks.hpp"
#include "strata/lowering/spec_io.hpp"
#include "runtime_fixtures.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

namespace {
ModelSpec with_mtp(ModelSpec m, int depth) {
    m.mtp_depth = depth;
    m.name += "-mtp" + std::to_string(depth);
    return m;
}
double objective(const runtime::StepReport& r) { return r.loss + 0.1 * r.mtp_loss; }  // RunOptions' default scale
}  // namespace

TEST_CASE("MTP: the modules' losses start at chance and fall with the model's", "[runtime][mtp]") {
    const ModelSpec m = with_mtp(tiny_llama(2), 2);
    runtime::RunOptions o;
    o.lr = 3e-3;
    runtime::Session s(m, cpu_cluster(1), cpu_plan(), o);
    std::vector<runtime::StepReport> r;
    for (int i = 0; i < 6; ++i) r.push_back(s.step());
    const double chance = std::log(static_cast<double>(padded_vocab(m, cpu_plan())));
    CHECK(r.front().mtp_loss == Approx(chance).epsilon(0.02));
    CHECK(r.back().mtp_loss < r.front().mtp_loss);
    CHECK(r.back().loss < r.front().loss);
    // The model's own curve moves with the modules (they share the embedding, the head and the
    // hidden state), but not by their losses: `loss` is the model's alone.
    runtime::Session plain(tiny_llama(2), cpu_cluster(1), cpu_plan(), o);
    CHECK(plain.step().loss == Approx(r.front().loss).epsilon(1e-12));
}

TEST_CASE("MTP: gradients match finite differences of the loss and the modules' weighted mean", "[runtime][mtp][grad]") {
    SECTION("one module: its norms, projection, layer, final norm; the shared embedding and head") {
        check_gradients(with_mtp(tiny_llama(2), 1), cpu_plan(), 0,
                        {{"mtp.enorm.weight", 3}, {"mtp.hnorm.weight", 3}, {"mtp.eh_proj.weight", 3}, {"qkv.weight", 3}, {"fc1.weight", 3},
                         {"mtp.final_norm.weight", 3}, {"word_embedding.weight", -1}, {"lm_head.weight", -1}, {"fc2.weight", 1}},
                        {}, false, 1e-3, objective);
    }
    SECTION("two modules, the second on the first's hidden state; TP 2 with SP, rank 1's shards") {
        check_gradients(with_mtp(tiny_llama(2), 2), cpu_plan(), 0, {{"mtp.eh_proj.weight", 5}, {"mtp.hnorm.weight", 5}, {"qkv.weight", 3}},
                        {}, false, 1e-3, objective);
        PlanSpec p = cpu_plan(2);
        p.sequence_parallel = true;
        check_gradients(with_mtp(tiny_llama(2), 1), p, 1, {{"mtp.eh_proj.weight", 3}, {"fc1.weight", 3}, {"word_embedding.weight", -1}}, {},
                        false, 1e-3, objective);
    }
}

TEST_CASE("MTP: every parallel variant gives the single-rank curves", "[runtime][mtp]") {
    const ModelSpec m = with_mtp(tiny_llama(2), 2);
    PlanSpec sp = cpu_plan(2);
    sp.sequence_parallel = true;
    PlanSpec pp = cpu_plan(1, 2);
    PlanSpec zero1 = cpu_plan(1, 1, 2);
    zero1.zero_stage = 1;
    PlanSpec zero3 = cpu_plan(1, 1, 2);
    zero3.zero_stage = 3;  // the modules' weights, in the head's unit, gathered with it
    PlanSpec full = cpu_plan(2, 2);
    full.recompute = Recompute::full;
    // Autograd's unfused accumulation: the head and the embedding are used by every module, each
    // use a gradient of its own added to the sum (until stop 58's fix the second use's replaced the first's).
    PlanSpec unfused = cpu_plan(1, 1, 2);
    unfused.grad_accum_fusion = false;
    runtime::RunOptions emulated;
    emulated.backend = runtime::Backend::emulated;
    // Context parallelism (since stop 64): a rank's rows are two chunks of each sequence, and each
    // row's shifted token and target are read at its own position (the data's, not a roll across
    // ranks); the ring, the K/V all-gather and Ulysses.
    const std::vector<Variant> variants{{"cp 2, ring", cp2_plan(CpCommType::p2p)}, {"cp 2, K/V all-gather", cp2_plan(CpCommType::allgather)},
                                        {"cp 2, Ulysses", cp2_plan(CpCommType::a2a)},
                                        {"tp 2", cpu_plan(2)},   {"tp 2, sp", sp}, {"dp 2, unfused gradient accumulation", unfused},
                                        {"pp 2", pp},             {"dp 2, ZeRO-1", zero1},  {"dp 2, ZeRO-3", zero3},
                                        {"tp 2 x pp 2, full recompute", full}, {"one rank on the emulated device", cpu_plan(), emulated}};
    check_against_single_rank(m, variants);
    // The modules' own curve too.
    runtime::RunOptions o;
    o.lr = 3e-3;
    auto mtp_curve = [&](const PlanSpec& p, runtime::RunOptions opt) {
        opt.lr = 3e-3;
        runtime::Session s(m, cpu_cluster(p.gpus()), p, opt);
        std::vector<double> out;
        for (int i = 0; i < kSteps; ++i) out.push_back(s.step().mtp_loss);
        return out;
    };
    const std::vector<double> ref = mtp_curve(cpu_plan(), o);
    for (const Variant& v : variants) {
        const std::vector<double> got = mtp_curve(v.plan, v.options);
        INFO(v.name);
        for (int i = 0; i < kSteps; ++i) CHECK(got[static_cast<std::size_t>(i)] == Approx(ref[static_cast<std::size_t>(i)]).epsilon(kTol));
    }
}

TEST_CASE("MTP with MLA and routed experts (DeepSeek-V3's shape): EP and TP on the single-rank curve", "[runtime][mtp][mla]") {
    const ModelSpec m = with_mtp(tiny_mla_moe(), 1);
    PlanSpec ep = cpu_plan(1, 1, 2);
    ep.ep = 2;
    PlanSpec tp = cpu_plan(2, 2);
    tp.sequence_parallel = true;
    // ZeRO-3 with the experts sharded over the expert-data-parallel group (ep 1, edp 2): the MTP
    // module's experts, in the head's unit, are gathered over edp with its dense weights.
    PlanSpec z3 = cpu_plan(1, 1, 2);
    z3.zero_stage = 3;
    runtime::RunOptions emulated;
    emulated.backend = runtime::Backend::emulated;
    // Homed on the host (ZeRO-3 Offload) or on the SSD (ZeRO-Infinity): the head's unit, the
    // module's experts with it, fetched a pass at a time; a backward pass that reads none of the
    // experts fetches and gathers them all the same (its copy lives until its gathers are done).
    PlanSpec host = z3;
    host.offload.params = host.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
    PlanSpec ssd = cpu_plan();
    ssd.zero_stage = 3;
    ssd.precision = Precision::bf16;
    ssd.offload.params = ssd.offload.optimizer = TierSplit{0.0, 0.0, 1.0};
    PlanSpec cp_ep = cp2_plan(CpCommType::p2p);  // the experts over the two CP ranks (edp spans dp x cp)
    cp_ep.ep = 2;
    check_against_single_rank(m, {{"cp 2 x ep 2, ring", cp_ep}, {"tp 2 x cp 2, sp, Ulysses", cp2_plan(CpCommType::a2a, 2)},
                                  {"dp 2 x ep 2", ep}, {"tp 2 x pp 2, sp", tp}, {"dp 2, ZeRO-3, experts over edp 2", z3},
                                  {"dp 2, ZeRO-3, experts over edp 2, emulated devices", z3, emulated},
                                  {"dp 2, ZeRO-3, parameters and optimizer on the CPU", host},
                                  {"dp 2, ZeRO-3, parameters and optimizer on the CPU, emulated devices", host, emulated}});
    PlanSpec one16 = cpu_plan();  // the SSD tier holds 2-byte weights: against a bf16 rank
    one16.precision = Precision::bf16;
    check_against(m, one16, {{"parameters and optimizer on the SSD, bf16", ssd}});
}

TEST_CASE("MTP: the walk holds the module's layer backward workspace, and the model counts it", "[runtime][mtp][memory]") {
    // The modules' backward runs before the head's and the layers', beside every held tensor, and
    // its layer is never recomputed: its gradients' workspace is the head stage's, where the
    // layers' is smaller once the logits and the modules' tensors are freed. DeepSeek-V3's layers
    // cut to 8 (a MoE layer in the module, 256 experts of 2048 x 7168) at tp 4 pp 2 dp 8 ep 2 in
    // fp32 with full recompute: the walk peaks in the module's experts' fc2 backward, 3.76 GB of
    // their output's gradient beside everything held; until stop 64 the model left it out and
    // was 6.6 % under the walk (the random memory sweep, seed 75).
    ModelSpec m = load_model(STRATA_SOURCE_DIR "/scenarios/models/deepseek-v3.json");
    m.layers = 8;
    m.moe->first_k_dense = 1;
    ClusterSpec c = load_cluster(STRATA_SOURCE_DIR "/scenarios/clusters/dgx-h100-x8.json");
    c.nodes = 8;
    PlanSpec p;
    p.tp = 4;
    p.pp = 2;
    p.dp = 8;
    p.ep = 2;
    p.micro_batch = 4;
    p.global_batch = 128;
    p.precision = Precision::fp32;
    p.sequence_parallel = true;
    p.tp_comm_overlap = true;
    p.zero_stage = 2;
    p.recompute = Recompute::full;
    p.offload.optimizer = TierSplit{0, 1, 0};
    runtime::RunOptions o;
    o.memory_only = true;
    runtime::Session s(m, c, p, o);
    s.step();
    s.step();
    Capacities caps;
    caps.gpus_per_node = c.gpus_per_node;
    const double walk = s.peak_bytes()[0], model = memory_estimate(m, p, caps).hbm_bytes - kFrameworkReserveBytes;
    INFO("walk " << walk << " B, model " << model << " B");
    CHECK(walk == Approx(model).epsilon(0.03));  // -1.5 %: the model above
}

TEST_CASE("MTP: what is not executed is refused with the field named", "[runtime][mtp]") {
    CHECK_THROWS_WITH(runtime::Session(with_mtp(tiny_gpt(), 1), cpu_cluster(1), cpu_plan(), {}), Catch::Contains("model.mtp_depth"));
}
