#!/usr/bin/env bash
# GPU measurements (bf16) for the H100/H200 goals: fwd+bwd vs SDPA/FlashAttention at 8K and 32K.
# Measured on an H100 on 2026-11-23: see the GPU section of RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results
mkdir -p "$out"
lavo-zoo bench attention --device cuda --dtype bfloat16 --embed-dim 768 --heads 12 --batch 1 \
  -o lavo.num_bases=64 -o lavo.window_size=16 --attentions lavo,sdpa --lengths 8192,32768 --mode fwdbwd \
  --warmup 3 --repeats 10 --json "$out/gpu_fwdbwd.json" --plot "$out/gpu_fwdbwd.png"
