#pragma once
// Per group: the measured parameters of the cost model (collective/cost.h), agreed across
// ranks, and the choices algorithm="auto" and codec="auto" make from them.
//
// Why the ranks cannot diverge. Every rank measures on its own -- a probe at the first call
// that asks, then the time of its real calls -- but decides only from the *agreed* parameters:
// rank 0 gathers every rank's estimates, averages them in rank order and sends that vector
// back, so all ranks hold the same bits. The exchange runs inside the call that asks, on the
// group's worker, which runs the group's calls one at a time in the same order on every rank;
// whether a call refreshes is decided from the number of asking calls since the last refresh
// and their predicted times, both functions of agreed values and of the calls' sizes, which
// the mismatch check compares. So every rank refreshes at the same call, before that call's
// choice, and a choice is a pure function of (agreed parameters, call size, n, options).
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "collective/comm.h"
#include "collective/cost.h"

namespace ringzip {

// One candidate of codec="auto:<codec>": the spec and the name stats() files it under.
struct CodecCandidate {
  std::string name;
  codec::Spec spec;
};

class Tuner {
 public:
  // A decision and what the model predicted for it (observe() compares).
  struct Plan {
    AllreduceAlgo dense = AllreduceAlgo::Ring;      // exact calls
    size_t codec = 0;                               // index into the candidates; 0 = exact
    CompressedAlgo algo = CompressedAlgo::Sra;      // compressed calls
    cost::Estimate est;
    double codec_raw = 0;  // codec seconds predicted from the micro-benchmarks alone
  };
  // The problem a call poses: `count` float32 elements (bytes for dense), over n ranks
  // (node-aware: the inter-node step, one shard among the nodes).
  struct Shape {
    size_t bytes = 0;
    int n = 1;
    bool reduce_scatter = false;
  };

  // algorithm="auto" for an exact all-reduce (probes or refreshes first when due).
  Plan dense(Comm& c, const Shape& s);
  // codec="auto": the candidate predicted fastest (exact = candidates[0]); `requested`: the
  // compressed algorithm asked for (Auto: the model's), `dense_requested` likewise for exact.
  Plan codec(Comm& c, const Shape& s, const std::vector<CodecCandidate>& candidates, CompressedAlgo requested,
             AllreduceAlgo dense_requested, bool feedback);
  // A call ran as `p` planned and took `seconds` (the algorithm alone), `codec_seconds` of it
  // in codec kernels: refines this rank's local estimates (not the agreed ones).
  void observe(const Plan& p, double seconds, double codec_seconds);

  // Test hook: this rank's measurements read as these (alpha s/message, inv_bw s/byte) from
  // now on; nullopt: measured again. The agreed values still come from every rank's.
  void inject(std::optional<std::pair<double, double>> link);
  // For stats()["auto"]: choices, agreed parameters, the last call's predictions.
  struct Summary {
    uint64_t calls = 0, refreshes = 0;
    std::map<std::string, uint64_t> codec_choices, algorithm_choices;
    cost::Link link;
    double codec_scale = 1;
    std::map<std::string, cost::CodecSpeed> codecs;
    size_t last_bytes = 0;
    std::string last_choice;
    std::map<std::string, double> last_predicted;  // seconds, per candidate of the last call
  };
  Summary summary() const;

 private:
  void maybe_refresh(Comm& c, const Shape& s, const std::vector<CodecCandidate>* candidates);
  void probe(Comm& c);
  void agree(Comm& c, const std::vector<CodecCandidate>* candidates);
  cost::CodecSpeed scaled(const std::string& name) const;
  std::optional<std::pair<double, double>> injected() const;
  void chose(const Plan& p, const std::string& choice, std::map<std::string, uint64_t>& counts, size_t bytes,
             std::map<std::string, double> predicted);

  mutable std::mutex mu_;  // stats() reads from other threads; calls come one at a time
  bool probed_ = false;
  uint64_t calls_ = 0, refreshes_ = 0, since_ = 0;
  double predicted_since_ = 0;
  // Local (this rank's) samples, the last few of each: their median is what this rank offers.
  std::deque<double> alpha_, inv_bw_, codec_scale_;
  std::optional<std::pair<double, double>> injected_;  // guarded by mu_ (set from Python)
  // Agreed: the same on every rank.
  cost::Link link_;
  double codec_scale_agreed_ = 1;
  std::map<std::string, cost::CodecSpeed> codecs_;
  Summary last_;
};

// Runs f() (the algorithm of a call planned as p) and tells the tuner how long it took and how
// much of it went to codec kernels; without a tuner just runs it.
template <typename F>
void run_observed(Tuner* tuner, const Tuner::Plan& p, Comm& c, F f) {
  const double codec0 = c.codec_seconds;
  const auto t0 = std::chrono::steady_clock::now();
  f();
  if (tuner)
    tuner->observe(p, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                   c.codec_seconds - codec0);
}

// This process's speed of the host kernels (measured once per codec on ~1 MiB, then cached):
// the element-wise reduction (seconds per byte) and each codec's passes.
double host_reduce_speed();
cost::CodecSpeed host_codec_speed(const codec::Spec& s);

}  // namespace ringzip
