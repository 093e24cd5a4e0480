// The c10d collective entry points: check arguments here, on the caller's thread, then queue
// the algorithm with host-staged buffers -- or, for CUDA tensors, hand the checked call to the
// CUDA path (cuda_collectives.cc).
#include <cstring>
#include <numeric>

#include "backend/backend.h"
#include "backend/sparse.h"
#include "backend/tensors.h"
#include "collective/hierarchy/hierarchy.h"
#include "collective/reduce.h"
#include "common/check.h"

namespace ringzip {
namespace {

// Reduce-scatter of a flat host buffer holding `world` equal parts; the reduced part of this
// rank is copied into `out`.
void run_reduce_scatter(Comm& c, Buf flat, const Reduction& red, const at::Tensor& out, const NodeLayout* nodes) {
  if (red.pre != 1.0) scale_inplace(flat.dtype, flat.data, flat.count, red.pre);
  const size_t part = flat.count / c.size();
  std::vector<size_t> begin(c.size() + 1);
  for (int i = 0; i <= c.size(); ++i) begin[i] = part * i;
  if (nodes)
    hierarchical_reduce_scatter(c, *nodes, flat, red.op);
  else
    ring_reduce_scatter(c, flat, red.op, begin);
  Buf mine{flat.at(begin[c.rank()]), part, flat.dtype};
  if (red.post != 1.0) scale_inplace(mine.dtype, mine.data, mine.count, red.post);
  if (mine.bytes()) std::memcpy(out.data_ptr(), mine.data, mine.bytes());  // null for empty parts
}

// The coalesced reduce-scatter runs every item exact.
Call exact_only(Call call) {
  call.may_compress = false;
  return call;
}

void check_list(const std::vector<at::Tensor>& list, const at::Tensor& like, size_t expect, const char* op,
                const char* what) {
  RZ_CHECK_VALUE(list.size() == expect, op, ": ", what, " has ", list.size(), " tensors, expected ", expect,
                 " (one per rank)");
  for (const auto& t : list) check_same(t, like, op, what);
}

}  // namespace

c10::intrusive_ptr<c10d::Work> RingzipBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  if (is_sparse_call(tensors)) {  // COO: allgather of indices and values, gloo's semantics (sparse.h)
    check_sparse_allreduce(tensors, opts);
    return enqueue(c10d::OpType::_ALLREDUCE_SPARSE, "allreduce (sparse)", tensors, opts,
                   sparse_allreduce_body(tensors[0]));
  }
  check_single(tensors, "allreduce");
#ifdef RINGZIP_WITH_CUDA
  if (use_cuda(tensors[0])) return cuda_allreduce(tensors[0], opts);
#endif
  const Call call = planned_call(CallKind::Allreduce, tensors[0], tensors[0].numel(), opts.reduceOp);
  Plan plan = planner_.plan(call);
  if (plan.compressed) return compressed_allreduce_work(tensors[0], opts, "allreduce", tensors, call, plan);
  auto red = to_reduction(opts.reduceOp, to_dtype(tensors[0].scalar_type(), "allreduce"), size_, "allreduce");
  auto s = Staged::in(tensors[0]);
  return enqueue(c10d::OpType::ALLREDUCE, "allreduce", tensors, opts, [this, s, red, call, plan](Comm& c) mutable {
    planner_.settle(c, call, plan);
    run_dense_allreduce(c, s.buf(), red, plan);
    s.finish();
  });
}

// torch sends sparse CUDA tensors here (sparse CPU ones to allreduce); like gloo, one path.
c10::intrusive_ptr<c10d::Work> RingzipBackend::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                                const c10d::AllreduceOptions& opts) {
  return allreduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                   const c10d::AllreduceCoalescedOptions& opts) {
  RZ_CHECK_VALUE(!tensors.empty(), "allreduce_coalesced: no tensors given");
  for (const auto& t : tensors) {
    check_single({t}, "allreduce_coalesced");
    check_device(t, tensors[0], "allreduce_coalesced", "a tensor");
    RZ_CHECK_TYPE(t.scalar_type() == tensors[0].scalar_type(),
                  "allreduce_coalesced: all tensors must have one dtype, got ", t.scalar_type(), " and ",
                  tensors[0].scalar_type());
  }
  auto red = to_reduction(opts.reduceOp, to_dtype(tensors[0].scalar_type(), "allreduce_coalesced"), size_,
                          "allreduce_coalesced");
#ifdef RINGZIP_WITH_CUDA
  if (use_cuda(tensors[0])) return cuda_allreduce_coalesced(tensors, opts);
#endif
  std::vector<at::Tensor> flat_in;
  for (const auto& t : tensors) flat_in.push_back(t.reshape({-1}).to(at::kCPU));
  auto flat = at::cat(flat_in);
  c10d::AllreduceOptions as_one;
  as_one.reduceOp = opts.reduceOp;
  as_one.timeout = opts.timeout;
  auto copy_back = [tensors, flat] {
    int64_t off = 0;
    for (const auto& t : tensors) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  };
  const Call call = planned_call(CallKind::Allreduce, flat, flat.numel(), opts.reduceOp);
  Plan plan = planner_.plan(call);
  if (plan.compressed)
    return compressed_allreduce_work(flat, as_one, "allreduce_coalesced", tensors, call, plan, copy_back);
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors, opts,
                 [this, flat, red, copy_back, call, plan](Comm& c) mutable {
                   planner_.settle(c, call, plan);
                   run_dense_allreduce(c, buf_of(flat), red, plan);
                   copy_back();
                 });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                         const c10d::BroadcastOptions& opts) {
  check_single(tensors, "broadcast");
  check_rank(opts.rootRank, size_, "broadcast", "root");
  RZ_CHECK_VALUE(opts.rootTensor == 0, "broadcast: root tensor index must be 0, got ", opts.rootTensor);
#ifdef RINGZIP_WITH_CUDA
  if (use_cuda(tensors[0])) return cuda_broadcast(tensors[0], opts);
#endif
  const int root = static_cast<int>(opts.rootRank);
  auto s = rank_ == root ? Staged::in(tensors[0]) : Staged::out(tensors[0]);
  return enqueue(c10d::OpType::BROADCAST, "broadcast", tensors, opts, [s, root](Comm& c) {
    ringzip::broadcast(c, s.buf(), root);
    s.finish();
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::reduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::ReduceOptions& opts) {
  check_single(tensors, "reduce");
  check_rank(opts.rootRank, size_, "reduce", "root");
  auto red = to_reduction(opts.reduceOp, to_dtype(tensors[0].scalar_type(), "reduce"), size_, "reduce");
#ifdef RINGZIP_WITH_CUDA
  if (use_cuda(tensors[0])) return cuda_reduce(tensors[0], opts);
#endif
  const int root = static_cast<int>(opts.rootRank);
  auto s = Staged::in(tensors[0]);
  const bool is_root = rank_ == root;
  return enqueue(c10d::OpType::REDUCE, "reduce", tensors, opts, [s, red, root, is_root](Comm& c) {
    // Pre-scaling must not touch a non-root's input, so it works on a copy there.
    at::Tensor w = (red.pre != 1.0 && !is_root) ? s.work.clone() : s.work;
    Buf b = buf_of(w);
    if (red.pre != 1.0) scale_inplace(b.dtype, b.data, b.count, red.pre);
    ringzip::reduce(c, b, red.op, root);
    if (is_root) {
      if (red.post != 1.0) scale_inplace(b.dtype, b.data, b.count, red.post);
      s.finish();
    }
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                              std::vector<std::vector<at::Tensor>>& inputs,
                                                              const c10d::ReduceScatterOptions& opts) {
  check_single(outputs, "reduce_scatter");
  RZ_CHECK_VALUE(inputs.size() == 1, "reduce_scatter takes one input list per process, got ", inputs.size());
  check_list(inputs[0], outputs[0], size_, "reduce_scatter", "input list");
  auto red = to_reduction(opts.reduceOp, to_dtype(outputs[0].scalar_type(), "reduce_scatter"), size_, "reduce_scatter");
#ifdef RINGZIP_WITH_CUDA
  if (use_cuda(outputs[0]))
    return cuda_reduce_scatter(outputs[0], inputs[0], opts, c10d::OpType::REDUCE_SCATTER, "reduce_scatter");
#endif
  std::vector<at::Tensor> parts;
  for (const auto& t : inputs[0]) parts.push_back(t.reshape({-1}).to(at::kCPU));
  auto flat = at::cat(parts);
  const Call call = planned_call(CallKind::ReduceScatter, flat, flat.numel(), opts.reduceOp);
  Plan plan = planner_.plan(call);
  if (plan.compressed)
    return compressed_reduce_scatter_work(outputs[0], flat, opts, "reduce_scatter", inputs[0][0], call, plan);
  auto s = Staged::out(outputs[0]);
  const NodeLayout* nodes = plan.nodes;
  return enqueue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs, opts, [flat, s, red, nodes](Comm& c) {
    run_reduce_scatter(c, buf_of(flat), red, s.work, nodes);
    s.finish();
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                    const c10d::ReduceScatterOptions& opts) {
  check_single({output}, "reduce_scatter_tensor");
  check_device(input, output, "reduce_scatter_tensor", "input");
  RZ_CHECK_TYPE(input.scalar_type() == output.scalar_type(), "reduce_scatter_tensor: input dtype ", input.scalar_type(),
                " differs from output dtype ", output.scalar_type());
  RZ_CHECK_VALUE(input.numel() == output.numel() * size_, "reduce_scatter_tensor: input has ", input.numel(),
                 " elements, expected output size ", output.numel(), " x group size ", size_);
  auto red = to_reduction(opts.reduceOp, to_dtype(output.scalar_type(), "reduce_scatter_tensor"), size_,
                          "reduce_scatter_tensor");
#ifdef RINGZIP_WITH_CUDA
  if (use_cuda(output))
    return cuda_reduce_scatter(output, {input}, opts, c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor");
#endif
  const Call call = planned_call(CallKind::ReduceScatter, input, input.numel(), opts.reduceOp);
  Plan plan = planner_.plan(call);
  if (plan.compressed)
    return compressed_reduce_scatter_work(output, input, opts, "reduce_scatter_tensor", input, call, plan);
  // The reduction runs in place, so it works on a copy: the caller's input stays intact.
  auto flat = input.to(at::kCPU, false, /*copy=*/true).contiguous();
  auto s = Staged::out(output);
  const NodeLayout* nodes = plan.nodes;
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {output}, opts,
                 [flat, s, red, nodes](Comm& c) {
                   run_reduce_scatter(c, buf_of(flat), red, s.work, nodes);
                   s.finish();
                 });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                               std::vector<at::Tensor>& inputs,
                                                                               const c10d::ReduceScatterOptions& opts) {
  RZ_CHECK_VALUE(outputs.size() == inputs.size(), "reduce_scatter_tensor_coalesced: ", outputs.size(), " outputs but ",
                 inputs.size(), " inputs");
  struct Item {
    at::Tensor flat;
    Staged out;
    Reduction red;
    const NodeLayout* nodes;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_single({outputs[i]}, "reduce_scatter_tensor_coalesced");
    check_device(inputs[i], outputs[i], "reduce_scatter_tensor_coalesced", "input");
    check_device(outputs[i], outputs[0], "reduce_scatter_tensor_coalesced", "an output");
    RZ_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * size_, "reduce_scatter_tensor_coalesced: input ", i,
                   " has ", inputs[i].numel(), " elements, expected ", outputs[i].numel() * size_);
    RZ_CHECK_TYPE(inputs[i].scalar_type() == outputs[i].scalar_type(),
                  "reduce_scatter_tensor_coalesced: input and output dtypes differ");
    to_reduction(opts.reduceOp, to_dtype(outputs[i].scalar_type(), "reduce_scatter"), size_,
                 "reduce_scatter_tensor_coalesced");
  }
#ifdef RINGZIP_WITH_CUDA
  if (!outputs.empty() && use_cuda(outputs[0])) return cuda_reduce_scatter_coalesced(outputs, inputs, opts);
#endif
  for (size_t i = 0; i < outputs.size(); ++i) {
    items.push_back(
        {inputs[i].to(at::kCPU, false, true).contiguous(), Staged::out(outputs[i]),
         to_reduction(opts.reduceOp, to_dtype(outputs[i].scalar_type(), "reduce_scatter"), size_,
                      "reduce_scatter_tensor_coalesced"),
         planner_.plan(exact_only(planned_call(CallKind::ReduceScatter, inputs[i], inputs[i].numel(), opts.reduceOp)))
             .nodes});
  }
  const auto n = static_cast<uint32_t>(items.size());
  return enqueue(
      c10d::OpType::COALESCED, "reduce_scatter_tensor_coalesced", outputs, opts,
      [items](Comm& c) {
        for (const auto& it : items) {
          run_reduce_scatter(c, buf_of(it.flat), it.red, it.out.work, it.nodes);
          it.out.finish();
          ++c.seq;
        }
      },
      std::max<uint32_t>(n, 1));
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllgatherOptions& opts) {
  check_single(inputs, "allgather");
  RZ_CHECK_VALUE(outputs.size() == 1, "allgather takes one output list per process, got ", outputs.size());
  check_list(outputs[0], inputs[0], size_, "allgather", "output list");
#ifdef RINGZIP_WITH_CUDA
  if (use_cuda(inputs[0])) return cuda_allgather(outputs[0], inputs[0], opts);
#endif
  auto flat = at::empty({inputs[0].numel() * size_}, inputs[0].options().device(at::kCPU));
  auto in = Staged::in(inputs[0]);
  auto outs = outputs[0];
  return enqueue(c10d::OpType::ALLGATHER, "allgather", outs, opts, [flat, in, outs](Comm& c) {
    const int64_t n = in.work.numel();
    flat.narrow(0, n * c.rank(), n).copy_(in.work.reshape({-1}));
    ring_allgather(c, buf_of(flat), even_parts(flat.numel(), c.size()));
    for (int i = 0; i < c.size(); ++i) outs[i].copy_(flat.narrow(0, n * i, n).view(outs[i].sizes()));
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                               const c10d::AllgatherOptions& opts) {
  check_single({input}, "allgather_into_tensor");
  check_device(output, input, "allgather_into_tensor", "output");
  RZ_CHECK_TYPE(output.scalar_type() == input.scalar_type(), "allgather_into_tensor: output dtype ",
                output.scalar_type(), " differs from input dtype ", input.scalar_type());
  RZ_CHECK_VALUE(output.numel() == input.numel() * size_, "allgather_into_tensor: output has ", output.numel(),
                 " elements, expected input size ", input.numel(), " x group size ", size_);
#ifdef RINGZIP_WITH_CUDA
  if (use_cuda(input)) return cuda_allgather_base(output, input, opts);
#endif
  auto in = input.to(at::kCPU, false, /*copy=*/true).contiguous();  // may alias the output
  auto out = Staged::out(output);
  return enqueue(c10d::OpType::_ALLGATHER_BASE, "allgather_into_tensor", {output}, opts, [in, out](Comm& c) {
    auto flat = out.work.view({-1});
    const int64_t n = in.numel();
    flat.narrow(0, n * c.rank(), n).copy_(in.view({-1}));
    ring_allgather(c, buf_of(flat), even_parts(flat.numel(), c.size()));
    out.finish();
  });
}

// outputs[rank][i] receives rank's inputs[i] (one list per rank, as torch and gloo pass them).
c10::intrusive_ptr<c10d::Work> RingzipBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                   std::vector<at::Tensor>& inputs,
                                                                   const c10d::AllgatherOptions& opts) {
  RZ_CHECK_VALUE(!inputs.empty(), "allgather_coalesced: no input tensors given");
  RZ_CHECK_VALUE(outputs.size() == static_cast<size_t>(size_), "allgather_coalesced: ", outputs.size(),
                 " output lists, expected ", size_, " (one per rank)");
  std::vector<at::Tensor> ins, all_out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_single({inputs[i]}, "allgather_coalesced");
    check_device(inputs[i], inputs[0], "allgather_coalesced", "an input tensor");
  }
  for (const auto& list : outputs) {
    RZ_CHECK_VALUE(list.size() == inputs.size(), "allgather_coalesced: an output list has ", list.size(),
                   " tensors but there are ", inputs.size(), " inputs");
    for (size_t i = 0; i < list.size(); ++i) {
      check_same(list[i], inputs[i], "allgather_coalesced", "an output tensor");
      all_out.push_back(list[i]);
    }
  }
#ifdef RINGZIP_WITH_CUDA
  if (use_cuda(inputs[0])) return cuda_allgather_coalesced(outputs, inputs, opts);
#endif
  for (const auto& t : inputs) ins.push_back(t.reshape({-1}).to(at::kCPU, false, true).contiguous());
  auto outs = outputs;
  return enqueue(
      c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", all_out, opts,
      [ins, outs](Comm& c) {
        for (size_t i = 0; i < ins.size(); ++i) {
          const int64_t n = ins[i].numel();
          auto flat = at::empty({n * c.size()}, ins[i].options());
          flat.narrow(0, n * c.rank(), n).copy_(ins[i]);
          ring_allgather(c, buf_of(flat), even_parts(flat.numel(), c.size()));
          for (int r = 0; r < c.size(); ++r) outs[r][i].copy_(flat.narrow(0, n * r, n).view(outs[r][i].sizes()));
          ++c.seq;
        }
      },
      static_cast<uint32_t>(inputs.size()));
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                               std::vector<at::Tensor>& inputs,
                                                                               const c10d::AllgatherOptions& opts) {
  RZ_CHECK_VALUE(outputs.size() == inputs.size(), "allgather_into_tensor_coalesced: ", outputs.size(), " outputs but ",
                 inputs.size(), " inputs");
  std::vector<std::pair<at::Tensor, Staged>> items;
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_single({inputs[i]}, "allgather_into_tensor_coalesced");
    check_device(outputs[i], inputs[i], "allgather_into_tensor_coalesced", "output");
    check_device(inputs[i], inputs[0], "allgather_into_tensor_coalesced", "an input");
    RZ_CHECK_TYPE(outputs[i].scalar_type() == inputs[i].scalar_type(),
                  "allgather_into_tensor_coalesced: output and input dtypes differ");
    RZ_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * size_, "allgather_into_tensor_coalesced: output ", i,
                   " has ", outputs[i].numel(), " elements, expected ", inputs[i].numel() * size_);
  }
#ifdef RINGZIP_WITH_CUDA
  if (!inputs.empty() && use_cuda(inputs[0])) return cuda_allgather_into_tensor_coalesced(outputs, inputs, opts);
#endif
  for (size_t i = 0; i < outputs.size(); ++i)
    items.emplace_back(inputs[i].to(at::kCPU, false, true).contiguous(), Staged::out(outputs[i]));
  return enqueue(
      c10d::OpType::COALESCED, "allgather_into_tensor_coalesced", outputs, opts,
      [items](Comm& c) {
        for (const auto& [in, out] : items) {
          auto flat = out.work.view({-1});
          const int64_t n = in.numel();
          flat.narrow(0, n * c.rank(), n).copy_(in.view({-1}));
          ring_allgather(c, buf_of(flat), even_parts(flat.numel(), c.size()));
          out.finish();
          ++c.seq;
        }
      },
      std::max<uint32_t>(static_cast<uint32_t>(items.size()), 1));
}

Call RingzipBackend::planned_call(CallKind kind, const at::Tensor& t, int64_t numel, const c10d::ReduceOp& op) const {
  return Call{kind,  use_cuda(t) ? Device::Cuda : Device::Host,    t.scalar_type(), op.op_,
              numel, static_cast<size_t>(numel) * t.element_size()};
}

void RingzipBackend::run_dense_allreduce(Comm& c, Buf b, const Reduction& red, const Plan& plan) {
  if (red.pre != 1.0) scale_inplace(b.dtype, b.data, b.count, red.pre);
  planner_.timed(c, plan, [&] {
    if (plan.nodes) return hierarchical_allreduce(c, *plan.nodes, b, red.op, plan.dense);
    ringzip::allreduce(c, b, red.op, plan.dense);
  });
  if (red.post != 1.0) scale_inplace(b.dtype, b.data, b.count, red.post);
}

}  // namespace ringzip
