// Loadable modules (the CUDA backends): found by one rule, so a command that never needs CUDA
// never maps its libraries, and a stale or broken module is an error naming it.
#pragma once
#include <string>

namespace strata {

/// The entry point `symbol` of module `file`, opened with dlopen from the first place it exists:
/// $`env_var` (a path, when set), beside the running executable, then `build_dir` (where the
/// test executables, one folder down, find it). A file that exists but does not load, or lacks
/// the symbol, is the error, not a reason to try the next place. Throws RuntimeError "<what>
/// could not be loaded: ..." naming the file or every place looked in. `path` gets the file used.
void* load_module_symbol(const std::string& file, const char* env_var, const std::string& build_dir, const char* symbol,
                         const std::string& what, std::string* path = nullptr);

}  // namespace strata
