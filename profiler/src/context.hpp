// Private: the state one profile run threads through its benchmarks (options, collected
// measurements, warnings, the cancel check). Header-only so the CUDA object library, which is
// linked after strata_profiler, needs no symbol back from it.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "strata/profiler/profiler.hpp"
#include "strata/profiler/stats.hpp"

namespace strata::profiler {

class Context {
public:
    explicit Context(const Options& o) : opt(o) {}

    const Options& opt;
    /// Measurement::device of host-side kinds too (SSD, Adam): the run's main device, so that the
    /// hwdb view of that GPU finds its node's host figures ("cpu" for the cpu backend).
    std::string device = "cpu";
    std::vector<hwdb::Measurement> ms;
    std::vector<std::string> warnings;

    bool want(const std::string& kind) const { return opt.only.empty() || opt.only.count(kind) > 0; }
    bool cancelled() const { return opt.cancel != nullptr && opt.cancel->load(std::memory_order_relaxed); }
    /// Throw Cancelled when the flag is set: called between benchmark points.
    void check() const {
        if (cancelled()) throw Cancelled();
    }
    void add(hwdb::Measurement m) {
        ms.push_back(std::move(m));
        if (opt.on_measurement) opt.on_measurement(ms.back());
        check();
    }
    void progress(const std::string& stage, int done, int total) const {
        if (opt.progress) opt.progress(stage, done, total);
    }
    void warn(std::string w) { warnings.push_back(std::move(w)); }
};

/// "bf16 m=4096 n=4096 k=4096"-style keys: the label first, then params in the given order.
inline std::string make_key(const std::string& head, const std::vector<std::pair<std::string, double>>& kv) {
    std::string k = head;
    for (const auto& [name, v] : kv) {
        k += (k.empty() ? "" : " ") + name + "=";
        const double r = static_cast<double>(static_cast<long long>(v));
        k += (r == v) ? std::to_string(static_cast<long long>(v)) : std::to_string(v);
    }
    return k;
}

/// A measured point of the run's device: the median of `s` with its spread.
inline hwdb::Measurement point(const Context& ctx, const std::string& kind, const std::string& key, const std::string& unit,
                               const Summary& s) {
    hwdb::Measurement m;
    m.kind = kind;
    m.device = ctx.device;
    m.key = key;
    m.unit = unit;
    m.value = s.median;
    m.p10 = s.p10;
    m.p90 = s.p90;
    m.samples = s.samples;
    return m;
}

}  // namespace strata::profiler
