#!/usr/bin/env bash
# Regenerates the GUI screenshots of docs/gui.md and the README (docs/img/gui-*.png) from real
# scenarios, headless. Needs a release build (bash scripts/build.sh release strata-gui). About six
# minutes on 2 cores, most of it the LLaMA-3 70B capacity sweep.
set -euo pipefail
cd "$(dirname "$0")/.."
gui=build/strata-gui
out=docs/img
shot() { local name="$1"; shift; echo "  $name"; "$gui" --size 1600x1000 "$@" --screenshot "$out/$name"; }

# GPT-3 175B on 1024 A100 (Megatron-LM's SC21 plan).
gpt3=(--scenario scenarios/gpt3-175b-1024xa100.json)
shot gui-scenario-gpt3.png "${gpt3[@]}" --view scenario --edit plan.micro_batch=5
shot gui-timeline-gpt3.png "${gpt3[@]}" --view timeline --streams no-p2p --time 0:2500000
shot gui-memory-gpt3.png "${gpt3[@]}" --view memory

# LLaMA-3 70B on 64 H100 (scripts/plan.sh's job): the search, the best plan opened, a what-if.
llama=(--model llama-3-70b --cluster dgx-h100-x8 --global-batch 512)
shot gui-plans-llama3-70b.png "${llama[@]}" --view plans --pick 1 --whatif tp=2 --size 1920x1080
shot gui-memory-llama3-70b-oom.png "${llama[@]}" --view memory --pick 1 --whatif micro_batch=4
shot gui-capacity-llama3-70b.png --model llama-3-70b --cluster dgx-h100-x8 --view capacity --tokens 2000 --deadline 30 --max-gpus 2048 --timeout 3000

# Mixtral 8x7B on 64 H100 (expert parallelism).
mix=(--scenario scenarios/mixtral-8x7b-64xh100.json)
shot gui-timeline-mixtral.png "${mix[@]}" --view timeline --streams no-p2p --time 0:400000
shot gui-memory-mixtral.png "${mix[@]}" --view memory

# A strata validate report: gpt-tiny on 2 CPU ranks, predicted against the runtime's run. The
# profile validate takes first goes to a copy of the hardware database, not the build's own.
val="$(mktemp -d)"
trap 'rm -rf "$val"' EXIT
cp build/hwdb/strata.db "$val/hw.db"
build/strata validate --scenario gpt-tiny-2cpu --steps 20 --db "$val/hw.db" --json "$val/report.json" >/dev/null
shot gui-validation-gpt-tiny-2cpu.png --report "$val/report.json" --view validation
