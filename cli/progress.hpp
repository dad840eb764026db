// Terminal progress bar and Ctrl-C handling shared by long-running commands (plan, capacity).
// The bar draws on stderr only when it is a terminal and --quiet was not given.
#pragma once
#include <atomic>
#include <string>

namespace strata::cli {

/// Set by SIGINT once install_interrupt_handler() has run (first Ctrl-C: stop cleanly; a second
/// one restores the default and kills).
std::atomic<bool>& interrupted();
void install_interrupt_handler();

class ProgressBar {
public:
    explicit ProgressBar(bool quiet);
    ~ProgressBar();
    void update(double fraction, const std::string& label);
    void finish();

private:
    bool enabled_;
    int last_permille_ = -1;
    std::string last_label_;
};

}  // namespace strata::cli
