#include "collective/comm.h"

#include <c10/util/Exception.h>

namespace ringzip {

void Comm::wait(Request& req, int peer, const char* what) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() < 1) left = std::chrono::milliseconds(1);
  try {
    req.wait(left);
  } catch (const std::exception& e) {
    // The collective is lost: break the transport before unwinding frees the buffers of
    // requests still posted, and so that peers blocked on this rank fail now, not at timeout.
    net.abort();
    TORCH_CHECK_WITH(DistBackendError, false, "ringzip ", op, " (seq ", seq, ", rank ", rank(),
                     " of ", size(), "): ", what, " rank ", peer, " failed: ", e.what());
  }
}

std::unique_ptr<Request> Comm::post_send(const void* p, size_t bytes, int peer, uint32_t full_tag) {
  try {
    return net.isend(p, bytes, peer, full_tag);
  } catch (const std::exception& e) {
    net.abort();
    TORCH_CHECK_WITH(DistBackendError, false, "ringzip ", op, " (seq ", seq, ", rank ", rank(), " of ", size(),
                     "): posting a send to rank ", peer, " failed: ", e.what());
  }
}

std::unique_ptr<Request> Comm::post_recv(void* p, size_t bytes, int peer, uint32_t full_tag) {
  try {
    return net.irecv(p, bytes, peer, full_tag);
  } catch (const std::exception& e) {
    net.abort();
    TORCH_CHECK_WITH(DistBackendError, false, "ringzip ", op, " (seq ", seq, ", rank ", rank(), " of ", size(),
                     "): posting a receive from rank ", peer, " failed: ", e.what());
  }
}

void Comm::wait_all(std::vector<std::unique_ptr<Request>>& reqs, const std::vector<int>& peers,
                    const char* what) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i]) wait(*reqs[i], peers[i], what);
  }
}

}  // namespace ringzip
