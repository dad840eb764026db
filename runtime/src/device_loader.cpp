// Opens the cuda backend's module (device.hpp says why it is a module): looked for in order at
// $STRATA_RUNTIME_CUDA (a path), beside the running executable, and in this build's own folder
// (the test executables live in a subfolder). The first file that exists is the one.
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "device.hpp"
#include "strata/common/error.hpp"

namespace strata::runtime {

#ifdef STRATA_HAVE_CUDA
namespace {
CreateDevice load_module() {
    static std::mutex mu;
    static CreateDevice create = nullptr;
    std::lock_guard<std::mutex> lk(mu);
    if (create) return create;
    std::vector<std::string> paths, tried;
    if (const char* env = std::getenv("STRATA_RUNTIME_CUDA"); env != nullptr && *env != '\0') paths.emplace_back(env);
    char exe[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        std::string dir(exe, static_cast<std::size_t>(n));
        paths.push_back(dir.substr(0, dir.find_last_of('/')) + "/" + kCudaModuleFile);
    }
    paths.push_back(std::string(STRATA_RUNTIME_CUDA_BUILD_DIR) + "/" + kCudaModuleFile);
    for (const std::string& path : paths) {
        if (::access(path.c_str(), F_OK) != 0) {
            tried.push_back(path + ": no such file");
            continue;
        }
        void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (h == nullptr) {
            const char* e = ::dlerror();
            throw RuntimeError("the runtime's cuda backend could not be loaded: " + (e != nullptr ? std::string(e) : path));
        }
        create = reinterpret_cast<CreateDevice>(::dlsym(h, kCudaModuleSymbol));
        if (create == nullptr) {
            ::dlclose(h);
            throw RuntimeError("the runtime's cuda backend could not be loaded: " + path + " has no entry point " + kCudaModuleSymbol + " (rebuild)");
        }
        return create;
    }
    std::string why;
    for (const std::string& t : tried) why += "\n  " + t;
    throw RuntimeError("the runtime's cuda backend could not be loaded:" + why);
}
}  // namespace

std::unique_ptr<Device> open_cuda_device() {
    std::string why;
    Device* d = load_module()(kDeviceApiVersion, &why);
    if (d == nullptr) throw RuntimeError("backend cuda: " + why);
    return std::unique_ptr<Device>(d);
}
#else
std::unique_ptr<Device> open_cuda_device() {
    throw RuntimeError("backend cuda: this strata was built without CUDA (nvcc and NCCL were not found at configure time)");
}
#endif

std::string cuda_unavailable() {
    try {
        open_cuda_device();
        return "";
    } catch (const std::exception& e) {
        return e.what();
    }
}

}  // namespace strata::runtime
