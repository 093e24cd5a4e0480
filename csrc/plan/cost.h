#pragma once
// The cost model behind algorithm="auto" and codec="auto" (docs/algorithms.md, "Choosing: the
// cost model"): the predicted time of one all-reduce (or reduce-scatter) of each algorithm and
// codec, from a few parameters measured per group and per process. Pure functions: the backend
// (plan/tuner.h) measures the parameters and makes every rank hold the same ones, so every
// rank's choice -- a function of those parameters, the call's size and n -- is the same.
#include <cstddef>
#include <optional>
#include <vector>

#include "codec/codec.h"
#include "collective/algorithms.h"
#include "collective/compressed.h"

namespace ringzip {

// The rules that choose where nothing was measured (a dense all-reduce inside another
// algorithm, the loopback fixture's "auto", CUDA's exact calls NCCL cannot run), measured on
// this project's 2-core machines: while the payload is tiny, messages cost more than bytes (the
// star's 2(n-1) messages beat the direct exchange's n(n-1) and recursive doubling's n log2 n);
// below 1 MiB recursive doubling's log2 n rounds beat the ring's 2(n-1).
AllreduceAlgo rule_dense(size_t bytes, int ranks);
// The compressed algorithm that runs for `spec` when `requested` is asked for: sparse codecs run
// the sparse algorithm, the others SRA unless the ring is named.
CompressedAlgo resolve_compressed(const codec::Spec& spec, CompressedAlgo requested);

}  // namespace ringzip

namespace ringzip::cost {

// The group's links, as one rank sees them. Bytes are limited twice: by each rank's own link
// (the busiest rank's bytes at inv_bw) and, where ranks share a host, by the host's copies
// through its transport (every rank's bytes, averaged over the ranks, at inv_host): on 2 cores
// running 4 ranks over loopback the star's root is no bottleneck, the cores are.
struct Link {
  double alpha = 50e-6;       // seconds per message on the critical path (latency, wake-ups)
  double inv_bw = 1.0 / 1e9;  // seconds per byte through one rank's link (each direction)
  double reduce = 1.0 / 4e9;  // seconds per byte of an element-wise float32 reduction (acc += x)
  double inv_host = 0;        // seconds per byte of the ranks' average traffic (shared host)
  // Seconds every call costs beyond its messages and bytes: hand-offs between threads, ranks on
  // shared cores waiting for each other and for a core (measured from small calls, tuner.cc).
  double call = 0;
  // Seconds each kernel costs beyond its bytes (a GPU's launch: a few microseconds; a host's
  // function call: tens of nanoseconds), measured per device (host_speed.cc). The direct
  // exchange and the star reduce n(n-1) slices in the ring's order: at 64 GPU ranks 16 ms of
  // launches for a 64 KiB call the ring finishes in 1.5 ms.
  double launch = 0;
  // Seconds per byte that one rank sends to one peer at a time where its connections' windows
  // bound it, not the link: a round trip per window (TCP keeps at most its buffers' worth in
  // flight), round trip / (bytes the peer's connections keep in flight); 0: no such bound. A
  // rank that streams to k peers at once has k windows: the ring (one peer) is held to one,
  // SRA and the direct exchange (n-1 peers) are not (docs/algorithms.md, "On a long link").
  double inv_window = 0;
};

// The most of a message's alpha that is the hosts' own cost (thread wake-ups, copies; 30 us to
// 1.7 ms measured on this project's machines, the latter under ASan): beyond it alpha is a
// link's delay, which messages sent in one round pay once, together (cost.cc latency_units).
// Half the long round trip at which a transport stripes: the tuner hands it 2 x alpha.
constexpr double kMessageCost = Transport::kLongRoundTrip / 2;

// One codec on this host, in seconds per byte of float32 input of each pass.
struct CodecSpeed {
  double encode = 1.0 / 2e9;
  double decode = 1.0 / 2e9;    // decode-accumulate (a plain decode costs about the same)
  double feedback = 1.0 / 1e9;  // encode with error feedback (encode_feedback / topk_feedback)
};

// A prediction: total = latency + max(wire, compute) + (1 - overlap) * min(wire, compute), where
// latency = messages * alpha + launches * launch + call: a kernel's launch is paid in turn on
// the busiest rank, whatever its bytes. messages and wire_bytes are the coefficients of alpha and
// inv_bw (a measured call teaches inv_bw, or the call cost where it is too small to: tuner.cc).
// wire = max(wire_bytes * max(inv_bw, inv_window / peers), host_bytes * inv_host); host_bound and
// window_bound say which.
struct Estimate {
  double total = 0, latency = 0, wire = 0, compute = 0;
  double messages = 0, wire_bytes = 0, host_bytes = 0, overlap = 0, launches = 0;
  double peers = 1;     // how many peers the busiest rank streams to at once (combine)
  double segments = 1;  // the pipelining segments a part is cut into (ring, reduce-scatter, tree, SRA)
  bool host_bound = false;
  bool window_bound = false;  // the windows of the connections, not the link's rate, bound the wire (Link::inv_window)
};

// Below this many bytes through the busiest link a call teaches no link rate (cost.cc), but
// the per-call cost (plan/tuner.cc).
constexpr double kLinkSampleBytes = 1 << 20;

// What a measured call of estimate e tells about the link: a sample of inv_bw (or of inv_host
// where the host's copies bound it), seconds per byte; none where the call says more about
// latency, buffers or cores than about the link. `seconds`: the call's time; `codec_seconds`:
// the time its codec kernels took (0 for exact calls); `compute`: the element-wise time to
// count against it (the measured codec time, or the model's reduction time).
struct LinkSample {
  bool host = false;
  double seconds_per_byte = 0;
};
std::optional<LinkSample> link_sample(const Estimate& e, double seconds, double codec_seconds, double compute);

// What a measured call teaches about the per-call cost c (Link::call): its time beyond the
// model's messages, bytes and element-wise work, or none. Only calls too small to teach the
// link (kLinkSampleBytes) whose bytes and element-wise work the model puts at a quarter of the
// way's `typical` time at most (the median of its recent calls at this size, this one
// included), so that a call slowed by other work or a retransmit timer is no likelier a sample
// than the calls around it (cost.cc).
std::optional<double> call_sample(const Estimate& e, double seconds, double typical, double compute, double call);

// The sum of the parts as above; host_bytes < 0: every rank sends as much as the busiest.
// `peers`: to how many peers at once the busiest rank streams its bytes (each adds a window).
Estimate combine(double messages, double wire_bytes, double compute, double overlap, const Link& l,
                 double host_bytes = -1, double launches = 0, double peers = 1);

// Exact all-reduce of `bytes` over n ranks with algorithm a (not Auto).
Estimate dense_allreduce(AllreduceAlgo a, size_t bytes, int n, const Link& l);
// Exact reduce-scatter (ring) of `bytes` (the whole buffer) over n ranks.
Estimate dense_reduce_scatter(size_t bytes, int n, const Link& l);
// Compressed all-reduce of `count` float32 elements with codec s and algorithm a (Ring, Sra or
// Sparse; Auto: the one resolve_compressed runs). `feedback`: error feedback on; top-k selects
// per block of `topk_block` elements.
Estimate compressed_allreduce(CompressedAlgo a, const codec::Spec& s, size_t count, int n, const Link& l,
                              const CodecSpeed& cs, bool feedback, size_t topk_block = codec::kTopkBlock);
// SRA's segment length (elements) for such a call: many segments hide the codec behind the
// link, but each costs every rank 2(n-1) messages, and over TCP each message costs thread
// wake-ups that take the codec's cores. So where the model finds the codec, not the link, the
// bound (compute above wire), SRA runs 4x longer segments (compressed/layout.h). Calls
// alternating between the two in one run, 4 ranks on 2 cores, 64 MiB: 0.82-0.93x the time over
// 10 Gbit/s, 0.86-0.94x over 3 Gbit/s, but 1.03-1.10x for q8 and q4 over 1 Gbit/s, where the
// link bounds them and they keep the short segments (docs/algorithms.md). `sra`: the model's
// estimate of the SRA call (compressed_allreduce / compressed_reduce_scatter).
size_t sra_segment_elems(const Estimate& sra);
// How many segments SRA's reductions run behind its sends (CompressedCall::lag) for a call the
// model estimates `sra`: 1 (the next step) unless alpha is mostly a long link's delay; there
// enough segments that their own time covers the one-way delay. Over ringzip's TCP transport,
// which knows its round trip and window (Link::inv_window set), alpha is that delay itself (half
// the kernel's round trip); over Gloo it is half of alpha (a probe round is a round trip there,
// its message waiting for the receiver's word). Covering half the delay over TCP made q4 64 MiB
// at a 100 ms round trip 1.17x slower (252 against 215 ms, q8 1.09x); a lag of one made every
// segment wait its own delay (10 steps of ~50 ms); a lag of all of them left the codec unhidden
// at 20 ms (q4 1.7x slower there).
size_t sra_lag(const Estimate& sra, const Link& l);
// SRA's first phase alone (compressed reduce-scatter).
Estimate compressed_reduce_scatter(const codec::Spec& s, size_t count, int n, const Link& l, const CodecSpeed& cs,
                                   bool feedback);

// The dense algorithms auto chooses among, in the order ties go: those that add every element's
// contributions in the ring's order (collective/dense/direct.cc), so that the choice changes
// the time of a call, never its bits. Recursive doubling, halving-doubling and the tree add in
// other orders: they run only when named.
const std::vector<AllreduceAlgo>& dense_candidates();
// The fastest dense algorithm predicted for `bytes` over n ranks (ties: the earlier candidate).
AllreduceAlgo best_dense(size_t bytes, int n, const Link& l);

// One call as the model sees it: `bytes` of float32 over n ranks (node-aware: one shard among
// the nodes), all-reduce or reduce-scatter, with or without error feedback, and the algorithms
// the options ask for (Auto: the model's).
struct Problem {
  size_t bytes = 0;
  int n = 1;
  bool reduce_scatter = false;
  bool feedback = false;
  CompressedAlgo algo = CompressedAlgo::Auto;
  AllreduceAlgo dense = AllreduceAlgo::Auto;
  size_t topk_block = codec::kTopkBlock;  // GroupOptions::topk_block (0: the whole tensor)
};
// The prediction for codec s (kind None: exact, with `dense`) and compressed algorithm a.
Estimate predict(const codec::Spec& s, CompressedAlgo a, AllreduceAlgo dense, const Problem& p, const Link& l,
                 const CodecSpeed& cs);
// One way to run a call: a candidate codec (index into the candidates) with an algorithm.
struct Option {
  size_t candidate = 0;
  CompressedAlgo algo = CompressedAlgo::Sra;  // compressed candidates
  AllreduceAlgo dense = AllreduceAlgo::Ring;  // the exact candidate
  Estimate est;
};
// codec="auto" (plan/cost_options.cc): every candidate (least lossy first, speeds[i] its
// codec's) with every algorithm it may run: the exact one with each dense algorithm (p.dense
// Auto) or the one asked for, a compressed one with SRA and, when the algorithm is auto, the
// compressed ring.
std::vector<Option> codec_options(const std::vector<codec::Spec>& candidates, const std::vector<CodecSpeed>& speeds,
                                  const Problem& p, const Link& l);
// The index of the fastest of `totals` (ordered least lossy first): a later one must be
// predicted 2 % faster than the best before it, so noise in the estimates trades no accuracy
// for nothing.
size_t pick(const std::vector<double>& totals);

// Lossiness order of codec="auto:<codec>" (none < bf16 = fp16 < q8 < q4 < q2 < q1; top-k and
// random-k are their own family); -1 for a codec that has no place in it.
int lossiness(const codec::Spec& s);
// The candidates of codec="auto:<named>", least lossy first, exact ("none") included first.
std::vector<codec::Spec> codec_candidates(const codec::Spec& named);

}  // namespace ringzip::cost
