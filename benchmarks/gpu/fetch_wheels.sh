#!/usr/bin/env bash
# Downloads into .whl/ (ignored by git) the wheels that the lent GPU machines' image lacks (wheels.txt, at the lock's
# versions: wheels.py joins the two): Python 3.12, manylinux x86-64, no dependencies resolved (wheels.txt names each
# one); the one without a wheel on PyPI is built here from its sdist (pure Python). Run it here, where pip reaches
# PyPI, before the device call, which carries .whl (benchmarks/RESULTS.md, "The device check").
# Usage: bash benchmarks/gpu/fetch_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
out=.whl
"$py" benchmarks/gpu/wheels.py > /dev/null  # stops here, saying why, where the list and the lock disagree
mkdir -p "$out"
rm -f "$out"/*.whl  # one version of each: two would stop the install (only once the list is known good)
platforms=()
for n in 28 27 24 17 5; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
while read -r spec how; do
  case $how in
    wheel) "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
             --implementation cp "${platforms[@]}" -d "$out" "$spec" ;;
    build) "$py" -m pip wheel -q --disable-pip-version-check --no-deps --no-binary=:all: -w "$out" "$spec" ;;
    skip) ;;
    *) echo "fetch_wheels.sh: unknown way '$how' for $spec in wheels.txt" >&2; exit 2 ;;
  esac
done < <("$py" benchmarks/gpu/wheels.py)
ls -l "$out"
echo "$(ls "$out"/*.whl | wc -l) wheels, $(du -sh "$out" | cut -f1) in $out (carry it: \"carry\": [\".whl\"])"
