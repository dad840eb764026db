#include "strata/common/json_reader.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "strata/common/text.hpp"

namespace strata {

using nlohmann::json;

nlohmann::json parse_json_text(const std::string& text, const std::string& file) {
    try {
        return json::parse(text);
    } catch (const json::parse_error& e) {
        // e.byte is the 1-based offset of the failure; turn it into line:column.
        std::size_t line = 1, col = 1;
        for (std::size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
            if (text[i] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        std::string what = e.what();
        auto pos = what.find("syntax error");
        throw InputError(file, "", "is not valid JSON at line " + std::to_string(line) + ", column " +
                                       std::to_string(col) + (pos != std::string::npos ? ": " + what.substr(pos) : ""));
    } catch (const json::exception& e) {
        // e.g. a number too large for a double (out_of_range 406): bad input, not a crash.
        throw InputError(file, "", std::string("is not valid JSON: ") + e.what());
    }
}

std::string read_text_file(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw InputError(path, "", "is a directory, not a file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(path, "", "cannot be opened (does the file exist?)");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

nlohmann::json read_json_file(const std::string& path) { return parse_json_text(read_text_file(path), path); }

std::string describe_json(const nlohmann::json& v) {
    if (v.is_object()) return "an object";
    if (v.is_array()) return "an array";
    if (v.is_null()) return "null";
    std::string s = v.dump();
    if (s.size() > 40) s = s.substr(0, 37) + "...";
    return s;
}

JsonReader::JsonReader(const nlohmann::json& obj, std::string file, std::string path)
    : obj_(obj), file_(std::move(file)), path_(std::move(path)) {
    if (!obj_.is_object()) throw InputError(file_, path_, "must be a JSON object (got " + describe_json(obj_) + ")");
}

std::string JsonReader::child_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

bool JsonReader::has(const std::string& key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }

const json* JsonReader::get(const std::string& key) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
}

const nlohmann::json& JsonReader::at(const std::string& key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) fail(key, "is required");
    return *it;
}

void JsonReader::fail(const std::string& key, const std::string& rule) const {
    throw InputError(file_, key.empty() ? path_ : child_path(key), rule);
}

std::string JsonReader::str(const std::string& key) {
    seen_.insert(key);
    const nlohmann::json& v = at(key);
    if (!v.is_string()) fail(key, "must be a string (got " + describe_json(v) + ")");
    return v.get<std::string>();
}

std::string JsonReader::str_or(const std::string& key, const std::string& dflt) { return has(key) ? str(key) : (seen_.insert(key), dflt); }

std::int64_t JsonReader::i64(const std::string& key) {
    seen_.insert(key);
    const nlohmann::json& v = at(key);
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_number_float()) {
        double d = v.get<double>();
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<std::int64_t>(d);
    }
    fail(key, "must be an integer (got " + describe_json(v) + ")");
}

std::int64_t JsonReader::i64_or(const std::string& key, std::int64_t dflt) { return has(key) ? i64(key) : (seen_.insert(key), dflt); }

double JsonReader::num(const std::string& key) {
    seen_.insert(key);
    const nlohmann::json& v = at(key);
    if (!v.is_number()) fail(key, "must be a number (got " + describe_json(v) + ")");
    double d = v.get<double>();
    if (!std::isfinite(d)) fail(key, "must be finite");
    return d;
}

double JsonReader::num_or(const std::string& key, double dflt) { return has(key) ? num(key) : (seen_.insert(key), dflt); }

bool JsonReader::boolean_or(const std::string& key, bool dflt) {
    seen_.insert(key);
    if (!has(key)) return dflt;
    const nlohmann::json& v = obj_.at(key);
    if (!v.is_boolean()) fail(key, "must be true or false (got " + describe_json(v) + ")");
    return v.get<bool>();
}

std::string JsonReader::choice(const std::string& key, const std::vector<std::string>& allowed) {
    std::string s = str(key);
    for (const auto& a : allowed)
        if (a == s) return s;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    std::string dym = did_you_mean(s, allowed);
    fail(key, "= \"" + s + "\" is not one of: " + list + (dym.empty() ? "" : " (did you mean \"" + dym + "\"?)"));
}

std::string JsonReader::choice_or(const std::string& key, const std::vector<std::string>& allowed, const std::string& dflt) {
    return has(key) ? choice(key, allowed) : (seen_.insert(key), dflt);
}

JsonReader JsonReader::object(const std::string& key) {
    seen_.insert(key);
    return JsonReader(at(key), file_, child_path(key));
}

void JsonReader::reject_unknown(const std::vector<std::string>& also_allowed) const {
    std::vector<std::string> known(seen_.begin(), seen_.end());
    known.insert(known.end(), also_allowed.begin(), also_allowed.end());
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
        const std::string& k = it.key();
        bool ok = false;
        for (const auto& n : known)
            if (n == k) ok = true;
        if (ok) continue;
        std::string dym = did_you_mean(k, known);
        throw InputError(file_, child_path(k), "is not a known key" + (dym.empty() ? "" : " (did you mean \"" + dym + "\"?)"));
    }
}

}  // namespace strata
