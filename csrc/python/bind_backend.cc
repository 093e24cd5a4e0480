// Python entry points of the c10d backend.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "backend/backend.h"
#include "python/bindings.h"
#include "transport/gloo/gloo_transport.h"

namespace py = pybind11;

namespace ringzip {
namespace {

// Holder that drops the GIL while the backend is destroyed: the destructor joins the worker
// thread, which may be completing a future whose Python callback needs the GIL.
template <typename T>
class NoGilPtr {
 public:
  NoGilPtr() = default;
  explicit NoGilPtr(T* p) : p_(c10::intrusive_ptr<T>::reclaim_copy(p)) {}
  NoGilPtr(c10::intrusive_ptr<T> p) : p_(std::move(p)) {}  // NOLINT: implicit by design
  NoGilPtr(const NoGilPtr&) = default;
  NoGilPtr(NoGilPtr&&) noexcept = default;
  NoGilPtr& operator=(const NoGilPtr&) = default;
  NoGilPtr& operator=(NoGilPtr&&) noexcept = default;
  ~NoGilPtr() {
    if (p_ && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      p_.reset();
    }
  }
  T* get() const { return p_.get(); }

 private:
  c10::intrusive_ptr<T> p_;
};

}  // namespace
}  // namespace ringzip

PYBIND11_DECLARE_HOLDER_TYPE(T, ringzip::NoGilPtr<T>, true)

namespace ringzip {

void bind_backend(py::module_& m) {
  py::class_<RingzipBackend, c10d::Backend, NoGilPtr<RingzipBackend>>(m, "RingzipBackend")
      .def(py::init([](const c10::intrusive_ptr<c10d::Backend>& gloo, std::chrono::milliseconds timeout,
                       const std::string& algorithm, const std::string& group_name) {
             Config cfg;
             cfg.timeout = timeout;
             cfg.algorithm = parse_algorithm(algorithm);
             cfg.group_name = group_name;
             return c10::make_intrusive<RingzipBackend>(std::make_unique<GlooTransport>(gloo), cfg);
           }),
           py::arg("gloo"), py::arg("timeout"), py::arg("algorithm") = "auto", py::arg("group_name") = "",
           py::call_guard<py::gil_scoped_release>())
      .def("set_algorithm", [](RingzipBackend& b, const std::string& a) { b.set_algorithm(parse_algorithm(a)); })
      .def_property_readonly("timeout", [](const RingzipBackend& b) { return b.config().timeout; })
      .def_property_readonly("transport", [](const RingzipBackend&) { return std::string("gloo"); });
}

}  // namespace ringzip
