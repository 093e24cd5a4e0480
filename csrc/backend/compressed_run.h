#pragma once
// The steps every compressed call shares, on any device (compressed_ops.cc).
#include <ATen/ATen.h>

#include <chrono>

#include "backend/compression.h"
#include "backend/fingerprint.h"
#include "backend/tensors.h"
#include "codec/codec.h"
#include "collective/comm.h"
#include "collective/compressed.h"
#include "collective/hierarchy/layout.h"

namespace ringzip {

// What the mismatch check compares of the codec settings (backend/fingerprint.h), with the codec
// version (codec/codec.h: ranks built with different codec bits never exchange a payload). The
// call's RNG number joins when the call starts (RingzipBackend::stamp).
inline FpExtra codec_fingerprint(const CompressionConfig& cc) {
  FpExtra e;
  e.codec = cc.codec;
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v : {static_cast<uint64_t>(codec::kCodecVersion), static_cast<uint64_t>(cc.bucket_size),
                     static_cast<uint64_t>(cc.stochastic), cc.seed, static_cast<uint64_t>(cc.algorithm),
                     static_cast<uint64_t>(cc.topk_block)}) {
    h = (h ^ v) * 1099511628211ull;
  }
  e.codec_hash = static_cast<uint32_t>(h ^ (h >> 32));
  return e;
}

inline CompressedCall call_of(const CompressionConfig& cc, const Compression::Call& which) {
  CompressedCall call;
  call.spec = cc.spec();
  call.seed = cc.seed;
  call.rng_seq = static_cast<uint32_t>(which.number);
  call.algo = cc.algorithm;
  call.topk_block = static_cast<size_t>(cc.topk_block);
  call.segment_elems = cc.segment_elems;
  call.lag = cc.lag;
  call.values_rule = cc.values_rule;
  return call;
}

// One compressed call on the float32 working copy x (host or device): pre-scale (PREMUL_SUM),
// hand the call's RNG number and error-feedback residual (Compression::begin_call, taken on the
// caller's thread) to the algorithm (which adds the residual to x), run `algo`, then `finish`
// (post-scale, write-back) and the stats.
// `dense_factor`: bytes an exact ring algorithm would send per input byte (node-aware: in the
// inter-node step, dense_factor_of).
template <typename Algo, typename Finish>
void run_compressed(Comm& c, Compression& comp, const CompressionConfig& cc, const at::Tensor& x,
                    const Compression::Call& which, const Reduction& red, uint64_t in_bytes, double dense_factor,
                    Algo algo, Finish finish) {
  const auto t0 = std::chrono::steady_clock::now();
  CompressedCall call = call_of(cc, which);
  if (red.pre != 1.0) x.mul_(red.pre);
  if (which.residual.defined()) call.residual = which.residual.data_ptr<float>();  // the algorithm adds it to x
  algo(call);
  finish();
  CodecStats d{1,
               in_bytes,
               c.bytes_sent,
               static_cast<uint64_t>(dense_factor * in_bytes),
               c.codec_seconds,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  d.bytes_intra_node = c.bytes_intra_node;
  comp.record(cc.stats_name(), d);
}

// Bytes an exact ring all-reduce (reduce-scatter: half of it) sends per input byte, among the
// ranks of the group (flat) or in the inter-node step (node-aware: among N nodes, on 1/P of
// the input).
inline double dense_factor_of(const NodeLayout* nodes, int n, bool allreduce) {
  const double f = allreduce ? 2.0 : 1.0;
  if (!nodes) return f * (n - 1) / n;
  const int big_n = nodes->nodes();
  return f * (big_n - 1) / big_n / nodes->ranks_per_node();
}

}  // namespace ringzip
