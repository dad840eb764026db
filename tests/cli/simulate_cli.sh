#!/usr/bin/env bash
# strata simulate from the outside: a bundled scenario prints the summary, writes JSON and a Chrome
# trace atomically and deterministically; OOM is reported, not an error; bad input exits 2 and
# writes nothing. Args: $1 = strata binary, $2 = source dir.
set -u
S="$1"; SRC="$2"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$S" simulate --scenario llama-3-8b-8xh100 --json "$T/r.json" --trace "$T/t.json" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] || { cat "$T/err"; fail "simulate: exit $rc"; }
for w in "step time" "tokens/s" "TFLOP/s per GPU" "MFU" "bubble" "exposed comm" "gpu (HBM)" "critical path" "cost provenance"; do
  grep -q "$w" "$T/out" || fail "summary lacks '$w'"
done
python3 - "$T/r.json" "$T/t.json" <<'PY' || fail "JSON content"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["step_time_s"] > 0 and 0 < r["mfu"] < 1, r["mfu"]
assert abs(r["tokens_per_s"] * r["step_time_s"] - 128 * 8192) / (128 * 8192) < 1e-3, r["tokens_per_s"]
t = json.load(open(sys.argv[2]))
assert len(t["traceEvents"]) > 100
assert any(e.get("ph") == "X" for e in t["traceEvents"])
PY

# Same input, same bytes.
"$S" simulate --scenario llama-3-8b-8xh100 --json "$T/r2.json" --trace "$T/t2.json" >"$T/out2" 2>/dev/null || fail "second run"
cmp -s "$T/r.json" "$T/r2.json" || fail "JSON output not deterministic"
cmp -s "$T/t.json" "$T/t2.json" || fail "trace output not deterministic"
cmp -s "$T/out" "$T/out2" || fail "summary not deterministic"

# A plan that does not fit: reported as OOM on the HBM tier, exit 0.
cat >"$T/plan1.json" <<'J'
{"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 1}
J
"$S" simulate --model llama-2-70b --cluster single-h100 --plan "$T/plan1.json" >"$T/oom" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] || { cat "$T/err"; fail "OOM plan: exit $rc"; }
grep -q "^gpu (HBM).*OOM" "$T/oom" || fail "no HBM OOM in the summary"

# The allocator replay with expandable segments (plan.expandable_segments) says so in the summary;
# the default one speaks of split segments. Time does not depend on the allocator.
grep -q "of which allocated .* the caching allocator's split segments" "$T/out" || fail "no allocated line"
python3 - "$SRC/scenarios/plans/llama-3-8b-8xh100.json" "$T/plan_exp.json" <<'PY' || fail "plan copy"
import json, sys
p = json.load(open(sys.argv[1]))
(p["plan"] if "plan" in p else p)["expandable_segments"] = True
json.dump(p, open(sys.argv[2], "w"))
PY
"$S" simulate --model "$SRC/scenarios/models/llama-3-8b.json" --cluster "$SRC/scenarios/clusters/dgx-h100-x1.json" \
  --plan "$T/plan_exp.json" >"$T/exp" 2>"$T/err" || { cat "$T/err"; fail "expandable: exit"; }
grep -q "of which allocated .* (expandable segments)" "$T/exp" || { cat "$T/exp"; fail "no expandable-segments line"; }
[ "$(grep '^step time' "$T/out")" = "$(grep '^step time' "$T/exp")" ] || fail "step time depends on the allocator"

# The analytical memory command warns when the headroom is within the allocator's reach (Llama 3
# 405B: 79.1 of 84.9 GB, 6.9 % left) and not with room to spare (Llama 3 8B: 50.9 GB).
"$S" memory --scenario llama-3-405b-16k-h100 >"$T/mem" 2>"$T/err" || { cat "$T/err"; fail "memory: exit"; }
grep -q "^note: .* of HBM left (6.9 %); PyTorch's caching allocator" "$T/mem" || { cat "$T/mem"; fail "no headroom note"; }
"$S" memory --scenario llama-3-8b-8xh100 >"$T/mem2" 2>/dev/null || fail "memory 8b: exit"
grep -q "^note:" "$T/mem2" && fail "headroom note with 40 % left"

# Bad input: exit 2, nothing written.
"$S" simulate --scenario no-such-scenario --json "$T/bad.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "unknown scenario: exit $rc (want 2)"
[ ! -e "$T/bad.json" ] || fail "output written on bad input"
echo '{"tp": 3, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 8}' >"$T/bad_plan.json"
"$S" simulate --model llama-3-8b --cluster dgx-h100-x1 --plan "$T/bad_plan.json" --json "$T/bad.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "invalid plan: exit $rc (want 2)"
[ ! -e "$T/bad.json" ] || fail "output written on an invalid plan"
"$S" simulate --scenario llama-3-8b-8xh100 --steps 0 >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--steps 0: exit $rc (want 2)"

# Calibration: the built-in Hopper set is applied by default and named in the summary; 'none'
# gives the uncalibrated model (a different step time: the Hopper GEMM factor is not 1); a
# calibration file with a bad factor exits 2 and writes nothing.
grep -q "^calibration .*set Hopper" "$T/out" || fail "summary does not name the Hopper calibration set"
"$S" simulate --scenario llama-3-8b-8xh100 --calibration none --json "$T/raw.json" >"$T/raw.out" 2>&1 || fail "--calibration none"
grep -q "^calibration .*none" "$T/raw.out" || fail "summary does not say uncalibrated"
python3 - "$T/r.json" "$T/raw.json" <<'PY' || fail "calibration had no effect"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["step_time_s"] > b["step_time_s"] * 1.2, (a["step_time_s"], b["step_time_s"])
assert a["calibration"]["gemm"] > 1 and b["calibration"]["gemm"] == 1 and b["calibration"]["overlap"] == 0, (a["calibration"], b["calibration"])
PY
echo '{"schema": 2, "groups": [{"arch": "Hopper", "factors": {"gemm": 0}}]}' >"$T/cal.json"
"$S" simulate --scenario llama-3-8b-8xh100 --calibration "$T/cal.json" --json "$T/bad.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "bad calibration factor: exit $rc (want 2)"
[ ! -e "$T/bad.json" ] || fail "output written with a bad calibration"

# A GPU id the hardware database does not know: exit 2, the message names the cluster file and
# the field, nothing written.
python3 - "$T/badgpu.json" <<'PY'
import json, sys
json.dump({"name": "x", "gpu": "H100-NOPE", "nodes": 1, "gpus_per_node": 1}, open(sys.argv[1], "w"))
PY
"$S" simulate --model llama-3-8b --cluster "$T/badgpu.json" --plan "$T/plan1.json" --json "$T/bad.json" >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] || fail "unknown GPU id: exit $rc (want 2)"
grep -q "badgpu.json: cluster.gpu" "$T/err" || { cat "$T/err"; fail "message does not name the cluster file and field"; }
[ ! -e "$T/bad.json" ] || fail "output written for an unknown GPU"
echo OK
