// Test helpers for hwdb: a unique temporary folder removed on scope exit, and a seeded database in
// it. Each test gets its own files, so tests can run in parallel.
#pragma once
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "strata/hwdb/hwdb.hpp"

namespace strata::hwdb::testing {

class TempDir {
public:
    TempDir() {
        static std::atomic<int> n{0};
        path_ = std::filesystem::temp_directory_path() /
                ("strata-hwdb-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

inline Measurement measurement(const std::string& kind, const std::string& device, const std::string& key,
                               std::map<std::string, double> params, double value, const std::string& unit) {
    Measurement m;
    m.kind = kind, m.device = device, m.key = key, m.params = std::move(params), m.value = value, m.unit = unit;
    m.samples = 10;
    return m;
}

inline Fit fit(const std::string& kind, const std::string& device, const std::string& key, const std::string& model,
               std::map<std::string, double> params) {
    Fit f;
    f.kind = kind, f.device = device, f.key = key, f.model = model, f.params = std::move(params);
    f.n_points = 8;
    return f;
}

inline Run run(const std::string& started_at, bool representative = true) {
    Run r;
    r.host = "testhost", r.backend = "test", r.tool_version = "0.1.0", r.started_at = started_at;
    r.finished_at = started_at, r.representative = representative;
    return r;
}

}  // namespace strata::hwdb::testing
