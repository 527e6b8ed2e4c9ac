#!/usr/bin/env bash
# The GPU section of benchmarks/RESULTS.md in one call (an H100 or H200; bf16 timings): first the correctness checks of
# LAVO's Triton kernels on the device, then one layer's fwd+bwd time and peak memory (D=768, 12 heads, LAVO r=64 w=16,
# batch 1) against sdpa (FlashAttention) and local (w=16) at 8K..128K, LAVO on the fallback path (LAVO_ZOO_TRITON=0)
# for comparison, and the GPT-2 LM recipe's training throughput at 16K, LAVO vs sdpa (attention dropout off: with
# it LAVO trains on its autograd kernels). Records and the plot go to benchmarks/results/gpu_*.
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results
mkdir -p "$out"
step() {
  echo "## $(date -u +%H:%M:%S) UTC: $*"
  "$@"
}

# 1. correctness on the device (exits non-zero on a failed check; the timings are not worth taking then)
step python benchmarks/check_triton_gpu.py | tee "$out/gpu_triton_checks.txt"
# 2. fwd+bwd time and peak memory, 8K..128K (the [kernels] column says which path LAVO ran)
bench=(lavo-zoo bench attention --device cuda --dtype bfloat16 --embed-dim 768 --heads 12 --batch 1
       -o lavo.num_bases=64 -o lavo.window_size=16 --mode fwdbwd --warmup 3 --repeats 10 --no-efficiency)
step "${bench[@]}" --attentions lavo,sdpa,local --lengths 8192,16384,32768,65536,131072 \
  --json "$out/gpu_fwdbwd.json" --plot "$out/gpu_fwdbwd.png"
# 3. LAVO's previous CUDA path (flex window + recompute read), same settings
LAVO_ZOO_TRITON=0 step "${bench[@]}" --attentions lavo --lengths 8192,131072 --json "$out/gpu_fwdbwd_fallback.json"
# 4. GPT-2 small (124M) training and evaluation tokens/s at 16K, fp32 weights, one sequence per step
step lavo-zoo bench lm lm/pg19-lavo lm/pg19-sdpa --lengths 16384 --device cuda --repeats 3 \
  --set model.attention.dropout=0.0 --json "$out/gpu_lm_16k.json"
