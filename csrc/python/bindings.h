#pragma once
#include <pybind11/pybind11.h>

namespace ringzip {
void bind_codec(pybind11::module_& m);
void bind_backend(pybind11::module_& m);
}  // namespace ringzip
