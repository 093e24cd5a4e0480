// The host kernels' speed, measured once per process (tuner.h): the cost model's codec and
// reduction terms. 8 MiB of float32 per kernel (beyond the L2 caches: on 1 MiB the kernels ran
// from cache at 30-45 GB/s, several times what a real call sees), best of two, ~10 ms a codec.
// Real calls still run slower (ranks share cores, buffers come from DRAM): the tuner scales
// these by what it measures in them (codec_scale).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "plan/tuner.h"
#include "collective/reduce.h"

namespace ringzip {
namespace {

constexpr int64_t kElems = 1 << 21;

template <typename F>
double seconds_per_byte(F f) {
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < 2; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return std::max(best, 1e-9) / (4.0 * kElems);
}

// Gradient-like values (deterministic, no RNG state shared with anything).
std::vector<float> sample_data() {
  std::vector<float> x(kElems);
  uint32_t h = 12345;
  for (auto& v : x) {
    h = h * 1664525u + 1013904223u;
    v = std::ldexp(static_cast<float>(h >> 8), -24) - 0.5f;
  }
  return x;
}

}  // namespace

double host_reduce_speed() {
  static const double v = [] {
    std::vector<float> a = sample_data(), b = sample_data();
    return seconds_per_byte([&] { reduce_into(DType::F32, RedOp::Sum, a.data(), b.data(), kElems); });
  }();
  return v;
}

cost::CodecSpeed host_codec_speed(const codec::Spec& s) {
  static std::mutex mu;
  static std::map<std::string, cost::CodecSpeed> cache;
  const std::string key = codec::name(s) + "/" + std::to_string(s.bucket) + "/" + std::to_string(s.stochastic);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const std::vector<float> x = sample_data();
  std::vector<float> acc(kElems, 0.0f), r(kElems, 0.0f), xs = x;
  std::vector<uint8_t> out(codec::encoded_bytes(s, kElems));
  const codec::RngKey k{0, 0, 0};
  cost::CodecSpeed sp;
  sp.encode = seconds_per_byte([&] { codec::encode(s, codec::InType::F32, x.data(), kElems, 0, k, out.data()); });
  sp.decode = seconds_per_byte([&] { codec::decode_accumulate(s, out.data(), out.size(), kElems, 0, k, acc.data()); });
  if (s.kind == codec::Kind::TopK) {
    sp.feedback = seconds_per_byte([&] {
      std::copy(x.begin(), x.end(), xs.begin());
      codec::topk_feedback(s, xs.data(), r.data(), kElems, out.data());
    });
  } else {
    sp.feedback = seconds_per_byte([&] { codec::encode_feedback(s, x.data(), r.data(), kElems, 0, k, out.data()); });
  }
  cache[key] = sp;
  return sp;
}

}  // namespace ringzip
