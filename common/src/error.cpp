#include "strata/common/error.hpp"

namespace strata {

static std::string format_input_error(const std::string& file, const std::string& path, const std::string& rule) {
    std::string s;
    if (!file.empty()) s += file + ": ";
    if (!path.empty()) s += path + " ";
    s += rule;
    return s;
}

InputError::InputError(std::string file, std::string path, std::string rule)
    : std::runtime_error(format_input_error(file, path, rule)),
      file_(std::move(file)), path_(std::move(path)), rule_(std::move(rule)) {}

void assert_fail(const char* cond, const char* file, int line, const std::string& msg) {
    throw RuntimeError(std::string("internal error: ") + msg + " (" + cond + " failed at " + file + ":" +
                       std::to_string(line) + ")");
}

}  // namespace strata
