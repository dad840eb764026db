#include "strata/common/json_reader.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "strata/common/text.hpp"

namespace strata {

using nlohmann::json;

namespace {

struct TextPos {
    std::size_t line = 1, column = 1;
    std::string str() const { return "line " + std::to_string(line) + ", column " + std::to_string(column); }
};

void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// A key given twice in one object. nlohmann keeps the last silently, so this pass runs over text
// the parser has already accepted (valid JSON: no error handling needed beyond staying in bounds)
// and compares keys decoded as the parser decodes them ("tp" and "\u0074p" are the same key).
void reject_duplicate_keys(const std::string& text, const std::string& file) {
    struct Frame {
        bool object = false;
        bool expect_key = false;
        std::size_t index = 0;  // arrays: the element being read
        std::string key;        // objects: the member being read
        std::map<std::string, TextPos> seen;
    };
    std::vector<Frame> stack;
    auto path_of = [&](const std::string& key) {
        std::string p;
        for (const Frame& f : stack) {
            if (&f == &stack.back()) break;
            if (f.object) p += (p.empty() ? "" : ".") + f.key;
            else p += "[" + std::to_string(f.index) + "]";
        }
        return p + (p.empty() ? "" : ".") + key;
    };
    auto hex = [&](std::size_t at) {
        std::uint32_t v = 0;
        for (std::size_t k = at; k < at + 4 && k < text.size(); ++k) {
            const char c = text[k];
            v = v * 16 + static_cast<std::uint32_t>(c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0');
        }
        return v;
    };
    TextPos pos;
    std::size_t i = 0;
    if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) i = 3;  // the byte-order mark nlohmann skips
    auto advance = [&](std::size_t n) {
        for (std::size_t k = 0; k < n && i < text.size(); ++k, ++i) {
            if (text[i] == '\n') {
                ++pos.line;
                pos.column = 1;
            } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
                ++pos.column;  // columns count characters, not UTF-8 continuation bytes
            }
        }
    };
    while (i < text.size()) {
        const char c = text[i];
        if (c == '{' || c == '[') {
            Frame f;
            f.object = c == '{';
            f.expect_key = f.object;
            stack.push_back(std::move(f));
            advance(1);
        } else if (c == '}' || c == ']') {
            if (!stack.empty()) stack.pop_back();
            advance(1);
        } else if (c == ',') {
            if (!stack.empty()) {
                if (stack.back().object) stack.back().expect_key = true;
                else ++stack.back().index;
            }
            advance(1);
        } else if (c == '"') {
            const TextPos at = pos;
            advance(1);
            std::string s;
            while (i < text.size() && text[i] != '"') {
                if (text[i] != '\\') {
                    s += text[i];
                    advance(1);
                    continue;
                }
                const char e = i + 1 < text.size() ? text[i + 1] : '"';
                if (e != 'u') {
                    s += e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
                    advance(2);
                    continue;
                }
                std::uint32_t cp = hex(i + 2);
                advance(6);
                if (cp >= 0xD800 && cp < 0xDC00 && i + 1 < text.size() && text[i] == '\\' && text[i + 1] == 'u') {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (hex(i + 2) - 0xDC00);
                    advance(6);
                }
                append_utf8(s, cp);
            }
            advance(1);  // the closing quote
            if (!stack.empty() && stack.back().object && stack.back().expect_key) {
                Frame& f = stack.back();
                f.expect_key = false;
                const auto [it, fresh] = f.seen.emplace(s, at);
                if (!fresh)
                    throw InputError(file, path_of(s), "is given twice, at " + it->second.str() + " and at " + at.str() +
                                                           " (a key may appear once per object)");
                f.key = s;
            }
        } else {
            advance(1);
        }
    }
}

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& file) {
    try {
        json j = json::parse(text);
        reject_duplicate_keys(text, file);
        return j;
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

std::string JsonReader::choice(const std::string& key, const std::vector<std::string>& allowed, const Aliases& aliases) {
    std::string s = str(key);
    for (const auto& a : allowed)
        if (a == s) return s;
    const std::string ls = ascii_lower(s);
    for (const auto& a : allowed)
        if (ascii_lower(a) == ls) return a;
    for (const auto& [alias, to] : aliases)
        if (ascii_lower(alias) == ls) return to;
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    std::string dym = did_you_mean(s, allowed);
    fail(key, "= \"" + s + "\" is not one of: " + list + (dym.empty() ? "" : " (did you mean \"" + dym + "\"?)"));
}

std::string JsonReader::choice_or(const std::string& key, const std::vector<std::string>& allowed, const std::string& dflt,
                                  const Aliases& aliases) {
    return has(key) ? choice(key, allowed, aliases) : (seen_.insert(key), dflt);
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
