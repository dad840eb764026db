// Reading a Chrome Trace Event file into a Timeline, and describing a span of either source.
// Only what the timeline needs is read: "X" (complete) events, the "M" names of processes and
// threads, and "C" counters; other phases are skipped, as Perfetto skips what it cannot show.
#include <cmath>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "strata/common/error.hpp"
#include "strata/common/json_reader.hpp"
#include "strata/hwdb/types.hpp"
#include "strata/sim/engine.hpp"
#include "timeline_source.hpp"

namespace strata::gui {

using TraceJson = nlohmann::json;

std::string rank_label(const sim::RankProgram& rp) {
    std::string name = "stage " + std::to_string(rp.pp_stage);
    if (rp.multiplicity > 1)
        return name + " (ranks " + std::to_string(rp.global_rank) + ".." + std::to_string(rp.global_rank + rp.multiplicity - 1) + ")";
    return name + " (rank " + std::to_string(rp.global_rank) + ")";
}

SpanInfo Timeline::Source::describe(const TimelineRow& row, const Span& s) const {
    SpanInfo i;
    if (sim) {
        const sim::Program& p = sim->program;
        const sim::Instr& in = p.ranks[static_cast<std::size_t>(row.rank)].instrs[static_cast<std::size_t>(s.item)];
        i.label = sim::instr_label(in);
        i.name = in.name > 0 && static_cast<std::size_t>(in.name) < p.names.size() ? p.names[static_cast<std::size_t>(in.name)] : i.label;
        i.phase = sim::to_string(in.phase);
        i.kind = sim::to_string(in.kind);
        i.layer = in.layer;
        i.microbatch = in.microbatch;
        i.flops = in.flops;
        i.bytes = in.bytes;
        return i;
    }
    const Event& e = events[static_cast<std::size_t>(s.item)];
    auto str = [&](std::int32_t k) { return strings[static_cast<std::size_t>(k)]; };
    i.name = str(e.name);
    i.label = str(e.label);
    i.phase = str(e.phase);
    i.kind = str(e.kind);
    i.provenance = str(e.provenance);
    i.layer = e.layer;
    i.microbatch = e.microbatch;
    i.flops = e.flops;
    i.bytes = e.bytes;
    return i;
}

namespace {

class TraceReader {
public:
    TraceReader(std::string file) : file_(std::move(file)) {}

    [[noreturn]] void fail(std::size_t k, const std::string& key, const std::string& rule) const {
        throw InputError(file_, "traceEvents[" + std::to_string(k) + "]" + (key.empty() ? "" : "." + key), rule);
    }
    const TraceJson& need(const TraceJson& e, std::size_t k, const char* key) const {
        if (!e.contains(key)) fail(k, key, "is required");
        return e.at(key);
    }
    std::int64_t integer(const TraceJson& e, std::size_t k, const char* key) const {
        const TraceJson& v = need(e, k, key);
        if (!v.is_number_integer()) fail(k, key, "must be an integer (got " + describe_json(v) + ")");
        return v.get<std::int64_t>();
    }
    /// Trace times are microseconds; the timeline counts nanoseconds.
    std::int64_t micros_as_ns(const TraceJson& e, std::size_t k, const char* key) const {
        const TraceJson& v = need(e, k, key);
        if (!v.is_number() || !std::isfinite(v.get<double>()) || std::fabs(v.get<double>()) > 9e12)
            fail(k, key, "must be a time in microseconds (got " + describe_json(v) + ")");
        return std::llround(v.get<double>() * 1000.0);
    }
    std::string text(const TraceJson& e, std::size_t k, const char* key, const std::string& dflt) const {
        if (!e.contains(key)) return dflt;
        const TraceJson& v = e.at(key);
        if (!v.is_string()) fail(k, key, "must be a string (got " + describe_json(v) + ")");
        return v.get<std::string>();
    }
    std::int32_t intern(Timeline::Source& src, const std::string& s) {
        auto [it, added] = ids_.try_emplace(s, static_cast<std::int32_t>(src.strings.size()));
        if (added) src.strings.push_back(s);
        return it->second;
    }

private:
    std::string file_;
    std::unordered_map<std::string, std::int32_t> ids_{{"", 0}};
};

std::int8_t provenance_index(const std::string& s) {
    for (int p = 0; p < 3; ++p)
        if (s == hwdb::to_string(static_cast<hwdb::Provenance>(p))) return static_cast<std::int8_t>(p);
    return -1;
}

}  // namespace

Timeline Timeline::from_chrome_trace(const std::string& text, const std::string& file, std::vector<CounterTrack>* counters) {
    const TraceJson doc = parse_json_text(text, file);
    const TraceJson* events = &doc;
    if (doc.is_object()) {
        if (!doc.contains("traceEvents")) throw InputError(file, "traceEvents", "is required (a Chrome Trace Event file)");
        events = &doc.at("traceEvents");
    }
    if (!events->is_array()) throw InputError(file, "traceEvents", "must be an array of events (got " + describe_json(*events) + ")");

    TraceReader rd(file);
    auto src = std::make_shared<Source>();
    std::map<int, std::string> process_names;
    std::map<std::pair<int, int>, std::string> thread_names;
    std::map<std::pair<int, int>, std::size_t> row_of;
    std::map<std::pair<int, std::string>, std::size_t> track_of;
    Timeline t;
    for (std::size_t k = 0; k < events->size(); ++k) {
        const TraceJson& e = (*events)[k];
        if (!e.is_object()) rd.fail(k, "", "must be an object (got " + describe_json(e) + ")");
        const std::string ph = rd.text(e, k, "ph", "");
        if (ph == "M") {
            const std::string what = rd.text(e, k, "name", "");
            const TraceJson* args = e.contains("args") && e.at("args").is_object() ? &e.at("args") : nullptr;
            if (!args || !args->contains("name") || !args->at("name").is_string()) continue;  // sort indices and the like
            const int pid = static_cast<int>(rd.integer(e, k, "pid"));
            if (what == "process_name") process_names[pid] = args->at("name").get<std::string>();
            if (what == "thread_name") thread_names[{pid, static_cast<int>(rd.integer(e, k, "tid"))}] = args->at("name").get<std::string>();
        } else if (ph == "X") {
            const int pid = static_cast<int>(rd.integer(e, k, "pid"));
            const int tid = static_cast<int>(rd.integer(e, k, "tid"));
            const std::int64_t ts = rd.micros_as_ns(e, k, "ts");
            const std::int64_t dur = rd.micros_as_ns(e, k, "dur");
            if (dur < 0) rd.fail(k, "dur", "must not be negative");
            Source::Event ev;
            const std::string cat = rd.text(e, k, "cat", "");
            const auto comma = cat.find(',');
            const std::string phase = comma == std::string::npos ? "" : cat.substr(0, comma);
            const std::string label = comma == std::string::npos ? cat : cat.substr(comma + 1);
            std::string kind, provenance;
            if (e.contains("args") && e.at("args").is_object()) {
                const TraceJson& a = e.at("args");
                auto num = [&](const char* key, double dflt) { return a.contains(key) && a.at(key).is_number() ? a.at(key).get<double>() : dflt; };
                kind = a.contains("kind") && a.at("kind").is_string() ? a.at("kind").get<std::string>() : "";
                provenance = a.contains("provenance") && a.at("provenance").is_string() ? a.at("provenance").get<std::string>() : "";
                ev.layer = static_cast<std::int32_t>(num("layer", -1));
                ev.microbatch = static_cast<std::int32_t>(num("microbatch", -1));
                ev.flops = num("flops", 0);
                ev.bytes = num("bytes", 0);
            }
            ev.name = rd.intern(*src, rd.text(e, k, "name", label));
            ev.label = rd.intern(*src, label);
            ev.phase = rd.intern(*src, phase);
            ev.kind = rd.intern(*src, kind);
            ev.provenance = rd.intern(*src, provenance);
            auto [it, added] = row_of.try_emplace({pid, tid}, t.rows_.size());
            if (added) {
                TimelineRow r;
                r.rank = pid;
                r.stream_index = tid;
                t.rows_.push_back(std::move(r));
            }
            const std::uint8_t flags = phase == "backward" ? kBackward : phase == "recompute" ? kRecompute : 0;
            t.rows_[it->second].spans.push_back(Span{ts, ts + dur, static_cast<std::int32_t>(src->events.size()), classify(kind, label),
                                                     flags, provenance_index(provenance)});
            src->events.push_back(ev);
        } else if (ph == "C" && counters) {
            const int pid = static_cast<int>(rd.integer(e, k, "pid"));
            const std::string name = rd.text(e, k, "name", "");
            const std::int64_t ts = rd.micros_as_ns(e, k, "ts");
            const TraceJson* args = e.contains("args") && e.at("args").is_object() ? &e.at("args") : nullptr;
            if (!args || args->empty() || !args->begin()->is_number()) rd.fail(k, "args", "must hold the counter's value as a number");
            auto [it, added] = track_of.try_emplace({pid, name}, counters->size());
            if (added) counters->push_back(CounterTrack{pid, name, {}});
            (*counters)[it->second].points.emplace_back(ts, args->begin()->get<double>());
        }
    }
    for (auto& r : t.rows_) {
        auto pn = process_names.find(r.rank);
        r.rank_label = pn != process_names.end() ? pn->second : "process " + std::to_string(r.rank);
        auto tn = thread_names.find({r.rank, r.stream_index});
        r.stream = tn != thread_names.end() ? tn->second : "thread " + std::to_string(r.stream_index);
    }
    std::stable_sort(t.rows_.begin(), t.rows_.end(), [](const TimelineRow& a, const TimelineRow& b) {
        return std::tie(a.rank, a.stream_index) < std::tie(b.rank, b.stream_index);
    });
    t.sources_.push_back(std::move(src));
    t.finish();
    return t;
}

}  // namespace strata::gui
