#include "strata/common/files.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "strata/common/error.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

std::string errno_text(int err) { return std::strerror(err); }

// The path a write lands on: symbolic links followed to their (possibly not yet existing) target.
fs::path resolve_links(const std::string& path) {
    fs::path p = path;
    for (int hops = 0; hops < 40; ++hops) {
        struct stat st {};
        if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
        std::error_code ec;
        const fs::path link = fs::read_symlink(p, ec);
        if (ec) throw RuntimeError("cannot write " + path + ": cannot read the symbolic link " + p.string() + ": " + ec.message());
        p = link.is_absolute() ? link : p.parent_path() / link;
    }
    throw RuntimeError("cannot write " + path + ": too many levels of symbolic links");
}

void write_all(int fd, const std::string& text, const std::string& what) {
    const char* p = text.data();
    std::size_t left = text.size();
    while (left > 0) {
        const ssize_t n = ::write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw RuntimeError("cannot write " + what + ": " + errno_text(errno));
        }
        p += n;
        left -= static_cast<std::size_t>(n);
    }
}

// Holds SIGINT, SIGTERM and SIGHUP back in this thread while alive; a signal that arrives meanwhile
// is delivered when the previous mask is restored.
class SignalHold {
public:
    SignalHold() {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGINT);
        sigaddset(&s, SIGTERM);
        sigaddset(&s, SIGHUP);
        held_ = ::pthread_sigmask(SIG_BLOCK, &s, &old_) == 0;
    }
    ~SignalHold() {
        if (held_) ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }
    SignalHold(const SignalHold&) = delete;
    SignalHold& operator=(const SignalHold&) = delete;

private:
    sigset_t old_{};
    bool held_ = false;
};

// A special file (device, FIFO, socket, terminal): written in place, as a shell redirection would.
void write_in_place(const fs::path& target, const std::string& path, const std::string& text) {
    const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) throw RuntimeError("cannot write " + path + ": " + errno_text(errno));
    try {
        write_all(fd, text, path);
    } catch (...) {
        ::close(fd);
        throw;
    }
    if (::close(fd) != 0 && errno != EINTR) throw RuntimeError("cannot write " + path + ": " + errno_text(errno));
}

}  // namespace

int standard_fd(const std::string& path) {
    if (path == "/dev/stdout") return 1;
    if (path == "/dev/stderr") return 2;
    for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
        const std::string p = prefix;
        if (path.size() <= p.size() || path.compare(0, p.size(), p) != 0) continue;
        const std::string n = path.substr(p.size());
        if (n.size() > 6 || !std::all_of(n.begin(), n.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) return -1;
        return std::stoi(n);
    }
    return -1;
}

void write_file_atomic(const std::string& path, const std::string& text) {
    if (path.empty()) throw RuntimeError("cannot write a file with an empty name");
    // /dev/stdout and its kin: the descriptor this process already holds, as a shell would (a new
    // open of /proc/self/fd/1 would start at offset 0 and overwrite what was printed before).
    if (const int fd = standard_fd(path); fd >= 0) {
        std::fflush(nullptr);
        return write_all(fd, text, path);
    }
    fs::path target;
    struct stat st {};
    bool exists = false;
    if (::stat(path.c_str(), &st) == 0) {
        exists = true;
        if (S_ISDIR(st.st_mode)) throw RuntimeError("cannot write " + path + ": it is a directory");
        // A device, FIFO or socket: written in place (renaming over it would replace it).
        if (!S_ISREG(st.st_mode)) return write_in_place(path, path, text);
        // A regular file, perhaps behind symbolic links: the links stay, the file is replaced.
        char* real = ::realpath(path.c_str(), nullptr);
        if (!real) throw RuntimeError("cannot write " + path + ": " + errno_text(errno));
        target = real;
        std::free(real);
    } else if (errno == ENOENT) {
        target = resolve_links(path);  // a new file, or the missing target of a dangling link
    } else {
        throw RuntimeError("cannot write " + path + ": " + errno_text(errno));
    }
    // As a shell redirection would, refuse to replace a file the user may not write.
    if (exists && ::access(target.c_str(), W_OK) != 0) throw RuntimeError("cannot write " + path + ": " + errno_text(errno));

    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    const std::string base = target.filename().string();
    SignalHold hold;
    // An unused name beside the target (same file system, so the rename is atomic). O_EXCL never
    // opens what exists, so a user's own PATH.tmp or another writer's temporary is left alone.
    static std::atomic<unsigned> counter{0};
    std::string tmp;
    int fd = -1;
    for (int attempt = 0; attempt < 1000 && fd < 0; ++attempt) {
        tmp = (dir / ("." + base + ".strata-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".tmp")).string();
        fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) {
            const int err = errno;
            if (err == ENOENT) throw RuntimeError("cannot write " + path + ": folder " + dir.string() + " does not exist");
            throw RuntimeError("cannot write " + path + ": cannot create a file in " + dir.string() + ": " + errno_text(err));
        }
    }
    if (fd < 0) throw RuntimeError("cannot write " + path + ": no unused temporary name in " + dir.string());
    try {
        // The replacement keeps the permissions of the file it replaces (the umask applies to new ones).
        if (exists && ::fchmod(fd, st.st_mode & 07777) != 0) throw RuntimeError("cannot write " + path + ": " + errno_text(errno));
        write_all(fd, text, path);
        if (::fsync(fd) != 0 && errno != EINVAL) throw RuntimeError("cannot write " + path + ": " + errno_text(errno));
        const int rc = ::close(fd);
        fd = -1;
        if (rc != 0 && errno != EINTR) throw RuntimeError("cannot write " + path + ": " + errno_text(errno));
        if (::rename(tmp.c_str(), target.c_str()) != 0)
            throw RuntimeError("cannot write " + path + ": cannot rename the temporary file into place: " + errno_text(errno));
    } catch (...) {
        if (fd >= 0) ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
}

std::string unwritable_reason(const std::string& path) {
    if (path.empty()) return "is an empty file name";
    if (const int fd = standard_fd(path); fd >= 0) {
        const int flags = ::fcntl(fd, F_GETFL);
        if (flags < 0) return "names descriptor " + std::to_string(fd) + ", which is not open";
        if ((flags & O_ACCMODE) == O_RDONLY) return "names descriptor " + std::to_string(fd) + ", which is not open for writing";
        return "";
    }
    fs::path target;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) return "is a directory";
        if (::access(path.c_str(), W_OK) != 0) return "is not writable (" + errno_text(errno) + ")";
        if (!S_ISREG(st.st_mode)) return "";  // a device or pipe: written in place
        char* real = ::realpath(path.c_str(), nullptr);
        if (!real) return "cannot be resolved (" + errno_text(errno) + ")";
        target = real;
        std::free(real);
    } else if (errno == ENOENT) {
        try {
            target = resolve_links(path);
        } catch (const RuntimeError& e) {
            return "cannot be resolved (" + std::string(e.what()) + ")";
        }
    } else if (errno == ENOTDIR) {
        return "cannot be created: a part of its folder is a file, not a folder";
    } else {
        return "cannot be reached (" + errno_text(errno) + ")";
    }
    const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
    struct stat ds {};
    if (::stat(dir.c_str(), &ds) != 0) return "cannot be created: folder " + dir.string() + " does not exist";
    if (!S_ISDIR(ds.st_mode)) return "cannot be created: " + dir.string() + " is not a folder";
    if (::access(dir.c_str(), W_OK | X_OK) != 0) return "cannot be created: folder " + dir.string() + " is not writable (" + errno_text(errno) + ")";
    return "";
}

}  // namespace strata
