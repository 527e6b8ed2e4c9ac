#!/usr/bin/env bash
# Installs, offline, what the GPU image lacks into TARGET (default /tmp/lavo-site), for PYTHONPATH=TARGET: the wheels
# in .whl/ (bash benchmarks/gpu/fetch_wheels.sh fetches them; the device call carries .whl), then lavo-zoo itself,
# built from this working tree with the setuptools among those wheels (no build isolation: nothing is downloaded).
# run.sh calls it when lavo_zoo cannot be imported. Usage: bash benchmarks/gpu/install.sh [TARGET]
# (LAVO_GPU_WHEELS: another folder of wheels; PYTHON: the interpreter, default python3)
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:-/tmp/lavo-site}
py=${PYTHON:-python3}
mkdir -p "$target"
shopt -s nullglob
wheels=("${LAVO_GPU_WHEELS:-.whl}"/*.whl)
pip=("$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check --upgrade
     --target "$target")
if [ ${#wheels[@]} -gt 0 ]; then
  "${pip[@]}" "${wheels[@]}"
  echo "installed ${#wheels[@]} wheels from ${LAVO_GPU_WHEELS:-.whl} into $target"
else
  echo "no wheels in ${LAVO_GPU_WHEELS:-.whl}/ (run bash benchmarks/gpu/fetch_wheels.sh here and carry .whl):" \
    "installing lavo-zoo alone"
fi
PYTHONPATH="$target${PYTHONPATH:+:$PYTHONPATH}" "${pip[@]}" --no-build-isolation .
echo "installed lavo-zoo from $PWD into $target"
