// The Program's dataflow (LowerOptions::dataflow): what each instruction reads and writes. The
// checks are structural and by hand: the instructions do not change, the flat parameter layout
// sums to the model's parameter counts, every tensor is written before it is read on its rank, a
// pipeline send carries the tensor its receive writes, and ZeRO's reduce-scatter ranges are the
// ranges its all-gathers use, with the optimizer's slices partitioning each buffer over the group.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "strata/lowering/groups.hpp"
#include "strata/lowering/hazards.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/params.hpp"
#include "strata/lowering/tensors.hpp"
#include "dataflow_checks.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;
using namespace strata::test;

TEST_CASE("dataflow adds operands and changes no instruction", "[dataflow]") {
    ModelSpec m = small_gpt();
    m.linear_bias = true;
    m.tied_embeddings = true;
    for (int variant = 0; variant < 5; ++variant) {
        PlanSpec p = plan(2, 2, 2, 8);
        if (variant == 1) p.sequence_parallel = true;
        if (variant == 2) p.zero_stage = 1;
        if (variant == 3) p.recompute = Recompute::full;
        if (variant == 4) p.schedule = Schedule::gpipe;
        const Program a = lower_df(m, p, false), b = lower_df(m, p, true);
        REQUIRE(a.ranks.size() == b.ranks.size());
        for (std::size_t r = 0; r < a.ranks.size(); ++r) {
            REQUIRE(a.ranks[r].instrs.size() == b.ranks[r].instrs.size());
            CHECK(std::memcmp(a.ranks[r].instrs.data(), b.ranks[r].instrs.data(), a.ranks[r].instrs.size() * sizeof(Instr)) == 0);
            CHECK(a.ranks[r].operands.empty());
        }
        CHECK_FALSE(a.has_dataflow());
        CHECK(b.has_dataflow());
        INFO("variant " << variant);
        check_def_before_use(b);
    }
}

TEST_CASE("the flat parameter layout holds every parameter of the stage once", "[dataflow][params]") {
    // Per stage and TP rank the layout must sum to stage_params (tensors.hpp), which the memory
    // model and the engine already check against the model's exact counts (model.hpp).
    for (const bool swiglu : {false, true})
        for (const bool tied : {false, true})
            for (const int tp : {1, 2})
                for (const int pp : {1, 2}) {
                    ModelSpec m = small_gpt();
                    m.ffn = swiglu ? FfnKind::swiglu : FfnKind::gelu;
                    m.norm = swiglu ? NormKind::rmsnorm : NormKind::layernorm;
                    m.position = swiglu ? PositionKind::rope : PositionKind::learned;
                    m.linear_bias = !swiglu;
                    m.tied_embeddings = tied;
                    PlanSpec p = plan(tp, pp, 1, 4);
                    for (int s = 0; s < pp; ++s) {
                        const ParamLayout L = param_layout(m, p, s);
                        INFO("swiglu " << swiglu << " tied " << tied << " tp " << tp << " pp " << pp << " stage " << s);
                        CHECK(static_cast<double>(L.dense_elements) == stage_params(m, p, s).dense);
                        std::int64_t at = 0;
                        for (const ParamEntry& e : L.entries) {
                            CHECK(e.offset == at);  // contiguous, in order
                            at = e.end();
                            // The piece is the whole tensor cut tp ways where it is split.
                            const std::int64_t whole = e.full_rows * e.full_cols;
                            CHECK(e.elements() * (e.split == ParamSplit::replicated ? 1 : tp) == whole);
                        }
                        std::int64_t units = 0;
                        for (const GradUnit& g : L.units) units += g.count;
                        CHECK(units == L.dense_elements);
                    }
                }
    // By hand, tp 1: GPT layer with biases = 4h (2 layernorms) + 3h^2 + 3h (qkv) + h^2 + h (proj) +
    // 8h^2 + 4h + h (MLP) = 12h^2 + 13h; h = 64: 49152 + 832 = 49984.
    ModelSpec m = small_gpt();
    m.linear_bias = true;
    const ParamLayout L = param_layout(m, plan(1, 1, 1, 1), 0);
    std::int64_t layer0 = 0;
    for (const ParamEntry& e : L.entries)
        if (e.layer == 0) layer0 += e.elements();
    CHECK(layer0 == 12 * 64 * 64 + 13 * 64);
    // Vocab-parallel word embedding: 128 x 64 / 2 rows each on tp 2; qkv's piece: its 2 of 4 heads of
    // Q, K and V = 3 x 32 rows.
    const ParamLayout L2 = param_layout(m, plan(2, 1, 1, 1), 0);
    CHECK(L2.find("word_embedding.weight")->rows == 64);
    CHECK(L2.find("qkv.weight", 0)->rows == 96);
    CHECK(L2.find("proj.weight", 0)->cols == 32);
    CHECK(L2.find("qkv.bias", 0)->cols == 96);
}

TEST_CASE("pipeline sends carry the tensor their receive writes", "[dataflow]") {
    ModelSpec m = small_gpt();
    for (const Schedule sch : {Schedule::one_f_one_b, Schedule::gpipe, Schedule::interleaved_1f1b}) {
        PlanSpec p = plan(1, 2, 1, 4);
        p.schedule = sch;
        if (sch == Schedule::interleaved_1f1b) p.vpp = 2;
        const Program prog = lower_df(m, p);
        std::map<std::int64_t, int> sent, received;
        for (const RankProgram& r : prog.ranks)
            for (std::size_t i = 0; i < r.instrs.size(); ++i) {
                const Instr& in = r.instrs[i];
                if (in.kind == InstrKind::send) sent[in.match_id] = ins(prog, r, i).at(0);
                if (in.kind == InstrKind::recv) received[in.match_id] = outs(prog, r, i).at(0);
            }
        REQUIRE(sent.size() == received.size());
        REQUIRE_FALSE(sent.empty());
        for (const auto& [id, t] : sent) CHECK(received.at(id) == t);
        check_def_before_use(prog);
    }
}

TEST_CASE("ZeRO: each rank gathers the slices it reduced, and the slices partition the buffer", "[dataflow][zero]") {
    ModelSpec m = small_gpt();
    for (const int zero : {1, 2, 3})
        for (const bool overlap : {true, false}) {
            PlanSpec p = plan(1, 1, 2, 4);
            p.zero_stage = zero;
            p.overlap_grad_reduce = overlap;
            p.overlap_param_gather = overlap;
            p.dp_bucket_bytes = 100000;
            if (zero == 2 && overlap) p.global_batch = 2;  // one micro-batch: the dataflow covers it
            const Program prog = lower_df(m, p, true, 2);
            const std::int64_t total = param_layout(m, p, 0).dense_elements;
            std::vector<std::int64_t> covered(static_cast<std::size_t>(total), 0);
            for (const RankProgram& r : prog.ranks) {
                std::set<std::pair<std::int64_t, std::int64_t>> reduced, gathered;
                for (std::size_t i = 0; i < r.instrs.size(); ++i) {
                    const Instr& in = r.instrs[i];
                    if (in.kind == InstrKind::collective && in.group == Group::dp) {
                        // The reduce-scatter's whole range in, the gather's whole range out (its
                        // input is the rank's slice where ZeRO-3 keeps a parameter shard).
                        const DataTensor& t = prog.tensors[static_cast<std::size_t>(ins(prog, r, i).at(0))];
                        const DataTensor& g = prog.tensors[static_cast<std::size_t>(outs(prog, r, i).at(0))];
                        if (in.coll == CollKind::reduce_scatter) reduced.insert({t.offset, t.elements()});
                        if (in.coll == CollKind::all_gather) gathered.insert({g.offset, g.elements()});
                    }
                    // The optimizer updates this rank's slices: count them over both ranks.
                    if (in.kind == InstrKind::compute && in.op == Op::optimizer_gpu && in.microbatch < 0 && r.id >= 0) {
                        for (int id : outs(prog, r, i)) {
                            const DataTensor& t = prog.tensors[static_cast<std::size_t>(id)];
                            for (std::int64_t e = t.offset; e < t.offset + t.elements(); ++e) ++covered[static_cast<std::size_t>(e)];
                        }
                    }
                }
                INFO("zero " << zero << " overlap " << overlap << " rank " << r.id);
                CHECK(reduced == gathered);
                CHECK_FALSE(reduced.empty());
            }
            // Two optimizer steps (steps = 2) over two ranks: every element updated exactly twice.
            for (std::int64_t c : covered) REQUIRE(c == 2);
        }
}

TEST_CASE("ZeRO-0: the all-reduce buckets cover the gradient buffer once", "[dataflow][zero]") {
    ModelSpec m = small_gpt();
    m.tied_embeddings = true;
    PlanSpec p = plan(1, 2, 2, 8);
    p.dp_bucket_bytes = 100000;
    const Program prog = lower_df(m, p);
    for (const RankProgram& r : prog.ranks) {
        const std::int64_t total = param_layout(m, p, r.pp_stage).dense_elements;
        std::vector<int> seen(static_cast<std::size_t>(total), 0);
        int emb = 0;
        for (std::size_t i = 0; i < r.instrs.size(); ++i) {
            const Instr& in = r.instrs[i];
            if (in.kind != InstrKind::collective) continue;
            const DataTensor& t = prog.tensors[static_cast<std::size_t>(ins(prog, r, i).at(0))];
            if (in.group == Group::dp) {
                CHECK(in.coll == CollKind::all_reduce);
                for (std::int64_t e = t.offset; e < t.offset + t.elements(); ++e) ++seen[static_cast<std::size_t>(e)];
            }
            if (in.group == Group::embedding) {
                ++emb;
                CHECK(t.elements() == 128 * 64);  // the tied table (or its copy on the last stage)
                CHECK(r.groups[static_cast<std::size_t>(Group::embedding)].size() == 2);
            }
        }
        for (int c : seen) CHECK(c == 1);
        CHECK(emb == 1);
    }
}

TEST_CASE("parameters homed on the host are fetched a unit at a time and stay home after the update", "[dataflow][offload]") {
    ModelSpec m = small_gpt();
    m.tied_embeddings = true;  // the head reads the embedding's unit too
    for (int tp : {1, 2})
        for (int pp : {1, 2})
            for (bool recompute : {false, true}) {
                PlanSpec p = plan(tp, pp, 1, 4);
                p.zero_stage = 1;
                p.recompute = recompute ? Recompute::full : Recompute::none;
                p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
                p.offload.params = TierSplit{0.0, 1.0, 0.0};
                INFO("tp " << tp << " pp " << pp << " recompute " << recompute);
                REQUIRE(dataflow_unsupported(m, p).empty());
                const Program prog = lower_df(m, p);
                const std::vector<std::string> h = dataflow_hazards(prog, 3);
                INFO((h.empty() ? "" : h[0]));
                CHECK(h.empty());
                for (const RankProgram& r : prog.ranks) {
                    const ParamLayout L = param_layout(m, p, r.pp_stage);
                    const double bytes = 2;  // bf16 weights
                    // Per micro-batch: every layer forward and backward; the embedding before its
                    // lookup; the head (with the tied table on a single stage) forward and backward.
                    double expected = 0;
                    for (const GradUnit& u : L.units) {
                        const bool tied_in_head = u.embedding && pp == 1;
                        const int uses = u.layer >= 0 ? 2 : u.head ? 2 : tied_in_head ? 3 : 1;
                        expected += uses * static_cast<double>(u.count) * bytes;
                    }
                    expected *= p.micro_batches();
                    double fetched = 0;
                    int param_h2d = 0;
                    for (std::size_t i = 0; i < r.instrs.size(); ++i) {
                        const Instr& in = r.instrs[i];
                        if (in.kind != InstrKind::copy) continue;
                        const std::string& name = prog.names[static_cast<std::size_t>(in.name)];
                        param_h2d += name == "params.h2d";
                        if (name != "params.fetch_h2d") continue;
                        fetched += in.bytes;
                        // Host range in, the same range on the GPU out: one whole unit.
                        const auto a = ins(prog, r, i), b = outs(prog, r, i);
                        REQUIRE(a.size() == 1);
                        REQUIRE(b.size() == 1);
                        const DataTensor &src = prog.tensors[static_cast<std::size_t>(a[0])], &dst = prog.tensors[static_cast<std::size_t>(b[0])];
                        CHECK(src.tier == Tier::cpu);
                        CHECK(dst.tier == Tier::gpu);
                        CHECK(src.offset == dst.offset);
                        bool whole_unit = false;
                        for (const GradUnit& u : L.units) whole_unit = whole_unit || (u.offset == dst.offset && u.count == dst.elements());
                        CHECK(whole_unit);
                    }
                    CHECK(fetched == Approx(expected));
                    CHECK(param_h2d == 0);  // the update writes the parameters' home; nothing goes back up
                }
            }
    // Homed on the SSD: the update writes them back there instead.
    PlanSpec p = plan(1, 1, 1, 4);
    p.zero_stage = 3;
    p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
    p.offload.params = TierSplit{0.0, 0.0, 1.0};
    const Program prog = lower_df(m, p, false);
    double written = 0;
    for (const Instr& in : prog.ranks[0].instrs)
        if (in.kind == InstrKind::copy && prog.names[static_cast<std::size_t>(in.name)] == "params.ssd_write") written += in.bytes;
    PlanSpec homed_on_host = p;  // the same layout, one the dataflow lowering takes
    homed_on_host.offload.params = TierSplit{0.0, 1.0, 0.0};
    CHECK(written == Approx(param_layout(m, homed_on_host, 0).dense_elements * 2.0));  // bf16 weights
    CHECK_THAT(dataflow_unsupported(m, p), Catch::Contains("plan.offload.params"));
}

TEST_CASE("ZeRO-3 offload_param: each data-parallel rank fetches its own slice and the gather fills the rest", "[dataflow][offload]") {
    // ZeRO-Infinity's parameters homed on the host, sharded over dp: the slices two data-parallel
    // peers bring up partition every unit; each fetch is followed by the all-gather of what it
    // fetched; the host holds the rank's shard only; the bytes brought up are 1/dp of dp 1's.
    ModelSpec m = small_gpt();
    m.tied_embeddings = true;
    for (int tp : {1, 2})
        for (int pp : {1, 2}) {
            PlanSpec p = plan(tp, pp, 2, 4);
            p.zero_stage = 3;
            p.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
            p.offload.params = TierSplit{0.0, 1.0, 0.0};
            INFO("tp " << tp << " pp " << pp << " dp 2");
            REQUIRE(dataflow_unsupported(m, p).empty());
            const Program prog = lower_df(m, p);
            const std::vector<std::string> h = dataflow_hazards(prog, 3);
            INFO((h.empty() ? "" : h[0]));
            CHECK(h.empty());
            // Per (stage, tp rank): each dp rank's fetched ranges, as element intervals.
            std::map<std::pair<int, int>, std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>>> fetched;
            for (const RankProgram& r : prog.ranks) {
                auto& mine = fetched[{r.pp_stage, group_rank_of(Group::tp, p, r.global_rank)}];
                mine.emplace_back();
                double host_elems = 0;
                std::set<std::pair<std::int64_t, std::int64_t>> host;
                for (std::size_t i = 0; i < r.instrs.size(); ++i) {
                    for (int id : ins(prog, r, i)) {
                        const DataTensor& t = prog.tensors[static_cast<std::size_t>(id)];
                        if (t.role == TensorRole::param && t.tier == Tier::cpu) host.insert({t.offset, t.elements()});
                    }
                    const Instr& in = r.instrs[i];
                    if (in.kind != InstrKind::copy || prog.names[static_cast<std::size_t>(in.name)] != "params.fetch_h2d") continue;
                    const auto a = ins(prog, r, i), b = outs(prog, r, i);
                    REQUIRE(a.size() == b.size());
                    std::int64_t lo = INT64_MAX, hi = 0;
                    for (std::size_t k = 0; k < a.size(); ++k) {
                        const DataTensor &src = prog.tensors[static_cast<std::size_t>(a[k])], &dst = prog.tensors[static_cast<std::size_t>(b[k])];
                        CHECK(src.tier == Tier::cpu);
                        CHECK(dst.tier == Tier::gpu);
                        CHECK(src.offset == dst.offset);
                        mine.back().push_back({dst.offset, dst.offset + dst.elements()});
                        lo = std::min(lo, dst.offset);
                        hi = std::max(hi, dst.offset + dst.elements());
                    }
                    // The next gather on the dp stream covers what this fetch brought up, and more.
                    bool gathered = false;
                    for (std::size_t j = i + 1; j < r.instrs.size() && !gathered; ++j) {
                        const Instr& g = r.instrs[j];
                        if (g.kind != InstrKind::collective || g.coll != CollKind::all_gather) continue;
                        const auto o = outs(prog, r, j);
                        for (int id : o) {
                            const DataTensor& t = prog.tensors[static_cast<std::size_t>(id)];
                            gathered = gathered || (t.offset <= lo && t.offset + t.elements() >= hi && t.elements() > hi - lo);
                        }
                    }
                    CHECK(gathered);
                }
                for (const auto& [off, n] : host) host_elems += static_cast<double>(n);
                const ParamLayout L = param_layout(m, p, r.pp_stage);
                CHECK(host_elems == Approx(static_cast<double>(L.dense_elements) / 2).epsilon(0.01));  // its shard
            }
            // The two peers' slices: disjoint, and together every element of the stage.
            for (const auto& [key, peers] : fetched) {
                REQUIRE(peers.size() == 2);
                std::set<std::pair<std::int64_t, std::int64_t>> a(peers[0].begin(), peers[0].end()), b(peers[1].begin(), peers[1].end());
                std::vector<std::pair<std::int64_t, std::int64_t>> all(a.begin(), a.end());
                all.insert(all.end(), b.begin(), b.end());
                std::sort(all.begin(), all.end());
                std::int64_t at = 0;
                for (const auto& [lo, hi] : all) {
                    CHECK(lo == at);
                    at = hi;
                }
                CHECK(at == param_layout(m, p, key.first).dense_elements);
            }
        }
}

TEST_CASE("unfused accumulation: each micro-batch's weight gradients are added into their ranges", "[dataflow][grads]") {
    ModelSpec m = small_gpt();
    m.linear_bias = true;
    m.tied_embeddings = true;
    for (int tp : {1, 2})
        for (int pp : {1, 2})
            for (int zero : {0, 1, 2, 3}) {
                if (zero == 3 && pp > 1) continue;  // refused by validation without a framework that runs it
                PlanSpec p = plan(tp, pp, 2, 8);
                p.zero_stage = zero;
                p.sequence_parallel = tp > 1;
                p.grad_accum_fusion = false;
                if (zero % 2 == 1) p.precision = Precision::fp32;  // fp32 sums: the first micro-batch is added too
                INFO("tp " << tp << " pp " << pp << " zero " << zero);
                REQUIRE(dataflow_unsupported(m, p).empty());
                const Program prog = lower_df(m, p);
                const std::vector<std::string> h = dataflow_hazards(prog, 3);
                INFO((h.empty() ? "" : h[0]));
                CHECK(h.empty());
                check_def_before_use(prog);
                for (const RankProgram& r : prog.ranks) {
                    // Every parameter's gradient is accumulated once per micro-batch (the embedding
                    // and the tied head table twice: the lookup's and the head's), but the first in
                    // bf16: its gradient becomes the sum itself.
                    std::map<std::int64_t, int> adds;  // range offset -> additions
                    for (std::size_t i = 0; i < r.instrs.size(); ++i) {
                        if (r.instrs[i].op != Op::grad_accum) continue;
                        const auto a = ins(prog, r, i), b = outs(prog, r, i);
                        REQUIRE(a.size() == 2 * b.size());
                        for (std::size_t k = 0; k < b.size(); ++k) {
                            const DataTensor &g = prog.tensors[static_cast<std::size_t>(a[k])], &sum = prog.tensors[static_cast<std::size_t>(b[k])];
                            CHECK(g.role == TensorRole::weight_grad);
                            CHECK(sum.role == TensorRole::param_grad);
                            CHECK(a[b.size() + k] == b[k]);  // in place
                            CHECK(g.elements() == sum.elements());
                            ++adds[sum.offset];
                        }
                    }
                    const ParamLayout L = param_layout(m, p, r.pp_stage);
                    for (const ParamEntry& e : L.entries) {
                        INFO(e.name << " layer " << e.layer);
                        const int twice = e.name == "word_embedding.weight" && pp == 1 ? 2 : 1;
                        CHECK(adds[e.offset] == twice * (p.micro_batches() - (p.grad_bytes() > 2 ? 0 : 1)));
                    }
                }
            }
}

TEST_CASE("scatter/gather pipeline transfers: a slice on the wire, the whole tensor after the TP gather", "[dataflow]") {
    ModelSpec m = small_gpt();
    for (bool blocking : {false, true}) {
        PlanSpec p = plan(2, 2, 1, 4);
        p.p2p_scatter_gather = true;
        p.p2p_blocking = blocking;  // DeepSpeed's PipelineEngine
        REQUIRE(dataflow_unsupported(m, p).empty());
        const Program prog = lower_df(m, p);
        CHECK(dataflow_hazards(prog, 3).empty());
        check_def_before_use(prog);
        for (const RankProgram& r : prog.ranks)
            for (std::size_t i = 0; i < r.instrs.size(); ++i) {
                const Instr& in = r.instrs[i];
                if (in.kind != InstrKind::recv) continue;
                // b*s*h*2/tp = 1*32*64*2/2 bytes: the receive writes half of the rows.
                const auto o = outs(prog, r, i);
                REQUIRE(o.size() == 1);
                const DataTensor& t = prog.tensors[static_cast<std::size_t>(o[0])];
                CHECK(t.rows == 16);
                CHECK(t.elements() * 2 == static_cast<std::int64_t>(in.bytes));
            }
    }
    PlanSpec sp = plan(2, 2, 1, 4);
    sp.p2p_scatter_gather = true;
    sp.sequence_parallel = true;
    CHECK_THAT(dataflow_unsupported(m, sp), Catch::Contains("plan.p2p_scatter_gather"));
}

TEST_CASE("unfused attention keeps its probabilities from the forward to the backward", "[dataflow]") {
    // Megatron's CoreAttention (plan.flash_attention off): the forward writes the (b, heads/tp,
    // s, s) softmax probabilities beside the output, the backward reads them; under attention
    // dropout the 1-byte mask and the dropped probabilities too (tensors.cpp's attn.softmax_*).
    // 4 heads over tp 2, micro-batches of one 32-token sequence: 2 x 32 x 32 elements a layer.
    ModelSpec m = small_gpt();
    auto attention_tensors = [&](bool flash, double dropout) {
        ModelSpec mm = m;
        mm.dropout = dropout;
        PlanSpec p = plan(2, 1, 1, 2);
        p.flash_attention = flash;
        Program prog = lower_df(mm, p);
        check_def_before_use(prog);
        const RankProgram& r = prog.ranks[0];
        const int attn = prog.name_id("attention");
        std::vector<std::pair<std::string, std::int64_t>> fwd, bwd;
        for (std::size_t i = 0; i < r.instrs.size(); ++i) {
            const Instr& in = r.instrs[i];
            if (in.name != attn || in.layer != 1 || in.microbatch != 0) continue;
            const bool forward = in.phase == Phase::forward;
            for (int t : forward ? outs(prog, r, i) : ins(prog, r, i)) {
                const DataTensor& d = prog.tensors[static_cast<std::size_t>(t)];
                const std::string& name = prog.tensor_names[static_cast<std::size_t>(d.name)];
                if (name.rfind("attn.probs", 0) == 0) (forward ? fwd : bwd).emplace_back(name, d.elements());
            }
        }
        CHECK(fwd == bwd);
        return fwd;
    };
    using V = std::vector<std::pair<std::string, std::int64_t>>;
    const std::int64_t n = 2 * 32 * 32;
    CHECK(attention_tensors(false, 0) == V{{"attn.probs", n}});
    CHECK(attention_tensors(false, 0.1) == V{{"attn.probs", n}, {"attn.probs.dropout_mask", n}, {"attn.probs.dropped", n}});
    CHECK(attention_tensors(true, 0.1).empty());  // flash keeps the log-sum-exp only
}
