#!/usr/bin/env bash
# GPU check of ringzip, for a machine with a CUDA GPU and no network (< 8 minutes):
#   build from source (sm_90 only) -> pytest -m cuda tests/cuda -> GPU kernel benchmarks.
# Usage (repo root):  OUT=/some/dir PYTHON=python3 bench/gpu_check.sh
# Every part runs under a timeout; a failing part does not stop the others; the summary at the
# end says what failed. Full logs go to $OUT (default /tmp/ringzip-gpu-check).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/ringzip-gpu-check}
mkdir -p "$OUT"
T0=$(date +%s)
FAILED=()
STATUS=()

part() {  # part NAME TIMEOUT_S CMD...
  local name=$1 limit=$2; shift 2
  local t=$(date +%s)
  echo "+++ [$name] (timeout ${limit}s): $*"
  timeout -k 15 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 30 "$OUT/$name.log"
  local dt=$(( $(date +%s) - t ))
  echo "+++ [$name] rc=$rc after ${dt}s"
  STATUS+=("$name: rc=$rc (${dt}s)")
  [ $rc -eq 0 ] || FAILED+=("$name (rc=$rc$([ $rc -eq 124 ] && echo ', timed out'))")
  return $rc
}

part env 60 bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $PY -c 'import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0))'; command -v nvcc cmake ninja"

export RINGZIP_CUDA_ARCHS=${RINGZIP_CUDA_ARCHS:-90}
if part build 240 env PYTHON="$PY" JOBS="${JOBS:-$(nproc)}" tools/dev_build.sh; then
  # A newer NCCL carried along (tools/build_nccl.sh; carry build/nccl/nccl-lib.tar.xz): several
  # ranks on one GPU need NCCL >= 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1; preloaded (after the
  # build: the compilers need none of it), it serves torch and ringzip ahead of torch's own.
  if [ -f build/nccl/nccl-lib.tar.xz ]; then
    mkdir -p "$OUT/nccl" && tar -C "$OUT/nccl" -xJf build/nccl/nccl-lib.tar.xz
    export LD_PRELOAD="$OUT/nccl/lib/libnccl.so.2${LD_PRELOAD:+ $LD_PRELOAD}" NCCL_MULTI_RANK_GPU_ENABLE=1
    part nccl 30 env PYTHON="$PY" tools/build_nccl.sh --check "$OUT/nccl"
  fi
  part smoke 60 env PYTHONPATH=python "$PY" -m ringzip.bench.lab.gpu_smoke
  part kernels 120 env PYTHONPATH=python "$PY" -m ringzip.bench.lab.gpu_kernels --json "$OUT/kernels.json"
  # Per-test limit (pytest-timeout where installed) so one hang cannot eat the whole lease.
  TO=$("$PY" -c "import pytest_timeout" 2>/dev/null && echo "--timeout=${TEST_TIMEOUT:-170}")
  part tests ${TESTS_LIMIT:-300} env PYTHONPATH=python "$PY" -m pytest -q -rfEs -m cuda tests/cuda -p no:cacheprovider $TO --junitxml="$OUT/tests.xml" ${TESTS_ARGS:-}
else
  echo "build failed: skipping tests and benchmarks"
fi

echo
echo "================ ringzip GPU check summary ($(( $(date +%s) - T0 ))s, logs in $OUT) ================"
for s in "${STATUS[@]}"; do echo "  $s"; done
if [ -f "$OUT/smoke.log" ]; then sed 's/^/  smoke: /' "$OUT/smoke.log" | tail -n 8; fi
if [ -f "$OUT/tests.log" ]; then echo "  tests: $(grep -E '(passed|failed|skipped|error)' "$OUT/tests.log" | tail -n1)"; grep -E '^(SKIPPED|FAILED|ERROR)' "$OUT/tests.log" | cut -c1-300 | sort | uniq -c | head -n 40; fi
if [ -f "$OUT/kernels.log" ]; then sed -n '/^device:/,$p' "$OUT/kernels.log"; fi
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "FAILED parts: ${FAILED[*]}"
  exit 1
fi
echo "all parts passed"
