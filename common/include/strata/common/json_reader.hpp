// Strict JSON reading for every input file: each field read through a JsonReader knows its file and
// JSON path, so errors read "plan.json: plan.tp must be a positive integer (got -1)". Unknown keys
// are an error with a did-you-mean. Only the edges (spec parsing, hwdb import) include this.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "strata/common/error.hpp"
#include "strata/common/files.hpp"  // write_file_atomic, for the writers that read with this

namespace strata {

/// Parse JSON text; a syntax error becomes an InputError naming the file, line and column, and so
/// does a key given twice in one object (both positions named: JSON leaves duplicates undefined,
/// and "the last one wins" would silently drop a setting).
nlohmann::json parse_json_text(const std::string& text, const std::string& file);
/// Read and parse a file; a missing file is an InputError.
nlohmann::json read_json_file(const std::string& path);
/// Read a whole file as text (InputError if unreadable).
std::string read_text_file(const std::string& path);

/// A view of one JSON object at a path, which remembers the keys it was asked for.
class JsonReader {
public:
    JsonReader(const nlohmann::json& obj, std::string file, std::string path);

    const std::string& file() const { return file_; }
    const std::string& path() const { return path_; }
    const nlohmann::json& json() const { return obj_; }
    std::string child_path(const std::string& key) const;

    bool has(const std::string& key) const;
    /// The value at key, or nullptr json if absent (marks the key as known).
    const nlohmann::json* get(const std::string& key);

    std::string str(const std::string& key);
    std::string str_or(const std::string& key, const std::string& dflt);
    std::int64_t i64(const std::string& key);
    std::int64_t i64_or(const std::string& key, std::int64_t dflt);
    double num(const std::string& key);
    double num_or(const std::string& key, double dflt);
    bool boolean_or(const std::string& key, bool dflt);
    /// One of `allowed`, whatever its case ("RMSNorm" reads as "rmsnorm"), or an alias in
    /// `aliases` (name as users write it elsewhere -> the allowed value); the canonical value is
    /// returned. The error lists the allowed values, with a did-you-mean.
    using Aliases = std::vector<std::pair<std::string, std::string>>;
    std::string choice(const std::string& key, const std::vector<std::string>& allowed, const Aliases& aliases = {});
    std::string choice_or(const std::string& key, const std::vector<std::string>& allowed, const std::string& dflt,
                          const Aliases& aliases = {});
    JsonReader object(const std::string& key);

    /// Throw an InputError at this object's path (or at key) with the rule.
    [[noreturn]] void fail(const std::string& key, const std::string& rule) const;
    /// Call after reading: any key not asked for is an error, with a did-you-mean.
    void reject_unknown(const std::vector<std::string>& also_allowed = {}) const;

private:
    const nlohmann::json& at(const std::string& key) const;
    const nlohmann::json& obj_;
    std::string file_, path_;
    std::set<std::string> seen_;
};

/// Describe a JSON value briefly for error messages ("-1", "\"abc\"", "an object").
std::string describe_json(const nlohmann::json& v);

}  // namespace strata
