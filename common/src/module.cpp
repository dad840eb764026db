#include "strata/common/module.hpp"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "strata/common/error.hpp"

namespace strata {

void* load_module_symbol(const std::string& file, const char* env_var, const std::string& build_dir, const char* symbol,
                         const std::string& what, std::string* path) {
    std::vector<std::string> paths, tried;
    if (const char* env = std::getenv(env_var); env != nullptr && *env != '\0') paths.emplace_back(env);
    char exe[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        const std::string dir(exe, static_cast<std::size_t>(n));
        paths.push_back(dir.substr(0, dir.find_last_of('/')) + "/" + file);
    }
    paths.push_back(build_dir + "/" + file);
    for (const std::string& p : paths) {
        if (::access(p.c_str(), F_OK) != 0) {
            tried.push_back(p + ": no such file");
            continue;
        }
        void* h = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (h == nullptr) {
            const char* e = ::dlerror();
            throw RuntimeError(what + " could not be loaded: " + (e != nullptr ? std::string(e) : p));
        }
        void* sym = ::dlsym(h, symbol);
        if (sym == nullptr) {
            ::dlclose(h);
            throw RuntimeError(what + " could not be loaded: " + p + " has no entry point " + symbol + " (a module of another build? rebuild)");
        }
        if (path) *path = p;
        return sym;
    }
    std::string why;
    for (const std::string& t : tried) why += "\n  " + t;
    throw RuntimeError(what + " could not be loaded:" + why);
}

}  // namespace strata
