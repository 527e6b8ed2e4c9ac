#!/usr/bin/env bash
# Small-scale accuracy on the built-in ListOps and Pathfinder (lra/tiny-*): LAVO, softmax, local and two linear
# baselines (performer, cosformer) with one budget per task, then test accuracy of the last checkpoint
# (OUT_DIR/<task>-<attention>.json; the log next to it has the validation curve and the wall time).
#   ListOps: sequences of 30-128 tokens (data.max_length=128), 3,000 training trees, 600 steps of batch 32.
#   Pathfinder: the tiny config as it is (curv_baseline, 1,024 pixels, 2,000 images), 500 steps of batch 32.
# Usage: benchmarks/lra_small_scale.sh OUT_DIR [DEVICE] [PARALLEL_RUNS] [TASKS]
#   e.g. OMP_NUM_THREADS=1 benchmarks/lra_small_scale.sh runs/lra-small cpu 2 listops
set -euo pipefail
out=${1:?output folder}; device=${2:-cpu}; parallel=${3:-2}; tasks=${4:-"listops pathfinder"}
mkdir -p "$out"
declare -A budget=(
  [listops]="data.max_length=128 data.builtin_min_length=30 data.builtin_max_length=128 data.builtin_size=3000 train.max_steps=600 train.eval_every=100 train.save_every=600"
  [pathfinder]="train.max_steps=500 train.eval_every=100 train.save_every=500"
)
run() {  # task attention
  local task=$1 att=$2 cfg=lra/tiny-$1-sdpa extra=() start
  case $att in
    lavo) cfg=lra/tiny-$task-lavo ;;
    sdpa) ;;
    *) extra=(model.attention.name="$att") ;;
  esac
  start=$(date +%s)
  # shellcheck disable=SC2086  # the budget is a list of overrides
  lavo-zoo train "$cfg" "${extra[@]}" ${budget[$task]} --out "$out/$task-$att" --device "$device" \
    > "$out/$task-$att.log" 2>&1
  lavo-zoo eval "$out/$task-$att/checkpoints/last" --split test --device "$device" --out "$out/$task-$att.json" \
    >> "$out/$task-$att.log" 2>&1
  echo "wall $(( $(date +%s) - start ))s; $(uptime)" >> "$out/$task-$att.log"
}
for task in $tasks; do
  for att in sdpa lavo local performer cosformer; do
    while (( $(jobs -rp | wc -l) >= parallel )); do wait -n || true; done
    run "$task" "$att" &
  done
done
wait || true
for f in "$out"/*.json; do
  "${PYTHON:-python}" -c "import json, sys; r = json.load(open(sys.argv[1])); print(sys.argv[1], round(100 * r['metrics']['accuracy']['value'], 1))" "$f"
done
