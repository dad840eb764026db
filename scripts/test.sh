#!/usr/bin/env bash
# Sets up, builds and runs every test: the release build (unit, cli, fidelity), then the same unit
# and command-line tests under AddressSanitizer + UndefinedBehaviorSanitizer (the CLI scripts run
# the instrumented strata), then a bounded fuzzing run (20 s a target; docs/reliability.md).
# Usage: scripts/test.sh [--fast]   (--fast: release build only)
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
# strata-gui's tests (where Qt6 is installed) draw on Qt's offscreen platform: no display needed.
export QT_QPA_PLATFORM=offscreen
bash scripts/build.sh release
(cd build && ctest --output-on-failure -j "$(nproc)")
if [ "${1:-}" = "--fast" ]; then exit 0; fi
bash scripts/build.sh asan-ubsan
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
   ctest --output-on-failure -j "$(nproc)" -L 'unit|cli')
if [ -f tests/fuzz/CMakeLists.txt ]; then
  # Only the fuzz targets (the readers and the plan space, instrumented), not the whole project again.
  bash scripts/build.sh fuzz fuzz_model fuzz_cluster fuzz_plan fuzz_scenario fuzz_hf_import fuzz_calibration fuzz_fidelity_runs \
    fuzz_plan_space
  (cd build-fuzz && ctest --output-on-failure -j "$(nproc)" -L fuzz)
fi
