// The group's cost-model parameters: probe, agreement across ranks, choices and refinement
// from real calls (tuner.h; docs/algorithms.md, "Choosing: the cost model").
#include "backend/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace ringzip {

const char* algorithm_name(AllreduceAlgo a);  // backend.cc

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Tag steps of the probe and the agreement: above every algorithm's, below the fingerprint
// exchange's (backend/fingerprint.cc); the tag key keeps mismatched calls apart as usual.
constexpr uint32_t kProbeStep = 0xFFE0, kGatherStep = 0xFFE8, kResultStep = 0xFFE9;
constexpr size_t kWindow = 5;          // samples per estimate: the median of 5 shrugs off 2 outliers
constexpr size_t kProbeBytes = 1 << 20;
// A refresh costs about one small star all-reduce: after at least kMinCalls calls, refresh once
// the calls since the last one were predicted to take kCostRatio times that (so it costs ~2 %),
// and at the latest after kMaxCalls calls (a change of the link shows within 20 calls).
constexpr uint64_t kMinCalls = 4, kMaxCalls = 16;
constexpr double kCostRatio = 50;

void push(std::deque<double>& w, double x) {
  if (!std::isfinite(x) || x <= 0) return;
  w.push_back(x);
  if (w.size() > kWindow) w.pop_front();
}

double median(std::deque<double> w, double fallback) {
  if (w.empty()) return fallback;
  std::sort(w.begin(), w.end());
  const size_t m = w.size() / 2;
  return w.size() % 2 ? w[m] : 0.5 * (w[m - 1] + w[m]);
}

// One ring step (send to the right, receive from the left) of `bytes`; this rank's seconds.
double ring_step(Comm& c, std::vector<uint8_t>& out, std::vector<uint8_t>& in, size_t bytes, uint32_t step) {
  const int n = c.size(), right = (c.rank() + 1) % n, left = (c.rank() + n - 1) % n;
  const auto t0 = Clock::now();
  auto rq = c.post_recv(in.data(), bytes, left, c.tag(step));
  auto sq = c.post_send(out.data(), bytes, right, c.tag(step));
  c.wait(*rq, left, "auto-tuning probe: receive from");
  c.wait(*sq, right, "auto-tuning probe: send to");
  return since(t0);
}

}  // namespace

void Tuner::probe(Comm& c) {
  std::vector<uint8_t> out(kProbeBytes, 0), in(kProbeBytes);
  ring_step(c, out, in, 8, kProbeStep);  // lines the ranks up: the timed rounds start together
  for (uint32_t i = 1; i <= 3; ++i) push(alpha_, ring_step(c, out, in, 8, kProbeStep + i));
  // Twice: a shaped link lets its burst through at full speed first.
  double big = ring_step(c, out, in, kProbeBytes, kProbeStep + 4);
  big = std::max(big, ring_step(c, out, in, kProbeBytes, kProbeStep + 5));
  push(inv_bw_, (big - median(alpha_, 0)) / kProbeBytes);
}

void Tuner::agree(Comm& c, const std::vector<CodecCandidate>* candidates) {
  std::vector<std::string> names;
  const auto inj = injected();
  std::vector<double> v = {inj ? inj->first : median(alpha_, link_.alpha),
                           inj ? inj->second : median(inv_bw_, link_.inv_bw), host_reduce_speed(),
                           median(codec_scale_, 1.0)};
  for (size_t i = 0; candidates && i < candidates->size(); ++i) {
    const CodecCandidate& cand = (*candidates)[i];
    if (cand.spec.kind == codec::Kind::None) continue;
    const cost::CodecSpeed s = host_codec_speed(cand.spec);
    names.push_back(cand.name);
    v.insert(v.end(), {s.encode, s.decode, s.feedback});
  }
  const int n = c.size();
  if (n > 1) {  // star: rank 0 averages in rank order and sends its bits to all
    const size_t bytes = v.size() * sizeof(double);
    if (c.rank() == 0) {
      std::vector<std::vector<double>> all(n, std::vector<double>(v.size()));
      for (int j = 1; j < n; ++j) {
        auto rq = c.post_recv(all[j].data(), bytes, j, c.tag(kGatherStep));
        c.wait(*rq, j, "auto-tuning agreement: receive from");
      }
      all[0] = v;
      for (size_t i = 0; i < v.size(); ++i) {
        double sum = 0;
        for (int j = 0; j < n; ++j) sum += all[j][i];
        v[i] = sum / n;
      }
      std::vector<std::unique_ptr<Request>> sends;
      for (int j = 1; j < n; ++j) sends.push_back(c.post_send(v.data(), bytes, j, c.tag(kResultStep)));
      for (int j = 1; j < n; ++j) c.wait(*sends[j - 1], j, "auto-tuning agreement: send to");
    } else {
      auto sq = c.post_send(v.data(), bytes, 0, c.tag(kGatherStep));
      auto rq = c.post_recv(v.data(), bytes, 0, c.tag(kResultStep));
      c.wait(*rq, 0, "auto-tuning agreement: receive from");
      c.wait(*sq, 0, "auto-tuning agreement: send to");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  link_ = cost::Link{v[0], v[1], v[2]};
  codec_scale_agreed_ = v[3];
  for (size_t i = 0; i < names.size(); ++i) codecs_[names[i]] = {v[4 + 3 * i], v[5 + 3 * i], v[6 + 3 * i]};
  ++refreshes_;
  since_ = 0;
  predicted_since_ = 0;
}

void Tuner::maybe_refresh(Comm& c, const Shape&, const std::vector<CodecCandidate>* candidates) {
  bool missing = false;  // a codec the agreed table lacks (the options changed): measure it now
  for (size_t i = 0; candidates && i < candidates->size(); ++i)
    missing = missing || ((*candidates)[i].spec.kind != codec::Kind::None && !codecs_.count((*candidates)[i].name));
  if (!probed_) {
    if (c.size() > 1) probe(c);
    probed_ = true;
    return agree(c, candidates);
  }
  const double cost = cost::dense_allreduce(AllreduceAlgo::Star, 64, c.size(), link_).total;
  if (missing || since_ >= kMaxCalls || (since_ >= kMinCalls && predicted_since_ >= kCostRatio * cost))
    agree(c, candidates);
}

cost::CodecSpeed Tuner::scaled(const std::string& name) const {
  cost::CodecSpeed s = codecs_.at(name);
  s.encode *= codec_scale_agreed_;
  s.decode *= codec_scale_agreed_;
  s.feedback *= codec_scale_agreed_;
  return s;
}

Tuner::Plan Tuner::dense(Comm& c, const Shape& s) {
  maybe_refresh(c, s, nullptr);
  Plan p;
  std::map<std::string, double> predicted;
  if (s.reduce_scatter) {
    p.est = cost::dense_reduce_scatter(s.bytes, s.n, link_);
  } else {
    bool first = true;
    for (AllreduceAlgo a : cost::dense_candidates()) {
      const cost::Estimate e = cost::dense_allreduce(a, s.bytes, s.n, link_);
      predicted[algorithm_name(a)] = e.total;
      if (first || e.total < p.est.total) p.dense = a, p.est = e, first = false;
    }
  }
  chose(p, algorithm_name(p.dense), last_.algorithm_choices, s.bytes, std::move(predicted));
  return p;
}

Tuner::Plan Tuner::codec(Comm& c, const Shape& s, const std::vector<CodecCandidate>& candidates,
                         CompressedAlgo requested, AllreduceAlgo dense_requested, bool feedback) {
  maybe_refresh(c, s, &candidates);
  std::vector<codec::Spec> specs;
  std::vector<cost::CodecSpeed> speeds;
  for (const CodecCandidate& cand : candidates) {
    specs.push_back(cand.spec);
    speeds.push_back(cand.spec.kind == codec::Kind::None ? cost::CodecSpeed{} : scaled(cand.name));
  }
  const cost::Problem prob{s.bytes, s.n, s.reduce_scatter, feedback, requested, dense_requested};
  const cost::Choice ch = cost::choose_codec(specs, speeds, prob, link_);
  Plan p;
  p.dense = ch.dense;
  p.codec = ch.index;
  p.algo = ch.algo;
  p.est = ch.est;
  const CodecCandidate& chosen = candidates[ch.index];
  if (chosen.spec.kind != codec::Kind::None)  // what the micro-benchmarks alone predict: observe() scales it
    p.codec_raw = cost::predict(chosen.spec, ch.algo, ch.dense, prob, link_, codecs_.at(chosen.name)).compute;
  std::map<std::string, double> predicted;
  for (size_t i = 0; i < candidates.size(); ++i) predicted[candidates[i].name] = ch.predicted[i];
  chose(p, chosen.name, last_.codec_choices, s.bytes, std::move(predicted));
  return p;
}

void Tuner::chose(const Plan& p, const std::string& choice, std::map<std::string, uint64_t>& counts, size_t bytes,
                  std::map<std::string, double> predicted) {
  ++since_;
  predicted_since_ += p.est.total;
  std::lock_guard<std::mutex> lock(mu_);
  ++calls_;
  ++counts[choice];
  last_.last_bytes = bytes;
  last_.last_choice = choice;
  last_.last_predicted = std::move(predicted);
}

void Tuner::observe(const Plan& p, double seconds, double codec_seconds) {
  const cost::Estimate& e = p.est;
  if (injected() || e.total <= 0) return;
  if (p.codec_raw > 0 && codec_seconds > 0) push(codec_scale_, codec_seconds / p.codec_raw);
  const double C = p.codec_raw > 0 ? codec_seconds : e.compute, R = seconds - e.latency, keep = 1 - e.overlap;
  if (e.wire_bytes > 0 && e.wire >= 0.25 * e.total) {  // the link's rate shows in this call
    double W = R - keep * C;              // wire-bound: the codec's unhidden part adds to the wire
    if (W < C) W = keep > 0.05 ? (R - C) / keep : 0;  // codec-bound: the wire's unhidden part adds
    push(inv_bw_, W / e.wire_bytes);
  }
  if (e.messages > 0 && e.latency >= 0.4 * e.total) {  // so does the per-message cost
    const double W = e.wire, rest = std::max(W, C) + keep * std::min(W, C);
    push(alpha_, (seconds - rest) / e.messages);
  }
}

void Tuner::inject(std::optional<std::pair<double, double>> link) {
  std::lock_guard<std::mutex> lock(mu_);
  injected_ = link;
}

std::optional<std::pair<double, double>> Tuner::injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_;
}

Tuner::Summary Tuner::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  Summary s = last_;
  s.calls = calls_;
  s.refreshes = refreshes_;
  s.link = link_;
  s.codec_scale = codec_scale_agreed_;
  s.codecs = codecs_;
  return s;
}

}  // namespace ringzip
