#!/usr/bin/env bash
# The loop on a machine with no GPU: a quick CPU profile writes a run, then `strata simulate` of the
# CPU-backend scenario prices its instructions from it (provenance measured/fitted, not datasheet).
# Args: $1 = strata binary, $2 = source dir.
set -u
S="$1"; SRC="$2"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$S" hwdb init "$T/seed.db" >/dev/null || fail "hwdb init"  # the seed alone (a by-hand profile may sit in the build's db)
"$S" simulate --scenario "$SRC/scenarios/gpt-tiny-cpu.json" --db "$T/seed.db" --json "$T/before.json" >/dev/null || fail "simulate on the seed db"
"$S" hwdb init "$T/p.db" >/dev/null || fail "hwdb init"
"$S" profile --backend cpu --quick --db "$T/p.db" --ssd-dir "$T" >/dev/null 2>&1 || fail "cpu profile"
"$S" simulate --scenario "$SRC/scenarios/gpt-tiny-cpu.json" --db "$T/p.db" --json "$T/after.json" >/dev/null || fail "simulate with the profile"
python3 - "$T" <<'PY' || fail "provenance did not switch to measured/fitted"
import json, sys
t = sys.argv[1]
def prov(f):
    j = json.load(open(f))
    p = j["provenance"]
    return p.get("measured", 0) + p.get("fitted", 0), p.get("datasheet", 0)
b_meas, _ = prov(f"{t}/before.json")
a_meas, a_data = prov(f"{t}/after.json")
assert b_meas == 0, ("seed db has measurements?", b_meas)
assert a_meas > 0, ("no measured/fitted costs after profiling", a_meas, a_data)
PY
echo "profile -> simulate on CPU: provenance switched"
