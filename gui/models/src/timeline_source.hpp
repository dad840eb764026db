// Private to the models library: what a timeline row's items index. A simulation keeps its
// Program (spans index instructions, described on demand: no per-span strings for millions of
// spans); a parsed trace keeps one compact record per event, its strings interned.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "strata/gui/models/timeline.hpp"
#include "strata/sim/simulate.hpp"

namespace strata::gui {

struct Timeline::Source {
    std::shared_ptr<const sim::SimOutput> sim;

    struct Event {
        std::int32_t name = 0, label = 0, phase = 0, kind = 0, provenance = 0;  // indices into strings
        std::int32_t layer = -1, microbatch = -1;
        double flops = 0, bytes = 0;
    };
    std::vector<Event> events;
    std::vector<std::string> strings{""};

    SpanInfo describe(const TimelineRow& row, const Span& s) const;
};

/// "stage 3 (ranks 24..31)": the process name trace.cpp gives a RankProgram.
std::string rank_label(const sim::RankProgram& rp);

}  // namespace strata::gui
