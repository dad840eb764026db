// Database::view(): default resolution of node, links, SSD and CPU; did-you-mean on unknown ids;
// and which run's measured figures are attached (newest representative run of that GPU; CPU-backend
// runs supply host figures for any GPU).
#include <catch2/catch.hpp>

#include "hwdb/hwdb_fixture.hpp"
#include "strata/common/error.hpp"

using namespace strata::hwdb;
using namespace strata::hwdb::testing;
using Catch::Matchers::Contains;

TEST_CASE("view without a node takes links from the GPU and PCIe-matched defaults", "[hwdb][view]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("v.db"));
    HardwareView v = db.view("H100-SXM5-80GB", "", "", "", "", "");
    CHECK(v.gpu.id == "H100-SXM5-80GB");
    CHECK(v.scale_up.id == "nvlink4");         // the GPU's own scale-up link
    CHECK(v.host.id == "pcie5-x16");           // the GPU's host link
    CHECK(v.nic.id == "ib-ndr");               // PCIe 5 host -> NDR NIC
    CHECK(v.ssd.id == "nvme-gen5-x4-datacenter");
    CHECK(v.cpu.id == "cpu-generic");
    CHECK(v.node.id.empty());
    CHECK(v.measured_run == 0);
    CHECK(v.gemm_points.empty());
    CHECK_FALSE(v.hbm);

    // A GPU without NVLink falls back to its host link for scale-up (PCIe between GPUs).
    HardwareView l40 = db.view("L40S", "", "", "", "", "");
    CHECK(l40.scale_up.id == "pcie4-x16");
    CHECK(l40.nic.id == "ib-hdr");
}

TEST_CASE("a generic node has the host memory of its GPU's generation and a drive a GPU", "[hwdb][view]") {
    // Before, a cluster that named no node had 0 B of host DRAM and no drive: every offloaded plan
    // on it was out of memory. DRAM per GPU comes from the node row of the same GPU, else of the
    // same architecture, else twice the HBM (DGX-1's ratio, the lowest of the node rows).
    TempDir t;
    Database db = Database::create_seeded(t.file("v.db"));
    const HardwareView dgx1 = db.view("V100-SXM2-32GB", "DGX-1-V100", "", "", "", "");
    const HardwareView v100 = db.view("V100-SXM2-32GB", "", "", "", "", "");
    CHECK(v100.node.gpus_per_node == 8);
    CHECK(v100.node.cpu_dram_bytes == Approx(dgx1.node.cpu_dram_bytes / dgx1.node.gpus_per_node * 8));  // 512 GB / 8 GPUs
    CHECK(v100.node.ssd_count == 8);
    CHECK_THAT(v100.node.notes, Contains("DGX-1-V100"));
    // H100 PCIe has no node row of its own: the Hopper row (DGX H100, 2 TB for 8 GPUs).
    const HardwareView pcie = db.view("H100-PCIe-80GB", "", "", "", "", "");
    CHECK(pcie.node.cpu_dram_bytes == Approx(2048e9));
    // No node row of the architecture: twice the HBM a GPU.
    const HardwareView l40 = db.view("L40S", "", "", "", "", "");
    CHECK(l40.node.cpu_dram_bytes == Approx(2 * 8 * l40.gpu.hbm_bytes));
}

TEST_CASE("view with a node takes the node's fabric, NIC, SSD and CPU; explicit ids win", "[hwdb][view]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("v.db"));
    HardwareView v = db.view("A100-SXM4-40GB", "DGX-A100", "", "", "", "");
    CHECK(v.node.id == "DGX-A100");
    CHECK(v.scale_up.id == "nvswitch-gen2");
    CHECK(v.nic.id == "ib-hdr");
    CHECK(v.cpu.id == "epyc-7742-x2");
    CHECK(v.ssd.id == "nvme-gen4-x4-datacenter");
    CHECK(v.host.id == "pcie4-x16");
    CHECK(v.scale_up.per_dir_Bps == Approx(300e9));

    HardwareView o = db.view("A100-SXM4-40GB", "DGX-A100", "nvlink3", "roce-200g", "sata-ssd", "cpu-generic");
    CHECK(o.scale_up.id == "nvlink3");
    CHECK(o.nic.id == "roce-200g");
    CHECK(o.ssd.id == "sata-ssd");
    CHECK(o.cpu.id == "cpu-generic");
}

TEST_CASE("view scales a node's fabric to an export-limited GPU", "[hwdb][view]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("v.db"));
    // A800 in an A100 chassis: 200 of NVSwitch gen2's 300 GB/s per direction. The achievable figure
    // scales the same way: 240 x 200/300 = 160 GB/s, which is what NCCL measured on 8x A800
    // (NVIDIA/nccl issue #412: ~160 GB/s busbw), an independent check of the rule.
    HardwareView v = db.view("A800-SXM4-80GB", "DGX-A100", "", "", "", "");
    CHECK(v.scale_up.per_dir_Bps == Approx(200e9));
    CHECK(v.scale_up.achievable_Bps == Approx(160e9));
}

TEST_CASE("view: unknown ids are InputErrors with the field and a did-you-mean", "[hwdb][view]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("v.db"));
    try {
        db.view("H100", "", "", "", "", "");
        FAIL("no error");
    } catch (const strata::InputError& e) {
        CHECK(e.path() == "cluster.gpu");
        CHECK_THAT(e.rule(), Contains("\"H100\" is not a GPU in the hardware database"));
        CHECK_THAT(e.rule(), Contains("did you mean") && Contains("\"H100-SXM5-80GB\""));
    }
    CHECK_THROWS_WITH(db.view("H100-SXM5-80GB", "DGX-A10", "", "", "", ""), Contains("cluster.node") && Contains("\"DGX-A100\""));
    CHECK_THROWS_WITH(db.view("H100-SXM5-80GB", "", "nvlnk4", "", "", ""), Contains("cluster.intra_link") && Contains("\"nvlink4\""));
    CHECK_THROWS_WITH(db.view("H100-SXM5-80GB", "", "", "ib-nd", "", ""), Contains("cluster.nic") && Contains("ib-ndr"));
    CHECK_THROWS_AS(db.view("H100-SXM5-80GB", "", "", "", "floppy", ""), strata::InputError);
    CHECK_THROWS_WITH(db.view("H100-SXM5-80GB", "", "", "", "", "epyc"), Contains("cluster.cpu") && Contains("epyc-7742-x2"));
    CHECK_THROWS_WITH(db.view("", "", "", "", "", ""), Contains("cluster.gpu") && Contains("required"));
}

TEST_CASE("view: a plan's own shapes join the newest grid, and win where they meet it", "[hwdb][view]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("p.db"));
    const std::string h100 = "H100-SXM5-80GB";
    auto gemm = [&](long m, double v, bool plan) {
        Measurement g = measurement("gemm", h100, "fp32 m=" + std::to_string(m), {{"m", double(m)}, {"n", 4096}, {"k", 4096}}, v, "flop/s");
        g.labels["dtype"] = "fp32";
        if (plan) g.labels["origin"] = "plan";
        return g;
    };
    auto attn = [&](double batch, double heads, double v, bool plan) {
        Measurement a = measurement("attention", h100, "fp32 runtime fwd b=" + std::to_string(batch),
                                    {{"seq", 1024}, {"head_dim", 64}, {"batch", batch}, {"heads", heads}}, v, "flop/s");
        a.labels = {{"dtype", "fp32"}, {"causal", "1"}, {"direction", "fwd"}};
        if (plan) a.labels["origin"] = "plan";
        return a;
    };
    db.write_run(run("2026-01-01T00:00:00Z"), {gemm(4096, 50e12, false), gemm(1024, 40e12, false), attn(8, 12, 12e12, false)}, {});
    // The plan's run is newer and times one shape the grid has and one it lacks.
    db.write_run(run("2026-02-01T00:00:00Z"), {gemm(1024, 44e12, true), gemm(512, 30e12, true), attn(1, 25, 8e12, true)}, {});
    const HardwareView v = db.view(h100, "DGX-H100", "", "", "", "");
    REQUIRE(v.gemm_points.size() == 3);  // 512 (plan), 1024 (plan's, not the grid's), 4096 (grid)
    CHECK(v.gemm_points[0].m == 512);
    CHECK(v.gemm_points[1].m == 1024);
    CHECK(v.gemm_points[1].plan);
    CHECK(v.gemm_points[1].efficiency * 67e12 == Approx(44e12).epsilon(1e-9));  // H100 fp32 datasheet 67 TFLOP/s
    CHECK(v.gemm_points[2].m == 4096);
    CHECK_FALSE(v.gemm_points[2].plan);
    REQUIRE(v.attention_points.size() == 2);  // sorted by sequences x heads: the plan's 25, the grid's 96
    CHECK(v.attention_points[0].batch_heads == 25);
    CHECK(v.attention_points[0].plan);
    CHECK(v.attention_points[1].batch_heads == 96);
    CHECK_FALSE(v.attention_points[0].runtime);  // no impl label: a framework's fused kernel
    CHECK_FALSE(v.attention_points[0].unfused);
    // The runtime's own kernel at the same shape is a point of its own, marked, not a duplicate
    // (timed beside a framework's by a newer plan's run, which replaces the older plan's).
    Measurement rt = attn(1, 25, 5e12, true);
    rt.key += " strata-runtime";
    rt.labels["impl"] = "strata-runtime";
    Measurement floor = attn(1, 25, 3e12, true);  // the cuda profile's unfused GEMMs + softmax
    floor.key += " unfused";
    floor.labels["impl"] = "unfused";
    db.write_run(run("2026-02-15T00:00:00Z"), {gemm(1024, 44e12, true), gemm(512, 30e12, true), attn(1, 25, 8e12, true), rt, floor}, {});
    const HardwareView r = db.view(h100, "DGX-H100", "", "", "", "");
    REQUIRE(r.attention_points.size() == 4);
    CHECK(std::count_if(r.attention_points.begin(), r.attention_points.end(), [](const auto& p) { return p.unfused && !p.runtime && p.flops_per_s == 3e12; }) == 1);
    CHECK(std::count_if(r.attention_points.begin(), r.attention_points.end(), [](const auto& p) { return p.runtime && p.flops_per_s == 5e12; }) == 1);
    CHECK(std::count_if(r.attention_points.begin(), r.attention_points.end(), [](const auto& p) { return !p.runtime && p.flops_per_s == 8e12; }) == 1);
    // A newer grid still keeps the plan's points beside it.
    db.write_run(run("2026-03-01T00:00:00Z"), {gemm(4096, 51e12, false)}, {});
    const HardwareView w = db.view(h100, "DGX-H100", "", "", "", "");
    REQUIRE(w.gemm_points.size() == 3);
    CHECK(w.gemm_points[2].efficiency * 67e12 == Approx(51e12).epsilon(1e-9));
}

TEST_CASE("view attaches the newest representative run of that GPU", "[hwdb][view]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("v.db"));
    const std::string h100 = "H100-SXM5-80GB";
    Measurement g = measurement("gemm", h100, "bf16 m=8192 n=8192 k=8192", {{"m", 8192}, {"n", 8192}, {"k", 8192}}, 797.5e12, "flop/s");
    g.labels["dtype"] = "bf16";
    Measurement g8 = measurement("gemm", h100, "fp8 m=1024 n=9216 k=14336", {{"m", 1024}, {"n", 9216}, {"k", 14336}}, 1402.6e12, "flop/s");
    g8.labels["dtype"] = "fp8";
    // Attention rows as the profiler writes them: causal and direction as labels.
    Measurement at = measurement("attention", h100, "bf16 fwd causal seq=4096 head_dim=128",
                                 {{"seq", 4096}, {"head_dim", 128}, {"batch", 1}, {"heads", 32}}, 450e12, "flop/s");
    at.labels = {{"dtype", "bf16"}, {"causal", "1"}, {"direction", "fwd"}};
    Measurement at_bwd = at;
    at_bwd.labels["direction"] = "bwd", at_bwd.labels["causal"] = "0", at_bwd.value = 400e12;
    const auto old_run = db.write_run(run("2026-01-01T00:00:00Z"), {g},
                                      {fit("collective", h100, "all_reduce/intra/8", "alpha_beta", {{"alpha_ns", 30000}, {"busbw_Bps", 300e9}})});
    const auto new_run = db.write_run(
        run("2026-02-01T00:00:00Z"), {g, g8, at, at_bwd},
        {fit("collective", h100, "all_reduce/intra/8", "alpha_beta", {{"alpha_ns", 20000}, {"busbw_Bps", 370e9}}),
         fit("collective", h100, "all_gather/inter/16", "alpha_beta", {{"alpha_ns", 40000}, {"busbw_Bps", 45e9}}),
         fit("collective", h100, "malformed-key", "alpha_beta", {{"alpha_ns", 1}, {"busbw_Bps", 1}}),
         fit("membw", h100, "hbm", "bandwidth", {{"latency_ns", 3000}, {"Bps", 2.9e12}}),
         fit("membw", h100, "kernel/runtime", "bandwidth", {{"latency_ns", 0}, {"Bps", 1.5e12}}),
         fit("membw", h100, "kernel/runtime_adam", "bandwidth", {{"latency_ns", 0}, {"Bps", 1.1e12}}),
         fit("membw", h100, "kernel/runtime_fp32", "bandwidth", {{"latency_ns", 0}, {"Bps", 1.6e12}}),
         fit("membw", h100, "kernel/runtime_adam_fp32", "bandwidth", {{"latency_ns", 0}, {"Bps", 2.2e12}}),
         fit("membw", h100, "kernel/runtime_bf16", "bandwidth", {{"latency_ns", 0}, {"Bps", 1.3e12}}),
         fit("memcpy", h100, "h2d/pinned", "bandwidth", {{"latency_ns", 8000}, {"Bps", 50e9}}),
         fit("memcpy", h100, "d2h/pinned", "bandwidth", {{"latency_ns", 8000}, {"Bps", 52.8e9}})});
    // Newer, but not representative (e.g. collectives on one GPU): ignored.
    db.write_run(run("2026-03-01T00:00:00Z", false), {g},
                 {fit("collective", h100, "all_reduce/intra/8", "alpha_beta", {{"alpha_ns", 1}, {"busbw_Bps", 1e9}})});
    // Newer, representative, but another GPU: ignored for the H100.
    db.write_run(run("2026-04-01T00:00:00Z"), {measurement("gemm", "A100-SXM4-80GB", "x", {{"m", 1}, {"n", 1}, {"k", 1}}, 1e12, "flop/s")}, {});

    HardwareView v = db.view(h100, "DGX-H100", "", "", "", "");
    CHECK(v.measured_run == new_run);
    CHECK(v.measured_run != old_run);
    CHECK(v.measured_device == h100);
    REQUIRE(v.gemm_points.size() == 2);
    // Sorted by dtype (bf16 before fp8). Efficiency = achieved / datasheet peak:
    // 797.5/989 = 0.8064 (zzc0721 issue #79: 80.6%), 1402.6/1979 = 0.709 (stas00 MAMF table: 70.9%).
    CHECK(v.gemm_points[0].dtype == Dtype::bf16);
    CHECK(v.gemm_points[0].efficiency == Approx(0.8064).epsilon(0.001));
    CHECK(v.gemm_points[0].m == 8192);
    CHECK(v.gemm_points[1].dtype == Dtype::fp8);
    CHECK(v.gemm_points[1].efficiency == Approx(0.709).epsilon(0.001));
    REQUIRE(v.attention_points.size() == 2);  // sorted: forward before backward
    CHECK(v.attention_points[0].seq == 4096);
    CHECK(v.attention_points[0].head_dim == 128);
    CHECK(v.attention_points[0].causal);
    CHECK_FALSE(v.attention_points[0].backward);
    CHECK(v.attention_points[0].flops_per_s == 450e12);
    CHECK(v.attention_points[1].backward);
    CHECK_FALSE(v.attention_points[1].causal);
    CHECK(v.attention_points[1].flops_per_s == 400e12);
    REQUIRE(v.collectives.size() == 2);  // the malformed key is skipped
    CHECK(v.collectives[0].collective == "all_gather");
    CHECK(v.collectives[0].scope == "inter");
    CHECK(v.collectives[0].group == 16);
    CHECK(v.collectives[1].collective == "all_reduce");
    CHECK(v.collectives[1].busbw_Bps == 370e9);
    CHECK(v.collectives[1].alpha_ns == 20000);
    CHECK(v.collectives[1].provenance == Provenance::fitted);
    REQUIRE(v.hbm);
    CHECK(v.hbm->Bps == 2.9e12);
    // The runtime's own memory-bound and optimizer kernels, where the profiler measured them.
    REQUIRE(v.memory_bound);
    CHECK(v.memory_bound->Bps == 1.5e12);
    REQUIRE(v.optimizer_kernel);
    CHECK(v.optimizer_kernel->Bps == 1.1e12);
    REQUIRE(v.memory_bound_fp32);
    CHECK(v.memory_bound_fp32->Bps == 1.6e12);
    REQUIRE(v.optimizer_kernel_fp32);
    CHECK(v.optimizer_kernel_fp32->Bps == 2.2e12);
    REQUIRE(v.memory_bound_bf16);
    CHECK(v.memory_bound_bf16->Bps == 1.3e12);
    REQUIRE(v.h2d);
    CHECK(v.h2d->latency_ns == 8000);
    REQUIRE(v.d2h);
    CHECK(v.d2h->Bps == 52.8e9);
    CHECK_FALSE(v.cpu_adam_params_per_s);

    // The A100 sees only its own run.
    HardwareView a = db.view("A100-SXM4-80GB", "", "", "", "", "");
    CHECK(a.measured_device == "A100-SXM4-80GB");
    CHECK(a.collectives.empty());
}

TEST_CASE("view: a CPU-backend run supplies host figures to the GPUs profiled on its host", "[hwdb][view]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("v.db"));
    const auto cpu_run = db.write_run(
        run("2026-01-05T00:00:00Z"),
        {measurement("cpu_adam", "cpu", "threads=8", {{"threads", 8}, {"params", 1e8}}, 0.9e9, "params/s"),
         measurement("cpu_adam", "cpu", "threads=16", {{"threads", 16}, {"params", 1e8}}, 1.4e9, "params/s")},
        {fit("ssd", "cpu", "read", "bandwidth", {{"latency_ns", 80000}, {"Bps", 6.5e9}}),
         fit("ssd", "cpu", "write", "bandwidth", {{"latency_ns", 20000}, {"Bps", 3.5e9}})});

    // The cpu backend's own view: the CPU run is the measured run; cpu_adam is the best measured
    // rate (no fit).
    HardwareView c = db.view("cpu", "", "", "", "", "");
    CHECK(c.measured_run == cpu_run);
    CHECK(c.measured_device == "cpu");
    REQUIRE(c.cpu_adam_params_per_s);
    CHECK(*c.cpu_adam_params_per_s == 1.4e9);
    REQUIRE(c.ssd_read);
    CHECK(c.ssd_read->Bps == 6.5e9);
    REQUIRE(c.ssd_write);
    CHECK(c.ssd_write->latency_ns == 20000);

    // A GPU never profiled keeps its datasheet host: this machine's CPU and SSD say nothing of
    // another cluster's nodes (a laptop's profile must not move a DGX plan).
    HardwareView v = db.view("A100-SXM4-40GB", "angel-ptm-a100-40g", "", "", "", "");
    CHECK(v.measured_run == 0);
    CHECK_FALSE(v.cpu_adam_params_per_s);
    CHECK_FALSE(v.ssd_read);
    CHECK(v.gemm_points.empty());

    // A GPU profiled on the same host (the device workflow: the GPU, then its host) takes them;
    // the GPU run is the measured run, and a cpu_adam fit beats raw measurements.
    const auto gpu_run = db.write_run(run("2026-01-06T00:00:00Z"), {},
                                      {fit("memcpy", "H100-SXM5-80GB", "h2d/pinned", "bandwidth", {{"latency_ns", 1}, {"Bps", 5e10}}),
                                       fit("cpu_adam", "cpu", "adamw", "rate", {{"params_per_s", 2e9}})});
    HardwareView h = db.view("H100-SXM5-80GB", "", "", "", "", "");
    CHECK(h.measured_run == gpu_run);
    REQUIRE(h.cpu_adam_params_per_s);
    CHECK(*h.cpu_adam_params_per_s == 2e9);  // from gpu_run, the newest run with a cpu_adam figure
    REQUIRE(h.ssd_read);                     // gpu_run has no SSD figure: the older CPU run's
    CHECK(h.ssd_read->Bps == 6.5e9);
    REQUIRE(h.h2d);
    CHECK(h.h2d->Bps == 5e10);

    // A GPU profiled on another host does not take this host's figures.
    Run elsewhere = run("2026-01-07T00:00:00Z");
    elsewhere.host = "another-machine";
    db.write_run(elsewhere, {}, {fit("memcpy", "H200-SXM-141GB", "h2d/pinned", "bandwidth", {{"latency_ns", 1}, {"Bps", 5.5e10}})});
    HardwareView o = db.view("H200-SXM-141GB", "", "", "", "", "");
    REQUIRE(o.h2d);
    CHECK(o.h2d->Bps == 5.5e10);
    CHECK_FALSE(o.cpu_adam_params_per_s);
    CHECK_FALSE(o.ssd_read);
}

TEST_CASE("view: host rows of a CUDA run (recorded under the GPU id) are used first", "[hwdb][view]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("v.db"));
    // An older CPU-backend run, then a newer CUDA run whose SSD and CPU Adam rows carry the GPU id.
    db.write_run(run("2026-01-01T00:00:00Z"), {},
                 {fit("ssd", "cpu", "read", "bandwidth", {{"latency_ns", 90000}, {"Bps", 3e9}}),
                  fit("cpu_adam", "cpu", "adam", "rate", {{"params_per_s", 5e8}})});
    const auto cuda_run = db.write_run(run("2026-01-02T00:00:00Z"), {},
                                       {fit("ssd", "H200-SXM-141GB", "read", "bandwidth", {{"latency_ns", 70000}, {"Bps", 6.8e9}})});
    HardwareView v = db.view("H200-SXM-141GB", "HGX-H200", "", "", "", "");
    CHECK(v.measured_run == cuda_run);
    REQUIRE(v.ssd_read);
    CHECK(v.ssd_read->Bps == 6.8e9);            // the GPU run's own figure
    REQUIRE(v.cpu_adam_params_per_s);
    CHECK(*v.cpu_adam_params_per_s == 5e8);     // missing there: from the CPU run
    CHECK_FALSE(v.ssd_write);                   // measured nowhere
}

TEST_CASE("view: a partial profile leaves the kinds it did not measure as they were", "[hwdb][view]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("v.db"));
    // A full run (GEMM points, an HBM fit, an H2D fit), then `--only memcpy` (a new H2D fit),
    // then `--only ssd`: each kind comes from the newest run that measured it.
    Measurement g = measurement("gemm", "H100-SXM5-80GB", "m=4096", {{"m", 4096}, {"n", 4096}, {"k", 4096}}, 600e12, "FLOP/s");
    g.labels = {{"dtype", "bf16"}};
    db.write_run(run("2026-01-01T00:00:00Z"), {g},
                 {fit("membw", "H100-SXM5-80GB", "hbm", "bandwidth", {{"latency_ns", 2000}, {"Bps", 3e12}}),
                  fit("memcpy", "H100-SXM5-80GB", "h2d/pinned", "bandwidth", {{"latency_ns", 5000}, {"Bps", 50e9}})});
    db.write_run(run("2026-01-02T00:00:00Z"), {},
                 {fit("memcpy", "H100-SXM5-80GB", "h2d/pinned", "bandwidth", {{"latency_ns", 5000}, {"Bps", 53e9}})});
    const auto ssd_run = db.write_run(run("2026-01-03T00:00:00Z"), {},
                                      {fit("ssd", "H100-SXM5-80GB", "read", "bandwidth", {{"latency_ns", 70000}, {"Bps", 6e9}})});
    const HardwareView v = db.view("H100-SXM5-80GB", "", "", "", "", "");
    CHECK(v.measured_run == ssd_run);
    REQUIRE(v.gemm_points.size() == 1);     // from the first run: nothing newer measured GEMMs
    CHECK(v.gemm_points[0].efficiency == Approx(600e12 / v.gpu.peak(Dtype::bf16)));
    REQUIRE(v.hbm);
    CHECK(v.hbm->Bps == 3e12);
    REQUIRE(v.h2d);
    CHECK(v.h2d->Bps == 53e9);              // the second run's, the newest H2D fit
    REQUIRE(v.ssd_read);
    CHECK(v.ssd_read->Bps == 6e9);
}
