#!/usr/bin/env python3
"""Host (CPU) cost of issuing a training step's kernels from eager PyTorch, on a real GPU.

Strata's engine has a host issue model (docs/engine.md): each rank's CPU thread issues kernels in
program order at `host_launch_us` per launch and stops at every host sync (the MoE dispatcher
reads the per-expert token counts). This script measures the two things that model needs:

1. Host time per kernel in the host-bound regime (tiny shapes: the GPU is always waiting for the
   CPU, so wall time / kernels launched = host time per kernel), for
   - a bare op loop (PyTorch dispatch only, no autograd),
   - a dense Transformer MLP block, forward + autograd backward,
   - a MoE block written the way Megatron-Core's all-to-all dispatcher works (router, top-k,
     token counts read on the host, permute, one GEMM pair per local expert, un-permute),
     forward + autograd backward.
2. Real-size layers on one GPU. A Qwen3-30B-A3B decoder layer at its real local shapes on one GPU (micro-batch 2 x 4096
   tokens, h 2048, 32 query / 4 KV heads of 128, 16 local experts of 2048 x 768 with top-8 of
   16, which gives each expert the 4096 tokens it gets under EP 8 with 128 experts), BF16,
   forward + backward: wall time against the GPU's busy time (sum of kernel durations, from the
   profiler), with the token counts read on the host (dropless, as Megatron) and with static
   counts (no sync); the same layer with a dense MLP; a Llama 3 8B layer (1 x 8192 tokens); an
   MPT 7B layer as llm-foundry runs it (6 x 2048 tokens, native LayerNorm, GELU). GPU
   time is split into GEMM, attention and other kernels by kernel name, to set against the
   simulator's per-op costs (docs/validation-gpu.md).

Kernels are counted with torch.profiler in a separate run (the profiler slows the host down), and
timings use torch.cuda.synchronize around many iterations. Writes a JSON file (argv[1]).
"""
import json
import math
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F

DEV = "cuda"


def sync():
    torch.cuda.synchronize()


def write_json(path, obj):
    """Atomically: a killed run leaves the previous file, never half of one."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def count_kernels(fn, iters=3):
    """CUDA kernels (and memcpy/memset) launched per call of fn, and the GPU busy time per call."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        sync()
    n = 0
    busy_us = 0.0
    by_class, by_name = {}, {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            n += 1
            t = e.device_time if hasattr(e, "device_time") else e.cuda_time
            busy_us += t
            c = kernel_class(e.name)
            by_class[c] = by_class.get(c, 0.0) + t / iters
            k = by_name.setdefault(e.name[:90], [0, 0.0])
            k[0] += 1
            k[1] += t / iters
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:20]
    return n / iters, busy_us / iters, by_class, [{"kernel": k, "launches": v[0] // iters, "us": v[1]} for k, v in top]


def kernel_class(name):
    """GEMM, attention or the rest (elementwise, norms, reductions, copies), by kernel name."""
    low = name.lower()
    if "flash" in low or "fmha" in low or "attention" in low:
        return "attention"
    if any(w in low for w in ("gemm", "xmma", "cutlass", "nvjet", "cublas", "wgmma")):
        return "gemm"
    return "other"


def wall_us(fn, iters, warmup=5):
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters * 1e6


def measure(name, fn, iters):
    kernels, busy, by_class, top = count_kernels(fn)
    w = wall_us(fn, iters)
    r = {"case": name, "kernels_per_iter": kernels, "wall_us_per_iter": w, "gpu_busy_us_per_iter": busy,
         "host_us_per_kernel": w / max(kernels, 1), "gpu_busy_fraction": busy / w,
         "gpu_us_by_class": by_class}
    print(json.dumps(r), flush=True)
    r["top_kernels"] = top
    return r


# ------------------------------------------------------------------------------------------------
# Building blocks (BF16, no fused kernels beyond what PyTorch gives: SDPA picks flash attention)
# ------------------------------------------------------------------------------------------------
def rmsnorm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype) * w


class Dense(torch.nn.Module):
    def __init__(self, h, f):
        super().__init__()
        self.norm = torch.nn.Parameter(torch.ones(h, device=DEV, dtype=torch.bfloat16))
        self.fc1 = torch.nn.Parameter(torch.randn(h, 2 * f, device=DEV, dtype=torch.bfloat16) * 0.02)
        self.fc2 = torch.nn.Parameter(torch.randn(f, h, device=DEV, dtype=torch.bfloat16) * 0.02)

    def forward(self, x):
        y = rmsnorm(x, self.norm)
        a, b = (y @ self.fc1).chunk(2, dim=-1)
        return x + (F.silu(a) * b) @ self.fc2


class Attention(torch.nn.Module):
    def __init__(self, h, heads, kv_heads, hd):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv_heads, hd
        self.norm = torch.nn.Parameter(torch.ones(h, device=DEV, dtype=torch.bfloat16))
        self.qkv = torch.nn.Parameter(torch.randn(h, (heads + 2 * kv_heads) * hd, device=DEV, dtype=torch.bfloat16) * 0.02)
        self.out = torch.nn.Parameter(torch.randn(heads * hd, h, device=DEV, dtype=torch.bfloat16) * 0.02)

    def forward(self, x):
        b, s, h = x.shape
        y = rmsnorm(x, self.norm) @ self.qkv
        q, k, v = y.split([self.heads * self.hd, self.kv * self.hd, self.kv * self.hd], dim=-1)
        q = q.view(b, s, self.heads, self.hd).transpose(1, 2)
        k = k.view(b, s, self.kv, self.hd).transpose(1, 2)
        v = v.view(b, s, self.kv, self.hd).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return x + o.transpose(1, 2).reshape(b, s, -1) @ self.out


class Moe(torch.nn.Module):
    """Megatron-Core all-to-all dispatcher structure on one GPU (EP 1 stands in for EP 8: the
    local experts see the same token counts)."""

    def __init__(self, h, experts, top_k, f, sync_counts):
        super().__init__()
        self.e, self.k, self.sync_counts = experts, top_k, sync_counts
        self.norm = torch.nn.Parameter(torch.ones(h, device=DEV, dtype=torch.bfloat16))
        self.router = torch.nn.Parameter(torch.randn(h, experts, device=DEV, dtype=torch.bfloat16) * 0.02)
        self.fc1 = torch.nn.Parameter(torch.randn(experts, h, 2 * f, device=DEV, dtype=torch.bfloat16) * 0.02)
        self.fc2 = torch.nn.Parameter(torch.randn(experts, f, h, device=DEV, dtype=torch.bfloat16) * 0.02)

    def forward(self, x):
        shape = x.shape
        t = x.reshape(-1, shape[-1])
        y = rmsnorm(t, self.norm)
        probs = torch.softmax((y @ self.router).float(), dim=-1)
        w, idx = torch.topk(probs, self.k, dim=-1)
        flat = idx.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = order // self.k
        xp = y.index_select(0, token)  # permute: one copy per (token, expert)
        if self.sync_counts:
            counts = torch.bincount(flat, minlength=self.e).tolist()  # the host sync
        else:
            n = flat.numel()
            counts = [n // self.e] * self.e
            counts[-1] += n - sum(counts)
        outs = []
        for e, part in enumerate(xp.split(counts)):  # one GEMM pair per local expert
            a, b = (part @ self.fc1[e]).chunk(2, dim=-1)
            outs.append((F.silu(a) * b) @ self.fc2[e])
        yp = torch.cat(outs) * w.reshape(-1)[order].unsqueeze(-1).to(torch.bfloat16)
        out = torch.zeros_like(t).index_add_(0, token, yp)  # un-permute and sum the top_k copies
        return x + out.view(shape)


class MptBlock(torch.nn.Module):
    """An MPT (llm-foundry) layer: PyTorch's native LayerNorm (one fused kernel), attention, a
    4h GELU MLP, no biases; every op an eager PyTorch call, as llm-foundry runs them."""

    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(h, bias=False, device=DEV, dtype=torch.bfloat16)
        self.ln2 = torch.nn.LayerNorm(h, bias=False, device=DEV, dtype=torch.bfloat16)
        self.qkv = torch.nn.Parameter(torch.randn(h, 3 * h, device=DEV, dtype=torch.bfloat16) * 0.02)
        self.out = torch.nn.Parameter(torch.randn(h, h, device=DEV, dtype=torch.bfloat16) * 0.02)
        self.fc1 = torch.nn.Parameter(torch.randn(h, 4 * h, device=DEV, dtype=torch.bfloat16) * 0.02)
        self.fc2 = torch.nn.Parameter(torch.randn(4 * h, h, device=DEV, dtype=torch.bfloat16) * 0.02)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = (self.ln1(x) @ self.qkv).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + o.transpose(1, 2).reshape(b, s, h) @ self.out
        return x + F.gelu(self.ln2(x) @ self.fc1) @ self.fc2


def train_step(modules, x):
    """Forward, then backward from a fixed output gradient: no loss kernels in the measurement."""
    grad = torch.randn_like(x) * 1e-3

    def step():
        y = x
        for m in modules:
            y = m(y)
        y.backward(grad)
    return step


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "host_overhead.json"
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    res = {"gpu": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
           "cpu": platform.processor() or platform.machine(), "python": platform.python_version(), "cases": []}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    res["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    print(json.dumps({k: v for k, v in res.items() if k != "cases"}), flush=True)

    # 1. Host-bound regime: tiny shapes.
    a = torch.ones(16, device=DEV)

    def bare():
        for _ in range(100):
            a.add_(1.0)
    r = measure("bare op loop (100 in-place adds, no autograd)", bare, 200)
    r["kernels_per_iter"] = 100.0 if r["kernels_per_iter"] < 1 else r["kernels_per_iter"]
    res["cases"].append(r)

    x = torch.randn(1, 64, 256, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    dense = [Dense(256, 512) for _ in range(4)]
    res["cases"].append(measure("tiny dense MLP blocks x4, fwd+bwd (autograd)", train_step(dense, x), 200))
    att = [m for _ in range(2) for m in (Attention(256, 4, 2, 64), Dense(256, 512))]
    res["cases"].append(measure("tiny attention+MLP layers x2, fwd+bwd", train_step(att, x), 200))
    for sync_counts in (True, False):
        moe = [m for _ in range(2) for m in (Attention(256, 4, 2, 64), Moe(256, 16, 8, 64, sync_counts))]
        res["cases"].append(measure(f"tiny attention+MoE(16 experts) layers x2, fwd+bwd, counts {'on host (sync)' if sync_counts else 'static'}",
                                    train_step(moe, x), 100))

    # 2. Qwen3-30B-A3B layer at its real local shapes (BF16).
    try:
        xq = torch.randn(2, 4096, 2048, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        for sync_counts in (True, False):
            layer = [Attention(2048, 32, 4, 128), Moe(2048, 16, 8, 768, sync_counts)]
            res["cases"].append(measure(f"qwen3-30b-a3b layer (mbs 2 x 4096, 16 local experts), fwd+bwd, counts {'on host (sync)' if sync_counts else 'static'}",
                                        train_step(layer, xq), 20))
            del layer
        dense_layer = [Attention(2048, 32, 4, 128), Dense(2048, 6144)]
        res["cases"].append(measure("same layer with a dense 6144 MLP instead of the MoE, fwd+bwd", train_step(dense_layer, xq), 20))
        del dense_layer, xq
        x8 = torch.randn(1, 8192, 4096, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        llama = [Attention(4096, 32, 8, 128), Dense(4096, 14336)]
        res["cases"].append(measure("llama-3-8b layer (mbs 1 x 8192), fwd+bwd", train_step(llama, x8), 20))
        del llama, x8
        x7 = torch.randn(6, 2048, 4096, device=DEV, dtype=torch.bfloat16, requires_grad=True)
        mpt = [MptBlock(4096, 32)]
        res["cases"].append(measure("mpt-7b layer (mbs 6 x 2048), fwd+bwd", train_step(mpt, x7), 20))
    except torch.cuda.OutOfMemoryError as e:
        res["cases"].append({"case": "qwen3-30b-a3b layer", "error": str(e)[:200]})

    write_json(out_path, res)


if __name__ == "__main__":
    main()
