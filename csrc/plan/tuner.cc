// The group's cost-model parameters: probe, agreement across ranks, choices and refinement
// from real calls (tuner.h; docs/algorithms.md, "Choosing: the cost model").
#include "plan/tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace ringzip {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Tag steps of the probe and the agreement: above every algorithm's, below the fingerprint
// exchange's (backend/fingerprint.cc); the tag key keeps mismatched calls apart as usual.
constexpr uint32_t kProbeStep = 0xFFC0, kGatherStep = 0xFFE8, kResultStep = 0xFFE9;  // probe: 0xFFC0-0xFFDF
// Up to this many ranks the agreement is an exchange between every pair (agree()).
constexpr int kExchangeRanks = 16;
// Samples per estimate, and the estimate is their least: on a machine shared with other work a
// call is only ever slowed down (measured: single 64 KiB calls from 1.1 to 42 ms at a load of
// 17 on 2 cores), so the least of the last three is the undisturbed figure, for every way alike;
// a lasting change (a slower link) shows after three calls.
constexpr size_t kWindow = 3;
constexpr size_t kProbeBytes = 1 << 20;
// A refresh costs what the last one took (agreed; at least a small star all-reduce's price):
// after at least kMinCalls calls, refresh once the calls since the last one were predicted to
// take kCostRatio times that (so it costs ~1 %), and at the latest after kMaxCalls calls (a
// change of the link shows within 20 calls: seen at the first refresh after three of its calls,
// confirmed three calls later, kChange). The model's star price alone was 7x below what a
// refresh took with 3 ranks on 2 cores (27 vs ~190 us), which refreshed every 4th 4 MiB call.
constexpr uint64_t kMinCalls = 4, kMaxCalls = 12;
constexpr double kCostRatio = 100;
// After a switch by price, the refresh that re-measures the new way comes once it ran
// kSamples times if those calls were predicted to take this many times a refresh (so it costs
// at most ~10 % of them; not at 64 KiB over shared memory, where a refresh costs a call).
constexpr double kSwitchCostRatio = 10;
// Calls a measurement stays valid without a new sample. Counted in calls, not refreshes: each
// exploration brings a refresh, so an expiry in refreshes re-explored every plausible way every
// ~16 calls at 64 KiB (6 % of the calls each ran a slower way).
constexpr uint64_t kExpireCalls = 128;
// A lasting change: the running way's agreed price (a median of five on its slowest rank, so a
// burst of other work must hit three of its calls) grew by this factor between two refreshes.
// Then the link or the host changed under every way of that size class, and the other ways'
// prices, measured before, are stale: kept, after 10 -> 1 Gbit/s (256 KiB, 4 ranks) the star's
// price from 10 Gbit/s (2.3 ms) beat the tree's new one and ran 16 calls of 7-15 ms. Expired
// instead, they were priced from the model times the running way's new excess, which put q4 at
// 3x its time and kept exact for 13 calls. So each moves by what the change added per byte
// through the link (the running way's added seconds over its bytes, times the way's own bytes:
// q4, with an eighth of exact's bytes, gains an eighth of its slowdown), never further than the
// running way moved, and wants new samples; and every candidate is run once (tuner_choice.cc).
// 1.5 followed no sooner in 10 -> 1 Gbit/s runs and saw more false changes (5 of 12 runs, not 3).
// A way that got faster is not followed so: that needs no immediate move (expiry, kExpireCalls,
// finds a faster way), and a way's first times at a size class settling downward (warm-up) would
// move every price down.
// A jump is acted on when the refresh after its size class's next kSamples timed calls still
// finds it (its price still kChange x the old one): at 64 KiB a burst of other work hit three of five calls
// often enough that 8 of 16 grid cells (a link that never changed, two runs) saw a change, and
// each change's tour ran every candidate once in the timed calls (auto 1.4-2.2x exact there).
constexpr double kChange = 2.0;
// The way a jump made the choice switch to had none of the jump's time in its price, so less of
// a rise confirms the change: after 10 -> 1 Gbit/s at 256 KiB (4 ranks) the star jumped 3x, the
// hd it switched to rose 1.5x (its 10 Gbit/s price 3.4 ms, then 5.1 ms) and, with kChange asked
// of it too, exact ran 40 calls on where the codecs took 3.6-4.7 ms (1 of 5 follow runs; in
// another q4 jumped and exact, switched to, held the rest). A burst that passed leaves it ~1x.
constexpr double kSwitchedRise = 1.4;
// A way's calibration price is the median of its last five times. Not an optimistic order
// statistic (the least, the second least): those fall with the number of samples, so a way
// tried once or twice was compared with the running way's second least of five on unequal
// terms, and among ~10 ways the least of their frozen prices beat the running way's at almost
// every refresh. The median estimates the same figure from any count; a burst of other work
// moves it only when it hits most of the five calls.
constexpr size_t kTimes = 5;

void keep_last(std::deque<double>& w, double x, size_t n) {
  w.push_back(x);
  if (w.size() > n) w.pop_front();
}

void push(std::deque<double>& w, double x) {
  if (std::isfinite(x) && x > 0) keep_last(w, x, kWindow);
}

// A calibration key's size class ("<n><ar|rs><class>:"), the part before its way's name.
std::string size_class_of(const std::string& key) { return key.substr(0, key.find(':') + 1); }

double least(const std::deque<double>& w, double fallback) {
  return w.empty() ? fallback : *std::min_element(w.begin(), w.end());
}

double way_price(const std::deque<double>& w) {
  if (w.empty()) return 0;
  std::vector<double> s(w.begin(), w.end());
  std::sort(s.begin(), s.end());
  return s[(s.size() - 1) / 2];
}

// One ring step (send to the right, receive from the left) of `bytes`; this rank's seconds.
// The buffers are in the compute's memory (a device's transport moves device memory), and the
// clock stops once the compute ran what the waits queued.
double ring_step(Comm& c, uint8_t* out, uint8_t* in, size_t bytes, uint32_t step) {
  const int n = c.size(), right = (c.rank() + 1) % n, left = (c.rank() + n - 1) % n;
  const auto t0 = Clock::now();
  auto rq = c.post_recv(in, bytes, left, c.tag(step));
  auto sq = c.post_send(out, bytes, right, c.tag(step));
  c.wait(*rq, left, "auto-tuning probe: receive from");
  c.wait(*sq, right, "auto-tuning probe: send to");
  c.dev.sync();
  return since(t0);
}

// The peer `k` places after this rank (k = 1 .. n-1): exchange_step's order.
int peer_after(const Comm& c, int k) { return (c.rank() + k) % c.size(); }

// Every rank sends `bytes` to every other at once; the message of peer_after(k) lands at
// in + (k - 1) * bytes. Untimed in the probe, where it opens the windows of a long link's new
// connections; the agreement's exchange of figures.
void exchange_step(Comm& c, uint8_t* out, uint8_t* in, size_t bytes, uint32_t step, bool agreement = false) {
  const int n = c.size();
  const char* recv_what = agreement ? "auto-tuning agreement: receive from" : "auto-tuning probe: receive from";
  const char* send_what = agreement ? "auto-tuning agreement: send to" : "auto-tuning probe: send to";
  std::vector<std::unique_ptr<Request>> recvs, sends;
  for (int k = 1; k < n; ++k) recvs.push_back(c.post_recv(in + (k - 1) * bytes, bytes, peer_after(c, k), c.tag(step)));
  for (int k = 1; k < n; ++k) sends.push_back(c.post_send(out, bytes, peer_after(c, k), c.tag(step)));
  for (int k = 1; k < n; ++k) c.wait(*recvs[k - 1], peer_after(c, k), recv_what);
  for (int k = 1; k < n; ++k) c.wait(*sends[k - 1], peer_after(c, k), send_what);
  c.dev.sync();
}

// Every rank sends `bytes` to rank 0, which answers each with 8 bytes once it has all: rank 0's
// link carries n-1 buffers, and every rank's time ends when rank 0's does.
double gather_step(Comm& c, uint8_t* out, uint8_t* in, size_t bytes, uint32_t step) {
  const int n = c.size();
  const auto t0 = Clock::now();
  if (c.rank() == 0) {
    std::vector<std::unique_ptr<Request>> q;
    for (int j = 1; j < n; ++j) q.push_back(c.post_recv(in + (j - 1) * bytes, bytes, j, c.tag(step)));
    for (int j = 1; j < n; ++j) c.wait(*q[j - 1], j, "auto-tuning probe: receive from");
    q.clear();
    for (int j = 1; j < n; ++j) q.push_back(c.post_send(out, 8, j, c.tag(step + 16)));
    for (int j = 1; j < n; ++j) c.wait(*q[j - 1], j, "auto-tuning probe: send to");
  } else {
    auto sq = c.post_send(out, bytes, 0, c.tag(step));
    auto rq = c.post_recv(in, 8, 0, c.tag(step + 16));
    c.wait(*rq, 0, "auto-tuning probe: receive from");
    c.wait(*sq, 0, "auto-tuning probe: send to");
  }
  c.dev.sync();
  return since(t0);
}

// Link::inv_window as this rank's transport has it: a round trip per window of bytes to a peer
// (only a long link's: below Transport::kLongRoundTrip a window carries more than any link
// here), or the peer's share of a paced link (Options.link_gbit), whichever is slower.
double window_seconds_per_byte(Comm& c) {
  const double rtt = c.net.round_trip(), window = c.net.window_bytes(), paced = c.net.peer_rate();
  const double by_window = rtt >= Transport::kLongRoundTrip && window > 0 ? rtt / window : 0.0;
  return std::max(by_window, paced > 0 ? 1.0 / paced : 0.0);
}

}  // namespace

void Tuner::probe(Comm& c) {
  const int n = c.size();
  const bool long_link = c.net.long_link();
  const double paced = c.net.peer_rate() * (n - 1);  // what this rank may send to all its peers at once
  if (paced > 0) push(inv_bw_, 1.0 / paced);
  if (long_link && paced > 0) {
    // Over a long link whose rate the user gave, every figure the rounds would time is known:
    // the rate, and a message's latency, half the round trip the kernel measured (there the
    // 8-byte ring rounds time that and nothing else: four one-way delays of a group's first call).
    probe_alpha_ = c.net.round_trip() / 2;
    return;
  }
  const auto t0 = Clock::now();
  const std::shared_ptr<uint8_t> out_buf = c.dev.alloc(kProbeBytes), in_buf = c.dev.alloc(kProbeBytes * (n - 1));
  c.dev.zero(out_buf.get(), kProbeBytes);
  uint8_t *out = out_buf.get(), *in = in_buf.get();
  ring_step(c, out, in, 8, kProbeStep);  // lines the ranks up: the timed rounds start together
  std::deque<double> small, big, gather_small, gather_big;
  for (uint32_t i = 1; i <= 3; ++i) small.push_back(ring_step(c, out, in, 8, kProbeStep + i));
  // Over a long link a new connection's megabyte waits for its window to open, a round trip at
  // a time, and the large rounds time that: at RTT 100 ms on a 1 Gbit/s link the ring rounds
  // agreed 14-48 MB/s of "host" copies and the gathers to rank 0, over connections that had
  // carried nothing, 0.21-0.59 Gbit/s, which priced the direct exchange's 3 MiB at 1 MiB above
  // SRA's two rounds. There the ring rounds teach no host figure (it stays unset until a call
  // the hosts' copies bound teaches it) and only open their connections, and one untimed
  // exchange between every pair and one untimed gather open the gathers' before they are timed
  // (with less of that opening, the gathers agreed 0.2 Gbit/s again). A link whose rate the user
  // gave (Options.link_gbit: the connections are paced to it) needs no gathers.
  if (!long_link) {
    // The first large round is not timed: a fresh connection's first megabyte (TCP windows
    // growing) and a shaped link's burst would both mislead.
    ring_step(c, out, in, kProbeBytes, kProbeStep + 4);
    for (uint32_t i = 5; i <= 7; ++i) big.push_back(ring_step(c, out, in, kProbeBytes, kProbeStep + i));
  }
  if (paced <= 0) {
    if (long_link) {
      exchange_step(c, out, in, kProbeBytes, kProbeStep + 12);
      gather_step(c, out, in, kProbeBytes, kProbeStep + 13);
    }
    for (uint32_t i = 8; i <= 9; ++i) gather_small.push_back(gather_step(c, out, in, 8, kProbeStep + i));
    for (uint32_t i = 10; i <= 11; ++i) gather_big.push_back(gather_step(c, out, in, kProbeBytes, kProbeStep + i));
    push(inv_bw_, (least(gather_big, 0) - least(gather_small, 0)) / (static_cast<double>(n - 1) * kProbeBytes));
  }
  // Where sends are eager a rank that entered a round late finds its message there already, so
  // these rounds time the hosts' cost, not the link's delay: the transport's measured round trip
  // supplies that (half of it per message).
  probe_alpha_ = std::max(least(small, 0), c.net.round_trip() / 2);
  // A ring round moves one buffer per rank, on every rank's link at once: what the host copies
  // per rank. A gather moves n-1 buffers through rank 0's link alone.
  if (!long_link) push(inv_host_, (least(big, 0) - least(small, 0)) / kProbeBytes);
  std::lock_guard<std::mutex> lock(mu_);  // summary() reads it from any thread
  probe_seconds_ = since(t0);
}

void Tuner::agree(Comm& c, const std::vector<CodecCandidate>* candidates) {
  const auto t0 = Clock::now();
  std::vector<std::string> names;
  const auto inj = injected();
  bool told_times;
  {
    std::lock_guard<std::mutex> lock(mu_);
    told_times = !injected_times_.empty();
  }
  // Injected link figures alone: the model decides; with injected times too, they calibrate it.
  const bool model_only = inj && !told_times;
  // A link figure this rank has no sample of (a probe whose large and small rounds came out
  // the wrong way round) is offered as none: the ranks that measured decide. Offering the last
  // agreed value instead made the mean drift toward the others' at every refresh with no new
  // sample (3 ranks on one host under ASan: 16.7, 26.1, then 32.2 Gbit/s in 16 calls).
  const double none = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v = {inj ? inj->first : (probe_alpha_ > 0 ? probe_alpha_ : none),
                           inj ? inj->second : least(inv_bw_, none),
                           reduce_speed(c),
                           least(codec_scale_, 1.0),
                           model_only ? 1.0 : 0.0,
                           inj ? 0.0 : least(inv_host_, none),
                           agree_seconds_,
                           inj ? 0.0 : way_price(call_),
                           inj ? 0.0 : launch_seconds(c),
                           inj ? 0.0 : window_seconds_per_byte(c)};
  constexpr size_t kFixed = 10, kCall = 7, kLaunch = 8, kWindow = 9;
  for (const auto& [key, old] : remeasure_) {  // every rank switched at the same call
    std::deque<double>& w = seconds_[key];
    if (w.size() > old) w.erase(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(old));
  }
  remeasure_.clear();
  switched_ = false;
  for (size_t i = 0; candidates && i < candidates->size(); ++i) {
    const CodecCandidate& cand = (*candidates)[i];
    if (cand.spec.kind == codec::Kind::None) continue;
    const cost::CodecSpeed s = codec_speed(c, cand);
    names.push_back(cand.name);
    v.insert(v.end(), {s.encode, s.decode, s.feedback});
  }
  // Every rank ran the same calls, so every rank holds the same calibration keys, in map order.
  const size_t first_price = v.size();
  for (const auto& [key, w] : seconds_) v.insert(v.end(), {way_price(w), static_cast<double>(w.size())});
  const int n = c.size();
  // The ranks' figures into one: a way's price is its slowest rank's (a call is over when every
  // rank is done: the ranks' mean priced the star and the tree, whose ranks finish far apart, at
  // 0.2-0.4x the call -- 256 KiB, 1 Gbit/s, 4 ranks: star priced 1.7 ms, its calls took ~8 ms --,
  // so after the link slowed they kept running); the other figures are the ranks' mean. In rank
  // order: whoever combines gets the same bits.
  auto combine = [&](const std::vector<std::vector<double>>& all) {
    for (size_t i = 0; i < v.size(); ++i) {
      const bool price = i == kCall || (i >= first_price && (i - first_price) % 2 == 0);
      double sum = 0, most = 0;
      int offered = 0;
      for (int j = 0; j < n; ++j) {
        if (std::isnan(all[j][i])) continue;
        sum += all[j][i], most = std::max(most, all[j][i]), ++offered;
      }
      v[i] = offered == 0 ? none : price ? most : sum / offered;
    }
  };
  if (n > 1) {
    // Through the compute's memory (a device's transport moves device memory; on the host
    // these copies are the only cost, a few hundred bytes). Up to kExchangeRanks ranks every
    // rank sends its figures to every other and combines them itself: one message delay, where
    // rank 0's gather and answer cost two (over a 100 ms link, a round trip at every refresh,
    // and a group's first call pays one). More ranks: rank 0 combines and sends its bits to all
    // (n-1 messages each way, not n(n-1)). The size decides: every rank takes the same way.
    const size_t bytes = v.size() * sizeof(double);
    const std::shared_ptr<uint8_t> buf = c.dev.alloc(bytes * static_cast<size_t>(n));
    uint8_t* mine = buf.get();
    std::vector<std::vector<double>> all(n, std::vector<double>(v.size()));
    all[c.rank()] = v;
    if (n <= kExchangeRanks) {  // this rank's figures first, then the others' in exchange order
      c.dev.to_device(mine, v.data(), bytes);
      exchange_step(c, mine, mine + bytes, bytes, kGatherStep, true);
      for (int k = 1; k < n; ++k) c.dev.to_host(all[peer_after(c, k)].data(), mine + k * bytes, bytes);
      combine(all);
    } else if (c.rank() == 0) {
      // Every receive posted before the first wait: over Gloo's TCP a message moves only once
      // its receive is posted, so one at a time the gather took n-1 round trips in turn.
      std::vector<std::unique_ptr<Request>> recvs;
      for (int j = 1; j < n; ++j) recvs.push_back(c.post_recv(mine + j * bytes, bytes, j, c.tag(kGatherStep)));
      for (int j = 1; j < n; ++j) c.wait(*recvs[j - 1], j, "auto-tuning agreement: receive from");
      for (int j = 1; j < n; ++j) c.dev.to_host(all[j].data(), mine + j * bytes, bytes);
      combine(all);
      c.dev.to_device(mine, v.data(), bytes);
      std::vector<std::unique_ptr<Request>> sends;
      for (int j = 1; j < n; ++j) sends.push_back(c.post_send(mine, bytes, j, c.tag(kResultStep)));
      for (int j = 1; j < n; ++j) c.wait(*sends[j - 1], j, "auto-tuning agreement: send to");
      c.dev.sync();
    } else {
      uint8_t* agreed = mine + bytes;
      c.dev.to_device(mine, v.data(), bytes);
      auto sq = c.post_send(mine, bytes, 0, c.tag(kGatherStep));
      auto rq = c.post_recv(agreed, bytes, 0, c.tag(kResultStep));
      c.wait(*rq, 0, "auto-tuning agreement: receive from");
      c.wait(*sq, 0, "auto-tuning agreement: send to");
      c.dev.to_host(v.data(), agreed, bytes);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++refreshes_;
  known_ = true;
  auto agreed_or = [](double x, double before) { return std::isnan(x) ? before : x; };  // none measured: as before
  link_ = cost::Link{agreed_or(v[0], link_.alpha), agreed_or(v[1], link_.inv_bw), v[2], agreed_or(v[5], link_.inv_host),
                     v[kCall], v[kLaunch], v[kWindow]};
  codec_scale_agreed_ = v[3];
  refresh_seconds_ = v[6];
  calibrate_ = v[4] == 0;  // a rank with injected figures: the model alone decides
  size_t at = kFixed;
  for (const std::string& name : names) {
    codecs_[name] = {v[at], v[at + 1], v[at + 2]};
    at += 3;
  }
  const std::map<std::string, double> running = running_prices();
  for (const auto& [key, w] : seconds_) {
    Measured& m = measured_[key];
    m.seconds = v[at++];
    m.samples = static_cast<size_t>(v[at++]);  // the ranks' mean count, floored: agreed bits
    m.bytes = sample_bytes_[key];
    m.wire = sample_wire_[key];
    if (dirty_.count(key)) m.stamp = calls_;
    expired_.erase(key);  // measured again
  }
  follow_changes(running);
  for (auto it = measured_.begin(); it != measured_.end();) {  // stale: measure again when plausible
    if (calls_ - it->second.stamp <= kExpireCalls) {
      ++it;
      continue;
    }
    if (it->second.samples > 0) expired_[it->first] = it->second;  // a price moved by a change is a guess
    seconds_.erase(it->first);
    sample_bytes_.erase(it->first);
    sample_wire_.erase(it->first);
    it = measured_.erase(it);
  }
  dirty_.clear();
  pending_.clear();
  since_ = 0;
  predicted_since_ = 0;
  agree_seconds_ = since(t0);
}

double Tuner::reduce_speed(Comm& c) {
  if (!device_) return host_reduce_speed();
  if (device_reduce_ <= 0) device_reduce_ = device_reduce_speed(c.dev);
  return device_reduce_;
}

double Tuner::launch_seconds(Comm& c) {
  if (!device_) return host_launch_seconds();
  if (device_launch_ <= 0) device_launch_ = device_launch_seconds(c.dev);
  return device_launch_;
}

cost::CodecSpeed Tuner::codec_speed(Comm& c, const CodecCandidate& cand) {
  if (!device_) return host_codec_speed(cand.spec);
  auto it = device_codecs_.find(cand.name);
  if (it == device_codecs_.end()) it = device_codecs_.emplace(cand.name, device_codec_speed(c.dev, cand.spec)).first;
  return it->second;
}

std::map<std::string, double> Tuner::running_prices() const {
  std::map<std::string, double> out;
  for (const auto& [prefix, way] : incumbent_) {
    auto it = measured_.find(prefix + way);
    // Only a price that rested on the way's own samples: one moved by a change is a guess, and
    // its correction is no second change (counted as one, q4's price grew twice for one change).
    if (it != measured_.end() && dirty_.count(it->first) && it->second.samples > 0) out[it->first] = it->second.seconds;
  }
  return out;
}

void Tuner::follow_changes(const std::map<std::string, double>& before) {
  struct Change {
    double per_byte, factor;  // the running way's added seconds per link byte, and its new / old price
    std::string jumped;       // the way whose jump it confirms: measured since, not moved
  };
  std::map<std::string, Change> changed;  // by size class (key prefix)
  for (const auto& [key, last] : before) {
    const Measured& m = measured_[key];
    if (last <= 0 || m.wire <= 0) continue;
    const std::string prefix = size_class_of(key);
    auto jump = jumps_.find(prefix);
    if (jump == jumps_.end()) {
      if (m.seconds >= kChange * last) jumps_[prefix] = {key, last, 0};
      continue;
    }
    if (jump->second.times < kSamples) continue;  // too few new times to move a median of five
    // The class's next look: the same way still up kChange x from before its jump, or the way
    // the jump made it switch to up kSwitchedRise x from its own price -- a change; else a burst
    // that passed.
    const bool same = jump->second.key == key;
    const double old = same ? jump->second.old : last;
    if (m.seconds >= (same ? kChange : kSwitchedRise) * old)
      changed[prefix] = {(m.seconds - old) / m.wire, m.seconds / old, jump->second.key};
    jumps_.erase(jump);
  }
  // A look that found no running way with new times (they went to tries): the jump passes.
  for (auto it = jumps_.begin(); it != jumps_.end();)
    it = it->second.times >= kSamples ? jumps_.erase(it) : std::next(it);
  changes_ += changed.size();
  for (const auto& [prefix, c] : changed) changed_classes_.insert(prefix);
  for (auto& [key, m] : measured_) {
    auto it = changed.find(size_class_of(key));
    if (it == changed.end() || before.count(key) || key == it->second.jumped) continue;
    // No further than the running way moved: what it gained may be the host's, not the link's
    // (a burst of other work), and exact, with 8x q4's bytes, priced 13x its time for 128 calls.
    const Change& c = it->second;
    m.seconds = std::min(m.seconds + c.per_byte * m.wire, m.seconds * c.factor);
    m.samples = 0;        // measured again where plausible (exploration)
    m.stamp = calls_;     // priced from the change until then, not expired
    seconds_.erase(key);  // its next samples replace the price
  }
}

void Tuner::prepare(Comm& c, const std::vector<CodecCandidate>* candidates) {
  if (probed_) return;
  // The kernels' speeds first (cached: measured in the background since the group was
  // configured, or now): the probe's timed rounds must not share the cores with that
  // measurement, on this rank or another (its first round lines the ranks up). Probed while
  // the ranks still measured, 4 ranks on 2 cores agreed alpha at 1.7 ms instead of 30 us.
  reduce_speed(c);
  launch_seconds(c);
  for (size_t i = 0; candidates && i < candidates->size(); ++i)
    if ((*candidates)[i].spec.kind != codec::Kind::None) codec_speed(c, (*candidates)[i]);
  if (c.size() > 1) probe(c);
  probed_ = true;
  agree(c, candidates);
}

void Tuner::maybe_refresh(Comm& c, const std::vector<CodecCandidate>* candidates) {
  bool missing = false;  // a codec the agreed table lacks (the options changed): measure it now
  for (size_t i = 0; candidates && i < candidates->size(); ++i)
    missing = missing || ((*candidates)[i].spec.kind != codec::Kind::None && !codecs_.count((*candidates)[i].name));
  if (!probed_) return prepare(c, candidates);
  const double cost = std::max(refresh_seconds_, cost::dense_allreduce(AllreduceAlgo::Star, 64, c.size(), link_).total);
  // A way just tried for the first time at its size is agreed at once: its measurement decides.
  if (missing || since_ >= kMaxCalls || (!pending_.empty() && since_ >= 1) ||
      (since_ >= kMinCalls && predicted_since_ >= kCostRatio * cost) ||
      (switched_ && since_ >= kSamples && predicted_since_ >= kSwitchCostRatio * cost) || looks_due())
    agree(c, candidates);
}

bool Tuner::looks_due() const {  // a jump's class ran kSamples timed calls since: its look
  return std::any_of(jumps_.begin(), jumps_.end(), [](const auto& j) { return j.second.times >= kSamples; });
}

void Tuner::observe(const Plan& p, double seconds, double codec_seconds) {
  if (p.est.total <= 0) return;
  bool told = false;  // an injected time calibrates its way and teaches nothing else
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = injected_times_.find(p.way);
    if (it != injected_times_.end()) seconds = it->second, told = true;
  }
  if (p.key.empty()) return;
  if (warmed_.insert(p.key).second && !told) return;  // its first call: one-time costs, untimed
  keep_last(seconds_[p.key], seconds, kTimes);
  if (!told) learn(p, seconds, codec_seconds);  // after: learn reads the way's times, this one too
  sample_bytes_[p.key] = p.bytes;
  sample_wire_[p.key] = p.est.wire_bytes;
  dirty_.insert(p.key);
  if (!jumps_.empty()) {  // the same calls on every rank, so the same counts
    auto jump = jumps_.find(size_class_of(p.key));
    if (jump != jumps_.end()) ++jump->second.times;
  }
}

void Tuner::learn(const Plan& p, double seconds, double codec_seconds) {
  const cost::Estimate& e = p.est;
  // A device's kernels run after the host queued them: the Comm's codec clock saw the queueing.
  // The model's codec time (from the device's measured speeds) stands in; it teaches no scale.
  if (device_) codec_seconds = e.compute;
  // Codec time of small calls is mostly fixed costs (timers, wake-ups): 16x the kernels' own at
  // 64 KiB, which priced every codec out of the larger calls. Only calls with real codec work teach.
  constexpr double kCodecSample = 1e-3;
  if (!device_ && p.codec_raw >= kCodecSample && codec_seconds > 0) push(codec_scale_, codec_seconds / p.codec_raw);
  const double C = p.codec_raw > 0 ? codec_seconds : e.compute;
  // On one host the compressed calls' rates ran away under codec="auto" (4 ranks over shared
  // memory, 64 MiB: the host's copies agreed at 2.5 Gbit/s against the exact group's 11.7, so
  // exact was priced 5x its time and never run again); their exact calls (tours, expiry) keep
  // teaching the host's figures.
  const bool shows_link = p.teaches_link && !(one_host_ && p.codec_raw > 0);
  if (const auto w = shows_link ? cost::link_sample(e, seconds, codec_seconds, C) : std::nullopt)
    push(w->host ? inv_host_ : inv_bw_, w->seconds_per_byte);  // cost.cc says which calls show the link
  // The per-call cost: what a call's time leaves beyond the model's messages and bytes, from the
  // calls too small to teach the link (under 1 MiB through the busiest link, cost::link_sample)
  // whose bytes and element-wise work the model puts at a quarter of the way's usual time at
  // most (cost::call_sample; at 64 KiB the model without it priced the calls 50-70 % below their
  // times over every link, bench/results/auto_grid.md; larger calls' residuals are the link's and
  // the overlap's errors, 2-9 ms at 4 MiB). Its median, on the slowest rank (agree): the figure is
  // a call's, like a way's price. The probe's alpha stays the per-message cost: that residual
  // used to teach alpha, as the least of three.
  if (!p.teaches_link) return;  // the way's recent calls at this size, this one included:
  if (const auto s = cost::call_sample(e, seconds, way_price(seconds_.at(p.key)), C, link_.call))
    keep_last(call_, *s, kTimes);  // zeros count: a median
}

std::optional<Tuner::Figures> Tuner::figures() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!known_ || injected_) return std::nullopt;
  return Figures{link_, codec_scale_agreed_, codecs_};
}

void Tuner::seed(const Figures& f) {
  std::lock_guard<std::mutex> lock(mu_);
  link_ = f.link;
  codec_scale_agreed_ = f.codec_scale;
  codecs_ = f.codecs;
  probe_alpha_ = f.link.alpha;
  push(inv_bw_, f.link.inv_bw);
  push(inv_host_, f.link.inv_host);
  push(codec_scale_, f.codec_scale);
  if (f.link.call > 0) keep_last(call_, f.link.call, kTimes);
  probed_ = known_ = true;
}

void Tuner::inject(std::optional<std::pair<double, double>> link) {
  std::lock_guard<std::mutex> lock(mu_);
  injected_ = link;
}

void Tuner::inject_times(std::map<std::string, double> seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  injected_times_ = std::move(seconds);
}

std::optional<std::pair<double, double>> Tuner::injected() const {
  std::lock_guard<std::mutex> lock(mu_);
  return injected_;
}

Tuner::Summary Tuner::summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  Summary s = summary_;
  s.calls = calls_;
  s.refreshes = refreshes_;
  s.params = {link_, codec_scale_agreed_, codecs_};
  s.device_kernels = device_;
  s.explorations = explorations_;
  s.tours = tours_;
  s.changes = changes_;
  s.refresh_seconds = refresh_seconds_;
  s.probe_seconds = probe_seconds_;
  return s;
}

}  // namespace ringzip
