#pragma once
// Per-call context every algorithm runs in: the transport, the collective's sequence number
// (which keeps tags of different collectives apart), its deadline and a name for errors.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collective/compute.h"
#include "common/types.h"
#include "transport/transport.h"

namespace ringzip {

struct Comm {
  Transport& net;
  Compute& dev;  // where the buffers live (host or device) and what works on them
  uint32_t seq;
  std::chrono::steady_clock::time_point deadline;
  std::string op;         // e.g. "allreduce"; names the call in error messages
  size_t bytes_sent = 0;  // this rank's payload bytes posted to the transport (node-aware
                          // calls: between nodes; the steps inside the node count below)
  size_t bytes_intra_node = 0;
  double codec_seconds = 0;  // time inside codec kernels (compressed algorithms)

  int rank() const { return net.rank(); }
  int size() const { return net.size(); }
  // Mixed into every tag's sequence bits: a hash of the call's fingerprint (backend/
  // fingerprint.h), so calls that differ between ranks never match each other's messages (a
  // larger message than the receive expects would abort the process inside Gloo); 0: plain.
  uint32_t tag_key = 0;

  // Collective tags live above 2^30 so they never meet user point-to-point tags.
  uint32_t tag(uint32_t step) const { return plain_tag(seq ^ tag_key, step); }
  static uint32_t plain_tag(uint32_t seq, uint32_t step) {
    return (1u << 30) | ((seq & 0x3FFFu) << 16) | (step & 0xFFFFu);
  }
  std::unique_ptr<Request> isend(const void* p, size_t bytes, int peer, uint32_t step) {
    bytes_sent += bytes;
    return post_send(p, bytes, peer, tag(step));
  }
  std::unique_ptr<Request> irecv(void* p, size_t bytes, int peer, uint32_t step) {
    return post_recv(p, bytes, peer, tag(step));
  }
  // Posts on the transport (no byte accounting); a refused post (broken connection) is
  // rethrown naming the op, rank and peer, and aborts the transport like a failed wait.
  std::unique_ptr<Request> post_send(const void* p, size_t bytes, int peer, uint32_t full_tag);
  std::unique_ptr<Request> post_recv(void* p, size_t bytes, int peer, uint32_t full_tag);
  // Waits within the call's deadline; failures are rethrown naming the op, rank and peer.
  void wait(Request& req, int peer, const char* what);
  void wait_all(std::vector<std::unique_ptr<Request>>& reqs, const std::vector<int>& peers, const char* what);
  // The collective is lost: breaks the transport (so no late transfer touches memory being
  // freed and peers blocked on this rank fail now, not at timeout), then throws
  // DistBackendError "ringzip <op> (seq, rank of n): <what> rank <peer> failed: <cause>".
  [[noreturn]] void fail(const std::string& what, int peer, const std::exception& cause);
};

// A contiguous run of elements of one dtype.
struct Buf {
  void* data;
  size_t count;
  DType dtype;
  size_t bytes() const { return count * dtype_size(dtype); }
  char* at(size_t elem) const { return static_cast<char*>(data) + elem * dtype_size(dtype); }
};

// Splits `count` elements into `parts` nearly equal contiguous pieces.
inline size_t part_begin(size_t count, int parts, int i) {
  return count / parts * i + std::min<size_t>(i, count % parts);
}

}  // namespace ringzip
