#pragma once
// Collectives a transport brings of its own (NCCL's), run exactly and in place on the
// transport's stream. The planner says when a call uses them (Plan::nccl); host transports
// have none (Transport::native() is null), and every call runs ringzip's schedules.
#include <cstddef>

#include "common/types.h"

namespace ringzip {

class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // The reductions take only the ops the planner routes here (SUM, PRODUCT, MIN, MAX on
  // numbers, no bool); a count of 0 posts nothing.
  virtual void allreduce(void* data, size_t count, DType t, RedOp op) = 0;
  virtual void reduce(void* data, size_t count, DType t, RedOp op, int root) = 0;
  // `in` holds every rank's part of `count` elements in rank order; this rank's sum goes to out.
  virtual void reduce_scatter(const void* in, void* out, size_t count, DType t, RedOp op) = 0;
  // `out` receives every rank's `bytes` in rank order.
  virtual void allgather(const void* in, void* out, size_t bytes) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
};

}  // namespace ringzip
