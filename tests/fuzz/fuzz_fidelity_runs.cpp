// libFuzzer entry for the fidelity data set reader (bench/fidelity/runs.json, `strata fidelity
// --runs`). Bad structure must end in strata::InputError; an entry whose specs fail is kept with
// its rule in `skipped`. What the loader returns must hold together: ids sorted and unique, a
// split of train or test, a scored throughput entry with a positive published figure, a
// publisher-regression flag only with its https address and on a throughput entry, and the
// published figure turned back into a finite, non-negative step time.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "strata/common/error.hpp"
#include "strata/sim/fidelity.hpp"

using namespace strata::sim;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const std::vector<FidelityEntry> all = load_fidelity_runs(text, "fuzz/runs.json");
        for (std::size_t i = 0; i < all.size(); ++i) {
            const FidelityEntry& e = all[i];
            if (i > 0 && !(all[i - 1].id < e.id)) std::abort();  // sorted, no duplicate
            if (e.split != "train" && e.split != "test") std::abort();
            if (e.outcome != "ran" && e.outcome != "oom") std::abort();
            if (!e.publisher_regression.empty() &&
                (e.memory_only || e.publisher_regression.rfind("http", 0) != 0))
                std::abort();
            if (!e.skipped.empty()) continue;
            if (!e.memory_only && !(e.published > 0)) std::abort();
            if (e.gpus() <= 0) std::abort();
            const double t = published_step_time_s(e);
            if (!std::isfinite(t) || t < 0) std::abort();
        }
        if (select_split(all, "train").size() + select_split(all, "test").size() != all.size()) std::abort();
    } catch (const strata::InputError&) {
        // Expected: bad input, reported with file, path and rule.
    }
    return 0;
}
