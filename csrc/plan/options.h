#pragma once
// A group's settings as the planner reads them (ringzip.Options, set_options): the all-reduce
// algorithm, the hierarchy, and the compression settings with their parsed codec.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "collective/algorithms.h"
#include "collective/compressed.h"

namespace ringzip {

AllreduceAlgo parse_algorithm(const std::string& s);
const char* algorithm_name(AllreduceAlgo a);

// Options(hierarchy=...): node-aware all-reduce / reduce-scatter where the layout allows
// (auto), forced (node: a warning when it can't), or never (flat).
enum class HierarchyMode : uint8_t { Auto, Node, Flat };
HierarchyMode parse_hierarchy(const std::string& s);
const char* hierarchy_name(HierarchyMode m);

// One candidate of codec="auto:<codec>": the spec and the name stats() files it under.
struct CodecCandidate {
  std::string name;
  codec::Spec spec;
};

struct CompressionConfig {
  std::string codec = "none";
  int64_t bucket_size = 512;
  bool stochastic = true;
  int64_t min_numel = 65536;           // 256 KiB of float32: below, compression loses to dense (bench/results)
  std::optional<bool> error_feedback;  // nullopt: on for biased codecs
  uint64_t seed = 0;
  CompressedAlgo algorithm = CompressedAlgo::Auto;
  int64_t topk_block = int64_t(1) << 20;  // top-k selects per block of this many elements; 0: whole tensor
  // Set per call by its plan (Planner::settle): SRA's segments (CompressedCall::segment_elems).
  size_t segment_elems = 0;
  // The rule random-k's exact all-reduce of its values follows (Planner::configure sets the
  // planner's, once).
  CompressedCall::DenseRule values_rule = nullptr;

  // Parsed once when the settings change (Planner::configure, parse_codec), not per call.
  codec::Spec parsed;
  // codec="auto" / "auto:<named>" (plain "auto" = "auto:q4"): every call runs the candidate the
  // cost model predicts fastest (plan/tuner.h); exact first, then the less lossy ones.
  // `parsed` is then the named codec: error feedback defaults to what it needs, and a call the
  // tuner does not plan (CUDA tensors) runs it.
  bool autotune = false;
  std::string named;
  std::vector<CodecCandidate> candidates;
  const codec::Spec& spec() const { return parsed; }
  bool enabled() const { return codec != "none"; }
  bool feedback() const { return error_feedback.value_or(codec::biased(spec())); }
  // The name stats() files a call under: the codec that ran.
  const std::string& stats_name() const { return autotune ? named : codec; }
};

// The settings of codec="auto:<named>" as the fixed codec <named> (cc itself when not auto).
CompressionConfig as_named(CompressionConfig cc);

// Parses cc.codec into parsed / autotune / named / candidates; std::invalid_argument naming the
// bad part (e.g. "auto:zz").
void parse_codec(CompressionConfig& cc);

}  // namespace ringzip
