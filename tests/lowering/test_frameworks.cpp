// plan.framework presets: the knobs each framework fixes come from its source (the expected
// values below are read from the frameworks' code, cited in lowering/src/spec/frameworks.cpp),
// explicit keys win, and a framework refuses what it cannot run, naming itself and the field.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "strata/common/error.hpp"
#include "strata/lowering/frameworks.hpp"
#include "strata/lowering/spec_io.hpp"

using namespace strata::sim;
using Catch::Matchers::Contains;

namespace {

const char* kModel = R"({"name": "m", "layers": 8, "hidden": 512, "heads": 8, "kv_heads": 4, "ffn_hidden": 1536,
                         "vocab": 1000, "seq_len": 256, "position": "rope"})";

PlanSpec plan(const std::string& fields) {
    return plan_from_json_text("{\"global_batch\": 64" + fields + "}", "p.json");
}

ClusterSpec cluster_for(const PlanSpec& p) {
    ClusterSpec c;
    c.name = "c";
    c.gpu = "H100-SXM5-80GB";
    c.nodes = 1;
    c.gpus_per_node = p.gpus();
    return c;
}

std::string refusal(const PlanSpec& p) {
    try {
        validate_plan(model_from_json_text(kModel, "m.json"), cluster_for(p), p, "p.json");
    } catch (const strata::InputError& e) {
        return e.path() + ": " + e.rule();
    }
    return "";
}

const PlanValueOrigin& origin_of(const std::vector<PlanValueOrigin>& all, const std::string& key) {
    for (const PlanValueOrigin& v : all)
        if (v.key == key) return v;
    FAIL("no key " << key);
    return all.front();
}

}  // namespace

TEST_CASE("a preset fills the knobs its framework fixes", "[frameworks]") {
    // Megatron-DeepSpeed of 2022 with TP and a pipeline: blocking p2p partitioned over TP (PipelineEngine),
    // autograd's unfused accumulation, fp32 accumulation under bf16 (BF16_Optimizer), no fused attention.
    const PlanSpec ds = plan(R"(, "framework": "megatron-deepspeed-2022", "tp": 2, "pp": 4, "zero_stage": 1)");
    CHECK(ds.framework == "megatron-deepspeed-2022");
    CHECK(ds.p2p_blocking);
    CHECK(ds.p2p_scatter_gather);
    CHECK_FALSE(ds.grad_accum_fusion);
    CHECK(ds.fp32_grads);
    CHECK_FALSE(ds.flash_attention);
    CHECK_FALSE(ds.overlap_grad_reduce);
    // ZeRO-1/2's optimizer step all-gathers the updated parameters itself (stage_1_and_2.py,
    // bf16_optimizer.py: all_gather_dp_groups in step()); ZeRO-3 fetches per module.
    CHECK_FALSE(ds.overlap_param_gather);
    CHECK_FALSE(plan(R"(, "framework": "deepspeed", "dp": 8, "zero_stage": 2)").overlap_param_gather);
    CHECK(plan(R"(, "framework": "deepspeed", "dp": 8, "zero_stage": 3)").overlap_param_gather);

    // The same framework in fp16 keeps 16-bit gradients; without a pipeline it sets no p2p knob.
    const PlanSpec fp16 = plan(R"(, "framework": "megatron-deepspeed-2022", "dp": 8, "precision": "fp16")");
    CHECK_FALSE(fp16.fp32_grads);
    CHECK_FALSE(fp16.p2p_blocking);

    // llm-foundry: eager elementwise ops, flash-attn's fused loss (no fp32 logits), FA2.
    const PlanSpec foundry = plan(R"(, "framework": "llm-foundry", "dp": 8, "zero_stage": 3)");
    CHECK(foundry.eager_elementwise);
    CHECK_FALSE(foundry.loss_upcast);
    CHECK(foundry.attention_kernel == AttentionKernel::fa2);
    CHECK_FALSE(foundry.grad_accum_fusion);

    // Hugging Face Trainer: ForCausalLMLoss upcasts the logits and calls nn.functional.cross_entropy
    // on them (transformers loss/loss_utils.py), an eager log_softmax and nll_loss.
    const PlanSpec hf = plan(R"(, "framework": "hf-trainer", "dp": 8, "zero_stage": 3)");
    CHECK(hf.loss_upcast);
    CHECK(hf.eager_cross_entropy);
    CHECK(hf.eager_elementwise);

    // NeMo AutoModel (Automodel's auto_model.py, BackendConfig, MaskedCrossEntropy): a bf16 model
    // under FSDP2 with torch's Adam, no fp32 master, moments in bf16; TE attention; DeepEP allowed.
    const PlanSpec am = plan(R"(, "framework": "nemo-automodel", "dp": 8, "zero_stage": 3)");
    CHECK_FALSE(am.master_weights);
    CHECK(am.exp_avg_dtype == Precision::bf16);
    CHECK(am.exp_avg_sq_dtype == Precision::bf16);
    CHECK_FALSE(am.fp32_grads);
    CHECK(am.attention_kernel == AttentionKernel::fa3);
    CHECK(am.loss_upcast);
    CHECK(am.eager_cross_entropy);
    CHECK(am.eager_elementwise);
    CHECK(refusal(am).empty());
    PlanSpec deepep = am;  // its dispatcher is DeepEP's (BackendConfig dispatcher = "deepep")
    deepep.ep = 8;
    deepep.moe_dispatcher = MoeDispatcher::deepep;
    CHECK_FALSE(framework_refusal(deepep).has_value());
    // A float32 model (model.torch_dtype: float32) states its master and moments.
    const PlanSpec am32 = plan(R"(, "framework": "nemo-automodel", "dp": 8, "master_weights": true, "exp_avg_dtype": "fp32", "exp_avg_sq_dtype": "fp32")");
    CHECK(am32.has_master());
    CHECK(am32.exp_avg_dtype == Precision::fp32);
    CHECK_THAT(refusal(plan(R"(, "framework": "nemo-automodel", "dp": 8, "zero_stage": 1)")), Contains("nemo-automodel") && Contains("zero_stage"));

    // torchtitan's async TP (Inductor's pass, compile.enable_async_tensor_parallel) is its TP
    // overlap: with torch.compile only (CompileConfig refuses it otherwise).
    CHECK(refusal(plan(R"(, "framework": "torchtitan-compile", "tp": 4, "sequence_parallel": true, "tp_comm_overlap": true)")).empty());
    CHECK_THAT(refusal(plan(R"(, "framework": "torchtitan", "tp": 4, "sequence_parallel": true, "tp_comm_overlap": true)")),
               Contains("plan.tp_comm_overlap") && Contains("torch.compile"));
    CHECK_THAT(refusal(plan(R"(, "framework": "llm-foundry", "tp": 4, "sequence_parallel": true, "tp_comm_overlap": true)")),
               Contains("plan.tp_comm_overlap"));

    // Megatron-Bridge's performance recipes: TP overlap only with tp > 1 and sequence parallelism.
    CHECK(plan(R"(, "framework": "megatron-bridge", "tp": 4, "sequence_parallel": true)").tp_comm_overlap);
    CHECK_FALSE(plan(R"(, "framework": "megatron-bridge", "tp": 1, "dp": 4)").tp_comm_overlap);
    // "nemo2" is the same preset; NeMo 1.x's launcher reduced gradients in bf16 instead.
    CHECK(plan(R"(, "framework": "nemo2", "dp": 4)").framework == "megatron-bridge");
    CHECK(plan(R"(, "framework": "megatron-bridge", "dp": 4)").fp32_grads);
    CHECK_FALSE(plan(R"(, "framework": "nemo", "dp": 4)").fp32_grads);

    // Megatron-Core's command line: overlap flags off unless given; fp32 gradients under bf16.
    const PlanSpec mc = plan(R"(, "framework": "megatron-core", "dp": 4)");
    CHECK_FALSE(mc.overlap_grad_reduce);
    CHECK(mc.fp32_grads);
    CHECK(mc.grad_accum_fusion);
}

TEST_CASE("keys written in the plan win over the preset, and explain-plan says which is which", "[frameworks]") {
    const PlanSpec p = plan(R"(, "framework": "torchtitan", "dp": 8, "zero_stage": 3, "eager_elementwise": false)");
    CHECK_FALSE(p.eager_elementwise);  // the user's torch.compile
    CHECK(p.attention_kernel == AttentionKernel::fa2);
    const std::vector<PlanValueOrigin> why = explain_plan(p);
    CHECK(origin_of(why, "eager_elementwise").origin == "plan");
    CHECK_THAT(origin_of(why, "attention_kernel").origin, Contains("framework torchtitan") && Contains("scaled_dot_product_attention"));
    CHECK(origin_of(why, "attention_kernel").value_json == "\"fa2\"");
    CHECK(origin_of(why, "cp").origin == "default");
    CHECK(origin_of(why, "dp").origin == "plan");
}

TEST_CASE("a plan that states unfused attention keeps it under a preset that names a fused kernel", "[frameworks]") {
    // DeepSpeed of 2021 (ZeRO-3 Offload) or Hugging Face with attn_implementation "eager" ran
    // attention unfused; the preset's FlashAttention-2 names the fused kernel when there is one.
    // Before, the preset's attention_kernel with the plan's flash_attention false was refused.
    for (const char* fw : {"deepspeed", "hf-trainer", "torchtitan", "llm-foundry"}) {
        INFO(fw);
        const PlanSpec p = plan(std::string(R"(, "dp": 8, "zero_stage": 3, "flash_attention": false, "framework": ")") + fw + "\"");
        CHECK_FALSE(p.flash_attention);
        CHECK(p.attention_kernel != AttentionKernel::fa2);
        CHECK(refusal(p).empty());
        CHECK(plan(std::string(R"(, "dp": 8, "zero_stage": 3, "framework": ")") + fw + "\"").attention_kernel == AttentionKernel::fa2);
    }
}

TEST_CASE("a plan with a framework round-trips through its canonical JSON", "[frameworks]") {
    for (const std::string& fw : framework_names()) {
        const std::string pp = fw == "llm.c" || fw == "hf-trainer" || fw == "llm-foundry" ? "1" : "2";
        const std::string zero = fw == "torchtitan" || fw == "torchtitan-compile" || fw == "llm-foundry" || fw == "nemo-automodel" ? "0" : "1";
        const PlanSpec p = plan(", \"framework\": \"" + fw + "\", \"pp\": " + pp + ", \"dp\": 4, \"zero_stage\": " + zero);
        CAPTURE(fw);
        CHECK(refusal(p).empty());
        const std::string text = to_json_text(p);
        CHECK(to_json_text(plan_from_json_text(text, "again.json")) == text);
        // Every knob the preset names is a plan key whose value the reader accepts as written.
        for (const FrameworkKnob& k : framework_knobs(fw, p)) {
            CAPTURE(k.key);
            CHECK(text.find("\"" + k.key + "\": " + k.value_json) != std::string::npos);
        }
    }
}

TEST_CASE("a framework refuses what it cannot run, naming itself and the field", "[frameworks]") {
    // DeepSpeed's PipelineEngine has no interleaved schedule.
    CHECK_THAT(refusal(plan(R"(, "framework": "deepspeed", "pp": 2, "vpp": 2, "schedule": "interleaved-1f1b", "dp": 2)")),
               Contains("plan.schedule") && Contains("\"deepspeed\""));
    // ZeRO-2 under DeepSpeed's pipeline engine: upstream asserts (the p2p rule names it).
    CHECK_THAT(refusal(plan(R"(, "framework": "deepspeed", "pp": 2, "dp": 2, "zero_stage": 2)")), Contains("zero_stage"));
    // torchtitan runs FSDP (ZeRO-3) under a pipeline; there is no ZeRO-1 in FSDP.
    CHECK(refusal(plan(R"(, "framework": "torchtitan", "pp": 2, "dp": 4, "zero_stage": 3)")).empty());
    CHECK_THAT(refusal(plan(R"(, "framework": "torchtitan", "dp": 4, "zero_stage": 1)")), Contains("plan.zero_stage"));
    // Data-parallel-only frameworks.
    CHECK_THAT(refusal(plan(R"(, "framework": "llm.c", "tp": 2, "dp": 4)")), Contains("plan.tp") && Contains("llm.c"));
    CHECK_THAT(refusal(plan(R"(, "framework": "hf-trainer", "pp": 2, "dp": 4)")), Contains("plan.pp"));
    // Context parallelism before Megatron-Core.
    CHECK_THAT(refusal(plan(R"(, "framework": "megatron-lm-2021", "cp": 2, "dp": 2)")), Contains("plan.cp"));
    CHECK(refusal(plan(R"(, "framework": "megatron-core", "cp": 2, "dp": 2)")).empty());
    // DeepSpeed's sequence parallelism is Ulysses, not a ring: the preset says a2a, a ring is
    // refused and the message says which; DeepSpeed of 2021 had neither.
    const PlanSpec ulysses = plan(R"(, "framework": "deepspeed", "cp": 2, "dp": 2)");
    CHECK(ulysses.cp_comm_type == CpCommType::a2a);
    CHECK(refusal(ulysses).empty());
    CHECK_THAT(refusal(plan(R"(, "framework": "deepspeed", "cp": 2, "dp": 2, "cp_comm_type": "p2p")")),
               Contains("plan.cp_comm_type") && Contains("Ulysses"));
    CHECK_THAT(refusal(plan(R"(, "framework": "deepspeed-2021", "cp": 2, "dp": 2)")), Contains("plan.cp") && Contains("2023"));
    CHECK(plan(R"(, "framework": "deepspeed", "dp": 4)").cp_comm_type == CpCommType::p2p);  // no CP: nothing to set
    // Expert parallelism: Megatron-DeepSpeed ran DeepSpeed-MoE's models with it; Megatron-LM 2021 had none.
    PlanSpec moe = plan(R"(, "dp": 4)");
    moe.ep = 4;
    moe.framework = "megatron-deepspeed-2022";
    CHECK_FALSE(framework_refusal(moe).has_value());
    moe.framework = "megatron-lm-2021";
    REQUIRE(framework_refusal(moe).has_value());
    CHECK(framework_refusal(moe)->field == "plan.ep");
    // FSDP's CPU offload (torchtitan's enable_cpu_offload: FSDP2's CPUOffloadPolicy; Composer's
    // cpu_offload) moves parameters, gradients and optimizer states to the host together.
    CHECK(refusal(plan(R"(, "framework": "torchtitan", "dp": 4, "zero_stage": 3, "offload": {"optimizer": "cpu", "params": "cpu"})")).empty());
    CHECK_THAT(refusal(plan(R"(, "framework": "torchtitan", "dp": 4, "zero_stage": 3, "offload": {"optimizer": "cpu"})")),
               Contains("plan.offload") && Contains("CPUOffloadPolicy"));
    CHECK_THAT(refusal(plan(R"(, "framework": "llm-foundry", "dp": 4, "zero_stage": 3, "offload": {"optimizer": {"gpu": 0.5, "cpu": 0.5}, "params": "cpu"})")),
               Contains("plan.offload"));
    CHECK(refusal(plan(R"(, "framework": "deepspeed", "dp": 4, "zero_stage": 1, "offload": {"optimizer": "cpu"})")).empty());  // ZeRO-Offload
    // A part of the optimizer offloaded: DeepSpeed's ratio, ZeRO-3 only (and not before 2023).
    CHECK_THAT(refusal(plan(R"(, "framework": "deepspeed", "dp": 4, "zero_stage": 1, "offload": {"optimizer": {"gpu": 0.5, "cpu": 0.5}})")),
               Contains("plan.offload.optimizer") && Contains("ratio"));
    CHECK(refusal(plan(R"(, "framework": "deepspeed", "dp": 4, "zero_stage": 3, "offload": {"optimizer": {"gpu": 0.5, "cpu": 0.5}})")).empty());
    CHECK_THAT(refusal(plan(R"(, "framework": "deepspeed-2021", "dp": 4, "zero_stage": 3, "precision": "fp16", "offload": {"optimizer": {"gpu": 0.5, "cpu": 0.5}})")),
               Contains("2023"));
    // No framework: no framework rule.
    CHECK(refusal(plan(R"(, "dp": 4, "zero_stage": 1)")).empty());
}

TEST_CASE("an unknown framework is an input error listing the known ones", "[frameworks]") {
    try {
        plan(R"(, "framework": "megatron", "dp": 4)");
        FAIL("accepted an unknown framework");
    } catch (const strata::InputError& e) {
        CHECK(e.path() == "plan.framework");
        CHECK_THAT(e.rule(), Contains("megatron-core") && Contains("torchtitan") && Contains("\"megatron\""));
    }
}

TEST_CASE("context parallelism's K/V exchange as each framework runs it", "[frameworks][cp]") {
    // torchtitan: parallelism.context_parallel_rotate_method defaults to "allgather" (job_config.py).
    const PlanSpec tt = plan(R"(, "framework": "torchtitan", "cp": 2, "dp": 4, "zero_stage": 3)");
    CHECK(tt.cp_comm_type == CpCommType::allgather);
    CHECK_THAT(origin_of(explain_plan(tt), "cp_comm_type").origin, Contains("framework torchtitan") && Contains("allgather"));
    CHECK(plan(R"(, "framework": "nemo-automodel", "cp": 2, "dp": 4, "zero_stage": 3)").cp_comm_type == CpCommType::allgather);
    // Only under CP; a stated exchange wins; Megatron-Core keeps its ring unless told.
    CHECK(plan(R"(, "framework": "torchtitan", "dp": 8, "zero_stage": 3)").cp_comm_type == CpCommType::p2p);
    CHECK(plan(R"(, "framework": "torchtitan", "cp": 2, "dp": 4, "zero_stage": 3, "cp_comm_type": "p2p")").cp_comm_type == CpCommType::p2p);
    CHECK(plan(R"(, "framework": "megatron-core", "cp": 2, "dp": 4)").cp_comm_type == CpCommType::p2p);
    CHECK(refusal(plan(R"(, "framework": "megatron-core", "cp": 2, "dp": 4, "cp_comm_type": "allgather")")).empty());
    // PyTorch's context-parallel SDPA has no head split; DeepSpeed has nothing but Ulysses.
    CHECK_THAT(refusal(plan(R"(, "framework": "torchtitan", "cp": 2, "dp": 4, "zero_stage": 3, "cp_comm_type": "a2a")")),
               Contains("plan.cp_comm_type") && Contains("allgather") && Contains("torchtitan"));
    CHECK_THAT(refusal(plan(R"(, "framework": "deepspeed", "cp": 2, "dp": 4, "cp_comm_type": "allgather")")),
               Contains("plan.cp_comm_type") && Contains("a2a"));
}

TEST_CASE("torchtitan's async TP reduces in bf16 under FP8", "[frameworks][tp_overlap]") {
    // torch's fused_scaled_matmul_reduce_scatter reduce-scatters the scaled matmul's bf16 output;
    // Transformer Engine's FP8 userbuffers reduce the FP8 output (the default).
    CHECK_FALSE(plan(R"(, "framework": "torchtitan-compile", "tp": 8, "sequence_parallel": true, "tp_comm_overlap": true)").tp_overlap_rs_fp8);
    CHECK(plan(R"(, "framework": "megatron-bridge", "tp": 8, "sequence_parallel": true, "tp_comm_overlap": true)").tp_overlap_rs_fp8);
    CHECK(plan(R"(, "tp": 8, "sequence_parallel": true, "tp_comm_overlap": true)").tp_overlap_rs_fp8);
}

TEST_CASE("DualPipeV where its frameworks run it, and torchtitan's EP overlap in its pairs", "[frameworks][dualpipev]") {
    // PyTorch's ScheduleDualPipeV is torchtitan's pipeline_parallel_schedule "DualPipeV"; it raises
    // for stages with torch.compile'd modules; DeepSpeed's PipelineEngine has only gpipe and 1F1B.
    const std::string v = R"(, "pp": 2, "vpp": 2, "schedule": "dualpipev", "dp": 4, "zero_stage": 3)";
    CHECK(refusal(plan(R"(, "framework": "torchtitan")" + v)).empty());
    CHECK_THAT(refusal(plan(R"(, "framework": "torchtitan-compile")" + v)),
               Contains("plan.schedule") && Contains("torch.compile") && Contains("\"torchtitan\""));
    CHECK_THAT(refusal(plan(R"(, "framework": "megatron-lm-2021", "pp": 2, "vpp": 2, "schedule": "dualpipev", "dp": 4)")),
               Contains("plan.schedule") && Contains("torchtitan"));
    CHECK(refusal(plan(R"(, "framework": "megatron-core", "pp": 2, "vpp": 2, "schedule": "dualpipev", "dp": 4)")).empty());
    // pipeline_parallel_expert_parallel_overlap defaults to True (job_config.py): the preset turns
    // the EP overlap on under DualPipeV with EP, and only there.
    const char* moe_model = R"({"name": "m", "layers": 8, "hidden": 512, "heads": 8, "kv_heads": 4, "ffn_hidden": 1536,
                               "vocab": 1000, "seq_len": 256, "position": "rope", "norm": "rmsnorm", "ffn": "swiglu",
                               "moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 512}})";
    auto refusal_moe = [&](const PlanSpec& p) -> std::string {
        try {
            validate_plan(model_from_json_text(moe_model, "m.json"), cluster_for(p), p, "p.json");
        } catch (const strata::InputError& e) {
            return e.path() + ": " + e.rule();
        }
        return "";
    };
    const PlanSpec ep = plan(R"(, "framework": "torchtitan", "ep": 4, "recompute": "none")" + v);
    CHECK(ep.moe_a2a_overlap);
    CHECK_THAT(origin_of(explain_plan(ep), "moe_a2a_overlap").origin, Contains("framework torchtitan"));
    CHECK(refusal_moe(ep).empty());
    CHECK_FALSE(plan(R"(, "framework": "torchtitan", "pp": 2, "dp": 4, "zero_stage": 3, "ep": 4)").moe_a2a_overlap);  // 1F1B
    CHECK_FALSE(plan(R"(, "framework": "torchtitan")" + v).moe_a2a_overlap);                                     // no EP
    // With activation checkpointing torchtitan raises NotImplementedError (get_dual_pipe_v_flag);
    // the overlap turned off, checkpointing runs.
    CHECK_THAT(refusal_moe(plan(R"(, "framework": "torchtitan", "ep": 4, "recompute": "full")" + v)),
               Contains("plan.recompute") && Contains("torchtitan"));
    CHECK(refusal_moe(plan(R"(, "framework": "torchtitan", "ep": 4, "recompute": "full", "moe_a2a_overlap": false)" + v)).empty());
    // Outside DualPipeV torchtitan has no EP overlap.
    CHECK_THAT(refusal_moe(plan(R"(, "framework": "torchtitan", "pp": 2, "dp": 4, "zero_stage": 3, "ep": 4, "moe_a2a_overlap": true)")),
               Contains("plan.moe_a2a_overlap"));
}

TEST_CASE("DeepSpeed's offloaded optimizer takes the gradients to the host under ZeRO-2/3, completing the plan's offload",
          "[frameworks][offload]") {
    // stage_1_and_2.py's cpu_offload moves each reduced bucket's gradient partition to the CPU
    // buffer its optimizer reads; stage3.py offloads the partitioned gradients with the optimizer.
    const PlanSpec z2 = plan(R"(, "framework": "deepspeed-2021", "dp": 8, "zero_stage": 2, "precision": "fp16", "offload": {"optimizer": "cpu"})");
    CHECK(z2.offload.optimizer.cpu == 1.0);
    CHECK(z2.offload.grads.cpu == 1.0);
    const std::vector<PlanValueOrigin> why = explain_plan(z2);
    CHECK_THAT(origin_of(why, "offload").origin, Contains("plan, completed by framework deepspeed-2021") && Contains("stage_1_and_2.py"));
    CHECK(plan(R"(, "framework": "deepspeed", "dp": 8, "zero_stage": 3, "offload": {"optimizer": "ssd"})").offload.grads.cpu == 1.0);
    // ZeRO-1 accumulates whole gradients on the GPU; a plan that places its gradients keeps them
    // where it says; Megatron-Core's optimizer offload leaves them in its GPU buffers.
    CHECK(plan(R"(, "framework": "deepspeed", "dp": 8, "zero_stage": 1, "offload": {"optimizer": "cpu"})").offload.grads.all_gpu());
    CHECK(plan(R"(, "framework": "deepspeed", "dp": 8, "zero_stage": 2, "offload": {"optimizer": "cpu", "grads": "gpu"})").offload.grads.all_gpu());
    CHECK(plan(R"(, "framework": "megatron-core", "dp": 8, "zero_stage": 2, "offload": {"optimizer": "cpu"})").offload.grads.all_gpu());
    CHECK(plan(R"(, "dp": 8, "zero_stage": 2, "offload": {"optimizer": "cpu"})").offload.grads.all_gpu());
    // The planner's path (apply_framework, no JSON) completes the offload the same way, and the
    // completed plan reads back from its canonical JSON unchanged.
    PlanSpec searched;
    searched.dp = 8;
    searched.global_batch = 64;
    searched.zero_stage = 2;
    searched.offload.optimizer = TierSplit{0, 1, 0};
    searched.framework = "deepspeed";
    apply_framework(searched);
    CHECK(searched.offload.grads.cpu == 1.0);
    CHECK(searched.offload.optimizer.cpu == 1.0);
    CHECK(to_json_text(plan_from_json_text(to_json_text(searched), "back.json")) == to_json_text(searched));
}

TEST_CASE("FSDP's CPU offload keeps the sharded gradients on the host too", "[frameworks][offload]") {
    // FSDP2's CPUOffloadPolicy: "Sharded gradients are copied device-to-host in backward, and the
    // optimizer step runs on CPU" (torch _fsdp_api.py); FSDP1's CPUOffload(offload_params=True)
    // likewise (_offload_grad). torchtitan, llm-foundry and the HF Trainer's FSDP complete a plan
    // that offloads the parameters and the optimizer with the gradients.
    for (const char* fw : {"torchtitan", "torchtitan-compile", "llm-foundry", "hf-trainer"}) {
        INFO(fw);
        const PlanSpec p = plan(std::string(R"(, "framework": ")") + fw +
                                R"(", "dp": 8, "zero_stage": 3, "offload": {"optimizer": "cpu", "params": "cpu"})");
        CHECK(p.offload.grads.cpu == 1.0);
        CHECK(p.streams_grads_to_host());
        CHECK_THAT(origin_of(explain_plan(p), "offload").origin, Contains("completed by framework") && Contains("CPUOffloadPolicy"));
        // Nothing offloaded, or the gradients placed by the plan: left alone.
        CHECK(plan(std::string(R"(, "framework": ")") + fw + R"(", "dp": 8, "zero_stage": 3)").offload.grads.all_gpu());
        CHECK(plan(std::string(R"(, "framework": ")") + fw +
                   R"(", "dp": 8, "zero_stage": 3, "offload": {"optimizer": "cpu", "params": "cpu", "grads": "gpu"})")
                  .offload.grads.all_gpu());
    }
}

TEST_CASE("torchtitan's selective is per-op SAC, and its loss under TP is loss_parallel", "[frameworks][torchtitan]") {
    // torchtitan distributed/activation_checkpoint.py: SelectiveAC (selective_ac_option 'op' in
    // train_configs/llama3_8b.toml at 9dec370) saves matmul and SDPA outputs; "selective" written
    // with the framework means that, not Megatron's core_attn list.
    const PlanSpec sel = plan(R"(, "framework": "torchtitan", "dp": 8, "zero_stage": 3, "recompute": "selective")");
    CHECK(sel.op_sac());
    CHECK(sel.recompute_policy == RecomputePolicy::op);
    CHECK(refusal(sel).empty());
    CHECK(plan(R"(, "framework": "torchtitan-compile", "dp": 8, "zero_stage": 3, "recompute": "selective")").op_sac());
    // Where the plan says otherwise, or op-level SAC is not modelled, the policy stays Megatron's.
    CHECK_FALSE(plan(R"(, "framework": "torchtitan", "dp": 8, "recompute": "selective", "recompute_modules": ["core_attn"])").op_sac());
    CHECK_FALSE(plan(R"(, "framework": "torchtitan", "dp": 8, "recompute": "selective", "recompute_policy": "modules")").op_sac());
    CHECK_FALSE(plan(R"(, "framework": "torchtitan", "dp": 4, "cp": 2, "recompute": "selective")").op_sac());
    CHECK(plan(R"(, "framework": "torchtitan", "dp": 4, "tp": 2, "sequence_parallel": true, "recompute": "selective")").op_sac());
    // torchtitan's TP is sequence-parallel (apply_tp: SequenceParallel norms): a plan that leaves
    // the field out gets it, and per-op SAC with it; one that states false is refused by name.
    const PlanSpec tp2 = plan(R"(, "framework": "torchtitan", "dp": 4, "tp": 2, "recompute": "selective")");
    CHECK(tp2.sequence_parallel);
    CHECK(tp2.op_sac());
    CHECK(refusal(tp2).empty());
    const PlanSpec no_sp = plan(R"(, "framework": "torchtitan", "dp": 4, "tp": 2, "sequence_parallel": false, "recompute": "selective")");
    CHECK_FALSE(no_sp.sequence_parallel);
    CHECK_FALSE(no_sp.op_sac());
    CHECK_THAT(refusal(no_sp), Contains("plan.sequence_parallel") && Contains("torchtitan"));
    // The planner states the layout it searches: the preset leaves it as searched, and the
    // framework's rule drops the layout torchtitan cannot run; the field stays out of what a
    // presets-only reading strips.
    PlanSpec searched = no_sp;
    apply_framework(searched);
    CHECK_FALSE(searched.sequence_parallel);
    CHECK(framework_refusal(searched).has_value());
    const std::vector<std::string>& keys = framework_knob_keys();
    CHECK(std::find(keys.begin(), keys.end(), "sequence_parallel") == keys.end());
    CHECK(std::find(keys.begin(), keys.end(), "loss_parallel") != keys.end());
    CHECK_FALSE(plan(R"(, "framework": "torchtitan", "dp": 8, "recompute": "full")").op_sac());
    CHECK_FALSE(plan(R"(, "framework": "megatron-core", "dp": 8, "recompute": "selective")").op_sac());
    // explain-plan names the preset as its origin, and a model the policy is not modelled for
    // (linear biases) is refused naming where the policy came from.
    CHECK_THAT(origin_of(explain_plan(sel), "recompute_policy").origin, Contains("torchtitan"));
    try {
        ModelSpec biased = model_from_json_text(kModel, "m.json");
        biased.linear_bias = true;
        validate_plan(biased, cluster_for(sel), sel, "p.json");
        FAIL("a biased model under the preset's op SAC was accepted");
    } catch (const strata::InputError& e) {
        CHECK(e.path() == "plan.recompute_policy");
        CHECK_THAT(e.rule(), Contains("torchtitan") && Contains("\"modules\""));
    }

    // train.py computes the loss inside loss_parallel() wherever TP is on (disable_loss_parallel
    // defaults to false); without TP there is nothing to shard.
    CHECK(plan(R"(, "framework": "torchtitan", "dp": 4, "tp": 2, "sequence_parallel": true)").eager_loss_parallel());
    CHECK_FALSE(plan(R"(, "framework": "torchtitan", "dp": 8)").loss_parallel);
    CHECK_FALSE(plan(R"(, "framework": "megatron-core", "dp": 4, "tp": 2, "sequence_parallel": true)").loss_parallel);
    // torchtitan pipelines with torch.distributed.pipelining (its per-micro-batch buffers); a
    // pipeline is what it describes, and DeepSpeed's engine is another.
    CHECK(plan(R"(, "framework": "torchtitan", "dp": 4, "pp": 2, "zero_stage": 3)").torch_pipelining);
    CHECK_FALSE(plan(R"(, "framework": "torchtitan", "dp": 8)").torch_pipelining);
    CHECK_FALSE(plan(R"(, "framework": "megatron-core", "dp": 4, "pp": 2)").torch_pipelining);
    CHECK_THAT(refusal(plan(R"(, "dp": 8, "torch_pipelining": true)")), Contains("plan.torch_pipelining") && Contains("pp >= 2"));
    CHECK_THAT(refusal(plan(R"(, "dp": 4, "pp": 2, "torch_pipelining": true, "p2p_blocking": true)")), Contains("plan.torch_pipelining"));
    // Stated by hand it must describe an eager loss under TP.
    CHECK_THAT(refusal(plan(R"(, "dp": 4, "tp": 2, "loss_parallel": true)")), Contains("plan.loss_parallel") && Contains("eager_cross_entropy"));
    CHECK(refusal(plan(R"(, "dp": 4, "tp": 2, "loss_parallel": true, "eager_cross_entropy": true)")).empty());
}
