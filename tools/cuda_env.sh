# Sourced before a build: points CMake at the real CUDA toolkit when nvcc is on PATH
# (the nvcc there may be a wrapper script, which CMake and torch misread).
# Safe under `set -euo pipefail` (a real nvcc binary is used as is).
if [ -z "${CUDACXX:-}" ] && command -v nvcc >/dev/null 2>&1; then
  _rz_nvcc=$(command -v nvcc)
  if [ "$(head -c 2 "$_rz_nvcc" 2>/dev/null || true)" = "#!" ]; then
    _rz_real=$(grep -o '/[^ ]*/bin/nvcc' "$_rz_nvcc" 2>/dev/null | head -n1 || true)
    [ -n "$_rz_real" ] && _rz_nvcc=$_rz_real
  fi
  export CUDACXX="$_rz_nvcc"
  export CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$_rz_nvcc")")}"
  unset _rz_nvcc _rz_real
fi
