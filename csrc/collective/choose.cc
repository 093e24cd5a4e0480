// Which algorithm runs: the one place where dense and compressed algorithms are chosen
// (docs/algorithms.md), and the dense all-reduce's dispatch.
#include <stdexcept>

#include "collective/algorithms.h"
#include "collective/compressed.h"

namespace ringzip {

AllreduceAlgo choose_allreduce(size_t bytes, int ranks, AllreduceAlgo requested) {
  if (requested != AllreduceAlgo::Auto) return requested;
  // Recursive doubling moves log2(n) whole buffers, the ring 2(n-1)/n of one buffer in
  // 2(n-1) latency-bound steps: below this size latency dominates (bench/results).
  // While the payload is tiny, messages cost more than bytes: the star's 2(n-1) messages beat
  // both the direct exchange's n(n-1) and recursive doubling's n·log2 n (docs/algorithms.md).
  constexpr size_t kRingThreshold = 1 << 20, kStarMaxSent = 16 << 10;
  if (bytes * (ranks - 1) <= kStarMaxSent) return AllreduceAlgo::Star;
  return bytes < kRingThreshold ? AllreduceAlgo::RecursiveDoubling : AllreduceAlgo::Ring;
}

void allreduce(Comm& c, Buf data, RedOp op, AllreduceAlgo algo) {
  switch (choose_allreduce(data.bytes(), c.size(), algo)) {
    case AllreduceAlgo::Ring: return ring_allreduce(c, data, op);
    case AllreduceAlgo::Direct: return direct_allreduce(c, data, op);
    case AllreduceAlgo::Star: return star_allreduce(c, data, op);
    case AllreduceAlgo::HalvingDoubling: return hd_allreduce(c, data, op);
    case AllreduceAlgo::Tree: return tree_allreduce(c, data, op);
    default: return rd_allreduce(c, data, op);
  }
}

CompressedAlgo choose_compressed(const codec::Spec& spec, CompressedAlgo requested) {
  const bool sparse = spec.kind == codec::Kind::TopK || spec.kind == codec::Kind::RandomK;
  if (sparse) return CompressedAlgo::Sparse;  // dense algorithms can't carry index/value pairs
  if (requested == CompressedAlgo::Sparse || requested == CompressedAlgo::Auto) return CompressedAlgo::Sra;
  return requested;
}

CompressedAlgo parse_compressed_algo(const std::string& s) {
  if (s == "auto") return CompressedAlgo::Auto;
  if (s == "ring") return CompressedAlgo::Ring;
  if (s == "sra") return CompressedAlgo::Sra;
  if (s == "sparse") return CompressedAlgo::Sparse;
  throw std::invalid_argument("unknown compressed algorithm '" + s + "' (expected auto, ring, sra or sparse)");
}

const char* compressed_algo_name(CompressedAlgo a) {
  switch (a) {
    case CompressedAlgo::Auto: return "auto";
    case CompressedAlgo::Ring: return "ring";
    case CompressedAlgo::Sra: return "sra";
    case CompressedAlgo::Sparse: return "sparse";
  }
  return "?";
}

}  // namespace ringzip
