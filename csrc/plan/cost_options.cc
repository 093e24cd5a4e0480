// The cost table of codec="auto" (every candidate with every algorithm it may run) and the
// argmin the tuner takes over it, with the rules that choose where nothing was measured.
#include "plan/cost.h"

namespace ringzip {

AllreduceAlgo rule_dense(size_t bytes, int ranks) {
  constexpr size_t kRingThreshold = 1 << 20, kStarMaxSent = 16 << 10;
  if (bytes * (ranks - 1) <= kStarMaxSent) return AllreduceAlgo::Star;
  return bytes < kRingThreshold ? AllreduceAlgo::RecursiveDoubling : AllreduceAlgo::Ring;
}

CompressedAlgo resolve_compressed(const codec::Spec& spec, CompressedAlgo requested) {
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
                          : compressed_allreduce(a, s, count, p.n, l, cs, p.feedback, p.topk_block);
}

std::vector<Option> codec_options(const std::vector<codec::Spec>& candidates, const std::vector<CodecSpeed>& speeds,
                                  const Problem& p, const Link& l) {
  std::vector<Option> out;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const codec::Spec& s = candidates[i];
    if (s.kind == codec::Kind::None) {
      std::vector<AllreduceAlgo> dense = {p.dense};
      if (p.reduce_scatter)
        dense = {AllreduceAlgo::Ring};  // the exact reduce-scatter is the ring's
      else if (p.dense == AllreduceAlgo::Auto)
        dense = dense_candidates();
      for (AllreduceAlgo d : dense)
        out.push_back({i, CompressedAlgo::Sra, d, predict(s, CompressedAlgo::Sra, d, p, l, {})});
      continue;
    }
    std::vector<CompressedAlgo> algos = {resolve_compressed(s, p.algo)};
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

}  // namespace ringzip
