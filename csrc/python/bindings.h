#pragma once
#include <pybind11/pybind11.h>

namespace ringzip {
void bind_codec(pybind11::module_& m);
void bind_backend(pybind11::module_& m);
void bind_options(pybind11::module_& m);  // python/bind_options.cc
void bind_stats(pybind11::module_& m);    // python/bind_stats.cc
void bind_cost(pybind11::module_& m);      // python/bind_cost.cc
void bind_loopback(pybind11::module_& m);  // python/bind_loopback.cc
void bind_shm(pybind11::module_& m);       // python/bind_shm.cc
void bind_cuda(pybind11::module_& m);      // python/cuda_bind.cc, CUDA builds only
}  // namespace ringzip
