// ringzip._C.ShmTransport: the shared-memory transport (transport/shm/) for tests and
// benchmarks -- raw sends and receives of CPU tensors, and the collective algorithms run over it
// (shm_allreduce, shm_compressed_allreduce), one process per rank. The backend uses the C++
// transport directly; this binding is not a user API.
#include <ATen/ATen.h>
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>

#include "backend/backend.h"
#include "backend/tensors.h"
#include "collective/algorithms.h"
#include "collective/compressed.h"
#include "python/bindings.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_transport.h"

namespace py = pybind11;

namespace ringzip {
namespace {

std::chrono::milliseconds ms(double seconds) {
  if (!(seconds > 0)) throw std::invalid_argument("ringzip.ShmTransport: timeouts must be positive");
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000 + 0.5));
}

struct PyShm {
  std::unique_ptr<Transport> net;
  std::chrono::milliseconds timeout;
};

// A posted transfer; keeps its tensor alive until the request is gone.
struct PyRequest {
  std::unique_ptr<Request> req;
  at::Tensor tensor;
  std::chrono::milliseconds timeout;
  void wait(std::optional<double> timeout_s) {
    py::gil_scoped_release nogil;
    req->wait(timeout_s ? ms(*timeout_s) : timeout);
  }
};

at::Tensor checked(const at::Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous())
    throw std::invalid_argument("ringzip.ShmTransport: tensors must be contiguous CPU tensors");
  return t;
}

PyRequest post(PyShm& s, const at::Tensor& t, int peer, uint32_t tag, bool send) {
  at::Tensor c = checked(t);
  py::gil_scoped_release nogil;
  auto r = send ? s.net->isend(c.data_ptr(), c.nbytes(), peer, tag) : s.net->irecv(c.data_ptr(), c.nbytes(), peer, tag);
  return PyRequest{std::move(r), c, s.timeout};
}

// Runs body on a Comm over the transport, as the backend would (Comm::fail aborts on failure).
void run_collective(PyShm& s, uint32_t seq, std::optional<double> timeout_s, const char* op,
                    const std::function<void(Comm&)>& body) {
  const auto deadline = std::chrono::steady_clock::now() + (timeout_s ? ms(*timeout_s) : s.timeout);
  py::gil_scoped_release nogil;
  Comm c{*s.net, host_compute(), seq, deadline, op};
  body(c);
}

}  // namespace

void bind_shm(py::module_& m) {
  using namespace py::literals;
  // What a segment's header must say (segment.h): the tests that forge or read segments ask here.
  m.attr("shm_segment_version") = shm::kVersion;
  py::class_<PyRequest>(m, "ShmRequest")
      .def("wait", &PyRequest::wait, "timeout_s"_a = py::none(),
           "Waits until the transfer finished; RuntimeError on failure or timeout (default: the transport's).");
  py::class_<PyShm>(m, "ShmTransport",
                    "Shared-memory transport among the ranks of one host (tests and benchmarks only).")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, double timeout_s,
                       size_t ring_bytes) {
             const auto t = ms(timeout_s);
             py::gil_scoped_release nogil;
             return std::make_unique<PyShm>(PyShm{make_shm_transport(store, rank, size, t, ShmOptions{ring_bytes}), t});
           }),
           "store"_a, "rank"_a, "size"_a, "timeout_s"_a = 60.0, "ring_bytes"_a = 0,
           "Rendezvous of `size` ranks through `store` (private to the group); ring_bytes 0: default.")
      .def_property_readonly("rank", [](PyShm& s) { return s.net->rank(); })
      .def_property_readonly("size", [](PyShm& s) { return s.net->size(); })
      .def(
          "isend", [](PyShm& s, const at::Tensor& t, int peer, uint32_t tag) { return post(s, t, peer, tag, true); },
          "tensor"_a, "peer"_a, "tag"_a)
      .def(
          "irecv", [](PyShm& s, const at::Tensor& t, int peer, uint32_t tag) { return post(s, t, peer, tag, false); },
          "tensor"_a, "peer"_a, "tag"_a)
      .def(
          "send", [](PyShm& s, const at::Tensor& t, int peer, uint32_t tag) { post(s, t, peer, tag, true).wait({}); },
          "tensor"_a, "peer"_a, "tag"_a)
      .def(
          "recv", [](PyShm& s, const at::Tensor& t, int peer, uint32_t tag) { post(s, t, peer, tag, false).wait({}); },
          "tensor"_a, "peer"_a, "tag"_a)
      .def("abort",
           [](PyShm& s) {
             py::gil_scoped_release nogil;
             s.net->abort();
           })
      .def("close", [](PyShm& s) {
        py::gil_scoped_release nogil;
        s.net->close();
      });
  m.def(
      "shm_allreduce",
      [](PyShm& s, const at::Tensor& t, const std::string& algorithm, uint32_t seq, std::optional<double> timeout_s) {
        at::Tensor c = checked(t);
        const Buf b{c.data_ptr(), static_cast<size_t>(c.numel()), to_dtype(c.scalar_type(), "shm_allreduce")};
        AllreduceAlgo algo = parse_algorithm(algorithm);
        if (algo == AllreduceAlgo::Auto) algo = rule_dense(b.bytes(), s.net->size());
        run_collective(s, seq, timeout_s, "allreduce", [&](Comm& comm) { allreduce(comm, b, RedOp::Sum, algo); });
      },
      "transport"_a, "tensor"_a, "algorithm"_a = "ring", "seq"_a = 0, "timeout_s"_a = py::none(),
      "In-place exact SUM all-reduce of a CPU tensor over the transport (algorithm: auto, ring, rd, direct,\n"
      "star, hd, tree); every rank calls it with the same arguments.");
  m.def(
      "shm_compressed_allreduce",
      [](PyShm& s, const at::Tensor& t, const std::string& codec, const std::string& algorithm, uint64_t seed,
         uint32_t seq, std::optional<double> timeout_s) {
        at::Tensor c = checked(t);
        if (c.scalar_type() != at::kFloat) throw std::invalid_argument("shm_compressed_allreduce: float32 only");
        CompressedCall call;
        call.spec = codec::parse(codec, codec::kBucketSize, true);
        call.seed = seed;
        call.rng_seq = seq;
        call.algo = resolve_compressed(call.spec, parse_compressed_algo(algorithm));
        call.values_rule = &rule_dense;
        run_collective(s, seq, timeout_s, "allreduce",
                       [&](Comm& comm) { compressed_allreduce(comm, c.data_ptr<float>(), c.numel(), call); });
      },
      "transport"_a, "tensor"_a, "codec"_a, "algorithm"_a = "auto", "seed"_a = 0, "seq"_a = 0,
      "timeout_s"_a = py::none(),
      "In-place compressed SUM all-reduce of a float32 CPU tensor (codec string as in ringzip.loopback.compressed,\n"
      "the default bucket size, stochastic rounding) over the transport.");
}

}  // namespace ringzip
