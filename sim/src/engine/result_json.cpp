// The SimResult as JSON text, written by hand so the bytes are fixed: keys in a fixed order, numbers
// with fixed decimals and no exponent. Does not parse JSON and does not compute job figures.
#include <cmath>
#include <cstdio>

#include "strata/sim/result.hpp"

namespace strata::sim {

namespace {
std::string tags_json(const TagBytes& t) {
    std::string o = "{";
    for (int k = 0; k < kTensorTagCount; ++k) {
        if (k) o += ", ";
        o += json_quote(to_string(static_cast<TensorTag>(k))) + ": " + json_num(t[static_cast<std::size_t>(k)], 0);
    }
    return o + "}";
}
std::string tiers_json(const std::array<double, kTierCount>& v) {
    std::string o = "{";
    for (int k = 0; k < kTierCount; ++k) {
        if (k) o += ", ";
        o += json_quote(to_string(static_cast<Tier>(k))) + ": " + json_num(v[static_cast<std::size_t>(k)], 0);
    }
    return o + "}";
}
std::string secs(std::int64_t ns) { return json_num(static_cast<double>(ns) * 1e-9, 9); }
}  // namespace

std::string to_json_text(const SimResult& r, const JobFigures& job) {
    std::string o;
    o.reserve(4096);
    o += "{\n";
    o += "  \"model\": " + json_quote(job.model) + ",\n";
    o += "  \"cluster\": " + json_quote(job.cluster) + ",\n";
    o += "  \"plan\": " + json_quote(job.plan) + ",\n";
    o += "  \"calibration\": {";
    for (int i = 0; i < Calibration::kFactors; ++i)
        o += std::string(i ? ", " : "") + "\"" + Calibration::name(i) + "\": " + json_num(job.calibration.at(i), 4);
    o += ", \"overlap\": " + json_num(job.calibration.overlap, 4) +
         ", \"host_launch_us\": " + json_num(job.calibration.host_launch_us, 4) + "},\n";
    o += "  \"step_time_s\": " + secs(r.step_time_ns) + ",\n";
    o += "  \"tokens_per_s\": " + json_num(job.tokens_per_s, 3) + ",\n";
    o += "  \"tflops_per_gpu\": " + json_num(job.tflops_per_gpu, 3) + ",\n";
    o += "  \"mfu\": " + json_num(job.mfu, 6) + ",\n";
    o += "  \"bubble_fraction\": " + json_num(r.bubble_fraction, 6) + ",\n";
    o += "  \"exposed_comm_s\": " + secs(r.exposed_comm_ns) + ",\n";
    o += "  \"exposed_copy_s\": " + secs(r.exposed_copy_ns) + ",\n";
    o += "  \"host_wait_s\": " + secs(r.host_wait_ns) + ",\n";
    o += "  \"peak_bytes\": {\"max\": " + tiers_json(r.peak_bytes_max) + ", \"per_rank\": [";
    for (std::size_t k = 0; k < r.ranks.size(); ++k) {
        const auto& rs = r.ranks[k];
        o += k ? ",\n    " : "\n    ";
        o += "{\"rank\": " + std::to_string(rs.id) + ", \"pp_stage\": " + std::to_string(rs.pp_stage) +
             ", \"node\": " + std::to_string(rs.node) + ", \"peak\": " + tiers_json(rs.peak_bytes) +
             ", \"gpu_peak_allocated\": " + json_num(rs.gpu_peak_allocated_bytes, 0) +
             ", \"gpu_cache_flushes\": " + std::to_string(rs.gpu_cache_flushes) +
             ", \"capacity\": " + tiers_json(rs.capacity_bytes) + ", \"breakdown\": {";
        for (int t = 0; t < kTierCount; ++t) {
            if (t) o += ", ";
            o += json_quote(to_string(static_cast<Tier>(t))) + ": " + tags_json(rs.peak_breakdown[static_cast<std::size_t>(t)]);
        }
        o += "}}";
    }
    o += r.ranks.empty() ? "]},\n" : "\n  ]},\n";
    o += "  \"oom\": " + std::string(r.oom ? "true" : "false") + ",\n";
    o += "  \"oom_count\": " + std::to_string(r.oom_count) + ",\n";
    o += "  \"ooms\": [";
    for (std::size_t k = 0; k < r.ooms.size(); ++k) {
        const auto& m = r.ooms[k];
        o += k ? ",\n    " : "\n    ";
        o += "{\"time_s\": " + secs(m.time_ns) + ", \"tier\": " + json_quote(to_string(m.tier)) +
             ", \"rank\": " + std::to_string(m.rank) + ", \"node\": " + std::to_string(m.node) +
             ", \"instr\": " + std::to_string(m.instr) + ", \"name\": " + json_quote(m.name) +
             ", \"request_bytes\": " + json_num(m.request_bytes, 0) + ", \"in_use_bytes\": " +
             json_num(m.in_use_bytes, 0) + ", \"capacity_bytes\": " + json_num(m.capacity_bytes, 0) +
             ", \"breakdown\": " + tags_json(m.breakdown) + "}";
    }
    o += r.ooms.empty() ? "],\n" : "\n  ],\n";
    o += "  \"ranks\": [";
    for (std::size_t k = 0; k < r.ranks.size(); ++k) {
        const auto& rs = r.ranks[k];
        o += k ? ",\n    " : "\n    ";
        o += "{\"rank\": " + std::to_string(rs.id) + ", \"multiplicity\": " + std::to_string(rs.multiplicity) +
             ", \"bubble_s\": " + secs(rs.bubble_ns) + ", \"exposed_comm_s\": " + secs(rs.exposed_comm_ns) +
             ", \"exposed_copy_s\": " + secs(rs.exposed_copy_ns) + ", \"busy_s\": {";
        bool first = true;
        for (int s = 0; s < kStreamCount; ++s) {
            if (rs.busy_ns[static_cast<std::size_t>(s)] == 0) continue;
            o += first ? "" : ", ";
            first = false;
            o += json_quote(to_string(static_cast<Stream>(s))) + ": " + secs(rs.busy_ns[static_cast<std::size_t>(s)]);
        }
        o += "}}";
    }
    o += r.ranks.empty() ? "],\n" : "\n  ],\n";
    o += "  \"utilisation\": [";
    for (std::size_t k = 0; k < r.utilisation.size(); ++k) {
        const auto& u = r.utilisation[k];
        o += k ? ",\n    " : "\n    ";
        o += "{\"resource\": " + json_quote(u.name) + ", \"class\": " + json_quote(to_string(u.cls)) +
             ", \"busy_s\": " + json_num(u.busy_s, 9) + ", \"utilisation\": " + json_num(u.utilisation, 6) + "}";
    }
    o += r.utilisation.empty() ? "],\n" : "\n  ],\n";
    o += "  \"provenance\": {\"measured\": " + std::to_string(r.provenance_counts[0]) +
         ", \"fitted\": " + std::to_string(r.provenance_counts[1]) +
         ", \"datasheet\": " + std::to_string(r.provenance_counts[2]) + "},\n";
    o += "  \"instructions\": " + std::to_string(r.instructions) + ",\n";
    o += "  \"flows\": " + std::to_string(r.flows) + ",\n";
    o += "  \"deadlock\": " + std::string(r.deadlock ? "true" : "false") + ",\n";
    o += "  \"deadlock_detail\": " + json_quote(r.deadlock_detail) + ",\n";
    o += "  \"critical_path\": {\"length_s\": " + secs(r.critical_path.length_ns) +
         ", \"summary\": " + json_quote(r.critical_path.summary) + ", \"segments\": [";
    for (std::size_t k = 0; k < r.critical_path.segments.size(); ++k) {
        const auto& s = r.critical_path.segments[k];
        o += k ? ",\n    " : "\n    ";
        o += "{\"rank\": " + std::to_string(s.rank) + ", \"pp_stage\": " + std::to_string(s.pp_stage) +
             ", \"stream\": " + json_quote(to_string(s.stream)) + ", \"op\": " + json_quote(s.label) +
             ", \"link\": " + json_quote(s.link) + ", \"duration_s\": " + secs(s.duration_ns) +
             ", \"share\": " + json_num(s.share, 6) + "}";
    }
    o += r.critical_path.segments.empty() ? "]}\n" : "\n  ]}\n";
    o += "}\n";
    return o;
}

}  // namespace strata::sim
