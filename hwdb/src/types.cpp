#include "strata/hwdb/types.hpp"

namespace strata::hwdb {

const char* to_string(Dtype d) {
    static const char* names[] = {"fp32", "tf32", "fp16", "bf16", "fp8"};
    return names[static_cast<int>(d)];
}

std::optional<Dtype> dtype_from_string(const std::string& s) {
    for (int i = 0; i < kDtypeCount; ++i)
        if (s == to_string(static_cast<Dtype>(i))) return static_cast<Dtype>(i);
    if (s == "fp8_e4m3" || s == "fp8_e5m2") return Dtype::fp8;
    return std::nullopt;
}

const char* to_string(Provenance p) {
    switch (p) {
        case Provenance::measured: return "measured";
        case Provenance::fitted: return "fitted";
        case Provenance::datasheet: return "datasheet";
    }
    return "?";
}

const char* to_string(LinkKind k) {
    switch (k) {
        case LinkKind::scale_up: return "scale-up";
        case LinkKind::switch_fabric: return "switch";
        case LinkKind::host: return "host";
        case LinkKind::scale_out: return "scale-out";
    }
    return "?";
}

}  // namespace strata::hwdb
