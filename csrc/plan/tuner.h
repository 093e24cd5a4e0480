#pragma once
// Per group: the measured parameters of the cost model (plan/cost.h), agreed across
// ranks, and the choices algorithm="auto" and codec="auto" make from them (docs/algorithms.md,
// "Choosing: the cost model").
//
// Why the ranks cannot diverge. Every rank measures on its own -- a probe at the first call
// that asks, then the time of its real calls -- but decides only from *agreed* values: rank 0
// gathers every rank's estimates, combines them in rank order (the mean; a way's price: the
// slowest rank's) and sends that vector back, so
// all ranks hold the same bits. The exchange runs inside the call that asks, on the group's
// worker, which runs the group's calls one at a time in the same order on every rank; whether a
// call refreshes depends only on agreed values, on the calls' sizes (which the mismatch check
// compares) and on earlier choices (themselves such functions). So every rank refreshes at the
// same call, before that call's choice, and a choice is a pure function of (agreed values, call
// size, n, options): the same on every rank.
//
// Calibration. The model prices every way to run a call; where a way ran recently at about this
// size (same factor-4 size class), the median of its last five measured times on its slowest
// rank (agreed), scaled
// within the class by the model, replaces the model's price; a way without one is priced from its
// family's measured way or the class's measured excess over the model (price_unmeasured). A
// way priced within 1.25x of the best is tried (exploration) and measured again while its price
// stays within 1.2x, until it rests on three times; a candidate (exact, or a codec) none of
// whose ways ran at this size is run first at its best way where priced within 1.5x (exact,
// the baseline, first of all: a "tour"), and an exact way the model finds plausible is run
// until it has three times, whatever its first ones say. Nothing priced beyond 1.5x is run to
// learn: where the model is wrong it is fixed, not explored around (tuner_choice.cc).
// A way's first call at a size class is not timed (one-time costs), so a try is two calls.
// Measurements expire after 128 calls without a new sample, so a way that got faster is found
// again: by price (the model's, as unmeasured), or measured again where both that price and the
// one it expired at lie within 1.2x of the best (a re-measurement costs at most that). Where the
// running way's price grows 2x between two refreshes and the refresh after the class's next
// three timed calls finds it so still (a lasting slowdown of the link or the host, not a burst),
// its size class's other prices move by what the change added per link byte and every
// candidate runs once again (tuner.cc, kChange). Whether a way is tried depends
// on agreed values and earlier choices only, as above.
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "collective/comm.h"
#include "plan/cost.h"
#include "plan/options.h"

namespace ringzip {

class Tuner {
 public:
  // `device`: the tuner of a device path's calls (CUDA): its kernels' speeds are measured
  // through the calls' Compute, its exchanges run through the compute's memory, and a call's
  // time is taken once the compute ran it (run_observed).
  explicit Tuner(bool device = false) : device_(device) {}
  bool device() const { return device_; }
  // Every rank of the group on one host (before the first call): there a compressed call's time
  // beyond its codec kernels is ranks waiting for the cores the codec holds, not the link or the
  // host's copies, so such calls teach neither rate (tuner.cc learn).
  void set_one_host(bool one) { one_host_ = one; }

  // A decision and what was predicted for it (observe() compares).
  struct Plan {
    AllreduceAlgo dense = AllreduceAlgo::Ring;  // exact calls
    size_t codec = 0;                           // index into the candidates; 0 = exact
    CompressedAlgo algo = CompressedAlgo::Sra;  // compressed calls
    size_t segment_elems = 0;                   // SRA's (cost::sra_segment_elems); 0: the default
    size_t lag = 1;                             // SRA's (cost::sra_lag)
    cost::Estimate est;                         // the model's
    double predicted = 0;                       // what the choice used (calibrated where measured)
    double codec_raw = 0;                       // codec seconds predicted from the micro-benchmarks alone
    std::string key;                            // calibration key: size class and way
    std::string way;                            // the way's name (key without the size class)
    bool tried = false;  // run to be measured (exploration, tour, or a warmed way's timed rerun), not for its price
    size_t bytes = 0;
    // Whether the call's time may refine alpha and the link rates: every way but the tree's
    // pipeline and top-k's selection, whose models are too rough (their mistakes would land in
    // the shared figures); their times only calibrate themselves.
    bool teaches_link = false;
  };
  // The problem a call poses: `bytes` of float32 (any dtype for dense) over n ranks
  // (node-aware: the inter-node step, one shard among the nodes).
  struct Shape {
    size_t bytes = 0;
    int n = 1;
    bool reduce_scatter = false;
    // Whether the call's time comes back through observe(): node-aware calls are not measured,
    // so they choose from the model and the agreed figures alone (nothing to explore or warm).
    bool observed = true;
  };

  // algorithm="auto" for an exact all-reduce (probes or refreshes first when due).
  Plan dense(Comm& c, const Shape& s);
  // codec="auto": the candidate to run (exact = candidates[0]); `requested`: the compressed
  // algorithm asked for (Auto: the model's), `dense_requested` likewise for exact calls.
  Plan codec(Comm& c, const Shape& s, const std::vector<CodecCandidate>& candidates, CompressedAlgo requested,
             AllreduceAlgo dense_requested, bool feedback, size_t topk_block = codec::kTopkBlock);
  // A call ran as `p` planned and took `seconds` (the algorithm alone), `codec_seconds` of it
  // in codec kernels: this rank's samples (agreed at the next refresh).
  void observe(const Plan& p, double seconds, double codec_seconds);

  // Test hook ("fake clock"): this rank's link measurements read as (alpha s/message, inv_bw
  // s/byte) from now on, and while any rank has one, choices use the model alone (no measured
  // times); nullopt: measured again.
  void inject(std::optional<std::pair<double, double>> link);
  // Test hook ("fake clock" for the calibration): a call run a way named here (a dense
  // algorithm, or "<codec>/<algorithm>" under codec="auto") is recorded as taking these
  // seconds, whatever its size, instead of its measured time; with inject() too, the model's
  // prices come from the injected link and the calibration from these times. Empty: measured.
  void inject_times(std::map<std::string, double> seconds);
  // The agreed figures (the link's, the kernels' speeds), for the group that replaces this one at
  // a membership change (python/ringzip/_membership.py); none before the first agreement.
  struct Figures {
    cost::Link link;
    double codec_scale = 1;
    std::map<std::string, cost::CodecSpeed> codecs;
  };
  std::optional<Figures> figures() const;
  // The kernels' speeds, the probe and the first agreement, unless done (maybe_refresh runs it
  // at the first call that asks; RingzipBackend::agree_early as the group is created).
  void prepare(Comm& c, const std::vector<CodecCandidate>* candidates);
  // Before the first call: every rank of the group is given the same figures (agreed outside,
  // through the group's store), so the first call neither probes nor agrees; it plans from
  // them, and the calls teach and refresh them as usual. They are also what this rank offers
  // until its calls measure anew.
  void seed(const Figures& f);
  // stats()["auto"] (bound in python/bind_stats.cc): choices, agreed parameters, the last call's
  // predictions.
  struct Summary {
    uint64_t calls = 0, refreshes = 0, explorations = 0, tours = 0;
    uint64_t changes = 0;        // lasting changes seen (the running way's price grew 2x: tuner.cc kChange)
    double refresh_seconds = 0;  // agreed: what the last refresh took
    double probe_seconds = 0;    // this rank's: what the group's probe took (0: it sent nothing)
    std::map<std::string, uint64_t> codec_choices, algorithm_choices, way_choices;
    struct Params {
      cost::Link link;
      double codec_scale = 1;
      std::map<std::string, cost::CodecSpeed> codecs;
    } params;
    struct Last {
      size_t bytes = 0;
      std::string choice, way;                         // the codec (or dense algorithm), and with its algorithm
      bool tried = false;                              // the call ran its way to measure it (Plan::tried)
      size_t segment_elems = 0;                        // its SRA segment length (Plan::segment_elems; 0: not SRA)
      std::map<std::string, double> predicted, model;  // seconds per candidate: used / model alone
    } last;
    bool device_kernels = false;  // the codec speeds were measured on the device (Tuner(device))
  };
  Summary summary() const;

 private:
  // The ways to run a call of one size class: names, the model's estimates, and the model at
  // another size (to scale a measurement within the class).
  struct Ways {
    std::vector<std::string> names;
    std::vector<int> family;  // ways of one candidate (one codec, or exact with any dense algorithm)
    std::vector<cost::Estimate> est;
    std::function<double(size_t way, size_t bytes)> model_at;
  };
  // Prices the ways without a measurement from those with one (tuner_choice.cc); returns the
  // class's excess over the model (the median of measured / model over the measured ways, >= 1).
  static double price_unmeasured(const Ways& w, const std::vector<bool>& fresh, std::vector<double>& used);
  size_t choose(const Shape& s, const Ways& w, std::vector<double>& used, std::string& key, bool& tried);
  void maybe_refresh(Comm& c, const std::vector<CodecCandidate>* candidates);
  bool looks_due() const;
  void probe(Comm& c);
  // observe()'s refinement of this rank's link and codec figures from a measured call.
  void learn(const Plan& p, double seconds, double codec_seconds);
  void agree(Comm& c, const std::vector<CodecCandidate>* candidates);
  // agree()'s steps for a lasting change (tuner.cc, kChange): the running ways' prices before
  // the new ones, and what a jump of one does to its size class's other prices.
  std::map<std::string, double> running_prices() const;
  void follow_changes(const std::map<std::string, double>& before);
  cost::CodecSpeed scaled(const std::string& name) const;
  // This rank's kernel speeds: the host's (cached per process) or the device's (measured once).
  double reduce_speed(Comm& c);
  double launch_seconds(Comm& c);
  cost::CodecSpeed codec_speed(Comm& c, const CodecCandidate& cand);
  std::optional<std::pair<double, double>> injected() const;
  void chose(const Plan& p, const std::string& choice, bool dense, std::map<std::string, double> used,
             std::map<std::string, double> model);

  // A plausible way is run until its price rests on this many timed calls: on 3-4 ranks sharing
  // 2 cores one call of a way lies anywhere in 0.7-1.5x its median (a single cold-free sample of
  // SRA at 4 MiB priced it 1.35x the compressed ring, which then ran 1.15x slower for 128 calls).
  static constexpr size_t kSamples = 3;

  const bool device_;
  double device_reduce_ = 0, device_launch_ = 0;          // device_: measured at the first agreement
  std::map<std::string, cost::CodecSpeed> device_codecs_;  // device_: per candidate, measured once
  mutable std::mutex mu_;                                  // stats() reads from other threads; calls come one at a time
  bool probed_ = false, calibrate_ = true, one_host_ = false;
  bool known_ = false;   // the figures were agreed (or seeded): figures() has them
  uint64_t calls_ = 0, refreshes_ = 0, since_ = 0, explorations_ = 0, tours_ = 0, changes_ = 0;
  double predicted_since_ = 0;
  double agree_seconds_ = 0;  // this rank's time of the last agreement (offered at the next)
  // Local (this rank's) samples, the last few of each: their least (link figures) or median
  // (a way's times, way_price) is what this rank offers.
  std::deque<double> inv_bw_, inv_host_, codec_scale_;
  double probe_alpha_ = 0;                             // the probe's per-message time (0: none yet, the default's)
  std::deque<double> call_;                            // the per-call cost's samples (learn), their median offered
  std::map<std::string, std::deque<double>> seconds_;  // per calibration key
  std::map<std::string, size_t> sample_bytes_;         // the size of a key's last sample
  std::map<std::string, double> sample_wire_;          // and the model's bytes through the busiest link
  std::set<std::string> dirty_, pending_;              // keys sampled / explored since the last refresh
  // A switch to another measured way re-measures it: its samples from before the switch are
  // dropped at the next refresh (once a new one came). Key -> how many to drop.
  std::map<std::string, size_t> remeasure_;
  bool switched_ = false;                         // a switch by price since the last refresh (agreed: choices are)
  std::map<std::string, std::string> incumbent_;  // size class prefix -> the way chosen last
  std::set<std::string> changed_classes_;         // size classes after a change: every candidate runs once
  // A jump of a running way's price, by size class, for the look that confirms it: the way, its
  // price before, and the class's timed calls since (the look waits for kSamples of them).
  struct Jump {
    std::string key;
    double old = 0;
    size_t times = 0;
  };
  std::map<std::string, Jump> jumps_;
  // A way's first call at a size class pays one-time costs (scratch buffers, page faults: 1.4-2x
  // a later call's time), so it is not timed: it warms the way, and the next call of the class
  // runs the way again (rerun_), timed.
  std::set<std::string> warmed_;
  std::string rerun_;
  std::map<std::string, double> injected_times_;       // guarded by mu_ (set from Python)
  std::optional<std::pair<double, double>> injected_;  // guarded by mu_ (set from Python)
  // Agreed: the same on every rank.
  struct Measured {
    double seconds = 0;
    size_t samples = 0;  // behind `seconds`
    size_t bytes = 0;
    uint64_t stamp = 0;  // the call count at the refresh that last saw a new sample
    double wire = 0;     // the model's bytes through the busiest rank's link, at `bytes`
  };
  cost::Link link_;
  double codec_scale_agreed_ = 1;
  double refresh_seconds_ = 0;  // agreed: the ranks' mean time of the previous agreement
  double probe_seconds_ = 0;    // this rank's probe (Summary::probe_seconds)
  std::map<std::string, cost::CodecSpeed> codecs_;
  std::map<std::string, Measured> measured_;
  // Keys whose measurement expired, at their last agreed price: an expired way is measured again
  // only where that price, too, lies within kResample of the best (tuner_choice.cc).
  std::map<std::string, Measured> expired_;
  Summary summary_;  // its counts and last call (summary() adds the rest)
};

// Runs f() (the algorithm of a call planned as p) and tells the tuner how long it took and how
// much of it went to codec kernels; without a tuner just runs it.
template <typename F>
void run_observed(Tuner* tuner, const Tuner::Plan& p, Comm& c, F f) {
  const double codec0 = c.codec_seconds;
  if (tuner) c.dev.sync();  // a device's earlier work is not this call's
  const auto t0 = std::chrono::steady_clock::now();
  f();
  if (tuner) c.dev.sync();
  if (tuner)
    tuner->observe(p, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                   c.codec_seconds - codec0);
}

// This process's speed of the host kernels (measured once per codec, then cached): the
// element-wise reduction (seconds per byte) and each codec's passes.
double host_reduce_speed();
double host_launch_seconds();
cost::CodecSpeed host_codec_speed(const codec::Spec& s);
// All of the above that a group of these settings asks for at its first call (the reduction,
// the launch, each codec it may run), measured now: backend.cc runs it in the background.
void measure_host_kernels(const std::vector<codec::Spec>& codecs);
// The same figures of a device's kernels, measured through its Compute (not cached: the tuner
// of the device's calls keeps them).
double device_reduce_speed(Compute& dev);
double device_launch_seconds(Compute& dev);  // seconds per kernel beyond its bytes (cost::Link::launch)
cost::CodecSpeed device_codec_speed(Compute& dev, const codec::Spec& s);

}  // namespace ringzip
