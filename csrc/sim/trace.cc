#include "sim/trace.h"

#include <stdexcept>

namespace ringzip::sim {
namespace {
constexpr const char* kNames[kKinds] = {
    "send",   "recv",   "wait",   "mark",   "after",  "copy",   "zero",   "reduce", "scale",  "residual",
    "drop_nonfinite", "encode", "decode", "decode_accumulate", "decode_add_encode", "reduce_encode",
    "decode_residual", "encode_feedback", "topk_feedback", "randomk_values"};
}  // namespace

const char* kind_name(Kind k) { return kNames[static_cast<int>(k)]; }

Kind kind_of(const std::string& name) {
  for (int i = 0; i < kKinds; ++i)
    if (name == kNames[i]) return static_cast<Kind>(i);
  throw std::invalid_argument("unknown trace event '" + name + "'");
}

}  // namespace ringzip::sim
