#!/usr/bin/env bash
# The threaded parts under ThreadSanitizer. The runtime: ranks are threads of one process,
# collectives are performed by whichever rank arrives last, host updates run beside the kernels;
# the planner: its searches and sweeps score candidates on a pool of threads. A race there breaks
# the bit-for-bit promises only now and then, under load; TSan sees it on every run.
# Not part of CI (its build and runs take 15-30 min on 2 cores); run it after touching
# runtime/src or the planner's pools. Usage: scripts/tsan.sh [LABELS]   (a ctest -L regex;
# default 'runtime|planner')
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
bash scripts/setup.sh
cmake --preset tsan >/dev/null
# The tests' executables (a test named *_slow runs its target's [slow] cases; the
# emulated CUDA kernels are a filter of runtime_test_cuda).
labels="${1:-runtime|planner}"
targets=$(cd build-tsan && ctest -N -L "$labels" | sed -n 's/^ *Test *#[0-9]*: \([a-z]*_test_[a-z0-9_]*\)$/\1/p' |
          sed -e 's/_slow$//' -e 's/^runtime_test_cuda_kernels_emulated$/runtime_test_cuda/' | sort -u)
cmake --build --preset tsan -j "$(nproc)" --target $targets
# halt_on_error: the first race fails its test (exit 66), with both stacks in the output.
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
   ctest --output-on-failure -j "$(nproc)" -L "$labels")
