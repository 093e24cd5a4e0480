#pragma once
// A group's settings: GroupOptions as the user writes them (ringzip.Options is a validated wrapper
// over this struct, bound field by field in python/bind_options.cc), every setting's names, and
// Settings, the parsed form the planner and the backend run with.
//
// Adding an option: its field and default here (an enumeration's names in a table below), one
// bound line with its documentation in python/bind_options.cc, and the code that acts on it.
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "collective/algorithms.h"
#include "collective/compressed.h"

namespace ringzip {

// Below this many elements (256 KiB of float32) compression loses to exact (bench/results).
constexpr int64_t kMinNumel = 65536;
// TCP connections to each peer (transport/tcp/, transport/gloo/): one carries its send buffer per
// round trip (4 MiB by default: ~330 Mbit/s at 100 ms). 0, the default, lets each pair of ranks
// choose when the group is created (transport/tcp/connect.h; the Gloo transport then keeps 1):
// one where the round trip is short or the link's rate is not known (unpaced, two made the
// default command over emulated 100 ms links no faster and 1 MiB calls 1.2-1.4x slower), and
// as many as the pair's share of a given rate (link_gbit) keeps in flight over its round trip
// otherwise (docs/performance.md, "A pool as large as the rate asks").
constexpr int64_t kConnections = 0, kMaxConnections = 64;
// Options.link_gbit: each rank paces its TCP connections to this share of the rate given, so
// that the n-1 streams converging on every machine (SRA, the direct exchange, the compressed
// calls) fit its link without overflowing its queue; the rest leaves the link room for the
// acknowledgements of the other direction and the queue room to drain (docs/design.md,
// "Filling a long link").
constexpr double kPaceShare = 0.95;

struct GroupOptions {
  std::optional<std::chrono::milliseconds> timeout;  // none: the group's
  std::string algorithm = "auto";                    // dense or compressed: the other family stays auto
  std::string codec = "none";
  int64_t bucket_size = codec::kBucketSize;
  std::string rounding = "stochastic";
  int64_t min_numel = kMinNumel;
  int64_t topk_block = codec::kTopkBlock;
  std::optional<bool> error_feedback;  // none: on for biased codecs
  uint64_t seed = 0;
  std::string transport = "auto";  // read where the group is built (python/ringzip/_registry.py)
  int64_t connections = kConnections;  // so is this
  double link_gbit = 0;                // each machine's link to the others, Gbit/s; 0: not known (unpaced)
  std::string hierarchy = "auto";
  std::string check = "auto";
};

// Options(hierarchy=...): node-aware all-reduce / reduce-scatter where the layout allows
// (auto), forced (node: a warning when it can't), or never (flat).
enum class HierarchyMode : uint8_t { Auto, Node, Flat };

// Options(check=...). Off: nothing. Auto (default): every call's tags carry a hash of its
// fingerprint, so mismatched calls never exchange bytes; a call that stalls is diagnosed through
// the store (backend/mismatch_watch.h) and every rank raises the same message -- no extra message
// on the data path. On: in addition, the ranks exchange fingerprints before each call (two
// small-message rounds) and a mismatch is found before anything is posted, which keeps the
// group usable afterwards.
enum class CheckMode : uint8_t { Off, On, Auto };

enum class TransportMode : uint8_t { Auto, Gloo, Shm, Tcp };

// ---- every setting's names: the first name of a value is the one it is shown by ----------------
template <class E>
struct Named {
  const char* name;
  E value;
};

inline constexpr Named<AllreduceAlgo> kDenseAlgorithms[] = {
    {"auto", AllreduceAlgo::Auto},
    {"ring", AllreduceAlgo::Ring},
    {"rd", AllreduceAlgo::RecursiveDoubling},
    {"direct", AllreduceAlgo::Direct},
    {"star", AllreduceAlgo::Star},
    {"hd", AllreduceAlgo::HalvingDoubling},
    {"tree", AllreduceAlgo::Tree},
    {"sra", AllreduceAlgo::Sra},
    {"recursive_doubling", AllreduceAlgo::RecursiveDoubling},
    {"halving_doubling", AllreduceAlgo::HalvingDoubling},
};
inline constexpr Named<CompressedAlgo> kCompressedAlgorithms[] = {
    {"auto", CompressedAlgo::Auto},
    {"ring", CompressedAlgo::Ring},
    {"sra", CompressedAlgo::Sra},
    {"sparse", CompressedAlgo::Sparse},
};
inline constexpr Named<HierarchyMode> kHierarchies[] = {
    {"auto", HierarchyMode::Auto}, {"node", HierarchyMode::Node}, {"flat", HierarchyMode::Flat}};
inline constexpr Named<CheckMode> kChecks[] = {
    {"auto", CheckMode::Auto}, {"on", CheckMode::On}, {"off", CheckMode::Off},   {"1", CheckMode::On},
    {"true", CheckMode::On},   {"0", CheckMode::Off}, {"false", CheckMode::Off},
};
inline constexpr Named<bool> kRoundings[] = {{"stochastic", true}, {"nearest", false}};
inline constexpr Named<TransportMode> kTransports[] = {
    {"auto", TransportMode::Auto}, {"gloo", TransportMode::Gloo}, {"shm", TransportMode::Shm},
    {"tcp", TransportMode::Tcp}};

template <class E, size_t N>
const Named<E>* find_name(const Named<E> (&table)[N], const std::string& s) {
  for (const Named<E>& n : table)
    if (s == n.name) return &n;
  return nullptr;
}

// "a, b, c": the names of a table, for error messages.
template <class E, size_t N>
std::string names_of(const Named<E> (&table)[N]) {
  std::string names;
  for (const Named<E>& n : table) names += std::string(names.empty() ? "" : ", ") + n.name;
  return names;
}

// The value called `s`, or std::invalid_argument listing the names of `what`.
template <class E, size_t N>
E parse_name(const Named<E> (&table)[N], const std::string& s, const char* what) {
  if (const Named<E>* n = find_name(table, s)) return n->value;
  throw std::invalid_argument(std::string("unknown ") + what + " '" + s + "' (expected " + names_of(table) + ")");
}

template <class E, size_t N>
const char* name_of(const Named<E> (&table)[N], E v) {
  for (const Named<E>& n : table)
    if (n.value == v) return n.name;
  return "?";
}

inline AllreduceAlgo parse_algorithm(const std::string& s) { return parse_name(kDenseAlgorithms, s, "algorithm"); }
inline const char* algorithm_name(AllreduceAlgo a) { return name_of(kDenseAlgorithms, a); }
inline CompressedAlgo parse_compressed_algo(const std::string& s) {
  return parse_name(kCompressedAlgorithms, s, "compressed algorithm");
}
inline const char* compressed_algo_name(CompressedAlgo a) { return name_of(kCompressedAlgorithms, a); }
inline const char* hierarchy_name(HierarchyMode m) { return name_of(kHierarchies, m); }
inline const char* check_name(CheckMode m) { return name_of(kChecks, m); }

// One candidate of codec="auto:<codec>": the spec and the name stats() files it under.
struct CodecCandidate {
  std::string name;
  codec::Spec spec;
};

struct CompressionConfig {
  std::string codec = "none";
  int64_t bucket_size = codec::kBucketSize;
  bool stochastic = true;
  int64_t min_numel = kMinNumel;
  std::optional<bool> error_feedback;  // nullopt: on for biased codecs
  uint64_t seed = 0;
  CompressedAlgo algorithm = CompressedAlgo::Auto;
  int64_t topk_block = codec::kTopkBlock;  // top-k selects per block of this many elements; 0: whole tensor
  // Set per call by its plan (Planner::settle): SRA's segments (CompressedCall::segment_elems).
  size_t segment_elems = 0;
  size_t lag = 1;  // CompressedCall::lag
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

// Options parsed: what the planner and the backend run with (an option read as written needs
// nothing here but `options`).
struct Settings {
  GroupOptions options;  // as written
  AllreduceAlgo algorithm = AllreduceAlgo::Auto;
  HierarchyMode hierarchy = HierarchyMode::Auto;
  CheckMode check = CheckMode::Auto;
  CompressionConfig cc;  // parsed (parse_codec)
};

// Parses and checks every field; std::invalid_argument naming the first bad one.
Settings parse(const GroupOptions& o);

}  // namespace ringzip
