// Python entry points of the codec kernels (filled in with the codecs).
#include "python/bindings.h"

namespace ringzip {
void bind_codec(pybind11::module_& m) {}
}  // namespace ringzip
