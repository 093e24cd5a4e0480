#pragma once
// Element-wise reduction of one buffer into another: acc[i] = op(acc[i], in[i]).
#include "common/types.h"

namespace ringzip {

void reduce_into(DType t, RedOp op, void* acc, const void* in, size_t count);
// Multiplies in place (PREMUL_SUM's pre-scale and AVG's final division).
void scale_inplace(DType t, void* data, size_t count, double factor);

}  // namespace ringzip
