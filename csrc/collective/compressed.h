#pragma once
// Compressed SUM all-reduce of a float32 buffer, each algorithm written once as a schedule
// (collective/schedule.h) against (Comm, codec::Spec): one file each in collective/compressed/.
// Every rank ends with bitwise-identical output: each chunk's final value is decoded from the
// same bytes everywhere (the owner, too, keeps decode(encode(sum))).
#include <string>

#include "codec/codec.h"
#include "collective/algorithms.h"
#include "collective/comm.h"

namespace ringzip {

// ring: reduce-scatter re-encoding at each hop, allgather of encoded chunks.
// sra:  scatter-reduce-allgather via all-to-all: each value encoded once toward its owner and
//       once for the gather, so the error does not grow with the number of ranks.
// sparse: top-k by allgather of (index, value) pairs summed in rank order; random-k by an
//       exact all-reduce of the k values every rank selects alike.
enum class CompressedAlgo { Auto, Ring, Sra, Sparse };

struct CompressedCall {
  codec::Spec spec;
  uint64_t seed = 0;
  // Keys the call's RNG streams (Philox counter word c2) with `seed`: the backend passes the
  // number of the call in its group's sequence of compressed calls (backend/compression.h), so
  // the streams survive a restart with the error-feedback state. Never the tag's sequence number.
  uint32_t rng_seq = 0;
  // Ring, Sra or Sparse (the planner resolves "auto": plan/plan.h).
  CompressedAlgo algo = CompressedAlgo::Sra;
  // Error feedback, when non-null: on entry the residual owed from earlier calls, which the
  // algorithm adds to data before compressing; on return the new residual, (data + residual)
  // - (what this rank's contribution became on the wire), zero where it travelled exactly.
  float* residual = nullptr;
  // top-k selects the k = ratio * len largest within each block of this many elements (the
  // last block may be shorter), so that selection and transfer overlap; 0: the whole tensor.
  size_t topk_block = codec::kTopkBlock;
  // SRA's segment length in elements (compressed/layout.h); 0: kSegmentElems. The same on every
  // rank (message sizes follow it); the bits of the result do not depend on it.
  size_t segment_elems = 0;
  // How many segments SRA's reductions and decodes run behind its sends (Schedule::lag): 1, the
  // next step, unless a long link's delay makes each step wait; there enough segments to cover
  // the delay, which then overlaps across segments instead of adding up (cost::sra_lag). The
  // same on every rank; the bits do not depend on it. Host transports only (1 elsewhere).
  size_t lag = 1;
  // The dense algorithm of random-k's exact all-reduce of its k values, by their bytes and the
  // ranks (the planner's rule, handed down so this layer decides nothing).
  using DenseRule = AllreduceAlgo (*)(size_t bytes, int ranks);
  DenseRule values_rule = nullptr;
};

// data: count float32 elements of this rank's input; replaced by the compressed sum.
void compressed_allreduce(Comm& c, float* data, size_t count, const CompressedCall& call);
// SRA's first phase alone: afterwards rank i's even part i of data holds the sum (its own
// contribution exact, the others' decoded). Other parts are left as they were.
void compressed_reduce_scatter(Comm& c, float* data, size_t count, const CompressedCall& call);

}  // namespace ringzip
