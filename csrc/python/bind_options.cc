// ringzip._C.Options: the C++ GroupOptions struct (plan/options.h) bound field by field, in its order,
// each with the documentation ringzip.Options shows (python/ringzip/options.py builds the user's
// class from these fields, their defaults and these texts).
#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include "plan/options.h"
#include "python/bindings.h"

namespace py = pybind11;

namespace ringzip {

void bind_options(py::module_& m) {
  py::class_<GroupOptions>(m, "Options", "a group's settings as C++ holds them (ringzip.Options wraps them)")
      .def(py::init<>())
      .def_readwrite("timeout", &GroupOptions::timeout,
                     "default timeout of every collective (``None``: the group's timeout).")
      .def_readwrite(
          "algorithm", &GroupOptions::algorithm,
          "``auto`` (the cost model's choice for the call's size and the group's measured link and codec "
          "speeds; exact calls choose among ``ring``, ``direct`` and ``star``, which add in one order, so "
          "results repeat bit for bit run to run), ``ring``, ``rd`` (recursive doubling, dense only), "
          "``direct`` (one-round exchange, dense only), ``star`` (reduce at a rotating root and send back, "
          "fewest messages: the tiny-message default, dense only), ``hd`` (recursive halving-doubling, dense "
          "only), ``tree`` (pipelined binary tree, dense only), ``sra`` (scatter-reduce-allgather, compressed "
          "only) or ``sparse``. A name of one family leaves the other on ``auto``.")
      .def_readwrite("codec", &GroupOptions::codec,
                     "``none`` (exact, the default), ``fp16``, ``bf16``, ``q8``, ``q4``, ``q2``, ``q1``, ``topk:R`` or "
                     "``randomk:R`` (R: fraction kept, e.g. ``topk:0.01``), or ``auto:CODEC``: per call the fastest of "
                     "exact and every codec no lossier than CODEC (none < bf16/fp16 < q8 < q4 < q2 < q1; "
                     "``auto:topk:R`` chooses between exact and ``topk:R``), as the cost model predicts for the call's "
                     "size and the group's measured link; ``auto`` means ``auto:q4``. ``ringzip.stats()`` files each "
                     "call under the codec that ran and counts the choices under ``\"auto\"`` (docs/algorithms.md, "
                     "\"Choosing: the cost model\").")
      .def_readwrite("bucket_size", &GroupOptions::bucket_size, "elements per scale of the q-codecs.")
      .def_readwrite("rounding", &GroupOptions::rounding,
                     "``stochastic`` (unbiased, default) or ``nearest`` for the q-codecs.")
      .def_readwrite("min_numel", &GroupOptions::min_numel, "tensors with fewer elements stay exact.")
      .def_readwrite("topk_block", &GroupOptions::topk_block,
                     "``topk:R`` keeps the R-fraction largest of each block of this many elements (default 2**20), so "
                     "each block's pairs leave while the next is selected; 0: of the whole tensor (nothing is sent "
                     "before all of it is selected). At most 4096 blocks per call: larger tensors get proportionally "
                     "larger blocks.")
      .def_readwrite("error_feedback", &GroupOptions::error_feedback,
                     "keep the compression error and add it to the next call's input; ``None``: on for biased "
                     "codecs (topk, randomk, q1, nearest rounding).")
      .def_readwrite("seed", &GroupOptions::seed,
                     "seed of stochastic rounding and random-k selection (same on all ranks).")
      .def_readwrite("transport", &GroupOptions::transport,
                     "``auto``: CPU tensors between ranks of one node through shared memory (TCP over loopback when "
                     "it cannot be set up, with a warning), all other CPU traffic through ringzip's own TCP "
                     "transport, CUDA tensors through NCCL when this build has CUDA. ``shm``: the same, but a node "
                     "whose shared memory cannot be set up is an error. ``tcp``: all traffic through ringzip's TCP "
                     "(CUDA tensors host-staged). ``gloo``: all traffic through torch's Gloo (CUDA tensors "
                     "host-staged). Fixed when the group is created.")
      .def_readwrite("connections", &GroupOptions::connections,
                     "TCP connections to each peer (CPU traffic between machines). A collective's message of at "
                     "least 1 MiB travels striped over a peer's connections, so that a long link is not held to "
                     "one connection's send buffer per round trip. 0, the default: each pair of ranks chooses when "
                     "the group is created, from the round trip of its first connection's handshake and the "
                     "link's rate (``link_gbit``): from 5 ms on, as many connections as the pair's share of that "
                     "rate keeps in flight over the round trip (their send buffers' payload); one below 5 ms or "
                     "where the rate is not given (the Gloo transport keeps 1). Rank 0's value holds for the "
                     "whole group (fixed at creation); ``backend.connections`` says what each peer got.")
      .def_readwrite("link_gbit", &GroupOptions::link_gbit,
                     "The rate of each machine's link to the others, Gbit/s per direction, where you know it (0, "
                     "the default: not known). ringzip's TCP connections are then paced so that a rank streaming "
                     "to all its peers at once sends 0.95 of it in all (each peer's connections together "
                     "0.95 x link_gbit / (n-1)): the n-1 streams that converge on every machine in SRA, the "
                     "direct exchange and the compressed calls then fit its link instead of overflowing its "
                     "queue, which over a long link costs each stream a round trip to recover (at RTT 100 ms and "
                     "1 Gbit/s: exact 64 MiB 0.72-0.78x the time, q8 0.42-0.59x). Streams to one peer (the ring) are held to "
                     "that share, which the cost model prices. Assumes one rank per machine on the link; the "
                     "Gloo transport ignores it.")
      .def_readwrite("hierarchy", &GroupOptions::hierarchy,
                     "``auto`` (node-aware when every node holds the same number of ranks, more than one node and more "
                     "than one rank per node), ``node`` (the same, with a warning and flat calls when the layout does "
                     "not allow it) or ``flat`` (every rank alike). Node-aware all-reduce and reduce-scatter are exact "
                     "inside a node and use the codec only between nodes (docs/algorithms.md).")
      .def_readwrite(
          "check", &GroupOptions::check,
          "mismatch check of calls across ranks (docs/reliability.md). ``auto`` (default): every call's tags "
          "carry a hash of the call (type, dtype, sizes, op, root, codec), so mismatched calls exchange "
          "nothing; a call stalled for 250 ms is diagnosed through the store and every rank raises the same "
          "message naming both calls (the group is then unusable). No extra message per call. ``on``: in "
          "addition the ranks exchange the 64-byte fingerprints before each call, which finds a mismatch "
          "before anything is posted and keeps the group usable, at one small-message round per call (use it "
          "while developing). ``off``: nothing (a mismatch may time out or abort inside Gloo).");
  m.def(
      "check_options",
      [](const GroupOptions& o) {
        try {
          parse(o);
        } catch (const std::invalid_argument& e) {
          throw py::value_error(std::string("ringzip.Options: ") + e.what());
        }
      },
      py::arg("options"), "ValueError naming the first bad field, else nothing");
  // What share of Options.link_gbit a rank's streams are paced to (the simulator replays it).
  m.attr("pace_share") = kPaceShare;
}

}  // namespace ringzip
