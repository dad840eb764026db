// The built-in datasheet seed: every required id is present, every row says where it comes from and
// how sure we are, cross-references resolve, and spot values equal the vendors' datasheets
// converted to SI by hand (the expected numbers below are written from the datasheets, not from
// what the code printed).
#include <catch2/catch.hpp>

#include <set>

#include "hwdb/hwdb_fixture.hpp"

using namespace strata::hwdb;
using strata::hwdb::testing::TempDir;

namespace {
template <class T>
std::set<std::string> ids(const std::vector<T>& rows) {
    std::set<std::string> s;
    for (const auto& r : rows) s.insert(r.id);
    return s;
}
bool good_confidence(const std::string& c) { return c == "high" || c == "medium" || c == "low"; }
}  // namespace

TEST_CASE("seed holds every required GPU, link, node, SSD and CPU id", "[hwdb][seed]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("seed.db"));
    const auto g = ids(db.gpus());
    for (const char* id : {"V100-SXM2-32GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "A800-SXM4-80GB", "H100-SXM5-80GB",
                           "H100-PCIe-80GB", "H800-SXM5-80GB", "H200-SXM-141GB", "B200-SXM-180GB", "MI300X",
                           "GB200-GPU", "L40S", "RTX-4090"})
        CHECK(g.count(id) == 1);
    const auto l = ids(db.links());
    for (const char* id : {"nvlink2", "nvlink3", "nvlink4", "nvlink5", "nvswitch-gen2", "nvswitch-gen3", "pcie3-x16",
                           "pcie4-x16", "pcie5-x16", "ib-edr", "ib-hdr", "ib-ndr", "ib-xdr", "roce-100g", "roce-200g",
                           "roce-400g"})
        CHECK(l.count(id) == 1);
    const auto n = ids(db.nodes());
    for (const char* id : {"DGX-1-V100", "DGX-2", "DGX-A100", "DGX-H100", "HGX-H200", "GB200-NVL72", "angel-ptm-a100-40g", "local-cpu"})
        CHECK(n.count(id) == 1);
    const auto c = ids(db.cpus());
    for (const char* id : {"epyc-7742-x2", "xeon-8480c-x2", "cpu-generic"}) CHECK(c.count(id) == 1);
    CHECK(db.ssds().size() >= 4);
}

TEST_CASE("every seed row has a source and a confidence level", "[hwdb][seed]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("seed.db"));
    auto check_rows = [](const auto& rows) {
        for (const auto& r : rows) {
            INFO(r.id);
            CHECK_FALSE(r.source.empty());
            CHECK(good_confidence(r.confidence));
        }
    };
    check_rows(db.gpus());
    check_rows(db.links());
    check_rows(db.nodes());
    check_rows(db.ssds());
    check_rows(db.cpus());
}

TEST_CASE("seed figures equal the datasheets in SI units", "[hwdb][seed]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("seed.db"));
    auto h100 = db.gpu("H100-SXM5-80GB");
    REQUIRE(h100);
    // NVIDIA H100 SXM5: 989 TFLOP/s dense BF16, 1979 dense FP8, 80 GB HBM3 at 3.35 TB/s, 50 MB L2.
    CHECK(h100->peak(Dtype::bf16) == Approx(989e12));
    CHECK(h100->peak(Dtype::fp8) == Approx(1979e12));
    // Capacity is what CUDA reports (totalGlobalMem, as the profiler records it): the "80 GB" part
    // has 80 GiB of HBM3 less the driver's reservation; PyTorch prints "total capacity of 79.11 GiB".
    const double GiB = 1024.0 * 1024.0 * 1024.0;
    CHECK(h100->hbm_bytes == Approx(79.11 * GiB));
    CHECK(h100->hbm_bytes > 80e9);
    CHECK(h100->hbm_bytes < 80 * GiB);
    CHECK(h100->hbm_Bps == Approx(3.35e12));
    CHECK(h100->l2_bytes == Approx(50e6));
    CHECK(h100->scale_up_link == "nvlink4");
    CHECK(h100->host_link == "pcie5-x16");
    // 18 NVLink4 links x 25 GB/s per direction = 450 GB/s per direction.
    CHECK(h100->scale_up_per_dir_Bps == Approx(18 * 25e9));

    auto a100 = db.gpu("A100-SXM4-80GB");
    REQUIRE(a100);
    CHECK(a100->hbm_Bps == Approx(2.039e12));  // NVIDIA A100 80GB datasheet: 2039 GB/s
    CHECK(a100->peak(Dtype::bf16) == Approx(312e12));
    CHECK(a100->peak(Dtype::fp8) == 0);        // Ampere has no FP8 tensor cores

    auto v100 = db.gpu("V100-SXM2-32GB");
    REQUIRE(v100);
    CHECK(v100->peak(Dtype::fp16) == Approx(125e12));
    CHECK(v100->peak(Dtype::bf16) == 0);       // no BF16 tensor cores on Volta

    // Export-limited parts: A800 and H800 have 400 GB/s bidirectional NVLink = 200 GB/s per direction.
    CHECK(db.gpu("A800-SXM4-80GB")->scale_up_per_dir_Bps == Approx(200e9));
    CHECK(db.gpu("H800-SXM5-80GB")->scale_up_per_dir_Bps == Approx(200e9));
}

TEST_CASE("seed links: NVLink per GPU per direction, NICs from their line rates", "[hwdb][seed]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("seed.db"));
    // Per-GPU per-direction NVLink: V100 6x25, A100 12x25, H100 18x25, B200 18x50 GB/s.
    CHECK(db.link("nvlink2")->per_dir_Bps == Approx(150e9));
    CHECK(db.link("nvlink3")->per_dir_Bps == Approx(300e9));
    CHECK(db.link("nvlink4")->per_dir_Bps == Approx(450e9));
    CHECK(db.link("nvlink5")->per_dir_Bps == Approx(900e9));
    // nccl-tests #212: ~370 GB/s ring busbw on 8x H100.
    CHECK(db.link("nvlink4")->achievable_Bps == Approx(370e9));
    CHECK(db.link("nvlink4")->kind == LinkKind::scale_up);
    CHECK(db.link("nvswitch-gen3")->kind == LinkKind::switch_fabric);
    // InfiniBand: HDR 200 Gb/s / 8 = 25 GB/s, NDR 400 Gb/s / 8 = 50 GB/s; latency 1 us = 1000 ns.
    CHECK(db.link("ib-hdr")->per_dir_Bps == Approx(25e9));
    CHECK(db.link("ib-ndr")->per_dir_Bps == Approx(50e9));
    CHECK(db.link("ib-ndr")->latency_ns == Approx(1000));
    CHECK(db.link("ib-ndr")->kind == LinkKind::scale_out);
    // PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 / 8 = 31.5 GB/s per direction.
    CHECK(db.link("pcie4-x16")->per_dir_Bps == Approx(16e9 * 16 * 128.0 / 130 / 8).epsilon(0.001));
    CHECK(db.link("pcie4-x16")->kind == LinkKind::host);
}

TEST_CASE("seed nodes and CPUs: references resolve and DRAM bandwidth follows channel arithmetic", "[hwdb][seed]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("seed.db"));
    const auto links = ids(db.links()), cpus = ids(db.cpus()), ssds = ids(db.ssds()), gpus = ids(db.gpus());
    for (const Node& n : db.nodes()) {
        INFO(n.id);
        if (!n.intra_link.empty()) CHECK(links.count(n.intra_link) == 1);
        if (!n.nic_link.empty()) CHECK(links.count(n.nic_link) == 1);
        if (!n.gpu_hint.empty()) CHECK(gpus.count(n.gpu_hint) == 1);
        CHECK(cpus.count(n.cpu) == 1);
        CHECK(ssds.count(n.ssd) == 1);
    }
    for (const Gpu& g : db.gpus()) {
        INFO(g.id);
        if (!g.scale_up_link.empty()) CHECK(links.count(g.scale_up_link) == 1);
        CHECK(links.count(g.host_link) == 1);
    }
    auto dgx = db.node("DGX-H100");
    REQUIRE(dgx);
    CHECK(dgx->nic_link == "ib-ndr");
    CHECK(dgx->nic_count == 8);
    CHECK(dgx->cpu == "xeon-8480c-x2");
    CHECK(dgx->cpu_dram_bytes == Approx(2048e9));
    auto angel = db.node("angel-ptm-a100-40g");
    REQUIRE(angel);
    CHECK(angel->gpu_hint == "A100-SXM4-40GB");
    // Angel-PTM: 1.6 Tbit/s RDMA per node = nic_count x 200 Gbit/s.
    CHECK(angel->nic_count * db.link(angel->nic_link)->per_dir_Bps * 8 == Approx(1.6e12));
    // EPYC 7742 x2: 2 sockets x 8 channels x 3200 MT/s x 8 B = 409.6 GB/s peak; 70% achievable.
    CHECK(db.cpu("epyc-7742-x2")->dram_Bps == Approx(0.7 * 409.6e9));
    CHECK(db.cpu("epyc-7742-x2")->cores == 128);
    // Xeon 8480C x2: 2 x 8 channels x 4800 MT/s x 8 B = 614.4 GB/s peak; 70% achievable.
    CHECK(db.cpu("xeon-8480c-x2")->dram_Bps == Approx(0.7 * 614.4e9));
}
