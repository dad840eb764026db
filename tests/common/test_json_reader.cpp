// The strict reader every input goes through: syntax errors with line and column, numbers out of
// range, unknown keys with a did-you-mean, typed getters naming the JSON path.
#include <catch2/catch.hpp>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/common/text.hpp"

using namespace strata;

TEST_CASE("syntax errors name the file, line and column", "[common]") {
    try {
        parse_json_text("{\n  \"a\": 1,\n  \"b\": }", "x.json");
        FAIL("no error");
    } catch (const InputError& e) {
        CHECK(e.file() == "x.json");
        CHECK(std::string(e.what()).find("line 3") != std::string::npos);
    }
}

TEST_CASE("a number too large for a double is an input error, not a crash", "[common]") {
    CHECK_THROWS_AS(parse_json_text("{\"a\": 1e999}", "big.json"), InputError);
}

TEST_CASE("unknown keys are rejected with a did-you-mean", "[common]") {
    auto j = parse_json_text("{\"layers\": 2, \"hiden\": 4}", "m.json");
    JsonReader r(j, "m.json", "model");
    CHECK(r.i64("layers") == 2);
    try {
        r.reject_unknown({"hidden"});
        FAIL("no error");
    } catch (const InputError& e) {
        CHECK(e.path() == "model.hiden");
        CHECK(std::string(e.what()).find("did you mean \"hidden\"") != std::string::npos);
    }
}

TEST_CASE("typed getters name the path and the rule", "[common]") {
    auto j = parse_json_text("{\"tp\": \"two\", \"x\": 1.5, \"s\": \"1f1x\"}", "p.json");
    JsonReader r(j, "p.json", "plan");
    try {
        r.i64("tp");
        FAIL("no error");
    } catch (const InputError& e) {
        CHECK(e.path() == "plan.tp");
        CHECK(e.rule().find("must be an integer") != std::string::npos);
    }
    CHECK_THROWS_AS(r.i64("x"), InputError);
    CHECK_THROWS_WITH(r.choice("s", {"gpipe", "1f1b"}), Catch::Contains("did you mean \"1f1b\""));
    CHECK_THROWS_WITH(r.num("missing"), Catch::Contains("is required"));
}

TEST_CASE("edit distance and did-you-mean", "[common]") {
    CHECK(edit_distance("kitten", "sitting") == 3);  // the textbook example
    CHECK(did_you_mean("H100", {"H100-SXM5-80GB", "A100-SXM4-80GB"}).empty());  // too far
    CHECK(did_you_mean("gpipe", {"gpipe", "1f1b"}) == "gpipe");
}

TEST_CASE("a key given twice is refused with both positions (issue #32, defect 7)", "[common]") {
    // nlohmann keeps the last value: {"tp": 2, ..., "tp": 8} ran as tp 8.
    try {
        parse_json_text("{\"tp\": 2,\n \"pp\": 1,\n  \"tp\": 8}", "p.json");
        FAIL("no error");
    } catch (const InputError& e) {
        CHECK(e.file() == "p.json");
        CHECK(e.path() == "tp");
        CHECK_THAT(e.rule(), Catch::Contains("given twice") && Catch::Contains("line 1, column 2") &&
                                 Catch::Contains("line 3, column 3"));
    }
    // Nested objects and arrays are named by their path; escapes decode before comparing.
    CHECK_THROWS_WITH(parse_json_text(R"({"plan": {"offload": {"optimizer": "cpu", "optimizer": "gpu"}}})", "s.json"),
                      Catch::Contains("plan.offload.optimizer is given twice"));
    CHECK_THROWS_WITH(parse_json_text(R"({"runs": [{"a": 1}, {"b": 1, "b": 2}]})", "h.json"),
                      Catch::Contains("runs[1].b is given twice"));
    CHECK_THROWS_WITH(parse_json_text(R"({"tp": 1, "t\u0070": 2})", "e.json"), Catch::Contains("tp is given twice"));
    // The same key in different objects, or as a string value, is fine.
    CHECK_NOTHROW(parse_json_text(R"({"a": {"x": 1}, "b": {"x": 2}, "c": ["x", "x"], "x": "x"})", "ok.json"));
    CHECK_NOTHROW(parse_json_text("\xEF\xBB\xBF{\"k\": \"\\\"q\\\"\", \"k2\": \"{[\"}", "bom.json"));
    // Columns count characters, not UTF-8 bytes.
    CHECK_THROWS_WITH(parse_json_text("{\"\xC3\xA9\": 1, \"\xC3\xA9\": 2}", "u.json"), Catch::Contains("line 1, column 10"));
}

TEST_CASE("json_num writes every digit of a large value, and it reads back the same", "[json]") {
    // A fixed 64-byte buffer cut 3.27e97 (98 integer digits and 6 decimals) to 63 characters, which
    // read back as 3.27e62: the calibration fuzzer's round trip failed on it.
    for (double v : {3.27e97, -1.5e200, 1e300, 123.456789}) {
        const std::string s = strata::json_num(v, 6);
        INFO(s.substr(0, 40) << "... (" << s.size() << " characters)");
        CHECK(nlohmann::json::parse(s).get<double>() == v);
    }
    CHECK(strata::json_num(3.27e97, 6).size() == 98 + 1 + 6);
    CHECK(strata::json_num(0.5, 2) == "0.50");
    CHECK(strata::json_num(-0.0, 3) == "0.000");
}
