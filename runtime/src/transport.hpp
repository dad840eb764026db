// The cpu backend's transport: collectives and pipeline send/receive between ranks that are
// threads of one process. A collective completes once every member has posted it; the last to
// arrive performs it for all, summing in group order, so the result does not depend on who came
// first. A send and its receive rendezvous as the engine assumes (lower.hpp). Keys are (step,
// match_id), so a fast rank's next step never meets a slow rank's last one.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "strata/lowering/program.hpp"

namespace strata::runtime {

/// Wakes a rank's executor when something it waits for may have happened.
struct Waker {
    std::mutex mu;
    std::condition_variable cv;
    std::uint64_t epoch = 0;
    void notify() {
        {
            std::lock_guard<std::mutex> lk(mu);
            ++epoch;
        }
        cv.notify_all();
    }
};

/// What an all-to-all hands one member: the rows every member sent it, by sender in group order,
/// and how many of each sender's rows go to each of the member's experts.
struct A2aReceived {
    std::vector<std::vector<float>> data;  ///< per tensor moved (CollPart::in)
    std::int64_t rows = 0;
    std::vector<std::int64_t> counts;  ///< [sender][local expert]
    std::vector<std::int64_t> from_rows;  ///< rows from each sender, in group order
};

/// One member's part of a collective: its buffers, element counts, and how a flat range is cut.
struct CollPart {
    int group_rank = 0;
    std::vector<float*> in, out;
    std::vector<std::int64_t> in_n, out_n;
    bool ranges = false;      ///< operands are flat ranges (sliced by group rank), not row blocks
    bool zero_rest = false;   ///< reduce-scatter of gradients: zero what the member does not keep
    bool into_slice = false;  ///< reduce-scatter of a range: `out` is the member's slice alone, added to
    bool from_slice = false;  ///< all-gather of a range: `in` is the member's slice alone
    bool keep_out = false;    ///< all-gather of a range: the member's output holds the result already; left unwritten
    /// Context parallelism's ring (DataTensor::ring): an all-gather hands member r the trailing
    /// out_cols columns of member r - ring's input (a K/V block); a reduce-scatter hands member r
    /// member r + ring's input (the K/V gradient it computed for r's block), added to the output
    /// when `accumulate`.
    int ring = 0;
    /// Context parallelism by all-gather (plan.cp_comm_type allgather): one ring place per block,
    /// out[k] of an all-gather taking member r - rings[k]'s block as `ring` would, and a
    /// reduce-scatter summing in[k] of member r + rings[k] for every k into out[0].
    std::vector<int> rings;
    std::int64_t in_cols = 0, out_cols = 0;
    bool accumulate = false;
    /// An all-to-all (MoE's dispatch and combine): the rows of each in[q] (row_cols[q] wide, all
    /// with the same rows) go out in group order, send_rows[d] of them to member d, with their
    /// counts per expert of member d (send_counts[d * local_experts + j]); what arrives lands in
    /// `received`, sized by the sends.
    std::vector<std::int64_t> send_rows, send_counts, row_cols;
    std::int64_t local_experts = 0;
    bool broadcast = false;  ///< every member gets all of in[0] (a gather of rows that vary per member)
    /// Ulysses (context parallelism's all-to-all; plan.cp_comm_type a2a): 1 hands member r the
    /// r-th 1/members of each column segment of every member's sequence-split rows (the
    /// load-balanced layout of `seq`-long sequences), gathered into sequence order; 2 is its
    /// inverse. `segments`: the column widths of the sequence-split rows ([q | k | v] or [out]).
    int ulysses = 0;
    std::vector<std::int64_t> segments;
    std::int64_t seq = 0;
    A2aReceived* received = nullptr;
    Waker* waker = nullptr;
};

/// Ulysses' exchange among `parts` (CollPart::ulysses, one part a member, any order): what the
/// transport performs, and what the emulated device's communicators perform on device buffers.
void ulysses_exchange(std::vector<CollPart>& parts);

class Transport {
public:
    using Key = std::pair<int, std::int64_t>;  ///< (step, match_id)

    /// Post this member's part; true once the collective has completed for everyone.
    bool collective(Key key, sim::CollKind kind, int members, CollPart part);
    /// Whether the collective posted under `key` has completed (the member's second look); `at`
    /// gets the moment it completed (a rank may notice it later, busy on another stream).
    bool collective_done(Key key, std::chrono::steady_clock::time_point* at = nullptr);
    /// Post a send (`data` of n elements) or a receive (into `data`); true once the pair has met
    /// and the data moved. A memory walk posts n = 0 (no data): the pair only meets.
    bool p2p(Key key, bool send, float* data, std::int64_t n, Waker* waker);
    bool p2p_done(Key key, bool send, std::chrono::steady_clock::time_point* at = nullptr);

    void abort(const std::string& why);
    bool aborted() const { return aborted_.load(); }
    std::string why() const;
    void add_waker(Waker* w) { wakers_.push_back(w); }

private:
    struct Coll {
        sim::CollKind kind = sim::CollKind::all_reduce;
        int members = 0;
        std::vector<CollPart> parts;
        bool done = false;
        int consumed = 0;
        std::chrono::steady_clock::time_point at;
    };
    struct P2P {
        float* src = nullptr;
        float* dst = nullptr;
        std::int64_t src_n = 0, dst_n = 0;
        bool posted[2] = {false, false};  ///< send, receive (a memory walk posts no data)
        Waker* wakers[2] = {nullptr, nullptr};
        bool done = false;
        int consumed = 0;
        std::chrono::steady_clock::time_point at;
    };
    static void perform(Coll& c);

    std::mutex mu_;
    std::map<Key, Coll> colls_;
    std::map<Key, P2P> p2p_;
    std::atomic<bool> aborted_{false};
    std::string why_;
    std::vector<Waker*> wakers_;
};

}  // namespace strata::runtime
