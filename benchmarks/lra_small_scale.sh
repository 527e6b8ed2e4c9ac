#!/usr/bin/env bash
# Small-scale accuracy on the built-in ListOps and Pathfinder (lra/tiny-*): LAVO, softmax, local and two linear
# baselines (performer, cosformer) with one budget (500 steps of batch 32), then test accuracy of the last
# checkpoint. Usage: benchmarks/lra_small_scale.sh OUT_DIR [DEVICE]
set -euo pipefail
out=${1:?output folder}; device=${2:-cpu}
mkdir -p "$out"
for task in listops pathfinder; do
  lavo-zoo eval --help >/dev/null  # the CLI exists
  for att in "sdpa" "lavo" "local" "performer" "cosformer"; do
    cfg=lra/tiny-$task-sdpa; extra=()
    case $att in
      lavo) cfg=lra/tiny-$task-lavo ;;
      sdpa) ;;
      *) extra=(model.attention.name=$att) ;;
    esac
    ( lavo-zoo train $cfg "${extra[@]}" --out "$out/$task-$att" --device "$device" > "$out/$task-$att.log" 2>&1 &&
      lavo-zoo eval "$out/$task-$att/checkpoints/last" --split test --device "$device" \
        --out "$out/$task-$att.json" >> "$out/$task-$att.log" 2>&1 ) &
  done
  wait
done
