#!/usr/bin/env bash
# strata-gui as a script runs it: --help lists the options; a screenshot is a whole PNG or SVG;
# bad input exits 2 with exactly the message `strata simulate` prints for the same file, and
# writes nothing; --plans-json writes the planner's JSON once the search completes.
# Args: $1 = strata-gui, $2 = strata, $3 = source dir.
set -u
gui="$1"
strata="$2"
src="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$gui" --help >"$tmp/help" 2>&1 || fail "--help exits $?"
for opt in --scenario --view --screenshot --report --whatif --plans-json --time; do
    grep -q -- "$opt" "$tmp/help" || fail "--help does not list $opt"
done
for v in scenario plans timeline memory capacity validation; do grep -q "$v" "$tmp/help" || fail "--help does not name the view $v"; done

# A screenshot of the timeline of a small scenario, and of a chart as SVG.
"$gui" --scenario "$src/scenarios/gpt-tiny-cpu.json" --view timeline --screenshot "$tmp/t.png" --size 1200x800 ||
    fail "screenshot exits $?"
[ "$(head -c 8 "$tmp/t.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "t.png is not a PNG"
"$gui" --scenario "$src/scenarios/gpt-tiny-cpu.json" --view memory --screenshot "$tmp/m.svg" || fail "svg screenshot exits $?"
grep -q "<svg" "$tmp/m.svg" || fail "m.svg is not an SVG"

# Bad input: a scenario with an unknown key. Same message and exit code as the CLI, no file.
bad="$tmp/bad.json"
sed -e "s|\"models/|\"$src/scenarios/models/|; s|\"clusters/|\"$src/scenarios/clusters/|; s|\"plans/|\"$src/scenarios/plans/|" \
    -e 's/"plan":/"plam":/' "$src/scenarios/gpt-tiny-cpu.json" >"$bad"
"$strata" simulate --scenario "$bad" >/dev/null 2>"$tmp/cli.err"
cli_rc=$?
"$gui" --scenario "$bad" --view timeline --screenshot "$tmp/bad.png" >/dev/null 2>"$tmp/gui.err"
gui_rc=$?
[ "$cli_rc" -eq 2 ] || fail "strata simulate exits $cli_rc on the bad scenario"
[ "$gui_rc" -eq 2 ] || { cat "$tmp/gui.err"; fail "strata-gui exits $gui_rc on the bad scenario, expected 2"; }
diff "$tmp/cli.err" "$tmp/gui.err" || fail "strata-gui's message differs from strata simulate's"
grep -q 'plam' "$tmp/gui.err" || fail "the message does not name the key"
[ ! -e "$tmp/bad.png" ] || fail "a screenshot was written for bad input"

# Malformed JSON: the same.
printf '{"model": "models/gpt-tiny.json",\n "cluster": }\n' >"$bad"
"$strata" simulate --scenario "$bad" >/dev/null 2>"$tmp/cli.err"
"$gui" --scenario "$bad" --view timeline --screenshot "$tmp/bad.png" >/dev/null 2>"$tmp/gui.err"
[ $? -eq 2 ] || fail "malformed JSON does not exit 2"
diff "$tmp/cli.err" "$tmp/gui.err" || fail "message differs on malformed JSON"

# Usage errors exit 2 too.
"$gui" --scenario "$src/scenarios/gpt-tiny-cpu.json" --view nowhere --screenshot "$tmp/x.png" 2>"$tmp/err"
[ $? -eq 2 ] || fail "--view nowhere does not exit 2"
grep -q "is not one of" "$tmp/err" || fail "--view nowhere: no list of views"
"$gui" --view validation --screenshot "$tmp/x.png" 2>"$tmp/err"
[ $? -eq 2 ] || fail "--view validation without --report does not exit 2"
[ ! -e "$tmp/x.png" ] || fail "a screenshot was written for a usage error"

# A report written by the runtime's `strata validate` (the real writer, not the fixture) opens in
# the validation view: the two ends of strata.validate/1 agree.
mkdir -p "$tmp/val"
"$strata" validate --scenario gpt-tiny-2cpu --steps 3 --no-profile --json "$tmp/val/r.json" >/dev/null 2>"$tmp/val.err" ||
    { cat "$tmp/val.err"; fail "strata validate exits $?"; }
"$gui" --report "$tmp/val/r.json" --view validation --screenshot "$tmp/val.png" 2>"$tmp/err" || { cat "$tmp/err"; fail "strata-gui refuses strata validate's report"; }
[ -s "$tmp/val.png" ] || fail "no screenshot of the validation view"

# A plan search written as the planner's JSON.
"$gui" --scenario "$src/scenarios/gpt-tiny-cpu.json" --plans-json "$tmp/plans.json" --no-offload || fail "--plans-json exits $?"
grep -q '"ranked"\|"plans"' "$tmp/plans.json" || fail "plans.json has no ranked plans"
echo "ok"
