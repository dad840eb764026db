# torchtitan's published Llama 3.1 8B FSDP runs (the PyTorch team at Meta, end of 2024): TPS/GPU
# and max reserved memory, with and without torch.compile, on 8 and 128 H100 96GB HBM2e
# (Grand Teton). Rows are copied as published; the plan fields follow the benchmark's text and
# torchtitan's code at the commit it names. Data only: no I/O here.
import models as M

TORCHTITAN = ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table {t} "
              "(torchtitan 9dec370, torch 1963fc8, 2024-12)")
GIB = 2.0 ** 30

COMMON_ASSUME = [
    "FSDP (zero_stage 3) as FSDP2 fully_shard with MixedPrecisionPolicy(bf16 params, fp32 reduce): "
    "torchtitan's --training.mixed_precision_reduce default float32 -> fp32_grads; FSDP2 keeps the "
    "sharded parameters in fp32 (the optimizer's, cast to bf16 at each all-gather) and no separate bf16 "
    "shard -> fp32_param_shards (since stop 52; before, Strata's bf16 shard + fp32 master was 2 bytes "
    "per parameter / dp larger)",
    "selective activation checkpointing = torchtitan's selective_ac_option 'op' (train_configs/"
    "llama3_8b.toml at that commit): recompute_policy op",
    "loss F.cross_entropy(pred.flatten(0, 1).float(), labels) in eager (train.py; torchtitan leaves the "
    "loss uncompiled): eager_cross_entropy",
    "SDPA on PyTorch's flash backend (FlashAttention-2): attention_kernel fa2",
    "memory = max_reserved_gib of torch.cuda.memory_stats (torchtitan metrics.py), the maximum over "
    "ranks; TPS/GPU read at step 90",
    "network: 400 Gb/s RDMA per GPU (RoCE on Grand Teton): roce-400g; hosts' CPU, DRAM and SSDs from DGX-H100",
    "peak FLOPs of the 96GB HBM2e H100 are unpublished ('between SXM and NVL'): the hwdb row takes the midpoint",
]


def torchtitan_llama3_8b():
    rows = [  # table, gpus, compile, TPS/GPU, GiB
        (1, 8, False, 5762, 82.4),
        (1, 8, True, 6667, 77.0),
        (3, 128, False, 5605, 67.0),
        (3, 128, True, 6514, 62.0),
    ]
    out = []
    for table, gpus, compiled, tps, gib in rows:
        assume = list(COMMON_ASSUME)
        assume.append("torch.compile per transformer block (fused elementwise kernels): eager_elementwise false"
                      if compiled else "no torch.compile: eager elementwise kernels (eager_elementwise)")
        out.append({
            "id": f"torchtitan-llama3.1-8b-fsdp{gpus}-{'compile' if compiled else 'eager'}-h100-96g",
            "publisher": "Meta (PyTorch torchtitan)",
            "source": TORCHTITAN.format(t=table) + (" row 'FSDP + torch.compile'" if compiled else " row 'FSDP'"),
            "hardware": {"gpu": "H100-SXM5-96GB-HBM2e", "nodes": gpus // 8, "gpus_per_node": 8,
                         "nic": "roce-400g", "nics_per_node": 8},
            "model": M.LLAMA3_8B,
            "plan": {"tp": 1, "pp": 1, "dp": gpus, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 2,
                     "global_batch": 2 * gpus, "sequence_parallel": False, "schedule": "1f1b",
                     "zero_stage": 3, "recompute": "selective", "recompute_policy": "op",
                     "precision": "bf16", "fp32_grads": True, "fp32_param_shards": True, "flash_attention": True,
                     "attention_kernel": "fa2", "eager_elementwise": not compiled,
                     "eager_cross_entropy": True},
            "measured": {"tokens_per_s_per_gpu": float(tps), "peak_hbm_bytes": gib * GIB,
                         "peak_hbm_counter": "max_reserved", "peak_hbm_stage": "max", "outcome": "ran"},
            "flops_convention": "none (TPS/GPU published; MFU 33-39% stated without a FLOP formula)",
            "assumptions": assume,
            "completeness": "complete-with-assumptions",
        })
    return out


ASYNC_TP = ("pytorch/torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md, table '{t}' "
            "(torch 38410cf9, torchtitan 820504e, 2025-06)")


def torchtitan_async_tp():
    """The PyTorch team's async-TP benchmark (June 2025) on Grand Teton (H100 96GB HBM2e, 500 W,
    400 Gb/s RDMA per GPU): FSDP x TP 8 with torch.compile, vanilla TP against async TP (torchtitan's
    micro-pipelined all-gather / reduce-scatter: tp_comm_overlap), in bf16 and float8 tensorwise.
    The float8 rowwise rows are left out: Strata's fp8 has no rowwise-scaling variant (the table's
    note says that baseline is slow for a reason being fixed)."""
    rows = [  # id part, model, gpus, local batch, AC, float8, async TP, TPS/GPU
        ("llama3.1-70b-fsdp32-tp8", M.LLAMA3_70B, 256, 16, "full", False, False, 597.3),
        ("llama3.1-70b-fsdp32-tp8", M.LLAMA3_70B, 256, 16, "full", False, True, 652.4),
        ("llama3.1-70b-fsdp32-tp8", M.LLAMA3_70B, 256, 16, "full", True, False, 809.8),
        ("llama3.1-70b-fsdp32-tp8", M.LLAMA3_70B, 256, 16, "full", True, True, 942.4),
        ("llama3.1-8b-fsdp8-tp8", M.LLAMA3_8B, 64, 12, "op", False, False, 4378.0),
        ("llama3.1-8b-fsdp8-tp8", M.LLAMA3_8B, 64, 12, "op", False, True, 4809.4),
        ("llama3.1-8b-fsdp8-tp8", M.LLAMA3_8B, 64, 12, "op", True, False, 5078.1),
        ("llama3.1-8b-fsdp8-tp8", M.LLAMA3_8B, 64, 12, "op", True, True, 5570.1),
    ]
    out = []
    for name, model, gpus, local, ac, fp8, async_tp, tps in rows:
        dp = gpus // 8
        table = ("Llama3 70b on 256 H100s with FSDP=32, TP=8, torch.compile, full AC, local batch size 16" if gpus == 256 else
                 "Llama3 8b on 64 H100s with FSDP=8, TP=8, torch.compile, per op SAC, local batch size 12")
        plan = {"tp": 8, "pp": 1, "dp": dp, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": local, "global_batch": local * dp,
                "sequence_parallel": True, "tp_comm_overlap": async_tp, "schedule": "1f1b", "zero_stage": 3,
                "recompute": "full" if ac == "full" else "selective", "precision": "fp8" if fp8 else "bf16",
                "fp32_grads": True, "fp32_param_shards": True, "flash_attention": True, "attention_kernel": "fa2",
                "eager_elementwise": False,
                "eager_cross_entropy": True}
        if ac == "op":
            plan["recompute_policy"] = "op"
        if fp8 and async_tp:
            plan["tp_overlap_rs_fp8"] = False
        assume = [a for a in COMMON_ASSUME if not a.startswith("selective activation") and not a.startswith("memory =")]
        assume += [
            "the table's FSDP degree is dp, TP 8 within a node with sequence parallelism (torchtitan's TP plan shards the norms)",
            "local batch size = micro_batch (no gradient accumulation); global_batch = local batch x FSDP degree; seq 8192",
            "torch.compile per transformer block: eager_elementwise false",
            ("per op SAC: recompute_policy op (under TP the reduce-scatters' outputs kept, the all-gathers rerun)" if ac == "op"
             else "full AC: recompute full"),
            ("async TP (torchtitan's enable_async_tensor_parallel, micro-pipelined all-gather and reduce-scatter "
             "around their matmuls): tp_comm_overlap" if async_tp else "vanilla TP: no tp_comm_overlap"),
            ("float8 tensorwise (torchao Float8Linear, dynamic per-tensor scaling): precision fp8" if fp8 else "bf16"),
        ] + ([
            "tp_overlap_rs_fp8 false: async TP's fused_scaled_matmul_reduce_scatter reduce-scatters the scaled matmul's bf16 "
            "output; only the all-gather side moves FP8 (since stop 62)",
        ] if fp8 and async_tp else []) + [
            "default 500 W power limit, as the benchmark states (hwdb's 96GB row is the 500 W Grand Teton part)",
            "TPS/GPU as published; no memory figure in this table",
        ]
        out.append({
            "id": f"torchtitan25-{name}-{'fp8' if fp8 else 'bf16'}-{'asynctp' if async_tp else 'tp'}-h100-96g",
            "publisher": "Meta (PyTorch torchtitan)",
            "framework": "torchtitan-compile",
            "source": ASYNC_TP.format(t=table) + f", row '{'float8 tensorwise' if fp8 else 'None (bfloat16)'}', "
                      f"column '{'Async TP' if async_tp else 'Vanilla TP'} tokens/sec'",
            "hardware": {"gpu": "H100-SXM5-96GB-HBM2e", "nodes": gpus // 8, "gpus_per_node": 8,
                         "nic": "roce-400g", "nics_per_node": 8},
            "model": model,
            "plan": plan,
            "measured": {"tokens_per_s_per_gpu": tps, "outcome": "ran"},
            "stated_knobs": ["tp_comm_overlap"],  # the table's column: vanilla or async TP
            "flops_convention": "none (tokens/sec per GPU published)",
            "assumptions": assume,
            "completeness": "complete-with-assumptions",
        })
    return out


def all_entries():
    return torchtitan_llama3_8b() + torchtitan_async_tp()
