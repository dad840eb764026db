#!/usr/bin/env bash
# On a lent GPU machine: the cuda backend's test, a quick profile of this GPU into a fresh hwdb,
# then `strata validate` of single-GPU plans (docs/validation/), each timing its own GEMM and
# attention shapes first. Each step is bounded and logged; everything lands in $OUT/results.tgz
# (the tool brings back at most 8 files). Stop 46's loans: the 7B plans take 150-200 s each
# (pinning 108 GB of host memory), the others 3-40 s; the machine's start about 30 s. The default
# list fits one 600 s call; name the others (llama-2-7b-offload, gpt2-774m-ssd, gpt2-1.5b-unfused,
# gpt2-124m-dropout, llama-2-7b-offload-lockfree, llama-2-7b-offload-bf16, qwen3-moe-2l-bf16,
# gpt2-774m-infinity-bf16, gpt2-124m-fp16, deepseek-v3-2l-bf16, llama-2-7b-zero-offload-bf16,
# llama-2-7b-split-lockfree-bf16) in a second one. The bf16 cases and stop 47's
# profile rows (grouped_gemm, gemm_sustained, the runtime's kernels on bf16 buffers) have never
# run: their times are unknown.
# Usage: OUT=DIR bench/gpu/runtime/device-run.sh PKG [CASE...]   (PKG from package.sh)
set -uo pipefail
cd "$(dirname "$0")/../../.."
pkg="$(cd "${1:?package directory}" && pwd)"; shift
OUT="${OUT:-./out}"; mkdir -p "$OUT"
res=/tmp/strata-results; rm -rf "$res"; mkdir -p "$res"
export LD_LIBRARY_PATH="$pkg:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export STRATA_RUNTIME_CUDA="$pkg/libstrata_runtime_cuda.so" STRATA_PROFILER_CUDA="$pkg/libstrata_profiler_cuda.so"
S="$pkg/strata"; D=bench/gpu/runtime
t0=$(date +%s); stamp() { echo "[+$(( $(date +%s) - t0 ))s] $*" | tee -a "$res/log.txt"; }
finish() { tar czf "$OUT/results.tgz" -C "$res" . ; cp "$res/log.txt" "$OUT/" 2>/dev/null; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,memory.total --format=csv > "$res/gpu-info.txt" 2>&1
nproc >> "$res/gpu-info.txt"; free -g >> "$res/gpu-info.txt"; df -h /tmp >> "$res/gpu-info.txt"
lscpu >> "$res/gpu-info.txt" 2>&1  # the host CPU: its DRAM bounds the copies beside CPU Adam
cat "$res/gpu-info.txt"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in *H200*) cluster=$D/cluster-lent-h200.json ;; *) cluster=$D/cluster-lent-h100.json ;; esac

cases="${*:-test profile gpt2-124m-bf16 gpt2-1.5b-bf16 gpt2-124m gpt2-1.5b llama-2-7b-params-cpu}"
db="$res/hwdb.db"
"$S" hwdb init --db "$db" > /dev/null
for c in $cases; do
  case "$c" in
    test)
      stamp "cuda backend test"; timeout 180 "$pkg/runtime_test_cuda" > "$res/test-cuda.txt" 2>&1; rc=$?; stamp "test rc=$rc"; tail -5 "$res/test-cuda.txt"
      if [ $rc -ne 0 ]; then  # the flash kernels (stop 47, never run on a GPU before)? The rest then runs without them.
        STRATA_RUNTIME_EXACT_ATTENTION=1 timeout 120 "$pkg/runtime_test_cuda" > "$res/test-cuda-exact.txt" 2>&1; rc2=$?
        stamp "test with exact attention rc=$rc2"; tail -3 "$res/test-cuda-exact.txt"
        [ $rc2 -eq 0 ] && export STRATA_RUNTIME_EXACT_ATTENTION=1 && stamp "flash attention off for the rest of this run"
      fi ;;
    profile)
      stamp "quick CUDA profile"
      timeout 150 "$S" profile --backend cuda --quick --only gemm,attention,membw,memcpy,grouped_gemm --db "$db" --json "$res/cuda-quick.json" > "$res/profile-cuda.txt" 2>&1; stamp "profile rc=$?"
      timeout 60 "$S" profile --backend cpu --quick --only ssd,cpu_adam,host_mem --ssd-dir /tmp --db "$db" --json "$res/cpu-quick.json" > "$res/profile-cpu.txt" 2>&1; stamp "cpu profile rc=$?" ;;
    *)
      model="" plan="" extra=""
      case "$c" in
        gpt2-124m) m=gpt2-124m steps=6 lim=90 ;;
        # The bundled GPT-2 small as released (dropout 0.1): the cuda backend's dropout kernels
        # against the same plan without dropout. Not in the default list: name it.
        gpt2-124m-dropout) m=gpt2-124m steps=6 lim=90 model=scenarios/models/gpt2-124m.json plan=$D/plan-gpt2-124m.json ;;
        gpt2-1.5b) m=gpt2-1.5b steps=4 lim=120 ;;
        # bf16 on the GPU (fp32 masters, gradients and moments): the MFU target's plan.
        gpt2-124m-bf16) m=gpt2-124m steps=6 lim=90 ;;
        gpt2-1.5b-bf16) m=gpt2-1.5b steps=5 lim=120 ;;
        llama-2-7b-offload) m=llama-2-7b steps=3 lim=260 ;;
        llama-2-7b-offload-lockfree) m=llama-2-7b steps=4 lim=260 ;;  # not in the default list: name it
        # Stop 51: the same in bf16, its copies in their own widths (the host converts); never run.
        llama-2-7b-offload-bf16) m=llama-2-7b steps=3 lim=260 ;;
        # Stop 66: DeepSpeed's ZeRO-Offload, the gradients streamed to the host in the backward
        # (pinned host ranges, the copies on their lanes); never run on a GPU. Not in the default list.
        llama-2-7b-zero-offload-bf16) m=llama-2-7b steps=3 lim=260 ;;
        # Stop 67: Angel-PTM's split, half the layers resident, the other half fetched from the
        # host at each use, under the lock-free update; never run on a GPU. Not in the default list.
        llama-2-7b-split-lockfree-bf16) m=llama-2-7b steps=3 lim=260 ;;
        gpt2-774m-ssd) m=gpt2-774m steps=3 lim=120 ;;
        # Stop 53: the weights homed in the SSD file as well (bf16), fetched through host staging;
        # never run on a GPU. Not in the default list: name it.
        gpt2-774m-infinity-bf16) m=gpt2-774m steps=3 lim=150 ;;
        # Stop 54: fp16 in IEEE halves on the GPU, the exact attention kernels (the flash ones take
        # bf16), the loss scale's unscale kernel (from 2^16, so that most steps update); never run on
        # a GPU. Not in the default list.
        gpt2-124m-fp16) m=gpt2-124m steps=6 lim=90 extra="--initial-loss-scale 65536" ;;
        llama-2-7b-params-cpu) m=llama-2-7b steps=3 lim=260 ;;
        gpt2-1.5b-unfused) m=gpt2-1.5b steps=4 lim=120 ;;
        # Stop 49: two Qwen3-30B-A3B layers (QK-norm, 128 experts, top 8) on the cuda backend's MoE
        # path: the router, the moves and the per-expert GEMMs measured against their prediction.
        qwen3-moe-2l-bf16) m=qwen3-moe-2l steps=4 lim=150 ;;
        # Stop 58: two DeepSeek-V3 layers at full width with 16 of its experts and its MTP module:
        # MLA's kernels (the RoPE assembly, the padded values), the MTP module's, never run on a GPU.
        deepseek-v3-2l-bf16) m=deepseek-v3-2l steps=3 lim=200 ;;
      esac
      stamp "validate $c"
      timeout "$lim" "$S" validate --model "${model:-$D/model-$m.json}" --plan "${plan:-$D/plan-$c.json}" --cluster "$cluster" --backend cuda --steps $steps \
        --data text --calibration none --db "$db" --ssd-dir /tmp --json "$res/$c.json" $extra > "$res/$c.txt" 2>&1
      stamp "validate $c rc=$?"; cat "$res/$c.txt" ;;
  esac
  finish  # after every case: a run stopped at its limit still brings back what it did
done
