// The memory view's data, from one simulated step: use over time of every pool per tier (a GPU
// pool per rank program, a DRAM and an SSD pool per node), the capacity, the first OOM, and the
// stacked breakdown of every stage's GPU peak with the worst one marked. Curves are step
// functions with up to millions of points; envelope() reduces a range to one min/max per pixel.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/gui/models/timeline.hpp"
#include "strata/lowering/spec.hpp"

namespace strata::sim {
struct SimOutput;
}

namespace strata::gui {

struct MemoryCurve {
    std::string label;  ///< "stage 3 (ranks 24..31)" for a GPU, "node 0" for DRAM and SSD
    std::vector<std::int64_t> t_ns;  ///< sample times, ascending
    std::vector<double> bytes;       ///< use from that time on
    double peak_bytes = 0;
    bool worst = false;              ///< the fullest pool of its tier
};

struct OomMark {
    std::int64_t time_ns = 0;
    double in_use_bytes = 0, request_bytes = 0, capacity_bytes = 0;
    std::string where;  ///< "stage 0 (ranks 0..7), instruction 'fc1' (activations)"
};

struct TierMemory {
    sim::Tier tier = sim::Tier::gpu;
    double capacity_bytes = 0;  ///< one GPU's HBM, one node's DRAM or SSDs
    std::vector<MemoryCurve> curves;
    std::optional<OomMark> oom;  ///< the first allocation past capacity on this tier
};

/// The stacked bar of one stage at its GPU peak. allocator_slack is what the caching allocator
/// reserved beyond the tensors it held then (segments nvidia-smi sees, minus allocated blocks).
struct StageBreakdown {
    static constexpr int kParts = 6;
    static const char* part_name(int i);  ///< weights, grads, optimizer, activations, buffers, allocator slack
    std::string label;
    std::array<double, kParts> bytes{};
    double analytical_bytes = 0;  ///< the closed-form model's GPU bytes for the stage (a tick beside the bar)
    bool worst = false;
    double total() const;
};

struct MemoryView {
    std::int64_t step_ns = 0;
    std::vector<TierMemory> tiers;          ///< tiers that hold anything, gpu first
    std::vector<StageBreakdown> stages;     ///< one per rank program, GPU tier
    int worst_stage = 0;                    ///< index into stages
    double gpu_capacity_bytes = 0;
};

/// Needs SimOptions::trace (memory samples) for the curves; the breakdown needs only the result.
MemoryView memory_view(const sim::SimOutput& out);

/// Curves from Chrome trace counter tracks named "memory <tier>..." (validation overlay).
std::vector<TierMemory> memory_from_counters(const std::vector<CounterTrack>& tracks, const Timeline& names);

/// One (min, max) of the curve per pixel column of the window (the painter draws a vertical
/// stroke per column): the value held at any time inside the column counts.
struct Envelope {
    std::vector<double> lo, hi;  ///< per column; NaN where the curve has no value yet
};
Envelope envelope(const MemoryCurve& c, const TimeWindow& w, int columns);

}  // namespace strata::gui
