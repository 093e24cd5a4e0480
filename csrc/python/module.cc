// The only PYBIND11_MODULE of ringzip: each area binds itself through one function.
#include <torch/python.h>

#include "python/bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "ringzip native core";
  // torch's pybind types (Store, Backend, Work) must be registered before ours refer to them.
  pybind11::module_::import("torch.distributed");
  ringzip::bind_codec(m);
  ringzip::bind_options(m);  // ringzip._C.Options: what ringzip.Options wraps
  ringzip::bind_stats(m);    // the structs stats() returns
  ringzip::bind_backend(m);
  ringzip::bind_cost(m);      // ringzip._C.cost: the cost model's pure functions
  ringzip::bind_sim(m);       // ringzip._C.sim: recorded calls and their replay
  ringzip::bind_loopback(m);  // ringzip._C.loopback: the in-process test fixture
  ringzip::bind_shm(m);       // ringzip._C.ShmTransport: the shared-memory transport, for tests and benchmarks
#ifdef RINGZIP_WITH_CUDA
  ringzip::bind_cuda(m);  // ringzip._C.cuda
#endif
}
