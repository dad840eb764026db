// write_file_atomic never destroys what a path names (issue #32, defect 2): a device or FIFO is
// written in place and stays what it was, a symbolic link is followed and stays a link, a user's
// own PATH.tmp is left alone, the mode of a replaced file is kept, and a failure leaves nothing.
// unwritable_reason answers before any work is done.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "strata/common/error.hpp"
#include "strata/common/files.hpp"

using namespace strata;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

class TempDir {
public:
    TempDir() {
        static std::atomic<int> n{0};
        path_ = fs::temp_directory_path() / ("strata-files-test-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    // Everything in the folder, to catch leftovers.
    std::set<std::string> names() const {
        std::set<std::string> out;
        for (const auto& e : fs::directory_iterator(path_)) out.insert(e.path().filename().string());
        return out;
    }

private:
    fs::path path_;
};

std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST_CASE("a regular file is replaced whole, with no temporary left and its mode kept", "[common][files]") {
    TempDir t;
    const std::string p = t.file("out.json");
    write_file_atomic(p, "first\n");
    CHECK(slurp(p) == "first\n");
    ::chmod(p.c_str(), 0640);
    write_file_atomic(p, "second\n");
    CHECK(slurp(p) == "second\n");
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0640);
    CHECK(t.names() == std::set<std::string>{"out.json"});
}

TEST_CASE("a user's own PATH.tmp is not touched", "[common][files]") {
    TempDir t;
    const std::string p = t.file("r.json");
    {
        std::ofstream(p + ".tmp") << "mine";
    }
    write_file_atomic(p, "result");
    CHECK(slurp(p) == "result");
    CHECK(slurp(p + ".tmp") == "mine");
    CHECK(t.names() == std::set<std::string>{"r.json", "r.json.tmp"});
}

TEST_CASE("a symbolic link is followed: the target is replaced, the link stays a link", "[common][files]") {
    TempDir t;
    const std::string target = t.file("real.json"), link = t.file("link.json");
    {
        std::ofstream(target) << "old";
    }
    fs::create_symlink("real.json", link);  // relative, as users make them
    write_file_atomic(link, "new");
    CHECK(fs::is_symlink(link));
    CHECK(slurp(target) == "new");
    // A dangling link creates its target.
    const std::string dangling = t.file("dangling.json");
    fs::create_symlink("later.json", dangling);
    write_file_atomic(dangling, "made");
    CHECK(fs::is_symlink(dangling));
    CHECK(slurp(t.file("later.json")) == "made");
    CHECK(t.names() == std::set<std::string>{"real.json", "link.json", "dangling.json", "later.json"});
}

TEST_CASE("a null device stays a device", "[common][files]") {
    // As root, a writer with the old bug replaces the device by a regular file: test on a null
    // device of our own then, so that a regression cannot take the system's /dev/null with it. A
    // normal user cannot replace /dev/null, so there it is used directly.
    TempDir t;
    std::string dev = "/dev/null";
    if (::geteuid() == 0) {
        dev = t.file("null");
        REQUIRE(::mknod(dev.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0);
    }
    write_file_atomic(dev, "discarded");
    struct stat st {};
    REQUIRE(::stat(dev.c_str(), &st) == 0);
    CHECK(S_ISCHR(st.st_mode));
    CHECK(unwritable_reason(dev).empty());
    if (dev != "/dev/null") CHECK(t.names() == std::set<std::string>{"null"});
}

TEST_CASE("a FIFO is written in place and stays a FIFO", "[common][files]") {
    TempDir t;
    const std::string fifo = t.file("pipe");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    std::string got;
    std::thread reader([&] { got = slurp(fifo); });
    write_file_atomic(fifo, "through the pipe");
    reader.join();
    CHECK(got == "through the pipe");
    struct stat st {};
    REQUIRE(::lstat(fifo.c_str(), &st) == 0);
    CHECK(S_ISFIFO(st.st_mode));
    CHECK(t.names() == std::set<std::string>{"pipe"});
}

TEST_CASE("/dev/fd/N writes to the descriptor the process holds", "[common][files]") {
    TempDir t;
    const std::string p = t.file("held.txt");
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, "before|", 7) == 7);
    CHECK(standard_fd("/dev/fd/" + std::to_string(fd)) == fd);
    CHECK(standard_fd("/proc/self/fd/" + std::to_string(fd)) == fd);
    CHECK(standard_fd("/dev/stdout") == 1);
    CHECK(standard_fd("/dev/stderr") == 2);
    CHECK(standard_fd("/dev/null") == -1);
    CHECK(standard_fd("/dev/fd/x") == -1);
    write_file_atomic("/dev/fd/" + std::to_string(fd), "after");
    ::close(fd);
    CHECK(slurp(p) == "before|after");  // appended at the descriptor's offset, not rewritten
}

TEST_CASE("a missing folder or a directory is an error that leaves nothing behind", "[common][files]") {
    TempDir t;
    CHECK_THROWS_AS(write_file_atomic(t.file("no/such/dir/x.json"), "x"), RuntimeError);
    CHECK_THROWS_WITH(write_file_atomic(t.file("no/x.json"), "x"), Contains("does not exist"));
    fs::create_directories(t.file("adir"));
    CHECK_THROWS_WITH(write_file_atomic(t.file("adir"), "x"), Contains("directory"));
    CHECK(t.names() == std::set<std::string>{"adir"});
    CHECK_THROWS_AS(write_file_atomic("", "x"), RuntimeError);
}

TEST_CASE("unwritable_reason says why before any work, and creates nothing", "[common][files]") {
    TempDir t;
    CHECK(unwritable_reason(t.file("fresh.json")).empty());
    CHECK_THAT(unwritable_reason(t.file("no/fresh.json")), Contains("does not exist"));
    fs::create_directories(t.file("d"));
    CHECK_THAT(unwritable_reason(t.file("d")), Contains("directory"));
    {
        std::ofstream(t.file("f")) << "x";
    }
    CHECK_THAT(unwritable_reason(t.file("f") + "/below.json"), Contains("not a folder"));
    CHECK_THAT(unwritable_reason(t.file("f") + "/sub/below.json"), Contains("not a folder"));
    CHECK_THAT(unwritable_reason(""), Contains("empty"));
    CHECK(unwritable_reason("/dev/stdout").empty());
    CHECK(t.names() == std::set<std::string>{"d", "f"});
}

TEST_CASE("a signal arriving during the write waits for the rename", "[common][files]") {
    // A child process writes a large file while a second thread sends it SIGINT. The writing thread
    // is the only one that may take the signal, and write_file_atomic holds it back from the
    // temporary's creation to the rename: the default action (termination) then happens before the
    // write starts or after the rename. Either way there is no partial file and no temporary.
    TempDir t;
    const std::string p = t.file("big.json");
    const std::string text(32 << 20, 'x');
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::signal(SIGINT, SIG_DFL);  // the child dies of it, as a command would (not Catch's handler)
        sigset_t intr;
        sigemptyset(&intr);
        sigaddset(&intr, SIGINT);
        ::pthread_sigmask(SIG_BLOCK, &intr, nullptr);  // inherited by the killer thread
        std::thread killer([] {
            ::usleep(1000);
            ::kill(::getpid(), SIGINT);
        });
        ::pthread_sigmask(SIG_UNBLOCK, &intr, nullptr);
        write_file_atomic(p, text);
        killer.join();
        ::_exit(0);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    const std::set<std::string> left = t.names();
    if (left.empty()) {
        CHECK(WIFSIGNALED(status));  // ended before the write began
    } else {
        CHECK(left == std::set<std::string>{"big.json"});
        CHECK(fs::file_size(p) == text.size());
    }
}
