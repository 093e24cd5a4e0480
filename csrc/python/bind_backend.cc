// Python entry points of the c10d backend.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "backend/backend.h"
#include "python/bindings.h"
#include "transport/gloo/gloo_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/kept.h"
#include "transport/tcp/tcp_transport.h"

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
  m.def("tcp_kept_connections", &tcp::kept::count,
        "TCP connections closed groups left for the next group between the same processes");
  m.def(
      "set_split_builder",
      [](py::function build) {
        // Held for the process's life: the function's module (ringzip._registry) outlives every group.
        auto fn = std::make_shared<py::function>(std::move(build));
        RingzipBackend::set_split_builder([fn](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                               std::chrono::milliseconds timeout, const std::string& name,
                                               const RingzipBackend& parent) -> c10::intrusive_ptr<c10d::Backend> {
          py::gil_scoped_acquire gil;
          py::object child = (*fn)(store, rank, size, timeout, name, parent.group_options());
          return c10::intrusive_ptr<c10d::Backend>::reclaim_copy(child.cast<RingzipBackend*>());
        });
      },
      py::arg("build"),
      "the builder of split()'s child backends: (store, rank, size, timeout, group_name, the parent's options)");
  py::class_<RingzipBackend, c10d::Backend, NoGilPtr<RingzipBackend>>(m, "RingzipBackend")
      .def(py::init([](const std::vector<c10::intrusive_ptr<c10d::Backend>>& gloo, std::chrono::milliseconds timeout,
                       const std::string& group_name) {
             Config cfg;
             cfg.timeout = timeout;
             cfg.group_name = group_name;
             return c10::make_intrusive<RingzipBackend>(std::make_unique<GlooTransport>(gloo), cfg);
           }),
           py::arg("gloo"), py::arg("timeout"), py::arg("group_name"), py::call_guard<py::gil_scoped_release>())
      // Over ringzip's own TCP transport (transport/tcp/): `store` is private to it.
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, const std::string& group_name, const std::string& address,
                       int connections, double link_gbit) {
             Config cfg;
             cfg.timeout = timeout;
             cfg.group_name = group_name;
             return c10::make_intrusive<RingzipBackend>(
                 make_tcp_transport(store, rank, size, timeout, TcpOptions{address, connections, link_gbit}), cfg);
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("group_name"),
           py::arg("address"), py::arg("connections"), py::arg("link_gbit") = 0.0,
           py::call_guard<py::gil_scoped_release>())
      .def("enable_mismatch_watch", &RingzipBackend::enable_mismatch_watch, py::arg("store"),
           py::call_guard<py::gil_scoped_release>())
      .def("agree_early", &RingzipBackend::agree_early, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("broken_reason", &RingzipBackend::broken_reason)
      // Every option at once (ringzip.set_options): all are parsed and checked before any applies.
      .def(
          "configure",
          [](RingzipBackend& b, const GroupOptions& o) {
            try {
              b.configure(o);
            } catch (const std::invalid_argument& e) {
              throw py::value_error(std::string("ringzip.Options: ") + e.what());
            }
          },
          py::arg("options"))
      // What the C++ side applied last (ringzip.get_options reads it).
      .def("group_options", &RingzipBackend::group_options)
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
             d["connections"] = b.connections();
             d["warmed"] = b.warmed_connections();
             return d;
           })
      .def("compression_feedback", [](const RingzipBackend& b) { return b.compression().feedback(); })
      .def("stats", [](RingzipBackend& b) { return b.compression_state().stats(); })
      .def("reset_stats", [](RingzipBackend& b) { b.compression_state().reset_stats(); })
      // stats()["auto"]: what algorithm="auto" and codec="auto" chose and from which agreed figures.
      // Per device ("cpu" or "cuda"): each device path's calls have their own tuner.
      .def(
          "auto_state",
          [](RingzipBackend& b, const std::string& device) {
            return b.tuner(by_name(kDevices, device, "device")).summary();
          },
          py::arg("device") = "cpu")
      // A device's agreed cost-model figures as plain lists (JSON: a membership change hands
      // them to the next group through its store), None before they were agreed; and seeding
      // a new group's tuner with them (every rank the same, before its first call).
      .def(
          "tuner_figures",
          [](RingzipBackend& b, const std::string& device) -> std::optional<py::dict> {
            const auto f = b.tuner(by_name(kDevices, device, "device")).figures();
            if (!f) return std::nullopt;
            py::dict d, codecs;
            const cost::Link& l = f->link;
            d["link"] = std::vector<double>{l.alpha, l.inv_bw, l.reduce, l.inv_host, l.call, l.launch, l.inv_window};
            d["codec_scale"] = f->codec_scale;
            for (const auto& [name, c] : f->codecs) codecs[py::str(name)] = std::vector<double>{c.encode, c.decode, c.feedback};
            d["codecs"] = codecs;
            return d;
          },
          py::arg("device"))
      .def(
          "seed_tuner",
          [](RingzipBackend& b, const std::string& device, const std::vector<double>& link, double codec_scale,
             const std::map<std::string, std::vector<double>>& codecs) {
            if (link.size() != 7) throw std::invalid_argument("ringzip: seed_tuner: link holds 7 figures");
            Tuner::Figures f;
            f.link = cost::Link{link[0], link[1], link[2], link[3], link[4], link[5], link[6]};
            f.codec_scale = codec_scale;
            for (const auto& [name, v] : codecs) {
              if (v.size() != 3) throw std::invalid_argument("ringzip: seed_tuner: a codec holds 3 speeds");
              f.codecs[name] = cost::CodecSpeed{v[0], v[1], v[2]};
            }
            b.tuner(by_name(kDevices, device, "device")).seed(f);
          },
          py::arg("device"), py::arg("link"), py::arg("codec_scale"), py::arg("codecs"))
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
      .def_property_readonly("timeout", [](const RingzipBackend& b) { return b.config().timeout; })
      .def_property_readonly("transport", &RingzipBackend::transport_name,
                             "what carries this rank's messages: tcp, gloo, shm, or shm+tcp (shared memory "
                             "inside the node, TCP between nodes)")
      .def_property_readonly("connections", &RingzipBackend::connections,
                             "per group rank: how many connections carry this rank's messages to it (0 for "
                             "this rank; a pool of TCP connections where more than 1)");
}

}  // namespace ringzip
