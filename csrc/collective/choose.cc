// Which algorithm runs: the one place where dense and compressed algorithms are chosen
// (docs/algorithms.md), and the dense all-reduce's dispatch.
#include <algorithm>
#include <stdexcept>

#include "collective/algorithms.h"
#include "collective/compressed.h"
#include "collective/cost.h"

namespace ringzip {

AllreduceAlgo choose_allreduce(size_t bytes, int ranks, AllreduceAlgo requested) {
  if (requested != AllreduceAlgo::Auto) return requested;
  // Cold start only: the backend asks the cost model (backend/tuner.h, cost::best_dense) with the
  // group's measured parameters and passes the algorithm it picks. What still comes here with
  // Auto -- collectives inside other algorithms (random-k's all-reduce of its k values) and
  // the loopback fixture -- has no measurements and takes these rules, measured on this
  // project's 2-core machines: while the payload is tiny, messages cost more than bytes (the
  // star's 2(n-1) messages beat the direct exchange's n(n-1) and recursive doubling's
  // n log2 n); below 1 MiB recursive doubling's log2 n rounds beat the ring's 2(n-1).
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

namespace cost {

Estimate predict(const codec::Spec& s, CompressedAlgo a, AllreduceAlgo dense, const Problem& p, const Link& l,
                 const CodecSpeed& cs) {
  if (s.kind == codec::Kind::None)
    return p.reduce_scatter ? dense_reduce_scatter(p.bytes, p.n, l) : dense_allreduce(dense, p.bytes, p.n, l);
  const size_t count = p.bytes / 4;
  return p.reduce_scatter ? compressed_reduce_scatter(s, count, p.n, l, cs, p.feedback)
                          : compressed_allreduce(a, s, count, p.n, l, cs, p.feedback);
}

std::vector<Option> codec_options(const std::vector<codec::Spec>& candidates, const std::vector<CodecSpeed>& speeds,
                                  const Problem& p, const Link& l) {
  std::vector<Option> out;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const codec::Spec& s = candidates[i];
    if (s.kind == codec::Kind::None) {
      std::vector<AllreduceAlgo> dense = {p.dense};
      if (p.reduce_scatter) dense = {AllreduceAlgo::Ring};  // the exact reduce-scatter is the ring's
      else if (p.dense == AllreduceAlgo::Auto) dense = dense_candidates();
      for (AllreduceAlgo d : dense) out.push_back({i, CompressedAlgo::Sra, d, predict(s, CompressedAlgo::Sra, d, p, l, {})});
      continue;
    }
    std::vector<CompressedAlgo> algos = {choose_compressed(s, p.algo)};
    if (p.algo == CompressedAlgo::Auto && algos[0] == CompressedAlgo::Sra && !p.reduce_scatter)
      algos.push_back(CompressedAlgo::Ring);  // SRA's error does not grow with n: it goes first
    for (CompressedAlgo a : algos)
      out.push_back({i, a, AllreduceAlgo::Ring, predict(s, a, AllreduceAlgo::Ring, p, l, speeds.at(i))});
  }
  return out;
}

size_t pick(const std::vector<double>& totals) {
  constexpr double kMargin = 0.98;
  size_t best = 0;
  for (size_t i = 1; i < totals.size(); ++i)
    if (totals[i] < kMargin * totals[best]) best = i;
  return best;
}

}  // namespace cost

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
