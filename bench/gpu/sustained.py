#!/usr/bin/env python3
"""Sustained throughput of a training layer on one GPU: does the GPU keep its first-second speed?

Microbenchmarks (strata profile, docs/profiler.md) time each GEMM for ~0.1 s on a cool GPU. A
training run keeps every SM busy for hours, at the board's power limit. This runs a Llama 3 8B
layer (1 x 8192 tokens, BF16) forward + backward back to back for `seconds` (default 90) and
records, once a second: the GPU time per iteration (CUDA events), the SM clock, power draw and
temperature (NVML through torch.cuda). Writes a JSON time series (argv[1]).
"""
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_overhead import DEV, Attention, Dense, train_step, write_json  # noqa: E402


def nvml(fn):
    try:
        return fn(0)
    except Exception:  # NVML missing or unsupported: leave the column empty
        return None


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "sustained.json"
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 90.0
    torch.manual_seed(0)
    x = torch.randn(1, 8192, 4096, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    step = train_step([Attention(4096, 32, 8, 128), Dense(4096, 14336)], x)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    series = []
    t_start = time.perf_counter()
    while time.perf_counter() - t_start < seconds:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        n = 0
        while time.perf_counter() - t0 < 1.0:
            step()
            n += 1
            if n % 8 == 0:
                torch.cuda.synchronize()
        end.record()
        torch.cuda.synchronize()
        series.append({"t_s": round(time.perf_counter() - t_start, 3), "iters": n,
                       "gpu_ms_per_iter": start.elapsed_time(end) / n,
                       "sm_clock_mhz": nvml(torch.cuda.clock_rate),
                       "power_w": (lambda p: p / 1000.0 if p is not None else None)(nvml(torch.cuda.power_draw)),
                       "temp_c": nvml(torch.cuda.temperature)})
        print(json.dumps(series[-1]), flush=True)
    first = series[0]["gpu_ms_per_iter"]
    tail = [s["gpu_ms_per_iter"] for s in series[-10:]]
    res = {"gpu": torch.cuda.get_device_properties(0).name, "torch": torch.__version__,
           "case": "llama-3-8b layer (1 x 8192, bf16) fwd+bwd, back to back", "seconds": seconds,
           "first_s_ms_per_iter": first, "last_10s_ms_per_iter": sum(tail) / len(tail),
           "slowdown_last_vs_first": sum(tail) / len(tail) / first, "series": series}
    write_json(out_path, res)


if __name__ == "__main__":
    main()
