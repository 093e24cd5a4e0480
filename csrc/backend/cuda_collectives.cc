// Every collective on CUDA tensors, one dispatch per kind: arguments were checked by the entry
// points (collectives.cc, exchanges.cc, backend.cc, with the host path's checks); each body runs
// on the device's internal stream through run_cuda (cuda_path.cc), over the NCCL transport.
//
// What runs where (docs/gpu.md): NCCL's own collective where it is exact and at least as fast
// (ncclAllReduce / ncclReduce / ncclReduceScatter for SUM, PRODUCT, MIN, MAX with the "auto"
// algorithm, ncclBroadcast, ncclAllGather); ringzip's algorithms (collective/) for the rest:
// forced all-reduce algorithms, bitwise ops and bool, every compressed call (ring / SRA /
// sparse, with the CUDA codec kernels), gather, scatter, all-to-all, barrier, send / recv.
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include "backend/backend.h"
#include "backend/compressed_run.h"
#include "backend/cuda_path.h"
#include "backend/tensors.h"
#include "collective/compressed.h"
#include "collective/hierarchy/hierarchy.h"
#include "common/check.h"

namespace ringzip {
namespace {

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kBool: return ncclUint8;
    default: return ncclUint8;
  }
}

// NCCL's reduction for `op`, where NCCL has it exactly (not for bool, nor bitwise ops).
bool nccl_op(RedOp op, at::ScalarType t, ncclRedOp_t& out) {
  if (t == at::kBool) return false;
  switch (op) {
    case RedOp::Sum: out = ncclSum; return true;
    case RedOp::Prod: out = ncclProd; return true;
    case RedOp::Min: out = ncclMin; return true;
    case RedOp::Max: out = ncclMax; return true;
    default: return false;
  }
}

cudaStream_t stream_of(const CudaDevice& d) { return d.stream.stream(); }

at::Tensor contiguous(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }
// Where to write t's result: t itself when contiguous, else a contiguous buffer (write_back).
at::Tensor out_buffer(const at::Tensor& t) { return t.is_contiguous() ? t : at::empty(t.sizes(), t.options()); }
void write_back(const at::Tensor& buf, const at::Tensor& t) {
  if (!buf.is_same(t)) t.copy_(buf.view(t.sizes()));
}
at::Tensor flat_view(const at::Tensor& contiguous_t) { return contiguous_t.view({-1}); }

// Exact all-reduce in place of a contiguous tensor w as settled: ncclAllReduce where the plan
// says so, else ringzip's algorithm (a named one, bitwise ops, bool).
void exact_allreduce(Comm& c, CudaDevice& d, const at::Tensor& w, const Reduction& red, const Plan& plan) {
  if (red.pre != 1.0) w.mul_(red.pre);
  ncclRedOp_t op = ncclSum;
  if (w.numel() == 0) return;  // every rank has the same count (fingerprint): no NCCL call anywhere
  if (plan.nccl) {
    nccl_op(red.op, w.scalar_type(), op);
    nccl_check(ncclAllReduce(w.data_ptr(), w.data_ptr(), w.numel(), nccl_type(w.scalar_type()), op, d.comm->get(),
                             stream_of(d)),
               "ncclAllReduce");
  } else {
    ringzip::allreduce(c, buf_of(w), red.op, plan.dense);
  }
  if (red.post != 1.0) w.mul_(red.post);
}

// The call's RNG number and, with error feedback, `owner`'s residual on the device (used on
// the internal stream, the current one in a body).
Compression::Call begin_compressed(Compression& comp, const CompressionConfig& cc, const at::Tensor& owner,
                                   int64_t numel, c10::Device device) {
  Compression::Call which = comp.begin_call(owner, numel, cc.feedback(), device);
  if (which.residual.defined())
    c10::cuda::CUDACachingAllocator::recordStream(which.residual.storage().data_ptr(),
                                                  c10::cuda::getCurrentCUDAStream());
  return which;
}

// Compressed all-reduce of t (float32 / float16 / bfloat16) on a float32 working copy; `owner`
// names the error-feedback residual; node-aware over `nodes` when given (intra-node steps over
// NCCL like the rest).
void compressed_allreduce_on(Comm& c, Compression& comp, const CompressionConfig& cc, const at::Tensor& owner,
                             const at::Tensor& t, const Reduction& red, const NodeLayout* nodes) {
  const Compression::Call which = begin_compressed(comp, cc, owner, t.numel(), t.device());
  at::Tensor x = (t.is_contiguous() && t.scalar_type() == at::kFloat) ? t : t.to(at::kFloat).contiguous();
  const int n = c.size();
  run_compressed(
      c, comp, cc, x, which, red, t.nbytes(), dense_factor_of(nodes, n, true),
      [&](const CompressedCall& call) {
        if (nodes) return hierarchical_compressed_allreduce(c, *nodes, x.data_ptr<float>(), x.numel(), call);
        compressed_allreduce(c, x.data_ptr<float>(), x.numel(), call);
      },
      [&] {
        if (red.post != 1.0) x.mul_(red.post);
        if (!x.is_same(t)) t.copy_(x.view(t.sizes()));
      });
}

// Reduce-scatter of `flat` (contiguous, every rank's part in rank order) into `out`; by NCCL
// where the plan says so.
void exact_reduce_scatter(Comm& c, CudaDevice& d, const at::Tensor& flat, const at::Tensor& out, const Reduction& red,
                          const Plan& plan) {
  ncclRedOp_t op = ncclSum;
  const bool by_nccl = plan.nccl;
  nccl_op(red.op, flat.scalar_type(), op);
  // Scaled or reduced in place: on a copy, the caller's input stays intact.
  at::Tensor in = (red.pre != 1.0 || !by_nccl) ? flat.clone(at::MemoryFormat::Contiguous) : flat;
  if (red.pre != 1.0) in.mul_(red.pre);
  at::Tensor o = out_buffer(out);
  if (o.numel() == 0) return;
  if (by_nccl) {
    nccl_check(ncclReduceScatter(in.data_ptr(), o.data_ptr(), o.numel(), nccl_type(in.scalar_type()), op, d.comm->get(),
                                 stream_of(d)),
               "ncclReduceScatter");
  } else {
    const Buf b = buf_of(in);
    ring_reduce_scatter(c, b, red.op, even_parts(b.count, c.size()));
    c.dev.copy(o.data_ptr(), b.at(static_cast<size_t>(o.numel()) * c.rank()), o.nbytes());
  }
  if (red.post != 1.0) o.mul_(red.post);
  write_back(o, out);
}

void compressed_reduce_scatter_on(Comm& c, Compression& comp, const CompressionConfig& cc, const at::Tensor& identity,
                                  const at::Tensor& flat, const at::Tensor& out, const Reduction& red,
                                  const NodeLayout* nodes) {
  // A fresh float32 copy: the reduction runs in place and the caller's input stays intact.
  const at::Tensor x = flat.to(at::kFloat, false, /*copy=*/true).contiguous().view({-1});
  const Compression::Call which = begin_compressed(comp, cc, identity, x.numel(), x.device());
  const int n = c.size();
  run_compressed(
      c, comp, cc, x, which, red, flat.nbytes(), dense_factor_of(nodes, n, false),
      [&](const CompressedCall& call) {
        if (nodes) return hierarchical_compressed_reduce_scatter(c, *nodes, x.data_ptr<float>(), x.numel(), call);
        compressed_reduce_scatter(c, x.data_ptr<float>(), x.numel(), call);
      },
      [&] {
        auto mine = x.narrow(0, out.numel() * c.rank(), out.numel());
        if (red.post != 1.0) mine.mul_(red.post);
        out.copy_(mine.view(out.sizes()));
      });
}

// ncclAllGather of a contiguous input into a contiguous output of size() x its elements.
void nccl_allgather(CudaDevice& d, const at::Tensor& in, const at::Tensor& out) {
  if (in.numel() == 0) return;
  nccl_check(ncclAllGather(in.data_ptr(), out.data_ptr(), in.nbytes(), ncclUint8, d.comm->get(), stream_of(d)),
             "ncclAllGather");
}

}  // namespace

// ---- all-reduce ------------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_allreduce(at::Tensor& t, const c10d::AllreduceOptions& opts) {
  const auto red = to_reduction(opts.reduceOp, to_dtype(t.scalar_type(), "allreduce"), size_, "allreduce");
  const Call planned = planned_call(CallKind::Allreduce, t, t.numel(), opts.reduceOp);
  Plan plan = planner_.plan(planned);
  if (plan.compressed) {
    auto call = cuda_call(c10d::OpType::ALLREDUCE, "allreduce", t, {t}, {t}, opts, 1, codec_fingerprint(plan.cc));
    return run_cuda(std::move(call), [&](Comm& c, CudaDevice&) {
      planner_.settle(c, planned, plan);
      compressed_allreduce_on(c, comp_, plan.run, t, t, red, plan.nodes);
    });
  }
  return run_cuda(cuda_call(c10d::OpType::ALLREDUCE, "allreduce", t, {t}, {t}, opts), [&](Comm& c, CudaDevice& d) {
    planner_.settle(c, planned, plan);
    at::Tensor w = contiguous(t);
    exact_allreduce(c, d, w, red, plan);
    write_back(w, t);
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                        const c10d::AllreduceCoalescedOptions& opts) {
  const char* name = "allreduce_coalesced";
  const auto red = to_reduction(opts.reduceOp, to_dtype(tensors[0].scalar_type(), name), size_, name);
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  const Call planned = planned_call(CallKind::Allreduce, tensors[0], total, opts.reduceOp);
  Plan plan = planner_.plan(planned);
  // As on the host: one flat tensor, all-reduced as one call (compressed: an ALLREDUCE).
  auto call = plan.compressed ? cuda_call(c10d::OpType::ALLREDUCE, name, tensors[0], tensors, tensors, opts, 1,
                                          codec_fingerprint(plan.cc))
                              : cuda_call(c10d::OpType::ALLREDUCE_COALESCED, name, tensors[0], tensors, tensors, opts);
  return run_cuda(std::move(call), [&](Comm& c, CudaDevice& d) {
    planner_.settle(c, planned, plan);
    std::vector<at::Tensor> parts;
    for (const auto& t : tensors) parts.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(parts);
    if (plan.compressed)
      compressed_allreduce_on(c, comp_, plan.run, tensors[0], flat, red, plan.nodes);
    else
      exact_allreduce(c, d, flat, red, plan);
    int64_t off = 0;
    for (const auto& t : tensors) {
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  });
}

// ---- rooted ----------------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_broadcast(at::Tensor& t, const c10d::BroadcastOptions& opts) {
  const int root = static_cast<int>(opts.rootRank);
  return run_cuda(cuda_call(c10d::OpType::BROADCAST, "broadcast", t, {t}, {t}, opts), [&](Comm&, CudaDevice& d) {
    if (t.numel() == 0) return;
    at::Tensor w = contiguous(t);
    nccl_check(ncclBroadcast(w.data_ptr(), w.data_ptr(), w.nbytes(), ncclUint8, root, d.comm->get(), stream_of(d)),
               "ncclBroadcast");
    write_back(w, t);
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_reduce(at::Tensor& t, const c10d::ReduceOptions& opts) {
  const auto red = to_reduction(opts.reduceOp, to_dtype(t.scalar_type(), "reduce"), size_, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = rank_ == root;
  const Plan plan = planner_.plan(planned_call(CallKind::Reduce, t, t.numel(), opts.reduceOp));
  return run_cuda(cuda_call(c10d::OpType::REDUCE, "reduce", t, {t}, {t}, opts), [&](Comm& c, CudaDevice& d) {
    // Pre-scaling must not touch a non-root's input, so it works on a copy there.
    at::Tensor w = (red.pre != 1.0 && !is_root) ? t.clone(at::MemoryFormat::Contiguous) : contiguous(t);
    if (red.pre != 1.0) w.mul_(red.pre);
    ncclRedOp_t op = ncclSum;
    if (w.numel() == 0) return;
    if (plan.nccl) {
      nccl_op(red.op, w.scalar_type(), op);
      nccl_check(ncclReduce(w.data_ptr(), w.data_ptr(), w.numel(), nccl_type(w.scalar_type()), op, root, d.comm->get(),
                            stream_of(d)),
                 "ncclReduce");
    } else {
      ringzip::reduce(c, buf_of(w), red.op, root);
    }
    if (is_root) {
      if (red.post != 1.0) w.mul_(red.post);
      write_back(w, t);
    }
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_gather(std::vector<at::Tensor> outs, at::Tensor& in,
                                                           const c10d::GatherOptions& opts) {
  const int root = static_cast<int>(opts.rootRank);
  // Non-roots have no outputs: the fingerprint compares the input (as on the host).
  auto call = cuda_call(c10d::OpType::GATHER, "gather", in, {in}, outs, opts, 1, FpExtra{&in});
  return run_cuda(std::move(call), [&, outs](Comm& c, CudaDevice&) {
    const at::Tensor src = contiguous(in);
    std::vector<at::Tensor> bufs;
    std::vector<void*> ptrs;
    for (const auto& o : outs) {
      bufs.push_back(out_buffer(o));
      ptrs.push_back(bufs.back().data_ptr());
    }
    if (c.rank() == root) c.dev.copy(ptrs[root], src.data_ptr(), src.nbytes());
    ringzip::gather(c, src.data_ptr(), src.nbytes(), ptrs, root);
    for (size_t i = 0; i < outs.size(); ++i) write_back(bufs[i], outs[i]);
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_scatter(at::Tensor& out, std::vector<at::Tensor> ins,
                                                            const c10d::ScatterOptions& opts) {
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> inputs = ins;
  inputs.push_back(out);
  return run_cuda(cuda_call(c10d::OpType::SCATTER, "scatter", out, inputs, {out}, opts),
                  [&, ins](Comm& c, CudaDevice&) {
                    std::vector<at::Tensor> srcs;
                    std::vector<const void*> ptrs;
                    for (const auto& i : ins) {
                      srcs.push_back(contiguous(i));
                      ptrs.push_back(srcs.back().data_ptr());
                    }
                    at::Tensor o = out_buffer(out);
                    if (c.rank() == root) c.dev.copy(o.data_ptr(), ptrs[root], o.nbytes());
                    ringzip::scatter(c, ptrs, o.data_ptr(), o.nbytes(), root);
                    write_back(o, out);
                  });
}

// ---- reduce-scatter --------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_reduce_scatter(at::Tensor& out, std::vector<at::Tensor> parts,
                                                                   const c10d::ReduceScatterOptions& opts,
                                                                   c10d::OpType type, const char* name) {
  const auto red = to_reduction(opts.reduceOp, to_dtype(out.scalar_type(), name), size_, name);
  const Call planned = planned_call(CallKind::ReduceScatter, parts[0], out.numel() * size_, opts.reduceOp);
  Plan plan = planner_.plan(planned);
  const at::Tensor identity = parts[0];  // names the residual, as on the host path
  // Fingerprints as on the host: a compressed call is a REDUCE_SCATTER with its codec.
  auto call = plan.compressed ? cuda_call(c10d::OpType::REDUCE_SCATTER, name, out, parts, {out}, opts, 1,
                                          codec_fingerprint(plan.cc))
                              : cuda_call(type, name, out, parts, {out}, opts);
  return run_cuda(std::move(call), [&, parts, identity](Comm& c, CudaDevice& d) {
    planner_.settle(c, planned, plan);
    at::Tensor flat;
    if (parts.size() == 1) {
      flat = flat_view(contiguous(parts[0]));
    } else {
      std::vector<at::Tensor> flat_parts;
      for (const auto& p : parts) flat_parts.push_back(p.reshape({-1}));
      flat = at::cat(flat_parts);
    }
    if (plan.compressed)
      compressed_reduce_scatter_on(c, comp_, plan.run, identity, flat, out, red, plan.nodes);
    else
      exact_reduce_scatter(c, d, flat, out, red, plan);
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_reduce_scatter_coalesced(std::vector<at::Tensor>& outputs,
                                                                             std::vector<at::Tensor>& inputs,
                                                                             const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor_coalesced";
  std::vector<Reduction> reds;
  for (const auto& o : outputs)
    reds.push_back(to_reduction(opts.reduceOp, to_dtype(o.scalar_type(), name), size_, name));
  std::vector<Plan> plans;
  for (size_t i = 0; i < outputs.size(); ++i) {
    Call planned = planned_call(CallKind::ReduceScatter, inputs[i], inputs[i].numel(), opts.reduceOp);
    planned.may_compress = false;  // every item exact, as on the host
    plans.push_back(planner_.plan(planned));
  }
  const auto n = static_cast<uint32_t>(outputs.size());
  auto call = cuda_call(c10d::OpType::COALESCED, name, outputs[0], inputs, outputs, opts, std::max<uint32_t>(n, 1));
  return run_cuda(std::move(call), [&](Comm& c, CudaDevice& d) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      exact_reduce_scatter(c, d, flat_view(contiguous(inputs[i])), outputs[i], reds[i], plans[i]);
      ++c.seq;  // one sequence number per item, as on the host
    }
  });
}

// ---- allgather -------------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_allgather(std::vector<at::Tensor>& outs, at::Tensor& in,
                                                              const c10d::AllgatherOptions& opts) {
  return run_cuda(cuda_call(c10d::OpType::ALLGATHER, "allgather", in, {in}, outs, opts), [&](Comm& c, CudaDevice& d) {
    const at::Tensor src = contiguous(in);
    at::Tensor flat = at::empty({src.numel() * c.size()}, src.options());
    nccl_allgather(d, src, flat);
    const int64_t n = src.numel();
    for (int i = 0; i < c.size(); ++i) outs[i].copy_(flat.narrow(0, n * i, n).view(outs[i].sizes()));
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_allgather_base(at::Tensor& out, at::Tensor& in,
                                                                   const c10d::AllgatherOptions& opts) {
  auto call = cuda_call(c10d::OpType::_ALLGATHER_BASE, "allgather_into_tensor", in, {in}, {out}, opts);
  return run_cuda(std::move(call), [&](Comm&, CudaDevice& d) {
    // The input may alias the output (FSDP passes its shard of the output): read it first.
    const at::Tensor src = in.is_alias_of(out) ? in.clone(at::MemoryFormat::Contiguous) : contiguous(in);
    at::Tensor o = out_buffer(out);
    nccl_allgather(d, src, o);
    write_back(o, out);
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                        std::vector<at::Tensor>& inputs,
                                                                        const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> all_out;
  for (const auto& list : outputs) all_out.insert(all_out.end(), list.begin(), list.end());
  auto call = cuda_call(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", inputs[0], inputs, all_out, opts,
                        static_cast<uint32_t>(inputs.size()));
  return run_cuda(std::move(call), [&](Comm& c, CudaDevice& d) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor src = flat_view(contiguous(inputs[i]));
      const int64_t n = src.numel();
      at::Tensor flat = at::empty({n * c.size()}, src.options());
      nccl_allgather(d, src, flat);
      for (int r = 0; r < c.size(); ++r) outputs[r][i].copy_(flat.narrow(0, n * r, n).view(outputs[r][i].sizes()));
      ++c.seq;
    }
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const auto n = static_cast<uint32_t>(outputs.size());
  auto call = cuda_call(c10d::OpType::COALESCED, "allgather_into_tensor_coalesced", inputs[0], inputs, outputs, opts,
                        std::max<uint32_t>(n, 1));
  return run_cuda(std::move(call), [&](Comm& c, CudaDevice& d) {
    for (size_t i = 0; i < outputs.size(); ++i) {
      const at::Tensor src =
          inputs[i].is_alias_of(outputs[i]) ? inputs[i].clone(at::MemoryFormat::Contiguous) : contiguous(inputs[i]);
      at::Tensor o = out_buffer(outputs[i]);
      nccl_allgather(d, src, o);
      write_back(o, outputs[i]);
      ++c.seq;
    }
  });
}

// ---- all-to-all ------------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_alltoall_base(at::Tensor& out, at::Tensor& in,
                                                                  std::vector<size_t> send_bytes,
                                                                  std::vector<size_t> recv_bytes,
                                                                  const c10d::AllToAllOptions& opts) {
  auto call = cuda_call(c10d::OpType::ALLTOALL_BASE, "alltoall_base", in, {in}, {out}, opts, 1,
                        FpExtra{nullptr, true});  // splits differ by rank
  return run_cuda(std::move(call), [&, send_bytes, recv_bytes](Comm& c, CudaDevice&) {
    const at::Tensor src = in.is_alias_of(out) ? in.clone(at::MemoryFormat::Contiguous) : contiguous(in);
    at::Tensor o = out_buffer(out);
    std::vector<const void*> sp;
    std::vector<void*> rp;
    size_t so = 0, ro = 0;
    for (int i = 0; i < c.size(); ++i) {
      sp.push_back(static_cast<const char*>(src.data_ptr()) + so);
      rp.push_back(static_cast<char*>(o.data_ptr()) + ro);
      so += send_bytes[i];
      ro += recv_bytes[i];
    }
    ringzip::alltoall(c, sp, send_bytes, rp, recv_bytes);
    write_back(o, out);
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_alltoall(std::vector<at::Tensor>& outputs,
                                                             std::vector<at::Tensor>& inputs,
                                                             const c10d::AllToAllOptions& opts) {
  auto call = cuda_call(c10d::OpType::ALLTOALL, "alltoall", inputs[0], inputs, outputs, opts, 1,
                        FpExtra{nullptr, true});  // sizes may differ by rank
  return run_cuda(std::move(call), [&](Comm& c, CudaDevice&) {
    std::vector<at::Tensor> srcs, bufs;
    std::vector<const void*> sp;
    std::vector<void*> rp;
    std::vector<size_t> sb, rb;
    for (int i = 0; i < c.size(); ++i) {
      srcs.push_back(contiguous(inputs[i]));
      bufs.push_back(out_buffer(outputs[i]));
      sp.push_back(srcs.back().data_ptr());
      sb.push_back(srcs.back().nbytes());
      rp.push_back(bufs.back().data_ptr());
      rb.push_back(bufs.back().nbytes());
    }
    ringzip::alltoall(c, sp, sb, rp, rb);
    for (int i = 0; i < c.size(); ++i) write_back(bufs[i], outputs[i]);
  });
}

// ---- point-to-point and barrier ----------------------------------------------------------------------

// On the group's communicator and internal stream: NCCL matches a pair's sends and receives in
// posting order (tags are not sent), and a receive holds the stream until its send arrives.
c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_p2p(at::Tensor& t, int peer, bool send) {
  CudaCall call{send ? c10d::OpType::SEND : c10d::OpType::RECV,
                send ? "send" : "recv",
                t.device(),
                {t},
                {t},
                cfg_.timeout,
                Fingerprint{}};
  call.p2p = true;
  return run_cuda(std::move(call), [&](Comm& c, CudaDevice&) {
    if (send) {
      const at::Tensor src = contiguous(t);
      c.net.isend(src.data_ptr(), src.nbytes(), peer, 0);
    } else {
      at::Tensor o = out_buffer(t);
      c.net.irecv(o.data_ptr(), o.nbytes(), peer, 0);
      static_cast<NcclTransport&>(c.net).flush();  // the receive is issued before the copy below
      write_back(o, t);
    }
  });
}

c10::intrusive_ptr<c10d::Work> RingzipBackend::cuda_barrier(c10::Device device, const c10d::BarrierOptions& opts) {
  RZ_CHECK_VALUE(device.has_index(), "barrier: a CUDA device needs an index, got ", device);
  CudaCall call{c10d::OpType::BARRIER,
                "barrier",
                device,
                {},
                {},
                effective(opts.timeout),
                fingerprint(c10d::OpType::BARRIER, {}, 1, {})};
  call.blocking = true;  // wait() blocks the host, as dist.barrier() expects
  return run_cuda(std::move(call), [](Comm& c, CudaDevice&) { ringzip::barrier(c); });
}

}  // namespace ringzip
