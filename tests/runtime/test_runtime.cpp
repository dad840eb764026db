// The runtime on real numbers: gradients against finite differences, the loss falling on text,
// checkpoints that resume bit for bit, bf16, the ssd tier, refusals and spans (memory:
// test_memory.cpp; MoE: test_moe.cpp; the MLP activations besides GELU and SwiGLU:
// test_activations.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>

#include "runtime_checks.hpp"
#include "runtime_fixtures.hpp"
#include "strata/common/error.hpp"
#include "strata/runtime/cpu_kernels.hpp"
#include "strata/lowering/memory.hpp"

using namespace strata;
using namespace strata::sim;
using namespace strata::test;

TEST_CASE("gradients match finite differences", "[runtime][grad]") {
    SECTION("GPT: embedding, positions, norms, attention, MLP, biases") {
        check_gradients(tiny_gpt(), cpu_plan(), 0,
                        {{"word_embedding.weight", -1}, {"position_embedding.weight", -1}, {"ln1.weight", 0}, {"ln1.bias", 1},
                         {"qkv.weight", 0}, {"qkv.bias", 1}, {"proj.weight", 1}, {"fc1.weight", 0}, {"fc2.weight", 1},
                         {"fc2.bias", 0}, {"final_norm.weight", -1}});
    }
    SECTION("Llama: RoPE, GQA, RMSNorm, SwiGLU, untied head") {
        check_gradients(tiny_llama(2), cpu_plan(), 0,
                        {{"word_embedding.weight", -1}, {"lm_head.weight", -1}, {"ln2.weight", 1}, {"qkv.weight", 1},
                         {"fc1.weight", 0}, {"fc2.weight", 1}});
    }
    SECTION("QK-norm (OLMo 2, Qwen 3): per-head RMSNorm of Q and K; LayerNorm with biases on the GPT") {
        ModelSpec m = tiny_llama(2);
        m.qk_norm = true;
        check_gradients(m, cpu_plan(), 0, {{"q_norm.weight", 0}, {"k_norm.weight", 1}, {"qkv.weight", 0}, {"ln1.weight", 1}});
        ModelSpec g = tiny_gpt();
        g.qk_norm = true;
        // (K's bias has no gradient at all: softmax ignores a shift of every key.)
        check_gradients(g, cpu_plan(), 0, {{"q_norm.weight", 1}, {"q_norm.bias", 0}, {"k_norm.bias", 1}}, {}, true);
        // Heads of 8 normalised by LayerNorm make the loss curve sharply in the projection's
        // weights: a step of 1e-3 along the gradient's signs measured 6.450 against 6.655, 3e-4
        // 6.633, 1e-4 6.653 (the differences converge on the backward's value).
        check_gradients(g, cpu_plan(), 0, {{"qkv.weight", 1}}, {}, true, 1e-4);
        // TP 2: rank 1's heads of the projection, normed per head (along the signs with the small
        // step, as above: a random direction's 1e-3 step measured 1.2 % off).
        check_gradients(m, cpu_plan(2), 1, {{"qkv.weight", 0}, {"qkv.weight", 1}}, {}, true, 1e-4);
    }
    SECTION("dropout: the embedding's, the attention probabilities', both residual branches'") {
        // A fixed batch keeps its masks (RankState::dropout), so the loss is one function of the
        // weights; the masks' zeros make it piecewise smooth, not less differentiable.
        ModelSpec m = tiny_gpt();
        m.dropout = 0.2;
        check_gradients(m, cpu_plan(), 0,
                        {{"word_embedding.weight", -1}, {"position_embedding.weight", -1}, {"qkv.weight", 0}, {"qkv.bias", 1},
                         {"proj.weight", 1}, {"proj.bias", 0}, {"fc1.weight", 1}, {"fc2.weight", 0}, {"fc2.bias", 1}});
        PlanSpec p = cpu_plan(2);
        p.sequence_parallel = true;  // rank 1's shard of the sequence, its heads
        check_gradients(m, p, 1, {{"qkv.weight", 0}, {"proj.weight", 1}, {"fc1.weight", 0}, {"fc2.weight", 1}});
    }
    SECTION("TP 2: a rank's shards of split weights") {
        PlanSpec p = cpu_plan(2);
        check_gradients(tiny_llama(2), p, 1, {{"qkv.weight", 0}, {"fc1.weight", 1}, {"proj.weight", 0}, {"lm_head.weight", -1}});
    }
}

TEST_CASE("the loss falls on the bundled text", "[runtime][text]") {
    ModelSpec m = tiny_gpt();
    m.vocab = 256;  // bytes
    m.seq_len = m.max_position = 16;
    runtime::RunOptions o;
    o.lr = 3e-3;
    o.data.text_path = STRATA_SOURCE_DIR "/scenarios/data/public-domain.txt";
    runtime::Session s(m, cpu_cluster(2), cpu_plan(1, 1, 2), o);
    std::vector<double> l;
    for (int i = 0; i < 60; ++i) l.push_back(s.step().loss);
    const double first = l.front(), last5 = std::accumulate(l.end() - 5, l.end(), 0.0) / 5;
    INFO("loss " << first << " -> " << last5);
    CHECK(first == Approx(std::log(256.0)).epsilon(0.02));
    // Byte-level English: a unigram model alone reaches about 3.1 nats; 60 steps must get below it.
    CHECK(last5 < 3.1);
}

TEST_CASE("a checkpoint resumes bit for bit", "[runtime][checkpoint]") {
    const std::string dir = (std::filesystem::temp_directory_path() / "strata-test-checkpoint").string();
    std::filesystem::remove_all(dir);
    ModelSpec m = tiny_llama(2);
    PlanSpec p = cpu_plan(1, 1, 2);
    p.zero_stage = 1;
    p.offload.optimizer = TierSplit{0.5, 0.25, 0.25};  // moments on the GPU, the CPU and in the SSD file
    runtime::RunOptions o;
    o.lr = 3e-3;
    const Resumed r = save_and_resume(m, p, o, dir);
    CHECK(r.steps_done == 2);
    CHECK(r.before == r.after);  // bitwise: the same numbers in the same order
    // Another plan cannot resume it.
    o.resume_dir = dir;
    PlanSpec q = p;
    q.zero_stage = 0;
    CHECK_THROWS_WITH(runtime::Session(m, cpu_cluster(2), q, o), Catch::Contains("different model or plan"));
    std::filesystem::remove_all(dir);
    // ZeRO-3 on the GPU in bf16: each rank saves its shard of the weights and resumes from it.
    PlanSpec z = cpu_plan(1, 1, 2);
    z.zero_stage = 3;
    z.precision = Precision::bf16;
    o.resume_dir.clear();
    const Resumed rz = save_and_resume(m, z, o, dir);
    CHECK(rz.steps_done == 2);
    CHECK(rz.before == rz.after);
    std::filesystem::remove_all(dir);
    // Dropout keeps no RNG state to save: a resumed step draws its masks from its step number.
    ModelSpec g = tiny_gpt();
    g.dropout = 0.1;
    const Resumed rd = save_and_resume(g, cpu_plan(2), o, dir);
    CHECK(rd.before == rd.after);
    std::filesystem::remove_all(dir);
}

TEST_CASE("lock-free update: the host's update is one step stale", "[runtime][lockfree]") {
    // DeepSpeed's delayed parameter update (ZeRO-Offload, Sec. 5) and Angel-PTM's lock-free one:
    // step t computes its gradients at the parameters before step t-1's update, so on one fixed
    // batch, with W1 = AdamW(W0, g(W0)) the synchronous run's second parameters:
    //   synchronous: L(W0), L(W1), L(W2), ...
    //   lock-free:   L(W0), L(W0), L(W1), L(W2'), where W2' = AdamW(W1, g(W0)) != W2.
    ModelSpec m = tiny_llama(2);
    PlanSpec p = cpu_plan();
    p.offload.optimizer = TierSplit{0, 1, 0};
    runtime::RunOptions o;
    o.data.fixed_batch = true;
    const std::vector<double> sync = losses(m, p, 4, o);
    p.lock_free_update = true;
    const std::vector<double> lf = losses(m, p, 4, o);
    CHECK(lf[0] == sync[0]);
    CHECK(lf[1] == sync[0]);
    CHECK(lf[2] == sync[1]);
    CHECK(std::fabs(lf[3] - sync[2]) > 1e-6 * sync[2]);  // stale gradients: another third update
    CHECK(lf[3] < lf[0]);
    SECTION("the optimizer state on SSD: the same curve") {
        p.offload.optimizer = TierSplit{0, 0, 1};
        CHECK(losses(m, p, 4, o) == lf);
    }
    SECTION("a checkpoint holds the pending gradients and resumes bit for bit") {
        const std::string dir = (std::filesystem::temp_directory_path() / "strata-test-checkpoint-lockfree").string();
        std::filesystem::remove_all(dir);
        runtime::RunOptions r;
        r.lr = 3e-3;
        const Resumed res = save_and_resume(m, p, r, dir);
        CHECK(res.steps_done == 2);
        CHECK(res.before == res.after);
        std::filesystem::remove_all(dir);
    }
}

TEST_CASE("dropout masks: p of the elements dropped, the rest scaled, keyed by what an element is", "[runtime][dropout]") {
    using runtime::Dropout;
    using runtime::DropoutSite;
    using runtime::dropout_key;
    namespace cpu = runtime::cpu;
    const float p = 0.1f;
    const std::int64_t seq = 64, T = 4 * seq, C = 256, n = T * C;
    const cpu::Positions whole{seq, 1, 0};
    const Dropout d{p, dropout_key(42, 3, 1, DropoutSite::mlp_out), 10, 0, 0, 0};
    const std::vector<float> ones(static_cast<std::size_t>(n), 1.0f);
    auto draw = [&](const Dropout& x, std::int64_t rows, const cpu::Positions& where) {
        std::vector<float> y(static_cast<std::size_t>(rows * C)), mask(y.size());
        cpu::dropout_forward(y.data(), mask.data(), ones.data(), rows, C, x, where);
        CHECK(y == mask);
        return mask;
    };
    const std::vector<float> mask = draw(d, T, whole);
    const auto zeros = std::count(mask.begin(), mask.end(), 0.0f);
    const auto kept = std::count(mask.begin(), mask.end(), 1.0f / (1.0f - p));
    CHECK(zeros + kept == n);  // nothing but 0 and 1 / (1 - p): the mean is kept
    // Binomial(n, p): mean 6553.6, standard deviation 76.8; five of them either way.
    CHECK(std::fabs(static_cast<double>(zeros) - n * p) < 5 * std::sqrt(n * p * (1 - p)));
    // Another step or another site is another mask: both drop an element p^2 of the time.
    const Dropout other{p, dropout_key(42, 4, 1, DropoutSite::mlp_out), 10, 0, 0, 0};
    const std::vector<float> next = draw(other, T, whole);
    std::int64_t both = 0;
    for (std::int64_t i = 0; i < n; ++i) both += mask[static_cast<std::size_t>(i)] == 0 && next[static_cast<std::size_t>(i)] == 0;
    CHECK(std::fabs(static_cast<double>(both) - n * p * p) < 5 * std::sqrt(n * p * p));
    CHECK(next != mask);
    // A sequence-parallel shard (rows from row0 on) draws the whole's rows.
    Dropout shard = d;
    shard.row0 = T / 2 + seq / 4;
    const std::vector<float> half = draw(shard, T / 4, whole);
    CHECK(std::equal(half.begin(), half.end(), mask.begin() + shard.row0 * C));
    // Context parallelism: rank 1 of 2 holds chunks 1 and 2 of 4 of each sequence; its rows draw
    // the whole's rows at those positions.
    const cpu::Positions cp{seq, 2, 1};
    const std::vector<float> mine = draw(d, T / 2, cp);
    for (std::int64_t r = 0; r < T / 2; ++r) {
        const std::int64_t row = r / cp.local() * seq + cp(r);
        INFO("cp row " << r << " is the whole's row " << row);
        CHECK(std::equal(mine.begin() + r * C, mine.begin() + (r + 1) * C, mask.begin() + row * C));
    }
    // Attention: out = (P z) V with P the undropped softmax and z drawn for (sequence, model head,
    // query position, key position), against a direct evaluation; the rank's heads start at 2 of 8.
    const std::int64_t s = 6, b = 2, hq = 2, hkv = 1, hd = 4, row = (hq + 2 * hkv) * hd;
    std::vector<float> qkv(static_cast<std::size_t>(b * s * row));
    for (std::size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
    const Dropout a{0.3f, dropout_key(42, 0, 0, DropoutSite::attention_probs), 3, 0, 2, 8};
    std::vector<float> out(static_cast<std::size_t>(b * s * hq * hd)), lse(static_cast<std::size_t>(b * s * hq));
    cpu::attention_forward(out.data(), lse.data(), qkv.data(), b * s, s, hq, hkv, hd, a);
    std::int64_t dropped = 0;
    for (std::int64_t t = 0; t < b * s; ++t)
        for (std::int64_t h = 0; h < hq; ++h) {
            const std::int64_t seq_i = t / s, qp = t % s;
            std::vector<double> sc;
            for (std::int64_t j = 0; j <= qp; ++j) {
                double dot = 0;
                for (std::int64_t i = 0; i < hd; ++i)
                    dot += qkv[static_cast<std::size_t>(t * row + h * hd + i)] * qkv[static_cast<std::size_t>((seq_i * s + j) * row + hq * hd + i)];
                sc.push_back(dot / std::sqrt(static_cast<double>(hd)));
            }
            const double mx = *std::max_element(sc.begin(), sc.end());
            double sum = 0;
            for (double& x : sc) sum += (x = std::exp(x - mx));
            for (std::int64_t i = 0; i < hd; ++i) {
                double o = 0;
                for (std::int64_t j = 0; j <= qp; ++j) {
                    const auto key = static_cast<std::uint64_t>(((a.sample0 + seq_i) * a.heads + a.head0 + h) * s + qp);
                    const float z = runtime::dropout_scale(a.key, key, static_cast<std::uint64_t>(j), a.p);
                    dropped += i == 0 && z == 0;
                    o += sc[static_cast<std::size_t>(j)] / sum * z * qkv[static_cast<std::size_t>((seq_i * s + j) * row + (hq + hkv) * hd + i)];
                }
                CHECK(out[static_cast<std::size_t>(t * hq * hd + h * hd + i)] == Approx(o).margin(1e-5));
            }
        }
    CHECK(dropped > 0);  // the case drops some probabilities
}

TEST_CASE("bf16 rounding: to nearest, ties to even", "[runtime][bf16]") {
    // bfloat16 keeps the top 16 bits of an fp32: these by hand from the bit patterns.
    auto bits = [](std::uint32_t b) {
        float f;
        std::memcpy(&f, &b, 4);
        return f;
    };
    auto pattern = [](float f) {
        std::uint32_t b;
        std::memcpy(&b, &f, 4);
        return b;
    };
    const std::vector<std::pair<std::uint32_t, std::uint32_t>> cases = {
        {0x3F800000u, 0x3F800000u},  // 1.0 is exact
        {0x3F808000u, 0x3F800000u},  // halfway between 1.0 and 1.0078125: to the even 1.0
        {0x3F818000u, 0x3F820000u},  // halfway between 0x3F81 and 0x3F82: to the even 0x3F82
        {0x3F808001u, 0x3F810000u},  // just above halfway: up
        {0x3F807FFFu, 0x3F800000u},  // just below: down
        {0xBFC00000u, 0xBFC00000u},  // -1.5 is exact
        {0x7F7FFFFFu, 0x7F800000u},  // the largest float rounds to infinity
        {0x7F800000u, 0x7F800000u},  // infinity stays
        {0x00000001u, 0x00000000u},  // the smallest subnormal flushes to +0 by rounding
    };
    for (const auto& [in, want] : cases) {
        float f = bits(in);
        strata::runtime::cpu::round_bf16(&f, 1);
        INFO(std::hex << in);
        CHECK(pattern(f) == want);
    }
    float nan = bits(0x7F800001u);  // a NaN whose mantissa bit would round away stays a NaN
    strata::runtime::cpu::round_bf16(&nan, 1);
    CHECK(std::isnan(nan));
}

TEST_CASE("bf16: 2-byte values, fp32 master weights, the fp32 curve within bf16's rounding", "[runtime][bf16]") {
    ModelSpec m = tiny_llama(2);
    PlanSpec p = cpu_plan();
    const std::vector<double> fp32 = losses(m, p, 4);
    p.precision = Precision::bf16;
    const std::vector<double> bf16 = losses(m, p, 4);
    for (std::size_t i = 0; i < bf16.size(); ++i) {
        INFO("step " << i + 1 << ": bf16 " << bf16[i] << ", fp32 " << fp32[i]);
        CHECK(bf16[i] != fp32[i]);                              // rounded, really
        CHECK(bf16[i] == Approx(fp32[i]).epsilon(2e-3));        // 8 mantissa bits: ~0.4 % per value, averaged out
    }
    CHECK(bf16.back() < bf16.front());
    // The same update wherever the optimizer runs: master weights and moments on the GPU, in host
    // memory, or staged from the SSD file ({master, m, v} a sub-group at a time).
    for (const TierSplit& where : {TierSplit{0, 1, 0}, TierSplit{0, 0, 1}, TierSplit{0.5, 0.25, 0.25}}) {
        PlanSpec q = p;
        q.offload.optimizer = where;
        INFO("optimizer gpu/cpu/ssd " << where.gpu << "/" << where.cpu << "/" << where.ssd);
        CHECK(losses(m, q, 4) == bf16);
        if (where.gpu > 0) continue;
        // The weights homed on the host too (bf16 there, the fp32 master beside the moments),
        // fetched to the GPU a unit at a time.
        q.zero_stage = 3;
        q.offload.params = TierSplit{0, 1, 0};
        CHECK(losses(m, q, 4) == bf16);
    }
    // The update runs on fp32 master weights: an RMSNorm weight (1.0, where bf16's spacing is
    // 2^-8 below and 2^-7 above) moves by AdamW steps of ~lr = 1e-3 a step. Updated in bf16
    // itself, each step would round back to 1.0 and the weights would never move.
    for (const TierSplit& where : {TierSplit{1, 0, 0}, TierSplit{0, 1, 0}, TierSplit{0, 0, 1}}) {
        INFO("optimizer gpu/cpu/ssd " << where.gpu << "/" << where.cpu << "/" << where.ssd);
        p.offload.optimizer = where;
        runtime::RunOptions o;
        o.lr = 1e-3;
        o.data.fixed_batch = true;
        runtime::Session s(m, cpu_cluster(1), p, o);
        for (int i = 0; i < 8; ++i) s.step();
        int moved = 0;
        const std::int64_t n = s.param_elements(0, "ln1.weight", 0);
        for (std::int64_t i = 0; i < n; ++i) {
            const float w = s.param(0, "ln1.weight", 0, i);
            std::uint32_t b;
            std::memcpy(&b, &w, 4);
            CHECK((b & 0xFFFFu) == 0u);  // every weight the GPU holds is a bf16
            moved += w != 1.0f;
        }
        CHECK(moved > n / 2);
    }
}

TEST_CASE("bf16: narrowed Adam moments (Megatron's precision-aware optimizer)", "[runtime][bf16]") {
    // m and v stored in bf16, updated in fp32: the curve stays within bf16's rounding of the fp32
    // moments' one, is not the same, and the GPU holds 2 B a parameter less per narrowed moment
    // (the walk's difference is the model's, to the byte).
    ModelSpec m = tiny_llama(2);
    PlanSpec p = cpu_plan();
    p.precision = Precision::bf16;
    const std::vector<double> wide = losses(m, p, 4);
    p.exp_avg_dtype = p.exp_avg_sq_dtype = Precision::bf16;
    const std::vector<double> narrow = losses(m, p, 4);
    CHECK(narrow != wide);
    for (std::size_t i = 0; i < narrow.size(); ++i) CHECK(narrow[i] == Approx(wide[i]).epsilon(2e-3));
    runtime::RunOptions o;
    o.memory_only = true;
    auto walk = [&](const PlanSpec& q) {
        runtime::Session s(m, cpu_cluster(1), q, o);
        s.step();
        s.step();
        return s.peak_bytes()[0];
    };
    Capacities caps;
    caps.gpus_per_node = 1;
    PlanSpec w = p;
    w.exp_avg_dtype = w.exp_avg_sq_dtype = Precision::fp32;
    const double model_saved = memory_estimate(m, w, caps).hbm_bytes - memory_estimate(m, p, caps).hbm_bytes;
    CHECK(model_saved > 0);
    CHECK(walk(w) - walk(p) == Approx(model_saved).epsilon(1e-12));
}

TEST_CASE("bf16: the memory walk charges the plan's bytes", "[runtime][bf16][memory]") {
    // The analytical model (memory.hpp: the ZeRO paper's 2 + 4 + 12 bytes per parameter with
    // Megatron's fp32 gradients, Korthikanti et al.'s 2-byte activations) against the walk of the
    // dataflow, which charges each tensor at its dtype's width: fp32 within 5 %, bf16 within 2 %
    // (both keep Megatron's fp32 logits for the loss, and in bf16 their 2-byte cast beside them).
    // What bf16 changes (2 more bytes of states per parameter, half the activations) agrees within
    // 20 %: at this size the model's per-layer gradient workspace (the widest intermediate's and two
    // hidden states', tensors.cpp) is a fifth of the activations, and the fp32 walk peaks where it
    // holds less of it.
    ModelSpec m = tiny_llama(2);
    m.seq_len = 32;  // activations about as large as the states
    PlanSpec p = cpu_plan();
    p.fp32_grads = true;
    runtime::RunOptions o;
    o.memory_only = true;
    double walk[2] = {0, 0}, model[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
        PlanSpec q = p;
        q.precision = k == 0 ? Precision::fp32 : Precision::bf16;
        runtime::Session s(m, cpu_cluster(1), q, o);
        s.step();
        s.step();  // the moments (and master weights) exist from the second step's start
        walk[k] = s.peak_bytes()[0];
        Capacities caps;
        caps.gpus_per_node = 1;
        model[k] = memory_estimate(m, q, caps).hbm_bytes - kFrameworkReserveBytes;  // no CUDA context here
        INFO(to_string(q.precision) << ": walk " << walk[k] << " B, model " << model[k] << " B");
        CHECK(walk[k] == Approx(model[k]).epsilon(k == 0 ? 0.05 : 0.02));
    }
    INFO("bf16 - fp32: walk " << walk[1] - walk[0] << " B, model " << model[1] - model[0] << " B");
    // The optimizer offloaded, bf16: on the CPU the host tier is the model's to the byte (fp32
    // master, m, v and fp32 gradients: 16 B a parameter); on SSD the file is within 2 % (page
    // padding per range), and the host holds beside the staged state a sub-group's updated
    // weights cast to bf16 (2 B a parameter: the tiny model is one sub-group) until their H2D
    // (docs/runtime.md), 18 B in all, which the model counts too since stop 63 (until stop 53 the
    // walk held a whole fp32 copy of the weights, 4 B).
    double params = 0;
    for (const TierSplit& where : {TierSplit{0, 1, 0}, TierSplit{0, 0, 1}}) {
        PlanSpec q = p;
        q.precision = Precision::bf16;
        q.offload.optimizer = where;
        runtime::Session s(m, cpu_cluster(1), q, o);
        s.step();
        s.step();
        Capacities caps;
        caps.gpus_per_node = 1;
        const MemoryReport r = memory_estimate(m, q, caps);
        const auto walked = s.peak_bytes();
        INFO("optimizer on " << (where.cpu > 0 ? "cpu" : "ssd") << ": walk " << walked[1] << " B host, " << walked[2] << " B ssd; model "
                             << r.cpu_bytes << ", " << r.ssd_bytes);
        if (where.cpu > 0) {
            CHECK(walked[1] == Approx(r.cpu_bytes).epsilon(1e-12));
            params = r.cpu_bytes / 16;
        } else {
            CHECK(walked[2] == Approx(r.ssd_bytes).epsilon(0.02));
            CHECK(walked[1] == Approx(r.cpu_bytes).epsilon(1e-12));
            CHECK(walked[1] == Approx(18 * params).epsilon(1e-12));
        }
    }
    // The weights homed on the host as well (ZeRO-Offload's offload_param): bf16 weights, fp32
    // master, m, v and gradients there, 18 B a parameter, to the byte.
    PlanSpec q = p;
    q.precision = Precision::bf16;
    q.zero_stage = 3;
    q.offload.optimizer = TierSplit{0, 1, 0};
    q.offload.params = TierSplit{0, 1, 0};
    runtime::Session s(m, cpu_cluster(1), q, o);
    s.step();
    s.step();
    Capacities caps;
    caps.gpus_per_node = 1;
    const MemoryReport r = memory_estimate(m, q, caps);
    CHECK(s.peak_bytes()[1] == Approx(r.cpu_bytes).epsilon(1e-12));
    CHECK(r.cpu_bytes == Approx(18 * params).epsilon(1e-12));
    // On the GPU the fetched units are 2-byte weights. The model peaks at the loss, where its
    // per-layer gradient workspace sits beside the fp32 logits (micro-batch 2 x 32 tokens x vocab
    // 64); the walk peaks elsewhere, 9 % lower at this size.
    INFO("gpu: walk " << s.peak_bytes()[0] << " B, model " << r.hbm_bytes - kFrameworkReserveBytes << " B");
    CHECK(s.peak_bytes()[0] == Approx(r.hbm_bytes - kFrameworkReserveBytes).epsilon(0.10));
    CHECK(walk[1] < walk[0]);
    CHECK(walk[1] - walk[0] == Approx(model[1] - model[0]).epsilon(0.20));
}

TEST_CASE("the ssd tier: O_DIRECT where the filesystem allows it, the page cache where it does not", "[runtime][ssd]") {
    // Adam's moments in the ssd file: the loss curve of the optimizer on the GPU, wherever the file is.
    ModelSpec m = tiny_llama(2);
    PlanSpec p = cpu_plan();
    const std::vector<double> ref = losses(m, p, 3);
    p.zero_stage = 1;
    p.offload.optimizer = TierSplit{0.0, 0.0, 1.0};
    std::vector<std::string> dirs{std::filesystem::temp_directory_path().string()};
    if (std::filesystem::is_directory("/dev/shm")) dirs.push_back("/dev/shm");  // tmpfs: O_DIRECT refused
    for (const std::string& dir : dirs) {
        INFO(dir);
        runtime::RunOptions o;
        o.ssd_dir = dir;
        const std::vector<double> got = losses(m, p, 3, o);
        for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(ref[i]).epsilon(1e-5));
    }
}

TEST_CASE("what the runtime cannot execute is refused with the field named", "[runtime]") {
    ModelSpec m = tiny_gpt();
    m.moe = MoeSpec{};
    m.moe->experts = 4;
    m.moe->top_k = 2;
    CHECK_NOTHROW(runtime::Session(m, cpu_cluster(1), cpu_plan(), {}));
    // MoE runs under TP only with SP.
    CHECK_THROWS_WITH(runtime::Session(m, cpu_cluster(2), cpu_plan(2), {}), Catch::Contains("plan.tp = 2"));
    {
        PlanSpec p = cpu_plan(1, 1, 2);
        p.ep = 2;
        CHECK_NOTHROW(runtime::Session(m, cpu_cluster(2), p, {}));
        p.moe_a2a_overlap = true;  // combined 1F1B's merged steps (test_parallel.cpp runs them)
        CHECK_NOTHROW(runtime::Session(m, cpu_cluster(2), p, {}));
        p.moe_a2a_overlap = false;
        p.ep = 1;
        p.expert_tp = 2;  // an expert-TP group without TP and SP: the lowering gathers nothing over it
        CHECK_THROWS_WITH(runtime::Session(m, cpu_cluster(2), p, {}), Catch::Contains("plan.expert_tp = 2"));
        p.expert_tp = 0;
        p.zero_stage = 3;
        CHECK_NOTHROW(runtime::Session(m, cpu_cluster(2), p, {}));
        p.zero_stage = 1;
        p.offload.optimizer = TierSplit{0, 1, 0};
        CHECK_NOTHROW(runtime::Session(m, cpu_cluster(2), p, {}));
        p.offload.params = TierSplit{0, 1, 0};
        p.zero_stage = 3;
        CHECK_NOTHROW(runtime::Session(m, cpu_cluster(2), p, {}));
    }
    {
        ModelSpec q = tiny_llama();
        q.qk_norm = true;
        CHECK_NOTHROW(runtime::Session(q, cpu_cluster(1), cpu_plan(), {}));
        CHECK_NOTHROW(runtime::Session(q, cpu_cluster(2), cpu_plan(2), {}));
        // QK-norm, MoE with or without token dropping and expert groups: the cuda backend runs them
        // (test_cuda_emulated.cpp, test_device_emulated.cpp), so those plans get as far as opening
        // the device.
        runtime::RunOptions cuda;
        cuda.backend = runtime::Backend::cuda;
        ModelSpec dropping = tiny_moe(), grouped = tiny_moe();
        dropping.moe->capacity_factor = 1.25;
        grouped.moe->router_groups = 2;
        grouped.moe->router_group_topk = 1;
        for (const ModelSpec& ok : {q, tiny_moe(), dropping, grouped}) {
            try {
                runtime::Session s(ok, cpu_cluster(1), cpu_plan(), cuda);
            } catch (const std::exception& e) {
                CHECK_THAT(e.what(), !Catch::Contains("qk_norm") && !Catch::Contains("model.moe"));
            }
        }
        // fp16 too, since stop 54 (IEEE halves and the unscale on the device: test_device_emulated.cpp):
        // it gets as far as opening the device.
        PlanSpec h = cpu_plan();
        h.precision = Precision::fp16;
        try {
            runtime::Session s(tiny_gpt(), cpu_cluster(1), h, cuda);
        } catch (const std::exception& e) {
            CHECK_THAT(e.what(), !Catch::Contains("plan.precision"));
        }
    }
    m.moe->capacity_factor = 1.25;  // token dropping runs, padded or not (test_moe.cpp)
    CHECK_NOTHROW(runtime::Session(m, cpu_cluster(1), cpu_plan(), {}));
    // FP8 runs on the cpu backend (test_fp8.cpp); the cuda backend has no FP8 GEMMs yet.
    PlanSpec p = cpu_plan();
    p.precision = Precision::fp8;
    CHECK_NOTHROW(runtime::Session(tiny_gpt(), cpu_cluster(1), p, {}));
    {
        runtime::RunOptions cuda;
        cuda.backend = runtime::Backend::cuda;
        CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(1), p, cuda), Catch::Contains("plan.precision = fp8 with --backend cuda"));
    }
    // fp16 runs with loss scaling (test_fp16.cpp), not under a delayed host update; Adam's moments
    // are fp32 or bf16, and fp32 in the SSD file.
    p.precision = Precision::fp16;
    p.offload.optimizer = TierSplit{0, 1, 0};
    p.lock_free_update = true;
    CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(1), p, {}), Catch::Contains("plan.lock_free_update"));
    p.offload.optimizer = TierSplit{};
    p.lock_free_update = false;
    p.precision = Precision::bf16;
    p.exp_avg_sq_dtype = Precision::fp16;
    CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(1), p, {}), Catch::Contains("plan.exp_avg_sq_dtype = fp16"));
    p.exp_avg_sq_dtype = Precision::bf16;
    p.offload.optimizer = TierSplit{0, 0, 1};
    CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(1), p, {}), Catch::Contains("plan.exp_avg_sq_dtype = bf16 with plan.offload.optimizer.ssd"));
    p.exp_avg_sq_dtype = Precision::fp32;
    p.offload.optimizer = TierSplit{};
    // Parameters: homed wholly on the host with the update there, or each data-parallel rank's
    // ZeRO-3 shard of them.
    PlanSpec q = cpu_plan();
    q.zero_stage = 3;
    q.offload.params = TierSplit{0.5, 0.5, 0.0};
    CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(1), q, {}), Catch::Contains("plan.offload.params"));
    q.offload.params = TierSplit{0.0, 1.0, 0.0};
    CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(1), q, {}), Catch::Contains("plan.offload.optimizer"));
    q.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
    q.dp = 2;
    q.zero_stage = 1;
    CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(2), q, {}), Catch::Contains("plan.zero_stage"));
    // Activations: offloaded wholly to host memory; gradients stay on the GPU.
    PlanSpec a = cpu_plan();
    a.offload.activations = TierSplit{0.5, 0.5, 0.0};
    CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(1), a, {}), Catch::Contains("plan.offload.activations"));
    a.offload.activations = TierSplit{0.0, 0.0, 1.0};
    CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(1), a, {}), Catch::Contains("on the SSD is not executed"));
    a = cpu_plan();
    a.offload.grads = TierSplit{0.0, 1.0, 0.0};
    a.offload.optimizer = TierSplit{0.0, 1.0, 0.0};
    CHECK_THROWS_WITH(runtime::Session(tiny_gpt(), cpu_cluster(1), a, {}), Catch::Contains("plan.offload.grads"));
    runtime::RunOptions walk;
    walk.memory_only = true;
    p.precision = Precision::fp8;
    CHECK_NOTHROW(runtime::Session(tiny_gpt(), cpu_cluster(1), p, walk));
}

TEST_CASE("spans cover every executed instruction of the step", "[runtime][trace]") {
    runtime::RunOptions o;
    o.record_spans = true;
    PlanSpec p = cpu_plan(2, 1, 1);
    runtime::Session s(tiny_gpt(), cpu_cluster(2), p, o);
    s.step();
    REQUIRE(s.traces().size() == 2);
    for (std::size_t r = 0; r < 2; ++r) {
        const auto& instrs = s.program().ranks[r].instrs;
        std::size_t expected = 0;
        for (const Instr& in : instrs) expected += in.kind != InstrKind::record && in.kind != InstrKind::wait;
        CHECK(s.traces()[r].spans.size() == expected);
        for (const auto& sp : s.traces()[r].spans) CHECK(sp.end_ns >= sp.start_ns);
        CHECK_FALSE(s.traces()[r].memory.empty());
    }
}
