#!/usr/bin/env bash
# Start-up stays light (issue #34 item 5): the strata binary does not link the CUDA libraries (the
# profiler's CUDA backend is a module opened only by `strata profile --backend cuda`), and where
# the build has that module, a CUDA profile on a machine that cannot run it ends in a clear error
# (exit 1, the loader's or the driver's words), not a crash. Args: $1 = strata binary, $2 = source dir.
set -u
S="$1"
fail() { echo "FAIL: $*"; exit 1; }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT

needed=$(readelf -d "$S" | grep NEEDED) || fail "readelf found no NEEDED entries in $S"
echo "$needed" | grep -qiE "cublas|cudart|nccl|libcuda" && fail "strata links a CUDA library at start-up: $needed"
"$S" --version >/dev/null || fail "--version"

module="$(dirname "$S")/libstrata_profiler_cuda.so"
if [ -f "$module" ]; then
  readelf -d "$module" | grep NEEDED | grep -q cublasLt || fail "the CUDA module does not link cuBLASLt"
  nm -D --defined-only "$module" | grep -q " strata_profiler_cuda_api$" || fail "the CUDA module does not export its entry point"
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    # (Under the sanitizers: what the CUDA runtime keeps after its failed initialisation is not ours.)
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" "$S" profile --backend cuda --quick --only gemm --json /dev/null >/dev/null 2>"$T/cuda.err"; rc=$?
    msg=$(cat "$T/cuda.err")
    [ $rc -eq 1 ] || fail "cuda profile without a GPU: exit $rc ($msg)"
    echo "$msg" | grep -q "^error:" || fail "cuda profile without a GPU: no error line ($msg)"
  fi
  # A module that is not this build's is refused by name, never called.
  mkdir -p "$T/bin" && cp "$S" "$T/bin/strata" && cp /bin/true "$T/bin/libstrata_profiler_cuda.so"
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" STRATA_PROFILER_CUDA="$T/bin/libstrata_profiler_cuda.so" "$T/bin/strata" profile --backend cuda --quick --only gemm >/dev/null 2>"$T/err"
  grep -q "libstrata_profiler_cuda.so" "$T/err" || fail "a bad module is not named: $(cat "$T/err")"
fi
echo "ok"
