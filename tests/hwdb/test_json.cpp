// hwdb JSON documents: export -> import into an empty database -> export gives the same bytes;
// import is strict (unknown keys and bad values name the file and JSON path) and all-or-nothing;
// one run can be exported alone; the default database path honours $STRATA_HWDB.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "hwdb/hwdb_fixture.hpp"
#include "strata/common/error.hpp"

using namespace strata::hwdb;
using namespace strata::hwdb::testing;
using Catch::Matchers::Contains;

namespace {
std::int64_t add_sample_run(Database& db) {
    Measurement m = measurement("gemm", "H100-SXM5-80GB", "bf16 m=4096 n=4096 k=4096", {{"m", 4096}, {"n", 4096}, {"k", 4096}},
                                788.7e12, "flop/s");
    m.labels = {{"dtype", "bf16"}, {"cublas", "12.4"}};
    m.p10 = 780e12, m.p90 = 0.1 + 790e12;  // a value with a long binary expansion
    Fit f = fit("collective", "H100-SXM5-80GB", "all_reduce/intra/8", "alpha_beta", {{"alpha_ns", 1.0 / 3.0}, {"busbw_Bps", 370e9}});
    f.points_json = "[[8,1e-05],[1073741824,0.0052]]";
    f.valid_min = 8, f.valid_max = 1073741824, f.mape = 0.031;
    Run r = run("2026-01-01T00:00:00Z");
    r.devices = "8x H100-SXM5-80GB", r.driver = "550.54", r.notes = "unicode ok: µs";
    return db.write_run(r, {m}, {f});
}
}  // namespace

TEST_CASE("export -> import -> export is byte-identical", "[hwdb][json]") {
    TempDir t;
    Database a = Database::create_seeded(t.file("a.db"));
    add_sample_run(a);
    const std::string doc = a.export_json();
    Database b = Database::open(t.file("b.db"), true);
    b.import_json(doc, "a.json");
    CHECK(b.export_json() == doc);
    // And the rows themselves came back equal (spot checks of every table).
    CHECK(b.gpus().size() == a.gpus().size());
    CHECK(b.gpu("B200-SXM-180GB")->peak(Dtype::fp8) == a.gpu("B200-SXM-180GB")->peak(Dtype::fp8));
    CHECK(b.link("nvlink5")->achievable_Bps == a.link("nvlink5")->achievable_Bps);
    CHECK(b.node("angel-ptm-a100-40g")->source == a.node("angel-ptm-a100-40g")->source);
    CHECK(b.ssds().size() == a.ssds().size());
    CHECK(b.cpu("xeon-8480c-x2")->dram_Bps == a.cpu("xeon-8480c-x2")->dram_Bps);
    REQUIRE(b.runs().size() == 1);
    auto fs = b.fits(b.runs()[0].id);
    REQUIRE(fs.size() == 1);
    CHECK(fs[0].params.at("alpha_ns") == 1.0 / 3.0);  // doubles survive exactly
    CHECK(b.measurements(b.runs()[0].id)[0].p90 == 0.1 + 790e12);
    CHECK(b.runs()[0].notes == "unicode ok: µs");
}

TEST_CASE("export of one run holds only that run; importing it adds a run", "[hwdb][json]") {
    TempDir t;
    Database a = Database::create_seeded(t.file("a.db"));
    add_sample_run(a);
    const auto id2 = add_sample_run(a);
    auto j = nlohmann::json::parse(a.export_json(id2));
    CHECK(j.at("schema") == 1);
    CHECK_FALSE(j.contains("gpus"));
    REQUIRE(j.at("runs").size() == 1);
    CHECK(j["runs"][0]["run"]["id"] == id2);
    CHECK_THROWS_AS(a.export_json(999), strata::InputError);
    a.import_json(j.dump(), "one.json");
    CHECK(a.runs().size() == 3);
}

TEST_CASE("import is strict and names the file and JSON path", "[hwdb][json]") {
    TempDir t;
    Database db = Database::open(t.file("i.db"), true);
    const std::string gpu_ok = R"({"id":"X-GPU","hbm_bytes":1e9,"source":"test","confidence":"low"})";
    CHECK_THROWS_WITH(db.import_json(R"({"schema":1,"gpus":[{"id":"X-GPU","hbm_gbps":1,"source":"s","confidence":"low"}]})", "x.json"),
                      Contains("x.json: gpus[0].hbm_gbps is not a known key"));
    CHECK_THROWS_WITH(db.import_json(R"({"schema":1,"links":[{"id":"l","kind":"wire","source":"s","confidence":"low"}]})", "x.json"),
                      Contains("links[0].kind"));
    CHECK_THROWS_WITH(db.import_json(R"({"schema":1,"cpus":[{"id":"c","source":"","confidence":"low"}]})", "x.json"),
                      Contains("cpus[0].source"));
    CHECK_THROWS_WITH(db.import_json(R"({"schema":1,"ssds":[{"id":"s","source":"s","confidence":"sure"}]})", "x.json"),
                      Contains("ssds[0].confidence"));
    CHECK_THROWS_WITH(db.import_json(R"({"schema":2})", "x.json"), Contains("schema"));
    CHECK_THROWS_WITH(db.import_json("{not json", "x.json"), Contains("x.json") && Contains("not valid JSON"));
    CHECK_THROWS_WITH(db.import_json(R"({"schema":1,"extra":[]})", "x.json"), Contains("extra is not a known key"));
    // A good GPU and a run with a bad measurement: nothing is written.
    const std::string bad_run = R"({"run":{"host":"h"},"measurements":[{"kind":"gemm","device":"X-GPU","unit":"flop/s"}]})";
    CHECK_THROWS_WITH(db.import_json(R"({"schema":1,"gpus":[)" + gpu_ok + R"(],"runs":[)" + bad_run + "]}", "x.json"),
                      Contains("runs[0].measurements[0].value"));
    CHECK_FALSE(db.gpu("X-GPU"));
    CHECK(db.runs().empty());
    db.import_json(R"({"schema":1,"gpus":[)" + gpu_ok + "]}", "x.json");
    CHECK(db.gpu("X-GPU")->hbm_bytes == 1e9);
}

TEST_CASE("default_db_path honours $STRATA_HWDB", "[hwdb][json]") {
    const char* old = std::getenv("STRATA_HWDB");
    const std::string saved = old ? old : "";
    ::setenv("STRATA_HWDB", "/some/where/else.db", 1);
    CHECK(default_db_path() == "/some/where/else.db");
    if (old)
        ::setenv("STRATA_HWDB", saved.c_str(), 1);
    else
        ::unsetenv("STRATA_HWDB");
}
