// Python entry points of the c10d backend.
#include "python/bindings.h"

namespace ringzip {
void bind_backend(pybind11::module_& m) {}
}  // namespace ringzip
