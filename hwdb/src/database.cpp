// Database: opening (missing and corrupt files are clear RuntimeErrors), versioned schema
// migrations tracked in PRAGMA user_version, WAL mode, typed reads of every table, and the
// transactional writers (write_run, upsert). The JSON format and view() live in their own files.
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>
#include <utility>

#include "impl.hpp"
#include "sqlite_util.hpp"

namespace strata::hwdb {

namespace fs = std::filesystem;
using detail::exec;
using detail::Stmt;
using detail::Transaction;

namespace {

// Migration N takes the schema from version N-1 to N. Append new entries; never edit old ones
// (databases in the field have already run them).
const std::vector<const char*>& migrations() {
    static const std::vector<const char*> m = {
        // 1: datasheet tables, runs, raw measurements and fits.
        R"SQL(
CREATE TABLE gpu (
  id TEXT PRIMARY KEY, vendor TEXT NOT NULL DEFAULT '', arch TEXT NOT NULL DEFAULT '',
  compute_capability TEXT NOT NULL DEFAULT '', sm_count INTEGER NOT NULL DEFAULT 0,
  boost_clock_mhz REAL NOT NULL DEFAULT 0, l2_bytes REAL NOT NULL DEFAULT 0,
  hbm_bytes REAL NOT NULL DEFAULT 0, hbm_Bps REAL NOT NULL DEFAULT 0,
  peak_fp32_flops REAL NOT NULL DEFAULT 0, peak_tf32_flops REAL NOT NULL DEFAULT 0,
  peak_fp16_flops REAL NOT NULL DEFAULT 0, peak_bf16_flops REAL NOT NULL DEFAULT 0,
  peak_fp8_flops REAL NOT NULL DEFAULT 0,
  scale_up_link TEXT NOT NULL DEFAULT '', scale_up_per_dir_Bps REAL NOT NULL DEFAULT 0,
  host_link TEXT NOT NULL DEFAULT '', tdp_w REAL NOT NULL DEFAULT 0,
  notes TEXT NOT NULL DEFAULT '', source TEXT NOT NULL CHECK (source <> ''),
  confidence TEXT NOT NULL CHECK (confidence IN ('high','medium','low')));
CREATE TABLE link (
  id TEXT PRIMARY KEY, kind TEXT NOT NULL, per_dir_Bps REAL NOT NULL DEFAULT 0,
  achievable_Bps REAL NOT NULL DEFAULT 0, achievable_fraction REAL NOT NULL DEFAULT 0.8,
  latency_ns REAL NOT NULL DEFAULT 0, notes TEXT NOT NULL DEFAULT '',
  source TEXT NOT NULL CHECK (source <> ''),
  confidence TEXT NOT NULL CHECK (confidence IN ('high','medium','low')));
CREATE TABLE node (
  id TEXT PRIMARY KEY, gpu_hint TEXT NOT NULL DEFAULT '', gpus_per_node INTEGER NOT NULL DEFAULT 8,
  fabric TEXT NOT NULL DEFAULT '', intra_link TEXT NOT NULL DEFAULT '', nic_count INTEGER NOT NULL DEFAULT 0,
  nic_link TEXT NOT NULL DEFAULT '', cpu TEXT NOT NULL DEFAULT '', cpu_dram_bytes REAL NOT NULL DEFAULT 0,
  ssd TEXT NOT NULL DEFAULT '', ssd_count INTEGER NOT NULL DEFAULT 0,
  ssd_aggregate_read_Bps REAL NOT NULL DEFAULT 0, h2d_per_gpu_Bps REAL NOT NULL DEFAULT 0,
  gpus_per_pcie_switch INTEGER NOT NULL DEFAULT 2, notes TEXT NOT NULL DEFAULT '',
  source TEXT NOT NULL CHECK (source <> ''),
  confidence TEXT NOT NULL CHECK (confidence IN ('high','medium','low')));
CREATE TABLE ssd (
  id TEXT PRIMARY KEY, interface TEXT NOT NULL DEFAULT '', example TEXT NOT NULL DEFAULT '',
  seq_read_Bps REAL NOT NULL DEFAULT 0, seq_write_Bps REAL NOT NULL DEFAULT 0,
  notes TEXT NOT NULL DEFAULT '', source TEXT NOT NULL CHECK (source <> ''),
  confidence TEXT NOT NULL CHECK (confidence IN ('high','medium','low')));
CREATE TABLE cpu (
  id TEXT PRIMARY KEY, sockets INTEGER NOT NULL DEFAULT 1, cores INTEGER NOT NULL DEFAULT 0,
  dram_Bps REAL NOT NULL DEFAULT 0, adam_params_per_s REAL NOT NULL DEFAULT 0,
  notes TEXT NOT NULL DEFAULT '', source TEXT NOT NULL CHECK (source <> ''),
  confidence TEXT NOT NULL CHECK (confidence IN ('high','medium','low')));
CREATE TABLE run (
  id INTEGER PRIMARY KEY AUTOINCREMENT, host TEXT NOT NULL DEFAULT '', devices TEXT NOT NULL DEFAULT '',
  driver TEXT NOT NULL DEFAULT '', tool_version TEXT NOT NULL DEFAULT '', backend TEXT NOT NULL DEFAULT '',
  started_at TEXT NOT NULL DEFAULT '', finished_at TEXT NOT NULL DEFAULT '',
  representative INTEGER NOT NULL DEFAULT 1, notes TEXT NOT NULL DEFAULT '');
CREATE TABLE measurement (
  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE,
  kind TEXT NOT NULL CHECK (kind <> ''), device TEXT NOT NULL, key TEXT NOT NULL,
  params_json TEXT NOT NULL DEFAULT '{}', labels_json TEXT NOT NULL DEFAULT '{}',
  value REAL NOT NULL, unit TEXT NOT NULL DEFAULT '', p10 REAL NOT NULL DEFAULT 0,
  p90 REAL NOT NULL DEFAULT 0, samples INTEGER NOT NULL DEFAULT 0);
CREATE INDEX measurement_run ON measurement(run_id, device, kind);
CREATE TABLE fit (
  id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE,
  kind TEXT NOT NULL CHECK (kind <> ''), device TEXT NOT NULL, key TEXT NOT NULL, model TEXT NOT NULL,
  params_json TEXT NOT NULL DEFAULT '{}', points_json TEXT NOT NULL DEFAULT '',
  valid_min REAL NOT NULL DEFAULT 0, valid_max REAL NOT NULL DEFAULT 0,
  n_points INTEGER NOT NULL DEFAULT 0, mape REAL NOT NULL DEFAULT 0);
CREATE INDEX fit_run ON fit(run_id, device, kind);
)SQL",
    };
    return m;
}

// Every statement against a file that is not SQLite fails with SQLITE_NOTADB; say so plainly. The
// path came from the user (--db, $STRATA_HWDB), so this is bad input, like a broken JSON file.
[[noreturn]] void not_a_database(const std::string& path, const std::string& why) {
    throw InputError(path, "", "is not a Strata hardware database (" + why +
                                   "); point --db at one, or create a new one with `strata hwdb init NEW_PATH`");
}

int read_user_version(sqlite3* db, const std::string& path) {
    Stmt st(db, path, "PRAGMA user_version");
    int v = st.step() ? st.integer(0) : 0;
    st.reset();
    return v;
}

bool has_table(sqlite3* db, const std::string& path, const char* name) {
    Stmt st(db, path, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1");
    st.bind(1, name);
    return st.step() && st.integer(0) > 0;
}

// An existing file must already be a Strata database: schema version >= 1 with its tables. An
// empty file, or someone else's SQLite database, is never turned into one (only creation, which
// `strata hwdb init` does, starts from nothing).
void require_strata_database(sqlite3* db, const std::string& path) {
    const int v = read_user_version(db, path);
    if (v >= 1 && has_table(db, path, "gpu") && has_table(db, path, "run")) return;
    std::int64_t tables = 0;
    {
        Stmt st(db, path, "SELECT count(*) FROM sqlite_master");
        if (st.step()) tables = st.i64(0);
    }
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    not_a_database(path, !ec && size == 0 ? "the file is empty"
                         : tables == 0   ? "an empty SQLite database"
                                         : "a SQLite database without Strata's tables");
}

void migrate(sqlite3* db, const std::string& path) {
    const int target = static_cast<int>(migrations().size());
    int v = read_user_version(db, path);
    if (v > target)
        throw RuntimeError("hwdb: " + path + " has schema version " + std::to_string(v) +
                           ", newer than this build understands (" + std::to_string(target) + ")");
    if (v == target) return;
    // Re-read inside the write transaction: another process may have migrated meanwhile.
    Transaction tx(db, path);
    v = read_user_version(db, path);
    for (int i = v; i < target; ++i) exec(db, path, migrations()[static_cast<std::size_t>(i)]);
    if (v < target) exec(db, path, "PRAGMA user_version = " + std::to_string(target));
    tx.commit();
}

void ensure_wal(sqlite3* db, const std::string& path) {
    std::string mode;
    {
        Stmt q(db, path, "PRAGMA journal_mode");  // finalized before the switch: no open read
        mode = q.step() ? q.text(0) : "";
    }
    if (mode == "wal") return;
    Stmt set(db, path, "PRAGMA journal_mode=WAL");
    if (!set.step() || set.text(0) != "wal") throw RuntimeError("hwdb: " + path + ": cannot switch to WAL mode");
}

// ---- row readers (column order = the SELECT lists below) ----

const char* kGpuCols =
    "id, vendor, arch, compute_capability, sm_count, boost_clock_mhz, l2_bytes, hbm_bytes, hbm_Bps, "
    "peak_fp32_flops, peak_tf32_flops, peak_fp16_flops, peak_bf16_flops, peak_fp8_flops, scale_up_link, "
    "scale_up_per_dir_Bps, host_link, tdp_w, notes, source, confidence";
Gpu read_gpu(const Stmt& s) {
    Gpu g;
    g.id = s.text(0), g.vendor = s.text(1), g.arch = s.text(2), g.compute_capability = s.text(3);
    g.sm_count = s.integer(4), g.boost_clock_mhz = s.real(5), g.l2_bytes = s.real(6);
    g.hbm_bytes = s.real(7), g.hbm_Bps = s.real(8);
    for (int d = 0; d < kDtypeCount; ++d) g.peak_flops[static_cast<std::size_t>(d)] = s.real(9 + d);
    g.scale_up_link = s.text(14), g.scale_up_per_dir_Bps = s.real(15), g.host_link = s.text(16);
    g.tdp_w = s.real(17), g.notes = s.text(18), g.source = s.text(19), g.confidence = s.text(20);
    return g;
}

const char* kLinkCols = "id, kind, per_dir_Bps, achievable_Bps, achievable_fraction, latency_ns, notes, source, confidence";
Link read_link(const Stmt& s) {
    Link l;
    l.id = s.text(0), l.kind = detail::link_kind_from_name(s.text(1)), l.per_dir_Bps = s.real(2);
    l.achievable_Bps = s.real(3), l.achievable_fraction = s.real(4), l.latency_ns = s.real(5);
    l.notes = s.text(6), l.source = s.text(7), l.confidence = s.text(8);
    return l;
}

const char* kNodeCols =
    "id, gpu_hint, gpus_per_node, fabric, intra_link, nic_count, nic_link, cpu, cpu_dram_bytes, ssd, ssd_count, "
    "ssd_aggregate_read_Bps, h2d_per_gpu_Bps, gpus_per_pcie_switch, notes, source, confidence";
Node read_node(const Stmt& s) {
    Node n;
    n.id = s.text(0), n.gpu_hint = s.text(1), n.gpus_per_node = s.integer(2), n.fabric = s.text(3);
    n.intra_link = s.text(4), n.nic_count = s.integer(5), n.nic_link = s.text(6), n.cpu = s.text(7);
    n.cpu_dram_bytes = s.real(8), n.ssd = s.text(9), n.ssd_count = s.integer(10);
    n.ssd_aggregate_read_Bps = s.real(11), n.h2d_per_gpu_Bps = s.real(12), n.gpus_per_pcie_switch = s.integer(13);
    n.notes = s.text(14), n.source = s.text(15), n.confidence = s.text(16);
    return n;
}

const char* kSsdCols = "id, interface, example, seq_read_Bps, seq_write_Bps, notes, source, confidence";
Ssd read_ssd(const Stmt& s) {
    Ssd d;
    d.id = s.text(0), d.interface = s.text(1), d.example = s.text(2), d.seq_read_Bps = s.real(3);
    d.seq_write_Bps = s.real(4), d.notes = s.text(5), d.source = s.text(6), d.confidence = s.text(7);
    return d;
}

const char* kCpuCols = "id, sockets, cores, dram_Bps, adam_params_per_s, notes, source, confidence";
Cpu read_cpu(const Stmt& s) {
    Cpu c;
    c.id = s.text(0), c.sockets = s.integer(1), c.cores = s.integer(2), c.dram_Bps = s.real(3);
    c.adam_params_per_s = s.real(4), c.notes = s.text(5), c.source = s.text(6), c.confidence = s.text(7);
    return c;
}

template <class T, class Reader>
std::vector<T> read_all(sqlite3* db, const std::string& path, const std::string& table, const char* cols, Reader rd) {
    Stmt s(db, path, std::string("SELECT ") + cols + " FROM " + table + " ORDER BY id");
    std::vector<T> out;
    while (s.step()) out.push_back(rd(s));
    return out;
}

template <class T, class Reader>
std::optional<T> read_one(sqlite3* db, const std::string& path, const std::string& table, const char* cols,
                          const std::string& id, Reader rd) {
    Stmt s(db, path, std::string("SELECT ") + cols + " FROM " + table + " WHERE id = ?1");
    s.bind(1, id);
    if (s.step()) return rd(s);
    return std::nullopt;
}

}  // namespace

// ---- opening ----

Database::Database(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Database::Database(Database&&) noexcept = default;
Database& Database::operator=(Database&&) noexcept = default;
Database::~Database() = default;

namespace {

// SQLite URI for a path (immutable=1 needs the URI form): every byte outside a safe set escaped.
std::string file_uri(const std::string& path, const char* query) {
    static const char* hex = "0123456789ABCDEF";
    std::string u = "file:";
    for (unsigned char c : path) {
        if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') {
            u += static_cast<char>(c);
        } else {
            u += '%';
            u += hex[c >> 4];
            u += hex[c & 15];
        }
    }
    return u + "?" + query;
}

void check_openable(const std::string& path) {
    std::error_code ec;
    if (!fs::exists(path, ec))
        throw InputError(path, "", "does not exist (run `strata hwdb init " + path +
                                       "` to create a seeded database, or pass --db / set $STRATA_HWDB)");
    if (fs::is_directory(path, ec)) throw InputError(path, "", "is a directory, not a hardware database file");
}

// Turn SQLite's verdict on a file that is not a database into InputError; rethrow the rest.
[[noreturn]] void rethrow_open_error(sqlite3* db, const std::string& path, const RuntimeError& e) {
    const int code = sqlite3_errcode(db) & 0xff;
    const std::string what = e.what();
    if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT || what.find("not a database") != std::string::npos ||
        what.find("malformed") != std::string::npos)
        not_a_database(path, code == SQLITE_NOTADB || code == SQLITE_CORRUPT ? sqlite3_errmsg(db) : what);
    throw e;
}

}  // namespace

std::string write_refusal(const std::string& path) {
    const fs::path folder = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
    std::error_code ec;
    if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0) return "the file is read-only";
    if (::access(folder.c_str(), W_OK | X_OK) != 0) return "its folder " + folder.string() + " is read-only";
    return {};
}

Database Database::open(const std::string& path, bool create) {
    std::error_code ec;
    const bool existed = fs::exists(path, ec);
    if (!create) check_openable(path);
    if (fs::is_directory(path, ec)) throw InputError(path, "", "is a directory, not a hardware database file");
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_FULLMUTEX;
    if (sqlite3_open_v2(path.c_str(), &impl->db, flags, nullptr) != SQLITE_OK) {
        std::string msg = impl->db ? sqlite3_errmsg(impl->db) : "out of memory";
        throw RuntimeError("hwdb: cannot open " + path + ": " + msg);
    }
    sqlite3_busy_timeout(impl->db, 10000);  // parallel tests and CLI calls share the default db
    sqlite3_extended_result_codes(impl->db, 1);
    // SQLite falls back to read-only when the file may not be written, and keeps its journal (the
    // -wal and -shm files) beside the database: this open is for writing, so both must be allowed.
    // (SQLite's own verdict on the file also covers what access() cannot see, a read-only mount.)
    std::string refusal = sqlite3_db_readonly(impl->db, "main") == 1 ? "the file is read-only" : write_refusal(path);
    if (!refusal.empty())
        throw RuntimeError("hwdb: " + path + " cannot be written by this user (" + refusal +
                           "); this command adds to the database, while commands that only read open it read-only");
    try {
        // The first real read is where SQLite notices garbage (SQLITE_NOTADB) or a damaged header.
        read_user_version(impl->db, path);
        if (existed) require_strata_database(impl->db, path);
        ensure_wal(impl->db, path);
        exec(impl->db, path, "PRAGMA foreign_keys = ON");
        migrate(impl->db, path);
    } catch (const RuntimeError& e) {
        rethrow_open_error(impl->db, path, e);
    }
    return Database(std::move(impl));
}

Database Database::open_read_only(const std::string& path) {
    check_openable(path);
    int code = SQLITE_OK;  // the primary result code of the last failure
    auto attempt = [&](bool immutable) {
        auto impl = std::make_unique<Impl>();
        impl->path = path;
        const std::string name = immutable ? file_uri(path, "immutable=1") : path;
        const int flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX | (immutable ? SQLITE_OPEN_URI : 0);
        if (sqlite3_open_v2(name.c_str(), &impl->db, flags, nullptr) != SQLITE_OK) {
            code = impl->db ? sqlite3_errcode(impl->db) & 0xff : SQLITE_NOMEM;
            std::string msg = impl->db ? sqlite3_errmsg(impl->db) : "out of memory";
            throw RuntimeError("hwdb: cannot open " + path + ": " + msg);
        }
        sqlite3_busy_timeout(impl->db, 10000);
        sqlite3_extended_result_codes(impl->db, 1);
        try {
            read_user_version(impl->db, path);
            require_strata_database(impl->db, path);
        } catch (const RuntimeError& e) {
            code = sqlite3_errcode(impl->db) & 0xff;
            rethrow_open_error(impl->db, path, e);
        }
        return impl;
    };
    std::unique_ptr<Impl> impl;
    try {
        impl = attempt(false);
    } catch (const RuntimeError&) {
        // A WAL database in a folder this user may not write has no shared-memory index to read
        // through (SQLITE_CANTOPEN, SQLITE_READONLY_CANTINIT): read it as an immutable file
        // instead; no one can be writing to it from here. Any other failure stands.
        if (code != SQLITE_CANTOPEN && code != SQLITE_READONLY) throw;
        impl = attempt(true);
    }
    const int v = read_user_version(impl->db, path);
    const int target = static_cast<int>(migrations().size());
    if (v > target)
        throw RuntimeError("hwdb: " + path + " has schema version " + std::to_string(v) +
                           ", newer than this build understands (" + std::to_string(target) + ")");
    if (v < target) {
        // An older schema: upgrading it is a write. Do it if this user may, then read.
        impl.reset();
        try {
            (void)open(path, false);
        } catch (const RuntimeError& e) {
            throw RuntimeError("hwdb: " + path + " has schema version " + std::to_string(v) + " and this build needs " +
                               std::to_string(target) + "; upgrading it needs write access (" + e.what() + ")");
        }
        return open_read_only(path);
    }
    return Database(std::move(impl));
}

bool Database::read_only() const { return sqlite3_db_readonly(impl_->db, "main") == 1; }

const std::string& Database::path() const { return impl_->path; }
int Database::schema_version() const { return read_user_version(impl_->db, impl_->path); }

// ---- reads ----

std::vector<Gpu> Database::gpus() const { return read_all<Gpu>(impl_->db, impl_->path, "gpu", kGpuCols, read_gpu); }
std::vector<Link> Database::links() const { return read_all<Link>(impl_->db, impl_->path, "link", kLinkCols, read_link); }
std::vector<Node> Database::nodes() const { return read_all<Node>(impl_->db, impl_->path, "node", kNodeCols, read_node); }
std::vector<Ssd> Database::ssds() const { return read_all<Ssd>(impl_->db, impl_->path, "ssd", kSsdCols, read_ssd); }
std::vector<Cpu> Database::cpus() const { return read_all<Cpu>(impl_->db, impl_->path, "cpu", kCpuCols, read_cpu); }

std::optional<Gpu> Database::gpu(const std::string& id) const {
    return read_one<Gpu>(impl_->db, impl_->path, "gpu", kGpuCols, id, read_gpu);
}
std::optional<Link> Database::link(const std::string& id) const {
    return read_one<Link>(impl_->db, impl_->path, "link", kLinkCols, id, read_link);
}
std::optional<Node> Database::node(const std::string& id) const {
    return read_one<Node>(impl_->db, impl_->path, "node", kNodeCols, id, read_node);
}
std::optional<Ssd> Database::ssd(const std::string& id) const {
    return read_one<Ssd>(impl_->db, impl_->path, "ssd", kSsdCols, id, read_ssd);
}
std::optional<Cpu> Database::cpu(const std::string& id) const {
    return read_one<Cpu>(impl_->db, impl_->path, "cpu", kCpuCols, id, read_cpu);
}

std::vector<Run> Database::runs() const {
    Stmt s(impl_->db, impl_->path,
           "SELECT id, host, devices, driver, tool_version, backend, started_at, finished_at, representative, notes "
           "FROM run ORDER BY id");
    std::vector<Run> out;
    while (s.step()) {
        Run r;
        r.id = s.i64(0), r.host = s.text(1), r.devices = s.text(2), r.driver = s.text(3);
        r.tool_version = s.text(4), r.backend = s.text(5), r.started_at = s.text(6), r.finished_at = s.text(7);
        r.representative = s.integer(8) != 0, r.notes = s.text(9);
        out.push_back(std::move(r));
    }
    return out;
}

std::vector<Measurement> Database::measurements(std::int64_t run_id) const {
    Stmt s(impl_->db, impl_->path,
           "SELECT run_id, kind, device, key, params_json, labels_json, value, unit, p10, p90, samples "
           "FROM measurement WHERE run_id = ?1 ORDER BY id");
    s.bind(1, run_id);
    std::vector<Measurement> out;
    while (s.step()) {
        Measurement m;
        m.run_id = s.i64(0), m.kind = s.text(1), m.device = s.text(2), m.key = s.text(3);
        m.params = detail::params_from_text(s.text(4)), m.labels = detail::labels_from_text(s.text(5));
        m.value = s.real(6), m.unit = s.text(7), m.p10 = s.real(8), m.p90 = s.real(9), m.samples = s.integer(10);
        out.push_back(std::move(m));
    }
    return out;
}

std::vector<Fit> Database::fits(std::int64_t run_id) const {
    Stmt s(impl_->db, impl_->path,
           "SELECT id, run_id, kind, device, key, model, params_json, points_json, valid_min, valid_max, n_points, mape "
           "FROM fit WHERE run_id = ?1 ORDER BY id");
    s.bind(1, run_id);
    std::vector<Fit> out;
    while (s.step()) {
        Fit f;
        f.id = s.i64(0), f.run_id = s.i64(1), f.kind = s.text(2), f.device = s.text(3), f.key = s.text(4);
        f.model = s.text(5), f.params = detail::params_from_text(s.text(6)), f.points_json = s.text(7);
        f.valid_min = s.real(8), f.valid_max = s.real(9), f.n_points = s.integer(10), f.mape = s.real(11);
        out.push_back(std::move(f));
    }
    return out;
}

// ---- writes ----

std::int64_t Database::Impl::insert_run(const Run& run, const std::vector<Measurement>& ms, const std::vector<Fit>& fs_) {
    Stmt r(db, path,
           "INSERT INTO run (host, devices, driver, tool_version, backend, started_at, finished_at, representative, notes) "
           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    r.bind(1, run.host).bind(2, run.devices).bind(3, run.driver).bind(4, run.tool_version).bind(5, run.backend);
    r.bind(6, run.started_at).bind(7, run.finished_at).bind(8, run.representative).bind(9, run.notes);
    r.run();
    const std::int64_t id = sqlite3_last_insert_rowid(db);

    Stmt m(db, path,
           "INSERT INTO measurement (run_id, kind, device, key, params_json, labels_json, value, unit, p10, p90, samples) "
           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
    for (std::size_t i = 0; i < ms.size(); ++i) {
        const Measurement& x = ms[i];
        // Checked row by row, so a bad row may come after good ones: the transaction undoes those.
        const std::string at = "measurements[" + std::to_string(i) + "]";
        if (x.kind.empty()) throw InputError("", at + ".kind", "must not be empty");
        if (x.device.empty()) throw InputError("", at + ".device", "must not be empty");
        m.reset();
        m.bind(1, id).bind(2, x.kind).bind(3, x.device).bind(4, x.key).bind(5, detail::params_to_text(x.params));
        m.bind(6, detail::labels_to_text(x.labels)).bind(7, x.value).bind(8, x.unit).bind(9, x.p10).bind(10, x.p90);
        m.bind(11, x.samples);
        m.run();
    }
    Stmt f(db, path,
           "INSERT INTO fit (run_id, kind, device, key, model, params_json, points_json, valid_min, valid_max, n_points, mape) "
           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
    for (std::size_t i = 0; i < fs_.size(); ++i) {
        const Fit& x = fs_[i];
        const std::string at = "fits[" + std::to_string(i) + "]";
        if (x.kind.empty()) throw InputError("", at + ".kind", "must not be empty");
        if (x.device.empty()) throw InputError("", at + ".device", "must not be empty");
        if (x.model.empty()) throw InputError("", at + ".model", "must not be empty");
        f.reset();
        f.bind(1, id).bind(2, x.kind).bind(3, x.device).bind(4, x.key).bind(5, x.model);
        f.bind(6, detail::params_to_text(x.params)).bind(7, x.points_json).bind(8, x.valid_min).bind(9, x.valid_max);
        f.bind(10, x.n_points).bind(11, x.mape);
        f.run();
    }
    return id;
}

std::int64_t Database::write_run(const Run& run, const std::vector<Measurement>& ms, const std::vector<Fit>& fits) {
    Transaction tx(impl_->db, impl_->path);
    std::int64_t id = impl_->insert_run(run, ms, fits);
    tx.commit();
    return id;
}

void Database::Impl::upsert_rows(const std::vector<Gpu>& gs, const std::vector<Link>& ls, const std::vector<Node>& ns,
                                 const std::vector<Ssd>& ss, const std::vector<Cpu>& cs) {
    auto need_source = [](const std::string& table, const std::string& id, const std::string& source,
                          const std::string& conf) {
        if (id.empty()) throw InputError("", table + ".id", "must not be empty");
        if (source.empty()) throw InputError("", table + "." + id + ".source", "must name where the figures come from");
        const auto& lv = detail::confidence_levels();
        if (std::find(lv.begin(), lv.end(), conf) == lv.end())
            throw InputError("", table + "." + id + ".confidence", "must be high, medium or low (got \"" + conf + "\")");
    };
    Stmt g(db, path, std::string("INSERT OR REPLACE INTO gpu (") + kGpuCols +
                         ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21)");
    for (const Gpu& x : gs) {
        need_source("gpu", x.id, x.source, x.confidence);
        g.reset();
        g.bind(1, x.id).bind(2, x.vendor).bind(3, x.arch).bind(4, x.compute_capability).bind(5, x.sm_count);
        g.bind(6, x.boost_clock_mhz).bind(7, x.l2_bytes).bind(8, x.hbm_bytes).bind(9, x.hbm_Bps);
        for (int d = 0; d < kDtypeCount; ++d) g.bind(10 + d, x.peak_flops[static_cast<std::size_t>(d)]);
        g.bind(15, x.scale_up_link).bind(16, x.scale_up_per_dir_Bps).bind(17, x.host_link).bind(18, x.tdp_w);
        g.bind(19, x.notes).bind(20, x.source).bind(21, x.confidence);
        g.run();
    }
    Stmt l(db, path, std::string("INSERT OR REPLACE INTO link (") + kLinkCols + ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)");
    for (const Link& x : ls) {
        need_source("link", x.id, x.source, x.confidence);
        l.reset();
        l.bind(1, x.id).bind(2, detail::link_kind_name(x.kind)).bind(3, x.per_dir_Bps).bind(4, x.achievable_Bps);
        l.bind(5, x.achievable_fraction).bind(6, x.latency_ns).bind(7, x.notes).bind(8, x.source).bind(9, x.confidence);
        l.run();
    }
    Stmt n(db, path, std::string("INSERT OR REPLACE INTO node (") + kNodeCols +
                         ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17)");
    for (const Node& x : ns) {
        need_source("node", x.id, x.source, x.confidence);
        n.reset();
        n.bind(1, x.id).bind(2, x.gpu_hint).bind(3, x.gpus_per_node).bind(4, x.fabric).bind(5, x.intra_link);
        n.bind(6, x.nic_count).bind(7, x.nic_link).bind(8, x.cpu).bind(9, x.cpu_dram_bytes).bind(10, x.ssd);
        n.bind(11, x.ssd_count).bind(12, x.ssd_aggregate_read_Bps).bind(13, x.h2d_per_gpu_Bps);
        n.bind(14, x.gpus_per_pcie_switch).bind(15, x.notes).bind(16, x.source).bind(17, x.confidence);
        n.run();
    }
    Stmt s(db, path, std::string("INSERT OR REPLACE INTO ssd (") + kSsdCols + ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8)");
    for (const Ssd& x : ss) {
        need_source("ssd", x.id, x.source, x.confidence);
        s.reset();
        s.bind(1, x.id).bind(2, x.interface).bind(3, x.example).bind(4, x.seq_read_Bps).bind(5, x.seq_write_Bps);
        s.bind(6, x.notes).bind(7, x.source).bind(8, x.confidence);
        s.run();
    }
    Stmt c(db, path, std::string("INSERT OR REPLACE INTO cpu (") + kCpuCols + ") VALUES (?1,?2,?3,?4,?5,?6,?7,?8)");
    for (const Cpu& x : cs) {
        need_source("cpu", x.id, x.source, x.confidence);
        c.reset();
        c.bind(1, x.id).bind(2, x.sockets).bind(3, x.cores).bind(4, x.dram_Bps).bind(5, x.adam_params_per_s);
        c.bind(6, x.notes).bind(7, x.source).bind(8, x.confidence);
        c.run();
    }
}

void Database::upsert(const std::vector<Gpu>& g, const std::vector<Link>& l, const std::vector<Node>& n,
                      const std::vector<Ssd>& s, const std::vector<Cpu>& c) {
    Transaction tx(impl_->db, impl_->path);
    impl_->upsert_rows(g, l, n, s, c);
    tx.commit();
}

}  // namespace strata::hwdb
