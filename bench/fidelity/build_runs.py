#!/usr/bin/env python3
# Builds bench/fidelity/runs.json from the source tables in sources_papers.py / sources_tables.py,
# checks every entry's arithmetic (GPU count, batch divisibility, MPT parameter counts, value
# ranges) and assigns the train/test split deterministically. It never edits a measured number.
# Usage: python3 bench/fidelity/build_runs.py [--check]   (--check: verify runs.json is current)
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import models  # noqa: E402
import sources_memory  # noqa: E402
import sources_papers  # noqa: E402
import sources_tables  # noqa: E402
import sources_torchtitan  # noqa: E402
import sources_llmc  # noqa: E402
import sources_automodel  # noqa: E402

HWDB_GPUS = {"V100-SXM2-32GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB",
             "H800-SXM5-80GB", "H200-SXM-141GB", "H100-SXM5-96GB-HBM2e"}
# NIC ids: hwdb link ids, plus "omni-path-100g" (BLOOM's Jean Zay fabric, not in hwdb; noted
# in that entry) and None where the source does not say.
HWDB_NICS = {None, "ib-hdr", "ib-ndr", "roce-200g", "roce-400g", "omni-path-100g"}
SCHEDULES = {"1f1b", "interleaved-1f1b", "gpipe", "dualpipev"}
RECOMPUTE = {"none", "selective", "full"}
# The framework that ran each family of entries (a plan.framework preset: lowering/src/spec/
# frameworks.cpp), by id prefix, with why. Entries of frameworks without a preset (Meta's own for
# OPT and Llama 3, DeepSeek's HAI-LLM) get none. `strata fidelity --presets-only` reads these entries
# with the preset in place of their hand-set knobs.
FRAMEWORK_BY_PREFIX = [
    ("bloom-", "megatron-deepspeed-2022", "BigScience's Megatron-DeepSpeed (tr11 scripts)"),
    ("mtnlg-", "megatron-deepspeed-2022", "MT-NLG paper: Megatron-LM layers in DeepSpeed's pipeline engine"),
    ("zero-offload-", "deepspeed-2021", "ZeRO-Offload paper: DeepSpeed (v0.3, January 2021) with Megatron's GPT-2 model"),
    ("korthikanti-", "megatron-lm-2021", "Megatron-LM before Megatron-Core (arXiv:2205.05198)"),
    ("megatron-ci-", "megatron-core", "Megatron-LM's functional tests on Megatron-Core"),
    ("bridge", "megatron-bridge", "Megatron-Bridge performance recipes"),
    ("nemo", "nemo", "NeMo 1.x performance configs of the NeMo Framework Launcher (24.03, 24.07)"),
    ("mpt-", "llm-foundry", "MosaicML's llm-foundry benchmarks"),
]
FRAMEWORKS = {"nemo-automodel", "megatron-lm-2021", "megatron-deepspeed-2022", "deepspeed-2021", "deepspeed", "megatron-core", "megatron-bridge", "nemo",
              "torchtitan", "torchtitan-compile", "llm-foundry", "llm.c", "hf-trainer"}


def assign_framework(e):
    """Sets e["framework"] from FRAMEWORK_BY_PREFIX unless the source module set it."""
    if "framework" in e:
        return
    if e["id"].startswith("torchtitan-"):
        # torchtitan's benchmark rows state whether torch.compile was on.
        e["framework"] = "torchtitan-compile" if "-compile-" in e["id"] else "torchtitan"
        return
    for prefix, name, _why in FRAMEWORK_BY_PREFIX:
        if e["id"].startswith(prefix):
            e["framework"] = name
            return
PRECISION = {"fp32", "bf16", "fp16", "fp8"}


def mpt_param_count(m):
    """GPT block with biases and LayerNorm(weight, bias): 12*d^2 + 13*d per layer, plus tied
    token embedding V*d, learned position table s*d and final LayerNorm 2*d (the same count the
    BigScience README uses for BLOOM: l*(12h^2 + 13h) + v*h + s*h + 2h)."""
    L, d, V, s = m["layers"], m["hidden"], m["vocab"], m["seq_len"]
    return L * (12 * d * d + 13 * d) + V * d + s * d + 2 * d


def check(e):
    """Returns a list of problems with entry e (empty when it is consistent)."""
    errs = []
    hw, p, m, meas = e["hardware"], e["plan"], e["model"], e["measured"]
    gpus = hw["nodes"] * hw["gpus_per_node"]
    if hw["gpu"] not in HWDB_GPUS:
        errs.append(f"unknown gpu {hw['gpu']}")
    if hw["nic"] not in HWDB_NICS:
        errs.append(f"unknown nic {hw['nic']}")
    if p["tp"] * p["pp"] * p["dp"] * p["cp"] != gpus:
        errs.append(f"tp*pp*dp*cp = {p['tp'] * p['pp'] * p['dp'] * p['cp']} != {gpus} GPUs")
    if p["global_batch"] % (p["micro_batch"] * p["dp"]):
        if not any("divisib" in a or "not divisible" in a for a in e["assumptions"]):
            errs.append("global_batch % (micro_batch*dp) != 0 and no note says so")
    if p["ep"] > 1 and (p["tp"] * p["dp"] * p["cp"]) % p["ep"]:
        errs.append(f"ep {p['ep']} does not divide tp*dp*cp")
    if (p["vpp"] > 1) != (p["schedule"] in ("interleaved-1f1b", "dualpipev")):
        errs.append("vpp > 1 must go with the interleaved schedule or DualPipeV")
    if p["schedule"] not in SCHEDULES or p["recompute"] not in RECOMPUTE:
        errs.append("bad schedule/recompute")
    if p["precision"] not in PRECISION:
        errs.append("bad precision")
    if m["heads"] % p["tp"]:
        errs.append(f"tp {p['tp']} does not divide heads {m['heads']}")
    if m["hidden"] % m["heads"] and "head_dim" not in m:
        errs.append("hidden not divisible by heads and no head_dim")
    if m["heads"] % m["kv_heads"]:
        errs.append("kv_heads does not divide heads")
    if meas.get("outcome") not in ("ran", "oom"):
        errs.append("outcome must be ran|oom")
    if not any(k in meas for k in ("tflops_per_gpu", "mfu", "tokens_per_s", "tokens_per_s_per_gpu",
                                   "step_time_s", "peak_hbm_bytes", "gpu_hours_per_trillion_tokens")) \
            and meas.get("outcome") != "oom":
        errs.append("no measured quantity")
    for k in ("mfu", "hfu"):
        if k in meas and not 0.05 < meas[k] < 0.9:
            errs.append(f"{k} {meas[k]} outside (0.05, 0.9): percent instead of fraction?")
    if "_num_params" in e and mpt_param_count(m) != e["_num_params"]:
        errs.append(f"parameter count {mpt_param_count(m)} != published {e['_num_params']}")
    if "mfu" in meas and "hfu" in meas and meas["hfu"] + 1e-9 < meas["mfu"]:
        errs.append("hfu < mfu")
    if e.get("framework") is not None and e["framework"] not in FRAMEWORKS:
        errs.append(f"unknown framework {e['framework']}")
    reg = e.get("publisher_regression")
    if reg is not None:
        # Only the publisher's own report of a regression of its software, with its address
        # (docs/fidelity-dataset.md, "Not scored"); never Strata's error.
        if not (isinstance(reg, dict) and set(reg) == {"source", "statement"}
                and str(reg["source"]).startswith("https://") and reg["statement"]):
            errs.append("publisher_regression needs exactly a source (https address) and a statement")
        if meas.get("outcome") != "ran":
            errs.append("publisher_regression applies to a run that ran")
    return errs


def apply_frozen_splits(entries):
    """The split is declared in splits.json, one line per id, so it cannot move when an entry's
    plan changes (the alternating rule sorts by recompute mode) or be chosen after seeing results.
    A new entry must be declared there first."""
    with open(os.path.join(HERE, "splits.json"), encoding="utf-8") as f:
        frozen = json.load(f)["splits"]
    missing = sorted(e["id"] for e in entries if e["id"] not in frozen)
    if missing:
        raise SystemExit("no declared split for: " + ", ".join(missing) + " (add them to splits.json)")
    unknown = sorted(set(frozen) - {e["id"] for e in entries})
    if unknown:
        raise SystemExit("splits.json names entries that do not exist: " + ", ".join(unknown))
    for e in entries:
        if frozen[e["id"]] not in ("train", "test"):
            raise SystemExit(f"splits.json: {e['id']} must be train or test")
        e["split"] = frozen[e["id"]]


def build():
    entries = (sources_papers.all_entries() + sources_tables.all_entries() + sources_memory.all_entries()
               + sources_torchtitan.all_entries() + sources_llmc.all_entries() + sources_automodel.all_entries())
    ids = [e["id"] for e in entries]
    dup = {i for i in ids if ids.count(i) > 1}
    problems = [f"duplicate id {d}" for d in sorted(dup)]
    for e in entries:
        assign_framework(e)
        problems += [f"{e['id']}: {msg}" for msg in check(e)]
    if problems:
        raise SystemExit("inconsistent entries:\n  " + "\n  ".join(problems))
    for e in entries:
        e.pop("_num_params", None)
    apply_frozen_splits(entries)
    entries.sort(key=lambda e: e["id"])
    return {"schema": 1,
            "description": "Published large-model training runs (config + measured result) for "
                           "calibrating and testing Strata; see docs/fidelity-dataset.md",
            "model_sources": models.SOURCES,
            "entries": entries}


def render(doc):
    return json.dumps(doc, indent=1, sort_keys=False, ensure_ascii=True) + "\n"


def main():
    text = render(build())
    path = os.path.join(HERE, "runs.json")
    if "--check" in sys.argv:
        with open(path, encoding="utf-8") as f:
            if f.read() != text:
                raise SystemExit("runs.json is stale: re-run build_runs.py")
        print("runs.json is current")
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
