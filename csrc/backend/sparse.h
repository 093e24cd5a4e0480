#pragma once
// All-reduce of sparse COO tensors (what DDP needs for nn.Embedding(sparse=True)), with
// ProcessGroupGloo's semantics: SUM only; each rank coalesces its tensor, the ranks allgather
// the nnz and shape of every tensor, then all indices and all values (parts of different sizes),
// and every rank adds the n sparse tensors in rank order and coalesces. The result is written
// into the caller's tensor (copy_, which may change its nnz), which is also the Work's result.
// Exact, and the same ATen additions in the same order as gloo, so the same bits.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <functional>

#include "collective/comm.h"

namespace ringzip {

// Whether an allreduce call is on a sparse tensor (layout checked before anything else).
bool is_sparse_call(const std::vector<at::Tensor>& tensors);

// Checks the call on the caller's thread: one COO tensor on cpu or cuda, a supported dtype,
// ReduceOp.SUM. Throws ValueError / TypeError naming the problem.
void check_sparse_allreduce(const std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts);

// The collective, to run on the backend's worker: t is the caller's tensor. A CUDA tensor is
// coalesced and copied to the host here, on the caller's thread; the result is copied back.
std::function<void(Comm&)> sparse_allreduce_body(const at::Tensor& t);

}  // namespace ringzip
