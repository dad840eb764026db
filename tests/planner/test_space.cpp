// Plan-space enumeration: every yielded plan passes validate_plan, counts add up, shards partition
// the space exactly.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "strata/common/error.hpp"
#include "strata/planner/space.hpp"
#include "strata/sim/cost.hpp"
#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/spec_io.hpp"
#include "support/gpt.hpp"

using namespace strata;
using namespace strata::sim;

static ModelSpec small_gpt() { return test::gpt_shape("gpt-small", 12, 1024, 16, 32000, 2048); }

static ClusterSpec two_nodes() {
    ClusterSpec c;
    c.name = "2x8";
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 2;
    c.gpus_per_node = 8;
    return c;
}

// The small GPT with 16 experts of 1024, top-2, in every layer.
static ModelSpec small_moe() {
    ModelSpec m = small_gpt();
    m.moe = strata::test::moe_spec(16, 2, 1024);
    return m;
}

TEST_CASE("every enumerated plan is valid and the counters add up", "[planner][space]") {
    const ModelSpec m = small_gpt();
    const ClusterSpec c = two_nodes();
    planner::SearchSpace s;
    s.global_batch = 64;
    std::int64_t n = 0;
    auto k = planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        REQUIRE_NOTHROW(validate_plan(m, c, p, "enumerated"));
        CHECK(p.tp <= c.gpus_per_node);  // tp within a node by default
        ++n;
        return true;
    });
    CHECK(n == k.valid);
    CHECK(k.considered == k.valid + k.invalid);
    CHECK(n > 1000);
}

TEST_CASE("shards partition the plan space", "[planner][space]") {
    const ModelSpec m = small_gpt();
    const ClusterSpec c = two_nodes();
    planner::SearchSpace s;
    s.global_batch = 32;
    s.search_offload = false;
    auto key = [](const PlanSpec& p) { return to_json_text(p); };
    std::multiset<std::string> all, merged;
    auto whole = planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) { all.insert(key(p)); return true; });
    std::int64_t considered = 0;
    for (int i = 0; i < 3; ++i) {
        auto part = planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) { merged.insert(key(p)); return true; }, i, 3);
        considered += part.considered;
    }
    CHECK(all == merged);
    CHECK(considered == whole.considered);
    // No duplicates within the whole space either.
    CHECK(std::set<std::string>(all.begin(), all.end()).size() == all.size());
}

TEST_CASE("divisibility rules prune tp that does not divide heads", "[planner][space]") {
    ModelSpec m = small_gpt();
    m.heads = 12;  // tp 8 cannot split 12 heads
    m.kv_heads = 12;
    m.hidden = 768;
    m.ffn_hidden = 3072;
    planner::SearchSpace s;
    s.global_batch = 16;
    bool saw_tp8 = false;
    planner::enumerate_plans(m, two_nodes(), s, [&](const PlanSpec& p) { saw_tp8 |= p.tp == 8; return true; });
    CHECK_FALSE(saw_tp8);
}

TEST_CASE("offload choices need the ZeRO stage that makes them possible", "[planner][space]") {
    planner::SearchSpace s;
    s.global_batch = 32;
    planner::enumerate_plans(small_gpt(), two_nodes(), s, [&](const PlanSpec& p) {
        if (!p.offload.params.all_gpu()) CHECK(p.zero_stage == 3);
        if (!p.offload.optimizer.all_gpu()) CHECK(p.zero_stage >= 1);
        if (p.zero_stage == 3) CHECK(p.pp == 1);
        return true;
    });
}

TEST_CASE("the allocator setting is carried into every plan, not searched", "[planner][space]") {
    for (const bool expandable : {false, true}) {
        planner::SearchSpace s;
        s.global_batch = 32;
        s.expandable_segments = expandable;
        int plans = 0, carried = 0;
        planner::enumerate_plans(small_gpt(), two_nodes(), s, [&](const PlanSpec& p) {
            ++plans;
            carried += p.expandable_segments == expandable;
            return true;
        });
        CHECK(plans > 0);
        CHECK(carried == plans);
    }
}

TEST_CASE("interleaving is offered where pp does not divide the micro-batches, in Megatron-Core's smallest group", "[planner][space]") {
    // 40 sequences: on dp 4 at micro-batch 1, 10 micro-batches; pp 4 does not divide them, and
    // Megatron-Core's rule takes groups of 5 (5 + 5); a pp that divides them gets the default.
    const ModelSpec m = small_gpt();
    const ClusterSpec c = two_nodes();
    planner::SearchSpace s;
    s.global_batch = 40;
    s.search_offload = false;
    int grouped = 0;
    bool saw_pp4_m10 = false;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        if (p.schedule != Schedule::interleaved_1f1b) {
            CHECK(p.microbatch_group == 0);
            return true;
        }
        REQUIRE_NOTHROW(validate_plan(m, c, p, "enumerated"));
        const int micro = p.micro_batches();
        if (micro % p.pp == 0) {
            CHECK(p.microbatch_group == 0);
        } else {
            ++grouped;
            CHECK(p.microbatch_group == smallest_microbatch_group(micro, p.pp));
            CHECK(p.microbatch_group > p.pp);
        }
        if (p.pp == 4 && micro == 10) {
            saw_pp4_m10 = true;
            CHECK(p.microbatch_group == 5);
        }
        return true;
    });
    CHECK(grouped > 0);
    CHECK(saw_pp4_m10);
}

TEST_CASE("MoE plans include MoE parallel folding, valid and with sequence parallelism", "[planner][space]") {
    const ModelSpec m = small_moe();
    const ClusterSpec c = two_nodes();
    planner::SearchSpace s;
    s.global_batch = 64;
    std::int64_t folded = 0, folded_beyond_dp = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        REQUIRE_NOTHROW(validate_plan(m, c, p, "enumerated"));
        if (p.expert_tp == 1) {
            ++folded;
            CHECK(p.tp > 1);
            CHECK(p.sequence_parallel);
            if ((p.dp * p.cp) % p.ep != 0) ++folded_beyond_dp;  // EP spans TP ranks: only folding allows it
        }
        return true;
    });
    CHECK(folded > 0);
    CHECK(folded_beyond_dp > 0);
    s.search_expert_tp = false;
    std::int64_t off = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        off += p.expert_tp > 0 ? 1 : 0;
        return true;
    });
    CHECK(off == 0);
}

TEST_CASE("MoE plans try DeepEP's dispatch wherever there is EP, inside nodes and across them", "[planner][space][moe]") {
    // DeepEP sends a token once per GPU its experts reach, inside a node too (docs/costs.md), so
    // every EP layout is tried with both dispatchers.
    const ModelSpec m = small_moe();
    const ClusterSpec c = two_nodes();
    planner::SearchSpace s;
    s.global_batch = 64;
    s.search_offload = false;
    std::int64_t deepep_crossing = 0, deepep_inside = 0, flat_crossing = 0, flat_inside = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        if (p.ep < 2) {
            CHECK(p.moe_dispatcher == MoeDispatcher::alltoall);
            return true;
        }
        const bool crosses = group_layout(Group::ep, c, p).nodes > 1;
        if (p.moe_dispatcher == MoeDispatcher::deepep) {
            ++(crosses ? deepep_crossing : deepep_inside);
            REQUIRE_NOTHROW(validate_plan(m, c, p, "enumerated"));
        } else {
            ++(crosses ? flat_crossing : flat_inside);
        }
        return true;
    });
    CHECK(deepep_crossing > 0);
    CHECK(deepep_inside > 0);
    CHECK(deepep_crossing == flat_crossing);  // every layout in both variants
    CHECK(deepep_inside == flat_inside);
    s.search_deepep = false;
    std::int64_t off = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        off += p.moe_dispatcher == MoeDispatcher::deepep ? 1 : 0;
        return true;
    });
    CHECK(off == 0);
}

TEST_CASE("MoE plans try the all-to-all overlap where Megatron-Core runs it", "[planner][space][moe][a2a_overlap]") {
    // Combined 1F1B: every EP layout without a pipeline, and with one only interleaved (or in
    // DualPipeV's pairs); never with full recompute; not for a framework that does not have it.
    const ModelSpec m = small_moe();
    const ClusterSpec c = two_nodes();
    planner::SearchSpace s;
    s.global_batch = 64;
    s.search_offload = false;
    std::int64_t with = 0, pp1 = 0, interleaved = 0, plain_pp1 = 0, dualpipev = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        if (p.ep >= 2 && p.pp == 1 && !p.moe_a2a_overlap && p.recompute != Recompute::full) ++plain_pp1;
        if (!p.moe_a2a_overlap) return true;
        ++with;
        CHECK(p.ep >= 2);
        CHECK(p.recompute != Recompute::full);
        CHECK((p.pp == 1 || p.schedule == Schedule::interleaved_1f1b || p.schedule == Schedule::dualpipe_v));
        ++(p.pp == 1 ? pp1 : p.schedule == Schedule::dualpipe_v ? dualpipev : interleaved);
        REQUIRE_NOTHROW(validate_plan(m, c, p, "enumerated"));
        return true;
    });
    CHECK(pp1 == plain_pp1);  // each such layout in both variants
    CHECK(interleaved > 0);
    CHECK(dualpipev > 0);
    // torchtitan overlaps EP only in DualPipeV's pairs (pipeline_parallel_expert_parallel_overlap,
    // its default there, which refuses activation checkpointing): every DualPipeV plan with EP has
    // it, no other plan does.
    s.framework = "torchtitan";
    std::int64_t titan = 0, titan_dpv = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        titan += p.moe_a2a_overlap;
        if (p.schedule == Schedule::dualpipe_v && p.ep > 1) {
            ++titan_dpv;
            CHECK(p.moe_a2a_overlap);
            CHECK(p.recompute == Recompute::none);
        }
        if (p.moe_a2a_overlap) CHECK(p.schedule == Schedule::dualpipe_v);
        return true;
    });
    CHECK(titan_dpv > 0);
    CHECK(titan == titan_dpv);
    s.framework = "megatron-bridge";
    std::int64_t bridge = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        bridge += p.moe_a2a_overlap;
        return true;
    });
    CHECK(bridge > 0);
    s.framework.clear();
    // Megatron-Core's combined 1F1B takes at most one MTP layer (found by fuzz_plan_space).
    for (int depth : {1, 2}) {
        ModelSpec mtp = m;
        mtp.mtp_depth = depth;
        mtp.position = PositionKind::rope;
        mtp.norm = NormKind::rmsnorm;
        std::int64_t n = 0;
        planner::enumerate_plans(mtp, c, s, [&](const PlanSpec& p) {
            if (!p.moe_a2a_overlap) return true;
            ++n;
            REQUIRE_NOTHROW(validate_plan(mtp, c, p, "enumerated"));
            return true;
        });
        INFO("mtp_depth " << depth);
        CHECK((depth == 1 ? n > 0 : n == 0));
    }
    s.search_a2a_overlap = false;
    std::int64_t off = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        off += p.moe_a2a_overlap;
        return true;
    });
    CHECK(off == 0);
}

TEST_CASE("divisors: every divisor in order, in O(sqrt n), up to INT_MAX (issue #32, defect 1)", "[planner][space]") {
    // The loop to n with a signed int overflowed at INT_MAX (SIGFPE) and took minutes at 2^24.
    for (int n = 1; n <= 500; ++n) {
        std::vector<int> brute;
        for (int i = 1; i <= n; ++i)
            if (n % i == 0) brute.push_back(i);
        REQUIRE(planner::divisors(n) == brute);
    }
    CHECK(planner::divisors(2147483647) == std::vector<int>{1, 2147483647});  // a Mersenne prime
    const std::vector<int> pow2 = planner::divisors(1 << 30);
    REQUIRE(pow2.size() == 31);
    for (int i = 0; i <= 30; ++i) CHECK(pow2[static_cast<std::size_t>(i)] == 1 << i);
    // 46340^2 = 2^4 5^2 7^2 331^2, a square just below INT_MAX: (4+1)(2+1)^3 = 135 divisors, its
    // root once.
    const std::vector<int> sq = planner::divisors(46340 * 46340);
    CHECK(sq.size() == 135);
    CHECK(std::count(sq.begin(), sq.end(), 46340) == 1);
    CHECK(std::is_sorted(sq.begin(), sq.end()));
    CHECK(planner::divisors(0).empty());
    CHECK(planner::divisors(-12).empty());
}

TEST_CASE("the largest global batch enumerates without overflow", "[planner][space]") {
    planner::SearchSpace s;
    s.global_batch = static_cast<int>(kMaxGlobalBatch);
    s.search_offload = false;
    s.zero_stages = {1};
    s.recomputes = {Recompute::none};
    std::int64_t n = 0;
    const auto k = planner::enumerate_plans(small_gpt(), two_nodes(), s, [&](const PlanSpec& p) {
        ++n;
        REQUIRE(p.global_batch == kMaxGlobalBatch);
        REQUIRE(p.micro_batches() * p.micro_batch * p.dp == p.global_batch);
        return n < 2000;
    });
    CHECK(k.valid == n);
    CHECK(n > 0);
}

TEST_CASE("interleaving is offered only where every virtual stage gets a layer, MTP modules counted", "[planner][space]") {
    // Found by fuzz_plan_space: 96 layers and 2 MTP modules on 16 stages. The MTP modules count as
    // layers of the last stage, whose even share is then 4 decoder layers, not 96 / 16 = 6; vpp 6
    // was offered and validate_plan refused it.
    ModelSpec m = test::gpt_shape("gpt-mtp", 96, 1024, 16, 32000, 2048);
    m.mtp_depth = 2;
    ClusterSpec c = two_nodes();
    c.nodes = 4;  // 32 GPUs: pp 16 x dp 2
    planner::SearchSpace s;
    s.global_batch = 256;
    s.max_vpp = 8;
    s.search_offload = false;
    s.zero_stages = {1};
    s.recomputes = {Recompute::none};
    std::set<int> vpps_at_pp16;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        REQUIRE_NOTHROW(validate_plan(m, c, p, "enumerated"));
        if (p.pp == 16 && p.schedule == Schedule::interleaved_1f1b) vpps_at_pp16.insert(p.vpp);
        return true;
    });
    CHECK(vpps_at_pp16 == std::set<int>{2, 3});  // divisors of 6 that fit in the last stage's 4 layers
}

TEST_CASE("a framework's search yields only plans it runs, each equal to its plan file read back", "[planner][space][frameworks]") {
    // The planner sets knobs with apply_framework (no JSON); a plan written with only its stated
    // fields and plan.framework must read back to the same plan, or exports would lie.
    const ModelSpec m = small_gpt();
    const ClusterSpec c = two_nodes();
    for (const std::string& fw : framework_names()) {
        CAPTURE(fw);
        planner::SearchSpace s;
        s.global_batch = 32;
        s.framework = fw;
        std::int64_t n = 0, pipelined_fsdp = 0;
        const auto k = planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
            CHECK(p.framework == fw);
            CHECK_FALSE(framework_refusal(p));
            REQUIRE_NOTHROW(validate_plan(m, c, p, "enumerated"));
            pipelined_fsdp += p.pipelined_fsdp();
            if (n++ % 97 == 0) {
                // Stated fields only: what a user copies from a recipe.
                PlanSpec stated = p;
                const PlanSpec defaults;
                stated.flash_attention = defaults.flash_attention;
                stated.attention_kernel = defaults.attention_kernel;
                stated.p2p_blocking = stated.p2p_scatter_gather = false;
                stated.grad_accum_fusion = defaults.grad_accum_fusion;
                stated.fp32_grads = defaults.fp32_grads;
                stated.overlap_grad_reduce = defaults.overlap_grad_reduce;
                stated.overlap_param_gather = defaults.overlap_param_gather;
                stated.tp_comm_overlap = defaults.tp_comm_overlap;
                stated.eager_elementwise = defaults.eager_elementwise;
                stated.loss_upcast = defaults.loss_upcast;
                stated.eager_cross_entropy = defaults.eager_cross_entropy;
                stated.framework.clear();
                // Written without a framework, the defaults are omitted or explicit; strip the knobs.
                nlohmann::json j = nlohmann::json::parse(to_json_text(stated));
                // The CP exchange is searched, so stated like tp (a preset may also fix it).
                for (const std::string& key : framework_knob_keys())
                    if (key != "cp_comm_type") j.erase(key);
                j["framework"] = fw;
                CHECK(to_json_text(plan_from_json_text(j.dump(), "stated.json")) == to_json_text(p));
            }
            return true;
        });
        CHECK(n == k.valid);
        CHECK(n > 0);
        // Only torchtitan runs FSDP under a pipeline here (the exports cannot say it).
        CHECK((pipelined_fsdp > 0) == (fw == "torchtitan" || fw == "torchtitan-compile"));
    }
    // A data-parallel-only framework leaves no tp or pp in the space.
    planner::SearchSpace s;
    s.global_batch = 32;
    s.framework = "llm.c";
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        CHECK(p.tp == 1);
        CHECK(p.pp == 1);
        CHECK(p.zero_stage <= 1);
        return true;
    });
}

TEST_CASE("the enumeration misses no layout the plan rules accept", "[planner][space]") {
    // The converse of "every enumerated plan is valid": the enumerator prunes with rules of its own
    // (space.cpp's tp_ok, the micro-batch and sequence splits) for speed; none may be stricter
    // than validate_plan. Every (tp, cp, pp, micro_batch) inside the space's bounds that
    // validate_plan accepts for a plain plan (1F1B, SP where tp > 1, ZeRO-1) must be enumerated,
    // on a dense GPT and on GQA and MoE variants whose head and expert shapes prune tp.
    ModelSpec gqa = small_gpt();
    gqa.kv_heads = 4;
    ModelSpec odd = small_gpt();
    odd.heads = 12;  // tp 8 does not divide it
    odd.ffn_hidden = 4 * 1024 + 512;
    for (const ModelSpec& m : {small_gpt(), gqa, odd, small_moe()}) {
        const ClusterSpec c = two_nodes();
        planner::SearchSpace s;
        s.global_batch = 96;
        s.max_micro_batch = 4;
        std::set<std::tuple<int, int, int, int>> seen;
        planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
            seen.insert({p.tp, p.cp, p.pp, p.micro_batch});
            return true;
        });
        int accepted = 0;
        const int gpus = c.gpu_count();
        for (int tp = 1; tp <= std::min(s.max_tp, c.gpus_per_node); ++tp)
            for (int cp = 1; cp <= s.max_cp; ++cp)
                for (int pp = 1; pp <= s.max_pp; ++pp)
                    for (int mb = 1; mb <= s.max_micro_batch; ++mb) {
                        if (gpus % (tp * cp * pp) != 0) continue;
                        PlanSpec p;
                        p.tp = tp;
                        p.cp = cp;
                        p.pp = pp;
                        p.dp = gpus / (tp * cp * pp);
                        p.micro_batch = mb;
                        p.global_batch = s.global_batch;
                        p.sequence_parallel = tp > 1;
                        p.zero_stage = 1;
                        if (m.is_moe()) p.ep = 1;
                        try {
                            validate_plan(m, c, p, "brute force");
                        } catch (const InputError&) {
                            continue;
                        }
                        ++accepted;
                        INFO(m.name << " heads " << m.heads << " kv " << m.kv_heads << ": tp " << tp << " cp " << cp << " pp " << pp
                                    << " micro_batch " << mb << " is valid but not enumerated");
                        CHECK(seen.count({tp, cp, pp, mb}) == 1);
                    }
        CHECK(accepted > 20);
    }
}

TEST_CASE("CP plans try Ulysses' all-to-all where a TP rank's heads split over cp, and only there", "[planner][space]") {
    // small_gpt with GQA: 16 query heads, 2 KV heads. Ulysses needs (16 / tp) % cp == 0 and
    // max(1, 2 / tp) % cp == 0: of the 16-GPU layouts only (tp 1, cp 2).
    ModelSpec m = small_gpt();
    m.kv_heads = 2;
    const ClusterSpec c = two_nodes();
    auto count = [&](const planner::SearchSpace& s) {
        std::map<std::pair<int, int>, std::pair<std::int64_t, std::int64_t>> by_tp_cp;  // (ring, ulysses)
        planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
            if (p.cp == 1) {
                CHECK(p.cp_comm_type == CpCommType::p2p);
                return true;
            }
            auto& n = by_tp_cp[{p.tp, p.cp}];
            if (p.cp_comm_type == CpCommType::a2a) {
                ++n.second;
                REQUIRE_NOTHROW(validate_plan(m, c, p, "enumerated"));
            } else {
                ++n.first;
            }
            return true;
        });
        return by_tp_cp;
    };
    planner::SearchSpace s;
    s.global_batch = 32;
    s.search_offload = false;
    const auto all = count(s);
    for (const auto& [tc, n] : all) {
        const auto [tp, cp] = tc;
        INFO("tp " << tp << " cp " << cp);
        CHECK(n.first > 0);
        const bool ulysses = tp == 1 && cp == 2;
        CHECK(n.second == (ulysses ? n.first : 0));  // there, every ring plan has its Ulysses twin
    }
    CHECK(all.at({1, 2}).second > 0);
    CHECK(all.at({1, 4}).first > 0);  // a ring-only layout is searched
    // Off: the ring only. torchtitan's CP all-gathers K/V (PyTorch's context-parallel SDPA);
    // DeepSpeed's is Ulysses.
    s.search_cp_comm_type = false;
    for (const auto& [tc, n] : count(s)) CHECK(n.second == 0);
    s.search_cp_comm_type = true;
    s.framework = "torchtitan";
    for (const auto& [tc, n] : count(s)) CHECK(n.second == 0);
    std::int64_t gathered = 0;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        if (p.cp > 1) CHECK(p.cp_comm_type == CpCommType::allgather);
        gathered += p.cp > 1;
        return true;
    });
    CHECK(gathered > 0);
    s.framework = "deepspeed";
    for (const auto& [tc, n] : count(s)) CHECK(n.first == 0);
}

TEST_CASE("DualPipeV is offered where its V fits: pp > 1, 2 x pp micro-batches, under the frameworks that run it", "[planner][space][dualpipev]") {
    const ModelSpec m = small_gpt();
    const ClusterSpec c = two_nodes();
    planner::SearchSpace s;
    s.global_batch = 64;
    s.search_offload = false;
    std::int64_t n = 0;
    std::set<int> pps;
    planner::enumerate_plans(m, c, s, [&](const PlanSpec& p) {
        if (p.schedule != Schedule::dualpipe_v) return true;
        ++n;
        pps.insert(p.pp);
        CHECK(p.vpp == 2);
        CHECK(p.pp > 1);
        CHECK(p.micro_batches() >= 2 * p.pp);
        REQUIRE_NOTHROW(validate_plan(m, c, p, "enumerated"));
        return true;
    });
    CHECK(n > 0);
    // 12 layers: the V's 2 pp virtual stages need a layer each but the last (the head's), so pp 2
    // and 4 fit; pp 8's 16 virtual stages do not (its plans exist for 1F1B).
    CHECK(pps == std::set<int>{2, 4});
    auto count = [&](const std::string& fw, bool search) {
        planner::SearchSpace f = s;
        f.framework = fw;
        f.search_dualpipev = search;
        std::int64_t k = 0;
        planner::enumerate_plans(m, c, f, [&](const PlanSpec& p) {
            k += p.schedule == Schedule::dualpipe_v;
            return true;
        });
        return k;
    };
    CHECK(count("", false) == 0);
    CHECK(count("deepspeed", true) == 0);           // PipelineEngine: gpipe and 1F1B
    CHECK(count("torchtitan-compile", true) == 0);  // ScheduleDualPipeV refuses compiled stages
    CHECK(count("torchtitan", true) > 0);
    CHECK(count("megatron-core", true) > 0);
}
