#include "strata/common/system.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace strata {

namespace {

constexpr std::uint64_t kUnlimited = ~std::uint64_t{0};

// A cgroup limit file: a number of bytes, or "max" (v2) / a huge value (v1) for none.
std::uint64_t read_limit(const std::string& file) {
    std::ifstream in(file);
    std::string v;
    if (!(in >> v) || v == "max") return kUnlimited;
    try {
        const unsigned long long n = std::stoull(v);
        return n >= (std::uint64_t{1} << 62) || n == 0 ? kUnlimited : n;
    } catch (...) {
        return kUnlimited;
    }
}

// The control group's limit: v2 ("0::/path") or the v1 memory controller ("N:memory:/path"), at the
// group's own path and at the mount root (a container sees its own group there).
std::uint64_t cgroup_limit() {
    std::uint64_t best = kUnlimited;
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
        const auto a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (controllers.empty()) {
            best = std::min({best, read_limit("/sys/fs/cgroup" + path + "/memory.max"), read_limit("/sys/fs/cgroup/memory.max")});
        } else if (controllers.find("memory") != std::string::npos) {
            best = std::min({best, read_limit("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes"),
                             read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes")});
        }
    }
    return best;
}

std::uint64_t rlimit(int which) {
    struct rlimit r {};
    if (::getrlimit(which, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return kUnlimited;
    return static_cast<std::uint64_t>(r.rlim_cur);
}

}  // namespace

std::uint64_t memory_limit_bytes() {
    std::uint64_t best = kUnlimited;
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) best = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
    best = std::min({best, rlimit(RLIMIT_AS), rlimit(RLIMIT_DATA), cgroup_limit()});
    return best == kUnlimited ? (std::uint64_t{1} << 30) : best;
}

}  // namespace strata
