# Fidelity entries taken from papers and training logs: Korthikanti et al. (MLSys 2023), MT-NLG
# (Smith et al. 2022), Llama 3 (Dubey et al. 2024), OPT-175B, BLOOM-176B, ZeRO-Offload and
# DeepSeek-V3. Every measured number is copied from the cited table/log line; every plan field
# the source does not state is listed in the entry's "assumptions". Data only: no I/O here.
import models as M

HDR8 = {"nic": "ib-hdr", "nics_per_node": 8}
FLOPS_KORTHIKANTI = (
    "Korthikanti et al. 2023 Sec. 6 / Megatron-LM README: model FLOPs per iteration = "
    "72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) (no recompute) for MFU; HFU adds the FLOPs of the "
    "recomputed parts; peak 312 TFLOP/s (A100 dense BF16/FP16). step_time_s is wall time per "
    "iteration (Table 4).")
FLOPS_SC21 = (
    "Narayanan et al. SC21 Eq. (3), full activation recompute counted: FLOPs per iteration = "
    "96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)); TFLOP/s per GPU = that / (step time * GPUs). "
    "Checked here: 530B, B=1920, 2240 GPUs, 60.1 s gives 125.7 (paper: 126).")


SCATTER_GATHER_MEGATRON = (
    "p2p_scatter_gather: Megatron-LM of 2021-22 splits pipeline tensors over TP when sequence "
    "parallelism is off (--scatter-gather-tensors-in-pipeline, on by default; Narayanan et al. SC21 "
    "Sec. 4.1; megatron/p2p_communication.py)")
SCATTER_GATHER_DEEPSPEED = (
    "p2p_scatter_gather: DeepSpeed's PipelineEngine partitions activations and gradients over the "
    "model-parallel group before sending them (is_pipe_partitioned / is_grad_partitioned = "
    "is_model_parallel, deepspeed/runtime/pipe/engine.py) and all-gathers them on arrival")
UNFUSED_ACCUM_DEEPSPEED = (
    "grad_accum_fusion false: under DeepSpeed's engine autograd adds each micro-batch's weight "
    "gradients into param.grad with a separate kernel (Megatron's fused accumulation needs its own "
    "DDP's main_grad, absent there); declared since stop 19")



PRE_FLASH = ("flash_attention false: the run predates FlashAttention in its framework (FlashAttention "
             "appeared in May 2022, arXiv 2205.14135; Megatron-LM and Megatron-DeepSpeed of 2021-22 "
             "compute the s x s scores with batched GEMMs and a fused scale-mask-softmax kernel). "
             "Until stop 15 these entries were costed as fused (FA2-class on Ampere)")

def korthikanti():
    """Korthikanti et al., 'Reducing Activation Recomputation in Large Transformer Models'
    (MLSys 2023): Table 3 (configs) and Table 4 (iteration time, full vs present work); MFU/HFU
    of the present-work runs from the paper's Table 5 as reprinted in the Megatron-LM README."""
    rows = [  # model, tp, pp, gpus, gbs, mbs, vpp, t_full, t_sel, mfu_sel, hfu_sel
        ("22b", M.MEGATRON_22B, 8, 1, 8, 4, 4, 1, 1.42, 1.10, 0.415, 0.437),
        ("175b", M.MEGATRON_175B, 8, 8, 64, 64, 1, 3, 18.13, 13.75, 0.514, 0.528),
        ("530b", M.MEGATRON_530B, 8, 35, 280, 280, 1, 3, 49.05, 37.83, 0.560, 0.570),
        ("1t", M.MEGATRON_1T, 8, 64, 512, 512, 1, 1, 94.42, 71.49, 0.563, 0.570),
    ]
    out = []
    for tag, model, tp, pp, gpus, gbs, mbs, vpp, t_full, t_sel, mfu, hfu in rows:
        base_assume = [
            "vocab 51200 and seq 2048: the Megatron GPT setup stated in the paper family",
            f"vpp {vpp}: not in Table 3; taken from calculon-ai/calculon validation/{tag.upper()}_*.json, "
            "an independent reproduction of these runs",
            "precision fp16: calculon's reproduction config says float16; the paper says mixed precision",
            "zero_stage 0 (dp = 1, so optimizer sharding would change nothing)",
            "dropout 0.1: Megatron GPT default",
            "network: Selene DGX A100 (8x HDR 200 Gb/s per node)",
        ]
        for mode, t, sp, rc in (("full", t_full, False, "full"), ("selective", t_sel, True, "selective")):
            meas = {"step_time_s": t, "outcome": "ran"}
            if mode == "selective":
                meas.update(mfu=mfu, hfu=hfu)
            assume = list(base_assume) + [PRE_FLASH]
            if not sp and pp > 1:
                assume.append(SCATTER_GATHER_MEGATRON)
            out.append({
                "id": f"korthikanti-{tag}-{mode}",
                "publisher": "NVIDIA",
                "source": "Korthikanti et al., MLSys 2023 (arXiv 2205.05198), Table 3 (config) and "
                          "Table 4 (iteration time); MFU/HFU: Table 5 / NVIDIA/Megatron-LM README "
                          "(2022); times also in calculon-ai/calculon calculon/megatron/validation.py",
                "hardware": {"gpu": "A100-SXM4-80GB", "nodes": gpus // 8, "gpus_per_node": 8, **HDR8},
                "model": model,
                "plan": {"tp": tp, "pp": pp, "dp": 1, "cp": 1, "ep": 1, "vpp": vpp,
                         "micro_batch": mbs, "global_batch": gbs, "sequence_parallel": sp,
                         "schedule": "interleaved-1f1b" if vpp > 1 else "1f1b",
                         "zero_stage": 0, "recompute": rc, "precision": "fp16", "flash_attention": False,
                         **({"p2p_scatter_gather": True} if not sp and pp > 1 else {})},
                "measured": meas,
                "flops_convention": FLOPS_KORTHIKANTI,
                "assumptions": assume,
                "completeness": "complete-with-assumptions",
            })
    return out


def mtnlg():
    """Smith et al. 2022, 'Using DeepSpeed and Megatron to Train MT-NLG 530B', Sec. 2.4:
    GBS 1920 on 280/350/420 DGX A100 nodes, 60.1/50.2/44.4 s per iteration, 126/121/113 TFLOP/s
    per GPU; 8-way tensor x 35-way pipeline parallelism inside/over nodes, data parallel across."""
    out = []
    for nodes, t, tf in ((280, 60.1, 126.0), (350, 50.2, 121.0), (420, 44.4, 113.0)):
        gpus = nodes * 8
        out.append({
            "id": f"mtnlg-530b-{gpus}gpu",
            "publisher": "Microsoft+NVIDIA",
            "source": "Smith et al. 2022 (arXiv 2201.11990) Sec. 2.4 'System performance'; numbers "
                      "as reprinted in cli99/llm-analysis examples/megatron-turing-nlg/README.md",
            "hardware": {"gpu": "A100-SXM4-80GB", "nodes": nodes, "gpus_per_node": 8, **HDR8},
            "model": M.MTNLG_530B,
            "plan": {"tp": 8, "pp": 35, "dp": gpus // 280, "cp": 1, "ep": 1, "vpp": 1,
                     "micro_batch": 1, "global_batch": 1920, "sequence_parallel": False,
                     "schedule": "1f1b", "zero_stage": 1, "recompute": "full", "precision": "bf16",
                     "p2p_blocking": True, "p2p_scatter_gather": True, "flash_attention": False,
                     "grad_accum_fusion": False},
            "measured": {"step_time_s": t, "tflops_per_gpu": tf, "outcome": "ran"},
            "flops_convention": FLOPS_SC21,
            "assumptions": [
                "micro_batch 1: not stated in the system-performance section",
                "zero_stage 1: DeepSpeed ZeRO-1 with 3D parallelism as described for MT-NLG",
                "recompute full: activation checkpointing per layer (needed to fit; consistent with "
                "the 96BSlh^2 FLOPs count reproducing 126 TFLOP/s)",
                SCATTER_GATHER_DEEPSPEED,
                UNFUSED_ACCUM_DEEPSPEED + " (2021: before DeepSpeed's BF16_Optimizer, bf16 sums)",
                "GPU A100 80GB per the paper (Selene); llm-analysis' reprint says 40GB",
                "vocab 50257 (GPT-2 BPE), dropout 0.1: Megatron defaults",
                "p2p_blocking: DeepSpeed's pipeline engine sends activations and gradients with "
                "blocking NCCL calls on the compute stream",
                PRE_FLASH,
            ],
            "completeness": "complete-with-assumptions",
        })
    return out


def llama3():
    """Dubey et al. 2024, 'The Llama 3 Herd of Models', Table 4 (405B scaling configurations),
    also shown by P. Balaji at SC'24 (glennklockwood.com/garden/llama-3.1)."""
    rows = [  # gpus, cp, seq, tflops, mfu
        (8192, 1, 8192, 430.0, 0.43),
        (16384, 1, 8192, 400.0, 0.41),
        (16384, 16, 131072, 380.0, 0.38),
    ]
    out = []
    for gpus, cp, seq, tf, mfu in rows:
        dp = gpus // (8 * 16 * cp)
        gbs = 16 * 1024 * 1024 // seq  # 16M tokens per batch
        out.append({
            "id": f"llama3-405b-{gpus}gpu-cp{cp}",
            "publisher": "Meta",
            "source": "Dubey et al. 2024 (arXiv 2407.21783) Table 4; same rows in Balaji, SC'24 "
                      "talk (glennklockwood.com/garden/llama-3.1)",
            "hardware": {"gpu": "H100-SXM5-80GB", "nodes": gpus // 8, "gpus_per_node": 8,
                         "nic": "roce-400g", "nics_per_node": 8},
            "model": M.with_seq(M.LLAMA3_405B, seq),
            "plan": {"tp": 8, "pp": 16, "dp": dp, "cp": cp, "ep": 1, "vpp": 8, "micro_batch": 1,
                     "global_batch": gbs, "sequence_parallel": True, "schedule": "interleaved-1f1b",
                     "virtual_layer_split": [0] + [1] * 126 + [0],
                     "zero_stage": 2, "recompute": "none", "precision": "bf16",
                     **({"cp_comm_type": "allgather"} if cp > 1 else {})},
            "measured": {"tflops_per_gpu": tf, "mfu": mfu, "outcome": "ran"},
            "flops_convention": "Model FLOPs (no recompute), BF16 MFU against 989 TFLOP/s dense BF16 "
                                "peak per H100 (Table 4 'BF16 MFU')",
            "assumptions": [
                f"global_batch {gbs}: 16M tokens per batch / seq {seq} (Table 4 gives tokens/batch)",
                "micro_batch 1: not published",
                "vpp 8, one layer per virtual stage, the first empty (embedding only) and the last "
                "empty (output projection and loss only): Sec. 3.3.2 removes one Transformer layer "
                "each from the first and the last stage, which leaves the first model chunk of the "
                "first stage with only the embedding and the last chunk of the last stage with only "
                "the output and loss; a chunk that held one layer before the removal means 128 / 16 = 8 chunks "
                "per rank (126 layers in Table 3). Before stop 23 the entries were skipped for want "
                "of the count; Strata's prediction moves by -21 % / -7 % at vpp 2 / 4",
                "micro-batch group of pp (Megatron's depth-first order): Sec. 3.3.2 tunes the number "
                "N of contiguous micro-batches per chunk between depth- and breadth-first and does "
                "not publish it for these runs",
                "zero_stage 2: paper's FSDP shards optimizer states and gradients, keeps weights",
                "recompute none, sequence_parallel true: not published",
                "RoCE 400 Gb/s, one NIC per GPU (paper Sec. 3.3.1)",
            ] + ([
                "cp_comm_type allgather: Sec. 3.3.2 'we use an all-gather based method where we first all-gather the key (K) "
                "and value (V) tensors, and then compute attention output for the local query (Q) tensor chunk' (since stop 62)",
            ] if cp > 1 else []),
            "completeness": "partial",
        })
    return out


def opt_bloom_zero_deepseek():
    opt = {
        "id": "opt-175b-992gpu",
        "publisher": "Meta",
        "source": "Zhang et al. 2022, OPT (arXiv 2205.01068) Sec. 2.4 and Table 1; summary at "
                  "ai-papers.xuzou.cn/papers/opt_2022",
        "hardware": {"gpu": "A100-SXM4-80GB", "nodes": 124, "gpus_per_node": 8,
                     "nic": None, "nics_per_node": None},
        "model": M.OPT_175B,
        "plan": {"tp": 8, "pp": 1, "dp": 124, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 8,
                 "global_batch": 992, "sequence_parallel": False, "schedule": "1f1b",
                 "zero_stage": 3, "recompute": "full", "precision": "fp16", "flash_attention": False},
        "measured": {"tflops_per_gpu": 147.0, "outcome": "ran"},
        "flops_convention": "not defined in the paper ('up to 147 TFLOP/s per GPU'); treat as "
                            "hardware FLOPs incl. recompute",
        "assumptions": [
            "global_batch 992 sequences: paper says 2M tokens; 2M/2048 = 977 is not divisible by "
            "dp 124, so the nearest multiple 124*8 = 992 (2.03M tokens) is assumed",
            "micro_batch 8 follows from that assumption",
            "zero_stage 3: Fully Sharded Data Parallel; recompute full: not stated",
            "network not stated in the paper",
            "measured value is a peak ('up to'), not an average",
            PRE_FLASH,
        ],
        "completeness": "partial",
    }
    bloom = {
        "id": "bloom-176b-384gpu",
        "publisher": "BigScience",
        "source": "bigscience-workshop/bigscience train/tr11-176B-ml/README.md: 'Replica setup' "
                  "and the log line at iteration 85376 (end of first epoch)",
        "hardware": {"gpu": "A100-SXM4-80GB", "nodes": 48, "gpus_per_node": 8,
                     "nic": "omni-path-100g", "nics_per_node": 4},
        "model": M.BLOOM_176B,
        "plan": {"tp": 4, "pp": 12, "dp": 8, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 2,
                 "global_batch": 2048, "sequence_parallel": False, "schedule": "1f1b",
                 "zero_stage": 1, "recompute": "full", "precision": "bf16", "p2p_blocking": True,
                 "p2p_scatter_gather": True, "flash_attention": False, "grad_accum_fusion": False,
                 "fp32_grads": True},
        "measured": {"step_time_s": 104.70, "tflops_per_gpu": 149.77, "samples_per_s": 19.561,
                     "outcome": "ran"},
        "flops_convention": "Megatron-DeepSpeed counter with the 4*2 coefficient (hardware FLOPs: "
                            "full activation recompute counted; README 'Throughput')",
        "assumptions": [
            "schedule 1f1b: DeepSpeed pipeline engine; p2p_blocking: its sends block the compute stream",
            SCATTER_GATHER_DEEPSPEED,
            UNFUSED_ACCUM_DEEPSPEED,
            "fp32_grads: DeepSpeed's BF16_Optimizer, written for this run, accumulates the gradients "
            "in fp32 ('gradient accumulation in FP32 ... is exactly what BF16Optimizer does', "
            "huggingface/blog bloom-megatron-deepspeed-technology.md) and reduces its fp32 copy over DP; "
            "declared since stop 19",
            "pipeline split: embedding counted as a block ('type:transformer|embedding'), "
            "stages hold 5 or 6 blocks (README); Strata's even split differs",
            "nic 'omni-path-100g' is not an hwdb id: Jean Zay Omni-Path, 4 links per node",
            "dropout 0.1 (README: Megatron defaults inherited)",
            PRE_FLASH,
        ],
        "completeness": "complete-with-assumptions",
    }
    zero = {
        "id": "zero-offload-10b-1gpu",
        "publisher": "Microsoft",
        "source": "Ren et al. 2021, ZeRO-Offload (arXiv 2101.06840) abstract (40 TFLOP/s, 10B, one "
                  "V100); config from deepspeedai/DeepSpeed docs/_tutorials/zero-offload.md",
        "hardware": {"gpu": "V100-SXM2-32GB", "nodes": 1, "gpus_per_node": 1,
                     "nic": None, "nics_per_node": None},
        "model": M.ZERO_OFFLOAD_10B,
        "plan": {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": 10,
                 "global_batch": 10, "sequence_parallel": False, "schedule": "1f1b",
                 "zero_stage": 2, "recompute": "full", "precision": "fp16",
                 "offload": {"optimizer": "cpu", "grads": "cpu"}, "flash_attention": False},
        "measured": {"tflops_per_gpu": 40.0, "outcome": "ran"},
        "flops_convention": "DeepSpeed/Megatron GPT-2 TFLOPS counter (recompute counted)",
        "assumptions": [
            "the paper's 40 TFLOP/s run is assumed to use the tutorial's config (50 x 4096, "
            "batch 10, checkpointed activations)",
            "tutorial GPU is a V100-SXM3 32GB (DGX-2); hwdb id V100-SXM2-32GB is the closest",
            "seq 1024, vocab 50257: Megatron GPT-2 tutorial defaults",
            "gradients offloaded with the optimizer: ZeRO-Offload moves the fp16 gradients to CPU "
            "memory as they are produced (Ren et al. Sec. 4.1, Fig. 2); only fp16 parameters and "
            "activations stay on the GPU",
            PRE_FLASH,
        ],
        "completeness": "partial",
    }
    ds = {
        "id": "deepseek-v3-2048gpu",
        "publisher": "DeepSeek",
        "source": "DeepSeek-AI 2024, DeepSeek-V3 Technical Report (arXiv 2412.19437) Sec. 3.1-3.2 "
                  "(cluster, PP16 / EP64 / ZeRO-1) and Table 1 (180K H800 GPU hours per trillion tokens)",
        "hardware": {"gpu": "H800-SXM5-80GB", "nodes": 256, "gpus_per_node": 8,
                     "nic": "ib-ndr", "nics_per_node": 8},
        "model": M.DEEPSEEK_V3,
        "plan": {"tp": 1, "pp": 16, "dp": 128, "cp": 1, "ep": 64, "vpp": 2, "micro_batch": 1,
                 "global_batch": 15360, "sequence_parallel": False, "schedule": "dualpipev",
                 "zero_stage": 1, "recompute": "selective", "recompute_modules": ["layernorm", "mla_up_proj", "moe_act"],
                 "precision": "fp8", "moe_act_fp8_cache": True, "moe_a2a_overlap": True, "moe_dispatcher": "deepep",
                 "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16", "moe_probs_at": "fc2_input"},
        "measured": {"gpu_hours_per_trillion_tokens": 180000.0,
                     "tokens_per_s_per_gpu": round(1e12 / (180000 * 3600), 1), "outcome": "ran"},
        "flops_convention": "none published; tokens_per_s_per_gpu is derived here as "
                            "1e12 / (180000 h * 3600 s/h)",
        "assumptions": [
            "schedule dualpipev: DualPipe (Sec. 3.2.1) in its V-shaped, cut-in-half form "
            "(deepseek-ai/DualPipe, DualPipeV): each GPU runs a stage and its mirror, as DualPipe does, "
            "with the same bubble; DualPipe keeps two parameter copies where DualPipeV keeps one "
            "(memory: Strata's is the DualPipeV one)",
            "moe_a2a_overlap: DualPipe overlaps the forward and backward chunks of two micro-batches "
            "so that dispatch and combine hide behind computation (Sec. 3.2.1)",
            "moe_dispatcher deepep: the cross-node all-to-all sends each token once per target node "
            "over IB, then forwards it over NVLink to the experts' GPUs, the two stages overlapped; "
            "with node-limited routing a token reaches at most 4 nodes (Sec. 3.2.2 and 2.1.2)",
            "global_batch 15360: the final value of the batch-size schedule (ramps from 3072)",
            "micro_batch 1: not published",
            "recompute selective, modules layernorm and mla_up_proj: RMSNorm and MLA up-projections "
            "are recomputed (Sec. 3.2.3); nothing says the attention core is",
            "recompute module moe_act: the SwiGLU inputs in MoE are cached and its output recomputed "
            "in the backward pass (Sec. 3.3.3, 'Low-Precision Activation' (2))",
            "moe_act_fp8_cache: those cached SwiGLU inputs 'are also stored in FP8 with our fine-grained "
            "quantization method' (same paragraph)",
            "fp8: fine-grained FP8 GEMMs, BF16/FP32 elsewhere",
            "exp_avg_dtype / exp_avg_sq_dtype bf16: 'we adopt the BF16 data format instead of FP32 to "
            "track the first and second moments in the AdamW optimizer' (Sec. 3.3.3); master weights "
            "and gradients stay FP32 (same section)",
            "moe_probs_at fc2_input: not published (the training framework is not public); the router "
            "weights are taken to multiply the SwiGLU output before the second expert GEMM, as "
            "Megatron-Core's weighted SwiGLU does. Sec. 3.3.3 already recomputes that output from its "
            "FP8-cached inputs in the backward pass, so the weights' gradient then needs nothing more; "
            "weighting the expert outputs at the combine instead would keep a BF16 copy of "
            "tokens x 8 x hidden per MoE layer, the largest activation of the layer (with it Strata "
            "puts the 4-layer ranks out of memory, 86.3 of 84.9 GB)",
            "multi-token prediction: one MTP module (Sec. 2.2, depth 1) on the last pipeline stage, "
            "sharing the embedding and the output head",
            "the GPU-hours figure averages the whole pretraining run (incl. failures/restarts)",
            "61 layers over 16 stages is uneven; the split is not published: Strata's default DualPipeV "
            "split, balanced by forward FLOPs with the head and the MTP module on rank 0 (since stop 21): 1 "
            "layer on the first virtual stage, 2 on each of the next 30, only the MTP module and the head on "
            "the last, the layout Megatron-Bridge's DeepSeek-V3 recipe gives the same 32 virtual stages "
            "(Et|(tt|)*30mL); until stop 21 an even split by layer count gave rank 0 three layers besides "
            "the MTP module and both heads (-25.8 %)",
        ],
        "completeness": "partial",
    }
    return [opt, bloom, zero, ds]


def all_entries():
    return korthikanti() + mtnlg() + llama3() + opt_bloom_zero_deepseek()
