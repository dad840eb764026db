// hwdb storage: opening a missing file, or one that is not a Strata database (garbage, an empty
// file, issue #32 defect 4), is an InputError naming the path and changes nothing; readers open
// read-only and leave the file as it was (defect 3); migrations are idempotent, a database opened
// for writing is in WAL mode, and write_run / upsert are all-or-nothing.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "hwdb/hwdb_fixture.hpp"
#include "strata/common/error.hpp"

using namespace strata::hwdb;
using namespace strata::hwdb::testing;
using Catch::Matchers::Contains;

namespace {

std::string bytes_of(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::size_t files_in(const std::string& dir) {
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        (void)e;
        ++n;
    }
    return n;
}

}  // namespace

TEST_CASE("opening a missing database without create is an InputError naming the path", "[hwdb][db]") {
    TempDir t;
    const std::string p = t.file("nope.db");
    CHECK_THROWS_AS(Database::open(p, false), strata::InputError);
    CHECK_THROWS_WITH(Database::open(p, false), Contains(p) && Contains("does not exist") && Contains("hwdb init"));
    CHECK_THROWS_AS(Database::open_read_only(p), strata::InputError);
    CHECK_FALSE(std::filesystem::exists(p));  // and nothing was created
}

TEST_CASE("opening a corrupt file is an InputError naming the path, not a crash", "[hwdb][db]") {
    TempDir t;
    const std::string p = t.file("garbage.db");
    {
        std::ofstream out(p, std::ios::binary);
        for (int i = 0; i < 4096; ++i) out.put(static_cast<char>((i * 37 + 11) & 0xff));
    }
    CHECK_THROWS_AS(Database::open(p, false), strata::InputError);
    CHECK_THROWS_WITH(Database::open(p, false), Contains(p) && Contains("not a Strata hardware database"));
    CHECK_THROWS_WITH(Database::open_read_only(p), Contains(p) && Contains("not a Strata hardware database"));
}

TEST_CASE("an existing empty file is not turned into a database (issue #32, defect 4)", "[hwdb][db]") {
    // `--db empty.db` used to migrate it into an empty database; the next error then blamed the
    // scenario ("cluster.gpu ... is not a GPU in the hardware database").
    TempDir t;
    const std::string p = t.file("empty.db");
    { std::ofstream touch(p); }
    CHECK_THROWS_AS(Database::open(p, false), strata::InputError);
    CHECK_THROWS_WITH(Database::open(p, false), Contains(p) && Contains("not a Strata hardware database") && Contains("empty"));
    CHECK_THROWS_WITH(Database::open(p, true), Contains("not a Strata hardware database"));  // create: only a missing file
    CHECK_THROWS_AS(Database::open_read_only(p), strata::InputError);
    CHECK(std::filesystem::file_size(p) == 0);
    CHECK(files_in(t.file("")) == 1);  // no journal beside it either
}

TEST_CASE("a read-only open reads, refuses writes and leaves the file as it was (issue #32, defect 3)", "[hwdb][db]") {
    TempDir t;
    const std::string p = t.file("ro.db");
    { Database db = Database::create_seeded(p); }
    // Make it a rollback-journal database (header bytes 18 and 19 = 1; legal with no -wal file):
    // a writing open switches it to WAL, a reading one must not touch it.
    std::string before = bytes_of(p);
    before[18] = 1, before[19] = 1;
    { std::ofstream(p, std::ios::binary | std::ios::trunc) << before; }
    {
        Database db = Database::open_read_only(p);
        CHECK(db.read_only());
        CHECK(db.gpus().size() >= 10);
        CHECK(db.gpu("H100-SXM5-80GB"));
        CHECK_THROWS_AS(db.write_run(run("2026-01-01T00:00:00Z"), {}, {}), strata::RuntimeError);
        CHECK_THROWS_AS(db.upsert({*db.gpu("H100-SXM5-80GB")}, {}, {}, {}, {}), strata::RuntimeError);
    }
    CHECK(bytes_of(p) == before);
    CHECK(files_in(t.file("")) == 1);
    {
        Database db = Database::open(p, false);  // a writer: WAL from here on
        CHECK_FALSE(db.read_only());
    }
    CHECK(static_cast<int>(bytes_of(p)[18]) == 2);
}

TEST_CASE("migrations are idempotent: opening twice keeps version and data", "[hwdb][db]") {
    TempDir t;
    const std::string p = t.file("a.db");
    std::size_t n_gpus = 0;
    {
        Database db = Database::create_seeded(p);
        CHECK(db.schema_version() == 1);
        n_gpus = db.gpus().size();
        CHECK(n_gpus >= 10);
    }
    for (int i = 0; i < 2; ++i) {
        Database db = Database::open(p, false);
        CHECK(db.schema_version() == 1);
        CHECK(db.gpus().size() == n_gpus);
        CHECK(db.path() == p);
    }
    // A fresh empty database migrates to the same version with empty tables.
    Database empty = Database::open(t.file("empty.db"), true);
    CHECK(empty.schema_version() == 1);
    CHECK(empty.gpus().empty());
    CHECK(empty.runs().empty());
}

TEST_CASE("the database file is in WAL mode", "[hwdb][db]") {
    TempDir t;
    const std::string p = t.file("wal.db");
    { Database db = Database::create_seeded(p); }
    // SQLite file format, header offsets 18 and 19 (write/read format version): 1 = rollback
    // journal, 2 = WAL (sqlite.org/fileformat2.html, "The Database Header").
    std::ifstream in(p, std::ios::binary);
    char header[20] = {};
    in.read(header, sizeof header);
    REQUIRE(in);
    CHECK(std::string(header, 15) == "SQLite format 3");
    CHECK(static_cast<int>(header[18]) == 2);
    CHECK(static_cast<int>(header[19]) == 2);
}

TEST_CASE("write_run stores a whole run and reads it back", "[hwdb][db]") {
    TempDir t;
    Database db = Database::open(t.file("r.db"), true);
    Measurement m = measurement("gemm", "H100-SXM5-80GB", "bf16 m=8192 n=8192 k=8192",
                                {{"m", 8192}, {"n", 8192}, {"k", 8192}}, 797.5e12, "flop/s");
    m.labels["dtype"] = "bf16";
    m.p10 = 790e12, m.p90 = 800e12;
    Fit f = fit("collective", "H100-SXM5-80GB", "all_reduce/intra/8", "alpha_beta", {{"alpha_ns", 25000}, {"busbw_Bps", 370e9}});
    f.points_json = "[[1024,3.1e-5]]";
    const auto id = db.write_run(run("2026-01-01T00:00:00Z"), {m}, {f});
    CHECK(id > 0);
    REQUIRE(db.runs().size() == 1);
    CHECK(db.runs()[0].id == id);
    CHECK(db.runs()[0].host == "testhost");
    auto ms = db.measurements(id);
    REQUIRE(ms.size() == 1);
    CHECK(ms[0].run_id == id);
    CHECK(ms[0].params.at("k") == 8192);
    CHECK(ms[0].labels.at("dtype") == "bf16");
    CHECK(ms[0].value == 797.5e12);
    CHECK(ms[0].p90 == 800e12);
    auto fs = db.fits(id);
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].params.at("busbw_Bps") == 370e9);
    CHECK(fs[0].points_json == "[[1024,3.1e-5]]");
}

TEST_CASE("write_run is atomic: a bad row after good ones leaves the database as it was", "[hwdb][db]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("atomic.db"));
    const auto first = db.write_run(run("2026-01-01T00:00:00Z"), {measurement("gemm", "H100-SXM5-80GB", "a", {}, 1, "flop/s")}, {});
    // Two good measurements are inserted before the third (empty kind) is rejected.
    std::vector<Measurement> ms = {measurement("gemm", "H100-SXM5-80GB", "x", {{"m", 1}}, 1e12, "flop/s"),
                                   measurement("membw", "H100-SXM5-80GB", "y", {}, 3e12, "B/s"),
                                   measurement("", "H100-SXM5-80GB", "z", {}, 1, "s")};
    CHECK_THROWS_AS(db.write_run(run("2026-02-01T00:00:00Z"), ms, {}), strata::InputError);
    CHECK_THROWS_WITH(db.write_run(run("2026-02-01T00:00:00Z"), ms, {}), Contains("measurements[2].kind"));
    REQUIRE(db.runs().size() == 1);
    CHECK(db.runs()[0].id == first);
    CHECK(db.measurements(first).size() == 1);
    // A bad fit (no model) after good measurements: same.
    CHECK_THROWS_AS(db.write_run(run("2026-03-01T00:00:00Z"), {ms[0]}, {fit("memcpy", "H100-SXM5-80GB", "h2d/pinned", "", {})}),
                    strata::InputError);
    CHECK(db.runs().size() == 1);
    // The database is still writable afterwards (the transaction was rolled back, not left open).
    const auto next = db.write_run(run("2026-04-01T00:00:00Z"), {ms[0]}, {});
    CHECK(next > first);
    CHECK(db.runs().size() == 2);
    CHECK(db.measurements(next).size() == 1);
}

TEST_CASE("upsert replaces rows by id and rejects rows without a source, all or nothing", "[hwdb][db]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("u.db"));
    Gpu g = *db.gpu("H100-SXM5-80GB");
    g.notes = "edited";
    Gpu bad;
    bad.id = "NEW-GPU";
    bad.confidence = "high";  // no source
    CHECK_THROWS_AS(db.upsert({g, bad}, {}, {}, {}, {}), strata::InputError);
    CHECK(db.gpu("H100-SXM5-80GB")->notes != "edited");  // the good row before it was rolled back
    CHECK_FALSE(db.gpu("NEW-GPU"));
    db.upsert({g}, {}, {}, {}, {});
    CHECK(db.gpu("H100-SXM5-80GB")->notes == "edited");
}

TEST_CASE("create_seeded never replaces an existing file", "[hwdb][db]") {
    TempDir t;
    const std::string p = t.file("s.db");
    { Database db = Database::create_seeded(p); }
    CHECK_THROWS_AS(Database::create_seeded(p), strata::RuntimeError);
    CHECK(Database::open(p).gpus().size() >= 10);
    // No temporary files are left beside it.
    CHECK(files_in(std::filesystem::path(p).parent_path().string()) == 1);
}

TEST_CASE("the seed has torchtitan's H100 96GB HBM2e with its sources' numbers", "[hwdb][db]") {
    TempDir t;
    Database db = Database::create_seeded(t.file("s.db"));
    const auto g = db.gpu("H100-SXM5-96GB-HBM2e");
    REQUIRE(g);
    // torchtitan: 2.4 TB/s HBM2e; "H100(95GB)"; peak between SXM (989) and NVL (835) dense bf16.
    CHECK(g->hbm_Bps == Approx(2.4e12));
    CHECK(g->hbm_bytes == Approx(95.0 * 1024 * 1024 * 1024));
    CHECK(g->peak(Dtype::bf16) == Approx((989e12 + 835e12) / 2));
    CHECK(g->notes.find("96GB HBM2e") != std::string::npos);
    CHECK(g->notes.find("H100(95GB)") != std::string::npos);
}
