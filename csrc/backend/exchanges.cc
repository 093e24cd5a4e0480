// gather, scatter and all-to-all entry points (one dispatch for every device, as collectives.cc).
#include "backend/backend.h"
#include "backend/tensors.h"
#include "common/check.h"

namespace ringzip {

c10::intrusive_ptr<c10d::Work> RingzipBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::GatherOptions& opts) {
  check_single(inputs, "gather");
  check_rank(opts.rootRank, size_, "gather", "root");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<Staged> outs;
  if (rank_ == root) {
    RZ_CHECK_VALUE(outputs.size() == 1, "gather: the root takes one output list, got ", outputs.size());
    RZ_CHECK_VALUE(outputs[0].size() == static_cast<size_t>(size_), "gather: output list has ", outputs[0].size(),
                   " tensors, expected ", size_, " (one per rank)");
    for (const auto& t : outputs[0]) check_same(t, inputs[0], "gather", "an output tensor");
  } else {
    RZ_CHECK_VALUE(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "gather: only the root (rank ", root,
                   ") takes an output list");
  }
  std::vector<at::Tensor> result = rank_ == root ? outputs[0] : std::vector<at::Tensor>{};
  DevicePath* path = path_of(inputs[0]);
  const c10::Device where = working(path, inputs[0]);
  for (const auto& t : result) outs.push_back(Staged::out(t, where));
  auto in = Staged::in(inputs[0], where);
  // Non-roots have no outputs: the fingerprint compares the input.
  auto call = make_issue(c10d::OpType::GATHER, "gather", result, opts, inputs, 1, FpExtra{&inputs[0]});
  return issue(path, std::move(call), [in, outs, root](Comm& c) {
    std::vector<void*> ptrs;
    for (const auto& o : outs) ptrs.push_back(o.work.data_ptr());
    if (c.rank() == root) c.dev.copy(ptrs[root], in.work.data_ptr(), in.work.nbytes());
    ringzip::gather(c, in.work.data_ptr(), in.work.nbytes(), ptrs, root);
    for (const auto& o : outs) o.finish();
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ScatterOptions& opts) {
  check_single(outputs, "scatter");
  check_rank(opts.rootRank, size_, "scatter", "root");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<Staged> ins;
  if (rank_ == root) {
    RZ_CHECK_VALUE(inputs.size() == 1, "scatter: the root takes one input list, got ", inputs.size());
    RZ_CHECK_VALUE(inputs[0].size() == static_cast<size_t>(size_), "scatter: input list has ", inputs[0].size(),
                   " tensors, expected ", size_, " (one per rank)");
    for (const auto& t : inputs[0]) check_same(t, outputs[0], "scatter", "an input tensor");
  } else {
    RZ_CHECK_VALUE(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "scatter: only the root (rank ", root,
                   ") takes an input list");
  }
  DevicePath* path = path_of(outputs[0]);
  const c10::Device where = working(path, outputs[0]);
  std::vector<at::Tensor> read;
  if (rank_ == root) {
    read = inputs[0];
    for (const auto& t : inputs[0]) ins.push_back(Staged::in(t, where));
  }
  auto out = Staged::out(outputs[0], where);
  auto call = make_issue(c10d::OpType::SCATTER, "scatter", outputs, opts, read);
  return issue(path, std::move(call), [ins, out, root](Comm& c) {
    std::vector<const void*> ptrs;
    for (const auto& i : ins) ptrs.push_back(i.work.data_ptr());
    if (c.rank() == root) c.dev.copy(out.work.data_ptr(), ptrs[root], out.work.nbytes());
    ringzip::scatter(c, ptrs, out.work.data_ptr(), out.work.nbytes(), root);
    out.finish();
  });
}

namespace {

// Byte counts of the dim-0 blocks of `t` given split sizes (empty: equal blocks).
std::vector<size_t> split_bytes(const at::Tensor& t, const std::vector<int64_t>& splits, int world, const char* what) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const size_t row_bytes = rows == 0 ? 0 : t.nbytes() / rows;
  std::vector<size_t> bytes(world);
  if (splits.empty()) {
    RZ_CHECK_VALUE(rows % world == 0, "alltoall_base: ", what, " dim 0 (", rows,
                   ") is not divisible by the group size ", world);
    for (auto& b : bytes) b = rows / world * row_bytes;
    return bytes;
  }
  RZ_CHECK_VALUE(splits.size() == static_cast<size_t>(world), "alltoall_base: ", what, " split sizes has ",
                 splits.size(), " entries, expected ", world);
  int64_t sum = 0;
  for (int i = 0; i < world; ++i) {
    RZ_CHECK_VALUE(splits[i] >= 0, "alltoall_base: negative ", what, " split size ", splits[i]);
    sum += splits[i];
    bytes[i] = splits[i] * row_bytes;
  }
  RZ_CHECK_VALUE(sum == rows, "alltoall_base: ", what, " split sizes sum to ", sum, " but dim 0 is ", rows);
  return bytes;
}

std::vector<size_t> offsets_of(const std::vector<size_t>& bytes) {
  std::vector<size_t> off(bytes.size(), 0);
  for (size_t i = 1; i < bytes.size(); ++i) off[i] = off[i - 1] + bytes[i - 1];
  return off;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> RingzipBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                             std::vector<int64_t>& output_splits,
                                                             std::vector<int64_t>& input_splits,
                                                             const c10d::AllToAllOptions& opts) {
  check_single({input}, "alltoall_base");
  check_device(output, input, "alltoall_base", "output");
  RZ_CHECK_TYPE(output.scalar_type() == input.scalar_type(), "alltoall_base: output dtype ", output.scalar_type(),
                " differs from input dtype ", input.scalar_type());
  auto sb = split_bytes(input, input_splits, size_, "input");
  auto rb = split_bytes(output, output_splits, size_, "output");
  RZ_CHECK_VALUE(sb[rank_] == rb[rank_], "alltoall_base: this rank sends itself ", sb[rank_], " bytes but expects ",
                 rb[rank_]);
  DevicePath* path = path_of(input);
  const c10::Device where = working(path, input);
  const at::Tensor in = Staged::unaliased(input, output, where);
  auto out = Staged::out(output, where);
  // Splits differ by rank: the fingerprint leaves sizes out.
  auto call =
      make_issue(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output}, opts, {input}, 1, FpExtra{nullptr, true});
  return issue(path, std::move(call), [in, out, sb, rb](Comm& c) {
    auto so = offsets_of(sb), ro = offsets_of(rb);
    std::vector<const void*> sp;
    std::vector<void*> rp;
    for (int i = 0; i < c.size(); ++i) {
      sp.push_back(static_cast<const char*>(in.data_ptr()) + so[i]);
      rp.push_back(static_cast<char*>(out.work.data_ptr()) + ro[i]);
    }
    ringzip::alltoall(c, sp, sb, rp, rb);
    out.finish();
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllToAllOptions& opts) {
  RZ_CHECK_VALUE(inputs.size() == static_cast<size_t>(size_) && outputs.size() == inputs.size(), "alltoall: expected ",
                 size_, " input and output tensors, got ", inputs.size(), " and ", outputs.size());
  std::vector<Staged> ins, outs;
  for (int i = 0; i < size_; ++i) {
    check_single({inputs[i]}, "alltoall");
    check_device(outputs[i], inputs[0], "alltoall", "an output tensor");
    check_device(inputs[i], inputs[0], "alltoall", "an input tensor");
    RZ_CHECK_TYPE(
        inputs[i].scalar_type() == inputs[0].scalar_type() && outputs[i].scalar_type() == inputs[0].scalar_type(),
        "alltoall: all tensors must have one dtype");
  }
  RZ_CHECK_VALUE(inputs[rank_].numel() == outputs[rank_].numel(), "alltoall: this rank's own input has ",
                 inputs[rank_].numel(), " elements but its output slot has ", outputs[rank_].numel());
  DevicePath* path = path_of(inputs[0]);
  const c10::Device where = working(path, inputs[0]);
  for (int i = 0; i < size_; ++i) {
    ins.push_back(Staged::in(inputs[i], where));
    outs.push_back(Staged::out(outputs[i], where));
  }
  // Sizes may differ by rank: the fingerprint leaves them out.
  auto call = make_issue(c10d::OpType::ALLTOALL, "alltoall", outputs, opts, inputs, 1, FpExtra{nullptr, true});
  return issue(path, std::move(call), [ins, outs](Comm& c) {
    std::vector<const void*> sp;
    std::vector<void*> rp;
    std::vector<size_t> sb, rb;
    for (int i = 0; i < c.size(); ++i) {
      sp.push_back(ins[i].work.data_ptr());
      sb.push_back(ins[i].work.nbytes());
      rp.push_back(outs[i].work.data_ptr());
      rb.push_back(outs[i].work.nbytes());
    }
    ringzip::alltoall(c, sp, sb, rp, rb);
    for (const auto& o : outs) o.finish();
  });
}

}  // namespace ringzip
