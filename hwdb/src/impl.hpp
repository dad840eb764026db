// Private pieces of hwdb shared by its .cpp files: the Database::Impl state (one SQLite handle),
// the in-transaction write helpers that import and write_run share, the JSON row codecs of the
// export format, and the embedded seed. Not installed; nothing outside hwdb/src includes it.
#pragma once
#include <sqlite3.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "strata/common/json_reader.hpp"
#include "strata/hwdb/hwdb.hpp"

namespace strata::hwdb {

struct Database::Impl {
    std::string path;
    sqlite3* db = nullptr;
    ~Impl() {
        if (db) sqlite3_close_v2(db);
    }

    // Writers that assume a transaction is open (callers own the Transaction).
    void upsert_rows(const std::vector<Gpu>&, const std::vector<Link>&, const std::vector<Node>&,
                     const std::vector<Ssd>&, const std::vector<Cpu>&);
    std::int64_t insert_run(const Run&, const std::vector<Measurement>&, const std::vector<Fit>&);
};

namespace detail {

/// The built-in datasheet seed (hwdb/seed/seed.json, embedded at build time).
const char* seed_json();

/// The confidence vocabulary of datasheet rows.
const std::vector<std::string>& confidence_levels();
std::string link_kind_name(LinkKind);
LinkKind link_kind_from_name(const std::string&);

// JSON codecs of the export format (docs/hwdb.md). Readers validate strictly via JsonReader.
nlohmann::json to_json(const Gpu&);
nlohmann::json to_json(const Link&);
nlohmann::json to_json(const Node&);
nlohmann::json to_json(const Ssd&);
nlohmann::json to_json(const Cpu&);
nlohmann::json to_json(const Run&);
nlohmann::json to_json(const Measurement&);
nlohmann::json to_json(const Fit&);
Gpu gpu_from_json(JsonReader&);
Link link_from_json(JsonReader&);
Node node_from_json(JsonReader&);
Ssd ssd_from_json(JsonReader&);
Cpu cpu_from_json(JsonReader&);
Run run_from_json(JsonReader&);
Measurement measurement_from_json(JsonReader&);
Fit fit_from_json(JsonReader&);

/// Maps of numbers/strings as compact JSON text (sorted keys: deterministic) and back.
std::string params_to_text(const std::map<std::string, double>&);
std::string labels_to_text(const std::map<std::string, std::string>&);
std::map<std::string, double> params_from_text(const std::string&);
std::map<std::string, std::string> labels_from_text(const std::string&);

}  // namespace detail
}  // namespace strata::hwdb
