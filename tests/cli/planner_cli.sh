#!/usr/bin/env bash
# strata plan / plan-merge / capacity / export from the outside: exit codes (2 on bad input),
# no partial output files, Ctrl-C stops cleanly without writing, sharded search merges.
# Args: $1 = strata binary, $2 = source dir.
set -u
S="$1"; SRC="$2"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Bad input: exit 2 and nothing written.
"$S" plan --model no-such-model --cluster dgx-h100-x1 --json "$T/bad.json" >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] || fail "unknown model: exit $rc (want 2)"
grep -q "no-such-model" "$T/err" || fail "error does not name the model"
[ ! -e "$T/bad.json" ] || fail "partial output written on bad input"
"$S" plan --model gpt2-124m --cluster dgx-h100-x1 --shard 3/2 >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "bad --shard: exit $rc (want 2)"
"$S" capacity --model gpt2-124m --tokens lots --deadline 3d >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "bad --tokens: exit $rc (want 2)"

# A small search, whole and in two shards; the merge ranks the same best plan first.
common=(--model gpt2-124m --cluster dgx-h100-x1 --global-batch 32 --quiet --no-offload --threads 2)
"$S" plan "${common[@]}" --json "$T/all.json" >/dev/null || fail "plan failed"
"$S" plan "${common[@]}" --shard 0/2 --json "$T/s0.json" >/dev/null || fail "shard 0 failed"
"$S" plan "${common[@]}" --shard 1/2 --json "$T/s1.json" >/dev/null || fail "shard 1 failed"
"$S" plan-merge "$T/s0.json" "$T/s1.json" -o "$T/merged.json" || fail "merge failed"
python3 - "$T" <<'PY' || fail "merge mismatch"
import json, sys
t = sys.argv[1]
a = json.load(open(f"{t}/all.json")); m = json.load(open(f"{t}/merged.json"))
assert a["counts"]["considered"] == m["counts"]["considered"], (a["counts"], m["counts"])
assert a["counts"]["valid"] == m["counts"]["valid"]
best = lambda j: j["plans"][0]["simulation"]["tokens_per_s"]
# A shard simulates its own shortlist, so the merged best is at least the whole search's best.
assert best(m) >= best(a) * 0.999, (best(m), best(a))
PY

# A framework's search (docs/frameworks.md): llm.c runs data parallelism only, and every plan in
# the JSON names it and carries its preset (cuDNN flash attention, in-place loss); an unknown
# framework is refused with exit 2 and the known ones listed.
"$S" plan --model gpt2-124m --cluster dgx-h100-x1 --global-batch 32 --quiet --no-offload --framework llm.c \
    --json "$T/llmc.json" >/dev/null || fail "plan --framework llm.c failed"
python3 - "$T/llmc.json" <<'PY' || fail "llm.c search gave a plan llm.c cannot run"
import json, sys
plans = json.load(open(sys.argv[1]))["plans"]
assert plans
for p in plans:
    q = p["plan"]
    assert q["framework"] == "llm.c" and q["tp"] == 1 and q["pp"] == 1, q
    assert q["loss_upcast"] is False and q["attention_kernel"] == "fa3", q
PY
"$S" plan --model gpt2-124m --cluster dgx-h100-x1 --framework megatron >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] || fail "unknown --framework: exit $rc (want 2)"
grep -q "torchtitan" "$T/err" || fail "unknown framework error does not list the known ones"
# explain-plan names each value's origin.
cat > "$T/tt.json" <<JSON
{"model": "$SRC/scenarios/models/llama-3-8b.json", "cluster": "$SRC/scenarios/clusters/dgx-h100-x1.json",
 "plan": {"framework": "torchtitan", "dp": 8, "zero_stage": 3, "global_batch": 8, "eager_elementwise": false}}
JSON
"$S" explain-plan --scenario "$T/tt.json" > "$T/explain.txt" || fail "explain-plan failed"
grep -Eq '^  eager_elementwise +false +plan' "$T/explain.txt" || fail "explain-plan: the plan's own key"
grep -Eq '^  attention_kernel +"fa2" +framework torchtitan' "$T/explain.txt" || fail "explain-plan: the preset's key"
grep -Eq '^  cp +1 +default' "$T/explain.txt" || fail "explain-plan: a default"
# torchtitan does not pad (Llama 3's 128256 rows at tp 1); Megatron-Core at tp 8 pads it to 129024.
grep -q '^  the tables hold 128256 rows for a vocabulary of 128256$' "$T/explain.txt" || fail "explain-plan: unpadded vocabulary"
cat > "$T/mc.json" <<JSON
{"model": "$SRC/scenarios/models/llama-3-8b.json", "cluster": "$SRC/scenarios/clusters/dgx-h100-x1.json",
 "plan": {"framework": "megatron-core", "tp": 8, "sequence_parallel": true, "global_batch": 8}}
JSON
"$S" explain-plan --scenario "$T/mc.json" > "$T/explain_mc.txt" || fail "explain-plan megatron-core failed"
grep -Eq '^  vocab_divisible_by +128 +framework megatron-core' "$T/explain_mc.txt" || fail "explain-plan: the preset's vocabulary padding"
grep -q 'hold 129024 rows for a vocabulary of 128256 (padded' "$T/explain_mc.txt" || fail "explain-plan: padded vocabulary"

# Export of the best plan parses back.
"$S" export --from-plan-json "$T/all.json" --format megatron -o "$T/args.txt" 2>/dev/null || fail "export megatron"
grep -q -- "--tensor-model-parallel-size" "$T/args.txt" || fail "megatron args missing tp"
"$S" export --from-plan-json "$T/all.json" --format deepspeed -o "$T/ds.json" 2>/dev/null || fail "export deepspeed"
python3 -c "import json,sys; j=json.load(open('$T/ds.json')); assert 'zero_optimization' in j and 'train_micro_batch_size_per_gpu' in j" || fail "deepspeed json"

# The exports import back (issue #33): DeepSeek-V3's Megatron arguments give a plan that validates
# against its model and cluster; a DeepSpeed config with the model-code sizes gives the same dp.
"$S" export --scenario deepseek-v3-2048xh800-dualpipev --format megatron -o "$T/ds3.args" 2>/dev/null || fail "export deepseek"
"$S" import-megatron "$T/ds3.args" --scenario deepseek-v3-2048xh800-dualpipev -o "$T/ds3_plan.json" 2>/dev/null || fail "import-megatron"
python3 -c "import json; j=json.load(open('$T/ds3_plan.json')); assert (j['pp'], j['dp'], j['ep'], j['vpp']) == (16, 128, 64, 2), j" || fail "import-megatron plan"
"$S" export --scenario hunyuan-1t-moe-512xh100 --format deepspeed 2>/dev/null | "$S" import-deepspeed - --scenario hunyuan-1t-moe-512xh100 --tp 8 --pp 8 --ep 8 >"$T/hy.json" 2>/dev/null || fail "import-deepspeed"
python3 -c "import json; j=json.load(open('$T/hy.json')); assert (j['dp'], j['global_batch'], j['recompute']) == (8, 1024, 'full'), j" || fail "import-deepspeed plan"
# Bad input: exit 2, nothing written.
echo "--micro-batch-size 1 --global-batch-size 8 --tensor-model-parallel-size 3" >"$T/bad.args"
"$S" import-megatron "$T/bad.args" --gpus 8 -o "$T/bad_plan.json" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "import-megatron bad tp: exit $rc (want 2)"
[ ! -e "$T/bad_plan.json" ] || fail "import-megatron wrote a plan on bad input"
echo '{"train_batch_size": 10, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}' >"$T/bad_ds.json"
"$S" import-deepspeed "$T/bad_ds.json" --gpus 8 -o "$T/bad_plan.json" >/dev/null 2>"$T/err"; rc=$?
[ $rc -eq 2 ] || fail "import-deepspeed bad batch: exit $rc (want 2)"
grep -q "train_batch_size" "$T/err" || fail "import-deepspeed error does not name the key"
# A launch script is valid bash and launches on every node.
"$S" export --scenario gpt3-175b-1024xa100 --launch -o "$T/launch.sh" 2>/dev/null || fail "export --launch"
bash -n "$T/launch.sh" || fail "launch script is not valid bash"
grep -q "torchrun --nnodes 128 --nproc-per-node 8" "$T/launch.sh" || fail "launch script lacks torchrun"
"$S" export --scenario llama-2-70b-512xa100 --format deepspeed --launch --launcher srun -o "$T/ds_launch.sh" 2>/dev/null || fail "deepspeed --launch"
bash -n "$T/ds_launch.sh" || fail "deepspeed launch script is not valid bash"

# The allocator setting rides along: the best plan carries it, and the Megatron export names the
# environment variable to launch with.
"$S" plan "${common[@]}" --expandable-segments --json "$T/exp.json" >/dev/null || fail "plan --expandable-segments"
python3 -c "import json; j=json.load(open('$T/exp.json')); assert j['plans'][0]['plan']['expandable_segments'] is True, j['plans'][0]['plan']" || fail "plan lacks expandable_segments"
"$S" export --from-plan-json "$T/exp.json" --format megatron -o "$T/exp_args.txt" 2>"$T/exp_err" || fail "export expandable"
grep -q "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" "$T/exp_err" || { cat "$T/exp_err"; fail "export does not name the allocator setting"; }

# Issue #34: a cluster file's operations keys are checked (exit 2, the key named, nothing
# written) and, when valid, reach the goodput and energy of plan and capacity.
cl() { printf '{"name": "ops", "gpu": "H100-SXM5-80GB", "node": "DGX-H100", "nodes": 1, %s}' "$1" > "$T/ops.json"; }
for bad in '"interruptions_per_gpu_hour": -0.1' '"pue": 0.8' '"energy_usd_per_kwh": "NaN"'; do
  cl "$bad"
  key=${bad%%\":*}; key=${key#\"}
  for cmd in "plan --model gpt2-124m --global-batch 32 --quiet --no-offload" "capacity --model gpt2-124m --tokens 1B --deadline 1d --max-gpus 8 --gpu H100-SXM5-80GB --quiet"; do
    # shellcheck disable=SC2086
    "$S" $cmd --cluster "$T/ops.json" --json "$T/ops_out.json" >/dev/null 2>"$T/err"; rc=$?
    [ $rc -eq 2 ] || fail "$cmd with $bad: exit $rc (want 2)"
    grep -q "ops.json: cluster.$key" "$T/err" || { cat "$T/err"; fail "$cmd: the error does not name cluster.$key"; }
    [ ! -e "$T/ops_out.json" ] || fail "$cmd: output written on bad input"
  done
done
cl '"pue": 1.1, "energy_usd_per_kwh": 0.2, "interruptions_per_gpu_hour": 0.001, "restart_s": 60'
"$S" capacity --model gpt2-124m --tokens 1B --deadline 1d --max-gpus 8 --gpu H100-SXM5-80GB --quiet --owned \
  --cluster "$T/ops.json" --json "$T/cap.json" >/dev/null 2>&1 || fail "capacity with operations keys"
python3 - "$T/cap.json" <<'PY' || fail "capacity JSON lacks the cluster's operations"
import json, sys
p = json.load(open(sys.argv[1]))["points"][0]
o = p["outlook"]
assert o["energy"]["pue"] == 1.1 and o["energy"]["usd_per_kwh"] == 0.2, o["energy"]
assert o["goodput"]["interruptions_per_gpu_hour"] == 0.001 and o["goodput"]["restart_s"] == 60, o["goodput"]
assert 0 < o["goodput"]["goodput"] < 1
r = o["run"]
# Owned: the cost is the rental plus the energy bill.
assert r["owned"] and abs(r["cost_usd"]["mid"] - r["rental_usd"]["mid"] - r["energy_usd"]) <= 1e-6 * r["cost_usd"]["mid"] + 1, r
PY

# Ctrl-C: a long search interrupted by SIGINT exits 130, as `profile` does (issue #32), and leaves
# no output file.
# (GPT-3 175B over 1024 GPUs on one thread took 5.2 s at stop 37 and 1.9 s on 2026-11-26, when this
# check, 2 s in, failed; LLaMA-3 405B over 16,384 GPUs on one thread: 5.8 s on the idle 2-core VM.
# Start-up is 0.05 s since the CUDA profiler became a module, so 2 s in, the handler is installed.)
"$S" plan --model llama-3-405b --cluster dgx-h100-x2048 --threads 1 --quiet --json "$T/int.json" >"$T/int.out" 2>&1 &
pid=$!
sleep 2
kill -0 $pid 2>/dev/null || fail "the search finished before it could be interrupted; pick a longer one"
kill -INT $pid
wait $pid; rc=$?
[ $rc -eq 130 ] || fail "interrupted plan exited $rc (want 130)"
[ ! -e "$T/int.json" ] || fail "interrupted plan wrote its output file"
ls -A "$T" | grep -q '\.tmp$' && fail "temporary file left behind"
grep -q "interrupted" "$T/int.out" || fail "no 'interrupted' notice"
echo "planner CLI: all checks passed"
