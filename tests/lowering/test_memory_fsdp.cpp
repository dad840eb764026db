// PyTorch FSDP's mixed precision (plan.fp32_param_shards): the shards are the fp32 parameters the
// optimizer updates, the 16-bit weights exist only as the gathers' output, and the sharded
// gradients take the parameters' type. Per parameter and rank over dp ranks: 4/dp (shard) +
// 4/dp (gradient shard) + 8/dp (m, v) = 16/dp, where Megatron's / DeepSpeed's layout keeps a
// 2-byte shard beside a 12-byte fp32 optimizer state: 2/dp + 2/dp + 12/dp, or 18/dp with fp32
// gradients (torchtitan's reduce_dtype float32). Sources: torch distributed/fsdp/_fully_shard/
// _fsdp_param.py (the sharded parameter keeps its original dtype; all-gather inputs are cast to
// param_dtype), torchtitan distributed/fsdp.py (MixedPrecisionPolicy(bf16, float32) over fp32).
#include <catch2/catch.hpp>

#include <string>

#include "strata/common/error.hpp"
#include "strata/lowering/memory.hpp"
#include "strata/lowering/model.hpp"
#include "strata/lowering/spec_io.hpp"

using namespace strata::sim;
using Catch::Matchers::Contains;

namespace {

// Llama 3 8B's shape: 32 layers of 4096, GQA 32/8 heads, SwiGLU 14,336, 128,256 tokens, untied.
const char* kLlama3_8b = R"({"name": "llama-3-8b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
    "ffn_hidden": 14336, "ffn": "swiglu", "norm": "rmsnorm", "position": "rope", "vocab": 128256, "seq_len": 8192})";

ModelSpec llama3_8b() { return model_from_json_text(kLlama3_8b, "llama-3-8b.json"); }

Capacities h100() {
    Capacities c;
    c.hbm_bytes = 80e9;
    c.cpu_bytes_per_node = 2e12;
    c.ssd_bytes_per_node = 4 * kDefaultSsdDriveBytes;
    c.gpus_per_node = 8;
    return c;
}

PlanSpec fsdp8(const std::string& extra = "", int zero_stage = 3) {
    return plan_from_json_text(R"({"dp": 8, "zero_stage": )" + std::to_string(zero_stage) +
                                   R"(, "micro_batch": 1, "global_batch": 8, "precision": "bf16")" + extra + "}",
                               "p.json");
}

double states_per_param(const ModelSpec& m, const PlanSpec& p) {
    const MemoryReport r = memory_estimate(m, p, h100());
    const StageMemory& st = r.stages[0];
    return (st.weights_bytes + st.grads_bytes + st.optimizer_bytes) / stage_params(m, p, 0).total();
}

std::string refusal(const std::string& extra, int zero_stage = 3) {
    try {
        validate_plan(llama3_8b(), ClusterSpec{}, fsdp8(extra, zero_stage), "p.json");
    } catch (const strata::InputError& e) {
        return e.path() + ": " + e.rule();
    }
    return "";
}

}  // namespace

TEST_CASE("FSDP's fp32 shards: 16 bytes a parameter over dp, no 16-bit shard, no master", "[memory][fsdp]") {
    const ModelSpec m = llama3_8b();
    // Megatron / DeepSpeed layout, 2-byte gradients: (2 + 2 + 12) / 8.
    CHECK(states_per_param(m, fsdp8()) == Approx(16.0 / 8));
    // With fp32 gradients (torchtitan before this knob): (2 + 4 + 12) / 8 = 18 / 8.
    CHECK(states_per_param(m, fsdp8(R"(, "fp32_grads": true)")) == Approx(18.0 / 8));
    // FSDP: (4 + 4 + 8) / 8, whether the reduction runs in fp32 (torchtitan) or in bf16 (FSDP1's
    // llm-foundry PURE policy: the reduced shard is cast back to the parameters' fp32).
    for (const char* grads : {R"(, "fp32_grads": true)", ""}) {
        INFO(grads);
        const PlanSpec p = fsdp8(std::string(R"(, "fp32_param_shards": true)") + grads);
        CHECK(states_per_param(m, p) == Approx(16.0 / 8));
        const MemoryReport r = memory_estimate(m, p, h100());
        const StageMemory& st = r.stages[0];
        const double n = stage_params(m, p, 0).total();
        CHECK(st.weights_bytes == Approx(4.0 * n / 8));
        CHECK(st.grads_bytes == Approx(4.0 * n / 8));
        CHECK(st.optimizer_bytes == Approx(8.0 * n / 8));  // m and v only
    }
    // Llama 3 8B has 8,030,261,248 parameters: at dp 8 the fp32-gradient plan's 18 B become 16,
    // 2.0 GB a rank less (the published FSDP runs' 8-GPU case).
    const PlanSpec tt = fsdp8(R"(, "fp32_grads": true, "fp32_param_shards": true)");
    const double saved = (18.0 - 16.0) / 8 * stage_params(m, tt, 0).total();
    CHECK(stage_params(m, tt, 0).total() == Approx(8030261248.0));
    CHECK(saved == Approx(2.0076e9).epsilon(1e-3));
    // The fused update moves no 2-byte copy: fp32 shard read and written, fp32 gradient read, both
    // moments read and written: 8 + 4 + 16 = 28 bytes, against 8 + 2 + 4 + 16 = 30.
    CHECK(tt.adam_gpu_bytes_per_param() == 28.0);
    CHECK(fsdp8(R"(, "fp32_grads": true)").adam_gpu_bytes_per_param() == 30.0);
}

TEST_CASE("FSDP's fp32 shards: only where FSDP keeps them", "[memory][fsdp]") {
    // One data-parallel rank shards nothing: the knob changes nothing.
    PlanSpec one = fsdp8(R"(, "fp32_grads": true, "fp32_param_shards": true)");
    one.dp = 1;
    one.global_batch = 1;
    CHECK_FALSE(one.fsdp_fp32_shards());
    CHECK(states_per_param(llama3_8b(), one) == Approx(18.0));
    CHECK_THAT(refusal(R"(, "fp32_param_shards": true)", 1), Contains("plan.fp32_param_shards") && Contains("zero_stage = 3"));
    CHECK_THAT(refusal(R"(, "master_weights": false, "fp32_param_shards": true)"), Contains("master_weights"));
    CHECK_THAT(refusal(R"(, "offload": {"optimizer": "cpu"}, "fp32_param_shards": true)"), Contains("offload"));
    CHECK(refusal(R"(, "fp32_param_shards": true)").empty());
}

TEST_CASE("FSDP's fp32 shards: the PyTorch FSDP presets set them, the others do not", "[memory][fsdp][frameworks]") {
    for (const char* fw : {"torchtitan", "torchtitan-compile", "llm-foundry", "hf-trainer"}) {
        INFO(fw);
        CHECK(fsdp8(std::string(R"(, "framework": ")") + fw + "\"").fp32_param_shards);
        // Not below ZeRO-3, nor with anything offloaded (FSDP's CPU offload is not modelled).
        CHECK_FALSE(fsdp8(std::string(R"(, "framework": ")") + fw + "\"", 2).fp32_param_shards);
        CHECK_FALSE(fsdp8(std::string(R"(, "offload": {"optimizer": "cpu"}, "framework": ")") + fw + "\"").fp32_param_shards);
    }
    // DeepSpeed's ZeRO-3 keeps 16-bit partitions beside fp32 ones (stage3.py); Megatron's
    // distributed optimizer a separate fp32 master.
    for (const char* fw : {"deepspeed", "megatron-core"}) {
        INFO(fw);
        CHECK_FALSE(fsdp8(std::string(R"(, "framework": ")") + fw + "\"").fp32_param_shards);
    }
    // An explicit key wins over the preset.
    CHECK_FALSE(fsdp8(R"(, "framework": "torchtitan", "fp32_param_shards": false)").fp32_param_shards);
}
