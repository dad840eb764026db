// The error types Strata raises at its edges. InputError is the user's fault (bad file, bad
// field) and maps to exit code 2; RuntimeError is an environment or internal failure (exit 1).
// Library code never calls exit(): only main() maps errors to exit codes.
#pragma once
#include <stdexcept>
#include <string>

namespace strata {

/// Bad user input: names the file, the JSON path (or field) and the rule it broke.
/// what() reads "plan.json: plan.tp = 3 does not divide model.heads = 32".
class InputError : public std::runtime_error {
public:
    InputError(std::string file, std::string path, std::string rule);
    const std::string& file() const { return file_; }
    const std::string& path() const { return path_; }
    const std::string& rule() const { return rule_; }

private:
    std::string file_, path_, rule_;
};

/// Environment or internal failure (I/O, database, CUDA, broken invariant).
class RuntimeError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const std::string& msg);

}  // namespace strata

/// Internal invariant: user input must never trigger it.
#define STRATA_ASSERT(cond, msg)                                          \
    do {                                                                  \
        if (!(cond)) ::strata::assert_fail(#cond, __FILE__, __LINE__, (msg)); \
    } while (0)
