// ringzip._C.sim: recorded calls (sim/trace.h; ringzip._C.loopback fills them) and their replay
// on a model of links and kernels (sim/replay.h), behind python/ringzip/bench/simulate.py.
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "python/bindings.h"
#include "sim/replay.h"

namespace py = pybind11;

namespace ringzip {
namespace {

// (kind, peer, amount, id, tag, lane)
using Tuple = std::tuple<std::string, int, uint64_t, int64_t, uint32_t, int>;

sim::Trace from_events(const std::vector<std::vector<py::tuple>>& ranks) {
  sim::Trace t;
  for (const auto& rank : ranks) {
    auto& out = t.ranks.emplace_back();
    for (const py::tuple& ev : rank) {
      if (ev.size() != 5 && ev.size() != 6) throw std::invalid_argument("an event is (kind, peer, amount, id, tag[, lane])");
      const std::string kind = ev[0].cast<std::string>();
      const sim::Kind k = sim::kind_of(kind);
      const int64_t id = ev[3].cast<int64_t>();
      const int lane = ev.size() == 6 ? ev[5].cast<int>() : 0;
      if ((k == sim::Kind::Send || k == sim::Kind::Recv || k == sim::Kind::Wait) && id < 0)
        throw std::invalid_argument("a " + kind + " needs a request id >= 0");
      if (lane < 0 || lane > 255) throw std::invalid_argument("lane must be 0-255");
      out.push_back({k, ev[1].cast<int>(), ev[4].cast<uint32_t>(), id, ev[2].cast<uint64_t>(), static_cast<uint8_t>(lane)});
    }
  }
  return t;
}

std::array<double, sim::kKinds> per_kind(const std::map<std::string, double>& by_name) {
  std::array<double, sim::kKinds> out{};
  for (const auto& [name, v] : by_name) out[static_cast<int>(sim::kind_of(name))] = v;
  return out;
}

}  // namespace

void bind_sim(py::module_& m) {
  auto s = m.def_submodule("sim", "recorded calls and their replay on modelled links");
  using namespace py::literals;
  py::class_<sim::Trace>(s, "Trace", "every rank's posts, waits and kernels of one recorded call, in order")
      .def(py::init<>())
      .def(py::init(&from_events), "ranks"_a, "from one list per rank of (kind, peer, amount, id, tag[, lane])")
      .def("__len__", [](const sim::Trace& t) { return t.ranks.size(); })
      .def("event_count", [](const sim::Trace& t) {
        size_t k = 0;
        for (const auto& r : t.ranks) k += r.size();
        return k;
      })
      .def(
          "events",
          [](const sim::Trace& t, int r) {
            std::vector<Tuple> out;
            for (const auto& e : t.ranks.at(r))
              out.emplace_back(sim::kind_name(e.kind), e.peer, e.amount, e.id, e.tag, e.lane);
            return out;
          },
          "rank"_a, "rank r's events as (kind, peer, amount, id, tag, lane)");
  s.def(
      "replay",
      [](const sim::Trace& t, std::vector<int> machine_of, double net_bytes_per_s, double net_latency_s,
         double intra_bytes_per_s, double intra_latency_s, int cores, const std::map<std::string, double>& per_unit,
         const std::map<std::string, double>& per_input, double launch, double scale, double send_overhead,
         double recv_overhead, double net_cpu_per_byte, double delay_s, double window_bytes, int pool, bool eager,
         double pair_bytes_per_s) {
        if (pool < 1) throw std::invalid_argument("pool must be >= 1 connection per peer");
        sim::Model m{std::move(machine_of), net_bytes_per_s, net_latency_s, intra_bytes_per_s, intra_latency_s, cores,
                     per_kind(per_unit), per_kind(per_input), launch, scale, send_overhead, recv_overhead,
                     net_cpu_per_byte, delay_s, window_bytes, pool, pair_bytes_per_s, eager};
        sim::Result r;
        {
          py::gil_scoped_release nogil;
          r = sim::replay(t, m);
        }
        py::dict d;
        d["time"] = r.time;
        d["finish"] = r.finish;
        d["wire_bytes"] = r.wire_bytes;
        d["compute"] = r.compute;
        return d;
      },
      "trace"_a, "machine_of"_a, "net_bytes_per_s"_a, "net_latency_s"_a, "intra_bytes_per_s"_a, "intra_latency_s"_a,
      "cores"_a = 0, "per_unit"_a = std::map<std::string, double>{}, "per_input"_a = std::map<std::string, double>{},
      "launch"_a = 0.0, "scale"_a = 1.0, "send_overhead"_a = 0.0, "recv_overhead"_a = 0.0,
      "net_cpu_per_byte"_a = 0.0, "delay_s"_a = 0.0, "window_bytes"_a = 0.0, "pool"_a = 1, "eager"_a = false,
      "pair_bytes_per_s"_a = 0.0,
      "Simulated seconds of the recorded call (sim/replay.h): a kernel of kind k over `amount` with m inputs\n"
      "takes amount * (per_unit[k] + m * per_input[k]) + launch; every amount times `scale`; each send\n"
      "costs its thread send_overhead seconds before its bytes move, each received message recv_overhead\n"
      "before its receiver sees it; where cores are counted, a byte between machines takes\n"
      "net_cpu_per_byte seconds of one; a message between machines also takes delay_s one way and at most\n"
      "pool x window_bytes per round trip (window_bytes 0: no window); eager: sends leave when posted;\n"
      "pair_bytes_per_s: a paced link's rate from one rank to one of another machine (0: unpaced).\n"
      "Returns\n"
      "{time, finish (per rank), wire_bytes (between machines), compute (busiest rank's kernel seconds)};\n"
      "RuntimeError when a rank waits for a message nobody sends.");
}

}  // namespace ringzip
