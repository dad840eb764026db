// Sliding-window attention (model.sliding_window, model.window_attn_skip_freq): which layers are
// windowed, the attention kernels' FLOPs in the Program and in the model's FLOP count, and the
// spec's rules. Expected values are counted by hand in the comments.
#include <catch2/catch.hpp>

#include "strata/common/error.hpp"
#include "strata/lowering/lower.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/spec_io.hpp"
#include "support/lower_fixtures.hpp"

using namespace strata::sim;
using strata::test::cluster;
using strata::test::plan;
using strata::test::small_gpt;
using Catch::Matchers::Contains;

namespace {

// The small GPT (L = 4, s = 32) with an 8-token window on layers 0 and 2 (every 2nd layer, 1-based
// 2 and 4, attends to the whole sequence, as GPT-OSS and Gemma 2 do).
ModelSpec windowed_gpt() {
    ModelSpec m = small_gpt();
    m.sliding_window = 8;
    m.window_attn_skip_freq = 2;
    return m;
}

// A query at position i sees min(i + 1, w) keys: over s = 32 positions with w = 8 that is
// 1 + 2 + ... + 8 + 24 x 8 = 36 + 192 = 228 scores, against the s^2 / 2 = 512 Strata counts for
// a causal layer: 228 / 512 = 0.4453125.
constexpr double kShare = 228.0 / 512.0;

double attention_flops_of(const Program& p, int layer, Op op) {
    double f = 0;
    for (const Instr& in : p.ranks[0].instrs)
        if (in.kind == InstrKind::compute && in.op == op && in.layer == layer) f += in.flops;
    return f;
}

}  // namespace

TEST_CASE("sliding window: which layers, and the share of the scores a windowed layer computes", "[lower][window]") {
    const ModelSpec m = windowed_gpt();
    CHECK(m.window_of(0) == 8);
    CHECK(m.window_of(1) == 0);
    CHECK(m.window_of(2) == 8);
    CHECK(m.window_of(3) == 0);
    CHECK(window_fraction(m, 0) == Approx(kShare).epsilon(1e-12));
    CHECK(window_fraction(m, 1) == 1.0);
    ModelSpec all = m;
    all.window_attn_skip_freq = 0;  // Mistral: every layer windowed
    for (int l = 0; l < 4; ++l) CHECK(all.window_of(l) == 8);
    all.sliding_window = 32;  // a window that covers the sequence is no window
    CHECK(all.window_of(0) == 0);
    CHECK(window_fraction(all, 0) == 1.0);
}

TEST_CASE("sliding window: a fused kernel does the window's share of the work, an unfused one all of it", "[lower][window]") {
    PlanSpec p = plan(1, 1, 1, 4);
    p.flash_attention = true;
    const Program full = lower(small_gpt(), cluster(1), p);
    const Program win = lower(windowed_gpt(), cluster(1), p);
    for (Op op : {Op::attention_fwd, Op::attention_bwd}) {
        const double f0 = attention_flops_of(full, 0, op), f1 = attention_flops_of(full, 1, op);
        REQUIRE(f0 > 0);
        CHECK(attention_flops_of(win, 0, op) == Approx(kShare * f0).epsilon(1e-12));
        CHECK(attention_flops_of(win, 1, op) == Approx(f1).epsilon(1e-12));
        CHECK(attention_flops_of(win, 2, op) == Approx(kShare * f0).epsilon(1e-12));
    }
    // The model's FLOPs (MFU): per token, each layer's causal attention core is 4 s h / 2 = 4096
    // forward (test_lower.cpp's hand count); two layers of four do 0.4453125 of it. Three times the
    // forward for the step: 3 x 2 x (1 - 0.4453125) x 4096 x 128 tokens less than unwindowed.
    CHECK(full.model_flops_per_step - win.model_flops_per_step == Approx(3.0 * 2.0 * (1.0 - kShare) * 4096.0 * 128.0).epsilon(1e-9));
    // PyTorch's eager attention computes every score and masks: no saving.
    p.flash_attention = false;
    const Program eager_full = lower(small_gpt(), cluster(1), p), eager_win = lower(windowed_gpt(), cluster(1), p);
    CHECK(attention_flops_of(eager_win, 0, Op::attention_fwd) == Approx(attention_flops_of(eager_full, 0, Op::attention_fwd)));
}

TEST_CASE("sliding window: the spec's fields, written back and refused with their rule", "[spec][window]") {
    const std::string base = R"({"name": "w", "layers": 4, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 32)";
    const ModelSpec m = model_from_json_text(base + R"(, "sliding_window": 8, "window_attn_skip_freq": 2})", "w.json");
    CHECK(m.sliding_window == 8);
    CHECK(m.window_attn_skip_freq == 2);
    const ModelSpec again = model_from_json_text(to_json_text(m), "again.json");
    CHECK(again.sliding_window == 8);
    CHECK(again.window_attn_skip_freq == 2);
    CHECK(model_from_json_text(base + R"(, "sliding_window": null})", "n.json").sliding_window == 0);
    CHECK_THROWS_WITH(model_from_json_text(base + R"(, "sliding_window": 0})", "z.json"), Contains("z.json") && Contains("sliding_window"));
    CHECK_THROWS_WITH(model_from_json_text(base + R"(, "window_attn_skip_freq": 2})", "f.json"),
                      Contains("f.json") && Contains("window_attn_skip_freq") && Contains("sliding_window"));
    CHECK_THROWS_WITH(model_from_json_text(base + R"(, "sliding_window": 8, "window_attn_skip_freq": -1})", "g.json"),
                      Contains("window_attn_skip_freq"));
}

TEST_CASE("master_weights = false: read, written back, and refused where a master is needed", "[spec]") {
    const std::string model = R"({"name": "m", "layers": 2, "hidden": 64, "heads": 4, "vocab": 128, "seq_len": 32})";
    auto plan = [](const std::string& extra) {
        return R"({"name": "p", "dp": 1, "global_batch": 1, "precision": "bf16")" + extra + "}";
    };
    const ModelSpec m = model_from_json_text(model, "m.json");
    const PlanSpec p = plan_from_json_text(plan(R"(, "master_weights": false)"), "p.json");
    CHECK_FALSE(p.master_weights);
    CHECK_FALSE(p.has_master());
    CHECK(to_json_text(p).find("\"master_weights\": false") != std::string::npos);
    CHECK(plan_from_json_text(plan(""), "d.json").has_master());  // the default keeps one
    CHECK_THROWS_WITH(plan_from_json_text(R"({"name": "p", "dp": 1, "global_batch": 1, "precision": "fp32", "master_weights": false})", "f.json"),
                      Contains("f.json") && Contains("master_weights") && Contains("fp32"));
    ClusterSpec c;
    c.gpu = "H100-SXM5-80GB";
    c.gpus_per_node = 1;
    PlanSpec off = p;
    off.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
    CHECK_THROWS_WITH(validate_plan(m, c, off, "off.json"), Contains("master_weights") && Contains("offload"));
}

TEST_CASE("Ulysses context parallelism: two all-to-alls each way around an attention over whole sequences", "[lower][cp]") {
    // The small GPT (h 64, 4 heads of 16, s 32) on cp 2, a micro-batch of one sequence: a rank
    // holds 16 rows. Forward: Q, K, V (16 rows x 192 columns x 2 bytes = 6144 bytes) to the head
    // split, the output (16 x 64 x 2 = 2048) back; backward the same two the other way. The
    // attention's FLOPs equal the ring's (each rank: s/cp queries' worth), with no K/V ring steps.
    PlanSpec p = plan(1, 1, 1, 4);
    p.cp = 2;
    p.cp_comm_type = CpCommType::a2a;
    const Program a2a = lower(small_gpt(), cluster(2), p);
    p.cp_comm_type = CpCommType::p2p;
    const Program ring = lower(small_gpt(), cluster(2), p);
    std::vector<double> bytes;
    int gathers = 0;
    for (const Instr& in : a2a.ranks[0].instrs) {
        if (in.kind != InstrKind::collective || in.group != Group::cp || in.layer != 1 || in.microbatch != 0) continue;
        if (in.coll == CollKind::all_to_all) bytes.push_back(in.bytes);
        else ++gathers;
    }
    CHECK(bytes == std::vector<double>{6144, 2048, 2048, 6144});
    CHECK(gathers == 0);
    for (Op op : {Op::attention_fwd, Op::attention_bwd})
        CHECK(attention_flops_of(a2a, 1, op) == Approx(attention_flops_of(ring, 1, op)).epsilon(1e-12));
    // Each rank takes heads / cp of the TP rank's heads: 4 query heads do not split over 8.
    ClusterSpec c8 = cluster(8);
    p.cp = 8;
    p.cp_comm_type = CpCommType::a2a;
    CHECK_THROWS_WITH(validate_plan(small_gpt(), c8, p, "u.json"), Contains("cp_comm_type") && Contains("4 query heads"));
}
