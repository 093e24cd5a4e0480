#include "plan/options.h"

#include <stdexcept>

#include "common/check.h"
#include "plan/cost.h"

namespace ringzip {

AllreduceAlgo parse_algorithm(const std::string& s) {
  if (s == "auto") return AllreduceAlgo::Auto;
  if (s == "ring") return AllreduceAlgo::Ring;
  if (s == "rd" || s == "recursive_doubling") return AllreduceAlgo::RecursiveDoubling;
  if (s == "direct") return AllreduceAlgo::Direct;
  if (s == "star") return AllreduceAlgo::Star;
  if (s == "hd" || s == "halving_doubling") return AllreduceAlgo::HalvingDoubling;
  if (s == "tree") return AllreduceAlgo::Tree;
  RZ_CHECK_VALUE(false, "unknown algorithm '", s, "' (expected auto, ring, rd, direct, star, hd or tree)");
}

const char* algorithm_name(AllreduceAlgo a) {
  switch (a) {
    case AllreduceAlgo::Auto: return "auto";
    case AllreduceAlgo::Ring: return "ring";
    case AllreduceAlgo::RecursiveDoubling: return "rd";
    case AllreduceAlgo::Direct: return "direct";
    case AllreduceAlgo::Star: return "star";
    case AllreduceAlgo::HalvingDoubling: return "hd";
    case AllreduceAlgo::Tree: return "tree";
  }
  return "?";
}

HierarchyMode parse_hierarchy(const std::string& s) {
  if (s == "auto") return HierarchyMode::Auto;
  if (s == "node") return HierarchyMode::Node;
  if (s == "flat") return HierarchyMode::Flat;
  RZ_CHECK_VALUE(false, "unknown hierarchy '", s, "' (expected auto, node or flat)");
}

const char* hierarchy_name(HierarchyMode m) {
  switch (m) {
    case HierarchyMode::Auto: return "auto";
    case HierarchyMode::Node: return "node";
    case HierarchyMode::Flat: return "flat";
  }
  return "?";
}

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

}  // namespace ringzip
