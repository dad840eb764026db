// Thin RAII wrappers over the SQLite C API, private to hwdb: a prepared statement with typed binds
// and column reads, and a transaction guard that rolls back unless committed. Every SQLite error
// becomes a strata::RuntimeError naming the database path. Nothing here knows the schema.
#pragma once
#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "strata/common/error.hpp"

namespace strata::hwdb::detail {

[[noreturn]] inline void sql_fail(sqlite3* db, const std::string& path, const std::string& what) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    throw RuntimeError("hwdb: " + path + ": " + what + ": " + msg);
}

/// Run statements that return no rows (DDL, pragmas, BEGIN/COMMIT).
inline void exec(sqlite3* db, const std::string& path, const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : sqlite3_errmsg(db);
        sqlite3_free(err);
        throw RuntimeError("hwdb: " + path + ": " + msg);
    }
}

class Stmt {
public:
    Stmt(sqlite3* db, const std::string& path, const std::string& sql) : db_(db), path_(path) {
        if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &st_, nullptr) != SQLITE_OK)
            sql_fail(db, path, "preparing \"" + sql.substr(0, 60) + "\"");
    }
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;
    ~Stmt() { sqlite3_finalize(st_); }

    // Binds are 1-based, as in SQLite.
    Stmt& bind(int i, const std::string& v) {
        check(sqlite3_bind_text(st_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
        return *this;
    }
    Stmt& bind(int i, const char* v) { return bind(i, std::string(v)); }
    Stmt& bind(int i, double v) {
        check(sqlite3_bind_double(st_, i, v));
        return *this;
    }
    Stmt& bind(int i, std::int64_t v) {
        check(sqlite3_bind_int64(st_, i, v));
        return *this;
    }
    Stmt& bind(int i, int v) { return bind(i, static_cast<std::int64_t>(v)); }
    Stmt& bind(int i, bool v) { return bind(i, static_cast<std::int64_t>(v ? 1 : 0)); }

    /// Advance: true while a row is available.
    bool step() {
        int rc = sqlite3_step(st_);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        sql_fail(db_, path_, "executing statement");
    }
    void run() {
        while (step()) {
        }
        sqlite3_reset(st_);
    }
    void reset() {
        sqlite3_reset(st_);
        sqlite3_clear_bindings(st_);
    }

    std::string text(int col) const {
        const unsigned char* p = sqlite3_column_text(st_, col);
        return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(st_, col))) : std::string();
    }
    double real(int col) const { return sqlite3_column_double(st_, col); }
    std::int64_t i64(int col) const { return sqlite3_column_int64(st_, col); }
    int integer(int col) const { return sqlite3_column_int(st_, col); }

private:
    void check(int rc) {
        if (rc != SQLITE_OK) sql_fail(db_, path_, "binding a value");
    }
    sqlite3* db_;
    std::string path_;
    sqlite3_stmt* st_ = nullptr;
};

/// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless commit() ran. IMMEDIATE takes the
/// write lock up front, so two writers wait on the busy timeout instead of failing mid-way.
class Transaction {
public:
    Transaction(sqlite3* db, const std::string& path) : db_(db), path_(path) { exec(db_, path_, "BEGIN IMMEDIATE"); }
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    ~Transaction() {
        if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    void commit() {
        exec(db_, path_, "COMMIT");
        done_ = true;
    }

private:
    sqlite3* db_;
    std::string path_;
    bool done_ = false;
};

}  // namespace strata::hwdb::detail
