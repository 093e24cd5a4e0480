// The cost model (cost.h): each algorithm's messages, bytes through the busiest rank's link and
// element-wise work, read off its schedule (docs/algorithms.md has the steps and bytes of each).
#include "plan/cost.h"

#include <algorithm>
#include <cmath>

#include "collective/compressed/layout.h"

namespace ringzip::cost {
namespace {

// The latency term counts both what is sequential (rounds: a rank waits for its peer's message
// of the round before) and what is not (a rank's sends: on a host that runs several ranks per
// core every message costs a thread wake-up, so the star's 2(n-1) messages in all beat
// recursive doubling's n log2 n although both take two rounds for n = 4). A probe round -- one
// send and one receive per rank -- costs one alpha.
// Of a long link's alpha only the hosts' part h comes with every send: the rest is the link's
// delay, paid once per round by the messages that travel in it together. h is all of alpha up
// to kMessageCost, and kMessageCost^2 / alpha beyond (continuous there; tens of microseconds at
// a long link's alpha, what a message costs these hosts). At a 100 ms round trip the ring's
// 2(n-1) rounds cost most of a second, SRA's two a fifth of one.
double latency_units(const Link& l, double rounds, double sends_per_rank) {
  const double hosts = 0.5 * (rounds + sends_per_rank);
  if (l.alpha <= kMessageCost) return hosts;
  const double h = kMessageCost * kMessageCost / l.alpha;
  return (h * hosts + (l.alpha - h) * rounds) / l.alpha;
}

int floor_log2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

double ceil_div(double a, double b) { return std::ceil(a / b); }

}  // namespace

// The link's rate shows in a call when a good part of it went neither to codec kernels nor to
// message latency: measured, not predicted, so that a link that slowed down under a codec the
// model thought wire-light still shows (the tuner offers the least of three samples: noise only
// ever adds time).
// Small calls say more about latency and buffers than about the link's rate: a shaper's burst or
// a switch's buffer passes a few hundred KiB at once (over 1 Gbit/s with 4 ranks, 64 KiB calls
// -- the star's 384 KiB through its root -- taught a 3 Gbit/s link within 20 calls, and a grid
// run ended at 5-8 Gbit/s), so only calls that move 1 MiB through the busiest link teach it.
// Except where the host's copies bound the call (shared memory) and the model gives them little
// of it: there the rest of a compressed call is ranks waiting for cores and for each other, not
// bytes; such a link does not change rate under a codec either. (On one host the tuner takes no
// rate from compressed calls at all: plan/tuner.cc learn, docs/algorithms.md "One host".)
std::optional<LinkSample> link_sample(const Estimate& e, double seconds, double codec_seconds, double compute) {
  const bool host_light = e.host_bound && e.wire < 0.25 * e.total;
  // A call the windows bound says how fast a window crosses, which the transport's round trip
  // and buffers tell already, not the link's rate.
  if (e.wire_bytes < kLinkSampleBytes || host_light || e.window_bound ||
      seconds - codec_seconds - e.latency < 0.25 * seconds)
    return {};
  const double R = seconds - e.latency, keep = 1 - e.overlap, C = compute;
  double W = R - keep * C;                          // wire-bound: the codec's unhidden part adds to the wire
  if (W < C) W = keep > 0.05 ? (R - C) / keep : 0;  // codec-bound: the wire's unhidden part adds
  if (W <= 0) return {};
  return LinkSample{e.host_bound, W / (e.host_bound ? e.host_bytes : e.wire_bytes)};
}

// Judged by this call's own time, the rule let in the calls that a lost packet's retransmit
// timer (~200 ms) or a burst of other work had slowed: they always leave the bytes under a
// quarter of their time, while at 64 KiB over 1 Gbit/s an ordinary call does not, so c was
// learned from those calls alone (90-160 ms in 3 of 12 groups of 64 KiB calls, 3 ranks, where
// the calls took 1-2 ms). Judged by the way's median, the ordinary calls decide whether the
// way teaches c, and its samples' median (tuner.cc) leaves the slow ones out.
std::optional<double> call_sample(const Estimate& e, double seconds, double typical, double compute, double call) {
  if (e.wire_bytes >= kLinkSampleBytes || e.wire + compute > 0.25 * typical) return {};
  return std::max(0.0, seconds - (e.total - call));
}

Estimate combine(double messages, double wire_bytes, double compute, double overlap, const Link& l, double host_bytes,
                 double launches, double peers) {
  Estimate e;
  e.messages = messages;
  e.launches = launches;
  e.wire_bytes = wire_bytes;
  e.host_bytes = host_bytes < 0 ? wire_bytes : host_bytes;
  e.overlap = overlap;
  e.peers = peers;
  e.latency = messages * l.alpha + launches * l.launch + l.call;
  const double inv_window = l.inv_window / std::max(1.0, peers);
  e.window_bound = inv_window > l.inv_bw;
  e.wire = wire_bytes * std::max(l.inv_bw, inv_window);
  e.host_bound = e.host_bytes * l.inv_host > e.wire;
  if (e.host_bound) e.wire = e.host_bytes * l.inv_host;
  e.compute = compute;
  e.total = e.latency + std::max(e.wire, compute) + (1.0 - overlap) * std::min(e.wire, compute);
  return e;
}

namespace {
Estimate segmented(Estimate e, double segments) {
  e.segments = segments;
  return e;
}
}  // namespace

Estimate dense_allreduce(AllreduceAlgo a, size_t bytes, int n, const Link& l) {
  if (n <= 1 || bytes == 0) return {};
  const double S = static_cast<double>(bytes);
  const int K = floor_log2(n), p = 1 << K;
  const double fold = n != p ? 1.0 : 0.0;
  switch (a) {
    // The root (star) or every rank (direct) reduces each of n parts through n-1 slots, then
    // copies n+1 slices: n^2 + 1 kernels.
    case AllreduceAlgo::Star:  // the root receives n-1 buffers, reduces, sends n-1
      return combine(latency_units(l, 2, 2.0 * (n - 1) / n), 2.0 * (n - 1) * S, (n - 1) * S * l.reduce, 0, l,
                     2.0 * (n - 1) / n * S, static_cast<double>(n) * n + 1, n - 1);
    case AllreduceAlgo::Sra:  // each part to its owner, which reduces n-1 slots and sends the sum to all
      return combine(latency_units(l, 2, 2.0 * (n - 1)), 2.0 * (n - 1) / n * S, (n - 1.0) / n * S * l.reduce, 0, l,
                     -1, n - 1, n - 1);
    case AllreduceAlgo::Direct:  // one round, every rank sends its buffer to every other
      return combine(latency_units(l, 1, n - 1), (n - 1) * S, (n - 1) * S * l.reduce, 0, l, -1,
                     static_cast<double>(n) * n + 1, n - 1);
    // Recursive doubling and halving-doubling: a reduction and a copy per level (a partner's
    // fold-in reduction takes its first level's copy's place).
    case AllreduceAlgo::RecursiveDoubling:  // the n - p folded ranks send twice, their partners once more
      return combine(latency_units(l, K + 2 * fold, K + 2 * fold), (K + 2 * fold) * S, (K + fold) * S * l.reduce, 0, l,
                     (K + 2.0 * (n - p) / n) * S, 2 * K);
    case AllreduceAlgo::HalvingDoubling:
      return combine(latency_units(l, 2 * K + 2 * fold, 2 * K + 2 * fold), 2.0 * (p - 1) / p * S + 2 * fold * S,
                     ((p - 1.0) / p + fold) * S * l.reduce, 0, l, (2.0 * (p - 1) + 2.0 * (n - p)) / n * S, 2 * K);
    case AllreduceAlgo::Tree: {  // collective/dense/tree.cc: segments of S/8 clamped to 256 KiB..1 MiB
      const int D = floor_log2(n);
      const double seg = std::clamp(S / 8, 256.0 * 1024, 1024.0 * 1024), k = std::max(1.0, ceil_div(S, seg));
      const double s = S / k, steps = 2 * D + k;
      // Per step an inner node sends a segment up and one to each child and reduces two.
      const double fan = n >= 5 ? 3 : (n >= 3 ? 2 : 1);
      return segmented(combine(latency_units(l, steps, 2.0 * (n - 1) * k / n), steps * fan * s,
                               steps * std::min(2.0, fan) * s * l.reduce, 0, l, 2.0 * (n - 1) / n * S,
                               steps * std::min(2.0, fan), fan),
                       k);
    }
    default: {  // ring: 2(n-1) steps of one part, in segments (collective/dense/ring.cc)
      const double part = ceil_div(S, n);
      const double seg = std::clamp(part / 4, 1024.0 * 1024, 4096.0 * 1024), segs = std::max(1.0, ceil_div(part, seg));
      // Segments stream through the ring: a segment is reduced while the next one travels.
      // One reduction per step and segment; the gather lands in place.
      return segmented(combine(latency_units(l, 2 * (n - 1) + segs - 1, 2 * (n - 1) * segs), 2.0 * (n - 1) / n * S,
                               (n - 1.0) / n * S * l.reduce, 1.0 - 1.0 / segs, l, -1, (n - 1) * segs),
                       segs);
    }
  }
}

Estimate dense_reduce_scatter(size_t bytes, int n, const Link& l) {
  if (n <= 1 || bytes == 0) return {};
  const double S = static_cast<double>(bytes), part = ceil_div(S, n);
  const double seg = std::clamp(part / 4, 1024.0 * 1024, 4096.0 * 1024), segs = std::max(1.0, ceil_div(part, seg));
  return segmented(combine(latency_units(l, (n - 1) + segs - 1, (n - 1) * segs), (n - 1.0) / n * S,
                           (n - 1.0) / n * S * l.reduce, 1.0 - 1.0 / segs, l, -1, (n - 1) * segs),
                   segs);
}

namespace {

// SRA (collective/compressed/sra.cc): parts of ~count/n elements in segments of 2 MiB of input
// (layout.h), one step per segment; the codec of one segment runs while others travel. Priced
// so also where it runs longer segments (sra_segment_elems): the model has no term for what a
// message costs the codec's cores, which is why those are faster there; the calibration's
// measured price takes over once the way ran.
Estimate sra(const codec::Spec& s, size_t count, int n, const Link& l, const CodecSpeed& cs, bool feedback,
             bool gather) {
  const double part = ceil_div(static_cast<double>(count), n), P = 4 * part;
  const double bucket = std::max<double>(1, static_cast<double>(s.bucket));
  const double seg = std::max(bucket, std::floor(compressed::kSegmentElems / bucket) * bucket);
  const double segs = std::max(1.0, ceil_div(part, seg));
  const double enc = static_cast<double>(codec::encoded_bytes(s, static_cast<int64_t>(part)));
  const double phases = gather ? 2 : 1;
  const double send_pass = feedback ? cs.feedback : cs.encode;
  // Encode n-1 parts toward their owners, decode-accumulate the n-1 received; with the gather,
  // encode and decode the own part's sum and decode the n-1 others.
  double compute = P * (n - 1) * (send_pass + cs.decode);
  if (gather) compute += P * (cs.encode + cs.decode + (n - 1) * cs.decode);
  // Per segment: n-1 encodes, n-1 decodes and the own part's; with the gather the own part's
  // encode and the n-1 decodes of the others' (one pass each per message).
  const double launches = segs * (phases * (n - 1) + 1);
  // One step per segment, each waiting for what the step before sent; with a lag of L segments
  // they wait for the link's delay once per L (sra_lag).
  auto with_rounds = [&](double rounds) {
    return segmented(combine(latency_units(l, rounds, phases * (n - 1) * segs), phases * (n - 1) * enc, compute,
                             (segs - 1) / (segs + 1), l, -1, launches, n - 1),
                     segs);
  };
  const Estimate stepwise = with_rounds(segs + phases);
  const double lag = static_cast<double>(sra_lag(stepwise, l));
  return lag > 1 ? with_rounds(phases + std::ceil(segs / lag)) : stepwise;
}

// Compressed ring (collective/compressed/ring.cc): n-1 hops re-encoding the partial sum, then
// an allgather of encoded parts; each hop waits for the previous one, so nothing overlaps.
Estimate ring(const codec::Spec& s, size_t count, int n, const Link& l, const CodecSpeed& cs) {
  const double part = ceil_div(static_cast<double>(count), n), P = 4 * part;
  const double enc = static_cast<double>(codec::encoded_bytes(s, static_cast<int64_t>(part)));
  const double compute = P * (cs.encode + (n - 1) * (cs.decode + cs.encode) + n * cs.decode);
  return combine(latency_units(l, 2 * (n - 1), 2 * (n - 1)), 2 * (n - 1) * enc, compute, 0, l, -1, 2.0 * n + 1);
}

// Top-k per block of topk_block elements (compressed::topk_blocks), sent to every peer as
// selected; random-k: an exact all-reduce of the k values.
Estimate sparse(const codec::Spec& s, size_t count, int n, const Link& l, const CodecSpeed& cs, bool feedback,
                size_t topk_block) {
  const double S = 4.0 * count, k = static_cast<double>(codec::k_for(s, static_cast<int64_t>(count)));
  const double pass = feedback ? cs.feedback : cs.encode;
  if (s.kind == codec::Kind::RandomK) {
    Estimate e =
        dense_allreduce(best_dense(static_cast<size_t>(4 * (k + 1)), n, l), static_cast<size_t>(4 * (k + 1)), n, l);
    return combine(e.messages, e.wire_bytes, e.compute + S * (pass + cs.decode), 0, l, e.host_bytes, e.launches + 2,
                   e.peers);
  }
  const double blocks = ceil_div(count, compressed::topk_block_elems(count, topk_block));
  const double payload = static_cast<double>(codec::encoded_bytes(s, static_cast<int64_t>(count)));
  // Selection is a pass over the data; adding n-1 sparse payloads touches 2k elements each.
  const double compute = S * pass + (n - 1) * 8 * k * l.reduce;
  // Per block: the selection and the n payloads' decodes.
  return combine(latency_units(l, blocks, (n - 1) * blocks), (n - 1) * payload, compute, (blocks - 1) / blocks, l, -1,
                 blocks * (n + 1), n - 1);
}

}  // namespace

size_t sra_lag(const Estimate& sra, const Link& l) {
  if (l.alpha <= kMessageCost || sra.segments <= 1) return 1;
  const double step = std::max(sra.wire, sra.compute) / sra.segments;
  const double delay = l.inv_window > 0 ? l.alpha : 0.5 * l.alpha;  // the one-way delay (cost.h)
  const double cover = step > 0 ? std::ceil(delay / step) : sra.segments;
  return static_cast<size_t>(std::min(1 + cover, sra.segments));
}

size_t sra_segment_elems(const Estimate& sra) {
  return sra.compute > sra.wire ? compressed::kCoarseSegmentElems : compressed::kSegmentElems;
}

Estimate compressed_allreduce(CompressedAlgo a, const codec::Spec& s, size_t count, int n, const Link& l,
                              const CodecSpeed& cs, bool feedback, size_t topk_block) {
  if (n <= 1 || count == 0) return {};
  switch (resolve_compressed(s, a)) {
    case CompressedAlgo::Sparse: return sparse(s, count, n, l, cs, feedback, topk_block);
    case CompressedAlgo::Ring: return ring(s, count, n, l, cs);
    default: return sra(s, count, n, l, cs, feedback, true);
  }
}

Estimate compressed_reduce_scatter(const codec::Spec& s, size_t count, int n, const Link& l, const CodecSpeed& cs,
                                   bool feedback) {
  if (n <= 1 || count == 0) return {};
  return sra(s, count, n, l, cs, feedback, false);
}

const std::vector<AllreduceAlgo>& dense_candidates() {
  static const std::vector<AllreduceAlgo> canonical = {AllreduceAlgo::Star, AllreduceAlgo::Ring, AllreduceAlgo::Direct,
                                                        AllreduceAlgo::Sra};
  return canonical;
}

AllreduceAlgo best_dense(size_t bytes, int n, const Link& l) {
  AllreduceAlgo best = AllreduceAlgo::Ring;
  double t = 0;
  bool first = true;
  for (AllreduceAlgo a : dense_candidates()) {
    const double e = dense_allreduce(a, bytes, n, l).total;
    if (first || e < t) best = a, t = e, first = false;
  }
  return best;
}

int lossiness(const codec::Spec& s) {
  switch (s.kind) {
    case codec::Kind::None: return 0;
    case codec::Kind::Bf16:
    case codec::Kind::Fp16: return 1;
    case codec::Kind::Q8: return 2;
    case codec::Kind::Q4: return 3;
    case codec::Kind::Q2: return 4;
    case codec::Kind::Q1: return 5;
    default: return -1;
  }
}

std::vector<codec::Spec> codec_candidates(const codec::Spec& named) {
  codec::Spec none;
  none.bucket = named.bucket;
  none.stochastic = named.stochastic;
  if (lossiness(named) < 0) return {none, named};  // top-k / random-k: only when named
  std::vector<codec::Spec> out;
  // bf16 and fp16 cost the same: the named one goes first so it wins the tie, else bf16 (float32's range).
  for (const char* name : {"none", "bf16", "fp16", "q8", "q4", "q2", "q1"}) {
    codec::Spec s = codec::parse(name, named.bucket, named.stochastic);
    if (lossiness(s) > lossiness(named)) continue;
    if (s.kind == named.kind) s = named;
    const bool named_tie = named.kind == codec::Kind::Fp16 && s.kind == codec::Kind::Bf16;
    if (named_tie) continue;  // goes after fp16
    out.push_back(s);
    if (s.kind == codec::Kind::Fp16 && named.kind == codec::Kind::Fp16)
      out.push_back(codec::parse("bf16", named.bucket, named.stochastic));
  }
  return out;
}

}  // namespace ringzip::cost
