#!/usr/bin/env python3
"""BF16 and FP8 GEMMs of two real layers, timed one by one on the GPU, for the simulator's per-op
comparison (docs/validation-gpu.md).

Shapes: every GEMM of a Llama 3 8B layer (1 x 8192 tokens) and of a Qwen3-30B-A3B layer's local
work under EP 8 (2 x 4096 tokens, 16 local experts of 4096 tokens each), forward (y = x W),
dgrad (dx = dy W^T) and wgrad (dW = x^T dy). FP8 is torch._scaled_mm with per-tensor scales (the
"current scaling" recipe's layout: A row-major, B column-major, e4m3 inputs, BF16 output); its
input cast is timed apart as what a current-scaling quantiser does (amax, scale, cast). Each
shape: 5 warm-ups, then the median of 30 event-timed launches over 4 rotating input sets.
Writes JSON (argv[1]).
"""
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_overhead import write_json  # noqa: E402

DEV = "cuda"
E4M3 = torch.float8_e4m3fn


def time_us(fn, reps=30):
    for _ in range(5):
        fn(0)
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(times)


def gemm_case(m, n, k, batch=1):
    """Times (us) of a batch of m x n x k GEMMs in BF16, in FP8, and of the FP8 input cast."""
    sets = 4
    A = [torch.randn(batch, m, k, device=DEV, dtype=torch.bfloat16) for _ in range(sets)]
    B = [torch.randn(batch, n, k, device=DEV, dtype=torch.bfloat16) for _ in range(sets)]  # W as n x k
    A8 = [a.to(E4M3) for a in A]
    B8 = [b.to(E4M3) for b in B]
    one = torch.ones((), device=DEV, dtype=torch.float32)

    def bf16(i):
        a, b = A[i % sets], B[i % sets]
        for j in range(batch):
            torch.mm(a[j], b[j].t())

    def fp8(i):
        a, b = A8[i % sets], B8[i % sets]
        for j in range(batch):
            torch._scaled_mm(a[j], b[j].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    def cast(i):
        a = A[i % sets]
        for j in range(batch):
            amax = a[j].abs().amax().float()
            (a[j] * (448.0 / amax).to(torch.bfloat16)).to(E4M3)

    return time_us(bf16), time_us(fp8), time_us(cast)


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "fp8_gemm.json"
    torch.manual_seed(0)
    layers = {
        # name: (tokens, [(linear, in, out, batch)])
        "llama-3-8b": (8192, [("qkv", 4096, 6144, 1), ("proj", 4096, 4096, 1), ("fc1", 4096, 28672, 1), ("fc2", 14336, 4096, 1)]),
        "qwen3-30b-a3b local": (8192, [("qkv", 2048, 5120, 1), ("proj", 4096, 2048, 1)]),
        "qwen3-30b-a3b experts": (4096, [("experts.fc1", 2048, 1536, 16), ("experts.fc2", 768, 2048, 16)]),
    }
    rows = []
    for layer, (tokens, lins) in layers.items():
        for name, d_in, d_out, batch in lins:
            for pas, (m, n, k) in (("fwd", (tokens, d_out, d_in)), ("dgrad", (tokens, d_in, d_out)), ("wgrad", (d_in, d_out, tokens))):
                t_bf16, t_fp8, t_cast = gemm_case(m, n, k, batch)
                r = {"layer": layer, "linear": name, "pass": pas, "m": m, "n": n, "k": k, "batch": batch,
                     "bf16_us": t_bf16, "fp8_us": t_fp8, "fp8_cast_us": t_cast,
                     "bf16_tflops": 2 * m * n * k * batch / t_bf16 / 1e6, "fp8_tflops": 2 * m * n * k * batch / t_fp8 / 1e6}
                print(json.dumps(r), flush=True)
                rows.append(r)
    res = {"gpu": torch.cuda.get_device_properties(0).name, "torch": torch.__version__, "rows": rows}
    write_json(out_path, res)


if __name__ == "__main__":
    main()
