// Sparse COO all-reduce (backend/sparse.h): three ring allgathers with parts of different
// sizes -- a fixed-size header per rank, then the indices, then the values -- and a local sum.
#include "backend/sparse.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstring>
#include <sstream>

#include "backend/tensors.h"
#include "collective/algorithms.h"
#include "common/check.h"

namespace ringzip {
namespace {

// Per rank: nnz, sparse_dim, dense_dim, number of dimensions, dtype, hash of the sizes.
enum : int64_t { kNnz, kSparseDim, kDenseDim, kDims, kDtype, kSizesHash, kHeader };

int64_t sizes_hash(at::IntArrayRef sizes) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t s : sizes) h = (h ^ static_cast<uint64_t>(s)) * 1099511628211ull;
  return static_cast<int64_t>(h >> 1);
}

std::string describe(const int64_t* h) {
  std::ostringstream o;
  o << h[kDims] << "-d, sparse_dim " << h[kSparseDim] << ", dense_dim " << h[kDenseDim] << ", dtype "
    << c10::toString(static_cast<at::ScalarType>(h[kDtype]));
  return o.str();
}

// Allgather of parts of counts[i] elements each (rank i's part first at its offset) in flat.
void allgather_parts(Comm& c, const at::Tensor& flat, const std::vector<int64_t>& counts, uint32_t step_base) {
  std::vector<size_t> begin(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) begin[i + 1] = begin[i] + static_cast<size_t>(counts[i]);
  ring_allgather(c, buf_of(flat), begin, step_base);
}

at::Tensor sparse_allreduce_host(Comm& c, const at::Tensor& coalesced) {
  const int n = c.size(), r = c.rank();
  const at::Tensor& in = coalesced;

  auto header = at::zeros({static_cast<int64_t>(n) * kHeader}, at::kLong);
  int64_t* all = header.data_ptr<int64_t>();
  int64_t* mine = all + static_cast<int64_t>(r) * kHeader;
  mine[kNnz] = in._nnz();
  mine[kSparseDim] = in.sparse_dim();
  mine[kDenseDim] = in.dense_dim();
  mine[kDims] = in.dim();
  mine[kDtype] = static_cast<int64_t>(in.scalar_type());
  mine[kSizesHash] = sizes_hash(in.sizes());
  ring_allgather(c, buf_of(header), even_parts(header.numel(), n), 0);
  // Every rank compares rank 0 with the others, so all raise the same message.
  for (int j = 1; j < n; ++j) {
    const int64_t* a = all;
    const int64_t* b = all + static_cast<int64_t>(j) * kHeader;
    const bool same_layout = a[kSparseDim] == b[kSparseDim] && a[kDenseDim] == b[kDenseDim] && a[kDims] == b[kDims] &&
                             a[kDtype] == b[kDtype];
    RZ_CHECK_VALUE(same_layout && a[kSizesHash] == b[kSizesHash], c.op,
                   ": the ranks' sparse tensors differ: rank 0 has ", describe(a), ", rank ", j, " has ", describe(b),
                   same_layout ? " and different sizes" : "", " (this rank's sizes: ", in.sizes(), ")");
  }

  const int64_t sparse_dim = in.sparse_dim();
  const auto value_shape = in.sizes().slice(sparse_dim);
  int64_t dense_numel = 1;
  for (int64_t s : value_shape) dense_numel *= s;
  std::vector<int64_t> nnz(n), idx_counts(n), val_counts(n), idx_off(n + 1, 0), val_off(n + 1, 0);
  for (int j = 0; j < n; ++j) {
    nnz[j] = all[static_cast<int64_t>(j) * kHeader + kNnz];
    idx_counts[j] = nnz[j] * sparse_dim;
    val_counts[j] = nnz[j] * dense_numel;
    idx_off[j + 1] = idx_off[j] + idx_counts[j];
    val_off[j + 1] = val_off[j] + val_counts[j];
  }

  auto indices = at::empty({idx_off[n]}, at::kLong);
  indices.narrow(0, idx_off[r], idx_counts[r]).copy_(in._indices().reshape({-1}));
  allgather_parts(c, indices, idx_counts, static_cast<uint32_t>(n));
  auto values = at::empty({val_off[n]}, in._values().options());
  values.narrow(0, val_off[r], val_counts[r]).copy_(in._values().reshape({-1}));
  allgather_parts(c, values, val_counts, static_cast<uint32_t>(2 * n));

  // gloo's sum: rank 0's tensor plus each other rank's in rank order, then coalesce.
  auto part = [&](int j) {
    std::vector<int64_t> vshape{nnz[j]};
    vshape.insert(vshape.end(), value_shape.begin(), value_shape.end());
    return at::sparse_coo_tensor(indices.narrow(0, idx_off[j], idx_counts[j]).reshape({sparse_dim, nnz[j]}),
                                 values.narrow(0, val_off[j], val_counts[j]).reshape(vshape), in.sizes(), in.options());
  };
  at::Tensor out = part(0);
  for (int j = 1; j < n; ++j) out += part(j);
  return out.coalesce();
}

}  // namespace

bool is_sparse_call(const std::vector<at::Tensor>& tensors) {
  return !tensors.empty() && tensors[0].defined() && tensors[0].layout() != at::kStrided;
}

void check_sparse_allreduce(const std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  RZ_CHECK_VALUE(tensors.size() == 1, "allreduce takes exactly one tensor per process, got ", tensors.size());
  const auto& t = tensors[0];
  RZ_CHECK_TYPE(t.layout() == at::kSparse, "allreduce: only strided and sparse COO tensors are supported, got layout ",
                t.layout());
  RZ_CHECK_TYPE(t.device().is_cpu() || t.device().is_cuda(), "allreduce: tensors must be on cpu or cuda, got ",
                t.device());
  to_dtype(t.scalar_type(), "allreduce of a sparse tensor");
  RZ_CHECK_VALUE(opts.reduceOp.op_ == c10d::ReduceOp::SUM,
                 "allreduce of sparse tensors supports only ReduceOp.SUM (as gloo), got op ",
                 static_cast<int>(opts.reduceOp.op_));
}

std::function<void(Comm&)> sparse_allreduce_body(const at::Tensor& t) {
  // The CUDA case: copied here on the caller's thread as it is and coalesced on the host, so
  // duplicates are summed in the CPU call's order and the result matches it bit for bit
  // (coalescing on the device sums them in another order).
  at::Tensor host;
  if (!t.device().is_cpu()) {
    at::AutoDispatchBelowAutograd below;
    host = t.to(at::kCPU);
  }
  return [t, host](Comm& c) {
    // Plain ATen ops on gradients: nothing to record for autograd (gloo does the same).
    at::AutoDispatchBelowAutograd below;
    at::NoGradGuard no_grad;
    at::Tensor out = sparse_allreduce_host(c, (host.defined() ? host : t).coalesce());
    t.copy_(t.device().is_cpu() ? out : out.to(t.device()));
  };
}

}  // namespace ringzip
