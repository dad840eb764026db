# llm.c's GPT-2 reproductions (karpathy/llm.c scripts/run_gpt2_*.sh): the step time each script's
# header states for its own command line, on the 8-GPU node it names. Data only: no I/O here.
import models as M

LLMC = "karpathy/llm.c scripts/run_gpt2_{m}.sh (header comment: 'on 8X {g} ... steps in ~{t}/iter')"

COMMON_ASSUME = [
    "llm.c train_gpt2cu built with USE_CUDNN=1 (the script's make line): cuDNN's fused flash attention "
    "(flash_attention, attention_kernel fa3: the FA3 class on Hopper, the fused family's anchors on Ampere), "
    "bf16 (llm.c's default precision)",
    "fused_classifier reads the bf16 logits and writes dlogits in place: loss_upcast false",
    "matmul_backward accumulates weight gradients in the cuBLASLt GEMM (beta = 1): grad_accum_fusion",
    "llm.c's own fused LayerNorm, residual and GELU kernels: eager_elementwise false (gelu_fusion into the "
    "GEMM epilogue defaults to off in train_gpt2.cu, so GELU stays its own kernel)",
    "-z 1: ZeRO-1 (optimizer state sharded over the 8 ranks); -r 0: no recomputation",
    "global_batch = -d tokens / -t; micro_batch = -b; gradient accumulation = global / (micro x 8)",
    "vocabulary 50257 (llm.c pads the embedding table to 50304 columns: 0.1 % more logits)",
    "one node: NVSwitch between the 8 GPUs; the NIC is not used",
    "the step time is the header's approximate figure ('~'), not a logged mean",
]


def llmc_gpt2():
    rows = [  # script, model, gpu, micro_batch, tokens per step, seconds per step, published text
        ("124M", M.gpt("gpt2-124m-llmc", 12, 768, 12, 50257, 1024, dropout=0.0), "A100-SXM4-80GB", 64, 524288, 0.300, "300ms"),
        ("350M", M.gpt("gpt2-350m-llmc", 24, 1024, 16, 50257, 1024, dropout=0.0), "A100-SXM4-80GB", 64, 524288, 0.820, "820ms"),
        ("774M", M.gpt("gpt2-774m-llmc", 36, 1280, 20, 50257, 1024, dropout=0.0), "A100-SXM4-80GB", 32, 524288, 1.7, "1.7s"),
        ("1558M", M.gpt("gpt2-1558m-llmc", 48, 1600, 25, 50257, 1024, dropout=0.0), "H100-SXM5-80GB", 16, 1048576, 2.80, "2.80s"),
    ]
    out = []
    for tag, model, gpu, mbs, tokens, step_s, text in rows:
        g = "A100 80GB SXM" if gpu.startswith("A100") else "H100 80GB SXM"
        out.append({
            "id": f"llmc-gpt2-{tag.lower()}-8x{gpu.split('-')[0].lower()}",
            "publisher": "karpathy/llm.c",
            "source": LLMC.format(m=tag, g=g, t=text),
            "hardware": {"gpu": gpu, "nodes": 1, "gpus_per_node": 8, "nic": None, "nics_per_node": 8},
            "model": model,
            "plan": {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "ep": 1, "vpp": 1, "micro_batch": mbs,
                     "global_batch": tokens // 1024, "sequence_parallel": False, "schedule": "1f1b",
                     "zero_stage": 1, "recompute": "none", "precision": "bf16",
                     "flash_attention": True, "attention_kernel": "fa3", "loss_upcast": False,
                     "grad_accum_fusion": True, "eager_elementwise": False},
            "measured": {"step_time_s": step_s, "outcome": "ran"},
            "framework": "llm.c",
            "flops_convention": "none (step time published)",
            "assumptions": list(COMMON_ASSUME),
            "completeness": "complete-with-assumptions",
        })
    return out


def all_entries():
    return llmc_gpt2()
