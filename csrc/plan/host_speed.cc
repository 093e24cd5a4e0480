// The kernels' speed (tuner.h): the cost model's codec and reduction terms; the host's measured
// once per process, a device's through its Compute once per group (the tuner of its calls). 8 MiB of float32 per kernel (beyond the L2 caches: on 1 MiB the kernels ran
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

#include "collective/compute.h"
#include "plan/tuner.h"

namespace ringzip {
namespace {

constexpr int64_t kElems = 1 << 21;

// The best of `reps` runs of f, in seconds; `sync` waits for what f queued (a device's kernels
// run after f returns). The first pass on a device also pays its kernels' loading, so three there.
template <typename F, typename S>
double best_seconds(F f, S sync, int reps) {
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < reps; ++rep) {
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    sync();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

template <typename F, typename S>
double seconds_per_byte(F f, S sync, int reps) {
  return std::max(best_seconds(f, sync, reps), 1e-9) / (4.0 * kElems);
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

// The host's through the same measurement as a device's (HostCompute runs the codec kernels
// the calls run), once per process.
double host_reduce_speed() {
  static const double v = device_reduce_speed(host_compute());
  return v;
}

double host_launch_seconds() {
  static const double v = device_launch_seconds(host_compute());
  return v;
}

cost::CodecSpeed host_codec_speed(const codec::Spec& s) {
  // Never destroyed: a background measurement (measure_host_kernels) may still run at exit.
  static auto* mu = new std::mutex;
  static auto* cache = new std::map<std::string, cost::CodecSpeed>;
  const std::string key = codec::name(s) + "/" + std::to_string(s.bucket) + "/" + std::to_string(s.stochastic);
  std::lock_guard<std::mutex> lock(*mu);
  auto it = cache->find(key);
  if (it == cache->end()) it = cache->emplace(key, device_codec_speed(host_compute(), s)).first;
  return it->second;
}

void measure_host_kernels(const std::vector<codec::Spec>& codecs) {
  host_reduce_speed();
  host_launch_seconds();
  for (const codec::Spec& s : codecs) host_codec_speed(s);
}

double device_reduce_speed(Compute& dev) {
  const std::vector<float> x = sample_data();
  const size_t bytes = x.size() * sizeof(float);
  auto a = dev.alloc(bytes), b = dev.alloc(bytes);
  dev.to_device(a.get(), x.data(), bytes);
  dev.to_device(b.get(), x.data(), bytes);
  return seconds_per_byte([&] { dev.reduce_into(DType::F32, RedOp::Sum, a.get(), b.get(), kElems); },
                          [&] { dev.sync(); }, 3);
}

// Kernels of a few elements back to back, as a schedule issues them: what each costs beyond
// its bytes (a GPU's launch, queued; a host's call).
double device_launch_seconds(Compute& dev) {
  constexpr int kKernels = 64;
  constexpr int64_t kTiny = 256;
  auto a = dev.alloc(kTiny * sizeof(float)), b = dev.alloc(kTiny * sizeof(float));
  dev.zero(a.get(), kTiny * sizeof(float));
  dev.zero(b.get(), kTiny * sizeof(float));
  const double run = best_seconds(
      [&] {
        for (int i = 0; i < kKernels; ++i) dev.reduce_into(DType::F32, RedOp::Sum, a.get(), b.get(), kTiny);
      },
      [&] { dev.sync(); }, 3);
  return run / kKernels;
}

cost::CodecSpeed device_codec_speed(Compute& dev, const codec::Spec& s) {
  const std::vector<float> host = sample_data();
  const size_t bytes = host.size() * sizeof(float), out_bytes = codec::encoded_bytes(s, kElems);
  auto x = dev.alloc(bytes), xs = dev.alloc(bytes), acc = dev.alloc(bytes), r = dev.alloc(bytes);
  auto out = dev.alloc(out_bytes);
  dev.to_device(x.get(), host.data(), bytes);
  dev.zero(acc.get(), bytes);
  dev.zero(r.get(), bytes);
  auto* xf = reinterpret_cast<float*>(x.get());
  auto* xsf = reinterpret_cast<float*>(xs.get());
  auto* accf = reinterpret_cast<float*>(acc.get());
  auto* rf = reinterpret_cast<float*>(r.get());
  const codec::RngKey k{0, 0, 0};
  auto sync = [&] { dev.sync(); };
  cost::CodecSpeed sp;
  sp.encode = seconds_per_byte([&] { dev.encode(s, codec::InType::F32, xf, kElems, 0, k, out.get()); }, sync, 3);
  sp.decode = seconds_per_byte([&] { dev.decode_accumulate(s, out.get(), out_bytes, kElems, 0, k, accf); }, sync, 3);
  // Error feedback as the schedules run it there: fused where the compute fuses it, else the
  // encode, its decode and the residual.
  sp.feedback = seconds_per_byte(
      [&] {
        bool finite = false;
        if (s.kind == codec::Kind::TopK) {
          dev.copy(xsf, xf, bytes);
          if (!dev.topk_feedback(s, xsf, rf, kElems, out.get(), finite)) {
            dev.encode(s, codec::InType::F32, xsf, kElems, 0, k, out.get());
            dev.decode_residual(s, out.get(), out_bytes, kElems, 0, k, xsf, rf);
          }
        } else if (!dev.encode_feedback(s, xf, rf, kElems, 0, k, out.get(), finite)) {
          dev.encode(s, codec::InType::F32, xf, kElems, 0, k, out.get());
          dev.decode_residual(s, out.get(), out_bytes, kElems, 0, k, xf, rf);
        }
      },
      sync, 3);
  return sp;
}

}  // namespace ringzip
