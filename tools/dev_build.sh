#!/usr/bin/env bash
# Incremental developer build: compiles into build/dev and drops _C*.so into
# python/ringzip, so `PYTHONPATH=python` imports the tree without installing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
if [[ -z "${CUDACXX:-}" ]] && command -v nvcc >/dev/null; then
  # The nvcc on PATH may be a shim script; CMake needs the real toolkit path.
  real=$(grep -o '/[^ ]*/bin/nvcc' "$(command -v nvcc)" 2>/dev/null || command -v nvcc)
  export CUDACXX=$real CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$real")")}
fi
cmake -S . -B build/dev -G Ninja -DPython_EXECUTABLE="$(command -v "$PY")" \
  -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} ${CMAKE_ARGS:-} >/dev/null
cmake --build build/dev -j "${JOBS:-2}"
cp -f build/dev/_C*.so python/ringzip/
