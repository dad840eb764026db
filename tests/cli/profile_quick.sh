#!/usr/bin/env bash
# `strata profile --backend cpu --quick` writes one run (exit 0, well under 2 minutes) that
# `strata hwdb list --kind runs` shows; --json writes the run; a bad --only kind exits 2 and
# leaves the database untouched; SIGINT during a profile exits 130 and writes nothing.
# Usage: profile_quick.sh STRATA_BINARY SOURCE_DIR
set -u
strata="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Only `strata hwdb init` creates a database: profiling into a path that does not exist is bad
# input (exit 2), found before any benchmark runs, and creates nothing.
"$strata" profile --backend cpu --quick --db "$tmp/tmp.db" --ssd-dir "$tmp" > /dev/null 2> "$tmp/err.txt"
rc=$?
[ $rc -eq 2 ] || fail "profile into a missing database exited $rc, expected 2"
grep -q "hwdb init" "$tmp/err.txt" || { cat "$tmp/err.txt"; fail "the message does not say how to create one"; }
[ ! -e "$tmp/tmp.db" ] || fail "profile created a database"
"$strata" hwdb init "$tmp/tmp.db" > /dev/null || fail "hwdb init"

start=$(date +%s)
timeout 120 "$strata" profile --backend cpu --quick --db "$tmp/tmp.db" --ssd-dir "$tmp" --json "$tmp/run.json" > "$tmp/out.txt" 2> "$tmp/err.txt"
rc=$?
[ $rc -eq 0 ] || { cat "$tmp/err.txt"; fail "profile exited $rc"; }
[ $(( $(date +%s) - start )) -lt 120 ] || fail "quick profile took more than 2 minutes"
grep -q "busbw(GB/s)" "$tmp/out.txt" || fail "no nccl-tests style table"
grep -q "wrote run 1 " "$tmp/out.txt" || fail "no run written"
"$strata" hwdb list --kind runs --db "$tmp/tmp.db" > "$tmp/runs.txt" 2>&1 || fail "hwdb list failed"
grep -q "cpu" "$tmp/runs.txt" || { cat "$tmp/runs.txt"; fail "hwdb list does not show the cpu run"; }
grep -q '"kind": "collective"' "$tmp/run.json" || fail "--json lacks collective rows"
grep -q '"key": "all_reduce/intra/2"' "$tmp/run.json" || fail "--json lacks the all_reduce fit"

# Bad input: exit 2, database untouched.
before=$(wc -l < "$tmp/runs.txt")
"$strata" profile --backend cpu --quick --only gemms --db "$tmp/tmp.db" > /dev/null 2>&1
rc=$?
[ $rc -eq 2 ] || fail "bad --only exited $rc, expected 2"

# Interrupt: SIGINT while the (non-quick) collective sweep runs -> exit 130, nothing written.
# (A background job starts with SIGINT ignored until strata installs its handler: wait for that.)
timeout 100 "$strata" profile --backend cpu --only collective,ssd --db "$tmp/tmp.db" --ssd-dir "$tmp" > /dev/null 2>&1 &
pid=$!
# Wait (up to 60 s) until strata catches SIGINT: bit 1 (signal 2) of SigCgt in /proc. A fixed
# sleep lost the race on a loaded machine, and the ignored SIGINT let the sweep run to the end.
# $pid is timeout's; strata is its child.
for _ in $(seq 1 600); do
  child=$(awk -v p="$pid" '$4 == p {print $1; exit}' /proc/[0-9]*/stat 2>/dev/null)
  cgt=$([ -n "$child" ] && awk '/^SigCgt:/ {print $2}' "/proc/$child/status" 2>/dev/null)
  [ -n "$cgt" ] && [ $(( 0x$cgt & 2 )) -ne 0 ] && break
  sleep 0.1
done
sleep 1
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "interrupted profile exited $rc, expected 130"
"$strata" hwdb list --kind runs --db "$tmp/tmp.db" > "$tmp/runs2.txt" 2>&1
[ "$(wc -l < "$tmp/runs2.txt")" -eq "$before" ] || fail "interrupted or failed profile changed the database"
echo OK
