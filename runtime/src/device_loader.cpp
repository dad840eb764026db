// Opens the cuda backend's module (device.hpp says why it is a module), found as every Strata
// module is: $STRATA_RUNTIME_CUDA, beside the running executable, this build's folder.
#include "device.hpp"
#include "strata/common/error.hpp"
#include "strata/common/module.hpp"

namespace strata::runtime {

#ifdef STRATA_HAVE_CUDA
std::unique_ptr<Device> open_cuda_device(int gpu) {
    static const CreateDevice create = reinterpret_cast<CreateDevice>(
        load_module_symbol(kCudaModuleFile, "STRATA_RUNTIME_CUDA", STRATA_RUNTIME_CUDA_BUILD_DIR, kCudaModuleSymbol, "the runtime's cuda backend"));
    std::string why;
    Device* d = create(kDeviceApiVersion, gpu, &why);
    if (d == nullptr) throw RuntimeError("backend cuda: " + why);
    return std::unique_ptr<Device>(d);
}
#else
std::unique_ptr<Device> open_cuda_device(int) {
    throw RuntimeError("backend cuda: this strata was built without CUDA (nvcc and NCCL were not found at configure time)");
}
#endif

}  // namespace strata::runtime
