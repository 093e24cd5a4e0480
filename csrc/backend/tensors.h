#pragma once
// The bridge between at::Tensor and the collective layer: dtype mapping, argument checks
// with messages a user can act on, and staging of tensors the algorithms can't use in place
// (non-contiguous, or on a GPU while the call runs on the host).
#include <ATen/ATen.h>

#include <optional>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "collective/comm.h"
#include "common/types.h"

namespace ringzip {

DType to_dtype(at::ScalarType t, const char* op);

// A reduction as the algorithms run it: op plus scaling before (PREMUL_SUM) and after (AVG).
struct Reduction {
  RedOp op;
  double pre = 1.0;
  double post = 1.0;
};
Reduction to_reduction(const c10d::ReduceOp& op, DType t, int world, const char* name);

// A tensor as the algorithms see it: `work` is contiguous on `where` (the device of the path
// that runs the call: the host, or the tensor's own GPU), t itself when it already is; finish()
// writes it back to the user's tensor when they differ.
struct Staged {
  at::Tensor user;
  at::Tensor work;
  static Staged in(const at::Tensor& t, c10::Device where);   // contents copied in (inputs, in-place ops)
  static Staged out(const at::Tensor& t, c10::Device where);  // contents not needed (pure outputs)
  // A fresh contiguous copy on `where` (of dtype `as`, default t's): the caller's t stays intact
  // while the copy is reduced in place.
  static at::Tensor copy(const at::Tensor& t, c10::Device where, std::optional<at::ScalarType> as = std::nullopt);
  // An input the call reads on `where` while it writes `out`: a copy where they alias (FSDP
  // passes its shard of the output), so it is read before it is overwritten.
  static at::Tensor unaliased(const at::Tensor& in, const at::Tensor& out, c10::Device where);
  Buf buf() const;
  void finish() const;
};

Buf buf_of(const at::Tensor& host_contiguous);

void check_single(const std::vector<at::Tensor>& ts, const char* op);
void check_device(const at::Tensor& t, const at::Tensor& like, const char* op, const char* what);
void check_same(const at::Tensor& t, const at::Tensor& like, const char* op, const char* what);
void check_rank(int64_t r, int world, const char* op, const char* what);

}  // namespace ringzip
