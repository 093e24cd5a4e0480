#include "collective/comm.h"

#include <c10/util/Exception.h>

namespace ringzip {

void Comm::fail(const std::string& what, int peer, const std::exception& cause) {
  net.abort();
  TORCH_CHECK_WITH(DistBackendError, false, "ringzip ", op, " (seq ", seq, ", rank ", net.group_rank(rank()), " of ",
                   net.group_size(), "): ", what, " rank ", net.group_rank(peer), " failed: ", cause.what());
}

void Comm::wait(Request& req, int peer, const char* what) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() < 1) left = std::chrono::milliseconds(1);
  try {
    req.wait(left);
  } catch (const std::exception& e) {
    fail(what, peer, e);
  }
}

std::unique_ptr<Request> Comm::post_send(const void* p, size_t bytes, int peer, uint32_t full_tag) {
  try {
    return net.isend(p, bytes, peer, full_tag);
  } catch (const std::exception& e) {
    fail("posting a send to", peer, e);
  }
}

std::unique_ptr<Request> Comm::post_recv(void* p, size_t bytes, int peer, uint32_t full_tag) {
  try {
    return net.irecv(p, bytes, peer, full_tag);
  } catch (const std::exception& e) {
    fail("posting a receive from", peer, e);
  }
}

void Comm::wait_all(std::vector<std::unique_ptr<Request>>& reqs, const std::vector<int>& peers, const char* what) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i]) wait(*reqs[i], peers[i], what);
  }
}

}  // namespace ringzip
