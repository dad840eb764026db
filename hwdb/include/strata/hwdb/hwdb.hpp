// The hardware database: SQLite with versioned migrations, seeded with datasheet figures, plus the
// profiler's runs, measurements and fits. Only this library speaks SQL. Writes are transactional,
// a database opened for writing is in WAL mode, readers open it read-only, and a missing file or
// one that is not a Strata database is an InputError naming it.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/hwdb/types.hpp"
#include "strata/hwdb/view.hpp"

namespace strata::hwdb {

/// The path of the seeded default database of this build (or $STRATA_HWDB when set).
std::string default_db_path();
/// Why this user may not write the database file at `path`: "the file is read-only", or its
/// folder (which holds SQLite's journal) is; empty when both may be written. The rule a writer's
/// open applies, for callers that decide before they open (strata validate's profile).
std::string write_refusal(const std::string& path);

class Database {
public:
    /// Open a database for writing (and migrate it). create=false: a missing file is an error. An
    /// existing file must be a Strata database (InputError naming it otherwise: an empty file or
    /// another SQLite database is never turned into one); a file this user may not write is a
    /// RuntimeError.
    static Database open(const std::string& path, bool create = false);
    /// Open an existing database for reading only: nothing is written (no WAL switch, no
    /// migration unless the schema is older and the user may write), so it works on a file or
    /// folder without write permission. Writes through it fail.
    static Database open_read_only(const std::string& path);
    /// Create a database at path holding the built-in datasheet seed (replaces nothing that exists).
    static Database create_seeded(const std::string& path);

    Database(Database&&) noexcept;
    Database& operator=(Database&&) noexcept;
    ~Database();

    const std::string& path() const;
    int schema_version() const;
    bool read_only() const;

    std::vector<Gpu> gpus() const;
    std::vector<Link> links() const;
    std::vector<Node> nodes() const;
    std::vector<Ssd> ssds() const;
    std::vector<Cpu> cpus() const;
    std::optional<Gpu> gpu(const std::string& id) const;
    std::optional<Link> link(const std::string& id) const;
    std::optional<Node> node(const std::string& id) const;
    std::optional<Ssd> ssd(const std::string& id) const;
    std::optional<Cpu> cpu(const std::string& id) const;

    std::vector<Run> runs() const;
    std::vector<Measurement> measurements(std::int64_t run_id) const;
    std::vector<Fit> fits(std::int64_t run_id) const;

    /// Write one whole run (run row, measurements, fits) in one transaction; returns the run id.
    /// If anything fails, the database is left as it was.
    std::int64_t write_run(const Run& run, const std::vector<Measurement>& ms, const std::vector<Fit>& fits);

    /// Add or replace datasheet rows (import), in one transaction.
    void upsert(const std::vector<Gpu>&, const std::vector<Link>&, const std::vector<Node>&,
                const std::vector<Ssd>&, const std::vector<Cpu>&);

    /// Everything the cost models need for a GPU type in a node type, with the newest matching
    /// measured fits (if any) in place of datasheet figures. Unknown ids are an InputError
    /// naming `what` (e.g. "cluster.gpu") with a did-you-mean.
    HardwareView view(const std::string& gpu_id, const std::string& node_id, const std::string& intra_link,
                      const std::string& nic_link, const std::string& ssd_id, const std::string& cpu_id) const;

    /// JSON export/import of the whole database or one run (format in docs/hwdb.md).
    std::string export_json(std::optional<std::int64_t> run_id = std::nullopt) const;
    void import_json(const std::string& text, const std::string& file);

private:
    struct Impl;
    explicit Database(std::unique_ptr<Impl>);
    std::unique_ptr<Impl> impl_;
};

}  // namespace strata::hwdb
