// The c10d collective entry points, one dispatch for every device: check the arguments here, on
// the caller's thread, plan the call, stage its tensors on the path's device (the host, or the
// tensor's GPU where a device path serves it: backend/device_path.h) and issue its body there.
// The bodies run ringzip's schedules over the call's Comm, or the transport's own collective
// where the plan says so (NCCL's, Plan::nccl).
#include <numeric>

#include "backend/backend.h"
#include "backend/compressed_run.h"
#include "backend/sparse.h"
#include "backend/tensors.h"
#include "collective/hierarchy/hierarchy.h"
#include "common/check.h"
#include "transport/native.h"

namespace ringzip {
namespace {

NativeCollectives& native_of(Comm& c) {
  NativeCollectives* n = c.net.native();
  RZ_CHECK(n != nullptr, c.op, ": the plan asked for the transport's own collective, but ", c.net.name(), " has none");
  return *n;
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

// One flat tensor on `where` holding the tensors in order (a fresh one: reduced in place).
at::Tensor cat_flat(const std::vector<at::Tensor>& ts, c10::Device where) {
  std::vector<at::Tensor> flat;
  for (const auto& t : ts) flat.push_back(t.reshape({-1}).to(where));
  return at::cat(flat);
}

// The input of an exact reduce-scatter on `where`: a copy, since ringzip's schedules reduce it
// in place, except where NCCL's own reads it as it is.
at::Tensor scatter_input(const at::Tensor& in, c10::Device where, const Plan& plan, const Reduction& red) {
  if (plan.nccl && red.pre == 1.0) return Staged::in(in, where).work;
  return Staged::copy(in, where);
}

// Every rank's `in` (contiguous) into `flat` (contiguous, size() x in, rank order).
void allgather_into(Comm& c, const Plan& plan, const at::Tensor& in, const at::Tensor& flat) {
  if (plan.nccl) return native_of(c).allgather(in.data_ptr(), flat.data_ptr(), in.nbytes());
  if (in.nbytes()) c.dev.copy(static_cast<char*>(flat.data_ptr()) + in.nbytes() * c.rank(), in.data_ptr(), in.nbytes());
  ring_allgather(c, buf_of(flat), even_parts(flat.numel(), c.size()));
}

}  // namespace

c10::intrusive_ptr<c10d::Work> RingzipBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  if (is_sparse_call(tensors)) {  // COO: allgather of indices and values, gloo's semantics (sparse.h)
    check_sparse_allreduce(tensors, opts);
    return submit(make_issue(c10d::OpType::_ALLREDUCE_SPARSE, "allreduce (sparse)", tensors, opts),
                  sparse_allreduce_body(tensors[0]));
  }
  check_single(tensors, "allreduce");
  const at::Tensor& t = tensors[0];
  auto red = to_reduction(opts.reduceOp, to_dtype(t.scalar_type(), "allreduce"), size_, "allreduce");
  DevicePath* path = path_of(t);
  const Call call = planned_call(CallKind::Allreduce, path, t, t.numel(), opts.reduceOp);
  Plan plan = planner_.plan(call);
  if (plan.compressed) {
    auto one = make_issue(c10d::OpType::ALLREDUCE, "allreduce", tensors, opts, {}, 1, codec_fingerprint(plan.cc));
    return compressed_work(path, std::move(one), t, t, t, opts.reduceOp, false, call, plan);
  }
  auto s = Staged::in(t, working(path, t));
  return issue(path, make_issue(c10d::OpType::ALLREDUCE, "allreduce", tensors, opts),
               [this, s, red, call, plan](Comm& c) mutable {
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

// One flat tensor, all-reduced as one call (compressed: an ALLREDUCE).
c10::intrusive_ptr<c10d::Work> RingzipBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                   const c10d::AllreduceCoalescedOptions& opts) {
  const char* name = "allreduce_coalesced";
  RZ_CHECK_VALUE(!tensors.empty(), name, ": no tensors given");
  for (const auto& t : tensors) {
    check_single({t}, name);
    check_device(t, tensors[0], name, "a tensor");
    RZ_CHECK_TYPE(t.scalar_type() == tensors[0].scalar_type(), name, ": all tensors must have one dtype, got ",
                  t.scalar_type(), " and ", tensors[0].scalar_type());
  }
  auto red = to_reduction(opts.reduceOp, to_dtype(tensors[0].scalar_type(), name), size_, name);
  DevicePath* path = path_of(tensors[0]);
  const at::Tensor flat = cat_flat(tensors, working(path, tensors[0]));
  auto copy_back = [tensors, flat] {
    int64_t off = 0;
    for (const auto& t : tensors) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  };
  const Call call = planned_call(CallKind::Allreduce, path, flat, flat.numel(), opts.reduceOp);
  Plan plan = planner_.plan(call);
  if (plan.compressed) {
    auto one = make_issue(c10d::OpType::ALLREDUCE, name, tensors, opts, {}, 1, codec_fingerprint(plan.cc));
    return compressed_work(path, std::move(one), flat, flat, tensors[0], opts.reduceOp, false, call, plan, copy_back);
  }
  return issue(path, make_issue(c10d::OpType::ALLREDUCE_COALESCED, name, tensors, opts),
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
  const at::Tensor& t = tensors[0];
  DevicePath* path = path_of(t);
  const int root = static_cast<int>(opts.rootRank);
  auto s = rank_ == root ? Staged::in(t, working(path, t)) : Staged::out(t, working(path, t));
  const Plan plan = planner_.plan(planned_call(CallKind::Broadcast, path, t, t.numel()));
  return issue(path, make_issue(c10d::OpType::BROADCAST, "broadcast", tensors, opts), [s, root, plan](Comm& c) {
    if (plan.nccl)
      native_of(c).broadcast(s.work.data_ptr(), s.work.nbytes(), root);
    else
      ringzip::broadcast(c, s.buf(), root);
    s.finish();
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::reduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::ReduceOptions& opts) {
  check_single(tensors, "reduce");
  check_rank(opts.rootRank, size_, "reduce", "root");
  const at::Tensor& t = tensors[0];
  auto red = to_reduction(opts.reduceOp, to_dtype(t.scalar_type(), "reduce"), size_, "reduce");
  DevicePath* path = path_of(t);
  const int root = static_cast<int>(opts.rootRank);
  auto s = Staged::in(t, working(path, t));
  const bool is_root = rank_ == root;
  const Plan plan = planner_.plan(planned_call(CallKind::Reduce, path, t, t.numel(), opts.reduceOp));
  return issue(path, make_issue(c10d::OpType::REDUCE, "reduce", tensors, opts), [s, red, root, is_root, plan](Comm& c) {
    // Pre-scaling must not touch a non-root's input, so it works on a copy there.
    at::Tensor w = (red.pre != 1.0 && !is_root) ? s.work.clone() : s.work;
    Buf b = buf_of(w);
    if (red.pre != 1.0) c.dev.scale(b.dtype, b.data, b.count, red.pre);
    if (plan.nccl)
      native_of(c).reduce(b.data, b.count, b.dtype, red.op, root);
    else
      ringzip::reduce(c, b, red.op, root);
    if (is_root) {
      if (red.post != 1.0) c.dev.scale(b.dtype, b.data, b.count, red.post);
      s.finish();
    }
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                              std::vector<std::vector<at::Tensor>>& inputs,
                                                              const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter";
  check_single(outputs, name);
  RZ_CHECK_VALUE(inputs.size() == 1, name, " takes one input list per process, got ", inputs.size());
  check_list(inputs[0], outputs[0], size_, name, "input list");
  auto red = to_reduction(opts.reduceOp, to_dtype(outputs[0].scalar_type(), name), size_, name);
  DevicePath* path = path_of(outputs[0]);
  const at::Tensor flat = cat_flat(inputs[0], working(path, outputs[0]));
  const Call call = planned_call(CallKind::ReduceScatter, path, flat, flat.numel(), opts.reduceOp);
  Plan plan = planner_.plan(call);
  if (plan.compressed) {
    auto one = make_issue(c10d::OpType::REDUCE_SCATTER, name, outputs, opts, inputs[0], 1, codec_fingerprint(plan.cc));
    return compressed_work(path, std::move(one), flat, outputs[0], inputs[0][0], opts.reduceOp, true, call, plan);
  }
  auto s = Staged::out(outputs[0], working(path, outputs[0]));
  return issue(path, make_issue(c10d::OpType::REDUCE_SCATTER, name, outputs, opts, inputs[0]),
               [flat, s, red, plan](Comm& c) {
                 run_reduce_scatter(c, buf_of(flat), red, s.work, plan);
                 s.finish();
               });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                    const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor";
  check_single({output}, name);
  check_device(input, output, name, "input");
  RZ_CHECK_TYPE(input.scalar_type() == output.scalar_type(), name, ": input dtype ", input.scalar_type(),
                " differs from output dtype ", output.scalar_type());
  RZ_CHECK_VALUE(input.numel() == output.numel() * size_, name, ": input has ", input.numel(),
                 " elements, expected output size ", output.numel(), " x group size ", size_);
  auto red = to_reduction(opts.reduceOp, to_dtype(output.scalar_type(), name), size_, name);
  DevicePath* path = path_of(output);
  const Call call = planned_call(CallKind::ReduceScatter, path, input, input.numel(), opts.reduceOp);
  Plan plan = planner_.plan(call);
  if (plan.compressed) {
    auto one = make_issue(c10d::OpType::REDUCE_SCATTER, name, {output}, opts, {input}, 1, codec_fingerprint(plan.cc));
    return compressed_work(path, std::move(one), input, output, input, opts.reduceOp, true, call, plan);
  }
  const at::Tensor flat = scatter_input(input, working(path, input), plan, red);
  auto s = Staged::out(output, working(path, output));
  return issue(path, make_issue(c10d::OpType::_REDUCE_SCATTER_BASE, name, {output}, opts, {input}),
               [flat, s, red, plan](Comm& c) {
                 run_reduce_scatter(c, buf_of(flat), red, s.work, plan);
                 s.finish();
               });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                               std::vector<at::Tensor>& inputs,
                                                                               const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor_coalesced";
  RZ_CHECK_VALUE(outputs.size() == inputs.size(), name, ": ", outputs.size(), " outputs but ", inputs.size(),
                 " inputs");
  std::vector<Reduction> reds;  // every item checked before any is staged
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_single({outputs[i]}, name);
    check_device(inputs[i], outputs[i], name, "input");
    check_device(outputs[i], outputs[0], name, "an output");
    RZ_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * size_, name, ": input ", i, " has ", inputs[i].numel(),
                   " elements, expected ", outputs[i].numel() * size_);
    RZ_CHECK_TYPE(inputs[i].scalar_type() == outputs[i].scalar_type(), name, ": input and output dtypes differ");
    reds.push_back(to_reduction(opts.reduceOp, to_dtype(outputs[i].scalar_type(), name), size_, name));
  }
  struct Item {
    at::Tensor flat;
    Staged out;
    Reduction red;
    Plan plan;
  };
  DevicePath* path = outputs.empty() ? nullptr : path_of(outputs[0]);
  std::vector<Item> items;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const c10::Device where = working(path, outputs[i]);
    const Plan plan = planner_.plan(
        exact_only(planned_call(CallKind::ReduceScatter, path, inputs[i], inputs[i].numel(), opts.reduceOp)));
    items.push_back({scatter_input(inputs[i], where, plan, reds[i]), Staged::out(outputs[i], where), reds[i], plan});
  }
  const auto n = static_cast<uint32_t>(items.size());
  return issue(path, make_issue(c10d::OpType::COALESCED, name, outputs, opts, inputs, std::max<uint32_t>(n, 1)),
               [items](Comm& c) {
                 for (const auto& it : items) {
                   run_reduce_scatter(c, buf_of(it.flat), it.red, it.out.work, it.plan);
                   it.out.finish();
                   ++c.seq;
                 }
               });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllgatherOptions& opts) {
  check_single(inputs, "allgather");
  RZ_CHECK_VALUE(outputs.size() == 1, "allgather takes one output list per process, got ", outputs.size());
  check_list(outputs[0], inputs[0], size_, "allgather", "output list");
  DevicePath* path = path_of(inputs[0]);
  auto in = Staged::in(inputs[0], working(path, inputs[0]));
  const Plan plan = planner_.plan(planned_call(CallKind::Allgather, path, inputs[0], inputs[0].numel()));
  auto outs = outputs[0];
  return issue(path, make_issue(c10d::OpType::ALLGATHER, "allgather", outs, opts, inputs), [in, outs, plan](Comm& c) {
    const int64_t n = in.work.numel();
    auto flat = at::empty({n * c.size()}, in.work.options());
    allgather_into(c, plan, in.work, flat);
    for (int i = 0; i < c.size(); ++i) outs[i].copy_(flat.narrow(0, n * i, n).view(outs[i].sizes()));
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                               const c10d::AllgatherOptions& opts) {
  const char* name = "allgather_into_tensor";
  check_single({input}, name);
  check_device(output, input, name, "output");
  RZ_CHECK_TYPE(output.scalar_type() == input.scalar_type(), name, ": output dtype ", output.scalar_type(),
                " differs from input dtype ", input.scalar_type());
  RZ_CHECK_VALUE(output.numel() == input.numel() * size_, name, ": output has ", output.numel(),
                 " elements, expected input size ", input.numel(), " x group size ", size_);
  DevicePath* path = path_of(input);
  const at::Tensor in = Staged::unaliased(input, output, working(path, input));
  auto out = Staged::out(output, working(path, output));
  const Plan plan = planner_.plan(planned_call(CallKind::Allgather, path, input, input.numel()));
  return issue(path, make_issue(c10d::OpType::_ALLGATHER_BASE, name, {output}, opts, {input}),
               [in, out, plan](Comm& c) {
                 allgather_into(c, plan, in, out.work);
                 out.finish();
               });
}

// outputs[rank][i] receives rank's inputs[i] (one list per rank, as torch and gloo pass them).
c10::intrusive_ptr<c10d::Work> RingzipBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                   std::vector<at::Tensor>& inputs,
                                                                   const c10d::AllgatherOptions& opts) {
  const char* name = "allgather_coalesced";
  RZ_CHECK_VALUE(!inputs.empty(), name, ": no input tensors given");
  RZ_CHECK_VALUE(outputs.size() == static_cast<size_t>(size_), name, ": ", outputs.size(), " output lists, expected ",
                 size_, " (one per rank)");
  std::vector<at::Tensor> all_out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_single({inputs[i]}, name);
    check_device(inputs[i], inputs[0], name, "an input tensor");
  }
  for (const auto& list : outputs) {
    RZ_CHECK_VALUE(list.size() == inputs.size(), name, ": an output list has ", list.size(), " tensors but there are ",
                   inputs.size(), " inputs");
    for (size_t i = 0; i < list.size(); ++i) {
      check_same(list[i], inputs[i], name, "an output tensor");
      all_out.push_back(list[i]);
    }
  }
  DevicePath* path = path_of(inputs[0]);
  std::vector<at::Tensor> ins;
  for (const auto& t : inputs) ins.push_back(Staged::copy(t, working(path, t)).view({-1}));
  const Plan plan = planner_.plan(planned_call(CallKind::Allgather, path, inputs[0], inputs[0].numel()));
  auto outs = outputs;
  return issue(
      path,
      make_issue(c10d::OpType::ALLGATHER_COALESCED, name, all_out, opts, inputs, static_cast<uint32_t>(inputs.size())),
      [ins, outs, plan](Comm& c) {
        for (size_t i = 0; i < ins.size(); ++i) {
          const int64_t n = ins[i].numel();
          auto flat = at::empty({n * c.size()}, ins[i].options());
          allgather_into(c, plan, ins[i], flat);
          for (int r = 0; r < c.size(); ++r) outs[r][i].copy_(flat.narrow(0, n * r, n).view(outs[r][i].sizes()));
          ++c.seq;
        }
      });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                               std::vector<at::Tensor>& inputs,
                                                                               const c10d::AllgatherOptions& opts) {
  const char* name = "allgather_into_tensor_coalesced";
  RZ_CHECK_VALUE(outputs.size() == inputs.size(), name, ": ", outputs.size(), " outputs but ", inputs.size(),
                 " inputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_single({inputs[i]}, name);
    check_device(outputs[i], inputs[i], name, "output");
    check_device(inputs[i], inputs[0], name, "an input");
    RZ_CHECK_TYPE(outputs[i].scalar_type() == inputs[i].scalar_type(), name, ": output and input dtypes differ");
    RZ_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * size_, name, ": output ", i, " has ", outputs[i].numel(),
                   " elements, expected ", inputs[i].numel() * size_);
  }
  DevicePath* path = inputs.empty() ? nullptr : path_of(inputs[0]);
  std::vector<std::pair<at::Tensor, Staged>> items;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const c10::Device where = working(path, inputs[i]);
    items.emplace_back(Staged::unaliased(inputs[i], outputs[i], where), Staged::out(outputs[i], where));
  }
  const Plan plan =
      inputs.empty() ? Plan{} : planner_.plan(planned_call(CallKind::Allgather, path, inputs[0], inputs[0].numel()));
  const auto n = static_cast<uint32_t>(items.size());
  return issue(path, make_issue(c10d::OpType::COALESCED, name, outputs, opts, inputs, std::max<uint32_t>(n, 1)),
               [items, plan](Comm& c) {
                 for (const auto& [in, out] : items) {
                   allgather_into(c, plan, in, out.work);
                   out.finish();
                   ++c.seq;
                 }
               });
}

Call RingzipBackend::planned_call(CallKind kind, const DevicePath* path, const at::Tensor& t, int64_t numel,
                                  const c10d::ReduceOp& op) const {
  return Call{kind,  path ? path->kind() : Device::Host,           t.scalar_type(), op.op_,
              numel, static_cast<size_t>(numel) * t.element_size()};
}

void RingzipBackend::run_dense_allreduce(Comm& c, Buf b, const Reduction& red, const Plan& plan) {
  if (red.pre != 1.0) c.dev.scale(b.dtype, b.data, b.count, red.pre);
  planner_.timed(c, plan, [&] {
    if (plan.nccl) return native_of(c).allreduce(b.data, b.count, b.dtype, red.op);
    if (plan.nodes) return hierarchical_allreduce(c, *plan.nodes, b, red.op, plan.dense);
    ringzip::allreduce(c, b, red.op, plan.dense);
  });
  if (red.post != 1.0) c.dev.scale(b.dtype, b.data, b.count, red.post);
}

// Reduce-scatter of `flat` (contiguous on the call's device, `world` equal parts in rank order)
// into this rank's `out` (contiguous there).
void RingzipBackend::run_reduce_scatter(Comm& c, Buf flat, const Reduction& red, const at::Tensor& out,
                                        const Plan& plan) {
  if (red.pre != 1.0) c.dev.scale(flat.dtype, flat.data, flat.count, red.pre);
  const size_t part = flat.count / c.size();
  if (plan.nccl) {
    native_of(c).reduce_scatter(flat.data, out.data_ptr(), part, flat.dtype, red.op);
  } else {
    if (plan.nodes)
      hierarchical_reduce_scatter(c, *plan.nodes, flat, red.op);
    else
      ring_reduce_scatter(c, flat, red.op, even_parts(flat.count, c.size()));
    c.dev.copy(out.data_ptr(), flat.at(part * c.rank()), part * dtype_size(flat.dtype));
  }
  if (red.post != 1.0) c.dev.scale(flat.dtype, out.data_ptr(), part, red.post);
}

}  // namespace ringzip
