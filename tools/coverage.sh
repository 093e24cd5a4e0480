#!/usr/bin/env bash
# Line coverage of a part of csrc/ under some tests (default: the collective layer under the
# loopback matrix).
#   tools/coverage.sh                 # build into build/coverage, run the tests, print the table
#   tools/coverage.sh tests/collective/test_loopback_matrix.py -k grouped   # other pytest args
#   FILTER='csrc/(plan|backend)/' tools/coverage.sh tests/backend ...       # another part
# The extension is built with --coverage into its own folder (the developer build in build/dev
# and python/ringzip/_C*.so are untouched) and imported from a private copy of python/
# (build/coverage/py). Needs gcovr: GCOVR=/path/to/gcovr, or on PATH
# (python3 -m venv /tmp/covenv && /tmp/covenv/bin/pip install gcovr). CPU build only: the CUDA
# twin (cuda_compute.cc) is not compiled, so it is not counted. docs/testing.md has the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
GCOVR=${GCOVR:-$(command -v gcovr || echo /tmp/covenv/bin/gcovr)}
[ -x "$GCOVR" ] || { echo "gcovr not found: set GCOVR or install it (see the header of $0)" >&2; exit 2; }
DIR=build/coverage
PATH="$(dirname "$(command -v "$PY")"):$PATH"  # cmake and ninja beside that Python (tools/dev_build.sh)
RINGZIP_CUDA=0 cmake -S . -B "$DIR" -G Ninja -DPython_EXECUTABLE="$(command -v "$PY")" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS=--coverage -DCMAKE_SHARED_LINKER_FLAGS=--coverage >/dev/null
RINGZIP_CUDA=0 cmake --build "$DIR" -j "${JOBS:-2}"
find "$DIR" -name '*.gcda' -delete  # counts of this run only
rm -rf "$DIR/py" && mkdir -p "$DIR/py" && cp -r python/ringzip "$DIR/py/" && rm -f "$DIR"/py/ringzip/_C*.so
cp "$DIR"/_C*.so "$DIR/py/ringzip/"
[ $# -gt 0 ] || set -- tests/collective/test_loopback_matrix.py tests/collective/test_loopback_transport.py
status=0
RINGZIP_FULL_EXIT=1 PYTHONPATH="$PWD/$DIR/py" "$PY" -m pytest -q -p no:cacheprovider "$@" | tail -3 || status=$?
# The ranks are threads and gcov counters are not atomic: a rare lost update shows as a
# negative branch count, which gcovr refuses unless told to warn.
"$GCOVR" --root . --filter "${FILTER:-csrc/collective/}" --gcov-ignore-parse-errors=negative_hits.warn_once_per_file \
  --txt - --print-summary "$DIR/CMakeFiles/_C.dir"
exit $status
