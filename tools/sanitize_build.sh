#!/usr/bin/env bash
# Sanitizer build of the extension into build/<kind> and a runner for tests under it.
#   tools/sanitize_build.sh address            # ASan + UBSan  -> build/asan/_C*.so
#   tools/sanitize_build.sh thread             # TSan          -> build/tsan/_C*.so
#   tools/sanitize_build.sh address run -q tests/reliability/test_wire.py tests/codec
#   SANITIZE_QUICK=1 tools/sanitize_build.sh address   # -O1 without debug info: half the build time
# "run" copies the instrumented module into a private copy of python/ (build/<kind>/py) and
# runs pytest with the sanitizer runtime preloaded (torch itself is not instrumented).
set -euo pipefail
cd "$(dirname "$0")/.."
KIND=${1:?address or thread}; shift
case $KIND in address) DIR=build/asan; LIB=libasan.so;; thread) DIR=build/tsan; LIB=libtsan.so;;
  *) echo "address or thread" >&2; exit 2;; esac
PY=${PYTHON:-python}
if [ "${1:-}" != "run" ]; then
  # Host code only (the sanitizers do not instrument device code), configured so too.
  export RINGZIP_CUDA=0
  PYABS=$(command -v "$PY")  # absolute, but not resolved: a venv's python is a link to its base
  case $PYABS in /*) ;; *) PYABS=$PWD/$PYABS;; esac
  # Quick: what CI builds (6 min on 2 cores against 12); reports then name functions, not lines.
  if [ -n "${SANITIZE_QUICK:-}" ]; then TYPE=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g0")
  else TYPE=(-DCMAKE_BUILD_TYPE=RelWithDebInfo); fi
  cmake -S . -B "$DIR" -G Ninja -DPython_EXECUTABLE="$PYABS" "${TYPE[@]}" -DRINGZIP_SANITIZER="$KIND" >/dev/null
  cmake --build "$DIR" -j "${JOBS:-2}"
  exit 0
fi
shift
rm -rf "$DIR/py" && mkdir -p "$DIR/py" && cp -r python/ringzip "$DIR/py/"
rm -f "$DIR"/py/ringzip/_C*.so && cp "$DIR"/_C*.so "$DIR/py/ringzip/"
RT=$(${CXX:-g++} -print-file-name=$LIB)
export PYTHONPATH="$PWD/$DIR/py"
# Python and torch leak by design at exit and aren't instrumented: no leak check; ODR noise off.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:detect_odr_violation=0:abort_on_error=1:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# tools/tsan.supp: reports inside torch and CPython, whose synchronisation TSan cannot see.
export TSAN_OPTIONS=${TSAN_OPTIONS:-report_signal_unsafe=0:halt_on_error=0:second_deadlock_stack=1:suppressions=$PWD/tools/tsan.supp}
# libstdc++ preloaded too: python does not link it, so without it the runtime finds no real
# __cxa_throw to intercept and aborts on the first C++ exception.
LD_PRELOAD="$RT $(${CXX:-g++} -print-file-name=libstdc++.so.6)" exec "$PY" -m pytest -p no:cacheprovider "$@"
