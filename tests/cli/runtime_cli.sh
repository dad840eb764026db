#!/usr/bin/env bash
# strata run and strata validate from the outside, on the bundled 2-rank CPU scenario: the loss
# is printed per step and falls on the bundled text, in fp32 and bf16; JSON and traces parse; the
# memory-only walk gives the run's peaks; a checkpoint resumes the same numbers; what the runtime
# cannot execute exits 2; Ctrl-C stops between steps (exit 130) and saves; validate profiles a
# machine hwdb has not seen and writes its report with both timelines. Args: $1 = strata binary, $2 = source dir.
set -u
S="$1"; SRC="$2"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$S" run --scenario gpt-tiny-2cpu --steps 12 --data text --lr 3e-3 --json "$T/run.json" --trace "$T/trace.json" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] || { cat "$T/err"; fail "run: exit $rc"; }
[ "$(grep -c '^step ' "$T/out")" -eq 12 ] || fail "expected 12 step lines"
for w in "loss" "ms" "tokens/s" "MFU" "peak gpu"; do grep -q "$w" "$T/out" || fail "step line lacks '$w'"; done
python3 - "$T/run.json" "$T/trace.json" <<'PY' || fail "run JSON / trace content"
import json, math, sys
r = json.load(open(sys.argv[1]))
assert r["schema"] == "strata.run/1"
l = [s["loss"] for s in r["steps"]]
assert len(l) == 12 and abs(l[0] - math.log(256)) < 0.1, l[0]   # chance, 256 bytes
assert l[-1] < l[0] - 0.5, l                                     # it learns the text
assert all(s["peak_bytes"]["gpu"] > 0 for s in r["steps"])
t = json.load(open(sys.argv[2]))
spans = [e for e in t["traceEvents"] if e.get("ph") == "X"]
assert len(spans) > 100 and all(e["dur"] >= 0 for e in spans)
assert {e["pid"] for e in spans} == {0, 1}
PY

# --backend emulated: the cuda backend's executor path over the cpu kernels, both ranks with a
# device of their own, their collectives and transfers staged through the host: the cpu run's
# losses (fp32: the same kernels, summed in the same order on this plan) to 1e-4.
"$S" run --scenario gpt-tiny-2cpu --steps 3 --data text --lr 3e-3 --backend emulated --json "$T/emu.json" >"$T/out" 2>"$T/err" \
  || { cat "$T/err"; fail "run --backend emulated"; }
grep -q "emulated backend" "$T/out" || fail "the run does not name the emulated backend"
python3 - "$T/run.json" "$T/emu.json" <<'PY' || fail "the emulated device's losses differ from the cpu backend's"
import json, sys
cpu = [s["loss"] for s in json.load(open(sys.argv[1]))["steps"]][:3]
emu = [s["loss"] for s in json.load(open(sys.argv[2]))["steps"]]
assert len(emu) == 3 and all(abs(a - b) <= 1e-4 * abs(a) for a, b in zip(cpu, emu)), (cpu, emu)
PY

# DeepSeek-V3's layer in miniature (MLA, 8 routed experts over dp 2 x ep 2, an MTP module; bf16):
# it learns the text and the MTP loss is reported and falls with it; the emulated device follows.
# Within 10 steps the routing sends no row to one rank's experts in some micro-batch (until stop 58
# that stopped the run: "reads experts.fc1.out, which nothing has written").
for b in cpu emulated; do
  "$S" run --scenario deepseek-tiny-2cpu --steps 10 --data text --lr 3e-3 --backend $b --json "$T/ds-$b.json" >"$T/out" 2>"$T/err" \
    || { cat "$T/err"; fail "run deepseek-tiny-2cpu --backend $b"; }
  grep -q "mtp loss" "$T/out" || fail "the step line lacks the MTP loss"
done
python3 - "$T/ds-cpu.json" "$T/ds-emulated.json" <<'PY' || fail "deepseek-tiny: losses"
import json, math, sys
a, b = (json.load(open(f))["steps"] for f in sys.argv[1:3])
l, m = [s["loss"] for s in a], [s["mtp_loss"] for s in a]
assert abs(l[0] - math.log(256)) < 0.1 and abs(m[0] - math.log(256)) < 0.1, (l[0], m[0])
assert l[-1] < l[0] - 1.0 and m[-1] < m[0] - 1.0, (l, m)
assert all(abs(x["loss"] - y["loss"]) <= 2e-3 * x["loss"] for x, y in zip(a, b)), ([x["loss"] for x in a], [y["loss"] for y in b])
PY

# The memory-only walk gives the run's peak (the run's largest over its 12 steps), in no time, and
# --backend cuda needs no GPU for it. On this 2-stage pipeline a run's order depends on when the
# peer's transfers arrive (its peak moves by about 1 % from step to step), the walk takes program
# order: within 5 % (equal to the byte without a pipeline: tests/runtime/test_runtime.cpp).
for b in cpu cuda; do
  "$S" run --scenario gpt-tiny-2cpu --memory-only --backend $b --json "$T/walk-$b.json" >"$T/walk" 2>"$T/err" || { cat "$T/err"; fail "run --memory-only --backend $b"; }
  grep -q "memory only" "$T/walk" || fail "memory-only report"
done
python3 - "$T/run.json" "$T/walk-cpu.json" <<'PY' || fail "memory-only peaks differ from the run's"
import json, sys
run = json.load(open(sys.argv[1]))["steps"]
walk = json.load(open(sys.argv[2]))["steps"][0]["peak_bytes"]
for tier in ("gpu", "cpu", "ssd"):
    peak = max(s["peak_bytes"][tier] for s in run)
    assert abs(walk[tier] - peak) <= 0.05 * peak, (tier, walk[tier], peak)
PY

# --peak-detail: the largest rank's holdings at its peak, largest first, and every rank's in --json.
"$S" run --scenario gpt-tiny-2cpu --memory-only --peak-detail 5 --json "$T/detail.json" >"$T/detail" 2>"$T/err" || { cat "$T/err"; fail "run --peak-detail"; }
grep -q "at its GPU peak" "$T/detail" || fail "peak detail report"
python3 - "$T/detail.json" <<'PY' || fail "peak detail json"
import json, sys
d = json.load(open(sys.argv[1]))
detail, peak = d["peak_detail"], d["steps"][0]["peak_bytes"]["gpu"]
assert len(detail) == 2 and detail[0]["bytes"] == peak, (len(detail), detail[0]["bytes"], peak)
sizes = [h["bytes"] for h in detail[0]["largest"]]
assert len(sizes) == 5 and sizes == sorted(sizes, reverse=True), sizes
assert any(h["what"] == "weights" for h in detail[0]["largest"]), detail[0]["largest"]
PY
"$S" run --scenario gpt-tiny-2cpu --memory-only --peak-detail -1 >/dev/null 2>"$T/err"; [ $? -eq 2 ] || fail "--peak-detail -1 should exit 2"

# bf16 (2-byte values rounded as written, fp32 master weights): it trains, and its walk holds less
# on the GPU than fp32's (2-byte activations and weights, though the masters add 4 B a parameter).
python3 - "$SRC/scenarios/plans/gpt-tiny-2cpu.json" "$T/bf16.json" <<'PY' || fail "bf16 plan"
import json, sys
p = json.load(open(sys.argv[1]))
p["precision"] = "bf16"
p["name"] += "-bf16"
json.dump(p, open(sys.argv[2], "w"))
PY
"$S" run --model gpt-tiny --cluster local-cpu-2 --plan "$T/bf16.json" --steps 6 --data text --lr 3e-3 --json "$T/bf.json" >/dev/null 2>"$T/err" \
  || { cat "$T/err"; fail "bf16 run"; }
"$S" run --model gpt-tiny --cluster local-cpu-2 --plan "$T/bf16.json" --memory-only --json "$T/bfw.json" >/dev/null 2>"$T/err" \
  || { cat "$T/err"; fail "bf16 memory-only walk"; }
python3 - "$T/bf.json" "$T/bfw.json" "$T/walk-cpu.json" <<'PY' || fail "bf16 run / walk"
import json, math, sys
l = [s["loss"] for s in json.load(open(sys.argv[1]))["steps"]]
assert len(l) == 6 and abs(l[0] - math.log(256)) < 0.1 and l[-1] < l[0], l
bf = json.load(open(sys.argv[2]))["steps"][0]["peak_bytes"]["gpu"]
fp = json.load(open(sys.argv[3]))["steps"][0]["peak_bytes"]["gpu"]
assert 0 < bf < fp, (bf, fp)
PY

# fp16 with Megatron's loss scaling: from 2^32 the first steps overflow and are skipped (the line
# says so); from --initial-loss-scale 1024 it trains.
sed 's/"precision": "bf16"/"precision": "fp16"/; s/-bf16"/-fp16"/' "$T/bf16.json" >"$T/fp16.json"
"$S" run --model gpt-tiny --cluster local-cpu-2 --plan "$T/fp16.json" --steps 2 --json "$T/f16a.json" >"$T/out" 2>"$T/err" \
  || { cat "$T/err"; fail "fp16 run"; }
grep -q "update skipped: fp16 overflow" "$T/out" || fail "fp16: the skipped step is not reported"
"$S" run --model gpt-tiny --cluster local-cpu-2 --plan "$T/fp16.json" --steps 4 --data text --lr 3e-3 --initial-loss-scale 1024 \
  --json "$T/f16b.json" >/dev/null 2>"$T/err" || { cat "$T/err"; fail "fp16 run from 1024"; }
python3 - "$T/f16a.json" "$T/f16b.json" <<'PY' || fail "fp16 steps"
import json, sys
a = json.load(open(sys.argv[1]))["steps"]
assert all(s["skipped"] for s in a) and a[0]["loss_scale"] == 2 ** 32, a
b = json.load(open(sys.argv[2]))["steps"]
assert not any(s["skipped"] for s in b) and b[-1]["loss"] < b[0]["loss"], b
PY

# Checkpoint after 3 steps, then 2 more; resumed, the same 2 losses.
"$S" run --scenario gpt-tiny-2cpu --steps 3 --save "$T/ck" >/dev/null 2>"$T/err" || { cat "$T/err"; fail "run --save"; }
[ -f "$T/ck/rank-0.bin" ] && [ -f "$T/ck/rank-1.bin" ] || fail "checkpoint files missing"
"$S" run --scenario gpt-tiny-2cpu --steps 2 --resume "$T/ck" --json "$T/a.json" >/dev/null 2>&1 || fail "resume A"
"$S" run --scenario gpt-tiny-2cpu --steps 2 --resume "$T/ck" --json "$T/b.json" >/dev/null 2>&1 || fail "resume B"
python3 - "$T/a.json" "$T/b.json" <<'PY' || fail "resumed losses differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert [s["step"] for s in a["steps"]] == [4, 5]
assert [s["loss"] for s in a["steps"]] == [s["loss"] for s in b["steps"]]
PY

# A MoE model runs over the pipeline (routed experts, ep = 1)...
cat >"$T/moe.json" <<'J'
{"name": "tiny-moe", "layers": 2, "hidden": 64, "heads": 4, "ffn_hidden": 128, "vocab": 256, "seq_len": 16,
 "moe": {"experts": 4, "top_k": 2}}
J
"$S" run --model "$T/moe.json" --cluster local-cpu-2 --plan "$SRC/scenarios/plans/gpt-tiny-2cpu.json" --steps 2 --json "$T/moe-run.json" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] || { cat "$T/err"; fail "MoE model: exit $rc, expected 0"; }
python3 - "$T/moe-run.json" <<'PY' || fail "MoE run: no finite loss for each step"
import json, math, sys
r = json.load(open(sys.argv[1]))
assert len(r["steps"]) == 2 and all(math.isfinite(s["loss"]) and s["loss"] > 0 for s in r["steps"])
PY
# ...and with token dropping (a capacity factor)...
sed 's/"top_k": 2}/"top_k": 2, "capacity_factor": 1.25}/' "$T/moe.json" >"$T/moe-capacity.json"
"$S" run --model "$T/moe-capacity.json" --cluster local-cpu-2 --plan "$SRC/scenarios/plans/gpt-tiny-2cpu.json" --steps 1 >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] || { cat "$T/err"; fail "MoE model with token dropping: exit $rc, expected 0"; }
# ...what the runtime does not execute is refused: exit 2, the field named.
sed 's/"seq_len": 16,/"seq_len": 16, "mtp_depth": 1,/' "$T/moe.json" >"$T/moe-mtp.json"
"$S" run --model "$T/moe-mtp.json" --cluster local-cpu-2 --plan "$SRC/scenarios/plans/gpt-tiny-2cpu.json" --steps 1 >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 2 ] || { cat "$T/err"; fail "MoE model with MTP: exit $rc, expected 2"; }
grep -q "model.mtp_depth" "$T/err" || fail "the refusal does not name model.mtp_depth"
# A checkpoint that is not there: exit 2.
"$S" run --model gpt-tiny --cluster local-cpu-2 --plan "$SRC/scenarios/plans/gpt-tiny-2cpu.json" --steps 1 --lr 0.5 --resume "$T/nosuch" >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] || fail "missing checkpoint: exit $rc, expected 2"

# Every bundled scenario walks (the last refused one until stop 67: Angel-PTM's weights split
# between the GPU and the host), its host tier as the memory model counts it.
"$S" run --scenario llama-2-13b-angel-ptm --memory-only --steps 2 >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] || { cat "$T/err"; fail "angel-ptm walk: exit $rc"; }
grep -q "cpu 52.0[0-9] GB per node" "$T/out" || { cat "$T/out"; fail "angel-ptm walk: host memory per node"; }

# Ctrl-C between steps: exit 130, a checkpoint saved, no partial JSON.
# The run's temporary ssd directory goes too (it leaked while Ctrl-C exited past the session).
mkdir -p "$T/tmp"
TMPDIR="$T/tmp" "$S" run --scenario gpt-tiny-2cpu --steps 1000000 --save "$T/int" --json "$T/int.json" >"$T/out" 2>"$T/err" &
pid=$!
for _ in $(seq 1 100); do grep -q '^step ' "$T/out" 2>/dev/null && break; sleep 0.1; done
kill -INT $pid; wait $pid; rc=$?
[ $rc -eq 130 ] || { cat "$T/err"; fail "interrupted run: exit $rc, expected 130"; }
grep -q "interrupted: stopped after step" "$T/err" || fail "no interruption message"
[ -z "$(ls -A "$T/tmp")" ] || fail "an interrupted run left $(ls "$T/tmp") in its temporary directory"
[ -f "$T/int/rank-0.bin" ] || fail "no checkpoint saved on Ctrl-C"
python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$T/int.json" || fail "partial JSON on Ctrl-C"

# validate: profiles a database that has never seen this machine, then reports.
"$S" hwdb init "$T/hw.db" >/dev/null || fail "hwdb init"  # the seed alone, whatever a by-hand validate left in the build's db
"$S" validate --scenario gpt-tiny-2cpu --db "$T/hw.db" --steps 3 --json "$T/v.json" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] || { cat "$T/err"; fail "validate: exit $rc"; }
grep -q "profiling this machine first" "$T/out" || fail "validate did not profile an unseen machine"
grep -q "timing the plan's own shapes on the cpu backend" "$T/out" || fail "validate did not time the plan's shapes"
for w in "step time" "gemm" "attention" "memory-bound" "p2p" "peak memory gpu" "largest errors"; do
  grep -q "$w" "$T/out" || fail "validate output lacks '$w'"
done
python3 - "$T/v.json" "$T" <<'PY' || fail "validate report content"
import json, os, sys
r = json.load(open(sys.argv[1]))
assert r["schema"] == "strata.validate/1" and r["backend"] == "cpu"
assert r["step_time"]["predicted_s"] > 0 and r["step_time"]["measured_s"] > 0
names = {c["class"] for c in r["classes"]}
assert {"gemm", "attention", "memory-bound", "p2p"} <= names, names
assert all(c["provenance"] in ("measured", "fitted", "datasheet", "none") for c in r["classes"])
# The plan's own GEMM and attention shapes were timed: their predictions read measured points.
prov = {c["class"]: c["provenance"] for c in r["classes"]}
assert prov["gemm"] == "measured" and prov["attention"] == "measured", prov
gpu = [m for m in r["memory"] if m["tier"] == "gpu"][0]
assert gpu["measured_bytes"] > 0 and abs(gpu["error_pct"]) < 25, gpu   # the memory model on the real tensors
for k in ("predicted_trace", "measured_trace"):
    t = json.load(open(os.path.join(sys.argv[2], r[k])))
    assert any(e.get("ph") == "X" for e in t["traceEvents"])
PY
# A second validate finds the measurements and does not profile again.
"$S" validate --scenario gpt-tiny-2cpu --db "$T/hw.db" --steps 2 >"$T/out2" 2>&1 || fail "second validate"
grep -q "profiling this machine first" "$T/out2" && fail "validate profiled again"
"$S" validate --scenario gpt-tiny-2cpu --db "$T/hw.db" --steps 2 --no-profile >"$T/out3" 2>&1 || fail "validate --no-profile"
grep -q "timing the plan's own shapes" "$T/out3" && fail "validate --no-profile timed shapes"
exit 0
