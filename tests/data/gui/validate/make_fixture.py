#!/usr/bin/env python3
"""Writes the validation-view fixture: a `strata validate` report (schema strata.validate/1) and
its two traces, without the runtime. predicted.json is `strata simulate --trace` of gpt-tiny on
local-cpu with the gpt-tiny-pp2 plan (2 stages, 4 ranks); measured.json is the same trace with
times perturbed by hand-picked factors per class, as a CPU run might come out (GEMMs 12 % slower,
communication 35 % slower, the rest 5 %; starts stretched by 9 %; memory 4 % above). Rerun after a
change to the trace format:

    build/strata simulate --model gpt-tiny --cluster local-cpu --plan gpt-tiny-pp2 \
        --calibration none --trace tests/data/gui/validate/predicted.json
    python3 tests/data/gui/validate/make_fixture.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
FACTORS = {"gemm": 1.12, "comm": 1.35, "other": 1.05}


def cls(cat):
    label = cat.split(",", 1)[-1]
    if label == "gemm":
        return "gemm"
    if label.startswith("attention"):
        return "attention"
    if "(" in label or label in ("send", "recv"):
        return "collective" if "(" in label else "p2p"
    if label == "wait":
        return None
    return "memory_bound"


def main():
    with open(os.path.join(HERE, "predicted.json")) as f:
        pred = json.load(f)
    meas = json.loads(json.dumps(pred))
    for e in meas["traceEvents"]:
        if e["ph"] == "X":
            c = cls(e.get("cat", ""))
            k = "gemm" if c == "gemm" else "comm" if c in ("collective", "p2p") else "other"
            e["ts"] = round(e["ts"] * 1.09, 3)
            e["dur"] = round(e["dur"] * FACTORS[k], 3)
        elif e["ph"] == "C":
            e["ts"] = round(e["ts"] * 1.09, 3)
            e["args"]["bytes"] = round(e["args"]["bytes"] * 1.04)
    with open(os.path.join(HERE, "measured.json"), "w") as f:
        json.dump(meas, f, indent=0)

    def sums(doc):
        out = {}
        end = 0.0
        peak = 0.0
        for e in doc["traceEvents"]:
            if e["ph"] == "X":
                end = max(end, e["ts"] + e["dur"])
                c = cls(e.get("cat", ""))
                if c:
                    out[c] = round(out.get(c, 0.0) + e["dur"] * 1e-6, 9)
            elif e["ph"] == "C" and e["name"] == "memory gpu":
                peak = max(peak, e["args"]["bytes"])
        return out, round(end * 1e-6, 9), peak

    pc, pe, pp = sums(pred)
    mc, me, mp = sums(meas)
    err = lambda p, m: round(100.0 * (p / m - 1.0), 2)
    report = {
        "schema": "strata.validate/1",
        "scenario": "gpt-tiny on local-cpu, plan gpt-tiny-pp2",
        "backend": "cpu",
        "device": "hand-made fixture (no runtime)",
        "steps": 3,
        "calibration": "none (uncalibrated datasheet model)",
        "step_time": {"predicted_s": pe, "measured_s": me, "error_pct": err(pe, me)},
        "classes": [{"class": c, "predicted_s": pc[c], "measured_s": mc[c], "error_pct": err(pc[c], mc[c]),
                     "provenance": "datasheet"} for c in sorted(pc)],
        "memory": [{"tier": "gpu", "predicted_bytes": pp, "measured_bytes": mp, "error_pct": err(pp, mp)}],
        "predicted_trace": "predicted.json",
        "measured_trace": "measured.json",
    }
    with open(os.path.join(HERE, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
