#!/usr/bin/env python3
"""Strata's per-op predictions against the GPU measurements of bench/gpu (docs/validation-gpu.md).

Builds one-layer models matching the measured layers, simulates them on one GPU with the
uncalibrated datasheet model (`--calibration none`: the comparison is of the cost model itself),
sums the layer's kernels of the trace by class (GEMM, attention, other) and prints Markdown tables
next to the measurement.

  python3 bench/gpu/compare.py [--strata build/strata] [--runs docs/gpu-runs/2026-11-22-h100]
"""
import argparse
import collections
import json
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

LLAMA_8B = json.load(open(os.path.join(ROOT, "scenarios/models/llama-3-8b.json")))
# name in host_overhead.json -> (model overrides, micro-batch)
LAYERS = {
    "llama-3-8b layer (mbs 1 x 8192), fwd+bwd": ({"layers": 1, "vocab": 1024}, 1),
    "qwen3-30b-a3b layer (mbs 2 x 4096, 16 local experts), fwd+bwd, counts on host (sync)": (
        {"layers": 1, "hidden": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128, "ffn_hidden": 6144, "vocab": 1024,
         "seq_len": 4096, "max_position": 4096,
         "moe": {"experts": 16, "top_k": 8, "expert_ffn_hidden": 768, "moe_every": 1, "shared_experts": 0}}, 2),
    "same layer with a dense 6144 MLP instead of the MoE, fwd+bwd": (
        {"layers": 1, "hidden": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128, "ffn_hidden": 6144, "vocab": 1024,
         "seq_len": 4096, "max_position": 4096, "moe": None}, 2),
    "mpt-7b layer (mbs 6 x 2048), fwd+bwd": (
        {"layers": 1, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn_hidden": 16384, "ffn": "gelu", "vocab": 1024,
         "seq_len": 2048, "max_position": 2048, "norm": "layernorm", "position": "learned", "tied_embeddings": True}, 6),
}


def plan(micro_batch, precision):
    p = json.load(open(os.path.join(ROOT, "scenarios/plans/gpt2-124m-single.json")))
    p.update(name="one-gpu", micro_batch=micro_batch, global_batch=micro_batch, precision=precision)
    return p


def simulate(strata, model, plan_json, tmp):
    paths = {}
    for key, obj in (("m", model), ("p", plan_json)):
        paths[key] = os.path.join(tmp, f"{key}.json")
        with open(paths[key], "w") as f:
            json.dump(obj, f)
    trace = os.path.join(tmp, "trace.json")
    subprocess.run([strata, "simulate", "-m", paths["m"], "-c", "single-h100", "-p", paths["p"], "--calibration", "none",
                    "--trace", trace], check=True, stdout=subprocess.DEVNULL)
    by_class, by_op = collections.Counter(), collections.defaultdict(list)
    for e in json.load(open(trace))["traceEvents"]:
        if e.get("ph") != "X" or e.get("tid") != 0 or e["args"].get("layer", -1) < 0:
            continue
        phase, kind = e["cat"].split(",")[:2]
        cls = "attention" if kind.startswith("attention") else ("gemm" if kind == "gemm" else "other")
        by_class[cls] += e["dur"]
        if kind == "gemm":
            by_op[(phase, e["name"])].append(e["dur"])
    return by_class, by_op


def pct(pred, meas):
    return f"{(pred / meas - 1) * 100:+.1f}%"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default=os.path.join(ROOT, "build/strata"))
    ap.add_argument("--runs", default=os.path.join(ROOT, "docs/gpu-runs/2026-11-22-h100"))
    a = ap.parse_args()
    host = json.load(open(os.path.join(a.runs, "host_overhead.json")))
    cases = {c["case"]: c for c in host["cases"]}
    with tempfile.TemporaryDirectory() as tmp:
        print("| layer (BF16, fwd+bwd) | class | measured ms | Strata ms | error |")
        print("| --- | --- | --- | --- | --- |")
        for name, (over, mb) in LAYERS.items():
            model = dict(LLAMA_8B, name="layer", **over)
            pred, _ = simulate(a.strata, model, plan(mb, "bf16"), tmp)
            meas = cases[name]["gpu_us_by_class"]
            for cls in ("gemm", "attention", "other"):
                print(f"| {name.split(',')[0]} | {cls} | {meas.get(cls, 0) / 1000:.2f} | {pred[cls] / 1000:.2f} | "
                      f"{pct(pred[cls], meas.get(cls, 1e-9))} |")

        gemms = json.load(open(os.path.join(a.runs, "fp8_gemm.json")))["rows"]
        model = dict(LLAMA_8B, name="layer", layers=1, vocab=1024)
        print("\n| Llama 3 8B linear | pass | BF16 measured us | Strata | error | FP8 GEMM measured us | Strata FP8 (GEMM + fused cast) | error |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        _, bf = simulate(a.strata, model, plan(1, "bf16"), tmp)
        _, f8 = simulate(a.strata, model, plan(1, "fp8"), tmp)
        # The trace lists a linear's backward GEMMs dgrad first, then wgrad.
        tot = collections.Counter()
        for r in (r for r in gemms if r["layer"] == "llama-3-8b"):
            key = ("forward", r["linear"]) if r["pass"] == "fwd" else ("backward", r["linear"])
            i = {"fwd": 0, "dgrad": 0, "wgrad": 1}[r["pass"]]
            p_bf, p_f8 = bf[key][i], f8[key][i]
            m_f8 = r["fp8_us"]  # the GEMM kernel; the eager cast (fp8_cast_us) is unfused, not comparable
            tot["mb"] += r["bf16_us"]
            tot["pb"] += p_bf
            tot["mf"] += m_f8
            tot["pf"] += p_f8
            print(f"| {r['linear']} | {r['pass']} | {r['bf16_us']:.0f} | {p_bf:.0f} | {pct(p_bf, r['bf16_us'])} | "
                  f"{m_f8:.0f} | {p_f8:.0f} | {pct(p_f8, m_f8)} |")
        print(f"| all | | {tot['mb']:.0f} | {tot['pb']:.0f} | {pct(tot['pb'], tot['mb'])} | {tot['mf']:.0f} | "
              f"{tot['pf']:.0f} | {pct(tot['pf'], tot['mf'])} |")


if __name__ == "__main__":
    main()
