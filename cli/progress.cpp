#include "progress.hpp"

#include <unistd.h>

#include <csignal>
#include <cstdio>

namespace strata::cli {

std::atomic<bool>& interrupted() {
    static std::atomic<bool> flag{false};
    return flag;
}

extern "C" void strata_on_sigint(int) {
    if (interrupted().load()) {
        std::signal(SIGINT, SIG_DFL);
        std::raise(SIGINT);
        return;
    }
    interrupted().store(true);
}

void install_interrupt_handler() { std::signal(SIGINT, strata_on_sigint); }

ProgressBar::ProgressBar(bool quiet) : enabled_(!quiet && isatty(STDERR_FILENO)) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(double fraction, const std::string& label) {
    if (!enabled_) return;
    int permille = static_cast<int>(fraction * 1000);
    if (permille == last_permille_ && label == last_label_) return;
    last_permille_ = permille;
    last_label_ = label;
    const int width = 40;
    int filled = static_cast<int>(fraction * width);
    std::string bar(static_cast<std::size_t>(std::max(0, std::min(width, filled))), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r  %-11s [%s] %5.1f%%", label.c_str(), bar.c_str(), fraction * 100.0);
    std::fflush(stderr);
}

void ProgressBar::finish() {
    if (enabled_ && last_permille_ >= 0) {
        std::fprintf(stderr, "\r%*s\r", 70, "");
        std::fflush(stderr);
    }
    last_permille_ = -1;
}

}  // namespace strata::cli
