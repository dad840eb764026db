#!/usr/bin/env bash
# Packs what device-run.sh needs from a release build with CUDA (default build/) into DEST
# (default gpu-pkg/, which .git/info/exclude should list): stripped strata, the two CUDA modules,
# the cuda backend's test and libsqlite3 (the lent machines have no SQLite). About 8 MiB.
set -euo pipefail
cd "$(dirname "$0")/../../.."
src="${1:-build}"; dest="${2:-gpu-pkg}"
rm -rf "$dest"; mkdir -p "$dest"
strip -o "$dest/strata" "$src/strata"
strip -o "$dest/runtime_test_cuda" "$src/tests/runtime_test_cuda"
for m in libstrata_runtime_cuda.so libstrata_profiler_cuda.so; do strip -o "$dest/$m" "$src/$m"; done
ldd "$src/strata" | awk '/=>/ {print $3}' | grep -E 'sqlite' | xargs -r -I{} cp -L {} "$dest/"
du -sh "$dest"
