#!/usr/bin/env bash
# The main job on a fresh machine: install, build the `strata` command, then plan LLaMA-3 70B
# (sequence 8192, global batch 512) on 64 H100s with the embedded datasheet hardware database.
# Extra arguments go to `strata plan` (e.g. --json plans.json, --top 20).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh release strata >/dev/null
exec build/strata plan --model llama-3-70b --cluster dgx-h100-x8 --global-batch 512 "$@"
