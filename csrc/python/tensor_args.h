#pragma once
// Argument checks shared by the codec bindings (ringzip._C.codec on CPU, ringzip._C.cuda):
// bad arguments raise ValueError (std::invalid_argument) prefixed with the module's name.
#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "codec/codec.h"

namespace ringzip::pyargs {

[[noreturn]] inline void bad(const char* module, const std::string& msg) {
  throw std::invalid_argument(std::string(module) + ": " + msg);
}

// t is defined, on a CUDA device (cuda) or the CPU (!cuda), and contiguous.
inline void check_contiguous_on(const char* module, const at::Tensor& t, const char* what, bool cuda) {
  if (!t.defined()) bad(module, std::string(what) + " is None");
  if (t.is_cuda() != cuda) bad(module, std::string(what) + (cuda ? " must be a CUDA tensor" : " must be a CPU tensor"));
  if (!t.is_contiguous()) bad(module, std::string(what) + " must be contiguous");
}

inline void check_f32_on(const char* module, const at::Tensor& t, const char* what, bool cuda) {
  check_contiguous_on(module, t, what, cuda);
  if (t.scalar_type() != at::kFloat)
    bad(module, std::string(what) + " must be float32, got " + c10::toString(t.scalar_type()));
}

// x and r of an error-feedback call: float32, contiguous, one size, one device.
inline void check_feedback_args(const char* module, const at::Tensor& x, const at::Tensor& r, bool cuda) {
  check_f32_on(module, x, "x", cuda);
  check_f32_on(module, r, "r", cuda);
  if (x.numel() != r.numel() || x.device() != r.device()) bad(module, "x and r must have the same size and device");
}

inline codec::Spec topk_spec(const char* module, const std::string& spec) {
  codec::Spec sp = codec::parse(spec, codec::kBucketSize, true);
  if (sp.kind != codec::Kind::TopK) bad(module, "topk_feedback needs a topk:R codec, got '" + spec + "'");
  return sp;
}

inline codec::InType in_type(const char* module, const at::Tensor& x) {
  switch (x.scalar_type()) {
    case at::kFloat: return codec::InType::F32;
    case at::kHalf: return codec::InType::F16;
    case at::kBFloat16: return codec::InType::BF16;
    default:
      bad(module, std::string("unsupported dtype ") + c10::toString(x.scalar_type()) + " (float32, float16, bfloat16)");
  }
}

}  // namespace ringzip::pyargs
