#include "collective/reduce.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <stdexcept>

namespace ringzip {
namespace {

// Functors (not function pointers) so each loop inlines its op and vectorizes.
template <typename T>
struct Ops {
  static constexpr auto sum = [](T a, T b) { return a + b; };
  static constexpr auto prod = [](T a, T b) { return a * b; };
  // NaN must win so that non-finite inputs surface on every rank.
  static constexpr auto min = [](T a, T b) { return (a < b || a != a) ? a : b; };
  static constexpr auto max = [](T a, T b) { return (a > b || a != a) ? a : b; };
};
template <>
struct Ops<bool> {  // bool follows gloo: sum/max are OR, prod/min are AND.
  static constexpr auto sum = [](bool a, bool b) { return a || b; };
  static constexpr auto prod = [](bool a, bool b) { return a && b; };
  static constexpr auto min = [](bool a, bool b) { return a && b; };
  static constexpr auto max = [](bool a, bool b) { return a || b; };
};

// Half types reduce through float, one rounding per step, as gloo does.
template <typename H>
struct HalfOps {
  static constexpr auto sum = [](H a, H b) { return H(float(a) + float(b)); };
  static constexpr auto prod = [](H a, H b) { return H(float(a) * float(b)); };
  static constexpr auto min = [](H a, H b) {
    float x = a, y = b;
    return (x < y || x != x) ? a : b;
  };
  static constexpr auto max = [](H a, H b) {
    float x = a, y = b;
    return (x > y || x != x) ? a : b;
  };
};
template <>
struct Ops<c10::Half> : HalfOps<c10::Half> {};
template <>
struct Ops<c10::BFloat16> : HalfOps<c10::BFloat16> {};

template <typename T, typename F>
void apply(void* acc, const void* in, size_t n, F f) {
  T* __restrict a = static_cast<T*>(acc);
  const T* __restrict b = static_cast<const T*>(in);
  for (size_t i = 0; i < n; ++i) a[i] = f(a[i], b[i]);
}

template <typename T>
void reduce_arith(RedOp op, void* acc, const void* in, size_t n) {
  switch (op) {
    case RedOp::Sum: return apply<T>(acc, in, n, Ops<T>::sum);
    case RedOp::Prod: return apply<T>(acc, in, n, Ops<T>::prod);
    case RedOp::Min: return apply<T>(acc, in, n, Ops<T>::min);
    case RedOp::Max: return apply<T>(acc, in, n, Ops<T>::max);
    default:
      throw std::invalid_argument(std::string("reduce op ") + redop_name(op) + " needs an integer or bool dtype");
  }
}

template <typename T>
void reduce_int(RedOp op, void* acc, const void* in, size_t n) {
  switch (op) {
    case RedOp::BAnd: return apply<T>(acc, in, n, [](T a, T b) { return T(a & b); });
    case RedOp::BOr: return apply<T>(acc, in, n, [](T a, T b) { return T(a | b); });
    case RedOp::BXor: return apply<T>(acc, in, n, [](T a, T b) { return T(a ^ b); });
    default: return reduce_arith<T>(op, acc, in, n);
  }
}

template <typename T>
void scale_as(void* data, size_t n, double factor) {
  T* p = static_cast<T*>(data);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    const T f = static_cast<T>(factor);
    for (size_t i = 0; i < n; ++i) p[i] *= f;
  } else {
    const float f = static_cast<float>(factor);
    for (size_t i = 0; i < n; ++i) p[i] = T(float(p[i]) * f);
  }
}

}  // namespace

const char* dtype_name(DType t) {
  static const char* names[] = {"float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "bool"};
  return names[static_cast<int>(t)];
}

const char* redop_name(RedOp op) {
  switch (op) {
    case RedOp::Sum: return "SUM";
    case RedOp::Prod: return "PRODUCT";
    case RedOp::Min: return "MIN";
    case RedOp::Max: return "MAX";
    case RedOp::BAnd: return "BAND";
    case RedOp::BOr: return "BOR";
    case RedOp::BXor: return "BXOR";
  }
  return "?";
}

void reduce_into(DType t, RedOp op, void* acc, const void* in, size_t n) {
  switch (t) {
    case DType::F32: return reduce_arith<float>(op, acc, in, n);
    case DType::F64: return reduce_arith<double>(op, acc, in, n);
    case DType::F16: return reduce_arith<c10::Half>(op, acc, in, n);
    case DType::BF16: return reduce_arith<c10::BFloat16>(op, acc, in, n);
    case DType::I8: return reduce_int<int8_t>(op, acc, in, n);
    case DType::U8: return reduce_int<uint8_t>(op, acc, in, n);
    case DType::I32: return reduce_int<int32_t>(op, acc, in, n);
    case DType::I64: return reduce_int<int64_t>(op, acc, in, n);
    case DType::Bool: return reduce_int<bool>(op, acc, in, n);
  }
}

void scale_inplace(DType t, void* data, size_t n, double factor) {
  switch (t) {
    case DType::F32: return scale_as<float>(data, n, factor);
    case DType::F64: return scale_as<double>(data, n, factor);
    case DType::F16: return scale_as<c10::Half>(data, n, factor);
    case DType::BF16: return scale_as<c10::BFloat16>(data, n, factor);
    default: throw std::invalid_argument("scaling needs a floating dtype");
  }
}

}  // namespace ringzip
