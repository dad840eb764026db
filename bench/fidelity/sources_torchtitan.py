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
                "eager_cross_entropy": True, "loss_parallel": True}
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


def torchtitan_2024_rest():
    """The rest of torchtitan's 2024-12 benchmark (benchmarks/llama3_h100_202412_torchtitan.md):
    the Float8 rows of Tables 1 and 3, Table 2 (Llama 3.1 8B with CP on 8 GPUs, full AC), Table 4
    (70B at FSDP 32 x TP 8), Table 5 (405B at FSDP 8 x TP 8 x PP 8, 1F1B and interleaved) and
    Table 6 (405B with CP under TP 8 x PP 8). All torch.compile; Float8 is torchao's tensorwise
    Float8Linear. Pipelines as torchtitan 9dec370 builds them: microbatches default to the number
    of stages (pipeline_parallel_microbatches), two stages per rank for a looped schedule, split
    points by generate_split_points (the first stage base layers, middle stages one more while the
    remainder lasts, the last stage what is left)."""
    def split(layers, stages):
        base, extra = divmod(layers, stages)
        out = [base]
        for _ in range(stages - 2):
            out.append(base + (1 if extra > 0 else 0))
            extra -= 1 if extra > 0 else 0
        out.append(layers - sum(out))
        return out

    rows = [  # id, table, row label, model, seq, gpus, dp, tp, pp, cp, local batch, AC, float8, async TP, schedule, TPS, GiB
        ("llama3.1-8b-fsdp8-compile-fp8", 1, "FSDP + torch.compile + Float8", M.LLAMA3_8B, 8192, 8, 8, 1, 1, 1, 2, "op", True, False, None, 8532, 76.8),
        ("llama3.1-8b-fsdp128-compile-fp8", 3, "FSDP + torch.compile + Float8", M.LLAMA3_8B, 8192, 128, 128, 1, 1, 1, 2, "op", True, False, None, 8380, 61.8),
        ("llama3.1-8b-fsdp8-cp1-s32k", 2, "FSDP 8, CP 1", M.LLAMA3_8B, 32768, 8, 8, 1, 1, 1, 1, "full", True, False, None, 3890, 83.9),
        ("llama3.1-8b-fsdp4-cp2-s64k", 2, "FSDP 4, CP 2", M.LLAMA3_8B, 65536, 8, 4, 1, 1, 2, 1, "full", True, False, None, 2540, 84.2),
        ("llama3.1-8b-fsdp2-cp4-s128k", 2, "FSDP 2, CP 4", M.LLAMA3_8B, 131072, 8, 2, 1, 1, 4, 1, "full", True, False, None, 1071, 84.0),
        ("llama3.1-8b-fsdp1-cp8-s256k", 2, "FSDP 1, CP 8", M.LLAMA3_8B, 262144, 8, 1, 1, 1, 8, 1, "full", True, False, None, 548, 84.5),
        ("llama3.1-70b-fsdp32-tp8-2d", 4, "2D", M.LLAMA3_70B, 8192, 256, 32, 8, 1, 1, 16, "full", True, False, None, 829, 71.9),
        ("llama3.1-70b-fsdp32-tp8-asynctp", 4, "2D + AsyncTP", M.LLAMA3_70B, 8192, 256, 32, 8, 1, 1, 16, "full", True, True, None, 876, 67.6),
        ("llama3.1-405b-fsdp8-tp8-pp8-1f1b", 5, "1F1B", M.LLAMA3_405B, 8192, 512, 8, 8, 8, 1, 32, "full", True, True, "1f1b", 100, 82.5),
        ("llama3.1-405b-fsdp8-tp8-pp8-interleaved", 5, "Interleaved 1F1B", M.LLAMA3_405B, 8192, 512, 8, 8, 8, 1, 32, "full", True, True,
         "interleaved-1f1b", 128, 72.7),
        ("llama3.1-405b-fsdp8-tp8-pp8-cp1-s32k", 6, "FSDP 8, CP 1", M.LLAMA3_405B, 32768, 512, 8, 8, 8, 1, 8, "full", True, True, "1f1b", 76, 75.3),
        ("llama3.1-405b-fsdp4-tp8-pp8-cp2-s64k", 6, "FSDP 4, CP 2", M.LLAMA3_405B, 65536, 512, 4, 8, 8, 2, 8, "full", True, True, "1f1b", 47, 75.9),
        ("llama3.1-405b-fsdp2-tp8-pp8-cp4-s128k", 6, "FSDP 2, CP 4", M.LLAMA3_405B, 131072, 512, 2, 8, 8, 4, 8, "full", True, True, "1f1b", 31, 77.1),
        ("llama3.1-405b-fsdp1-tp8-pp8-cp8-s256k", 6, "FSDP 1, CP 8", M.LLAMA3_405B, 262144, 512, 1, 8, 8, 8, 8, "full", True, True, "1f1b", 16, 84.9),
    ]
    out = []
    for name, table, row, model, seq, gpus, dp, tp, pp, cp, local, ac, fp8, async_tp, sched, tps, gib in rows:
        plan = {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": 1, "vpp": 1, "micro_batch": local, "global_batch": local * dp,
                "sequence_parallel": tp > 1, "tp_comm_overlap": async_tp, "schedule": "1f1b", "zero_stage": 3,
                "recompute": "full" if ac == "full" else "selective", "precision": "fp8" if fp8 else "bf16",
                "fp32_grads": True, "fp32_param_shards": True, "flash_attention": True, "attention_kernel": "fa2",
                "eager_elementwise": False, "grad_accum_fusion": False, "eager_cross_entropy": True}
        if ac == "op":
            plan["recompute_policy"] = "op"
        if tp > 1:
            plan["loss_parallel"] = True
        if cp > 1:
            plan["cp_comm_type"] = "allgather"
        if fp8 and async_tp:
            plan["tp_overlap_rs_fp8"] = False
        assume = [a for a in COMMON_ASSUME if not a.startswith("selective activation")]
        if pp > 1:
            stages = pp * (2 if sched == "interleaved-1f1b" else 1)
            plan["schedule"] = sched
            plan["torch_pipelining"] = True
            plan["micro_batch"] = local // stages
            if sched == "interleaved-1f1b":
                plan["vpp"] = 2
                plan["virtual_layer_split"] = split(model["layers"], stages)
            else:
                plan["layer_split"] = split(model["layers"], stages)
            assume.append(f"pipeline as torchtitan 9dec370 builds it: {stages} stages ({'2 per rank, looped' if stages > pp else 'one per rank'}), "
                          f"microbatches = stages (pipeline_parallel_microbatches' default): {stages} of {local // stages} from the "
                          f"local batch {local}; split points by generate_split_points")
            assume.append("FSDP under PP: reshard_after_forward off (parallelize_llama.py), gradients reduced at the last backward")
            assume.append("torch.distributed.pipelining's buffers: a gradient receive buffer per micro-batch, each stage's output "
                          "kept to its backward: torch_pipelining")
        assume += [
            f"local batch {local} per FSDP x CP group{' (the table: local batch ' + str(local) + ')' if pp == 1 else ''}; "
            f"global_batch = local batch x FSDP degree; seq {seq}",
            "torch.compile per transformer block: eager_elementwise false",
            ("per-op SAC (the 8B config's selective_ac_option 'op'): recompute_policy op" if ac == "op" else "full AC: recompute full"),
            ("float8 tensorwise (torchao Float8Linear, dynamic scaling): precision fp8; FSDP's float8 all-gather "
             "(enable_fsdp_float8_all_gather in the 405B config) is not modelled: the gathers move bf16" if fp8 else "bf16"),
        ]
        if tp > 1:
            assume.append("TP 8 within a node with sequence parallelism; the loss in loss_parallel (train.py, "
                          "training.disable_loss_parallel false): loss_parallel")
            assume.append("async TP (experimental.enable_async_tensor_parallel): tp_comm_overlap" if async_tp else "vanilla TP")
        if cp > 1:
            assume.append("context parallelism through PyTorch's context-parallel SDPA with the all-gather rotate method "
                          "(experimental.context_parallel_rotate_method default): cp_comm_type allgather")
        assume.append("default 500 W power limit, as the benchmark states")
        out.append({
            "id": f"torchtitan-{name}-h100-96g",
            "publisher": "Meta (PyTorch torchtitan)",
            "framework": "torchtitan-compile",
            "source": TORCHTITAN.format(t=table) + f" row '{row}'",
            "hardware": {"gpu": "H100-SXM5-96GB-HBM2e", "nodes": gpus // 8, "gpus_per_node": 8,
                         "nic": "roce-400g", "nics_per_node": 8},
            "model": M.with_seq(model, seq),
            "plan": plan,
            "measured": {"tokens_per_s_per_gpu": float(tps), "peak_hbm_bytes": gib * GIB,
                         "peak_hbm_counter": "max_reserved", "peak_hbm_stage": "max", "outcome": "ran"},
            "stated_knobs": ["tp_comm_overlap"] if tp > 1 else [],
            "flops_convention": "none (TPS/GPU published)",
            "assumptions": assume,
            "completeness": "complete-with-assumptions",
        })
    return out


def all_entries():
    return torchtitan_llama3_8b() + torchtitan_async_tp() + torchtitan_2024_rest()
