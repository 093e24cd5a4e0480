#include "transport/gloo/gloo_transport.h"

#include <ATen/ATen.h>

namespace ringzip {
namespace {

class GlooRequest final : public Request {
 public:
  explicit GlooRequest(c10::intrusive_ptr<c10d::Work> work) : work_(std::move(work)) {}
  void wait(std::chrono::milliseconds timeout) override { work_->wait(timeout); }
  int source() const override { return work_->sourceRank(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
};

std::vector<at::Tensor> as_bytes(const void* data, size_t bytes) {
  return {at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte))};
}

}  // namespace

GlooTransport::GlooTransport(c10::intrusive_ptr<c10d::Backend> gloo)
    : gloo_(std::move(gloo)), rank_(gloo_->getRank()), size_(gloo_->getSize()) {}

c10::intrusive_ptr<c10d::Backend> GlooTransport::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(gloo_, "ringzip: the gloo transport was closed (process group shut down)");
  return gloo_;
}

// Drops our reference to the ProcessGroupGloo: its threads and sockets go when the last
// request that still references its context (a user's unfinished P2P work) is gone.
void GlooTransport::close() {
  c10::intrusive_ptr<c10d::Backend> g;
  {
    std::lock_guard<std::mutex> lock(mu_);
    g = std::move(gloo_);
  }
}

std::unique_ptr<Request> GlooTransport::isend(const void* data, size_t bytes, int peer, uint32_t tag) {
  if (bytes == 0) return std::make_unique<DoneRequest>();
  auto tensors = as_bytes(data, bytes);
  return std::make_unique<GlooRequest>(live()->send(tensors, peer, static_cast<int>(tag)));
}

std::unique_ptr<Request> GlooTransport::irecv(void* data, size_t bytes, int peer, uint32_t tag) {
  if (bytes == 0) return std::make_unique<DoneRequest>(peer);
  auto tensors = as_bytes(data, bytes);
  return std::make_unique<GlooRequest>(live()->recv(tensors, peer, static_cast<int>(tag)));
}

std::unique_ptr<Request> GlooTransport::irecv_any(void* data, size_t bytes, uint32_t tag) {
  auto tensors = as_bytes(data, bytes);
  return std::make_unique<GlooRequest>(live()->recvAnysource(tensors, static_cast<int>(tag)));
}

// Gloo has no "close" call for a group, but a receive that times out makes its context signal
// every pair, which closes all sockets (gloo/transport/tcp/unbound_buffer.cc): no transfer can
// land in memory afterwards and each peer sees "connection closed" at once. So abort posts a
// receive under a tag nobody sends (step 0xFFFF is never used by an algorithm) and waits 1 ms.
// A pair that is already closed refuses the post; try the next peer.
void GlooTransport::abort() {
  std::call_once(aborted_, [&] {
    constexpr int kPoisonTag = static_cast<int>((1u << 31) - 1);
    for (int i = 1; i < size_; ++i) {
      try {
        poison_.push_back(at::empty({1}, at::TensorOptions().dtype(at::kByte)));
        std::vector<at::Tensor> t{poison_.back()};
        poison_work_.push_back(live()->recv(t, (rank_ + i) % size_, kPoisonTag));
        poison_work_.back()->wait(std::chrono::milliseconds(1));
      } catch (...) {
        continue;  // timed out (all pairs now closed) or this pair was closed already
      }
    }
  });
}

}  // namespace ringzip
