# Published memory outcomes (peak bytes per GPU, or out of memory) with complete configurations.
# Megatron-LM's CI publishes no throughput (memory-only entries); BLOOM's topology search also
# publishes each run's seconds per iteration. Data only; build_runs.py turns it into runs.json.
import models as M

# --- Megatron-LM's CI "memory_speed" tests: golden values of torch.cuda.max_memory_allocated ---
MEGATRON_CI = ("NVIDIA/Megatron-LM tests/functional_tests/test_cases/gpt/gpt3_7b_{t}_memory_speed/"
               "model_config.yaml and golden_values_dev_dgx_{g}.json (mem-max-allocated-bytes, "
               "steady state); 8 GPUs per tests/test_utils/recipes/h100/gpt.yaml")

# 32 x 4096, 32 heads with 8 query groups, Megatron's default MLP (GeLU, 4h), LayerNorm, biases,
# learned positions (max 8192), untied output, vocab 131072 (NullTokenizer).
MEGATRON_CI_GPT_7B = {
    "name": "megatron-ci-gpt3-7b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
    "ffn_hidden": 16384, "ffn": "gelu", "vocab": 131072, "seq_len": 8192, "norm": "layernorm",
    "position": "learned", "tied_embeddings": False, "linear_bias": True, "dropout": 0.1, "moe": None,
}


def megatron_ci():
    rows = [  # test, gpu, hwdb gpu, nic, tp, pp, vpp, mbs, peak bytes
        ("tp4_pp1", "a100", "A100-SXM4-80GB", "ib-hdr", 4, 1, 1, 2, 58188115968),
        ("tp4_pp1", "h100", "H100-SXM5-80GB", "ib-ndr", 4, 1, 1, 2, 57143791616),
        ("tp1_pp4", "a100", "A100-SXM4-80GB", "ib-hdr", 1, 4, 8, 1, 60489064448),
        ("tp1_pp4", "h100", "H100-SXM5-80GB", "ib-ndr", 1, 4, 8, 1, 60518293504),
    ]
    out = []
    for test, g, gpu, nic, tp, pp, vpp, mbs, peak in rows:
        out.append({
            "id": f"megatron-ci-gpt3-7b-{test.replace('_', '-')}-{g}",
            "publisher": "NVIDIA",
            "source": MEGATRON_CI.format(t=test, g=g),
            "hardware": {"gpu": gpu, "nodes": 1, "gpus_per_node": 8, "nic": nic, "nics_per_node": 8},
            "model": MEGATRON_CI_GPT_7B,
            "plan": {"tp": tp, "pp": pp, "dp": 8 // (tp * pp), "cp": 1, "ep": 1, "vpp": vpp,
                     "micro_batch": mbs, "global_batch": 8, "sequence_parallel": False,
                     "schedule": "interleaved-1f1b" if vpp > 1 else "1f1b", "zero_stage": 1,
                     "recompute": "none", "precision": "bf16", "fp32_grads": True},
            "measured": {"peak_hbm_bytes": float(peak), "peak_hbm_counter": "max_allocated",
                         "peak_hbm_stage": "last", "outcome": "ran"},
            "flops_convention": "none (memory only)",
            "assumptions": [
                "peak is torch max_memory_allocated of the last rank (Megatron's TensorBoard writer "
                "runs on rank world_size-1): the last pipeline stage, which holds the output layer",
                "dropout 0.1: Megatron's default (the config sets none)",
                "attention: Transformer Engine's fused kernel (flash-class, no s^2 activations)",
                "fp32_grads: Megatron accumulates and reduces gradients in fp32 under --bf16 unless "
                "--grad-reduce-in-bf16, which the config does not set (4 bytes per parameter; "
                "declared since stop 18, before which Strata counted 2)",
                "the same recipe marks both tests OOM on the older LTS container (internal issue "
                "#434): the peak depends on the software version",
            ],
            "completeness": "complete-with-assumptions",
        })
    return out


# --- BLOOM's 3D-topology search on Jean Zay (nvidia-smi snapshots of the first node) ---
BLOOM_PREQUEL = ("bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md, "
                 "'{s}' (Feb 2022; memory = nvidia-smi of the first node)")


# nvidia-smi prints MiB; the tables' "GB" is that figure over 1024 (GiB): the card itself is the
# "80GB" of 81920 MiB, and the one run the chronicle shows filling a GPU (18B, 10 layers on one
# node) reads "80GB". Taken as 10^9 bytes until stop 25, which put every reading 7 % too low; the
# other reading, MiB / 1000 with the last digits dropped, would be 2.3 % below this one.
NVIDIA_SMI_GB = 2.0 ** 30


def bloom_search_model(layers, hidden, heads):
    m = dict(M.BLOOM_176B)
    m.update(name=f"bloom-search-{layers}x{hidden}", layers=layers, hidden=hidden, heads=heads,
             kv_heads=heads, ffn_hidden=4 * hidden)
    return m


def twin_note(rows, dp, tp, pp, mbs, gbs):
    """The assumption an entry gets when its layout was run more than once: all its readings."""
    twins = [r for r in rows if r[2:7] == (dp, tp, pp, mbs, gbs)]
    gbs_read = " and ".join(f"{r[8]} GB" for r in twins)
    secs = " and ".join(f"{r[9]} s" for r in twins)
    return (f"the same configuration ran {len(twins)} times on {twins[0][1]} ({gbs_read}, {secs}): "
            "every row is kept as published")


def bloom_search():
    # The tables' Sec/it is one snapshot of iteration 2 ("the data isn't exact and can fluctuate a
    # bit"); the 02-25 tables follow a PCIe/NUMA fix on Jean Zay that the author says made every
    # run 1-5 % faster, so the date stays in the entry. Rows after the first block of each id are
    # the 02-25 "GBS Variations" tables (GBS, lower-PP and TP variations); an id that the earlier
    # memory-only rows already use gets the date and GBS appended. "fail" (DP8 TP1 PP48) is no
    # memory outcome and is left out.
    rows = [  # section, date, dp, tp, pp, mbs, gbs, outcome, GB (nvidia-smi), sec/it, id suffix
        ("48 node contenders", "02-21", 4, 8, 12, 1, 2048, "ran", 29, 143.31, ""),
        ("48 node contenders", "02-21", 4, 8, 12, 2, 2048, "ran", 37, 134.02, ""),
        ("48 node contenders", "02-21", 4, 8, 12, 4, 2048, "ran", 49, 123.69, ""),
        ("48 node contenders", "02-21", 4, 8, 12, 8, 2048, "ran", 69, 129.26, ""),
        ("48 node contenders", "02-21", 8, 8, 6, 1, 2048, "ran", 38, 139.82, ""),
        ("48 node contenders", "02-21", 8, 8, 6, 2, 2048, "ran", 44, 131.02, ""),
        ("48 node contenders", "02-21", 8, 8, 6, 4, 2048, "ran", 56, 121.48, ""),
        ("GBS Variations", "02-25", 24, 8, 2, 1, 2016, "ran", 65, 145.45, ""),
        ("GBS Variations", "02-25", 24, 8, 2, 2, 2016, "ran", 76, 136.13, ""),
        ("GBS Variations", "02-25", 48, 8, 1, 1, 2016, "oom", None, None, ""),
        ("GBS Variations", "02-25", 32, 2, 6, 1, 2048, "oom", None, None, ""),
        ("GBS Variations", "02-25", 32, 2, 6, 2, 2048, "oom", None, None, ""),
        # 02-25 rows added at stop 16 (declared in splits.json before their first simulation)
        ("GBS Variations", "02-25", 8, 8, 6, 4, 1568, "ran", 56, 113.01, "-gbs1568-0225"),
        ("GBS Variations", "02-25", 8, 8, 6, 4, 2048, "ran", 55, 114.11, "-gbs2048-0225"),
        ("GBS Variations", "02-25", 8, 8, 6, 6, 2016, "ran", 66, 123.57, ""),
        ("GBS Variations", "02-25", 4, 8, 12, 4, 1568, "ran", None, 92.75, "-gbs1568-0225"),
        ("GBS Variations", "02-25", 4, 8, 12, 4, 2048, "ran", 49, 117.07, "-gbs2048-0225"),
        ("GBS Variations", "02-25", 4, 8, 12, 2, 1568, "ran", None, 99.93, "-gbs1568-0225"),
        ("GBS Variations", "02-25", 4, 8, 12, 2, 2048, "ran", None, 128.82, "-gbs2048-0225"),
        ("GBS Variations", "02-25", 6, 8, 8, 4, 2016, "ran", 52, 113.16, ""),
        ("GBS Variations", "02-25", 12, 8, 4, 2, 2016, "ran", 53, 125.52, ""),
        ("GBS Variations", "02-25", 12, 8, 4, 4, 2016, "ran", 59, 114.81, ""),
        ("GBS Variations", "02-25", 8, 4, 12, 4, 2048, "ran", 60, 111.89, ""),
        ("GBS Variations", "02-25", 8, 4, 12, 2, 2048, "ran", 44, 110.48, "-run1"),
        ("GBS Variations", "02-25", 8, 4, 12, 2, 2048, "ran", 38, 113.54, "-run2"),
        ("GBS Variations", "02-25", 16, 4, 6, 4, 2048, "ran", 75, 117.11, ""),
        ("GBS Variations", "02-25", 16, 4, 6, 2, 2048, "ran", 57, 111.71, ""),
        ("GBS Variations", "02-25", 16, 2, 12, 2, 2048, "ran", 63, 112.50, ""),
        ("GBS Variations", "02-25", 8, 2, 24, 1, 2048, "ran", 44, 119.53, ""),
        ("GBS Variations", "02-25", 8, 2, 24, 2, 2048, "ran", 53, 122.75, ""),
    ]
    out = []
    for sec, date, dp, tp, pp, mbs, gbs, outcome, gb, sec_it, suffix in rows:
        meas = {"outcome": outcome}
        if sec_it is not None:
            meas["step_time_s"] = sec_it
        if gb is not None:
            meas.update(peak_hbm_bytes=gb * NVIDIA_SMI_GB, peak_hbm_counter="device", peak_hbm_stage="first")
        plan = {"tp": tp, "pp": pp, "dp": dp, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": mbs,
                "global_batch": gbs, "sequence_parallel": False, "schedule": "1f1b",
                "zero_stage": 1, "recompute": "full", "precision": "fp16", "flash_attention": False}
        if pp > 1:
            plan["p2p_blocking"] = True
            if tp > 1:
                plan["p2p_scatter_gather"] = True  # DeepSpeed's partitioned pipe buffers (sources_papers)
        plan["grad_accum_fusion"] = False  # DeepSpeed's engine: autograd's accumulation (sources_papers)
        out.append({
            "id": f"bloom-search-181b-dp{dp}-tp{tp}-pp{pp}-mbs{mbs}{suffix}",
            "publisher": "BigScience",
            "source": BLOOM_PREQUEL.format(s=sec) + f"; row dated {date}",
            "hardware": {"gpu": "A100-SXM4-80GB", "nodes": 48, "gpus_per_node": 8,
                         "nic": "omni-path-100g", "nics_per_node": 4},
            "model": bloom_search_model(72, 14336, 64),
            "plan": plan,
            "measured": meas,
            "flops_convention": ("none (memory only)" if sec_it is None else
                                 "none (step time: the table's Sec/it at iteration 2)"),
            "assumptions": [
                "model: the 181B candidate (72 layers, hidden 14336, 64 heads), BLOOM's vocabulary, "
                "ALiBi and embedding LayerNorm",
                "recompute full: every tr11 script checkpoints activations; the tables do not restate it",
                "fp16 with DeepSpeed ZeRO-1 (the tables before the bf16 switch of 02-28)",
                "grad_accum_fusion false: DeepSpeed's engine adds each micro-batch's fp16 weight "
                "gradients into param.grad with a separate kernel (autograd); declared since stop 19",
                "flash_attention false: Megatron-DeepSpeed's fused softmax of early 2022 (s^2 scores)",
            ] + (["memory: an nvidia-smi snapshot of the first node (stage 0) around iteration 2, "
                  "CUDA context and allocator cache included; its 'GB' read as GiB (nvidia-smi's "
                  "MiB / 1024: the 80 GB card is 81920 MiB), 10^9 bytes before stop 25"]
                 if gb is not None else []) + (
                ["step time: the Sec/it of iteration 2, one snapshot; rows of 02-25 ran after the "
                 "PCIe/NUMA fix (1-5 % faster, the chronicle says)"] if sec_it is not None else []) + (
                ["p2p_blocking, p2p_scatter_gather: DeepSpeed's PipelineEngine (blocking sends; "
                 "activations and gradients partitioned over the model-parallel group)"]
                if pp > 1 and tp > 1 else []) + (
                [twin_note(rows, dp, tp, pp, mbs, gbs)] if suffix.startswith("-run") else []),
            "completeness": "complete-with-assumptions",
        })
    return out


def all_entries():
    return megatron_ci() + bloom_search()
