#include "plan/options.h"

#include <cmath>
#include <stdexcept>
#include <tuple>

#include "plan/cost.h"

namespace ringzip {

CompressionConfig as_named(CompressionConfig cc) {
  if (!cc.autotune) return cc;
  cc.autotune = false;
  cc.codec = cc.named;
  cc.candidates.clear();
  return cc;
}

void parse_codec(CompressionConfig& cc) {
  const std::string& s = cc.codec;
  cc.autotune = s == "auto" || s.rfind("auto:", 0) == 0;
  cc.candidates.clear();
  if (!cc.autotune) {
    cc.parsed = codec::parse(s, cc.bucket_size, cc.stochastic);
    cc.named = s;
    return;
  }
  cc.named = s == "auto" ? "q4" : s.substr(5);
  try {
    cc.parsed = codec::parse(cc.named, cc.bucket_size, cc.stochastic);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("bad codec '" + s + "' ('auto' or 'auto:<codec>'): " + e.what());
  }
  for (const codec::Spec& c : cost::codec_candidates(cc.parsed))
    cc.candidates.push_back({c.kind == cc.parsed.kind ? cc.named : codec::name(c), c});
}

Settings parse(const GroupOptions& o) {
  Settings s;
  s.options = o;
  // One name for both families: a name of only one leaves the other on auto.
  const auto* dense = find_name(kDenseAlgorithms, o.algorithm);
  const auto* compressed = find_name(kCompressedAlgorithms, o.algorithm);
  if (!dense && !compressed)
    throw std::invalid_argument("unknown algorithm '" + o.algorithm + "' (expected " + names_of(kDenseAlgorithms) +
                                "; compressed: " + names_of(kCompressedAlgorithms) + ")");
  s.algorithm = dense ? dense->value : AllreduceAlgo::Auto;
  s.hierarchy = parse_name(kHierarchies, o.hierarchy, "hierarchy");
  s.check = parse_name(kChecks, o.check, "check");
  parse_name(kTransports, o.transport, "transport");
  const std::tuple<const char*, int64_t, int64_t> at_least[] = {
      {"bucket_size", o.bucket_size, 1}, {"min_numel", o.min_numel, 0}, {"topk_block", o.topk_block, 0}};
  for (const auto& [name, v, least] : at_least)
    if (v < least)
      throw std::invalid_argument(std::string(name) + " must be >= " + std::to_string(least) + ", got " +
                                  std::to_string(v));
  if (!(o.link_gbit >= 0) || !std::isfinite(o.link_gbit))
    throw std::invalid_argument("link_gbit must be 0 (not known) or a link's rate in Gbit/s, got " +
                                std::to_string(o.link_gbit));
  if (o.connections < 0 || o.connections > kMaxConnections)
    throw std::invalid_argument("connections must be 0 (chosen per peer) or in 1.." + std::to_string(kMaxConnections) + ", got " +
                                std::to_string(o.connections));
  CompressionConfig& cc = s.cc;
  cc.codec = o.codec;
  cc.bucket_size = o.bucket_size;
  cc.stochastic = parse_name(kRoundings, o.rounding, "rounding");
  cc.min_numel = o.min_numel;
  cc.error_feedback = o.error_feedback;
  cc.seed = o.seed;
  cc.algorithm = compressed ? compressed->value : CompressedAlgo::Auto;
  cc.topk_block = o.topk_block;
  parse_codec(cc);
  return s;
}

}  // namespace ringzip
