# Published memory outcomes (peak bytes per GPU, or out of memory) with complete configurations:
# entries that test Strata's memory model and OOM verdict, not its throughput (they publish no
# throughput, so the loader marks them memory-only). Data only; build_runs.py turns it into runs.json.
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
                     "recompute": "none", "precision": "bf16"},
            "measured": {"peak_hbm_bytes": float(peak), "peak_hbm_counter": "max_allocated",
                         "peak_hbm_stage": "last", "outcome": "ran"},
            "flops_convention": "none (memory only)",
            "assumptions": [
                "peak is torch max_memory_allocated of the last rank (Megatron's TensorBoard writer "
                "runs on rank world_size-1): the last pipeline stage, which holds the output layer",
                "dropout 0.1: Megatron's default (the config sets none)",
                "attention: Transformer Engine's fused kernel (flash-class, no s^2 activations)",
                "Megatron keeps fp32 main gradients (4 bytes per parameter) under --bf16 with the "
                "distributed optimizer; Strata counts 2-byte gradients (docs/formulas.md Sec. 4)",
                "the same recipe marks both tests OOM on the older LTS container (internal issue "
                "#434): the peak depends on the software version",
            ],
            "completeness": "complete-with-assumptions",
        })
    return out


# --- BLOOM's 3D-topology search on Jean Zay (nvidia-smi snapshots of the first node) ---
BLOOM_PREQUEL = ("bigscience-workshop/bigscience train/tr11-176B-ml/chronicles-prequel.md, "
                 "'{s}' (Feb 2022; memory = nvidia-smi of the first node)")


def bloom_search_model(layers, hidden, heads):
    m = dict(M.BLOOM_176B)
    m.update(name=f"bloom-search-{layers}x{hidden}", layers=layers, hidden=hidden, heads=heads,
             kv_heads=heads, ffn_hidden=4 * hidden)
    return m


def bloom_search():
    rows = [  # section, dp, tp, pp, mbs, gbs, outcome, GB (nvidia-smi)
        ("48 node contenders", 4, 8, 12, 1, 2048, "ran", 29),
        ("48 node contenders", 4, 8, 12, 2, 2048, "ran", 37),
        ("48 node contenders", 4, 8, 12, 4, 2048, "ran", 49),
        ("48 node contenders", 4, 8, 12, 8, 2048, "ran", 69),
        ("48 node contenders", 8, 8, 6, 1, 2048, "ran", 38),
        ("48 node contenders", 8, 8, 6, 2, 2048, "ran", 44),
        ("48 node contenders", 8, 8, 6, 4, 2048, "ran", 56),
        ("GBS Variations", 24, 8, 2, 1, 2016, "ran", 65),
        ("GBS Variations", 24, 8, 2, 2, 2016, "ran", 76),
        ("GBS Variations", 48, 8, 1, 1, 2016, "oom", None),
        ("GBS Variations", 32, 2, 6, 1, 2048, "oom", None),
        ("GBS Variations", 32, 2, 6, 2, 2048, "oom", None),
    ]
    out = []
    for sec, dp, tp, pp, mbs, gbs, outcome, gb in rows:
        meas = {"outcome": outcome}
        if gb is not None:
            meas.update(peak_hbm_bytes=gb * 1e9, peak_hbm_counter="device", peak_hbm_stage="first")
        plan = {"tp": tp, "pp": pp, "dp": dp, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": mbs,
                "global_batch": gbs, "sequence_parallel": False, "schedule": "1f1b",
                "zero_stage": 1, "recompute": "full", "precision": "fp16", "flash_attention": False}
        if pp > 1:
            plan["p2p_blocking"] = True
            if tp > 1:
                plan["p2p_scatter_gather"] = True  # DeepSpeed's partitioned pipe buffers (sources_papers)
        out.append({
            "id": f"bloom-search-181b-dp{dp}-tp{tp}-pp{pp}-mbs{mbs}",
            "publisher": "BigScience",
            "source": BLOOM_PREQUEL.format(s=sec),
            "hardware": {"gpu": "A100-SXM4-80GB", "nodes": 48, "gpus_per_node": 8,
                         "nic": "omni-path-100g", "nics_per_node": 4},
            "model": bloom_search_model(72, 14336, 64),
            "plan": plan,
            "measured": meas,
            "flops_convention": "none (memory only)",
            "assumptions": [
                "model: the 181B candidate (72 layers, hidden 14336, 64 heads), BLOOM's vocabulary, "
                "ALiBi and embedding LayerNorm",
                "recompute full: every tr11 script checkpoints activations; the tables do not restate it",
                "fp16 with DeepSpeed ZeRO-1 (the tables before the bf16 switch of 02-28)",
                "flash_attention false: Megatron-DeepSpeed's fused softmax of early 2022 (s^2 scores)",
                "memory: an nvidia-smi snapshot of the first node (stage 0) around iteration 2, "
                "CUDA context and allocator cache included",
            ] + (["p2p_blocking, p2p_scatter_gather: DeepSpeed's PipelineEngine (blocking sends; "
                  "activations and gradients partitioned over the model-parallel group)"]
                 if pp > 1 and tp > 1 else []),
            "completeness": "complete-with-assumptions",
        })
    return out


def all_entries():
    return megatron_ci() + bloom_search()
