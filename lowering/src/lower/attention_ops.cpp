// The attention core of a layer, per rank and micro-batch: the fused (or unfused) kernel and,
// under context parallelism, the exchange of the sequence around it: the ring of K/V blocks
// (p2p), the K/V all-gather, or Ulysses' all-to-alls (plan.cp_comm_type). The rest of the layer
// lives in layer_ops.cpp.
#include "lower_impl.hpp"

namespace strata::sim::lower_detail {

// Flash-style causal attention: 2*b*sq*skv*heads*(dqk + dv)/tp flops for QK^T and PV, halved because
// masked blocks are skipped. With CP each rank holds s/cp queries against all s keys; K/V of the
// other cp-1 ranks arrive by an all-gather on cp_comm that overlaps the local block (Megatron's
// ring attention moves the same bytes: cp-1 steps of 2*b*(s/cp)*kv_w/tp*2 bytes).
void RankLowering::attention_core_forward(Phase phase, int qkv, int out, int lse, int probs, int pmask, int pdrop) {
    const Phase saved = phase_;
    phase_ = phase;
    const double sq = d_.s / d_.cp;
    const double flops = 2.0 * d_.b * sq * d_.s * d_.heads * (d_.qk_dim + d_.v_dim) / d_.tp / 2.0;
    const double io_bytes = d_.tokens * (d_.q_w + 2 * d_.kv_w + d_.heads * d_.v_dim) / d_.tp * d_.act_bytes;
    const Windowed win = windowed(sq);
    auto emit = [&](int name, double frac, double kv_len) {
        Instr& in = compute(Op::attention_fwd, name, flops * frac * win.flops, io_bytes * frac);
        auto whole = [](double x) { return static_cast<double>(static_cast<std::int64_t>(x)); };  // truncates
        set_shape(in, whole(win.seq), whole(kv_len), whole(d_.qk_dim), whole(d_.b * d_.heads / d_.tp));
    };
    if (d_.cp > 1 && p_.cp_comm_type == CpCommType::a2a) {
        // Ulysses (DeepSpeed-Ulysses, Megatron-Core --cp-comm-type a2a): an all-to-all trades the
        // rank's s/cp rows of every head for all s rows of heads/cp heads; attention runs whole on
        // them; a second all-to-all returns the output to the sequence split.
        // Dataflow: the head-split Q/K/V (every row of the rank's heads, in sequence order) and
        // the output in that layout, which the kernel keeps for its backward beside the
        // sequence-split output the projection reads (Transformer Engine's a2a saves both).
        const UlyssesTensors u = ulysses_tensors(false);
        wait(Stream::compute, cp_all_to_all(d_.q_w + 2 * d_.kv_w, n_.cp_a2a_qkv));
        if (df_) io({qkv}, {u.qkv});
        const Windowed whole_seq = windowed(d_.s);  // the kernel sees every row of its heads
        Instr& in = compute(Op::attention_fwd, n_.attn, flops * whole_seq.flops, io_bytes);
        set_shape(in, truncated(whole_seq.seq), d_.s, d_.qk_dim, truncated(d_.b * d_.heads / d_.tp / d_.cp));
        if (df_) io({u.qkv}, {u.out, lse});
        wait(Stream::compute, cp_all_to_all(d_.heads * d_.v_dim, n_.cp_a2a_out));
        if (df_) io({u.out}, {out});
    } else if (d_.cp > 1 && p_.cp_comm_type == CpCommType::allgather) {
        // All-gather (PyTorch's context-parallel SDPA, torchtitan's default; Transformer Engine's
        // KV all-gather): every rank's K/V chunk in one all-gather, issued before the local block,
        // which needs none of it, and waited after it; the remote blocks then run back to back.
        // Dataflow: the all-gather writes each remote block as the ring would (kv.ring j, the rank
        // j places back), so the blocks' kernels are the ring's.
        const int P = static_cast<int>(d_.cp);
        const int ev = collective(Stream::cp_comm, CollKind::all_gather, Group::cp, cp_kv_chunk_bytes() * P, n_.cp_kv_gather_all);
        if (df_) io_lists({qkv}, cp_ring_blocks(false));
        emit(n_.attn_local, 1.0 / d_.cp, sq);
        if (df_) io({qkv}, {out, lse});
        wait(Stream::compute, ev);
        for (int j = 1; j < P; ++j) {
            emit(n_.attn_remote, 1.0 / d_.cp, sq);
            if (df_) io({qkv, cp_ring_block(j, false), out, lse}, {out, lse});
        }
    } else if (d_.cp > 1) {
        // Ring attention: cp - 1 steps, each passing one rank's K/V chunk to the next rank while
        // the chunk received before is attended to. A step is costed as an all-gather whose
        // per-rank traffic is one chunk (S = chunk x cp / (cp - 1)); the steps chain on cp_comm.
        // Dataflow: step j delivers the K/V block of the rank j places back along the ring
        // (kv.ring, DataTensor::ring = j); the local block writes the output and its log-sum-exp,
        // each remote block merges into them.
        const double step_bytes = ring_step_bytes();
        auto ring_in = [&](int j) {
            if (df_) io({qkv}, {cp_ring_block(j, false)});
        };
        int ev = collective(Stream::cp_comm, CollKind::all_gather, Group::cp, step_bytes, n_.cp_kv_ag);
        ring_in(1);
        emit(n_.attn_local, 1.0 / d_.cp, sq);
        if (df_) io({qkv}, {out, lse});
        for (int j = 1; j < static_cast<int>(d_.cp); ++j) {
            wait(Stream::compute, ev);
            if (j + 1 < static_cast<int>(d_.cp)) {
                ev = collective(Stream::cp_comm, CollKind::all_gather, Group::cp, step_bytes, n_.cp_kv_ag);
                ring_in(j + 1);
            }
            emit(n_.attn_remote, 1.0 / d_.cp, sq);
            if (df_) io({qkv, cp_ring_block(j, false), out, lse}, {out, lse});
        }
    } else {
        emit(n_.attn, 1.0, d_.s);
        if (df_) io({qkv}, {out, lse, probs, pmask, pdrop});  // an absent one (-1) is skipped
    }
    phase_ = saved;
}

// A layer under model.sliding_window, with a fused kernel (FlashAttention's window_size, cuDNN's
// and Transformer Engine's sliding window): the kernel skips the tiles outside the window, so it
// does window_fraction of the causal work, at the efficiency of a causal kernel whose average
// context is the window's (2 c queries for c keys a query). Unfused attention (PyTorch's eager
// path, SDPA's math kernel) computes every score and masks: no saving.
RankLowering::Windowed RankLowering::windowed(double sq) const {
    Windowed w{1.0, sq};
    if (!p_.flash_attention || m_.window_of(layer_) == 0) return w;
    w.flops = window_fraction(m_, layer_);
    const double s = static_cast<double>(m_.seq_len), c = w.flops * s / 2.0;  // keys a query sees, on average
    w.seq = std::min(sq, 2.0 * c);
    return w;
}

// Ulysses' head-split tensors of the current layer: b x s rows (every sequence whole), 1/cp of
// the rank's heads; their gradients with `grads`.
RankLowering::UlyssesTensors RankLowering::ulysses_tensors(bool grads) {
    if (!df_) return {-1, -1};
    const double rows = d_.tokens * d_.cp, qkv = (d_.q_w + 2 * d_.kv_w) / d_.tp / d_.cp, attn = d_.heads * d_.v_dim / d_.tp / d_.cp;
    if (grads) return {grad(n_.g_qkv_heads, layer_, rows, qkv), grad(n_.g_attn_heads, layer_, rows, attn)};
    return {act(n_.t_qkv_heads, layer_, rows, qkv), act(n_.t_attn_heads, layer_, rows, attn)};
}

double RankLowering::truncated(double x) { return static_cast<double>(static_cast<std::int64_t>(x)); }

// A Ulysses all-to-all over the CP group of the rank's rows of `cols` columns (per TP rank):
// nccl-tests' S = the rank's whole buffer, (cp - 1)/cp of it to the other ranks.
int RankLowering::cp_all_to_all(double cols, int name) {
    return collective(Stream::cp_comm, CollKind::all_to_all, Group::cp, d_.tokens * cols / d_.tp * d_.act_bytes, name);
}

// A rank's K/V chunk: 2 b (s/cp) kv_w / tp elements in the activations' dtype.
double RankLowering::cp_kv_chunk_bytes() const { return 2 * d_.b * (d_.s / d_.cp) * d_.kv_w / d_.tp * d_.act_bytes; }

// One ring step's all-gather size: every rank sends its K/V chunk to its neighbour, which an
// all-gather of S = chunk x cp / (cp - 1) bytes moves per rank.
double RankLowering::ring_step_bytes() const { return cp_kv_chunk_bytes() * d_.cp / (d_.cp - 1); }

// The K/V block of the current layer that the rank j places back along the CP ring holds
// (kv.ring j), or the gradient this rank computes for it.
int RankLowering::cp_ring_block(int j, bool grad) {
    return act(grad ? n_.g_kv_ring : n_.t_kv_ring, layer_, d_.tokens, 2 * d_.kv_w / d_.tp, grad ? TensorRole::grad : TensorRole::activation, j);
}

// The remote K/V blocks of the current layer (kv.ring 1 .. cp - 1), or their gradients.
std::vector<int> RankLowering::cp_ring_blocks(bool grads) {
    std::vector<int> out;
    if (!df_) return out;
    for (int j = 1; j < static_cast<int>(d_.cp); ++j) out.push_back(cp_ring_block(j, grads));
    return out;
}

void RankLowering::attention_core_backward(const LayerTensors& t) {
    // FlashAttention-2 backward: 2.5x the forward FLOPs (Dao 2023: 5 matmuls in backward vs 2 in forward).
    const double sq = d_.s / d_.cp;
    const double flops = 2.5 * 2.0 * d_.b * sq * d_.s * d_.heads * (d_.qk_dim + d_.v_dim) / d_.tp / 2.0;
    const double io_bytes = 2 * d_.tokens * (d_.q_w + 2 * d_.kv_w + d_.heads * d_.v_dim) / d_.tp * d_.act_bytes;
    const Windowed win = windowed(sq);
    auto emit = [&](int name, double frac, double kv_len) {
        Instr& in = compute(Op::attention_bwd, name, flops * frac * win.flops, io_bytes * frac);
        auto whole = [](double x) { return static_cast<double>(static_cast<std::int64_t>(x)); };  // truncates
        set_shape(in, whole(win.seq), whole(kv_len), whole(d_.qk_dim), whole(d_.b * d_.heads / d_.tp));
    };
    if (d_.cp > 1 && p_.cp_comm_type == CpCommType::a2a) {  // Ulysses: the output's gradient in, Q/K/V's out
        const UlyssesTensors u = ulysses_tensors(false), du = ulysses_tensors(true);
        wait(Stream::compute, cp_all_to_all(d_.heads * d_.v_dim, n_.cp_a2a_out));
        if (df_) io({t.dattn}, {du.out});
        const Windowed whole_seq = windowed(d_.s);
        Instr& in = compute(Op::attention_bwd, n_.attn, flops * whole_seq.flops, io_bytes);
        set_shape(in, truncated(whole_seq.seq), d_.s, d_.qk_dim, truncated(d_.b * d_.heads / d_.tp / d_.cp));
        if (df_) io({u.qkv, u.out, t.lse, du.out}, {du.qkv});
        wait(Stream::compute, cp_all_to_all(d_.q_w + 2 * d_.kv_w, n_.cp_a2a_qkv));
        if (df_) io({du.qkv}, {t.dqkv});
    } else if (d_.cp > 1 && p_.cp_comm_type == CpCommType::allgather) {
        // All-gather: K/V gathered again (Transformer Engine keeps only the rank's own chunk for
        // the backward), the blocks' backward, then one reduce-scatter returns each block's K/V
        // gradient to its owner, which adds their sum into its own.
        const int P = static_cast<int>(d_.cp);
        const double kvw = 2 * d_.kv_w / d_.tp;
        const int returned = grad(n_.g_kv_acc, layer_, d_.tokens, kvw);
        const int ev = collective(Stream::cp_comm, CollKind::all_gather, Group::cp, cp_kv_chunk_bytes() * P, n_.cp_kv_gather_all);
        if (df_) io_lists({t.qkv}, cp_ring_blocks(false));
        emit(n_.attn_local, 1.0 / d_.cp, sq);
        if (df_) io({t.qkv, t.attn, t.lse, t.dattn}, {t.dqkv});
        wait(Stream::compute, ev);
        const std::vector<int> kvs = cp_ring_blocks(false), parts = cp_ring_blocks(true);
        for (int j = 1; j < P; ++j) {
            emit(n_.attn_remote, 1.0 / d_.cp, sq);
            if (df_) io({t.qkv, kvs[static_cast<std::size_t>(j - 1)], t.attn, t.lse, t.dattn, t.dqkv}, {t.dqkv, parts[static_cast<std::size_t>(j - 1)]});
        }
        const int red = collective(Stream::cp_comm, CollKind::reduce_scatter, Group::cp, cp_kv_chunk_bytes() * P, n_.cp_dkv_rs_all);
        if (df_) io_lists(parts, {returned});
        wait(Stream::compute, red);
        compute(Op::elementwise, n_.cp_dkv_combine, 0, 3 * d_.tokens * kvw * d_.act_bytes);
        if (df_) io({returned, t.dqkv}, {t.dqkv});
    } else if (d_.cp > 1) {
        // Backward ring: K/V travel again step by step, and each step's dK/dV partial moves on
        // towards its owner (costed like the forward steps, as a reduce-scatter of one chunk).
        // Dataflow: the remote blocks add their queries' gradient into d.qkv and leave the K/V
        // gradient of the block they saw (d.kv.ring) to be returned to its owner, which sums the
        // returns (d.kv.returned) and adds them into its own K/V gradient once the ring is done.
        const double step_bytes = ring_step_bytes();
        const double kvw = 2 * d_.kv_w / d_.tp;
        auto kv = [&](int j) { return cp_ring_block(j, false); };
        const int returned = grad(n_.g_kv_acc, layer_, d_.tokens, kvw);
        int ev = collective(Stream::cp_comm, CollKind::all_gather, Group::cp, step_bytes, n_.cp_kv_ag);
        if (df_) io({t.qkv}, {kv(1)});
        emit(n_.attn_local, 1.0 / d_.cp, sq);
        if (df_) io({t.qkv, t.attn, t.lse, t.dattn}, {t.dqkv});
        int red = -1;
        for (int j = 1; j < static_cast<int>(d_.cp); ++j) {
            wait(Stream::compute, ev);
            if (j + 1 < static_cast<int>(d_.cp)) {
                ev = collective(Stream::cp_comm, CollKind::all_gather, Group::cp, step_bytes, n_.cp_kv_ag);
                if (df_) io({t.qkv}, {kv(j + 1)});
            }
            emit(n_.attn_remote, 1.0 / d_.cp, sq);
            const int part = cp_ring_block(j, true);
            if (df_) io({t.qkv, kv(j), t.attn, t.lse, t.dattn, t.dqkv}, {t.dqkv, part});
            red = collective(Stream::cp_comm, CollKind::reduce_scatter, Group::cp, step_bytes, n_.cp_dkv_rs);
            if (df_) {
                if (j == 1) io({part}, {returned});
                else io({part, returned}, {returned});
            }
        }
        wait(Stream::compute, red);
        // Add the returned K/V gradients into this rank's own (Transformer Engine accumulates them
        // step by step; one add after the ring here).
        compute(Op::elementwise, n_.cp_dkv_combine, 0, 3 * d_.tokens * kvw * d_.act_bytes);
        if (df_) io({returned, t.dqkv}, {t.dqkv});
    } else {
        emit(n_.attn, 1.0, d_.s);
        if (df_) io({t.qkv, t.attn, t.lse, t.dattn, t.probs, t.pmask, t.pdrop}, {t.dqkv, t.dprobs});
    }
}

}  // namespace strata::sim::lower_detail
