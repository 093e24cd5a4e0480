// The tuner's choices (tuner.h): the model's price of every way to run a call, replaced by the
// agreed measurement where a way ran recently at about this size, and the exploration of
// plausible ways not measured yet.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <map>

#include "plan/tuner.h"

namespace ringzip {

namespace {

// A way not measured at a call's size is tried once when the model prices it within this factor
// of the best: the model's errors are its own (overlap, cores shared by ranks) and only a
// measurement settles them; beyond, the model is trusted (each try of a loser costs a call).
// Measured: 1.6x with two samples per explored way (so that the tree, which the model fitted to
// TCP prices 1.35-1.55x the ring over shared memory, gets tried) made the grid's timed rounds
// flip between ways whose times lie within the machine's noise: auto / best fixed median 1.063
// against 1.021 (bench/results/auto_grid.md, 2026-12-01). Exploring is not free in short runs.
constexpr double kExplore = 1.25;
// A candidate (exact, or one codec) none of whose ways is measured at a call's size is run at
// its best way when priced within this factor of the best; its other ways then only within
// kExplore. Beyond, the model is trusted: a try costs the way's warm-up call and its timed one,
// and on a slow link those are the calls a new job waits for (3 ranks, 1 Gbit/s, 48 MiB: when
// every way within 3x was run once, the star and the direct exchange, priced 1.5-3x the ring,
// ran 5-6 of the first 30 calls at 1.6-3x the ring's time, 20 % of those calls' total;
// bench/results/learning_n3_net-1gbit_before.md). So where the model is wrong it is fixed (cost.cc),
// not explored around.
constexpr double kCandidate = 1.5;
// A way measured fewer than kSamples times is measured again only while its price is within
// this factor of the best: a re-measurement costs the way's time, and one of a way priced 1.6x
// (the direct exchange above, its first time unlucky or not) is a call 1.6x slower.
constexpr double kResample = 1.2;
// An expired measurement (tuner.cc, kExpireCalls) is taken again under the same bound, by its
// price from the model and by the price it expired at: it is a re-measurement. Explored as
// unmeasured (kExplore, kCandidate), codec="auto" over 1 Gbit/s re-ran the compressed ring,
// measured 1.25-1.3x the running SRA, at that cost after each expiry. Exact while a codec runs
// (the baseline auto must not lose to) is bound by its price now alone, not the one it expired
// at: a link that recovered while a codec ran shows in the link figures the codec's calls teach,
// so the model's price of exact falls with it; the price it expired at would keep it out.
// The running way stays unless another is priced this much below it: two ways of about one
// speed otherwise trade places with the noise of their medians (4-5 % on this project's shared
// 2-core machines), and every switch costs a re-measurement and a refresh.
constexpr double kKeep = 1.05;

// The tree's pipeline is the one dense way whose model is too rough to teach the link figures
// (its time only calibrates itself); the star's root is priced through the host's share.
bool plain_dense(AllreduceAlgo a) { return a != AllreduceAlgo::Tree; }

// Sizes within a factor of 4 share their measurements (scaled by the model within the class).
int size_class(size_t bytes) { return bytes < 2 ? 0 : static_cast<int>(std::log2(static_cast<double>(bytes))) / 2; }

}  // namespace

cost::CodecSpeed Tuner::scaled(const std::string& name) const {
  cost::CodecSpeed s = codecs_.at(name);
  s.encode *= codec_scale_agreed_;
  s.decode *= codec_scale_agreed_;
  s.feedback *= codec_scale_agreed_;
  return s;
}

// A way not measured at this size is priced from what was: from its family's measured way (the
// same codec, or exact with another dense algorithm) scaled by the model's ratio of the two;
// without one, by the model times how much the measured ways of this size exceed their model
// (never below the model). So when the link slows down under a compressed choice, the exact
// ways -- priced from stale link figures -- carry the slowdown the codec's calls measured, and
// once one exact way has run, its siblings are priced from it: one try, not six.
double Tuner::price_unmeasured(const Ways& w, const std::vector<bool>& fresh, std::vector<double>& used) {
  std::vector<double> ratios;
  std::map<int, size_t> anchor;  // family -> its cheapest measured way
  for (size_t i = 0; i < used.size(); ++i) {
    if (!fresh[i]) continue;
    if (w.est[i].total > 0) ratios.push_back(used[i] / w.est[i].total);
    auto it = anchor.find(w.family[i]);
    if (it == anchor.end() || used[i] < used[it->second]) anchor[w.family[i]] = i;
  }
  double excess = 1;
  if (!ratios.empty()) {
    std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
    excess = std::max(1.0, ratios[ratios.size() / 2]);
  }
  for (size_t i = 0; i < used.size(); ++i) {
    if (fresh[i]) continue;
    auto it = anchor.find(w.family[i]);
    const size_t a = it == anchor.end() ? i : it->second;
    used[i] = a != i && w.est[a].total > 0 ? used[a] * w.est[i].total / w.est[a].total : w.est[i].total * excess;
  }
  return excess;
}

size_t Tuner::choose(const Shape& s, const Ways& w, std::vector<double>& used, std::string& key, bool& tried) {
  const std::string prefix =
      std::to_string(s.n) + (s.reduce_scatter ? "rs" : "ar") + std::to_string(size_class(s.bytes)) + ":";
  const bool calibrated = calibrate_ && s.n > 1 && s.observed;
  used.assign(w.names.size(), 0);
  std::vector<bool> fresh(w.names.size(), false);
  std::vector<size_t> samples(w.names.size(), 0);
  std::vector<double> expired(w.names.size(), 0);  // the price a way's measurement expired at (0: none)
  // A measurement taken at another size of the class, scaled to this one by the model.
  auto at_size = [&](size_t i, const Measured& m) {
    const double at = w.model_at(i, m.bytes);
    return m.seconds * (at > 0 ? w.est[i].total / at : 1.0);
  };
  for (size_t i = 0; i < w.names.size(); ++i) {
    used[i] = w.est[i].total;
    if (!calibrated) continue;
    auto it = measured_.find(prefix + w.names[i]);
    if (it == measured_.end()) {
      auto old = expired_.find(prefix + w.names[i]);
      if (old != expired_.end()) expired[i] = at_size(i, old->second);
      continue;
    }
    used[i] = at_size(i, it->second);
    fresh[i] = true;
    samples[i] = it->second.samples;
  }
  const double excess = calibrated ? price_unmeasured(w, fresh, used) : 1.0;
  size_t best = cost::pick(used);
  std::string& last = incumbent_[prefix];
  if (calibrated && !last.empty()) {
    const size_t inc = std::find(w.names.begin(), w.names.end(), last) - w.names.begin();
    if (inc < w.names.size() && fresh[inc] && used[inc] <= kKeep * used[best]) best = inc;
  }
  tried = false;                                     // chosen to be measured, not by its price
  if (calibrated && rerun_.rfind(prefix, 0) == 0) {  // the way whose untimed first call ran last here
    const size_t again = std::find(w.names.begin(), w.names.end(), rerun_.substr(prefix.size())) - w.names.begin();
    rerun_.clear();
    if (again < w.names.size()) best = again, tried = true;
  }
  if (calibrated && !tried && fresh[best]) {
    // A way wants a sample while it has fewer than kSamples and is priced within its room: 1.25x
    // for an unmeasured way, kResample for one with one or two times or an expired one.
    // Exact while a codec is priced best: the baseline (kResample's exception above; room below).
    auto baseline = [&](size_t i) { return w.family[i] == 0 && w.family[best] != 0; };
    bool exact_expired = false;  // the baseline's measurement expired: any exact way's run re-measures it
    for (size_t i = 0; i < w.names.size(); ++i) exact_expired = exact_expired || (w.family[i] == 0 && expired[i] > 0);
    auto wants = [&](size_t i, double room) {
      const double was = baseline(i) ? 0 : expired[i];
      if (was > 0 || (baseline(i) && exact_expired)) room = std::min(room, kResample);
      return i != best && samples[i] < kSamples && !pending_.count(prefix + w.names[i]) &&
             std::max(used[i], was) <= room * used[best];
    };
    // While a codec is priced best, an exact way the model finds plausible (its model times the
    // class's excess within kExplore of the best) gets its kSamples times whatever its first ones
    // say: a burst of other work can make one time 10x the way's median, and priced from it the
    // baseline lay beyond every room for 128 calls, its siblings with it (test_auto.py). Exact
    // only: sampling every codec's ways so costs two more calls of each where the model favours
    // codecs that lose; and not among the dense ways of algorithm="auto" (all exact).
    auto room = [&](size_t i) {
      if (samples[i] == 0) return kExplore;
      if (baseline(i) && w.est[i].total * excess <= kExplore * used[best])
        return std::numeric_limits<double>::infinity();
      return kResample;
    };
    // A candidate (a family: exact, or one codec) without a measured way is run first, at its
    // best way where priced within kCandidate, exact first: the baseline auto must not lose to
    // (priced unmeasured from the compressed ways' excess over their model, 2.4x at 64 KiB over
    // 1 Gbit/s with 3 ranks, it lay beyond kExplore, no other rule tried it, and q4 ran twice
    // exact's time for 40 calls); and a codec priced from exact's excess (exact slow at first, a
    // burst of other work) is otherwise never seen to win. After a lasting change (agree) the
    // same: priced from the exact ways' new excess, q4 lay at 2.4x its time after 10 -> 1 Gbit/s
    // and exact ran on. Again whenever its measurement expired or a change moved its price.
    const bool after_change = changed_classes_.count(prefix) > 0;
    // Per family (a candidate index, at most kFamilies): its cheapest way, and whether any of its
    // ways rests on samples (not priced from a change). Arrays: this runs on every call.
    constexpr int kFamilies = 16;
    std::array<size_t, kFamilies> family_best;
    family_best.fill(w.names.size());
    std::array<bool, kFamilies> measured_family{};
    for (size_t i = 0; i < w.names.size(); ++i) {
      const int f = w.family[i];
      measured_family[f] = measured_family[f] || (fresh[i] && samples[i] > 0);
      if (family_best[f] == w.names.size() || used[i] < used[family_best[f]]) family_best[f] = i;
    }
    size_t next = w.names.size();
    for (int f = 0; f < kFamilies && next == w.names.size(); ++f)  // exact (0) first
      if (family_best[f] < w.names.size() && !measured_family[f] && wants(family_best[f], kCandidate))
        next = family_best[f];
    const bool tour = next < w.names.size();
    if (after_change && !tour) changed_classes_.erase(prefix);  // every candidate measured (or out of reach)
    for (size_t i = 0; i < w.names.size() && next == w.names.size(); ++i)
      if (wants(i, room(i))) next = i;
    if (next < w.names.size()) {
      best = next;
      tried = true;
      std::lock_guard<std::mutex> lock(mu_);
      ++(tour ? tours_ : explorations_);
    }
  }
  key = prefix + w.names[best];
  if (calibrated) {
    if (!warmed_.count(key)) {
      rerun_ = key;  // this call warms it, untimed; the next of the class runs it again, timed
    } else if (tried || !fresh[best]) {
      pending_.insert(key);  // agree its sample at once: it decides
    } else if (!last.empty() && last != w.names[best]) {
      // A switch by price to a way measured earlier: its price may rest on old lucky samples
      // (of the ~10 ways of codec="auto" at 64 KiB, the least of their frozen prices beat the
      // running way's at almost every refresh). So it is re-measured: at the next refresh its
      // price is what it took since the switch, and that refresh comes once it has kSamples
      // times (where that costs little: maybe_refresh), not up to kMaxCalls later: after a link
      // slowed from 10 to 1 Gbit/s (256 KiB, 4 ranks), the switch to exact, priced 2.5 ms from
      // before the change, ran 16 calls of 5-7 ms before the refresh that corrected it.
      remeasure_[key] = seconds_[key].size();
      switched_ = true;
    }
  }
  // A try is no switch: the call after it returns to the running way without re-measuring it.
  if (!tried) last = w.names[best];
  return best;
}

Tuner::Plan Tuner::dense(Comm& c, const Shape& s) {
  maybe_refresh(c, nullptr);
  const std::vector<AllreduceAlgo>& algos = cost::dense_candidates();
  Ways w;
  for (AllreduceAlgo a : algos) {
    w.family.push_back(0);  // one family: exact
    w.names.push_back(algorithm_name(a));
    w.est.push_back(cost::dense_allreduce(a, s.bytes, s.n, link_));
  }
  w.model_at = [&](size_t i, size_t bytes) { return cost::dense_allreduce(algos[i], bytes, s.n, link_).total; };
  Plan p;
  std::vector<double> used;
  const size_t i = choose(s, w, used, p.key, p.tried);
  p.way = w.names[i];
  p.dense = algos[i];
  p.teaches_link = plain_dense(p.dense);
  p.est = w.est[i];
  p.predicted = used[i];
  p.bytes = s.bytes;
  std::map<std::string, double> by_used, by_model;
  for (size_t j = 0; j < algos.size(); ++j) by_used[w.names[j]] = used[j], by_model[w.names[j]] = w.est[j].total;
  chose(p, w.names[i], true, std::move(by_used), std::move(by_model));
  return p;
}

Tuner::Plan Tuner::codec(Comm& c, const Shape& s, const std::vector<CodecCandidate>& candidates,
                         CompressedAlgo requested, AllreduceAlgo dense_requested, bool feedback, size_t topk_block) {
  maybe_refresh(c, &candidates);
  std::vector<codec::Spec> specs;
  std::vector<cost::CodecSpeed> speeds;
  for (const CodecCandidate& cand : candidates) {
    specs.push_back(cand.spec);
    speeds.push_back(cand.spec.kind == codec::Kind::None ? cost::CodecSpeed{} : scaled(cand.name));
  }
  const cost::Problem prob{s.bytes, s.n, s.reduce_scatter, feedback, requested, dense_requested, topk_block};
  const std::vector<cost::Option> opts = cost::codec_options(specs, speeds, prob, link_);
  Ways w;
  for (const cost::Option& o : opts) {
    const bool exact = specs[o.candidate].kind == codec::Kind::None;
    w.family.push_back(static_cast<int>(o.candidate));
    w.names.push_back(candidates[o.candidate].name + "/" +
                      (exact ? algorithm_name(o.dense) : compressed_algo_name(o.algo)));
    w.est.push_back(o.est);
  }
  w.model_at = [&](size_t i, size_t bytes) {
    cost::Problem q = prob;
    q.bytes = bytes;
    const cost::Option& o = opts[i];
    return cost::predict(specs[o.candidate], o.algo, o.dense, q, link_, speeds[o.candidate]).total;
  };
  Plan p;
  std::vector<double> used;
  const size_t i = choose(s, w, used, p.key, p.tried);
  p.way = w.names[i];
  p.codec = opts[i].candidate;
  p.algo = opts[i].algo;
  p.dense = opts[i].dense;
  p.teaches_link = specs[p.codec].kind == codec::Kind::None ? plain_dense(p.dense) : p.algo != CompressedAlgo::Sparse;
  p.est = opts[i].est;
  p.predicted = used[i];
  p.bytes = s.bytes;
  const CodecCandidate& chosen = candidates[p.codec];
  if (chosen.spec.kind != codec::Kind::None) {  // what the micro-benchmarks alone predict: observe() scales it
    p.codec_raw = cost::predict(chosen.spec, p.algo, p.dense, prob, link_, codecs_.at(chosen.name)).compute;
    if (resolve_compressed(chosen.spec, p.algo) == CompressedAlgo::Sra) {  // agreed figures: alike on every rank
      p.segment_elems = cost::sra_segment_elems(p.est);
      p.lag = cost::sra_lag(p.est, link_);
    }
  }
  std::map<std::string, double> by_used, by_model;  // per candidate: its best way
  for (size_t j = 0; j < opts.size(); ++j) {
    const std::string& name = candidates[opts[j].candidate].name;
    auto keep_min = [&](std::map<std::string, double>& m, double v) {
      auto it = m.find(name);
      if (it == m.end() || v < it->second) m[name] = v;
    };
    keep_min(by_used, used[j]);
    keep_min(by_model, w.est[j].total);
  }
  chose(p, chosen.name, false, std::move(by_used), std::move(by_model));
  return p;
}

void Tuner::chose(const Plan& p, const std::string& choice, bool dense, std::map<std::string, double> used,
                  std::map<std::string, double> model) {
  ++since_;
  predicted_since_ += p.predicted;
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  ++(dense ? summary_.algorithm_choices : summary_.codec_choices)[choice];
  ++summary_.way_choices[p.way];
  summary_.last = {p.bytes, choice, p.way, p.tried, p.segment_elems, std::move(used), std::move(model)};
}

}  // namespace ringzip
