#!/usr/bin/env bash
# Profile this GPU machine into a fresh hardware database under $OUT (default ./out): the full
# CUDA profile (GEMM, attention, memory-bound kernels, copies, NCCL collectives) and a CPU-side run
# (SSD, CPU Adam), each run exported as JSON, the tables printed and saved. Budget: < 8 minutes on
# one H100 (each step runs under `timeout`).
#
# Usage: scripts/gpu-profile.sh [--no-build BUILD_DIR] [--quick] [--ssd-dir DIR]
#        scripts/gpu-profile.sh --package BUILD_DIR DEST
#   default: configure and build build-gpu/ (Release, CUDA on, only the `strata` target) unless
#            build-gpu/strata exists already;
#   --no-build BUILD_DIR: use BUILD_DIR/strata as is (a prebuilt, carried build; if BUILD_DIR also
#            holds shared libraries such as libsqlite3.so.0 they are put on LD_LIBRARY_PATH).
#   --package BUILD_DIR DEST: (on the build machine) put a stripped BUILD_DIR/strata and the
#            non-CUDA shared libraries it needs (SQLite) into DEST, a few MiB to carry to a device
#            machine that lacks build tools or -dev packages; then run there with --no-build DEST.
# Outputs in $OUT: profile.db, cuda-tables.txt, cpu-tables.txt, cuda-run.json and cpu-run.json
# (the profiler's own dump), run-1.json and run-2.json (`strata hwdb export --run N`), gpu-info.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=""
quick=""
ssd_dir="${SSD_DIR:-/tmp}"
while [ $# -gt 0 ]; do
    case "$1" in
        --no-build) build_dir="${2:?--no-build needs a directory}"; shift 2 ;;
        --quick) quick="--quick"; shift ;;
        --ssd-dir) ssd_dir="${2:?--ssd-dir needs a directory}"; shift 2 ;;
        --package)
            src="${2:?--package needs BUILD_DIR DEST}"; dest="${3:?--package needs BUILD_DIR DEST}"
            mkdir -p "$dest"
            strip -o "$dest/strata" "$src/strata"
            ldd "$src/strata" | awk '/=>/ {print $3}' | grep -E 'sqlite|boost' | xargs -r -I{} cp -L {} "$dest/"
            ls -la "$dest"
            exit 0 ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "gpu-profile.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

OUT="${OUT:-./out}"
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "[gpu-profile +$(( $(date +%s) - t0 ))s] $*" >&2; }

if [ -z "$build_dir" ]; then
    build_dir=build-gpu
    if [ ! -x "$build_dir/strata" ]; then
        stamp "building $build_dir (Release, CUDA on)"
        gen=""
        command -v ninja > /dev/null && gen="-G Ninja"
        cmake -S . -B "$build_dir" $gen -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=ON -DSTRATA_BENCH=OFF -DSTRATA_TESTS=OFF > "$OUT/build.log" 2>&1 ||
            { tail -30 "$OUT/build.log"; echo "gpu-profile.sh: configure failed here; build elsewhere and use --package / --no-build" >&2; exit 1; }
        cmake --build "$build_dir" --target strata -j "$(nproc)" >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
    fi
fi
strata="$build_dir/strata"
[ -x "$strata" ] || { echo "gpu-profile.sh: no executable $strata" >&2; exit 1; }
export LD_LIBRARY_PATH="$(cd "$build_dir" && pwd):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"

{
    nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu,pcie.link.gen.current,pcie.link.width.current --format=csv || true
    nvidia-smi topo -m || true
} > "$OUT/gpu-info.txt" 2>&1
cat "$OUT/gpu-info.txt"

db="$OUT/profile.db"
rm -f "$db" "$db-wal" "$db-shm"

stamp "CUDA profile ${quick:-(full)}"
timeout 420 "$strata" profile --backend cuda $quick --only gemm,attention,membw,memcpy,collective,overlap --db "$db" \
    --json "$OUT/cuda-run.json" | tee "$OUT/cuda-tables.txt"

stamp "CPU-side profile (SSD in $ssd_dir, CPU Adam)"
timeout 120 "$strata" profile --backend cpu $quick --only ssd,cpu_adam --ssd-dir "$ssd_dir" --db "$db" \
    --json "$OUT/cpu-run.json" | tee "$OUT/cpu-tables.txt"

"$strata" hwdb list --kind runs --db "$db"
for run in 1 2; do
    "$strata" hwdb export --run "$run" --db "$db" -o "$OUT/run-$run.json"
done
stamp "done: results in $OUT"
