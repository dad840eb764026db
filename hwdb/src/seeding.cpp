// Creating seeded databases: create_seeded() builds a database from the embedded seed in a
// temporary file and only then links it into place (never a half-written database at `path`),
// and default_db_path() finds this build's default database, seeding it on first use if missing.
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>

#include "impl.hpp"

namespace strata::hwdb {

namespace fs = std::filesystem;

namespace {

void remove_db_files(const std::string& p) {
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(p + suffix, ec);
}

// Build a seeded database at a unique temporary name beside `path`, then hard-link it to `path`:
// link() fails if `path` exists, so concurrent first uses cannot replace a database in use.
// Returns false if `path` appeared meanwhile (someone else won); throws on real failures.
bool build_and_publish(const std::string& path) {
    static std::atomic<unsigned> counter{0};
    const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    remove_db_files(tmp);
    try {
        Database db = Database::open(tmp, true);
        db.import_json(detail::seed_json(), "<built-in seed>");
    } catch (...) {
        remove_db_files(tmp);
        throw;
    }
    // The Database closed above: SQLite checkpointed the WAL into the main file and removed it.
    std::error_code ec;
    fs::create_hard_link(tmp, path, ec);
    remove_db_files(tmp);
    if (ec) {
        if (fs::exists(path)) return false;
        throw RuntimeError("hwdb: cannot create " + path + ": " + ec.message());
    }
    return true;
}

}  // namespace

Database Database::create_seeded(const std::string& path) {
    std::error_code ec;
    if (fs::exists(path, ec)) throw RuntimeError("hwdb: " + path + " already exists (not replaced; remove it first)");
    const fs::path parent = fs::path(path).parent_path();
    if (!parent.empty() && !fs::is_directory(parent, ec))
        throw RuntimeError("hwdb: cannot create " + path + ": folder " + parent.string() + " does not exist");
    if (!build_and_publish(path)) throw RuntimeError("hwdb: " + path + " already exists (created concurrently)");
    return open(path, false);
}

std::string default_db_path() {
    const std::string compiled = STRATA_DEFAULT_DB;
    const char* env = std::getenv("STRATA_HWDB");
    const std::string path = (env && *env) ? std::string(env) : compiled;
    // Only this build's own default is seeded on demand; a user-named file that is missing stays an
    // error (a typo should not silently become a fresh database).
    std::error_code ec;
    if (path == compiled && !fs::exists(path, ec)) {
        fs::create_directories(fs::path(path).parent_path(), ec);
        try {
            build_and_publish(path);
        } catch (const RuntimeError&) {
            // Leave it: open() will report the missing file with its remedy.
        }
    }
    return path;
}

}  // namespace strata::hwdb
