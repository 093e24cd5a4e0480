// top-k and random-k codecs on the CPU. Layouts (docs/wire-format.md):
//   topk:    int32 k | k int32 indices, ascending | k float32 values
//   randomk: int32 k | uint32 flags | k float32 values (indices regenerated from the RngKey)
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 false positive in avx512fintrin.h
#include "codec/codec_impl.h"
#include "codec/quantize_math.h"
#include "codec/sparse_math.h"

namespace ringzip::codec::detail {
namespace {

constexpr int64_t kExactMax = int64_t(1) << 16;  // above: sampled threshold, then exact refine
constexpr int64_t kSamples = 4096;

// The k-th largest (or smallest) of the unique composites c, 1 <= k <= c.size(). nth_element
// on a copy of all of them was most of a top-k selection's time; instead a histogram of where
// they fall between their minimum and maximum finds the bin holding the k-th, and only that
// bin's entries are copied and partitioned.
uint64_t kth_composite(const std::vector<uint64_t>& c, int64_t k, bool largest) {
  constexpr int kBinBits = 12;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (uint64_t v : c) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  const int shift = std::max(0, (int)std::bit_width(hi - lo) - kBinBits);
  std::vector<uint32_t> hist(size_t(1) << kBinBits);
  for (uint64_t v : c) ++hist[(v - lo) >> shift];
  int64_t bin = largest ? (int64_t)hist.size() - 1 : 0, before = 0;  // composites beyond that bin
  for (; before + hist[bin] < k; bin += largest ? -1 : 1) before += hist[bin];
  std::vector<uint64_t> in_bin;
  in_bin.reserve(hist[bin]);
  for (uint64_t v : c)
    if ((int64_t)((v - lo) >> shift) == bin) in_bin.push_back(v);
  const auto kth = in_bin.begin() + (k - before - 1);
  if (largest) {
    std::nth_element(in_bin.begin(), kth, in_bin.end(), std::greater<uint64_t>());
  } else {
    std::nth_element(in_bin.begin(), kth, in_bin.end());
  }
  return *kth;
}

// Keeps the k largest (or smallest) composites of `c`, which arrive in ascending index order,
// and returns their indices, ascending: find the k-th composite, then filter `c` in order
// (composites are unique, so exactly k pass) -- no sort of the k indices.
void top_composites(const std::vector<uint64_t>& c, int64_t k, bool largest, std::vector<int32_t>& idx,
                    uint32_t (*index_of)(uint64_t)) {
  idx.resize(k);
  if ((int64_t)c.size() <= k) {
    for (int64_t j = 0; j < k; ++j) idx[j] = (int32_t)index_of(c[j]);
    return;
  }
  const uint64_t kth = kth_composite(c, k, largest);
  int64_t m = 0;
  for (uint64_t v : c)
    if (largest ? v >= kth : v <= kth) idx[m++] = (int32_t)index_of(v);
}

// Candidate scan: appends the composite of every element whose |value| bits are >= thr, in
// ascending index order. With Feedback the value is s = x + r (error feedback), and the same
// pass stores r = s and x = 0, so adding the residual, scanning, keeping the value sent and
// clearing the sparse sum's accumulator cost one trip through memory instead of four; `worst`
// becomes max |s| as ordered bits (not abs_bits_finite: a NaN or Inf was there), which spares
// the caller another pass to find out.
template <bool Feedback>
void collect_scalar(float* x, float* r, int64_t begin, int64_t end, uint32_t thr, std::vector<uint64_t>& c,
                    uint32_t& worst) {
  constexpr int64_t kBlock = 32;  // few elements pass: test a block branch-free, visit hits only
  for (int64_t i = begin; i < end; i += kBlock) {
    const int64_t e = std::min(end, i + kBlock);
    uint32_t hit = 0;
    for (int64_t j = i; j < e; ++j) {
      float v = x[j];
      if constexpr (Feedback) {
        v = v + r[j];
        r[j] = v;
        x[j] = 0.0f;
        worst = std::max(worst, abs_bits(v));
      }
      hit |= (uint32_t)((f2u(v) & 0x7fffffffu) >= thr);
    }
    if (!hit) continue;
    const float* s = Feedback ? r : x;
    for (int64_t j = i; j < e; ++j)
      if ((f2u(s[j]) & 0x7fffffffu) >= thr) c.push_back(topk_composite(s[j], (uint32_t)j));
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// Sixteen elements per compare; hits are compressed in registers (a compress straight to memory
// is microcoded and slow on some cores) and stored whole, the write position advancing by the
// hit count, so the scan does not branch per element.
template <bool Feedback>
__attribute__((target("avx512f"))) void collect_avx512(float* x, float* r, int64_t n, uint32_t thr,
                                                       std::vector<uint64_t>& c, uint32_t& worst) {
  constexpr int64_t kChunk = 4096;
  uint32_t hits[kChunk + 16];
  const __m512i t = _mm512_set1_epi32((int)thr), abs_mask = _mm512_set1_epi32(0x7fffffff);
  __m512i w = _mm512_setzero_si512();
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const float* s = Feedback ? r : x;
  int64_t b = 0;
  for (; b + kChunk <= n; b += kChunk) {
    int64_t m = 0;
    for (int64_t j = 0; j < kChunk; j += 16) {
      __m512 v = _mm512_loadu_ps(x + b + j);
      if constexpr (Feedback) {
        v = _mm512_add_ps(v, _mm512_loadu_ps(r + b + j));
        _mm512_storeu_ps(r + b + j, v);
        _mm512_storeu_ps(x + b + j, _mm512_setzero_ps());
      }
      const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), abs_mask);
      if constexpr (Feedback) w = _mm512_max_epu32(w, a);
      __mmask16 k = _mm512_cmpge_epu32_mask(a, t);
      __m512i at = _mm512_add_epi32(_mm512_set1_epi32((int)(b + j)), lane);
      _mm512_storeu_si512(hits + m, _mm512_maskz_compress_epi32(k, at));
      m += __builtin_popcount(k);
    }
    for (int64_t h = 0; h < m; ++h) c.push_back(topk_composite(s[hits[h]], hits[h]));
  }
  if constexpr (Feedback) worst = std::max(worst, (uint32_t)_mm512_reduce_max_epu32(w));
  collect_scalar<Feedback>(x, r, b, n, thr, c, worst);
}

// Eight elements per compare, four compares per test: few elements pass, so a group of 32
// without a hit costs one branch, and a hit's position comes from the compare's bit mask.
// Prefetching 8 KiB ahead keeps the two input streams coming while a group computes.
template <bool Feedback>
__attribute__((target("avx2"))) void collect_avx2(float* x, float* r, int64_t n, uint32_t thr, std::vector<uint64_t>& c,
                                                  uint32_t& worst) {
  constexpr int64_t kAhead = 2048;
  const __m256i t = _mm256_set1_epi32((int)(thr - 1)), abs_mask = _mm256_set1_epi32(0x7fffffff);
  __m256i w = _mm256_setzero_si256();
  const float* s = Feedback ? r : x;
  int64_t b = 0;
  for (; b + 32 <= n; b += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(x + b + kAhead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + b + kAhead + 16), _MM_HINT_T0);
    if constexpr (Feedback) {
      _mm_prefetch(reinterpret_cast<const char*>(r + b + kAhead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(r + b + kAhead + 16), _MM_HINT_T0);
    }
    uint32_t hit = 0;
    for (int q = 0; q < 4; ++q) {
      __m256 v = _mm256_loadu_ps(x + b + 8 * q);
      if constexpr (Feedback) {
        v = _mm256_add_ps(v, _mm256_loadu_ps(r + b + 8 * q));
        _mm256_storeu_ps(r + b + 8 * q, v);
        _mm256_storeu_ps(x + b + 8 * q, _mm256_setzero_ps());
      }
      const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), abs_mask);
      if constexpr (Feedback) w = _mm256_max_epu32(w, a);
      // a >= thr as unsigned: both are below 2^31 (thr <= 2^31: then nothing passes, and
      // thr - 1 = 2^31 - 1 exceeds every a), so the signed compare a > thr - 1 is exact.
      hit |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a, t))) << (8 * q);
    }
    for (; hit; hit &= hit - 1) {
      const uint32_t j = (uint32_t)(b + std::countr_zero(hit));
      c.push_back(topk_composite(s[j], j));
    }
  }
  if constexpr (Feedback) {
    alignas(32) uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), w);
    for (uint32_t v : lanes) worst = std::max(worst, v);
  }
  collect_scalar<Feedback>(x, r, b, n, thr, c, worst);
}
#endif

template <bool Feedback>
void collect(float* x, float* r, int64_t n, uint32_t thr, std::vector<uint64_t>& c, uint32_t& worst) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const int isa = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
  if (isa == 2) return collect_avx512<Feedback>(x, r, n, thr, c, worst);
  if (isa == 1) return collect_avx2<Feedback>(x, r, n, thr, c, worst);
#endif
  collect_scalar<Feedback>(x, r, 0, n, thr, c, worst);
}

uint32_t topk_idx_of(uint64_t c) { return topk_index(c); }
uint32_t randomk_idx_of(uint64_t c) { return randomk_index(c); }

// Above kExactMax elements: a key threshold estimated from a strided sample so that about
// 1.5k + slack elements pass; the candidates are then refined exactly, which gives the full
// selection's result whenever at least k pass (every element above the k-th largest key
// passes). 0: select among all elements. key_at(i) is |value i| as ordered bits. *expect: about
// how many elements will pass (so the caller reserves once).
template <typename KeyAt>
uint32_t sampled_threshold(int64_t n, int64_t k, KeyAt key_at, int64_t* expect_pass) {
  if (n <= kExactMax || k >= n) return 0;
  std::vector<uint32_t> smp(kSamples);
  for (int64_t j = 0; j < kSamples; ++j) smp[j] = key_at(j * n / kSamples);
  double expect = (double)k * kSamples / n;
  int64_t r = std::min<int64_t>(kSamples - 1, (int64_t)(1.5 * expect + 4.0 * std::sqrt(expect) + 8));
  std::nth_element(smp.begin(), smp.begin() + r, smp.end(), std::greater<uint32_t>());
  *expect_pass = (r + 1) * (n / kSamples + 1);
  return smp[r];
}

// Exact top-k among all n elements of x, indices ascending.
void select_all(const float* x, int64_t n, int64_t k, std::vector<int32_t>& idx) {
  if (k == n) {
    idx.resize(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = (int32_t)i;
    return;
  }
  std::vector<uint64_t> c(n);
  for (int64_t i = 0; i < n; ++i) c[i] = topk_composite(x[i], (uint32_t)i);
  top_composites(c, k, true, idx, topk_idx_of);
}

// Top-k indices (ascending) of x, or with Feedback of s = x + r, after which r = s and x = 0
// (see collect). Without Feedback nothing is written. Returns collect's `worst` (Feedback).
template <bool Feedback>
uint32_t topk_select(float* x, float* r, int64_t n, int64_t k, std::vector<int32_t>& idx) {
  auto key_at = [x, r](int64_t i) { return f2u(Feedback ? x[i] + r[i] : x[i]) & 0x7fffffffu; };
  int64_t expect_pass = 0;
  const uint32_t thr = sampled_threshold(n, k, key_at, &expect_pass);
  uint32_t worst = 0;
  if (thr > 0 || Feedback) {  // with Feedback the pass must run anyway: it adds and clears
    std::vector<uint64_t> c;
    if (thr > 0) c.reserve(expect_pass + expect_pass / 4 + 64);         // a regrowth copies them all
    collect<Feedback>(x, r, n, thr > 0 ? thr : 0x80000000u, c, worst);  // no key reaches 2^31
    if (thr > 0 && (int64_t)c.size() >= k) {
      top_composites(c, k, true, idx, topk_idx_of);
      return worst;
    }
  }
  select_all(Feedback ? r : x, n, k, idx);
  return worst;
}

// Payload: count, then the k indices, then x at those indices. With Clear (error feedback),
// x[i] becomes x[i] - x[i] in the same visit: what was sent is no longer owed (NaN stays NaN).
template <bool Clear>
void write_topk(float* x, const std::vector<int32_t>& idx, uint8_t* out) {
  const int64_t k = (int64_t)idx.size();
  std::memcpy(out + 4, idx.data(), 4 * k);
  uint8_t* val = out + 4 + 4 * k;
  for (int64_t j = 0; j < k; ++j) {
    const float v = x[idx[j]];
    std::memcpy(val + 4 * j, &v, 4);
    if constexpr (Clear) x[idx[j]] = v - v;
  }
}

void check_count(const uint8_t* in, int64_t k, const char* what) {
  int32_t cnt;
  std::memcpy(&cnt, in, 4);
  if (cnt != k)
    fail(std::string("corrupt ") + what + " payload: header count " + std::to_string(cnt) + ", expected " +
         std::to_string(k));
}

}  // namespace

void topk_encode(const Spec& sp, const float* x, int64_t n, uint8_t* out) {
  int64_t k = k_for(sp, n);
  int32_t cnt = (int32_t)k;
  std::memcpy(out, &cnt, 4);
  if (k == 0) return;
  std::vector<int32_t> idx;
  topk_select<false>(const_cast<float*>(x), nullptr, n, k, idx);  // read-only without Feedback
  write_topk<false>(const_cast<float*>(x), idx, out);
}

bool topk_feedback(const Spec& sp, float* x, float* r, int64_t n, uint8_t* out) {
  int64_t k = k_for(sp, n);
  int32_t cnt = (int32_t)k;
  std::memcpy(out, &cnt, 4);
  if (k == 0) return true;  // n == 0
  std::vector<int32_t> idx;
  const uint32_t worst = topk_select<true>(x, r, n, k, idx);
  write_topk<true>(r, idx, out);
  return abs_bits_finite(worst);  // every x + r finite, so is r now
}

namespace {

// A top-k payload read in place, its indices validated (ascending, in [0, n)) before any
// caller writes through them, so a corrupt payload changes nothing.
struct TopkView {
  int64_t k;
  const uint8_t* idx;
  const uint8_t* val;
  int32_t index(int64_t j) const {
    int32_t i;
    std::memcpy(&i, idx + 4 * j, 4);
    return i;
  }
  float value(int64_t j) const {
    float v;
    std::memcpy(&v, val + 4 * j, 4);
    return v;
  }
};

TopkView read_topk(const Spec& sp, const uint8_t* in, int64_t n) {
  const int64_t k = k_for(sp, n);
  check_count(in, k, "topk");
  TopkView p{k, in + 4, in + 4 + 4 * k};
  int64_t prev = -1;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t i = p.index(j);
    if (i <= prev || i >= n)
      fail("corrupt topk payload: index " + std::to_string(i) + " at position " + std::to_string(j) +
           " is not ascending within [0, " + std::to_string(n) + ")");
    prev = i;
  }
  return p;
}

}  // namespace

void topk_decode(const Spec& sp, const uint8_t* in, int64_t n, float* out, bool acc) {
  const TopkView p = read_topk(sp, in, n);
  if (!acc) std::memset(out, 0, sizeof(float) * n);
  for (int64_t j = 0; j < p.k; ++j) {
    const int32_t i = p.index(j);
    out[i] = acc ? out[i] + p.value(j) : p.value(j);
  }
}

void topk_residual(const Spec& sp, const uint8_t* in, const float* x, int64_t n, float* r) {
  const TopkView p = read_topk(sp, in, n);
  // Where nothing was sent x - 0 is x itself: one copy instead of decode-then-subtract passes.
  std::memcpy(r, x, sizeof(float) * n);
  for (int64_t j = 0; j < p.k; ++j) {
    const int32_t i = p.index(j);
    r[i] = x[i] - p.value(j);
  }
}

void randomk_indices(const Spec& sp, int64_t n, int64_t off, const RngKey& key, std::vector<int32_t>& idx) {
  int64_t k = k_for(sp, n);
  if (k == n) {
    idx.resize(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = (int32_t)i;
    return;
  }
  RngKey rk{key.seed, key.seq, 0};  // same on every rank
  // Expected number of words below thr is n * thr / 2^32; aim for k + 4 sqrt(k) + 16.
  double want = (double)k + 4.0 * std::sqrt((double)k) + 16.0;
  uint64_t thr = want >= (double)n ? (uint64_t(1) << 32) : (uint64_t)(want / (double)n * 4294967296.0);
  constexpr int64_t kBlock = 4096;
  std::vector<uint32_t> w(kBlock + 8);
  std::vector<uint64_t> cand, all;
  cand.reserve((size_t)want + 64);
  bool full = thr >= (uint64_t(1) << 32);
  if (full) all.reserve(n);
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t L = std::min(kBlock, n - b);
    uint64_t g0 = (uint64_t)(off + b);
    philox_fill(rk, g0, L, w.data());
    const uint32_t* ww = w.data() + (g0 & 3);
    if (full) {
      for (int64_t j = 0; j < L; ++j) all.push_back(randomk_composite(ww[j], (uint32_t)(b + j)));
    } else {
      for (int64_t j = 0; j < L; ++j)
        if (ww[j] < thr) cand.push_back(randomk_composite(ww[j], (uint32_t)(b + j)));
    }
  }
  if (!full && (int64_t)cand.size() >= k) return top_composites(cand, k, false, idx, randomk_idx_of);
  if (!full) {  // unlucky draw: redo with every element
    all.reserve(n);
    for (int64_t b = 0; b < n; b += kBlock) {
      int64_t L = std::min(kBlock, n - b);
      uint64_t g0 = (uint64_t)(off + b);
      philox_fill(rk, g0, L, w.data());
      for (int64_t j = 0; j < L; ++j) all.push_back(randomk_composite(w[j + (g0 & 3)], (uint32_t)(b + j)));
    }
  }
  top_composites(all, k, false, idx, randomk_idx_of);
}

void randomk_encode(const Spec& sp, const float* x, int64_t n, int64_t off, const RngKey& key, uint8_t* out) {
  int64_t k = k_for(sp, n);
  int32_t cnt = (int32_t)k;
  uint32_t flags = (n > 0 && !abs_bits_finite(amax_bits(x, n))) ? kRandomkNonFinite : 0u;
  std::memcpy(out, &cnt, 4);
  std::memcpy(out + kRandomkFlagsAt, &flags, 4);
  if (k == 0) return;
  std::vector<int32_t> idx;
  randomk_indices(sp, n, off, key, idx);
  std::vector<float> val(k);
  for (int64_t j = 0; j < k; ++j) val[j] = x[idx[j]];
  std::memcpy(out + kRandomkValuesAt, val.data(), 4 * k);
}

void randomk_decode(const Spec& sp, const uint8_t* in, int64_t n, int64_t off, const RngKey& key, float* out,
                    bool acc) {
  int64_t k = k_for(sp, n);
  check_count(in, k, "randomk");
  uint32_t flags;
  std::memcpy(&flags, in + kRandomkFlagsAt, 4);
  if (flags & ~kRandomkNonFinite) fail("corrupt randomk payload: unknown header flags " + std::to_string(flags));
  if (flags & kRandomkNonFinite) {  // the sender saw a NaN/Inf: poison the whole chunk
    const float nan = u2f(0x7fc00000u);
    for (int64_t i = 0; i < n; ++i) out[i] = acc ? out[i] + nan : nan;
    return;
  }
  std::vector<int32_t> idx;
  randomk_indices(sp, n, off, key, idx);
  std::vector<float> val(k);
  std::memcpy(val.data(), in + kRandomkValuesAt, 4 * k);
  if (!acc) std::memset(out, 0, sizeof(float) * n);
  for (int64_t j = 0; j < k; ++j) out[idx[j]] = acc ? out[idx[j]] + val[j] : val[j];
}

}  // namespace ringzip::codec::detail

namespace ringzip::codec {

void randomk_to_values(const uint8_t* payload, size_t k, float* vals) {
  uint32_t flags;
  std::memcpy(&flags, payload + kRandomkFlagsAt, 4);
  vals[0] = flags ? std::nanf("") : 0.f;
  std::memcpy(vals + 1, payload + kRandomkValuesAt, k * sizeof(float));
}

void randomk_from_values(const float* vals, size_t k, uint8_t* payload) {
  const uint32_t flags = std::isnan(vals[0]) ? kRandomkNonFinite : 0u;
  std::memcpy(payload + kRandomkFlagsAt, &flags, 4);
  std::memcpy(payload + kRandomkValuesAt, vals + 1, k * sizeof(float));
}

}  // namespace ringzip::codec
