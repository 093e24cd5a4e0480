// Spec parsing, sizes and dispatch of the codec interface (codec.h).
#include "codec/codec.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "codec/cast_math.h"
#include "codec/codec_impl.h"
#include "codec/quantize_math.h"
#include "codec/quantize_fused.h"
#include "codec/sparse_math.h"

namespace ringzip::codec {
namespace detail {

void fail(const std::string& msg) { throw std::runtime_error("ringzip codec: " + msg); }

void load_f32(InType t, const void* x, int64_t begin, int64_t count, float* out) {
  switch (t) {
    case InType::F32: std::memcpy(out, static_cast<const float*>(x) + begin, sizeof(float) * count); return;
    case InType::F16: {
      const uint16_t* p = static_cast<const uint16_t*>(x) + begin;
      for (int64_t i = 0; i < count; ++i) out[i] = f16_bits_to_f32(p[i]);
      return;
    }
    case InType::BF16: {
      const uint16_t* p = static_cast<const uint16_t*>(x) + begin;
      for (int64_t i = 0; i < count; ++i) out[i] = bf16_bits_to_f32(p[i]);
      return;
    }
  }
}

}  // namespace detail

namespace {

[[noreturn]] void bad_spec(const std::string& s, const std::string& why) {
  throw std::invalid_argument("ringzip codec: bad spec '" + s + "': " + why +
                              " (expected none, fp16, bf16, q8, q4, q2, q1, topk:R or randomk:R "
                              "with 0 < R <= 1)");
}

bool is_quant(Kind k) { return k == Kind::Q8 || k == Kind::Q4 || k == Kind::Q2 || k == Kind::Q1; }
bool is_sparse(Kind k) { return k == Kind::TopK || k == Kind::RandomK; }

void check_n(int64_t n) {
  if (n < 0 || n > INT32_MAX) detail::fail("element count " + std::to_string(n) + " out of range [0, 2^31)");
}

void check_bytes(const Spec& spec, size_t in_bytes, int64_t n) {
  size_t want = encoded_bytes(spec, n);
  if (in_bytes != want)
    detail::fail(name(spec) + " payload of " + std::to_string(in_bytes) + " bytes for " + std::to_string(n) +
                 " elements; expected " + std::to_string(want));
}

// Dense float32 copy of a caller buffer (for codecs that work on float32 only).
const float* as_f32(InType t, const void* x, int64_t n, std::vector<float>& tmp) {
  if (t == InType::F32) return static_cast<const float*>(x);
  tmp.resize(n);
  detail::load_f32(t, x, 0, n, tmp.data());
  return tmp.data();
}

}  // namespace

Spec parse(const std::string& s, int64_t bucket, bool stochastic) {
  Spec sp;
  sp.bucket = bucket;
  sp.stochastic = stochastic;
  std::string head = s, arg;
  bool has_arg = false;
  if (auto c = s.find(':'); c != std::string::npos) {
    head = s.substr(0, c);
    arg = s.substr(c + 1);
    has_arg = true;
  }
  if (head == "none")
    sp.kind = Kind::None, sp.bits = 32;
  else if (head == "fp16")
    sp.kind = Kind::Fp16, sp.bits = 16;
  else if (head == "bf16")
    sp.kind = Kind::Bf16, sp.bits = 16;
  else if (head == "q8")
    sp.kind = Kind::Q8, sp.bits = 8;
  else if (head == "q4")
    sp.kind = Kind::Q4, sp.bits = 4;
  else if (head == "q2")
    sp.kind = Kind::Q2, sp.bits = 2;
  else if (head == "q1")
    sp.kind = Kind::Q1, sp.bits = 1;
  else if (head == "topk")
    sp.kind = Kind::TopK, sp.bits = 64;
  else if (head == "randomk")
    sp.kind = Kind::RandomK, sp.bits = 32;
  else
    bad_spec(s, "unknown codec '" + head + "'");
  if (is_sparse(sp.kind)) {
    if (!has_arg || arg.empty()) bad_spec(s, "missing ratio");
    char* end = nullptr;
    double r = std::strtod(arg.c_str(), &end);
    if (end != arg.c_str() + arg.size()) bad_spec(s, "ratio '" + arg + "' is not a number");
    if (!(r > 0.0 && r <= 1.0)) bad_spec(s, "ratio " + arg + " not in (0, 1]");
    sp.ratio = r;
  } else if (has_arg) {
    bad_spec(s, "codec '" + head + "' takes no argument");
  }
  if (is_quant(sp.kind) && (bucket < 8 || bucket % 8 != 0 || bucket > (int64_t(1) << 24)))
    throw std::invalid_argument("ringzip codec: bucket " + std::to_string(bucket) +
                                " must be a multiple of 8 in [8, 2^24]");
  return sp;
}

const char* quant_kernels() {
  const detail::FusedQuant* k = detail::fused_quant();
  return k ? k->name : "portable";
}

std::string name(const Spec& sp) {
  switch (sp.kind) {
    case Kind::None: return "none";
    case Kind::Fp16: return "fp16";
    case Kind::Bf16: return "bf16";
    case Kind::Q8: return "q8";
    case Kind::Q4: return "q4";
    case Kind::Q2: return "q2";
    case Kind::Q1: return "q1";
    case Kind::TopK: return "topk:" + std::to_string(sp.ratio);
    case Kind::RandomK: return "randomk:" + std::to_string(sp.ratio);
  }
  return "?";
}

bool biased(const Spec& sp) {
  switch (sp.kind) {
    case Kind::TopK:
    case Kind::Q1:
    case Kind::RandomK: return true;  // randomk: E = (k/n) x
    case Kind::Q8:
    case Kind::Q4:
    case Kind::Q2: return !sp.stochastic;
    default: return false;  // none exact; casts are deterministic RNE (error, no bias by design)
  }
}

int64_t k_for(const Spec& sp, int64_t n) {
  if (n <= 0) return 0;
  double k = std::ceil(sp.ratio * (double)n);
  if (k < 1) k = 1;
  if (k > (double)n) k = (double)n;
  return (int64_t)k;
}

size_t encoded_bytes(const Spec& sp, int64_t n) {
  check_n(n);
  size_t un = (size_t)n;
  switch (sp.kind) {
    case Kind::None: return 4 * un;
    case Kind::Fp16:
    case Kind::Bf16: return 2 * un;
    case Kind::Q8:
    case Kind::Q4:
    case Kind::Q2:
    case Kind::Q1: {
      size_t nb = (un + sp.bucket - 1) / sp.bucket;
      return 4 * nb + (un * sp.bits + 7) / 8;
    }
    case Kind::TopK: return 4 + 8 * (size_t)k_for(sp, n);
    case Kind::RandomK: return kRandomkValuesAt + 4 * (size_t)k_for(sp, n);
  }
  return 0;
}

void encode(const Spec& sp, InType t, const void* x, int64_t n, int64_t off, const RngKey& key, uint8_t* out) {
  check_n(n);
  if (n == 0 && !is_sparse(sp.kind)) return;
  std::vector<float> tmp;
  switch (sp.kind) {
    case Kind::None:
    case Kind::Fp16:
    case Kind::Bf16: return detail::cast_encode(sp, t, x, n, out);
    case Kind::Q8:
    case Kind::Q4:
    case Kind::Q2:
    case Kind::Q1: return detail::quant_encode(sp, t, x, n, off, key, out);
    case Kind::TopK: return detail::topk_encode(sp, as_f32(t, x, n, tmp), n, out);
    case Kind::RandomK: return detail::randomk_encode(sp, as_f32(t, x, n, tmp), n, off, key, out);
  }
}

static void decode_impl(const Spec& sp, const uint8_t* in, size_t in_bytes, int64_t n, int64_t off, const RngKey& key,
                        float* out, bool acc) {
  check_n(n);
  check_bytes(sp, in_bytes, n);
  if (n == 0) return;
  switch (sp.kind) {
    case Kind::None:
    case Kind::Fp16:
    case Kind::Bf16: return detail::cast_decode(sp, in, n, out, acc);
    case Kind::Q8:
    case Kind::Q4:
    case Kind::Q2:
    case Kind::Q1: return detail::quant_decode(sp, in, n, out, acc);
    case Kind::TopK: return detail::topk_decode(sp, in, n, out, acc);
    case Kind::RandomK: return detail::randomk_decode(sp, in, n, off, key, out, acc);
  }
}

void decode(const Spec& sp, const uint8_t* in, size_t in_bytes, int64_t n, int64_t off, const RngKey& key, float* out) {
  decode_impl(sp, in, in_bytes, n, off, key, out, false);
}

void decode_accumulate(const Spec& sp, const uint8_t* in, size_t in_bytes, int64_t n, int64_t off, const RngKey& key,
                       float* acc) {
  decode_impl(sp, in, in_bytes, n, off, key, acc, true);
}

bool residual(const Spec& sp, const uint8_t* in, size_t in_bytes, const float* x, int64_t n, int64_t off,
              const RngKey& key, float* r) {
  check_n(n);
  check_bytes(sp, in_bytes, n);
  if (n == 0) return true;
  if (sp.kind == Kind::TopK) {
    detail::topk_residual(sp, in, x, n, r);
    return false;  // mostly a copy of x: not scanned
  }
  decode_impl(sp, in, in_bytes, n, off, key, r, false);
  uint32_t worst = 0;  // max |r| as ordered bits
  for (int64_t i = 0; i < n; ++i) {
    r[i] = x[i] - r[i];
    worst = std::max(worst, abs_bits(r[i]));
  }
  return abs_bits_finite(worst);
}

bool all_finite(const float* x, int64_t n) { return n == 0 || abs_bits_finite(detail::amax_bits(x, n)); }

bool encode_feedback(const Spec& sp, const float* x, float* r, int64_t n, int64_t off, const RngKey& key,
                     uint8_t* out) {
  check_n(n);
  if (is_quant(sp.kind)) return n == 0 || detail::quant_encode_feedback(sp, x, r, n, off, key, out);
  std::vector<float> s(static_cast<size_t>(n));  // the other codecs: the same steps, unfused
  for (int64_t i = 0; i < n; ++i) s[i] = x[i] + r[i];
  encode(sp, InType::F32, s.data(), n, off, key, out);
  return residual(sp, out, encoded_bytes(sp, n), s.data(), n, off, key, r) || all_finite(r, n);
}

bool topk_feedback(const Spec& sp, float* x, float* r, int64_t n, uint8_t* out) {
  check_n(n);
  if (sp.kind != Kind::TopK) detail::fail("topk_feedback: not a top-k codec");
  return detail::topk_feedback(sp, x, r, n, out);
}

bool reduce_encode(const Spec& sp, const uint8_t* const* in, size_t in_bytes, int m, float* acc, int64_t n, int64_t off,
                   const RngKey& key, uint8_t* out, float* r) {
  check_n(n);
  if (!is_quant(sp.kind)) detail::fail("reduce_encode: not a q-codec (" + name(sp) + ")");
  if (m > 0) check_bytes(sp, in_bytes, n);
  return n == 0 || detail::quant_reduce_encode(sp, in, m, acc, n, off, key, out, r);
}

void decode_add_encode(const Spec& sp, const uint8_t* in, size_t in_bytes, const float* local, int64_t n, int64_t off,
                       const RngKey& dec_key, const RngKey& enc_key, uint8_t* out) {
  check_n(n);
  check_bytes(sp, in_bytes, n);
  if (n == 0 && !is_sparse(sp.kind)) return;
  if (is_quant(sp.kind)) return detail::quant_decode_add_encode(sp, in, local, n, off, enc_key, out);
  // Generic path: dense float32 sum, then encode.
  std::vector<float> sum(local, local + n);
  decode_impl(sp, in, in_bytes, n, off, dec_key, sum.data(), true);
  encode(sp, InType::F32, sum.data(), n, off, enc_key, out);
}

}  // namespace ringzip::codec
