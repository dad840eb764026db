# NVIDIA NeMo AutoModel's pre-training benchmarks on DGX-H100, BF16 (docs/performance-summary,
# mirror of 2026-08-22): Hugging Face models on FSDP2 with Transformer Engine kernels, each row
# with its configuration file under examples/llm_benchmark/. Data only: no I/O here.
import models as M

AUTOMODEL = ("NVIDIA-NeMo/Automodel docs/performance-summary.mdx, 'Pre-Training Performance', System: DGX-H100, "
             "Precision: BF16, row '{row}'; configuration examples/llm_benchmark/{cfg}")

COMMON_ASSUME = [
    "the model loaded in bf16 (auto_model.py: torch_dtype 'auto' -> torch.bfloat16) under FSDP2's "
    "MixedPrecisionPolicy(param_dtype bf16, reduce_dtype fp32): no fp32 master, bf16 sharded gradients (master_weights "
    "false, fp32_grads false; the fp32 reduce-scatter's wire bytes are not separated)",
    "autograd accumulates the micro-batches' weight gradients (grad_accum_fusion false)",
    "FSDP2 shards parameters, gradients and optimizer states: zero_stage 3",
    "DGX-H100: 8x ConnectX-7 NDR 400 Gb/s per node",
    "the step time and tokens/s/GPU are the table's; its 'Model TFLOPs/sec/GPU' has no stated FLOP formula",
]


def automodel_h100():
    return [
        {
            "id": "automodel-llama3-70b-64gpu",
            "publisher": "NVIDIA (NeMo AutoModel)",
            "source": AUTOMODEL.format(row="Llama3 70B", cfg="llama3_3/custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml"),
            "hardware": {"gpu": "H100-SXM5-80GB", "nodes": 8, "gpus_per_node": 8, "nic": "ib-ndr", "nics_per_node": 8},
            "model": M.LLAMA3_70B,
            "plan": {"tp": 1, "pp": 1, "dp": 32, "cp": 2, "ep": 1, "vpp": 1, "micro_batch": 1, "global_batch": 128,
                     "sequence_parallel": False, "schedule": "1f1b", "zero_stage": 3, "recompute": "full",
                     "precision": "bf16", "flash_attention": True, "attention_kernel": "fa2", "eager_elementwise": False,
                     "master_weights": False, "exp_avg_dtype": "fp32", "exp_avg_sq_dtype": "fp32", "fp32_grads": False,
                     "grad_accum_fusion": False, "loss_upcast": True, "eager_cross_entropy": True,
                     "cp_comm_type": "allgather"},
            "measured": {"step_time_s": 18.90, "tokens_per_s_per_gpu": 866.77, "outcome": "ran"},
            "framework": "nemo-automodel",
            "flops_convention": "none (step time and tokens/s published)",
            "assumptions": COMMON_ASSUME + [
                "distributed: tp 1, cp 2, pp 1, dp auto = 32; activation_checkpointing true: recompute full",
                "attn_implementation sdpa (required for cp > 1): PyTorch's flash backend, FlashAttention-2: attention_kernel fa2",
                "cp_comm_type allgather: PyTorch's context-parallel SDPA all-gathers the K/V shards by default (since stop 62)",
                "enable_compile true: Inductor fuses the elementwise ops (eager_elementwise false)",
                "optimizer transformer_engine FusedAdam: its moments default to fp32 (exp_avg_dtype fp32) on the bf16 weights",
                "loss MaskedCrossEntropy with fp32_upcast (its default): the preset's loss_upcast and eager_cross_entropy",
                "global batch 128, local batch 1: 4 micro-batches a rank",
            ],
            "completeness": "complete-with-assumptions",
        },
        {
            "id": "automodel-qwen3-30b-a3b-8gpu",
            "publisher": "NVIDIA (NeMo AutoModel)",
            "source": AUTOMODEL.format(row="Qwen3 MoE 30B", cfg="qwen/qwen3_moe_30b_te_deepep.yaml"),
            "hardware": {"gpu": "H100-SXM5-80GB", "nodes": 1, "gpus_per_node": 8, "nic": "ib-ndr", "nics_per_node": 8},
            # fake_balanced_gate: AutoModel's FakeBalancedGate (noise 0) hands token t experts 8t .. 8t+7.
            "model": dict(M.QWEN3_30B_A3B, moe=dict(M.QWEN3_30B_A3B["moe"], routing="round_robin")),
            "plan": {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "ep": 8, "vpp": 1, "micro_batch": 4, "global_batch": 512,
                     "sequence_parallel": False, "schedule": "1f1b", "zero_stage": 3, "recompute": "full",
                     "precision": "bf16", "flash_attention": True, "attention_kernel": "fa3", "moe_dispatcher": "deepep",
                     "master_weights": False, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16", "fp32_grads": False,
                     "grad_accum_fusion": False, "eager_elementwise": True, "loss_upcast": False, "eager_cross_entropy": True},
            "measured": {"step_time_s": 21.773, "tokens_per_s_per_gpu": 12040.0, "outcome": "ran"},
            "framework": "nemo-automodel",
            "stated_knobs": ["loss_upcast"],  # the config's loss_fn: MaskedCrossEntropy(fp32_upcast: false)
            "flops_convention": "none (step time and tokens/s published)",
            "assumptions": COMMON_ASSUME + [
                "distributed: fsdp2 over 8, ep_size 8, tp/cp/pp 1; activation_checkpointing true: recompute full",
                "backend: attn te (cuDNN fused attention: attention_kernel fa3), linear te, rms_norm te, rope_fusion, experts gmm "
                "(grouped GEMM), dispatcher deepep; the HF model's activation products and residual adds eager (eager_elementwise)",
                "fake_balanced_gate: tokens spread evenly over the experts (no load skew); its FakeBalancedGate "
                "(components/moe/layers.py, noise 0) gives token t experts 8t .. 8t+7 mod 128, all on one of the 8 "
                "EP ranks (16 experts each), so DeepEP sends each token to one GPU: model.moe.routing round_robin "
                "(since stop 52)",
                "optimizer torch.optim.Adam on the bf16 parameters: bf16 moments (the preset)",
                "loss MaskedCrossEntropy(fp32_upcast: false): loss_upcast false",
                "global batch 512, local batch 4: 16 micro-batches a rank",
            ],
            "completeness": "complete-with-assumptions",
        },
    ]


def all_entries():
    return automodel_h100()
