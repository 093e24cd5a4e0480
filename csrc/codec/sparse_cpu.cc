// top-k and random-k codecs on the CPU. Layouts (docs/wire-format.md):
//   topk:    int32 k | k int32 indices, ascending | k float32 values
//   randomk: int32 k | uint32 flags | k float32 values (indices regenerated from the RngKey)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codec/codec_impl.h"
#include "codec/quantize_math.h"
#include "codec/sparse_math.h"

namespace ringzip::codec::detail {
namespace {

constexpr int64_t kExactMax = int64_t(1) << 16;  // above: sampled threshold, then exact refine
constexpr int64_t kSamples = 4096;

// Keeps the k largest (or smallest) composites of `c`, which arrive in ascending index order,
// and returns their indices, ascending: find the k-th composite on a copy, then filter `c` in
// order (composites are unique, so exactly k pass) -- no sort of the k indices.
void top_composites(std::vector<uint64_t>& c, int64_t k, bool largest, std::vector<int32_t>& idx,
                    uint32_t (*index_of)(uint64_t)) {
  idx.resize(k);
  if ((int64_t)c.size() <= k) {
    for (int64_t j = 0; j < k; ++j) idx[j] = (int32_t)index_of(c[j]);
    return;
  }
  std::vector<uint64_t> tmp(c);
  uint64_t kth;
  if (largest) {
    std::nth_element(tmp.begin(), tmp.begin() + (k - 1), tmp.end(), std::greater<uint64_t>());
  } else {
    std::nth_element(tmp.begin(), tmp.begin() + (k - 1), tmp.end());
  }
  kth = tmp[k - 1];
  int64_t m = 0;
  for (uint64_t v : c)
    if (largest ? v >= kth : v <= kth) idx[m++] = (int32_t)index_of(v);
}

uint32_t topk_idx_of(uint64_t c) { return topk_index(c); }

// Appends the composite of every element with |x| bits >= thr, in ascending index order.
void collect_above_scalar(const float* x, int64_t begin, int64_t end, uint32_t thr, std::vector<uint64_t>& c) {
  // Few elements pass: test blocks with a branch-free (vectorized) scan, visit hits only.
  constexpr int64_t kBlock = 32;
  int64_t i = begin;
  for (; i + kBlock <= end; i += kBlock) {
    uint32_t hit = 0;
    for (int64_t j = 0; j < kBlock; ++j) hit |= (uint32_t)((f2u(x[i + j]) & 0x7fffffffu) >= thr);
    if (!hit) continue;
    for (int64_t j = i; j < i + kBlock; ++j)
      if ((f2u(x[j]) & 0x7fffffffu) >= thr) c.push_back(topk_composite(x[j], (uint32_t)j));
  }
  for (; i < end; ++i)
    if ((f2u(x[i]) & 0x7fffffffu) >= thr) c.push_back(topk_composite(x[i], (uint32_t)i));
}

#if defined(__x86_64__) && defined(__GNUC__)
// Sixteen elements per compare; hits are compressed in registers (a compress straight to memory
// is microcoded and slow on some cores) and stored whole, the write position advancing by the
// hit count, so the scan does not branch per element.
__attribute__((target("avx512f"))) void collect_above_avx512(const float* x, int64_t n, uint32_t thr,
                                                             std::vector<uint64_t>& c) {
  constexpr int64_t kChunk = 4096;
  uint32_t hits[kChunk + 16];
  const __m512i t = _mm512_set1_epi32((int)thr), abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t b = 0;
  for (; b + kChunk <= n; b += kChunk) {
    int64_t m = 0;
    for (int64_t j = 0; j < kChunk; j += 16) {
      __m512i v = _mm512_and_si512(_mm512_loadu_si512(x + b + j), abs_mask);
      __mmask16 k = _mm512_cmpge_epu32_mask(v, t);
      __m512i at = _mm512_add_epi32(_mm512_set1_epi32((int)(b + j)), lane);
      _mm512_storeu_si512(hits + m, _mm512_maskz_compress_epi32(k, at));
      m += __builtin_popcount(k);
    }
    for (int64_t h = 0; h < m; ++h) c.push_back(topk_composite(x[hits[h]], hits[h]));
  }
  collect_above_scalar(x, b, n, thr, c);
}
#endif

void collect_above(const float* x, int64_t n, uint32_t thr, std::vector<uint64_t>& c) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return collect_above_avx512(x, n, thr, c);
#endif
  collect_above_scalar(x, 0, n, thr, c);
}
uint32_t randomk_idx_of(uint64_t c) { return randomk_index(c); }

void topk_select(const float* x, int64_t n, int64_t k, std::vector<int32_t>& idx) {
  std::vector<uint64_t> c;
  if (n > kExactMax) {
    // Estimate a key threshold from a strided sample so that about 1.5k + slack elements pass,
    // collect those, and refine exactly. Identical result to the full selection whenever at
    // least k elements pass (every element above the k-th largest key passes); else fall back.
    std::vector<uint32_t> smp(kSamples);
    for (int64_t j = 0; j < kSamples; ++j) smp[j] = f2u(x[j * n / kSamples]) & 0x7fffffffu;
    double expect = (double)k * kSamples / n;
    int64_t r = std::min<int64_t>(kSamples - 1, (int64_t)(1.5 * expect + 4.0 * std::sqrt(expect) + 8));
    std::nth_element(smp.begin(), smp.begin() + r, smp.end(), std::greater<uint32_t>());
    uint32_t thr = smp[r];
    if (thr > 0) {
      c.reserve(2 * k + 64);
      collect_above(x, n, thr, c);
      if ((int64_t)c.size() >= k) return top_composites(c, k, true, idx, topk_idx_of);
      c.clear();
    }
  }
  c.resize(n);
  for (int64_t i = 0; i < n; ++i) c[i] = topk_composite(x[i], (uint32_t)i);
  top_composites(c, k, true, idx, topk_idx_of);
}

void check_count(const uint8_t* in, int64_t k, const char* what) {
  int32_t cnt;
  std::memcpy(&cnt, in, 4);
  if (cnt != k)
    fail(std::string("corrupt ") + what + " payload: header count " + std::to_string(cnt) +
         ", expected " + std::to_string(k));
}

}  // namespace

void topk_encode(const Spec& sp, const float* x, int64_t n, uint8_t* out) {
  int64_t k = k_for(sp, n);
  int32_t cnt = (int32_t)k;
  std::memcpy(out, &cnt, 4);
  if (k == 0) return;
  std::vector<int32_t> idx;
  if (k == n) {
    idx.resize(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = (int32_t)i;
  } else {
    topk_select(x, n, k, idx);
  }
  std::vector<float> val(k);
  for (int64_t j = 0; j < k; ++j) val[j] = x[idx[j]];
  std::memcpy(out + 4, idx.data(), 4 * k);
  std::memcpy(out + 4 + 4 * k, val.data(), 4 * k);
}

namespace {

// The validated indices and values of a top-k payload.
void read_topk(const Spec& sp, const uint8_t* in, int64_t n, std::vector<int32_t>& idx, std::vector<float>& val) {
  int64_t k = k_for(sp, n);
  check_count(in, k, "topk");
  idx.resize(k);
  val.resize(k);
  std::memcpy(idx.data(), in + 4, 4 * k);
  std::memcpy(val.data(), in + 4 + 4 * k, 4 * k);
  int64_t prev = -1;
  for (int64_t j = 0; j < k; ++j) {
    if (idx[j] <= prev || idx[j] >= n)
      fail("corrupt topk payload: index " + std::to_string(idx[j]) + " at position " + std::to_string(j) +
           " is not ascending within [0, " + std::to_string(n) + ")");
    prev = idx[j];
  }
}

}  // namespace

void topk_decode(const Spec& sp, const uint8_t* in, int64_t n, float* out, bool acc) {
  std::vector<int32_t> idx;
  std::vector<float> val;
  read_topk(sp, in, n, idx, val);
  if (!acc) std::memset(out, 0, sizeof(float) * n);
  for (size_t j = 0; j < idx.size(); ++j) out[idx[j]] = acc ? out[idx[j]] + val[j] : val[j];
}

void topk_residual(const Spec& sp, const uint8_t* in, const float* x, int64_t n, float* r) {
  std::vector<int32_t> idx;
  std::vector<float> val;
  read_topk(sp, in, n, idx, val);
  // Where nothing was sent x - 0 is x itself: one copy instead of decode-then-subtract passes.
  std::memcpy(r, x, sizeof(float) * n);
  for (size_t j = 0; j < idx.size(); ++j) r[idx[j]] = x[idx[j]] - val[j];
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
  std::memcpy(out + 4, &flags, 4);
  if (k == 0) return;
  std::vector<int32_t> idx;
  randomk_indices(sp, n, off, key, idx);
  std::vector<float> val(k);
  for (int64_t j = 0; j < k; ++j) val[j] = x[idx[j]];
  std::memcpy(out + 8, val.data(), 4 * k);
}

void randomk_decode(const Spec& sp, const uint8_t* in, int64_t n, int64_t off, const RngKey& key,
                    float* out, bool acc) {
  int64_t k = k_for(sp, n);
  check_count(in, k, "randomk");
  uint32_t flags;
  std::memcpy(&flags, in + 4, 4);
  if (flags & ~kRandomkNonFinite) fail("corrupt randomk payload: unknown header flags " + std::to_string(flags));
  if (flags & kRandomkNonFinite) {  // the sender saw a NaN/Inf: poison the whole chunk
    const float nan = u2f(0x7fc00000u);
    for (int64_t i = 0; i < n; ++i) out[i] = acc ? out[i] + nan : nan;
    return;
  }
  std::vector<int32_t> idx;
  randomk_indices(sp, n, off, key, idx);
  std::vector<float> val(k);
  std::memcpy(val.data(), in + 8, 4 * k);
  if (!acc) std::memset(out, 0, sizeof(float) * n);
  for (int64_t j = 0; j < k; ++j) out[idx[j]] = acc ? out[idx[j]] + val[j] : val[j];
}

}  // namespace ringzip::codec::detail
