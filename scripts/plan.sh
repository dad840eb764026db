#!/usr/bin/env bash
# The main job on a fresh machine: build, then plan LLaMA-3 70B on 64 H100s with the embedded
# datasheet hardware database. Extra arguments go to `strata plan`.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
bash scripts/build.sh release >/dev/null
exec build/strata plan --model llama-3-70b --cluster dgx-h100-x8 "$@"
