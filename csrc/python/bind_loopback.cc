// ringzip._C.loopback: runs one collective of the collective layer with n ranks as n threads
// over one in-process loopback hub (transport/loopback/) and returns every rank's result. The
// test fixture of every schedule (tests/collective/test_loopback_matrix.py); host memory and
// host_compute(); inputs are copied, never modified.
#include <ATen/ATen.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <thread>

#include "backend/tensors.h"
#include "collective/algorithms.h"
#include "plan/cost.h"
#include "plan/options.h"
#include "collective/compressed.h"
#include "collective/hierarchy/hierarchy.h"
#include "python/bindings.h"
#include "transport/loopback/loopback_transport.h"
#include "transport/loopback/recording.h"
#include "transport/routed.h"

namespace py = pybind11;

namespace ringzip {
namespace {

using Tensors = std::vector<at::Tensor>;

[[noreturn]] void bad(const std::string& msg) { throw std::invalid_argument("ringzip.loopback: " + msg); }

struct Run {
  std::string mode = "eager";
  uint32_t seq = 0;
  int64_t timeout_ms = 60000;
  std::optional<std::vector<int>> nodes;  // node of every rank: node-aware all-reduce / reduce-scatter
  // With nodes: every rank reaches the ranks of its node through a hub of the node's own
  // (RoutedTransport, as shared memory inside a node), the others through the group's hub.
  bool routed = false;
  // "host": the CPU compute; "device": the CPU kernels through the CUDA compute's branches
  // (device_branches_compute), the schedules' GPU code paths without a GPU.
  std::string compute = "host";
  // Where given: every rank's posts, waits and kernels, in order (transport/loopback/recording.h).
  std::vector<RankTrace>* trace = nullptr;
  // What the transports report as their round trip (LoopbackHub::round_trip), in seconds.
  double round_trip_s = 0;
};

Compute& compute_of(const Run& run) {
  if (run.compute == "host") return host_compute();
  if (run.compute == "device") return device_branches_compute();
  bad("compute must be 'host' or 'device', got '" + run.compute + "'");
}

// The node layout of a run with `nodes`, checked against the number of ranks.
std::optional<NodeLayout> layout_of(const Run& run, int n) {
  if (!run.nodes) return std::nullopt;
  if (static_cast<int>(run.nodes->size()) != n) bad("nodes must name the node of every rank");
  NodeLayout lay(*run.nodes);
  if (!lay.unsuitable().empty()) bad("nodes: " + lay.unsuitable());
  return lay;
}

// body(rank, comm) on one thread per rank; the failures of all ranks come back as one error.
void run_ranks(int n, const Run& run, const char* op, const std::function<void(int, Comm&)>& body) {
  Compute& compute = compute_of(run);  // a bad name raises here, not in every rank
  auto hub = std::make_shared<LoopbackHub>(n, parse_loopback_mode(run.mode));
  hub->round_trip = run.round_trip_s;
  std::optional<NodeLayout> lay;
  std::vector<std::shared_ptr<LoopbackHub>> node_hubs;
  if (run.routed && run.nodes) {
    lay = NodeLayout(*run.nodes);
    for (int i = 0; i < lay->nodes(); ++i)
      node_hubs.push_back(std::make_shared<LoopbackHub>(lay->members(i).size(), parse_loopback_mode(run.mode)));
  }
  std::vector<std::string> errors(n);
  if (run.trace) run.trace->assign(n, {});
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Transport> transport = make_loopback_transport(hub, r);
      if (lay) {
        const int node = lay->node(r);
        transport = std::make_unique<RoutedTransport>(
            std::move(transport), make_loopback_transport(node_hubs[node], lay->local_rank(r)), lay->members(node));
      }
      std::unique_ptr<Compute> recorded;
      if (run.trace) {
        auto log = std::make_shared<RankLog>((*run.trace)[r]);
        transport = make_recording_transport(std::move(transport), log);
        recorded = make_recording_compute(compute, log);
      }
      Transport& net = *transport;
      try {
        Comm c{net, recorded ? *recorded : compute, run.seq, std::chrono::steady_clock::now() + std::chrono::milliseconds(run.timeout_ms), op};
        body(r, c);
      } catch (const c10::Error& e) {
        errors[r] = e.what_without_backtrace();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      if (!errors[r].empty()) net.abort();  // wakes the others at once
    });
  }
  for (auto& t : threads) t.join();
  std::string msg;  // ranks with the same error are listed together
  for (int r = 0; r < n; ++r) {
    if (errors[r].empty() || std::find(errors.begin(), errors.begin() + r, errors[r]) != errors.begin() + r) continue;
    std::string who;
    for (int q = r; q < n; ++q)
      if (errors[q] == errors[r]) who += (who.empty() ? "" : ", ") + std::to_string(q);
    msg += "\n  rank" + std::string(who.find(',') == std::string::npos ? " " : "s ") + who + ": " + errors[r];
  }
  if (!msg.empty())
    throw std::runtime_error("ringzip.loopback " + std::string(op) + " (" + run.mode + ", " + std::to_string(n) +
                             " ranks) failed:" + msg);
}

Tensors copies(const Tensors& in, const char* what) {
  if (in.empty()) bad(std::string(what) + ": at least one rank");
  Tensors out;
  for (const auto& t : in) {
    if (!t.defined() || !t.device().is_cpu()) bad(std::string(what) + " must be CPU tensors");
    out.push_back(t.contiguous().view({-1}).clone());
  }
  return out;
}

RedOp parse_op(const std::string& s) {
  static const std::pair<const char*, RedOp> ops[] = {{"sum", RedOp::Sum},  {"prod", RedOp::Prod}, {"min", RedOp::Min},
                                                      {"max", RedOp::Max},  {"band", RedOp::BAnd}, {"bor", RedOp::BOr},
                                                      {"bxor", RedOp::BXor}};
  for (const auto& [name, op] : ops)
    if (s == name) return op;
  bad("unknown reduce op '" + s + "' (sum, prod, min, max, band, bor, bxor)");
}

AllreduceAlgo parse_dense(const std::string& s) { return parse_name(kDenseAlgorithms, s, "all-reduce algorithm"); }

Buf buf(const at::Tensor& t) {
  return Buf{t.data_ptr(), static_cast<size_t>(t.numel()), to_dtype(t.scalar_type(), "loopback")};
}

// Dense collectives; see the docstring in bind_loopback() for each op's inputs and outputs.
Tensors collective(const std::string& op, const Tensors& inputs, const std::string& algorithm,
                   const std::string& reduce_op, int root, std::optional<std::vector<size_t>> parts,
                   std::optional<std::vector<std::vector<int64_t>>> splits, const Run& run) {
  Tensors w = copies(inputs, "inputs");
  const int n = static_cast<int>(w.size());
  if (root < 0 || root >= n) bad("root " + std::to_string(root) + " out of range");
  const RedOp red = parse_op(reduce_op);
  const size_t esz = w[0].element_size();
  const std::optional<NodeLayout> lay = run.routed ? std::nullopt : layout_of(run, n);
  // "auto": the planner's rule where nothing is measured, at the size of the step it chooses for
  // (node-aware: one node's shard among the nodes).
  AllreduceAlgo algo = parse_dense(algorithm);
  if (algo == AllreduceAlgo::Auto)
    algo = lay ? rule_dense(w[0].nbytes() / lay->ranks_per_node(), lay->nodes()) : rule_dense(w[0].nbytes(), n);
  std::vector<size_t> begin = parts ? *parts : even_parts(w[0].numel(), n);
  if (begin.size() != static_cast<size_t>(n) + 1) bad("parts must have n + 1 offsets");
  Tensors out = w;
  std::function<void(int, Comm&)> body;
  if (lay && op != "allreduce" && op != "reduce_scatter")
    bad("nodes: only allreduce and reduce_scatter are node-aware");
  if (lay && op == "allreduce") {
    body = [&](int r, Comm& c) { hierarchical_allreduce(c, *lay, buf(w[r]), red, algo); };
  } else if (lay) {
    if (parts || w[0].numel() % n) bad("nodes: reduce_scatter needs n equal parts");
    body = [&](int r, Comm& c) { hierarchical_reduce_scatter(c, *lay, buf(w[r]), red); };
  } else if (op == "allreduce") {
    body = [&](int r, Comm& c) { allreduce(c, buf(w[r]), red, algo); };
  } else if (op == "reduce_scatter") {
    body = [&](int r, Comm& c) { ring_reduce_scatter(c, buf(w[r]), red, begin); };
  } else if (op == "allgather") {
    body = [&](int r, Comm& c) { ring_allgather(c, buf(w[r]), begin); };
  } else if (op == "broadcast") {
    body = [&](int r, Comm& c) { broadcast(c, buf(w[r]), root); };
  } else if (op == "reduce") {
    body = [&](int r, Comm& c) { reduce(c, buf(w[r]), red, root); };
  } else if (op == "gather") {  // root: every rank's input in rank order; others: nothing
    for (int r = 0; r < n; ++r) out[r] = w[r].new_zeros({r == root ? n * w[r].numel() : 0});
    out[root].narrow(0, root * w[root].numel(), w[root].numel()).copy_(w[root]);
    body = [&](int r, Comm& c) {
      std::vector<void*> slots;
      for (int i = 0; i < n; ++i) slots.push_back(static_cast<char*>(out[root].data_ptr()) + i * w[r].nbytes());
      gather(c, w[r].data_ptr(), w[r].nbytes(), slots, root);
    };
  } else if (op == "scatter") {  // root's input: n equal chunks; rank i gets chunk i
    const int64_t m = w[root].numel() / n;
    for (int r = 0; r < n; ++r) out[r] = r == root ? w[root].narrow(0, m * r, m).clone() : w[root].new_zeros({m});
    body = [&, m](int r, Comm& c) {  // m by value: the body runs after this block (run_ranks below)
      std::vector<const void*> chunks;
      for (int i = 0; i < n; ++i) chunks.push_back(static_cast<const char*>(w[root].data_ptr()) + i * m * esz);
      scatter(c, chunks, out[r].data_ptr(), m * esz, root);
    };
  } else if (op == "alltoall") {  // splits[r][i]: elements rank r sends to rank i; output in source order
    if (!splits || splits->size() != static_cast<size_t>(n)) bad("alltoall needs splits: n lists of n counts");
    const auto& sp = *splits;
    for (int r = 0; r < n; ++r) {
      int64_t got = 0, sent = 0;
      for (int i = 0; i < n; ++i) got += sp.at(i).at(r), sent += sp[r].at(i);
      if (sent != w[r].numel()) bad("splits of rank " + std::to_string(r) + " do not add up to its input");
      out[r] = w[r].new_zeros({got});
    }
    body = [&](int r, Comm& c) {
      std::vector<const void*> s(n);
      std::vector<void*> d(n);
      std::vector<size_t> sb(n), rb(n);
      size_t so = 0, ro = 0;
      for (int i = 0; i < n; ++i) {
        s[i] = static_cast<const char*>(w[r].data_ptr()) + so * esz;
        d[i] = static_cast<char*>(out[r].data_ptr()) + ro * esz;
        sb[i] = sp[r][i] * esz, rb[i] = sp[i][r] * esz;
        so += sp[r][i], ro += sp[i][r];
      }
      alltoall(c, s, sb, d, rb);
    };
  } else if (op == "barrier") {
    body = [&](int, Comm& c) { barrier(c); };
  } else {
    bad("unknown collective '" + op + "'");
  }
  py::gil_scoped_release nogil;
  run_ranks(n, run, op.c_str(), body);
  return out;
}

// Compressed all-reduce / reduce-scatter of float32 inputs; returns (outputs, new residuals).
std::pair<Tensors, std::optional<Tensors>> compressed(const std::string& op, const Tensors& inputs,
                                                      const std::string& codec, const std::string& algorithm,
                                                      uint64_t seed, uint32_t rng_seq, size_t topk_block,
                                                      int64_t bucket, const std::string& rounding,
                                                      std::optional<Tensors> residuals, size_t segment_elems,
                                                      size_t lag, const Run& run) {
  Tensors w = copies(inputs, "inputs");
  const int n = static_cast<int>(w.size());
  for (const auto& t : w)
    if (t.scalar_type() != at::kFloat || t.numel() != w[0].numel()) bad("inputs must be float32 of one size");
  if (rounding != "stochastic" && rounding != "nearest") bad("rounding must be stochastic or nearest");
  CompressedCall base;
  base.spec = codec::parse(codec, bucket, rounding == "stochastic");
  base.seed = seed;
  base.rng_seq = rng_seq;
  base.algo = resolve_compressed(base.spec, parse_compressed_algo(algorithm));
  base.values_rule = &rule_dense;
  base.topk_block = topk_block;
  base.segment_elems = segment_elems;
  base.lag = lag;
  std::optional<Tensors> res;
  if (residuals) {
    res = copies(*residuals, "residuals");
    if (static_cast<int>(res->size()) != n) bad("one residual per rank");
    for (const auto& t : *res)
      if (t.scalar_type() != at::kFloat || t.numel() != w[0].numel()) bad("residuals must match the inputs");
  }
  const bool all = op == "allreduce";
  if (!all && op != "reduce_scatter") bad("compressed op must be allreduce or reduce_scatter");
  const std::optional<NodeLayout> lay = run.routed ? std::nullopt : layout_of(run, n);
  if (lay && !all && w[0].numel() % n) bad("nodes: reduce_scatter needs n equal parts");
  py::gil_scoped_release nogil;
  run_ranks(n, run, op.c_str(), [&](int r, Comm& c) {
    CompressedCall call = base;
    call.residual = res ? (*res)[r].data_ptr<float>() : nullptr;
    float* x = w[r].data_ptr<float>();
    const size_t count = w[r].numel();
    if (!lay) return (all ? compressed_allreduce : compressed_reduce_scatter)(c, x, count, call);
    (all ? hierarchical_compressed_allreduce : hierarchical_compressed_reduce_scatter)(c, *lay, x, count, call);
  });
  return {w, res};
}

// Runs raw transport calls, one program per rank: (what, peer, tag, bytes) with what one of
// send (bytes of value tag & 0xff), recv, recv_any, start / end (group brackets), wait
// (peer: index of the request, in posting order), drop (destroys that request unwaited),
// sleep (peer: milliseconds), abort, close. Returns per rank the buffers of its receives in posting order and their sources.
using Step = std::tuple<std::string, int, uint32_t, size_t>;
std::vector<std::pair<Tensors, std::vector<int>>> script(const std::vector<std::vector<Step>>& programs,
                                                         const std::string& mode, int64_t timeout_ms) {
  const int n = static_cast<int>(programs.size());
  std::vector<std::pair<Tensors, std::vector<int>>> got(n);
  std::vector<std::vector<std::vector<uint8_t>>> bufs(n);
  for (int r = 0; r < n; ++r)
    for (const auto& [what, peer, tag, bytes] : programs[r])
      bufs[r].emplace_back(bytes, what == "send" ? tag & 0xff : 0);
  {
    py::gil_scoped_release nogil;
    run_ranks(n, Run{mode, 0, timeout_ms}, "script", [&](int r, Comm& c) {
      std::vector<std::unique_ptr<Request>> reqs;
      std::vector<size_t> recv_reqs;  // index in reqs of each receive
      for (size_t i = 0; i < programs[r].size(); ++i) {
        const auto& [what, peer, tag, bytes] = programs[r][i];
        uint8_t* p = bufs[r][i].data();
        if (what == "send") {
          reqs.push_back(c.net.isend(p, bytes, peer, tag));
        } else if (what == "recv" || what == "recv_any") {
          reqs.push_back(what == "recv" ? c.net.irecv(p, bytes, peer, tag) : c.net.irecv_any(p, bytes, tag));
          recv_reqs.push_back(reqs.size() - 1);
        } else if (what == "start") {
          c.net.group_start();
        } else if (what == "end") {
          c.net.group_end();
        } else if (what == "wait") {
          reqs.at(peer)->wait(std::chrono::milliseconds(timeout_ms));
        } else if (what == "drop") {
          reqs.at(peer).reset();
        } else if (what == "sleep") {
          std::this_thread::sleep_for(std::chrono::milliseconds(peer));
        } else if (what == "abort") {
          c.net.abort();
        } else if (what == "close") {
          c.net.close();
        } else {
          bad("unknown script step '" + what + "'");
        }
      }
      for (size_t i : recv_reqs) got[r].second.push_back(reqs[i] ? reqs[i]->source() : -1);
    });
  }
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < programs[r].size(); ++i)
      if (std::get<0>(programs[r][i]).rfind("recv", 0) == 0)
        got[r].first.push_back(at::tensor(at::ArrayRef<uint8_t>(bufs[r][i]), at::kByte));
  return got;
}

// Fills `out` (a ringzip._C.sim.Trace), if given, with every rank's events.
struct Recorder {
  py::object out;
  Run with(Run run) {
    if (!out.is_none()) {
      if (!py::isinstance<sim::Trace>(out)) bad("trace must be a ringzip._C.sim.Trace (or None)");
      run.trace = &out.cast<sim::Trace&>().ranks;
    }
    return run;
  }
};

}  // namespace

void bind_loopback(py::module_& m) {
  py::module_ l = m.def_submodule("loopback", "collectives with n ranks as threads over an in-process hub");
  using namespace py::literals;
  l.def(
      "collective",
      [](const std::string& op, const Tensors& inputs, const std::string& mode, const std::string& algorithm,
         const std::string& reduce_op, int root, uint32_t seq, std::optional<std::vector<size_t>> parts,
         std::optional<std::vector<std::vector<int64_t>>> splits, int64_t timeout_ms,
         std::optional<std::vector<int>> nodes, bool routed, const std::string& compute, py::object trace,
         double round_trip_s) {
        Recorder rec{trace};
        Run run{mode, seq, timeout_ms, nodes, routed, compute};
        run.round_trip_s = round_trip_s;
        auto out = collective(op, inputs, algorithm, reduce_op, root, parts, splits, rec.with(run));
        return out;
      },
      "op"_a, "inputs"_a, "mode"_a = "eager", "algorithm"_a = "auto", "reduce_op"_a = "sum", "root"_a = 0, "seq"_a = 0,
      "parts"_a = py::none(), "splits"_a = py::none(), "timeout_ms"_a = 60000, "nodes"_a = py::none(),
      "routed"_a = false, "compute"_a = "host", "trace"_a = py::none(), "round_trip_s"_a = 0.0,
      "Runs a dense collective with len(inputs) ranks (inputs[r]: rank r's tensor) in mode 'eager' (Gloo-like)\n"
      "or 'grouped' (NCCL-like) and returns each rank's result. op: allreduce (algorithm auto, ring, rd, direct,\n"
      "star, hd, tree), reduce_scatter / allgather (ring, in place, parts: n + 1 element offsets, default even), "
      "broadcast,\n"
      "reduce (non-roots keep their input), gather (root gets the inputs in rank order, others an empty tensor),\n"
      "scatter (root's input holds n equal chunks; others' inputs are ignored), alltoall (splits[r][i]: elements\n"
      "rank r sends to rank i; output in source order), barrier. seq: the collective's sequence number (tags;\n"
      "star's root is seq % n). nodes: the node of every rank -- allreduce and reduce_scatter (n equal parts) run\n"
      "node-aware (collective/hierarchy/; algorithm: the inter-node step's) unless routed=True, which instead\n"
      "runs the op flat with each node's ranks connected by a hub of their own (transport/routed.h). trace: a\n"
      "ringzip._C.sim.Trace that gets every rank's posts, waits and kernels in order (sim/trace.h). round_trip_s: what\n"
      "the transports report as their round trip (a long link's schedules, without its delay). Raises RuntimeError\n"
      "naming each failed rank (deadlocks, timeouts).");
  l.def("script", &script, "programs"_a, "mode"_a = "eager", "timeout_ms"_a = 60000,
        "Raw transport calls, one program per rank of (what, peer, tag, bytes) steps: send (bytes of value\n"
        "tag & 0xff), recv, recv_any, start / end (group brackets), wait / drop (peer: the request's index in\n"
        "posting order), sleep (peer: ms), abort, close. Returns per rank (received buffers, their sources).");
  l.def(
      "compressed",
      [](const std::string& op, const Tensors& inputs, const std::string& codec, const std::string& mode,
         const std::string& algorithm, uint64_t seed, uint32_t rng_seq, uint32_t seq, size_t topk_block, int64_t bucket,
         const std::string& rounding, std::optional<Tensors> residuals, int64_t timeout_ms,
         std::optional<std::vector<int>> nodes, bool routed, size_t segment_elems, size_t lag,
         const std::string& compute, py::object trace) {
        Recorder rec{trace};
        auto out = compressed(op, inputs, codec, algorithm, seed, rng_seq, topk_block, bucket, rounding, residuals,
                              segment_elems, lag, rec.with(Run{mode, seq, timeout_ms, nodes, routed, compute}));
        return out;
      },
      "op"_a, "inputs"_a, "codec"_a, "mode"_a = "eager", "algorithm"_a = "auto", "seed"_a = 0, "rng_seq"_a = 0,
      "seq"_a = 0, "topk_block"_a = size_t(codec::kTopkBlock), "bucket"_a = codec::kBucketSize,
      "rounding"_a = "stochastic", "residuals"_a = py::none(), "timeout_ms"_a = 60000, "nodes"_a = py::none(),
      "routed"_a = false, "segment_elems"_a = 0, "lag"_a = 1, "compute"_a = "host", "trace"_a = py::none(),
      "Compressed SUM of float32 inputs (op allreduce or reduce_scatter) with a codec string, algorithm\n"
      "(auto, ring, sra, sparse), seed, rng_seq (CompressedCall.rng_seq), bucket, rounding (stochastic or\n"
      "nearest), topk_block, optional error-feedback residuals (one per rank) and nodes (the node of every rank:\n"
      "node-aware, collective/hierarchy/; with routed=True flat over per-node hubs instead, as in collective()),\n"
      "segment_elems (SRA's segment length, CompressedCall.segment_elems; 0: the default), lag\n"
      "(CompressedCall.lag: segments SRA's reductions run behind its sends), trace (as in\n"
      "collective()).\n"
      "Returns (outputs, residuals).");
}

}  // namespace ringzip
