#pragma once
#include <pybind11/pybind11.h>

#include <string>

#include "plan/options.h"

namespace ringzip {
void bind_codec(pybind11::module_& m);
void bind_backend(pybind11::module_& m);
void bind_options(pybind11::module_& m);   // python/bind_options.cc
void bind_stats(pybind11::module_& m);     // python/bind_stats.cc
void bind_cost(pybind11::module_& m);      // python/bind_cost.cc
void bind_loopback(pybind11::module_& m);  // python/bind_loopback.cc
void bind_sim(pybind11::module_& m);       // python/bind_sim.cc
void bind_shm(pybind11::module_& m);       // python/bind_shm.cc
void bind_cuda(pybind11::module_& m);      // python/cuda_bind.cc, CUDA builds only

// parse_name for a binding's argument: ValueError "ringzip: unknown <what> ...".
template <class E, size_t N>
E by_name(const Named<E> (&table)[N], const std::string& s, const char* what) {
  try {
    return parse_name(table, s, what);
  } catch (const std::invalid_argument& e) {
    throw pybind11::value_error(std::string("ringzip: ") + e.what());
  }
}

}  // namespace ringzip
