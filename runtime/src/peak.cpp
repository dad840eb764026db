// What a rank holds at its GPU peak (RunOptions::peak_detail): checked as each instruction
// finishes, before its inputs' last reads free them, which is when a tier is at its fullest.
#include <algorithm>

#include "rank.hpp"

namespace strata::runtime {

using namespace sim;

void RankState::note_peak(std::size_t i) {
    const double used = gpu_.used.load();
    if (used <= peak_.bytes) return;
    const Instr& in = rp_.instrs[i];
    const Program& prog = w_.program;
    peak_.rank = rank_;
    peak_.bytes = used;
    peak_.at = (in.name > 0 ? prog.names[static_cast<std::size_t>(in.name)] : std::string(to_string(in.kind))) + ", " + to_string(in.phase) +
               (in.layer >= 0 ? ", layer " + std::to_string(in.layer) : std::string()) +
               (in.microbatch >= 0 ? ", micro-batch " + std::to_string(in.microbatch) : std::string());
    std::vector<PeakHeld> held;
    auto add = [&](const std::string& what, double bytes) {
        if (bytes > 0) held.push_back({what, bytes});
    };
    add(params_sharded_ ? "weights (shard)" : "weights", params_.charged());
    add(grads_sharded_ ? "gradients (shard)" : "gradients", grads_.charged());
    double moments = 0;
    for (const MomentBlock& b : gpu_moments_) moments += b.m.charged() + b.v.charged() + b.master.charged();
    add("optimizer states", moments);
    double gathered = 0, reducing = 0, values = 0;
    for (const Live& f : fetched_) gathered += f.buf.charged();
    add("gathered or fetched parameters", gathered);
    for (const auto& [key, l] : grad_live_) reducing += l.buf.charged();
    add("gradients being reduced", reducing);
    for (const auto& [id, l] : live_) {
        const DataTensor& t = prog.tensors[static_cast<std::size_t>(id)];
        if (t.tier != Tier::gpu || l.buf.charged() <= 0) continue;
        values += l.buf.charged();
        std::string what = prog.tensor_names[static_cast<std::size_t>(t.name)];
        if (t.layer >= 0) what += ", layer " + std::to_string(t.layer);
        if (t.microbatch >= 0) what += ", micro-batch " + std::to_string(t.microbatch);
        if (t.ring > 0) what += ", ring " + std::to_string(t.ring);
        add(what, l.buf.charged());
    }
    peak_.values_bytes = values;
    const std::size_t n = std::min(held.size(), static_cast<std::size_t>(w_.options.peak_detail));
    std::partial_sort(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(n), held.end(),
                      [](const PeakHeld& a, const PeakHeld& b) { return a.bytes > b.bytes || (a.bytes == b.bytes && a.what < b.what); });
    held.resize(n);
    peak_.largest = std::move(held);
}

}  // namespace strata::runtime
