// ZeRO-Infinity's parameters on NVMe executed (plan.offload.params = ssd, with the optimizer on the
// SSD too): the weights' home is the rank's ssd file, 2 bytes an element; each fetch reads its
// slice into host staging and copies it up; each sub-group's update writes its weights back. The
// values are the bf16 weights the host-homed layout holds, so the loss curve is that layout's bit
// for bit; what moves is the memory: the host no longer holds the weights, the file does.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "runtime_fixtures.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/params.hpp"
#include "strata/lowering/spec_io.hpp"
#include "strata/runtime/cpu_kernels.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;
using Catch::Matchers::Contains;

namespace {

// ZeRO-Infinity's NVMe offload of the optimizer, the weights homed on the host or on the SSD.
PlanSpec infinity(PlanSpec p, bool params_on_ssd) {
    p.precision = Precision::bf16;
    p.zero_stage = 3;
    p.offload.optimizer = TierSplit{0, 0, 1};
    p.offload.params = params_on_ssd ? TierSplit{0, 0, 1} : TierSplit{0, 1, 0};
    return p;
}

}  // namespace

TEST_CASE("parameters on the SSD: the host-homed curve bit for bit, over dp, pp and tp", "[runtime][ssd][offload]") {
    const ModelSpec m = tiny_llama(2);
    struct Case {
        const char* what;
        PlanSpec plan;
    };
    for (const Case& c : {Case{"one rank", cpu_plan()}, Case{"dp 2 (each rank homes its slice)", cpu_plan(1, 1, 2)},
                          Case{"pp 2", cpu_plan(1, 2, 1)}, Case{"tp 2", cpu_plan(2, 1, 1)}}) {
        INFO(c.what);
        const PlanSpec host = infinity(c.plan, false), ssd = infinity(c.plan, true);
        REQUIRE(dataflow_unsupported(m, ssd).empty());
        const std::vector<double> want = losses(m, host, 4), got = losses(m, ssd, 4);
        CHECK(got == want);
        CHECK(got.back() < got.front());
    }
    // fp16 with Megatron's loss scaling (the ZeRO-Infinity paper's precision): the file holds
    // IEEE halves.
    PlanSpec h16 = infinity(cpu_plan(1, 1, 2), false), s16 = infinity(cpu_plan(1, 1, 2), true);
    h16.precision = s16.precision = Precision::fp16;
    runtime::RunOptions scaled;
    scaled.initial_loss_scale = 1024;
    CHECK(losses(m, s16, 4, scaled) == losses(m, h16, 4, scaled));
    // MoE: the expert buffer's ranges (past the dense one) have their slices in the region too.
    PlanSpec ep = cpu_plan(1, 1, 2);
    ep.ep = 2;
    CHECK(losses(tiny_moe(), infinity(ep, true), 3) == losses(tiny_moe(), infinity(ep, false), 3));
    // Against the weights on the GPU (the optimizer on the SSD alike): the same bf16 arithmetic.
    PlanSpec on_gpu = infinity(cpu_plan(), false);
    on_gpu.zero_stage = 1;
    on_gpu.offload.params = TierSplit{};
    CHECK(losses(m, infinity(cpu_plan(), true), 3) == losses(m, on_gpu, 3));
}

TEST_CASE("parameters on the SSD: the file holds the bf16 weights the GPU computes with", "[runtime][ssd][offload]") {
    // After some steps every weight read back from the file is a bf16 value, and the RMSNorm
    // weights (1.0 at the start) have moved: the update's writes reach the file.
    const ModelSpec m = tiny_llama(2);
    runtime::RunOptions o;
    o.lr = 1e-3;
    o.data.fixed_batch = true;
    runtime::Session s(m, cpu_cluster(1), infinity(cpu_plan(), true), o);
    for (int i = 0; i < 6; ++i) s.step();
    const std::int64_t n = s.param_elements(0, "ln1.weight", 0);
    int moved = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const float w = s.param(0, "ln1.weight", 0, i);
        std::uint32_t b;
        std::memcpy(&b, &w, 4);
        CHECK((b & 0xFFFFu) == 0u);
        moved += w != 1.0f;
    }
    CHECK(moved > n / 2);
    // A write through the file (the gradient checks' perturbation) is read back as its bf16 rounding.
    s.set_param(0, "ln1.weight", 0, 1, 1.0078125f + 1e-3f);  // bf16's spacing above 1 is 2^-7: rounds to 1 + 2^-7
    CHECK(s.param(0, "ln1.weight", 0, 1) == 1.0078125f);
    CHECK(s.param(0, "ln1.weight", 0, 0) != 0.0f);  // its neighbour in the page kept its bytes
}

TEST_CASE("parameters on the SSD: the file takes the weights; the host stages two sub-groups of them", "[runtime][ssd][offload][memory]") {
    // The tiny model is one sub-group (DeepSpeed's sub_group_size, 1e9 parameters): at the update
    // the host stages all its weights, as much as homing them there, and the file grows by their
    // 2 bytes an element (page-padded). The walk's host tier is the model's to the byte.
    const ModelSpec m = tiny_llama(2);
    runtime::RunOptions o;
    o.memory_only = true;
    Capacities caps;
    caps.gpus_per_node = 1;
    std::array<double, 3> walked[2];
    MemoryReport model[2];
    for (int k = 0; k < 2; ++k) {
        const PlanSpec p = infinity(cpu_plan(), k == 1);
        runtime::Session s(m, cpu_cluster(1), p, o);
        s.step();
        s.step();
        const auto peaks = s.peak_bytes();
        walked[k] = {peaks[0], peaks[1], peaks[2]};
        model[k] = memory_estimate(m, p, caps);
    }
    const double weights = 2.0 * static_cast<double>(param_layout(m, infinity(cpu_plan(), true), 0).elements());
    INFO("host " << walked[0][1] << " -> " << walked[1][1] << ", ssd " << walked[0][2] << " -> " << walked[1][2] << "; weights " << weights
                 << " B; model host " << model[0].cpu_bytes << " -> " << model[1].cpu_bytes << ", ssd " << model[0].ssd_bytes << " -> "
                 << model[1].ssd_bytes);
    CHECK(model[1].cpu_bytes == Approx(model[0].cpu_bytes));
    CHECK(model[1].ssd_bytes - model[0].ssd_bytes == Approx(weights));
    CHECK(walked[1][1] == Approx(model[1].cpu_bytes).epsilon(1e-12));
    CHECK(walked[1][2] - walked[0][2] >= weights);
    CHECK(walked[1][2] - walked[0][2] <= weights + 4096);  // the region's last page
    CHECK(walked[1][0] == walked[0][0]);  // the GPU holds what it fetched, as before
    // Llama 2 7B (6,738,415,616 parameters, one rank): 7 sub-groups of 1e9; the host keeps two
    // sub-groups' weights (2 x 6.74e9 / 7 x 2 B) of the 2 B a parameter it homed before.
    const ModelSpec l7 = load_model((std::filesystem::path(STRATA_SOURCE_DIR) / "scenarios" / "models" / "llama-2-7b.json").string());
    PlanSpec host = infinity(cpu_plan(), false), ssd = infinity(cpu_plan(), true);
    host.micro_batch = ssd.micro_batch = 1;
    host.global_batch = ssd.global_batch = 1;
    const double n = 6'738'415'616.0;
    REQUIRE(static_cast<double>(param_layout(l7, ssd, 0).elements()) == n);
    caps.cpu_bytes_per_node = caps.ssd_bytes_per_node = 1e15;
    const MemoryReport a = memory_estimate(l7, host, caps), b = memory_estimate(l7, ssd, caps);
    CHECK(a.cpu_bytes - b.cpu_bytes == Approx(2.0 * n - 2.0 * (n / 7) * 2.0));
    CHECK(b.ssd_bytes - a.ssd_bytes == Approx(2.0 * n));
}

TEST_CASE("parameters on the SSD: a checkpoint resumes bit for bit", "[runtime][ssd][offload][checkpoint]") {
    const std::string dir = (std::filesystem::temp_directory_path() / "strata-test-params-ssd").string();
    std::filesystem::remove_all(dir);
    runtime::RunOptions o;
    o.lr = 3e-3;
    const Resumed r = save_and_resume(tiny_llama(2), infinity(cpu_plan(1, 1, 2), true), o, dir);
    CHECK(r.steps_done == 2);
    CHECK(r.before == r.after);
    std::filesystem::remove_all(dir);
}

TEST_CASE("parameters on the SSD: what is not executed is refused by name", "[runtime][ssd][offload]") {
    const ModelSpec m = tiny_llama(2);
    PlanSpec p = infinity(cpu_plan(), true);
    p.offload.optimizer = TierSplit{0, 1, 0};
    CHECK_THROWS_WITH(runtime::Session(m, cpu_cluster(1), p, {}), Contains("plan.offload.optimizer wholly on the SSD"));
    p = infinity(cpu_plan(), true);
    p.precision = Precision::fp32;
    CHECK_THROWS_WITH(runtime::Session(m, cpu_cluster(1), p, {}), Contains("plan.precision = fp32"));
    p = infinity(cpu_plan(), true);
    p.offload.params = TierSplit{0, 0.5, 0.5};
    CHECK_THROWS_WITH(runtime::Session(m, cpu_cluster(1), p, {}), Contains("a share on the SSD beside another tier"));
    p = infinity(cpu_plan(1, 1, 2), true);
    p.zero_stage = 1;
    CHECK_THROWS_WITH(runtime::Session(m, cpu_cluster(2), p, {}), Contains("plan.offload.params = ssd with dp x cp = 2"));
}

TEST_CASE("parameters on the SSD: each sub-group's update writes its weights back", "[lowering][dataflow][offload]") {
    // The ssd stream's weight writes: one per sub-group of the update, each right after that
    // sub-group's state write (DeepSpeed's stage3.py swaps a sub-group's parameters out after its
    // step), together 2 bytes a parameter of the rank's shard; the fetch's read names its slice
    // in the file and a host range of the same elements.
    const ModelSpec m = tiny_llama(2);
    const PlanSpec p = infinity(cpu_plan(), true);
    LowerOptions lo;
    lo.full_mode = true;
    lo.dataflow = true;
    lo.ssd_sub_group_params = 1000;  // several sub-groups for the tiny model
    const Program prog = lower(m, cpu_cluster(1), p, lo);
    const RankProgram& r = prog.ranks[0];
    const double elements = static_cast<double>(param_layout(m, p, 0).elements());
    const int groups = static_cast<int>(std::ceil(elements / 1000));
    REQUIRE(groups > 1);
    int writes = 0, reads = 0;
    double written = 0;
    std::string last;
    for (std::size_t i = 0; i < r.instrs.size(); ++i) {
        const Instr& in = r.instrs[i];
        if (in.kind != InstrKind::copy) continue;
        const std::string& name = prog.names[static_cast<std::size_t>(in.name)];
        const Operands& o = r.operands[i];
        const DataTensor& src = prog.tensors[static_cast<std::size_t>(r.operand_ids[o.first])];
        const DataTensor& dst = prog.tensors[static_cast<std::size_t>(r.operand_ids[o.first + static_cast<std::size_t>(o.n_in)])];
        if (name == "params.ssd_write") {
            ++writes;
            written += in.bytes;
            CHECK(last == "optimizer_state.write");
            CHECK(src.tier == Tier::cpu);
            CHECK(dst.tier == Tier::ssd);
            CHECK(src.offset == dst.offset);
        }
        if (name == "params.fetch_ssd") {
            ++reads;
            CHECK(src.tier == Tier::ssd);
            CHECK(dst.tier == Tier::cpu);
            CHECK(src.elements() == dst.elements());
        }
        last = name;
    }
    CHECK(writes == groups);
    CHECK(written == Approx(2.0 * elements));
    CHECK(reads > 0);
}

TEST_CASE("fp16 bit patterns: every half survives the trip through a float", "[runtime][fp16]") {
    // The ssd file's fp16 weights: IEEE binary16 by hand (1.0 = 0x3C00, 65504 = 0x7BFF, the
    // smallest subnormal 2^-24 = 0x0001, -2 = 0xC000, infinity 0x7C00), and each of the 63,490
    // patterns that are not NaN read and written back unchanged.
    CHECK(runtime::cpu::fp16_bits(1.0f) == 0x3C00);
    CHECK(runtime::cpu::fp16_bits(65504.0f) == 0x7BFF);
    CHECK(runtime::cpu::fp16_bits(0x1p-24f) == 0x0001);
    CHECK(runtime::cpu::fp16_bits(-2.0f) == 0xC000);
    CHECK(runtime::cpu::fp16_bits(70000.0f) == 0x7C00);
    CHECK(runtime::cpu::fp16_bits(1.0f + 0x1p-11f) == 0x3C00);  // a tie to even
    CHECK(runtime::cpu::from_fp16_bits(0x3555) == Approx(0.33325195));
    int kept = 0;
    for (std::uint32_t b = 0; b < 0x10000u; ++b) {
        const auto h = static_cast<std::uint16_t>(b);
        if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0) continue;  // NaN payloads are not kept
        kept += runtime::cpu::fp16_bits(runtime::cpu::from_fp16_bits(h)) == h;
    }
    CHECK(kept == 65536 - 2 * 1023);
}
