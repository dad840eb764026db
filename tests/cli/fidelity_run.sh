#!/usr/bin/env bash
# strata fidelity from the outside: the test split runs, prints a table and the MAPE summary, writes
# JSON atomically; bad arguments exit 2 without output (a subset of the entries when the binary is
# built with the sanitizers). Args: $1 = strata binary, $2 = source dir.
set -u
S="$1"; SRC="$2"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
RUNS="$SRC/bench/fidelity/runs.json"
# Under ASan+UBSan a simulation costs about 20 times more (the whole suite took 21 minutes): the
# instrumented binary runs the 8 cheapest test entries and 4 train ones (micro-batches x layers),
# and the cheapest test entry with MoE, MLA, DualPipeV, interleaving, context parallelism, Megatron-
# Core's FLOP count and a published peak; the release build runs all 112.
full=1
if ldd "$S" 2>/dev/null | grep -q 'libasan\|libubsan'; then
  full=0
  python3 - "$RUNS" "$T/runs.json" <<'PY' || fail "subset"
import json, sys
d = json.load(open(sys.argv[1]))
def cost(e):
    p, m = e["plan"], e["model"]
    return p["global_batch"] // (p.get("micro_batch", 1) * p.get("dp", 1)) * m["layers"]
pick = lambda split, n: sorted((e for e in d["entries"] if e["split"] == split), key=cost)[:n]
chosen = pick("test", 8) + pick("train", 4)
# ... and the cheapest test entry of each kind the simulator treats differently.
kinds = [lambda e: e["model"].get("moe"), lambda e: e["model"].get("mla"), lambda e: e["plan"].get("schedule") == "dualpipev",
         lambda e: e["plan"].get("schedule") == "interleaved-1f1b", lambda e: e["plan"].get("cp", 1) > 1,
         lambda e: e.get("flops_convention") == "megatron-core", lambda e: "peak" in json.dumps(e.get("measured", {}))]
for k in kinds:
    have = sorted((e for e in d["entries"] if e["split"] == "test" and k(e)), key=cost)
    if have and have[0] not in chosen:
        chosen.append(have[0])
d["entries"] = chosen
json.dump(d, open(sys.argv[2], "w"))
PY
  RUNS="$T/runs.json"
fi

"$S" fidelity --runs "$RUNS" --split test --json "$T/test.json" >"$T/out" 2>"$T/err"; rc=$?
[ $rc -eq 0 ] || { cat "$T/err"; fail "fidelity --split test: exit $rc"; }
grep -q "MAPE" "$T/out" || fail "no MAPE in the output"
if [ $full -eq 1 ]; then
  grep -q "korthikanti-530b-selective" "$T/out" || fail "a test entry is missing from the table"
  grep -q "mtnlg-530b-2240gpu" "$T/out" && fail "a train entry appears in --split test"
else
  for id in $(python3 -c "import json,sys; print(' '.join(e['id'] for e in json.load(open(sys.argv[1]))['entries'] if e['split'] == 'test'))" "$RUNS"); do
    grep -q -- "$id" "$T/out" || fail "test entry $id is missing from the table"
  done
  for id in $(python3 -c "import json,sys; print(' '.join(e['id'] for e in json.load(open(sys.argv[1]))['entries'] if e['split'] == 'train'))" "$RUNS"); do
    grep -q -- "$id" "$T/out" && fail "train entry $id appears in --split test"
  done
fi
python3 - "$T/test.json" "$full" <<'PY' || fail "JSON content"
import json, sys
full = sys.argv[2] == "1"
d = json.load(open(sys.argv[1]))
assert all(e["split"] == "test" for e in d["entries"]), "split filter"
assert d["summary"]["test"]["entries"] == len(d["entries"]), d["summary"]["test"]
for e in d["entries"]:
    if "skipped" in e:
        continue
    if e.get("memory_only"):
        assert "predicted" not in e, e["id"]
    else:
        assert abs(e["predicted"] / e["published"] - 1 - e["error"]) < 1e-5, e["id"]
    if "published_peak_hbm_bytes" in e:
        assert abs(e["peak_hbm_bytes"] / e["published_peak_hbm_bytes"] - 1 - e["peak_error"]) < 1e-5, e["id"]
    assert e["hbm_capacity_bytes"] > 0, e["id"]
# The MAPE is over scored entries; a publisher-reported regression is listed, with the MAPE it
# would give beside.
cmp_ = [e for e in d["entries"] if "skipped" not in e and not e.get("memory_only")]
scored = [abs(e["error"]) for e in cmp_ if e.get("scored", True)]
s = d["summary"]["test"]
assert s["scored"] == len(scored) and s["not_scored"] == len(cmp_) - len(scored), s
assert not scored or abs(s["mape"] - sum(scored) / len(scored)) < 1e-5, s
assert not cmp_ or abs(s["mape_with_not_scored"] - sum(abs(e["error"]) for e in cmp_) / len(cmp_)) < 1e-5, s
assert all(e["publisher_regression"].startswith("https://") for e in cmp_ if not e.get("scored", True))
# Megatron-Bridge publishes TFLOP/s and tokens/s of each run: Strata's Megatron-Core FLOP count
# turns one into the other to within the tables' rounding (the cards print five digits).
mc = [e for e in d["entries"] if e.get("flops_convention") == "megatron-core"]
assert len(mc) >= 5 or not full, len(mc)
assert all(abs(e["convention_check"]) < 0.005 for e in mc), [(e["id"], e["convention_check"]) for e in mc]
PY
[ $full -eq 0 ] || grep -q "^not scored: " "$T/out" || fail "the summary does not say which entries are not scored"

# Same input, same bytes.
"$S" fidelity --runs "$RUNS" --split test --json "$T/again.json" --residuals "$T/res.json" >/dev/null 2>&1 || fail "second run"
cmp -s "$T/test.json" "$T/again.json" || fail "JSON output not deterministic"
# The stored residual table (the prediction intervals' data, issue #34) is what the documented
# command computes from the data set today: re-run it after a model or calibration change.
if [ $full -eq 1 ]; then
  cmp -s "$T/res.json" "$SRC/bench/fidelity/residuals.json" ||
    fail "bench/fidelity/residuals.json is stale: run strata fidelity --split test --residuals bench/fidelity/residuals.json"
fi
"$S" fidelity --runs "$RUNS" --split all --residuals "$T/res-all.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--residuals without --split test: exit $rc (want 2)"
[ ! -e "$T/res-all.json" ] || fail "residuals written for a split that is not held out"

# Bad input: exit 2, nothing written.
"$S" fidelity --runs "$RUNS" --split validation --json "$T/bad.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "bad --split: exit $rc (want 2)"
[ ! -e "$T/bad.json" ] || fail "output written on bad input"
"$S" fidelity --runs "$RUNS" --fit-measured >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--fit-measured without --fit-calibration: exit $rc (want 2)"
"$S" fidelity --runs "$RUNS" --fit-calibration "$T/m.json" --fit-measured >"$T/m.out" 2>&1; rc=$?
[ $rc -eq 2 ] || fail "--fit-measured on a database without measured GEMMs: exit $rc (want 2)"
grep -q "measured" "$T/m.out" || fail "--fit-measured's refusal does not say why"
[ ! -e "$T/m.json" ] || fail "a calibration written on a refused fit"
"$S" fidelity --runs "$T/missing.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "missing runs file: exit $rc (want 2)"
echo '{"schema": 2, "groups": [{"arch": "*", "factors": {"gemm": -1}}]}' >"$T/cal.json"
"$S" fidelity --runs "$RUNS" --split test --calibration "$T/cal.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "negative calibration factor: exit $rc (want 2)"
# A publisher-regression flag without its evidence: exit 2, the file, entry and field named.
python3 - "$RUNS" "$T/flag.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["entries"][0]["publisher_regression"] = {"source": "issue 1998", "statement": "slow"}
json.dump(d, open(sys.argv[2], "w"))
PY
"$S" fidelity --runs "$T/flag.json" --split test --json "$T/flag-out.json" >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] || fail "bad publisher_regression: exit $rc (want 2)"
grep -q "publisher_regression.source" "$T/err" || fail "bad publisher_regression: field not named: $(cat "$T/err")"
[ ! -e "$T/flag-out.json" ] || fail "output written on a bad flag"
echo OK
