// libFuzzer entry for the calibration file reader (bench/fidelity/calibration.json, --calibration).
// Bad input must end in strata::InputError; good input must survive the canonical round trip
// (to_json_text, read again, the same text), and for_arch must answer for any family.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "strata/common/error.hpp"
#include "strata/sim/fidelity.hpp"

using namespace strata::sim;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const CalibrationRecord r = calibration_from_json_text(text, "fuzz/calibration.json");
        const std::string once = to_json_text(r);
        const std::string twice = to_json_text(calibration_from_json_text(once, "fuzz/canonical.json"));
        if (once != twice) std::abort();  // the writer and the reader disagree
        for (const char* arch : {"Hopper", "Ampere", "*", ""})
            if (!(r.for_arch(arch).gemm > 0)) std::abort();
    } catch (const strata::InputError&) {
        // Expected: bad input, reported with file, path and rule.
    }
    return 0;
}
