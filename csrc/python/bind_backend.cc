// Python entry points of the c10d backend.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "backend/backend.h"
#include "python/bindings.h"
#include "transport/gloo/gloo_transport.h"
#include "transport/shm/shm_transport.h"

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

Device device_of(const std::string& name) {
  if (name == "cpu") return Device::Host;
  if (name == "cuda") return Device::Cuda;
  throw std::invalid_argument("ringzip: device must be 'cpu' or 'cuda', got '" + name + "'");
}

// stats()["auto"] (python/ringzip/api.py documents the keys).
py::dict auto_state(const Tuner::Summary& s) {
  py::dict d, params, codecs, last;
  d["calls"] = s.calls;
  d["refreshes"] = s.refreshes;
  d["explorations"] = s.explorations;
  d["tours"] = s.tours;
  d["changes"] = s.changes;  // lasting changes seen: a size class's other prices moved with its running way's
  d["refresh_s"] = s.refresh_seconds;
  d["codec_choices"] = s.codec_choices;
  d["algorithm_choices"] = s.algorithm_choices;
  d["way_choices"] = s.way_choices;  // the codec or dense algorithm with the algorithm it ran
  params["alpha_s"] = s.link.alpha;
  params["call_s"] = s.link.call;
  params["link_gbit"] = s.link.inv_bw > 0 ? 8e-9 / s.link.inv_bw : 0.0;
  params["host_gbit"] = s.link.inv_host > 0 ? 8e-9 / s.link.inv_host : 0.0;  // per rank, the host's copies
  params["reduce_gbyte_s"] = s.link.reduce > 0 ? 1e-9 / s.link.reduce : 0.0;
  params["codec_scale"] = s.codec_scale;
  for (const auto& [name, c] : s.codecs) {
    py::dict e;
    e["encode_gbyte_s"] = 1e-9 / c.encode;
    e["decode_gbyte_s"] = 1e-9 / c.decode;
    e["feedback_gbyte_s"] = 1e-9 / c.feedback;
    codecs[py::str(name)] = e;
  }
  params["codecs"] = codecs;
  d["params"] = params;
  last["bytes"] = s.last_bytes;
  last["choice"] = s.last_choice;
  last["way"] = s.last_way;
  last["tried"] = s.last_tried;                  // run to measure the way (exploration, tour), not for its price
  last["segment_elems"] = s.last_segment_elems;  // SRA's segment length (0: not SRA)
  last["predicted_s"] = s.last_predicted;        // what the choice used: measured where it could
  last["model_s"] = s.last_model;                // the model alone
  d["last"] = last;
  return d;
}

// The shared-memory transport among the ranks of this rank's node, or nullptr with `why`. The
// ranks of the node agree through the store: shared memory is used only where every one of them
// set it up (a rank that routed to a peer over shared memory while the peer used Gloo would
// wait forever).
std::unique_ptr<Transport> local_transport(const std::vector<int>& node_of, int rank,
                                           const c10::intrusive_ptr<c10d::Store>& store,
                                           std::chrono::milliseconds timeout, std::string& why) {
  const NodeLayout lay(node_of);
  const auto& members = lay.members(lay.node(rank));
  if (members.size() < 2) return nullptr;
  std::unique_ptr<Transport> t;
  try {
    ShmOptions opts;
    opts.names = {members, static_cast<int>(node_of.size())};  // errors name ranks as the group does
    t = make_shm_transport(store, lay.local_rank(rank), static_cast<int>(members.size()), timeout, opts);
  } catch (const std::exception& e) {
    why = e.what();
  }
  const std::string mine = why.empty() ? "ok" : why;
  store->set("status/" + std::to_string(lay.local_rank(rank)), std::vector<uint8_t>(mine.begin(), mine.end()));
  for (size_t q = 0; q < members.size() && why.empty(); ++q) {
    const auto v = store->get("status/" + std::to_string(q));
    const std::string s(v.begin(), v.end());
    if (s != "ok") why = "rank " + std::to_string(members[q]) + " of this node could not set it up: " + s;
  }
  if (!why.empty() && t) t->close();
  return why.empty() ? std::move(t) : nullptr;
}

}  // namespace
}  // namespace ringzip

PYBIND11_DECLARE_HOLDER_TYPE(T, ringzip::NoGilPtr<T>, true)

namespace ringzip {

void bind_backend(py::module_& m) {
  m.def(
      "push_call_codec",
      [](const std::string& codec) {
        try {
          push_call_codec(codec);
        } catch (const std::invalid_argument& e) {
          throw py::value_error(std::string("ringzip: ") + e.what());
        }
      },
      py::arg("codec"), "the calling thread's codec for the calls it issues (ringzip.compress / ringzip.exact)");
  m.def("pop_call_codec", &pop_call_codec, "ends the innermost push_call_codec of the calling thread");
  m.def(
      "set_split_builder",
      [](py::function build) {
        // Held for the process's life: the function's module (ringzip._registry) outlives every group.
        auto fn = std::make_shared<py::function>(std::move(build));
        RingzipBackend::set_split_builder([fn](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                               std::chrono::milliseconds timeout, const std::string& name,
                                               const RingzipBackend& parent) -> c10::intrusive_ptr<c10d::Backend> {
          py::gil_scoped_acquire gil;
          py::object child = (*fn)(store, rank, size, timeout, name, reinterpret_cast<uintptr_t>(&parent));
          return c10::intrusive_ptr<c10d::Backend>::reclaim_copy(child.cast<RingzipBackend*>());
        });
      },
      py::arg("build"),
      "the builder of split()'s child backends: (store, rank, size, timeout, group_name, parent identity)");
  py::class_<RingzipBackend, c10d::Backend, NoGilPtr<RingzipBackend>>(m, "RingzipBackend")
      .def(py::init([](const c10::intrusive_ptr<c10d::Backend>& gloo, std::chrono::milliseconds timeout,
                       const std::string& group_name) {
             Config cfg;
             cfg.timeout = timeout;
             cfg.group_name = group_name;
             return c10::make_intrusive<RingzipBackend>(std::make_unique<GlooTransport>(gloo), cfg);
           }),
           py::arg("gloo"), py::arg("timeout"), py::arg("group_name"), py::call_guard<py::gil_scoped_release>())
      .def("enable_mismatch_watch", &RingzipBackend::enable_mismatch_watch, py::arg("store"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("broken_reason", &RingzipBackend::broken_reason)
      // Every option at once (ringzip.set_options): all are parsed and checked before any applies.
      .def(
          "configure",
          [](RingzipBackend& b, const std::string& algorithm, const std::string& check, const std::string& codec,
             int64_t bucket_size, bool stochastic, int64_t min_numel, std::optional<bool> error_feedback, uint64_t seed,
             const std::string& compressed_algorithm, int64_t topk_block, const std::string& hierarchy) {
            CompressionConfig cc;
            cc.codec = codec;
            cc.bucket_size = bucket_size;
            cc.stochastic = stochastic;
            cc.min_numel = min_numel;
            cc.error_feedback = error_feedback;
            cc.seed = seed;
            cc.topk_block = topk_block;
            try {
              cc.algorithm = parse_compressed_algo(compressed_algorithm);
              b.configure(parse_algorithm(algorithm), parse_check(check), std::move(cc), parse_hierarchy(hierarchy));
            } catch (const std::invalid_argument& e) {
              throw py::value_error(std::string("ringzip: ") + e.what());
            }
          },
          py::arg("algorithm"), py::arg("check"), py::arg("codec"), py::arg("bucket_size"), py::arg("stochastic"),
          py::arg("min_numel"), py::arg("error_feedback"), py::arg("seed"), py::arg("compressed_algorithm"),
          py::arg("topk_block"), py::arg("hierarchy") = "auto")
      // What the C++ side applies (tests read it to see that a rejected change left it as it was).
      .def("settings",
           [](const RingzipBackend& b) {
             const CompressionConfig cc = b.compression();
             py::dict d;
             d["algorithm"] = algorithm_name(b.algorithm());
             d["check"] = check_name(b.check_mode());
             d["codec"] = cc.codec;
             d["bucket_size"] = cc.bucket_size;
             d["stochastic"] = cc.stochastic;
             d["min_numel"] = cc.min_numel;
             d["error_feedback"] = cc.error_feedback;
             d["seed"] = cc.seed;
             d["compressed_algorithm"] = std::string(compressed_algo_name(cc.algorithm));
             d["topk_block"] = cc.topk_block;
             d["hierarchy"] = hierarchy_name(b.hierarchy());
             return d;
           })
      // The node of every rank (ringzip._registry computes it from the ranks' node keys) and,
      // with `shm_store`, a shared-memory transport among this rank's node (local_transport).
      // Returns why shared memory is not used ("" when it is, or was not asked for).
      .def(
          "set_topology",
          [](RingzipBackend& b, const std::vector<int>& node_of,
             const std::optional<c10::intrusive_ptr<c10d::Store>>& shm_store, std::chrono::milliseconds timeout) {
            std::string why;
            std::unique_ptr<Transport> local;
            if (shm_store && *shm_store) local = local_transport(node_of, b.getRank(), *shm_store, timeout, why);
            b.set_topology(node_of, std::move(local));
            return why;
          },
          py::arg("node_of"), py::arg("shm_store") = py::none(), py::arg("timeout") = std::chrono::milliseconds(60000),
          py::call_guard<py::gil_scoped_release>())
      .def("topology",
           [](const RingzipBackend& b) {
             const NodeLayout& lay = b.layout();
             py::dict d;
             d["nodes"] = lay.nodes();
             d["ranks_per_node"] = lay.ranks_per_node();
             d["layout"] = lay.describe();
             py::list node_of;
             for (int r = 0; r < lay.size(); ++r) node_of.append(lay.node(r));
             d["node_of"] = node_of;
             d["hierarchy"] = hierarchy_name(b.hierarchy());
             d["node_aware"] = b.flat_reason().empty();
             d["flat_reason"] = b.flat_reason();
             d["transport"] = b.transport_name();
             return d;
           })
      .def("compression_feedback", [](const RingzipBackend& b) { return b.compression().feedback(); })
      .def("stats",
           [](RingzipBackend& b) {
             py::dict out;
             for (const auto& [name, s] : b.compression_state().stats()) {
               py::dict d;
               d["calls"] = s.calls;
               d["bytes_in"] = s.bytes_in;
               d["bytes_wire"] = s.bytes_sent;
               d["bytes_dense_equiv"] = s.bytes_dense_equiv;
               d["codec_seconds"] = s.codec_seconds;
               d["total_seconds"] = s.total_seconds;
               if (name == "fp16") d["overflows"] = s.overflows;
               d["bytes_intra_node"] = s.bytes_intra_node;
               out[py::str(name)] = d;
             }
             return out;
           })
      .def("reset_stats", [](RingzipBackend& b) { b.compression_state().reset_stats(); })
      // stats()["auto"]: what algorithm="auto" and codec="auto" chose and from which agreed figures.
      // Per device ("cpu" or "cuda"): each device path's calls have their own tuner.
      .def(
          "auto_state",
          [](RingzipBackend& b, const std::string& device) {
            const Tuner& t = b.tuner(device_of(device));
            py::dict d = auto_state(t.summary());
            d["device"] = device;
            d["kernels"] = t.device() ? "device" : "host";  // where its codec speeds were measured
            return d;
          },
          py::arg("device") = "cpu")
      // Test hooks (every device's tuner): this rank's link measurements read as (alpha s/message,
      // inv_bw s/byte), None: measured; a call run one of these ways is recorded as taking these
      // seconds, {}: measured; host calls tuned as a device's (Planner::tune_host_as_device).
      .def(
          "_tuner_inject",
          [](RingzipBackend& b, std::optional<std::pair<double, double>> link) {
            for (Device d : {Device::Host, Device::Cuda}) b.tuner(d).inject(link);
          },
          py::arg("link"))
      .def(
          "_tuner_inject_times",
          [](RingzipBackend& b, const std::map<std::string, double>& seconds) {
            for (Device d : {Device::Host, Device::Cuda}) b.tuner(d).inject_times(seconds);
          },
          py::arg("seconds"))
      .def("_tune_host_as_device", [](RingzipBackend& b, bool on) { b.planner().tune_host_as_device(on); })
      .def("residual_bytes", [](RingzipBackend& b) { return b.compression_state().residual_bytes(); })
      // (calls, [(last_use, bound, residual), ...] by last use): Compression::State
      .def("error_feedback_state",
           [](RingzipBackend& b) {
             const auto st = b.compression_state().state();
             std::vector<std::tuple<uint64_t, bool, at::Tensor>> res;
             for (const auto& r : st.residuals) res.emplace_back(r.last_use, r.bound, r.values);
             return std::make_tuple(st.calls, res);
           })
      .def("load_error_feedback_state",
           [](RingzipBackend& b, uint64_t calls, const std::vector<std::tuple<uint64_t, bool, at::Tensor>>& res) {
             Compression::State st;
             st.calls = calls;
             for (const auto& [last_use, bound, values] : res) st.residuals.push_back({last_use, bound, values});
             b.compression_state().load_state(st);
           })
      .def("release_error_feedback",
           [](RingzipBackend& b, const std::vector<at::Tensor>& tensors) { b.compression_state().release(tensors); })
      .def_property_readonly("identity", [](const RingzipBackend& b) { return reinterpret_cast<uintptr_t>(&b); })
      .def_property_readonly("timeout", [](const RingzipBackend& b) { return b.config().timeout; })
      .def_property_readonly("transport", [](const RingzipBackend&) { return std::string("gloo"); });
}

}  // namespace ringzip
