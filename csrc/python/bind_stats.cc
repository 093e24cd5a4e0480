// What a group reports, as bound structs read-only: each codec's counters (CodecStats) and each
// tuner's summary (Tuner::Summary). ringzip.stats() turns them into plain dicts by their bound
// names (python/ringzip/api.py documents the keys), so a field added to a struct here shows there.
// Rates are bound in the units users read (Gbit/s, GB/s); the structs hold seconds per byte.
#include <pybind11/stl.h>

#include "backend/compression.h"
#include "plan/tuner.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace ringzip {
namespace {

double per_second(double seconds_per_byte, double unit) { return seconds_per_byte > 0 ? unit / seconds_per_byte : 0.0; }

}  // namespace

void bind_stats(py::module_& m) {
  py::class_<CodecStats>(m, "CodecStats", "one codec's counters on this rank (ringzip.stats())")
      .def_readonly("calls", &CodecStats::calls)
      .def_readonly("bytes_in", &CodecStats::bytes_in)
      .def_readonly("bytes_wire", &CodecStats::bytes_sent)
      .def_readonly("bytes_dense_equiv", &CodecStats::bytes_dense_equiv)
      .def_readonly("codec_seconds", &CodecStats::codec_seconds)
      .def_readonly("total_seconds", &CodecStats::total_seconds)
      .def_readonly("overflows", &CodecStats::overflows)
      .def_readonly("bytes_intra_node", &CodecStats::bytes_intra_node);
  py::class_<cost::CodecSpeed>(m, "CodecSpeed", "one codec's agreed kernel speeds")
      .def_property_readonly("encode_gbyte_s", [](const cost::CodecSpeed& s) { return per_second(s.encode, 1e-9); })
      .def_property_readonly("decode_gbyte_s", [](const cost::CodecSpeed& s) { return per_second(s.decode, 1e-9); })
      .def_property_readonly("feedback_gbyte_s",
                             [](const cost::CodecSpeed& s) { return per_second(s.feedback, 1e-9); });
  using Params = Tuner::Summary::Params;
  py::class_<Params>(m, "TunerParams", "the agreed figures the tuner prices calls with")
      .def_property_readonly("alpha_s", [](const Params& p) { return p.link.alpha; })
      .def_property_readonly("call_s", [](const Params& p) { return p.link.call; })
      .def_property_readonly("launch_s", [](const Params& p) { return p.link.launch; })
      .def_property_readonly("link_gbit", [](const Params& p) { return per_second(p.link.inv_bw, 8e-9); })
      // per rank, the host's copies
      .def_property_readonly("host_gbit", [](const Params& p) { return per_second(p.link.inv_host, 8e-9); })
      // what one peer's connections carry where their windows bound them (0: unbounded)
      .def_property_readonly("window_gbit", [](const Params& p) { return per_second(p.link.inv_window, 8e-9); })
      .def_property_readonly("reduce_gbyte_s", [](const Params& p) { return per_second(p.link.reduce, 1e-9); })
      .def_readonly("codec_scale", &Params::codec_scale)
      .def_readonly("codecs", &Params::codecs);
  using Last = Tuner::Summary::Last;
  py::class_<Last>(m, "TunerLast", "the tuner's last call")
      .def_readonly("bytes", &Last::bytes)
      .def_readonly("choice", &Last::choice)
      .def_readonly("way", &Last::way)
      .def_readonly("tried", &Last::tried)  // run to measure the way (exploration, tour), not for its price
      .def_readonly("segment_elems", &Last::segment_elems)  // SRA's segment length (0: not SRA)
      .def_readonly("predicted_s", &Last::predicted)        // what the choice used: measured where it could
      .def_readonly("model_s", &Last::model);               // the model alone
  using Summary = Tuner::Summary;
  py::class_<Summary>(m, "TunerSummary", "stats()['auto']: what the tuner chose and from which figures")
      .def_readonly("calls", &Summary::calls)
      .def_readonly("refreshes", &Summary::refreshes)
      .def_readonly("explorations", &Summary::explorations)
      .def_readonly("tours", &Summary::tours)
      .def_readonly("changes", &Summary::changes)
      .def_readonly("refresh_s", &Summary::refresh_seconds)
      .def_readonly("probe_s", &Summary::probe_seconds)
      .def_readonly("codec_choices", &Summary::codec_choices)
      .def_readonly("algorithm_choices", &Summary::algorithm_choices)
      .def_readonly("way_choices", &Summary::way_choices)  // the codec or dense algorithm with the algorithm it ran
      .def_readonly("params", &Summary::params)
      .def_readonly("last", &Summary::last)
      .def_property_readonly("kernels", [](const Summary& s) { return s.device_kernels ? "device" : "host"; });
}

}  // namespace ringzip
