#!/usr/bin/env bash
# `strata import-hf` on bad input exits 2 and writes no output file (not even a partial or .tmp
# one); on good input it exits 0 and writes a model file that names the HF shape.
# Args: $1 = strata binary, $2 = source dir.
set -u
strata="$1"
src="$2"
hf="$src/tests/data/hf"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

expect_exit() {  # expected_code description command...
    local want="$1" what="$2"
    shift 2
    "$@" >"$tmp/stdout" 2>"$tmp/stderr"
    local got=$?
    [ "$got" -eq "$want" ] || { cat "$tmp/stderr"; fail "$what: exit $got, expected $want"; }
}

# Unsupported architecture: exit 2, the message names the key, no file.
expect_exit 2 "unsupported architecture" "$strata" import-hf "$hf/bert-unsupported.json" -o "$tmp/bert.json"
grep -q "architectures" "$tmp/stderr" || fail "message does not name 'architectures'"
[ ! -e "$tmp/bert.json" ] || fail "output written for a bad config"
ls -A "$tmp" | grep -q '\.tmp$' && fail "temporary output left behind"

# Missing input file: exit 2, no file.
expect_exit 2 "missing config" "$strata" import-hf "$tmp/nope.json" -o "$tmp/nope-out.json"
[ ! -e "$tmp/nope-out.json" ] || fail "output written for a missing config"

# Not JSON at all: exit 2.
printf '{"architectures": ["LlamaForCausalLM"],' >"$tmp/broken.json"
expect_exit 2 "broken JSON" "$strata" import-hf "$tmp/broken.json" -o "$tmp/broken-out.json"
grep -q "not valid JSON" "$tmp/stderr" || fail "syntax error not reported"
[ ! -e "$tmp/broken-out.json" ] || fail "output written for broken JSON"

# An override that breaks a rule: GPT-2's learned table has 1024 rows, seq_len 2048 needs more.
expect_exit 2 "seq-len past the learned position table" "$strata" import-hf "$hf/gpt2.json" --seq-len 2048 -o "$tmp/g.json"
grep -q "max_position" "$tmp/stderr" || fail "message does not name max_position"
[ ! -e "$tmp/g.json" ] || fail "output written for a bad override"

# Existing output is not clobbered by a failing run.
echo "keep" >"$tmp/keep.json"
expect_exit 2 "bad config over an existing file" "$strata" import-hf "$hf/bert-unsupported.json" -o "$tmp/keep.json"
[ "$(cat "$tmp/keep.json")" = "keep" ] || fail "existing output was modified"

# Good input: exit 0, a model file with Llama-2-7B's shape, the name override applied.
expect_exit 0 "llama import" "$strata" import-hf "$hf/llama-2-7b.json" --name my-llama -o "$tmp/llama.json"
grep -q '"name": "my-llama"' "$tmp/llama.json" || fail "name override missing"
grep -q '"layers": 32' "$tmp/llama.json" || fail "layers missing"
grep -q '"ffn_hidden": 11008' "$tmp/llama.json" || fail "ffn_hidden missing"

# Deterministic: the same input gives the same bytes.
expect_exit 0 "llama import again" "$strata" import-hf "$hf/llama-2-7b.json" --name my-llama -o "$tmp/llama2.json"
cmp -s "$tmp/llama.json" "$tmp/llama2.json" || fail "output differs between identical runs"
# A sliding window shorter than the sequence is imported as the model's window (issue #31); with
# --sliding-window-as-full the windowed layers are costed as full attention instead (issue #33).
expect_exit 0 "mistral with its window" "$strata" import-hf "$hf/mistral-7b.json" -o "$tmp/mistral.json"
grep -q '"sliding_window": 4096' "$tmp/mistral.json" || fail "mistral's window missing"
expect_exit 0 "gpt-oss as full attention" "$strata" import-hf "$hf/gpt-oss-120b.json" --sliding-window-as-full -o "$tmp/oss.json"
grep -q "costed as full attention" "$tmp/oss.json" || fail "the model does not say its windows are costed as full attention"
echo "ok"
