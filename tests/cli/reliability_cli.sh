#!/usr/bin/env bash
# Hostile and careless input from the outside (issue #32; issue #33 items 5 and 6). Every check
# here failed before its fix: numeric flags out of range, a global batch that overflowed or
# exhausted memory, outputs over /dev/null, FIFOs, symlinks and a user's PATH.tmp, `-` for stdout
# with the report moved to stderr, a read-only or non-Strata hardware database, duplicate JSON
# keys, and the messages of unknown commands and scenario names.
# Args: $1 = strata binary, $2 = source dir.
set -u
S="$1"; SRC="$2"
T=$(mktemp -d); chmod 755 "$T"; trap 'chmod -R u+w "$T" 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# expect CODE WHAT COMMAND...: run it, stdout to $T/out, stderr to $T/err; the exit code must match.
expect() {
  local want="$1" what="$2"; shift 2
  "$@" >"$T/out" 2>"$T/err"; local rc=$?
  [ "$rc" -eq "$want" ] || { cat "$T/err"; fail "$what: exit $rc (want $want)"; }
}
says() { grep -q -- "$1" "$T/err" || { cat "$T/err"; fail "$2: the message lacks '$1'"; }; }
sanitized=0; ldd "$S" 2>/dev/null | grep -q 'libasan\|libubsan' && sanitized=1
# A null device of our own when running as root: a regression of the writer replaces the device it
# is given by a regular file (the bug of issue #32), and the system's /dev/null must not pay for it.
# A normal user cannot replace /dev/null, so it is safe to use directly. Likewise stdout is named
# /dev/fd/1 here: a regressed writer cannot create /dev/fd/1.tmp (it is under /proc).
NULLDEV=/dev/null
if [ "$(id -u)" -eq 0 ]; then mknod "$T/null" c 1 3 && NULLDEV="$T/null"; fi
SIM=(simulate --scenario gpt2-124m-single-h100)
PLAN=(plan --model gpt2-124m --cluster single-h100 --global-batch 8 --no-offload --threads 2 --quiet)

# ---- numeric flags carry their ranges: out of range is exit 2, never a silent default (defect 5)
while read -r cmd; do
  # shellcheck disable=SC2086
  expect 2 "$cmd" "$S" $cmd
  says "not in range\|could not be converted\|Could not convert" "$cmd"
done <<'EOF'
plan --model gpt2-124m --cluster dgx-h100-x1 --global-batch -8
plan --model gpt2-124m --cluster dgx-h100-x1 --global-batch 0
plan --model gpt2-124m --cluster dgx-h100-x1 --global-batch 1048577
plan --model gpt2-124m --cluster dgx-h100-x1 --seq-len -5
plan --model gpt2-124m --cluster dgx-h100-x1 --top -1
plan --model gpt2-124m --cluster dgx-h100-x1 --top x
plan --model gpt2-124m --cluster dgx-h100-x1 --threads -3
plan --model gpt2-124m --cluster dgx-h100-x1 --threads 0
plan --model gpt2-124m --cluster dgx-h100-x1 --threads 1025
capacity --model gpt2-124m --tokens 1B --deadline 1d --global-batch -8
capacity --model gpt2-124m --tokens 1B --deadline 1d --max-gpus 0
capacity --model gpt2-124m --tokens 1B --deadline 1d --min-gpus -1
capacity --model gpt2-124m --tokens 1B --budget -5
simulate --scenario gpt2-124m-single-h100 --steps 0
import-hf /dev/null --seq-len -1
plan-merge /dev/null --top -1
hwdb export --run 0
hwdb diff 0 1
profile --threads -3
fidelity --threads 0
EOF
# The crash of defect 1 (SIGFPE in divisors, exit 136): now the documented bound, at once.
expect 2 "--global-batch INT_MAX" timeout 60 "$S" plan --model gpt2-124m --cluster dgx-h100-x1 --global-batch 2147483647 --quiet
says "--global-batch" "INT_MAX batch"
says "1048576" "INT_MAX batch"
# One meaning, range and default for --threads on every command that has it (issue #33).
for c in plan capacity profile fidelity; do
  "$S" $c --help | tr -s ' \n' ' ' | grep -q -- '-j,--threads INT:INT in \[1 - 1024\] [^-]*(default: all cores)' ||
    { "$S" $c --help | grep -A1 -- --threads; fail "$c: --threads is not the common option"; }
done
"$S" capacity --model gpt2-124m --tokens 1B --deadline 1d --min-gpus 64 --max-gpus 16 >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] || fail "--min-gpus above --max-gpus: exit $rc (want 2)"

# ---- a plan too large to simulate: an input error naming plan.global_batch and the memory, at
# once (defect 6: 262,144 micro-batches grew to 12.7 GB, then std::bad_alloc, exit 1). Outside the
# sanitizers an address-space limit keeps a regression from eating the machine.
echo '{"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "global_batch": 1048576}' >"$T/huge.json"
if [ $sanitized -eq 0 ]; then lim="ulimit -v 8000000;"; else lim=""; fi
expect 2 "a plan with 2^20 micro-batches" bash -c "$lim exec timeout 120 \"\$@\"" _ "$S" simulate --model gpt3-175b \
  --cluster single-h100 --plan "$T/huge.json" --json "$T/huge-out.json"
says "huge.json: plan.global_batch = 1048576 gives 1048576 micro-batches" "huge plan"
says "GB of memory" "huge plan"
[ ! -e "$T/huge-out.json" ] || fail "output written for a plan too large to simulate"

# ---- duplicate JSON keys are refused with both positions (defect 7: the last one won)
printf '{"tp": 2, "pp": 1, "dp": 4, "micro_batch": 1,\n "global_batch": 64,\n "tp": 8}\n' >"$T/dup.json"
expect 2 "duplicate key" "$S" simulate --model gpt2-124m --cluster dgx-h100-x1 --plan "$T/dup.json"
says "dup.json: tp is given twice, at line 1, column 2 and at line 3, column 2" "duplicate key"

# ---- outputs: checked before the work, never destroying what the path names (defect 2)
expect 2 "plan --json into a missing folder" "$S" "${PLAN[@]}" --json "$T/no/such/dir/plans.json"
says "--json" "unwritable --json"
says "does not exist" "unwritable --json"
[ ! -s "$T/out" ] || fail "plan searched before finding its --json path unwritable"
expect 0 "--json /dev/null" "$S" "${SIM[@]}" --json "$NULLDEV"
[ -c "$NULLDEV" ] || fail "$NULLDEV is no longer a character device"
mkfifo "$T/fifo"
cat "$T/fifo" >"$T/fifo.out" &
reader=$!
expect 0 "--json FIFO" timeout 60 "$S" "${SIM[@]}" --json "$T/fifo"
wait $reader
[ -p "$T/fifo" ] || fail "the FIFO was replaced"
python3 -m json.tool "$T/fifo.out" >/dev/null || fail "the FIFO's reader got no JSON"
echo '{}' >"$T/real.json"; ln -s real.json "$T/link.json"
expect 0 "--json through a symlink" "$S" "${SIM[@]}" --json "$T/link.json"
[ -L "$T/link.json" ] || fail "the symlink was replaced by a file"
grep -q step_time_s "$T/real.json" || fail "the symlink's target was not written"
echo mine >"$T/r.json.tmp"
expect 0 "--json next to the user's r.json.tmp" "$S" "${SIM[@]}" --json "$T/r.json"
[ "$(cat "$T/r.json.tmp")" = mine ] || fail "the user's r.json.tmp was overwritten"
ls -A "$T" | grep -q '^\..*\.tmp$' && fail "a temporary file was left behind"
expect 2 "--json and --trace both to stdout" "$S" "${SIM[@]}" --json - --trace /dev/fd/1
says "both write to stdout" "two stdout outputs"
expect 2 "--json and --trace to one file" "$S" "${SIM[@]}" --json "$T/same.json" --trace "$T/same.json"
[ ! -e "$T/same.json" ] || fail "output written although two outputs named one file"

# ---- '-' for stdout on every output, the report on stderr: stdout parses as JSON (issue #33 #5)
set -o pipefail
"$S" hwdb init "$T/hw.db" >/dev/null || fail "hwdb init"
"$S" profile --backend cpu --quick --only cpu_adam --db "$T/hw.db" >/dev/null 2>&1 || fail "profile run 1"
"$S" profile --backend cpu --quick --only cpu_adam --db "$T/hw.db" --json - 2>"$T/err" | python3 -m json.tool >/dev/null ||
  fail "profile --json - is not JSON alone"
grep -q "wrote run 2" "$T/err" || fail "profile's report did not go to stderr"
"$S" "${PLAN[@]}" --json "$T/all.json" >/dev/null || fail "plan --json FILE"
python3 - "$SRC/bench/fidelity/runs.json" "$T/runs.json" <<'PY' || fail "fidelity subset"
import json, sys
d = json.load(open(sys.argv[1]))
small = sorted(d["entries"], key=lambda e: e["hardware"]["nodes"] * e["hardware"].get("gpus_per_node", 8))
d["entries"] = [e for e in small if not e.get("skipped")][:2]
json.dump(d, open(sys.argv[2], "w"))
PY
while IFS='|' read -r what report cmd; do
  # shellcheck disable=SC2086
  eval "\"\$S\" $cmd" 2>"$T/err" | python3 -m json.tool >/dev/null || { cat "$T/err"; fail "$what: stdout is not JSON alone"; }
  [ -z "$report" ] || grep -q -- "$report" "$T/err" || { cat "$T/err"; fail "$what: the report did not go to stderr"; }
done <<EOF
plan|Plans for|\${PLAN[@]} --json -
capacity|fewest GPUs|capacity --model gpt2-124m --tokens 1B --deadline 1d --max-gpus 8 --gpu H100-SXM5-80GB --quiet --json -
simulate|step time|\${SIM[@]} --json -
simulate trace|step time|\${SIM[@]} --trace -
memory|FITS|memory --scenario gpt2-124m-single-h100 --json -
hwdb list|H100-SXM5-80GB|hwdb list --json -
hwdb list runs|cpu|hwdb list --kind runs --db "\$T/hw.db" --json -
hwdb diff|cpu_adam|hwdb diff 1 2 --db "\$T/hw.db" --json -
hwdb export||hwdb export -o -
fidelity|MAPE|fidelity --runs "\$T/runs.json" --threads 2 --json -
export deepspeed||export --scenario gpt2-124m-single-h100 --format deepspeed -o -
import-hf||import-hf "\$SRC/tests/data/hf/llama-2-7b.json" -o -
plan-merge||plan-merge "\$T/all.json" -o -
EOF
set +o pipefail
"$S" "${SIM[@]}" --json /dev/fd/1 2>/dev/null | python3 -m json.tool >/dev/null || fail "--json /dev/fd/1 (stdout)"
# `hwdb list --json` holds the listed kind, a document `hwdb import` reads.
"$S" hwdb list --kind gpus --json "$T/gpus.json" >/dev/null || fail "hwdb list --json FILE"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert sorted(d) == ['gpus', 'schema'], sorted(d)" "$T/gpus.json" ||
  fail "hwdb list --json is not the listed kind"
"$S" hwdb import --db "$T/hw.db" "$T/gpus.json" >/dev/null || fail "hwdb import of a list --json document"

# ---- the hardware database: read-only for readers, never created from a file that is not one
# (defects 3 and 4)
: >"$T/empty.db"
for cmd in "${SIM[*]}" "hwdb list" "hwdb import $T/gpus.json" "profile --backend cpu --quick --only cpu_adam"; do
  # shellcheck disable=SC2086
  expect 2 "$cmd --db on an empty file" "$S" $cmd --db "$T/empty.db"
  says "empty.db: is not a Strata hardware database" "$cmd --db empty file"
done
[ ! -s "$T/empty.db" ] || fail "the empty file was turned into a database"
if command -v sqlite3 >/dev/null; then
  sqlite3 "$T/other.db" "CREATE TABLE t (x)"
  cp "$T/other.db" "$T/other.before"
  expect 2 "--db on another SQLite database" "$S" hwdb import --db "$T/other.db" "$T/gpus.json"
  says "without Strata's tables" "another SQLite database"
  cmp -s "$T/other.db" "$T/other.before" || fail "another application's database was modified"
fi
# A reader leaves the file as it was: make it a rollback-journal database (header bytes 18 and 19
# = 1); the old open switched every database it read to WAL.
"$S" hwdb init "$T/ro.db" >/dev/null || fail "hwdb init ro"
python3 - "$T/ro.db" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[18] = b[19] = 1; open(sys.argv[1], "wb").write(b)
PY
cp "$T/ro.db" "$T/ro.before"
for cmd in "hwdb list" "hwdb show H100-SXM5-80GB" "hwdb export -o $T/ro-export.json" "${SIM[*]}" \
           "memory --scenario gpt2-124m-single-h100" "${PLAN[*]}"; do
  # shellcheck disable=SC2086
  "$S" $cmd --db "$T/ro.db" >/dev/null 2>"$T/err" || { cat "$T/err"; fail "$cmd on a database it only reads"; }
done
cmp -s "$T/ro.db" "$T/ro.before" || fail "a command that only reads changed the database"
# Without write permission: as another user (root here) or with the modes taken away.
mkdir "$T/rodir"; mv "$T/ro.db" "$T/rodir/hw.db"
as_other=()
if [ "$(id -u)" -eq 0 ]; then
  command -v setpriv >/dev/null && as_other=(setpriv --reuid=65534 --regid=65534 --clear-groups)
else
  chmod 444 "$T/rodir/hw.db"; chmod 555 "$T/rodir"; as_other=(env)
fi
if [ ${#as_other[@]} -gt 0 ]; then
  for cmd in "hwdb list" "${SIM[*]}"; do
    # shellcheck disable=SC2086
    "${as_other[@]}" "$S" $cmd --db "$T/rodir/hw.db" >/dev/null 2>"$T/err" || { cat "$T/err"; fail "read-only database: $cmd"; }
  done
  "${as_other[@]}" "$S" hwdb import --db "$T/rodir/hw.db" "$T/gpus.json" >/dev/null 2>"$T/err"; rc=$?
  [ $rc -eq 1 ] || { cat "$T/err"; fail "import into a read-only database: exit $rc (want 1)"; }
  says "cannot be written by this user" "import into a read-only database"
  [ "$(ls -A "$T/rodir")" = "hw.db" ] || fail "files appeared beside a read-only database"
  # validate profiles a machine the database has not seen: into a copy for the run, left nowhere.
  mkdir "$T/rodir2"; "$S" hwdb init "$T/rodir2/hw.db" >/dev/null; cp "$T/rodir2/hw.db" "$T/rodir2.before"
  [ "$(id -u)" -eq 0 ] || { chmod 444 "$T/rodir2/hw.db"; chmod 555 "$T/rodir2"; }
  mkdir "$T/tmp"; chmod 777 "$T/tmp"
  "${as_other[@]}" env TMPDIR="$T/tmp" "$S" validate --scenario gpt-tiny-2cpu --db "$T/rodir2/hw.db" --steps 2 >"$T/out" 2>"$T/err"; rc=$?
  [ $rc -eq 0 ] || { cat "$T/err" "$T/out"; fail "validate on a read-only database: exit $rc (want 0)"; }
  grep -q "is not kept" "$T/out" || fail "validate did not say its profile is not kept"
  grep -q "largest errors" "$T/out" || fail "validate on a read-only database gave no report"
  [ "$(ls -A "$T/rodir2")" = "hw.db" ] || fail "files appeared beside a read-only database (validate)"
  cmp -s "$T/rodir2/hw.db" "$T/rodir2.before" || fail "validate changed a database it may not write"
  [ -z "$(ls -A "$T/tmp")" ] || fail "validate left its scratch database behind: $(ls -A "$T/tmp")"
else
  echo "note: running as root without setpriv: the no-write-permission check is skipped"
fi

# ---- messages (issue #32 and #33 #6)
expect 2 "--scenario on a folder" "$S" simulate --scenario "$SRC/scenarios"
says "is a directory, not a scenario file" "--scenario DIR"
expect 2 "unknown scenario" "$S" simulate --scenario nosuch
says '"nosuch" is neither a file nor a bundled scenario name' "--scenario nosuch"
grep -q "bundled  \|//" "$T/err" && fail "garbled message: $(cat "$T/err")"
expect 2 "near-miss scenario" "$S" simulate --scenario llama-3-8b-8xh10
says 'did you mean "llama-3-8b-8xh100"' "scenario did-you-mean"
expect 2 "unknown command" "$S" nosuch
says '"nosuch" is not a command of strata' "strata nosuch"
grep -q "A subcommand is required" "$T/err" && fail "strata nosuch still says 'A subcommand is required'"
expect 2 "misspelt command" "$S" simulat --scenario x
says 'did you mean "simulate"' "strata simulat"
expect 2 "unknown hwdb command" "$S" hwdb lst
says '"lst" is not a command of strata hwdb (did you mean "list"?)' "strata hwdb lst"
echo "reliability CLI: all checks passed"
