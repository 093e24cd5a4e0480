#pragma once
// Shared-memory transport for the CPU ranks of one host: every ordered pair of ranks
// has a single-producer single-consumer ring in POSIX shared memory, so a message costs two
// memcpy's and, when the receiver sleeps, one futex wake -- no sockets, no kernel copies, no
// progress thread (engine.h says who moves the bytes, ring.h how they are framed, segment.h
// where they live and how segments are cleaned up).
//
// Semantics are the Transport interface's, as on Gloo: isend/irecv by (peer, 32-bit tag),
// receives of different tags may be posted and waited in any order (messages that arrive first
// are buffered), one (peer, tag) matches in order; sizes of a message and its receive must be
// equal (else the receive fails naming both); zero-byte transfers complete at once without
// touching the rings. irecv_any is not supported (user point-to-point stays on Gloo).
//
// Segments: each rank creates /dev/shm/ringzip-<pid>-<pidns>-<random> (its inbox), publishes
// the name through the store, maps its peers', and after a store barrier unlinks its own: from
// then on nothing remains in /dev/shm whatever happens to any process. Stale segments of dead
// processes (a crash during setup) are swept at every construction.
//
// Failures: abort() fails every pending and later request of this rank and, through a state
// word in its segment plus a wake of every peer, every peer's request with this rank at once;
// a dead peer is noticed by its pid within ~50 ms of a wait going idle ("rank R (pid P) died").
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>

#include "transport/shm/rank_names.h"
#include "transport/transport.h"

namespace ringzip {

struct ShmOptions {
  // Data bytes of each ring (one per ordered pair of ranks, in the receiver's segment): a
  // multiple of 4 KiB, at least 16 KiB, equal on all ranks. 0: default_shm_ring_bytes(size).
  size_t ring_bytes = 0;
  // How errors name the ranks (engine.h): a node's transport, the group's numbers and size.
  shm::RankNames names;
};

// 2 MiB per ring up to 9 ranks, less beyond, so a rank's segment stays within ~16 MiB of
// /dev/shm: 2 MiB already keep the copies at memory speed (bench/shm_vs_gloo.py).
size_t default_shm_ring_bytes(int size);

// rank/size: this process's index among the ranks on this host that form the shm group
// (0..size-1). `store`: a c10d store private to this shm group (the caller passes a
// PrefixStore), used only for the rendezvous at construction. Throws a clear
// std::runtime_error if shared memory is unusable.
std::unique_ptr<Transport> make_shm_transport(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout);
std::unique_ptr<Transport> make_shm_transport(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              std::chrono::milliseconds timeout, const ShmOptions& options);

}  // namespace ringzip
