#!/usr/bin/env bash
# Incremental developer build: compiles into build/dev (BUILD_DIR overrides: one per torch when
# checking several) and drops _C*.so into python/ringzip, so `PYTHONPATH=python` imports the tree
# without installing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
. tools/cuda_env.sh
# The cmake and ninja installed beside that Python (pip's, as make installs them) first: an
# older system cmake can't drive nvcc 13 (no CUDA20 dialect) and leaves a broken build/dev.
PATH="$(dirname "$(command -v "$PY")"):$PATH"
B=${BUILD_DIR:-build/dev}
cmake -S . -B "$B" -G Ninja -DPython_EXECUTABLE="$(command -v "$PY")" \
  -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} ${CMAKE_ARGS:-} >/dev/null
cmake --build "$B" -j "${JOBS:-2}"
for so in "$B"/_C*.so; do  # replace, never overwrite: running processes keep the old file
  cp -f "$so" "python/ringzip/.$(basename "$so").tmp" && mv -f "python/ringzip/.$(basename "$so").tmp" "python/ringzip/$(basename "$so")"
done
cp -f "$B/wanlink" python/ringzip/bench/.wanlink.tmp && mv -f python/ringzip/bench/.wanlink.tmp python/ringzip/bench/wanlink
