#!/usr/bin/env bash
# The device check in one command (benchmarks/RESULTS.md, "The device check", has the exact device call):
#   bash benchmarks/gpu/run.sh [--toy] [STEP ...]
# On a bare lent GPU machine: installs the carried wheels (.whl/) and lavo-zoo offline when lavo_zoo cannot be
# imported, prints the device and versions, then runs its steps, each under its own time limit, and writes
# summary.md, results.json, run.log, details.tar.gz and fwdbwd.png to $OUT (the folder the device tool returns;
# runs/gpu-check when OUT is unset). The report is rewritten after every step, so a run stopped at its limit still
# returns what it finished. Steps (default: all):
#   kernels   (a) LAVO's Triton kernels against float64 references (check_kernels.py)
#   recipes   (b) every recipe trained 20 steps under bf16 autocast, evaluated, its predictor used
#             (check_recipes.py, the configs in 3 processes)
#   compile   (c) lm/tiny-lavo with train.compile=true (check_recipes.py --compile)
#   local     (c) local attention at 10 distinct lengths without dense scores (check_local.py)
#   timings   (d) `lavo-zoo bench attention` (fwd+bwd 8K..128K, decoding, a 1M-token stream, local, LAVO's
#             current CUDA default) and `lavo-zoo bench lm` (GPT-2 small at 8K and 16K), LAVO against sdpa
#             (FlashAttention), then torch.profiler's top kernels of one layer at 8K and 128K (profile_lavo.py)
# LAVO's Triton kernels are the candidate CUDA default (LAVO_ZOO_TRITON=1 here wherever LAVO trains or is timed);
# its current default (the flex window and the recompute read) is timed beside them.
# The checks (a-c) run side by side (the GPU idles while Triton and inductor compile); the timings run alone after
# them. --toy (LAVO_GPU_TOY=1) runs the same steps on the CPU at toy sizes (Triton's interpreter for the kernels):
# the test suite does, so that a device minute is never lost to a Python error or a missing file.
# Environment: OUT, PYTHON (default python3), LAVO_GPU_BUDGET (seconds for the whole run, default 480: later
# steps are cut short or skipped to end within it), LAVO_GPU_TIME_SCALE (multiplies every limit and the budget: a
# slow or busy machine), LAVO_GPU_WORK (the work folder, default a fresh one under /tmp).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
toy=0
steps=()
for arg in "$@"; do
  case $arg in
    --toy) toy=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    kernels|recipes|compile|local|timings) steps+=("$arg") ;;
    *) echo "run.sh: unknown argument '$arg' (steps: kernels recipes compile local timings; --toy)" >&2; exit 2 ;;
  esac
done
[ ${#steps[@]} -eq 0 ] && steps=(kernels recipes compile local timings)
[ "${LAVO_GPU_TOY:-0}" = 1 ] && toy=1
export LAVO_GPU_TOY=$toy PYTHONUNBUFFERED=1 MPLBACKEND=Agg OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
OUT=${OUT:-$root/runs/gpu-check}
mkdir -p "$OUT"
rm -f "$OUT"/summary.md "$OUT"/results.json "$OUT"/run.log "$OUT"/details.tar.gz "$OUT"/fwdbwd.png
work=${LAVO_GPU_WORK:-$(mktemp -d /tmp/lavo-gpu.XXXXXX)}
mkdir -p "$work"
export LAVO_ZOO_CACHE=${LAVO_ZOO_CACHE:-$work/cache}
py=${PYTHON:-python3}
scale=${LAVO_GPU_TIME_SCALE:-1}
scaled() { awk -v s="$scale" -v x="$1" 'BEGIN { printf "%d", x * s }'; }
budget=$(scaled "${LAVO_GPU_BUDGET:-480}")
deadline=$(( $(date +%s) + budget ))
command="bash benchmarks/gpu/run.sh $*"
here=$root/benchmarks/gpu

report() {  # summary.md and results.json from what the steps left, and the work folder packed
  "$py" "$here/summary.py" "$work" "$OUT" || echo "## the summary could not be written (see above)"
  tar -czf "$OUT/details.tar.gz.tmp" -C "$work" --exclude='*.safetensors' --exclude='*.pt' --exclude=cache \
    --exclude='*.wav' . 2>/dev/null && mv "$OUT/details.tar.gz.tmp" "$OUT/details.tar.gz"
  [ -f "$work/timing_fwdbwd.png" ] && cp "$work/timing_fwdbwd.png" "$OUT/fwdbwd.png"
  [ -f "$work/profile/profile.md" ] && cp "$work/profile/profile.md" "$OUT/profile.md"
  return 0
}

step() {  # step NAME LIMIT COMMAND...: the command under `timeout`, its output in WORK/NAME.log, its status recorded
  local name=$1 limit
  limit=$(scaled "$2")
  shift 2
  local left=$(( deadline - $(date +%s) - 20 ))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    echo "## $(date -u +%H:%M:%S) $name skipped: the run's budget (${budget} s) is spent"
    echo "{\"step\": \"$name\", \"rc\": -1, \"seconds\": 0, \"timeout_s\": $limit}" >> "$work/steps.jsonl"
    return 0
  fi
  echo "## $(date -u +%H:%M:%S) $name (limit ${limit} s): $*"
  local start=$SECONDS
  timeout --kill-after=15 "$limit" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  echo "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $(( SECONDS - start )), \"timeout_s\": $limit}" \
    >> "$work/steps.jsonl"
  echo "## $(date -u +%H:%M:%S) $name: exit $rc after $(( SECONDS - start )) s; its last lines:"
  tail -n 12 "$work/$name.log" | cut -c1-300 | sed 's/^/   /'
  return 0
}

has() { [[ " ${steps[*]} " == *" $1 "* ]]; }

main() {
  echo "## $(date -u +%Y-%m-%d\ %H:%M:%S) UTC: $command (toy: $toy, budget ${budget} s, work folder $work)"
  if ! "$py" -c "import lavo_zoo" 2>/dev/null; then
    site=${LAVO_GPU_SITE:-/tmp/lavo-site}
    echo "## installing the carried wheels and lavo-zoo into $site"
    bash "$here/install.sh" "$site" || echo "## the install failed (see above); the steps that need it will fail"
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  step environment 120 "$py" "$here/check_environment.py" "$work" "$command"
  local lz=("$py" -m lavo_zoo.cli)
  local interpret=() triton=(env LAVO_ZOO_TRITON=1)
  [ "$toy" = 1 ] && interpret=(env TRITON_INTERPRET=1)
  local pids=()
  if has kernels; then
    step kernels 240 "${interpret[@]}" "$py" "$here/check_kernels.py" --json "$work/kernels.json" &
    pids+=($!)
  fi
  if has recipes; then
    for i in 1 2 3; do
      step "recipes_$i" 240 "${triton[@]}" "$py" "$here/check_recipes.py" --part "$i/3" --json "$work/recipes_$i.json" &
      pids+=($!)
    done
  fi
  if has compile; then
    step compile 200 "${triton[@]}" "$py" "$here/check_recipes.py" --compile --json "$work/compile.json" &
    pids+=($!)
  fi
  if has local; then
    step local 150 "$py" "$here/check_local.py" --json "$work/local.json" &
    pids+=($!)
  fi
  for pid in "${pids[@]}"; do wait "$pid"; done
  report
  if has timings; then
    local dev=cuda
    local shape=(--embed-dim 768 --heads 12) lavo=(-o lavo.num_bases=64 -o lavo.window_size=16)
    local long=8192,16384,32768,65536,131072 ends=8192,32768,131072 decode=1024,65536 stream=16384,1048576
    local chunk=16384 timed=(--warmup 3 --repeats 10) once=(--warmup 1 --repeats 1) decoded=(--warmup 3 --repeats 30)
    local lm=(lm/pg19-lavo lm/pg19-sdpa --lengths 8192,16384 --repeats 3)
    local profile=(--lengths 8192,131072)
    if [ "$toy" = 1 ]; then
      dev=cpu
      shape=(--embed-dim 32 --heads 2) lavo=(-o lavo.num_bases=8 -o lavo.window_size=4)
      long=64,128 ends=64,128 decode=16,64 stream=64,256 chunk=32
      timed=(--warmup 1 --repeats 2) once=(--warmup 0 --repeats 1) decoded=(--warmup 1 --repeats 2)
      lm=(lm/pg19-lavo lm/pg19-sdpa --lengths 32 --repeats 1 --set model.num_layers=1 --set model.embed_dim=128
          --set model.num_heads=2 --set model.ffn_dim=128)
      profile=(--device cpu --lengths 48 --embed-dim 16 --heads 2 --num-bases 4 --window 4 --warmup 1 --repeats 2)
    fi
    local bench=("${lz[@]}" bench attention --device "$dev" --dtype bfloat16 --batch 1 "${shape[@]}" --no-isolate
                 --no-efficiency)
    step timing_fwdbwd 90 "${triton[@]}" "${bench[@]}" "${lavo[@]}" --attentions lavo,sdpa --mode fwdbwd --lengths "$long" \
      "${timed[@]}" --json "$work/timing_fwdbwd.json" --plot "$work/timing_fwdbwd.png"
    report
    step timing_lm 100 "${triton[@]}" "${lz[@]}" bench lm "${lm[@]}" --device "$dev" --json "$work/timing_lm.json"
    report
    step profile 150 "$py" "$here/profile_lavo.py" "${profile[@]}" --out "$work/profile"
    report
    step timing_decode 40 "${triton[@]}" "${bench[@]}" "${lavo[@]}" --attentions lavo,sdpa --mode decode --lengths "$decode" \
      --chunk-size "$chunk" "${decoded[@]}" --json "$work/timing_decode.json"
    step timing_stream 40 "${triton[@]}" "${bench[@]}" "${lavo[@]}" --attentions lavo --mode stream --lengths "$stream" \
      --chunk-size "$chunk" "${once[@]}" --json "$work/timing_stream.json"
    report
    step timing_local 60 "${bench[@]}" --attentions local -o local.window_size=16 --mode fwdbwd --lengths "$ends" \
      "${timed[@]}" --json "$work/timing_local.json"
    step timing_default 60 "${bench[@]}" "${lavo[@]}" --attentions lavo --mode fwdbwd \
      --lengths "$ends" "${timed[@]}" --json "$work/timing_default.json"
    report
  fi
  echo "## $(date -u +%H:%M:%S) done; $OUT holds summary.md, results.json, run.log, details.tar.gz"
  echo
  cat "$OUT/summary.md"
  # exit 0 only when every step passed
  ! grep -q '"rc": [^0]' "$work/steps.jsonl"
}

main 2>&1 | tee "$OUT/run.log"
exit "${PIPESTATUS[0]}"
