#pragma once
// Element types and reduction ops as the collective layer sees them: no tensors here.
#include <cstddef>
#include <cstdint>
#include <string>

namespace ringzip {

enum class DType : uint8_t { F32, F64, F16, BF16, I8, U8, I32, I64, Bool };
enum class RedOp : uint8_t { Sum, Prod, Min, Max, BAnd, BOr, BXor };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64: return 8;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    default: return 1;
  }
}

inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }

const char* dtype_name(DType t);
const char* redop_name(RedOp op);

}  // namespace ringzip
