#!/usr/bin/env bash
# The CPU measurements of benchmarks/RESULTS.md: GPT-2 layer shapes (D=768, 12 heads, r=64, w=16), batch 1, fp32.
# Each step is one `lavo-zoo bench attention` command, echoed with the time and load average before it runs;
# JSON records and the plot go to benchmarks/results/. Then: lavo-zoo bench report
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results
mkdir -p "$out"
# one thread: on a CPU shared with other jobs, a second OpenMP thread mostly waits at barriers and adds noise
export OMP_NUM_THREADS=1
bench=(lavo-zoo bench attention --embed-dim 768 --heads 12 --batch 1 --dtype float32 --device cpu
       -o lavo.num_bases=64 -o lavo.window_size=16)
step() {
  echo "## $(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "\$ ${bench[*]} $*"
  "${bench[@]}" "$@"
}

# 1. causal fwd+bwd at 16K: LAVO vs sdpa in the same run (goal: LAVO >= 4x faster)
step --attentions lavo,sdpa --lengths 16384 --mode fwdbwd --warmup 1 --repeats 2 --json "$out/fwdbwd_16k.json"
# 2. linear scaling of time and peak memory, 16K -> 32K (goal: both ratios <= 2.3)
step --attentions lavo --lengths 16384,32768 --mode fwdbwd --warmup 1 --repeats 2 --no-efficiency \
  --json "$out/scaling.json"
# 3. streaming 1M tokens in 16K chunks vs one 16K chunk (goal: peak memory ratio <= 1.25)
step --attentions lavo --lengths 16384,1048576 --mode stream --chunk-size 16384 --warmup 0 --repeats 1 \
  --no-efficiency --json "$out/stream_1m.json"
# 4. decoding: per-token time at context position 65,536 vs 1,024 (goal: ratio <= 1.25)
step --attentions lavo --lengths 1024,65536 --mode decode --chunk-size 16384 --warmup 3 --repeats 30 \
  --no-efficiency --json "$out/decode.json"
# 5. overview plot: forward time and memory against length, LAVO vs local vs sdpa
step --attentions lavo,local,sdpa -o local.window_size=16 --lengths 1024,2048,4096,8192 --mode fwd \
  --warmup 1 --repeats 3 --json "$out/fwd_sweep.json" --plot "$out/fwd_sweep.png"
echo "## $(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)"
