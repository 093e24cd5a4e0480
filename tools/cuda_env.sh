# Sourced before a build: points CMake at the real CUDA toolkit when nvcc is on PATH
# (the nvcc there may be a wrapper script, which CMake and torch misread).
if [ -z "${CUDACXX:-}" ] && command -v nvcc >/dev/null 2>&1; then
  _rz_nvcc=$(grep -o '/[^ ]*/bin/nvcc' "$(command -v nvcc)" 2>/dev/null | head -n1)
  [ -n "$_rz_nvcc" ] || _rz_nvcc=$(command -v nvcc)
  export CUDACXX="$_rz_nvcc"
  export CUDA_HOME="${CUDA_HOME:-$(dirname "$(dirname "$_rz_nvcc")")}"
  unset _rz_nvcc
fi
