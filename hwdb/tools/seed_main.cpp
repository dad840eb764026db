// strata_hwdb_seed PATH: (re)create the seeded hardware database at PATH. The build runs it to
// produce build/hwdb/strata.db; unlike `strata hwdb init`, it replaces an existing file.
#include <filesystem>
#include <iostream>

#include "strata/common/error.hpp"
#include "strata/hwdb/hwdb.hpp"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: strata_hwdb_seed PATH\n";
        return 2;
    }
    const std::string path = argv[1];
    try {
        std::error_code ec;
        for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix, ec);
        std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
        strata::hwdb::Database db = strata::hwdb::Database::create_seeded(path);
        std::cout << "seeded " << path << ": " << db.gpus().size() << " GPUs, " << db.links().size() << " links, "
                  << db.nodes().size() << " nodes\n";
    } catch (const std::exception& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
