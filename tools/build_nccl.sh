#!/usr/bin/env bash
# NCCL built from a source tree for one GPU architecture, for the GPU check with several ranks on
# one GPU: NCCL 2.30 and later accept them with NCCL_MULTI_RANK_GPU_ENABLE=1, the NCCL that torch
# bundles (2.28) refuses them. Nothing is fetched: point it at a checkout or an unpacked release
# (github.com/NVIDIA/nccl, 2.30.7 or later).
#
#   tools/build_nccl.sh SRC [OUT]   build into OUT (default build/nccl, git-ignored): lib/, include/,
#                                   and nccl-lib.tar.xz, the library compressed to travel to a GPU machine
#   tools/build_nccl.sh --check OUT load OUT/lib/libnccl.so here (no GPU needed) and print its version
#
# NCCL_GENCODE overrides the architecture (default sm_90, the H200's); JOBS the parallel jobs.
# On the GPU machine: tar -xJf nccl-lib.tar.xz, then LD_PRELOAD=$PWD/lib/libnccl.so.2 (or
# LD_LIBRARY_PATH=$PWD/lib) ahead of torch's bundled NCCL, and NCCL_MULTI_RANK_GPU_ENABLE=1.
set -euo pipefail
cd "$(dirname "$0")/.."

check() {
  local lib="$1/lib/libnccl.so"
  [ -e "$lib" ] || { echo "no $lib" >&2; exit 1; }
  "${PYTHON:-python3}" - "$lib" <<'EOF'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
v = ctypes.c_int()
if lib.ncclGetVersion(ctypes.byref(v)) != 0:
    sys.exit("ncclGetVersion failed")
code = v.value  # MAJOR*10000 + MINOR*100 + PATCH since 2.9
print(f"{sys.argv[1]}: NCCL {code // 10000}.{code // 100 % 100}.{code % 100}")
EOF
}

if [ "${1:-}" = "--check" ]; then
  check "${2:?--check OUT}"
  exit 0
fi

SRC=$(cd "${1:?SRC: an NCCL source tree}" && pwd)
OUT=${2:-build/nccl}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
[ -f "$SRC/makefiles/version.mk" ] || { echo "$SRC is not an NCCL source tree" >&2; exit 1; }
. tools/cuda_env.sh  # CUDA_HOME: the real toolkit behind an nvcc wrapper
: "${CUDA_HOME:?no CUDA toolkit found (nvcc on PATH)}"
GENCODE=${NCCL_GENCODE:--gencode=arch=compute_90,code=sm_90}
# NCCL builds in place: a copy keeps the source tree clean (and read-only trees usable).
WORK="$OUT/src"
rm -rf "$WORK" && mkdir -p "$WORK"
(cd "$SRC" && tar --exclude=.git -cf - .) | (cd "$WORK" && tar -xf -)
make -C "$WORK" -j "${JOBS:-2}" src.build CUDA_HOME="$CUDA_HOME" NVCC_GENCODE="$GENCODE" BUILDDIR="$OUT/b"
rm -rf "$OUT/lib" "$OUT/include"
cp -a "$OUT/b/lib" "$OUT/b/include" "$OUT/"
tar -C "$OUT" -cJf "$OUT/nccl-lib.tar.xz" lib/libnccl.so lib/libnccl.so.2 "$(cd "$OUT" && ls lib/libnccl.so.2.*)"
check "$OUT"
ls -l "$OUT/nccl-lib.tar.xz"
