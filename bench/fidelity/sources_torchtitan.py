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
    "sharded parameters in fp32 and no separate bf16 shard, so Strata's ZeRO-3 state (bf16 shard + "
    "fp32 master) is 2 bytes per parameter / dp larger",
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
                     "precision": "bf16", "fp32_grads": True, "flash_attention": True,
                     "attention_kernel": "fa2", "eager_elementwise": not compiled,
                     "eager_cross_entropy": True},
            "measured": {"tokens_per_s_per_gpu": float(tps), "peak_hbm_bytes": gib * GIB,
                         "peak_hbm_counter": "max_reserved", "peak_hbm_stage": "max", "outcome": "ran"},
            "flops_convention": "none (TPS/GPU published; MFU 33-39% stated without a FLOP formula)",
            "assumptions": assume,
            "completeness": "complete-with-assumptions",
        })
    return out


def all_entries():
    return torchtitan_llama3_8b()
