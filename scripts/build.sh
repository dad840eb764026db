#!/usr/bin/env bash
# Configure and build one preset (default: release) after making sure the dependencies are there.
# Usage: scripts/build.sh [PRESET] [TARGET...]   (no target: everything)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
bash scripts/setup.sh
cmake --preset "$preset" >/dev/null
if [ $# -gt 0 ]; then
  cmake --build --preset "$preset" -j "$(nproc)" --target "$@"
else
  cmake --build --preset "$preset" -j "$(nproc)"
fi
