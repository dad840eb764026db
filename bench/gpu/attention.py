#!/usr/bin/env python3
"""Causal attention throughput on one GPU by kernel family, for the attention model's anchors.

PyTorch's SDPA exposes two fused flash kernels on Hopper: its FLASH_ATTENTION backend
(FlashAttention-2, built into PyTorch) and CUDNN_ATTENTION (cuDNN's fused flash kernels, what the
NeMo recipes run). BF16, head dim 128, 32 heads, causal, b x s = 65,536 tokens per call, sequence
2k..64k. Forward and backward are timed apart (CUDA events, median of 10 after 3 warm-ups).
FLOPs follow the FlashAttention convention: forward 4 b h s^2 d / 2 (causal), backward 2.5 x
forward. Writes JSON (argv[1]).
"""
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_overhead import write_json  # noqa: E402

DEV = "cuda"


def time_ms(fn, reps=10):
    for _ in range(3):
        fn()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "attention.json"
    heads, d, tokens = 32, 128, 65536
    rows = []
    for name, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        for seq in (2048, 4096, 8192, 16384, 32768, 65536):
            b = tokens // seq
            q, k, v = (torch.randn(b, heads, seq, d, device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
            g = torch.randn(b, heads, seq, d, device=DEV, dtype=torch.bfloat16)
            fwd_flops = 4 * b * heads * seq * seq * d / 2
            try:
                with sdpa_kernel(backend):
                    t_f = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    t_b = time_ms(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
            except RuntimeError as e:  # backend unavailable for this shape
                rows.append({"kernel": name, "seq": seq, "error": str(e)[:160]})
                continue
            r = {"kernel": name, "seq": seq, "batch": b, "heads": heads, "head_dim": d,
                 "fwd_ms": t_f, "bwd_ms": t_b,
                 "fwd_tflops": fwd_flops / t_f / 1e9, "bwd_tflops": 2.5 * fwd_flops / t_b / 1e9}
            print(r, flush=True)
            rows.append(r)
            del q, k, v, g, o
    write_json(out_path, {"gpu": torch.cuda.get_device_properties(0).name, "torch": torch.__version__, "rows": rows})


if __name__ == "__main__":
    main()
