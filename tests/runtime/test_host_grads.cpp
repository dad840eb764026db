// DeepSpeed's gradients homed in host memory (PlanSpec::streams_grads_to_host: ZeRO-2's
// cpu_offload, ZeRO-3's offload_optimizer): each reduction's slice goes down to the host as soon as
// it is reduced, and the host keeps the micro-batches' sum (brought up and added on the GPU before
// each later copy down). Executed, the loss curve is the single rank's: the same sums in another
// order. The GPU keeps no gradient buffer, only the buckets being reduced; the Program's copies are
// DeepSpeed's, counted by hand below.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/hazards.hpp"
#include "strata/lowering/params.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

namespace {

PlanSpec streamed(PlanSpec p, int zero, TierSplit optimizer = TierSplit{0, 1, 0}) {
    p.zero_stage = zero;
    p.offload.optimizer = optimizer;
    p.offload.grads = TierSplit{0, 1, 0};
    return p;
}

// A Llama of real width (128-wide heads, no GQA) on tiny_llama's other settings.
ModelSpec llama_shape(const char* name, int layers, int hidden, int ffn_hidden, int vocab, int seq_len) {
    ModelSpec m = tiny_llama(layers);
    m.name = name;
    m.hidden = hidden;
    m.heads = m.kv_heads = hidden / 128;
    m.head_dim = 128;
    m.ffn_hidden = ffn_hidden;
    m.vocab = vocab;
    m.seq_len = seq_len;
    return m;
}

struct Copies {
    int d2h = 0, h2d = 0, optimizer_d2h = 0;
    double d2h_bytes = 0, h2d_bytes = 0;
};

Copies grad_copies(const Program& prog, int rank) {
    Copies c;
    for (const Instr& in : prog.ranks[static_cast<std::size_t>(rank)].instrs) {
        if (in.kind != InstrKind::copy) continue;
        const std::string& name = prog.names[static_cast<std::size_t>(in.name)];
        if (name == "grads.d2h" && in.phase == Phase::optimizer) ++c.optimizer_d2h;
        else if (name == "grads.d2h") ++c.d2h, c.d2h_bytes += in.bytes;
        else if (name == "grads.h2d") ++c.h2d, c.h2d_bytes += in.bytes;
    }
    return c;
}

}  // namespace

TEST_CASE("gradients streamed to the host: every variant follows the single-rank loss curve", "[runtime][offload][host_grads]") {
    std::vector<Variant> v;
    // One rank, four micro-batches: the host's sum comes up three times a step (ZeRO-Offload on one GPU).
    v.push_back({"one rank, ZeRO-2, optimizer on the CPU", streamed(cpu_plan(), 2)});
    PlanSpec p = streamed(cpu_plan(), 2);
    p.overlap_grad_reduce = false;
    p.dp_bucket_bytes = 4096;  // buckets cut at unit ends: several values a micro-batch
    v.push_back({"one rank, ZeRO-2, 4 kB buckets, no overlap", p});
    v.push_back({"dp 2, ZeRO-2 overlapped", streamed(cpu_plan(1, 1, 2), 2)});
    p = streamed(cpu_plan(1, 1, 2), 2);
    p.overlap_grad_reduce = false;
    p.dp_bucket_bytes = 4096;
    p.grad_accum_fusion = false;  // autograd's fresh gradients, added into the bucket's value
    v.push_back({"dp 2, ZeRO-2, 4 kB buckets, no overlap, unfused accumulation", p});
    v.push_back({"tp 2 dp 2, ZeRO-2 (no sequence parallelism)", streamed(cpu_plan(2, 1, 2), 2)});
    v.push_back({"dp 2, ZeRO-3", streamed(cpu_plan(1, 1, 2), 3)});
    v.push_back({"one rank, ZeRO-3, optimizer on SSD (ZeRO-Infinity)", streamed(cpu_plan(), 3, TierSplit{0, 0, 1})});
    p = streamed(cpu_plan(1, 1, 2), 3);
    p.offload.params = TierSplit{0, 1, 0};
    v.push_back({"dp 2, ZeRO-3, parameters and optimizer on the CPU (offload_param)", p});
    // Written as a DeepSpeed user writes it: the preset puts the gradients with the optimizer.
    p = cpu_plan(1, 1, 2);
    p.framework = "deepspeed";
    p.zero_stage = 2;
    p.offload.optimizer = TierSplit{0, 1, 0};
    apply_framework(p);
    REQUIRE(p.offload.grads.cpu == 1.0);
    REQUIRE(p.streams_grads_to_host());
    v.push_back({"dp 2, ZeRO-2, framework deepspeed, optimizer on the CPU", p});
    // torchtitan's CPU offload (FSDP2's CPUOffloadPolicy): parameters, gradients and optimizer on the host.
    p = cpu_plan(1, 1, 2);
    p.framework = "torchtitan";
    p.zero_stage = 3;
    p.offload.optimizer = p.offload.params = TierSplit{0, 1, 0};
    apply_framework(p);
    REQUIRE(p.streams_grads_to_host());
    v.push_back({"dp 2, framework torchtitan, CPU offload", p});
    // FSDP's way of summing over micro-batches (plan.cpu_grad_accumulation): on the host.
    p = streamed(cpu_plan(), 3);
    p.cpu_grad_accumulation = true;
    v.push_back({"one rank, ZeRO-3, the sum added on the host (FSDP's CPU offload)", p});
    p = streamed(cpu_plan(1, 1, 2), 2);
    p.cpu_grad_accumulation = true;
    p.overlap_grad_reduce = false;
    v.push_back({"dp 2, ZeRO-2, no overlap, the sum added on the host", p});
    check_against_single_rank(tiny_gpt(), v);
    check_against_single_rank(tiny_llama(2), {{"one rank, ZeRO-2, optimizer on the CPU", streamed(cpu_plan(), 2)},
                                              {"dp 2, ZeRO-3", streamed(cpu_plan(1, 1, 2), 3)}});
    // MoE layers: the experts' buffer streams down as the dense one does, a value per bucket (ZeRO-2)
    // or layer (ZeRO-3) even where no data-parallel group reduces it (ep = dp: edp 1).
    std::vector<Variant> moe;
    for (int zero : {2, 3}) {
        moe.push_back({zero == 2 ? "MoE, one rank, ZeRO-2" : "MoE, one rank, ZeRO-3", streamed(cpu_plan(), zero)});
        PlanSpec q = streamed(cpu_plan(1, 1, 2), zero);
        q.ep = 2;
        moe.push_back({zero == 2 ? "MoE, dp 2 ep 2 (edp 1), ZeRO-2" : "MoE, dp 2 ep 2 (edp 1), ZeRO-3", q});
        q = streamed(cpu_plan(1, 1, 2), zero);
        moe.push_back({zero == 2 ? "MoE, dp 2 (edp 2), ZeRO-2" : "MoE, dp 2 (edp 2), ZeRO-3", q});
    }
    check_against_single_rank(tiny_moe(), moe);
}

TEST_CASE("gradients streamed to the host: the host's sums are the loss's gradients", "[runtime][offload][host_grads]") {
    // What the update reads, read back from the host's partition after a step of four micro-batches
    // (three sums brought up and added): against central differences of the loss.
    check_gradients(tiny_gpt(), streamed(cpu_plan(), 2), 0, {{"fc1.weight", 0}, {"qkv.weight", 1}, {"word_embedding.weight", -1}});
    check_gradients(tiny_gpt(), streamed(cpu_plan(), 3), 0, {{"fc2.weight", 1}, {"ln1.weight", 0}});
    // The experts' too (every expert chosen, so the loss is smooth in the router's weights).
    ModelSpec moe = tiny_moe();
    moe.moe->top_k = moe.moe->experts;
    check_gradients(moe, streamed(cpu_plan(), 2), 0, {{"experts.fc1.weight", 1}, {"experts.fc2.weight", 2}, {"router.weight", 1}});
    check_gradients(moe, streamed(cpu_plan(), 3), 0, {{"experts.fc2.weight", 1}, {"router.weight", 2}});
}

TEST_CASE("gradients streamed to the host: a checkpoint resumes bit for bit", "[runtime][offload][host_grads][checkpoint]") {
    // The host's partition is the step's own (the first micro-batch's copy down overwrites it), so
    // the weights, the master and the moments are what a resume needs.
    const std::string dir = (std::filesystem::temp_directory_path() / "strata-test-host-grads-checkpoint").string();
    std::filesystem::remove_all(dir);
    const Resumed r = save_and_resume(tiny_llama(2), streamed(cpu_plan(1, 1, 2), 2), runtime::RunOptions{}, dir);
    CHECK(r.steps_done == 2);
    REQUIRE(r.after.size() == 2);
    CHECK(r.before == r.after);
    std::filesystem::remove_all(dir);
}

TEST_CASE("gradients streamed to the host: the Program's copies are DeepSpeed's", "[runtime][offload][host_grads]") {
    // bf16 on one rank, four micro-batches, buckets of whole units: per bucket the first micro-batch
    // copies its 16-bit gradients down; each later one brings the sum up (16-bit), adds, and copies
    // it down again, 16-bit but the last, whose copy is the fp32 partition's (stage2.py's
    // async_accumulate_grad_in_cpu_via_gpu, then async_inplace_copy_grad_to_fp32_buffer_from_gpu).
    // For N parameters: down 3 x 2N + 4N = 10N bytes, up 3 x 2N = 6N; nothing at the step's end.
    const ModelSpec m = tiny_llama(2);
    PlanSpec p = streamed(cpu_plan(), 2);
    p.precision = Precision::bf16;
    p.dp_bucket_bytes = 4096;
    runtime::RunOptions o;
    o.memory_only = true;
    runtime::Session s(m, cpu_cluster(1), p, o);
    const Copies c = grad_copies(s.program(), 0);
    const double n = static_cast<double>(param_layout(m, p, 0).elements());
    const int micro = p.global_batch / p.micro_batch;
    REQUIRE(micro == 4);
    CHECK(c.optimizer_d2h == 0);
    CHECK(c.d2h > micro);  // several buckets a micro-batch
    CHECK(c.d2h % micro == 0);
    CHECK(c.h2d == c.d2h / micro * (micro - 1));
    CHECK(c.d2h_bytes == Approx(10 * n));
    CHECK(c.h2d_bytes == Approx(6 * n));
    // Over dp 2 each rank takes down its slice of each reduced bucket: half of it.
    PlanSpec d = streamed(cpu_plan(1, 1, 2), 2);
    d.precision = Precision::bf16;
    runtime::Session s2(m, cpu_cluster(2), d, o);
    const Copies c2 = grad_copies(s2.program(), 0);
    const int micro2 = d.global_batch / (d.micro_batch * d.dp);
    CHECK(c2.d2h_bytes == Approx(n / 2 * (2.0 * (micro2 - 1) + 4.0)).epsilon(1e-3));
    // FSDP's sum on the host: every micro-batch's slice comes down in the reduce dtype (2 bytes
    // here), the later ones waited for and added on the host (three fp32 passes a parameter):
    // down 4 x 2N = 8N, nothing up, 3 adds of 12N bytes.
    PlanSpec f = p;
    f.cpu_grad_accumulation = true;
    runtime::Session s4(m, cpu_cluster(1), f, o);
    const Copies c4 = grad_copies(s4.program(), 0);
    CHECK(c4.h2d == 0);
    CHECK(c4.d2h == c.d2h);
    CHECK(c4.d2h_bytes == Approx(8 * n));
    int adds = 0, held = 0;
    double add_bytes = 0;
    const auto& fi = s4.program().ranks[0].instrs;
    for (std::size_t i = 0; i + 1 < fi.size(); ++i) {
        if (fi[i].kind != InstrKind::optimizer || s4.program().names[static_cast<std::size_t>(fi[i].name)] != "grads.host_accumulate") continue;
        ++adds;
        add_bytes += fi[i].bytes;
        // ... each followed by the backward waiting for it (the thread that adds is the one that launches)
        if (fi[i + 1].kind == InstrKind::record && fi[i + 1].stream == Stream::cpu)
            for (const Instr& w : fi)
                if (w.kind == InstrKind::wait && w.stream == Stream::compute && w.event == fi[i + 1].event) ++held;
    }
    CHECK(adds == c.h2d);
    CHECK(held == adds);
    CHECK(add_bytes == Approx(3 * 12 * n));
    // Without streaming (the optimizer partly on the GPU) the offloaded share goes down at the end.
    PlanSpec g = p;
    g.offload.optimizer = TierSplit{0.5, 0.5, 0};
    g.offload.grads = TierSplit{};
    runtime::Session s3(m, cpu_cluster(1), g, o);
    const Copies c3 = grad_copies(s3.program(), 0);
    CHECK(c3.d2h == 0);
    CHECK(c3.optimizer_d2h == 1);
}

TEST_CASE("gradients streamed to the host: the dataflow orders every access", "[runtime][offload][host_grads]") {
    // The host's sum is read by the next micro-batch's copy up only after the copy down wrote it,
    // the bucket's value is read by its copy down only after its reduction, and the update reads
    // the host's gradients after the last copy down: no access races another on another stream.
    std::vector<Variant> v;
    for (int zero : {2, 3})
        for (int dp : {1, 2})
            for (bool overlap : {true, false}) {
                PlanSpec p = streamed(cpu_plan(1, 1, dp), zero);
                p.overlap_grad_reduce = overlap;
                p.dp_bucket_bytes = 4096;
                v.push_back({"", p});
            }
    PlanSpec p = streamed(cpu_plan(1, 1, 2), 3);
    p.offload.params = TierSplit{0, 1, 0};
    v.push_back({"", p});
    for (int dp : {1, 2}) {  // FSDP's sum on the host
        p = streamed(cpu_plan(1, 1, dp), 3);
        p.cpu_grad_accumulation = true;
        p.dp_bucket_bytes = 4096;
        v.push_back({"", p});
    }
    for (const Variant& x : v) {
        INFO("ZeRO-" << x.plan.zero_stage << " dp " << x.plan.dp << " overlap " << x.plan.overlap_grad_reduce << " params on host "
                     << !x.plan.offload.params.all_gpu() << " sum on the CPU " << x.plan.cpu_grad_accumulation);
        runtime::RunOptions o;
        o.memory_only = true;
        // The MoE at ep = dp: its experts' buffer streams without a data-parallel reduction (edp 1).
        PlanSpec q = x.plan;
        q.ep = q.dp;
        for (const auto& [m, plan] : {std::pair{tiny_gpt(), x.plan}, std::pair{tiny_moe(), q}}) {
            runtime::Session s(m, cpu_cluster(plan.gpus()), plan, o);
            const std::vector<std::string> h = dataflow_hazards(s.program(), 3);
            INFO(m.name << (h.empty() ? "" : ": " + h[0]));
            CHECK(h.empty());
        }
    }
}

TEST_CASE("gradients streamed to the host: ZeRO-2's boundary copies hold the backward, ZeRO-3's do not", "[runtime][offload][host_grads]") {
    // DeepSpeed checks each parameter's gradient for overflow before its fp32 copy down at the
    // accumulation boundary (stage_1_and_2.py copy_grads_in_partition), and the check's truth value
    // syncs the host: under overlap_comm too the backward goes on once the copy is done. ZeRO-3's
    // boundary copy is not checked there, so overlap_comm overlaps it.
    // grads.d2h copies, and how many the backward's compute stream waits for (the update waits for all)
    auto blocked = [](const PlanSpec& p) {
        runtime::RunOptions o;
        o.memory_only = true;
        runtime::Session s(tiny_llama(2), cpu_cluster(p.gpus()), p, o);
        const Program& prog = s.program();
        const auto& instrs = prog.ranks[0].instrs;
        std::vector<int> copied;  // the event recorded on d2h right after each copy
        for (std::size_t i = 0; i + 1 < instrs.size(); ++i)
            if (instrs[i].kind == InstrKind::copy && prog.names[static_cast<std::size_t>(instrs[i].name)] == "grads.d2h" &&
                instrs[i + 1].kind == InstrKind::record && instrs[i + 1].stream == Stream::d2h)
                copied.push_back(instrs[i + 1].event);
        int waited = 0;
        for (int ev : copied)
            for (const Instr& in : instrs)
                if (in.kind == InstrKind::wait && in.stream == Stream::compute && in.event == ev && in.phase == Phase::backward) {
                    ++waited;
                    break;
                }
        return std::pair<std::size_t, int>{copied.size(), waited};
    };
    PlanSpec p = streamed(cpu_plan(), 2);
    p.global_batch = p.micro_batch;  // one micro-batch: every copy is a boundary's
    p.dp_bucket_bytes = 4096;
    p.overlap_grad_reduce = true;
    const auto [z2_copies, z2_waited] = blocked(p);
    CHECK(z2_copies > 1);
    CHECK(z2_waited == static_cast<int>(z2_copies));
    p.zero_stage = 3;
    const auto [z3_copies, z3_waited] = blocked(p);
    CHECK(z3_copies > 1);
    CHECK(z3_waited == 0);
    p.overlap_grad_reduce = false;  // the compute stream's own copies
    const auto [z3_serial, z3_serial_waited] = blocked(p);
    CHECK(z3_serial_waited == static_cast<int>(z3_serial));
}

TEST_CASE("gradients streamed to the host: the GPU holds buckets, the host DeepSpeed's fp32 partition", "[runtime][memory][host_grads]") {
    // Llama 2 7B on one GPU as ZeRO-Offload runs it (bf16, full recompute, four micro-batches of
    // one sequence, 500 MB buckets), walked: the GPU holds the 16-bit weights, the checkpoints and
    // a bucket with its host sum's scratch, no gradient buffer (13.5 GB with the gradients on the
    // GPU). The model counts the same within 6 %, on the safe side (its activations' peak at the
    // backward's start and the buckets' at a layer's end are summed).
    const ModelSpec m = llama_shape("llama-2-7b-shape", 32, 4096, 11008, 32000, 4096);
    for (int zero : {2, 3}) {
        PlanSpec p = streamed(cpu_plan(), zero);
        p.precision = Precision::bf16;
        p.recompute = Recompute::full;
        p.micro_batch = 1;
        p.global_batch = 4;
        p.dp_bucket_bytes = 500'000'000;
        PlanSpec g = p;
        g.offload.grads = TierSplit{};
        INFO("ZeRO-" << zero);
        const WalkAndModel r = walk_and_model(m, p), kept = walk_and_model(m, g);
        const double n = static_cast<double>(param_layout(m, p, 0).elements());
        INFO("GPU walk " << r.walk[0] << " B, model " << r.model_gpu() << " B; with the gradients on the GPU " << kept.walk[0] << " B");
        CHECK(r.model_gpu() >= r.walk[0]);
        CHECK(r.model_gpu() <= 1.06 * r.walk[0]);
        // The 2-byte gradient buffer given up, less three buckets: the one going down, the next
        // filling (overlap_comm) and the host sum's scratch; a bucket closes once it holds 500 MB,
        // so it holds at most one more layer (405 MB).
        CHECK(kept.walk[0] - r.walk[0] >= 2.0 * n - 3 * (500e6 + 405e6));
        // The host's partition is fp32: 4 bytes a parameter, where the optimizer's own copy of the
        // gradients was 2 (the end-of-step copy down) with the gradients on the GPU.
        INFO("host walk " << r.walk[1] << " B, model " << r.model.cpu_bytes << " B");
        CHECK(r.walk[1] == Approx(r.model.cpu_bytes).epsilon(1e-9));
        CHECK(r.walk[1] - kept.walk[1] == Approx(n * (4.0 - 2.0)).epsilon(1e-9));
        // FSDP's sum on the host: no scratch on the GPU, one slice's copy on the host beside the sum.
        PlanSpec f = p;
        f.cpu_grad_accumulation = true;
        const WalkAndModel rf = walk_and_model(m, f);
        INFO("summed on the host: GPU walk " << rf.walk[0] << " B, model " << rf.model_gpu() << " B; host walk " << rf.walk[1] << " B, model "
                                             << rf.model.cpu_bytes << " B");
        // (The model keeps two values under overlap_comm, which the first micro-batch's copies, not
        // waited for, can hold; the later ones hold one: 7 % over the walk for ZeRO-2 here.)
        CHECK(rf.walk[0] < r.walk[0]);
        CHECK(rf.model_gpu() >= rf.walk[0]);
        CHECK(rf.model_gpu() <= 1.08 * rf.walk[0]);
        CHECK(rf.walk[1] > r.walk[1]);
        CHECK(rf.model.cpu_bytes >= rf.walk[1]);
        CHECK(rf.model.cpu_bytes <= 1.01 * rf.walk[1]);
    }
    // The tiny models (and the MoE at edp 1), sharded over two ranks too: the model stays on the safe side (at this size a
    // layer's gradients outweigh its activations, and the sum of maxima over-counts by up to 28 %).
    for (const ModelSpec& t : {tiny_llama(2), tiny_moe()})
        for (int zero : {2, 3})
            for (int dp : {1, 2}) {
                PlanSpec p = streamed(cpu_plan(1, 1, dp), zero);
                p.precision = Precision::bf16;
                p.dp_bucket_bytes = 4096;
                p.ep = t.is_moe() ? dp : 1;  // edp 1: the experts' gradients are values only because they stream
                INFO(t.name << ", ZeRO-" << zero << ", dp " << dp);
                const WalkAndModel r = walk_and_model(t, p);
                INFO("GPU walk " << r.walk[0] << " B, model " << r.model_gpu() << " B");
                CHECK(r.model_gpu() >= r.walk[0]);
                CHECK(r.walk[1] == Approx(r.model.cpu_bytes).epsilon(1e-9));
            }
}

TEST_CASE("gradients streamed to the host: the layers' values are not summed with the head's backward", "[runtime][memory][host_grads]") {
    // A large vocabulary on narrow layers (Llama 3's 128k rows at 2048 wide): the head (its fp32
    // logits at 8k tokens, 4.2 GB) is the GPU's peak. ZeRO-3 streams each
    // layer's gradients down as the layers' backward reduces them; the head's backward runs before
    // any of them exists, and the pass ends with the last one's copy down. The model's peak is the
    // head's, without the two layer values (2 x 100 M parameters x 2 B under overlap_comm).
    const ModelSpec m = llama_shape("wide-vocabulary", 4, 2048, 8192, 128256, 8192);
    PlanSpec p = streamed(cpu_plan(), 3);
    p.precision = Precision::bf16;
    p.recompute = Recompute::full;
    p.micro_batch = 1;
    p.global_batch = 2;
    const WalkAndModel r = walk_and_model(m, p);
    const StageMemory& s = r.model.stages.at(0);
    // The two values by hand: a layer's parameters (4 h^2 attention + 3 h f MLP + 2 h norms) in bf16.
    const double h = m.hidden, layer = 4 * h * h + 3 * h * m.ffn_hidden + 2 * h;
    INFO("GPU walk " << r.walk[0] << " B, model " << r.model_gpu() << " B; the layers' backward alone holds " << s.layers_backward_gpu_bytes << " B");
    CHECK(s.layers_backward_gpu_bytes == Approx(2 * 2.0 * layer + 2.0 * layer).epsilon(1e-9));  // two values and the host sum's scratch
    // The walk's peak is the loss's cast (fp32 and bf16 logits beside the weights). The model's
    // head term holds neither the layers' values nor the head's whole gradients ((h V + h) x 2 B, which
    // come after the fp32 logits are freed: Lifetime::after_loss): it equals the walk but for the
    // token ids (8 B a token, which the model does not count).
    const double head_grads = (h * m.vocab + h) * 2.0;  // the output layer and the final norm
    CHECK(s.after_loss_gpu_bytes == Approx(head_grads).epsilon(1e-9));
    CHECK(r.model_gpu() == Approx(r.walk[0]).epsilon(0.001));
    // Summed with the head's workspace, as before stop 67, the layers' values put the model 5 % over.
    CHECK(r.model_gpu() + s.layers_backward_gpu_bytes > 1.04 * r.walk[0]);
}

TEST_CASE("gradients streamed to the host: what is not executed is refused by name", "[runtime][offload][host_grads]") {
    auto refused = [](const ModelSpec& m, const PlanSpec& p, const char* what) {
        CHECK_THROWS_WITH(runtime::Session(m, cpu_cluster(p.gpus()), p, {}), Catch::Contains("plan.offload.grads") && Catch::Contains(what));
    };
    PlanSpec p = streamed(cpu_plan(), 2, TierSplit{0.5, 0.5, 0});  // half the update on the GPU reads GPU gradients
    refused(tiny_gpt(), p, "wholly off the GPU");
    p = streamed(cpu_plan(), 1);  // ZeRO-1 accumulates on the GPU
    refused(tiny_gpt(), p, "under ZeRO-2/3");
    refused(tiny_gpt(), streamed(cpu_plan(1, 2), 2), "pipeline engine");
    PlanSpec sp = streamed(cpu_plan(2), 2);
    sp.sequence_parallel = true;
    refused(tiny_gpt(), sp, "sequence parallelism");
}
