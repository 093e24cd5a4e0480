#pragma once
// Exact collective algorithms, each written once as a schedule (collective/schedule.h) against
// Comm (transport, compute, tags, deadline): one file per family in collective/dense/. Buffers
// live where Comm::dev computes (host or device memory); counts are elements.
#include <vector>

#include "collective/comm.h"

namespace ringzip {

enum class AllreduceAlgo { Auto, Ring, RecursiveDoubling, Direct, Star, HalvingDoubling, Tree, Sra };

// Runs algorithm `algo` (not Auto: the planner chooses, plan/plan.h).
void allreduce(Comm& c, Buf data, RedOp op, AllreduceAlgo algo);
void ring_allreduce(Comm& c, Buf data, RedOp op);
void rd_allreduce(Comm& c, Buf data, RedOp op);
void direct_allreduce(Comm& c, Buf data, RedOp op);
void star_allreduce(Comm& c, Buf data, RedOp op);
void hd_allreduce(Comm& c, Buf data, RedOp op);
void tree_allreduce(Comm& c, Buf data, RedOp op);
void sra_allreduce(Comm& c, Buf data, RedOp op);

// Ring reduce-scatter in place: afterwards rank i's part [begin[i], begin[i+1]) holds the
// reduction over all ranks. `begin` has size()+1 entries.
void ring_reduce_scatter(Comm& c, Buf data, RedOp op, const std::vector<size_t>& begin, uint32_t step_base = 0);
// Ring allgather in place: rank i contributes part i, everybody ends with all parts.
void ring_allgather(Comm& c, Buf data, const std::vector<size_t>& begin, uint32_t step_base = 0);

void broadcast(Comm& c, Buf data, int root);
// Reduction of every rank's `data` into root's `data`; other ranks' buffers are untouched.
void reduce(Comm& c, Buf data, RedOp op, int root);
// Root receives rank i's `bytes` into out[i]; others send `in`.
void gather(Comm& c, const void* in, size_t bytes, const std::vector<void*>& out, int root);
void scatter(Comm& c, const std::vector<const void*>& in, void* out, size_t bytes, int root);
// Personalized exchange: sends[i] (send_bytes[i]) to rank i, receives recv_bytes[i] into recvs[i].
void alltoall(Comm& c, const std::vector<const void*>& sends, const std::vector<size_t>& send_bytes,
              const std::vector<void*>& recvs, const std::vector<size_t>& recv_bytes);
void barrier(Comm& c);

std::vector<size_t> even_parts(size_t count, int parts);

}  // namespace ringzip
