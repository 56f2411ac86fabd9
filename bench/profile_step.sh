#!/bin/bash
# Where a 2-replica training step of onnx-mirror spends its time (docs/BENCHMARKS.md,
# "Profile"): a Chrome trace of every kernel and bucket wait per replica, summarised by
# trace_summary.py, and a flat `perf` profile (user space; cpu-clock works without PMU
# access) of the whole process, plus page-fault and context-switch counts from GNU time.
#   bench/profile_step.sh [BUILD_DIR] [STEPS]     (default build-bench, 120 steps)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-bench}
STEPS=${2:-120}
OUT=${OUT:-/tmp/omt-profile}
mkdir -p "$OUT"
for model in mlp cnn; do
  steps=$STEPS
  [ "$model" = cnn ] && steps=$((STEPS / 4))
  args=(train "models/$model.onnx" --data fashion-mnist --steps "$steps" --global-batch 256 --lr 0.05
        --momentum 0.9 --optimizer sgd --threads 1)
  for r in 1 2; do
    echo "== $model, $r replica(s), $steps steps: GNU time"
    /usr/bin/time -v "$BUILD/tools/onnx-mirror-train" "${args[@]}" --replicas $r 2>&1 >/dev/null |
      grep -E "Elapsed|User time|System time|Maximum resident|page faults|context switches"
  done
  echo "== $model, 2 replicas: trace"
  "$BUILD/tools/onnx-mirror-train" "${args[@]}" --replicas 2 --trace "$OUT/$model.trace.json" |
    grep -E "throughput|per step"
  /usr/bin/python3 bench/trace_summary.py "$OUT/$model.trace.json" --top 14
  if command -v perf >/dev/null; then
    echo "== $model, 2 replicas: perf (cpu-clock, user space)"
    perf record -q -e cpu-clock -F 2000 -o "$OUT/$model.perf.data" -- \
      "$BUILD/tools/onnx-mirror-train" "${args[@]}" --replicas 2 >/dev/null 2>&1
    perf report -q -i "$OUT/$model.perf.data" --no-children --sort dso,symbol --percent-limit 1.5 2>/dev/null |
      cut -c1-150 | head -30
  fi
done
