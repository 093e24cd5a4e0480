// ringzip._C.cost: the cost model's pure functions (plan/cost.h) and the host kernel
// speeds it is fed (plan/tuner.h), for tests and the benchmarks' predicted-vs-measured table.
// Parameters in seconds: alpha per message, inv_bw per byte of link, reduce per byte reduced;
// codec speeds as (encode, decode, feedback) seconds per input byte.
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "backend/backend.h"
#include "plan/cost.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace ringzip {
namespace {

using Speeds = std::tuple<double, double, double>;

py::dict as_dict(const cost::Estimate& e) {
  py::dict d;
  d["total"] = e.total;
  d["latency"] = e.latency;
  d["wire"] = e.wire;
  d["compute"] = e.compute;
  d["messages"] = e.messages;
  d["wire_bytes"] = e.wire_bytes;
  d["host_bytes"] = e.host_bytes;
  d["host_bound"] = e.host_bound;
  d["window_bound"] = e.window_bound;
  d["peers"] = e.peers;
  d["overlap"] = e.overlap;
  d["launches"] = e.launches;
  d["segments"] = e.segments;
  return d;
}

cost::CodecSpeed speed_of(const Speeds& s) { return {std::get<0>(s), std::get<1>(s), std::get<2>(s)}; }

// The backend's parse of a codec setting ("q4", "auto", "auto:topk:0.01"); ValueError if bad.
CompressionConfig parsed(const std::string& setting, int64_t bucket) {
  CompressionConfig cc;
  cc.codec = setting;
  cc.bucket_size = bucket;
  try {
    parse_codec(cc);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(std::string("ringzip: ") + e.what());
  }
  return cc;
}

constexpr Named<CallKind> kCallKinds[] = {{"allreduce", CallKind::Allreduce},
                                          {"reduce_scatter", CallKind::ReduceScatter},
                                          {"reduce", CallKind::Reduce},
                                          {"broadcast", CallKind::Broadcast},
                                          {"allgather", CallKind::Allgather}};
constexpr Named<c10d::ReduceOp::RedOpType> kOps[] = {
    {"sum", c10d::ReduceOp::SUM}, {"avg", c10d::ReduceOp::AVG},   {"product", c10d::ReduceOp::PRODUCT},
    {"min", c10d::ReduceOp::MIN}, {"max", c10d::ReduceOp::MAX},   {"band", c10d::ReduceOp::BAND},
    {"bor", c10d::ReduceOp::BOR}, {"bxor", c10d::ReduceOp::BXOR}, {"premul_sum", c10d::ReduceOp::PREMUL_SUM}};

}  // namespace

void bind_cost(py::module_& m) {
  auto c = m.def_submodule("cost", "the cost model behind algorithm='auto' and codec='auto'");
  c.def(
      "predict_dense",
      [](const std::string& algorithm, size_t bytes, int n, double alpha, double inv_bw, double reduce, double inv_host,
         double call, double launch, double inv_window) {
        return as_dict(cost::dense_allreduce(parse_algorithm(algorithm), bytes, n,
                                             {alpha, inv_bw, reduce, inv_host, call, launch, inv_window}));
      },
      py::arg("algorithm"), py::arg("bytes"), py::arg("n"), py::arg("alpha"), py::arg("inv_bw"),
      py::arg("reduce") = cost::Link{}.reduce, py::arg("inv_host") = 0.0, py::arg("call") = 0.0,
      py::arg("launch") = 0.0, py::arg("inv_window") = 0.0);
  c.def(
      "dense_candidates",
      [] {
        std::vector<std::string> out;
        for (AllreduceAlgo a : cost::dense_candidates()) out.push_back(algorithm_name(a));
        return out;
      },
      "the dense algorithms algorithm=\"auto\" chooses among, in the order ties go");
  c.def(
      "best_dense",
      [](size_t bytes, int n, double alpha, double inv_bw, double reduce, double inv_host, double launch,
         double inv_window) {
        return std::string(
            algorithm_name(cost::best_dense(bytes, n, {alpha, inv_bw, reduce, inv_host, 0, launch, inv_window})));
      },
      py::arg("bytes"), py::arg("n"), py::arg("alpha"), py::arg("inv_bw"), py::arg("reduce") = cost::Link{}.reduce,
      py::arg("inv_host") = 0.0, py::arg("launch") = 0.0, py::arg("inv_window") = 0.0);
  c.def(
      "predict",
      [](const std::string& codec, const std::string& algorithm, size_t bytes, int n, double alpha, double inv_bw,
         double reduce, const Speeds& speed, bool feedback, bool reduce_scatter, int64_t bucket, double launch,
         size_t topk_block, double inv_window) {
        const CompressionConfig cc = parsed(codec, bucket);
        const cost::Problem p{bytes,      n, reduce_scatter, feedback, parse_compressed_algo(algorithm), AllreduceAlgo::Auto,
                              topk_block};
        const cost::Link l{alpha, inv_bw, reduce, 0, 0, launch, inv_window};
        return as_dict(cost::predict(cc.spec(), p.algo, cost::best_dense(bytes, n, l), p, l, speed_of(speed)));
      },
      py::arg("codec"), py::arg("algorithm"), py::arg("bytes"), py::arg("n"), py::arg("alpha"), py::arg("inv_bw"),
      py::arg("reduce"), py::arg("speed"), py::arg("feedback") = false, py::arg("reduce_scatter") = false,
      py::arg("bucket") = codec::kBucketSize, py::arg("launch") = 0.0,
      py::arg("topk_block") = static_cast<size_t>(codec::kTopkBlock), py::arg("inv_window") = 0.0);
  c.def(
      "sra_segment_elems",
      [](const std::string& codec, size_t bytes, int n, double alpha, double inv_bw, const Speeds& speed, bool feedback,
         bool reduce_scatter) {
        const CompressionConfig cc = parsed(codec, codec::kBucketSize);
        const cost::Problem p{bytes, n, reduce_scatter, feedback, CompressedAlgo::Sra, AllreduceAlgo::Ring};
        return cost::sra_segment_elems(
            cost::predict(cc.spec(), CompressedAlgo::Sra, AllreduceAlgo::Ring, p, {alpha, inv_bw}, speed_of(speed)));
      },
      py::arg("codec"), py::arg("bytes"), py::arg("n"), py::arg("alpha"), py::arg("inv_bw"), py::arg("speed"),
      py::arg("feedback") = false, py::arg("reduce_scatter") = false,
      "SRA's segment length (elements) its plan sets for such a call (cost.h)");
  c.def(
      "sra_lag",
      [](const std::string& codec, size_t bytes, int n, double alpha, double inv_bw, const Speeds& speed,
         double inv_window) {
        const CompressionConfig cc = parsed(codec, codec::kBucketSize);
        const cost::Problem p{bytes, n, false, false, CompressedAlgo::Sra, AllreduceAlgo::Ring};
        cost::Link l{alpha, inv_bw};
        l.inv_window = inv_window;
        return cost::sra_lag(cost::predict(cc.spec(), CompressedAlgo::Sra, AllreduceAlgo::Ring, p, l, speed_of(speed)),
                             l);
      },
      py::arg("codec"), py::arg("bytes"), py::arg("n"), py::arg("alpha"), py::arg("inv_bw"), py::arg("speed"),
      py::arg("inv_window") = 0.0,
      "The segments SRA's reductions run behind its sends for such a call (cost.h sra_lag); inv_window: the\n"
      "transport's window term (Link::inv_window), which says alpha is the one-way delay itself");
  // What a measured exact call teaches about the link (tuner.cc learn; cost.h link_sample):
  // ("link" or "host", seconds per byte), or None.
  c.def(
      "link_sample_dense",
      [](const std::string& algorithm, size_t bytes, int n, double alpha, double inv_bw, double inv_host,
         double seconds, double inv_window) -> std::optional<std::pair<std::string, double>> {
        const cost::Link l{alpha, inv_bw, cost::Link{}.reduce, inv_host, 0, 0, inv_window};
        const cost::Estimate e = cost::dense_allreduce(parse_algorithm(algorithm), bytes, n, l);
        const auto w = cost::link_sample(e, seconds, 0, e.compute);
        if (!w) return std::nullopt;
        return std::make_pair(std::string(w->host ? "host" : "link"), w->seconds_per_byte);
      },
      py::arg("algorithm"), py::arg("bytes"), py::arg("n"), py::arg("alpha"), py::arg("inv_bw"), py::arg("inv_host"),
      py::arg("seconds"), py::arg("inv_window") = 0.0);
  // What a measured exact call teaches about the per-call cost (cost.h call_sample): seconds or None.
  c.def(
      "call_sample_dense",
      [](const std::string& algorithm, size_t bytes, int n, double alpha, double inv_bw, double call, double seconds,
         double typical) -> std::optional<double> {
        const cost::Estimate e = cost::dense_allreduce(parse_algorithm(algorithm), bytes, n,
                                                       {alpha, inv_bw, cost::Link{}.reduce, 0.0, call});
        return cost::call_sample(e, seconds, typical, e.compute, call);
      },
      py::arg("algorithm"), py::arg("bytes"), py::arg("n"), py::arg("alpha"), py::arg("inv_bw"), py::arg("call"),
      py::arg("seconds"), py::arg("typical"));
  c.def(
      "candidates",
      [](const std::string& setting) {
        std::vector<std::string> out;
        for (const auto& cand : parsed(setting, codec::kBucketSize).candidates) out.push_back(cand.name);
        return out;
      },
      py::arg("codec"), "the candidates of a codec='auto...' setting, exact first; [] for a fixed codec");
  // The choice codec='auto' makes given these (agreed) parameters; speeds: per candidate name,
  // missing ones measured on this host. Returns (codec, compressed algorithm, dense algorithm,
  // {candidate: predicted seconds}).
  c.def(
      "choose_codec",
      [](const std::string& setting, size_t bytes, int n, double alpha, double inv_bw, double reduce,
         const std::map<std::string, Speeds>& speeds, bool feedback, bool reduce_scatter) {
        const CompressionConfig cc = parsed(setting, codec::kBucketSize);
        std::vector<codec::Spec> specs;
        std::vector<cost::CodecSpeed> cs;
        for (const auto& cand : cc.candidates) {
          specs.push_back(cand.spec);
          auto it = speeds.find(cand.name);
          cs.push_back(it != speeds.end()                    ? speed_of(it->second)
                       : cand.spec.kind == codec::Kind::None ? cost::CodecSpeed{}
                                                             : host_codec_speed(cand.spec));
        }
        const cost::Problem p{bytes, n, reduce_scatter, feedback, CompressedAlgo::Auto, AllreduceAlgo::Auto};
        const std::vector<cost::Option> opts = cost::codec_options(specs, cs, p, {alpha, inv_bw, reduce});
        std::vector<double> totals;
        std::map<std::string, double> predicted;
        for (const cost::Option& o : opts) {
          totals.push_back(o.est.total);
          const std::string& name = cc.candidates[o.candidate].name;
          if (!predicted.count(name) || o.est.total < predicted[name]) predicted[name] = o.est.total;
        }
        const cost::Option& best = opts.at(cost::pick(totals));
        return std::make_tuple(cc.candidates.at(best.candidate).name, std::string(compressed_algo_name(best.algo)),
                               std::string(algorithm_name(best.dense)), predicted);
      },
      py::arg("codec"), py::arg("bytes"), py::arg("n"), py::arg("alpha"), py::arg("inv_bw"), py::arg("reduce"),
      py::arg("speeds") = std::map<std::string, Speeds>{}, py::arg("feedback") = false,
      py::arg("reduce_scatter") = false);
  c.def(
      "host_codec_speed",
      [](const std::string& codec, int64_t bucket) {
        const cost::CodecSpeed s = host_codec_speed(parsed(codec, bucket).spec());
        return std::make_tuple(s.encode, s.decode, s.feedback);
      },
      py::arg("codec"), py::arg("bucket") = codec::kBucketSize,
      "(encode, decode, feedback) seconds per input byte, cached");
  c.def("host_reduce_speed", &host_reduce_speed, "seconds per byte of a float32 sum, cached");
  // What the planner decides when a call is issued, for a made-up call on a group of these nodes:
  // every branch of plan(), the CUDA ones too, runs on any machine.
  c.def(
      "plan",
      [](const GroupOptions& o, const std::vector<int>& node_of, const std::string& kind, const std::string& device,
         at::ScalarType dtype, const std::string& op, int64_t numel, bool may_compress) {
        Planner planner(static_cast<int>(node_of.size()));
        planner.set_layout(NodeLayout(node_of));
        try {
          planner.configure(parse(o));
        } catch (const std::invalid_argument& e) {
          throw py::value_error(std::string("ringzip.Options: ") + e.what());
        }
        Call call;
        call.kind = by_name(kCallKinds, kind, "call kind");
        call.device = by_name(kDevices, device, "device");
        call.dtype = dtype;
        call.op = by_name(kOps, op, "reduce op");
        call.numel = numel;
        call.bytes = static_cast<size_t>(numel) * c10::elementSize(call.dtype);
        call.may_compress = may_compress;
        const Plan p = planner.plan(call);
        py::dict d;
        d["compressed"] = p.compressed;
        d["codec"] = p.compressed ? p.cc.codec : std::string("none");
        d["dense"] = algorithm_name(p.dense);
        d["compressed_algorithm"] = compressed_algo_name(p.cc.algorithm);
        d["nccl"] = p.nccl;
        d["node_aware"] = p.nodes != nullptr;
        return d;
      },
      py::arg("options"), py::arg("node_of"), py::arg("kind"), py::arg("device"), py::arg("dtype"), py::arg("op"),
      py::arg("numel"), py::arg("may_compress") = true,
      "Planner::plan of one call: compressed, codec, dense, compressed_algorithm, nccl, node_aware");
}

}  // namespace ringzip
