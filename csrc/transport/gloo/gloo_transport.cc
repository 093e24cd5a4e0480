#include "transport/gloo/gloo_transport.h"

#include <ATen/ATen.h>

#include <algorithm>

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

// A message travelling as stripes: done when every stripe is, within one deadline.
class StripedRequest final : public Request {
 public:
  StripedRequest(std::vector<std::unique_ptr<Request>> parts, int peer) : parts_(std::move(parts)), peer_(peer) {}
  void wait(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto& p : parts_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      p->wait(std::max(left, std::chrono::milliseconds(1)));  // 0 would mean Gloo's own default
    }
  }
  int source() const override { return peer_; }

 private:
  std::vector<std::unique_ptr<Request>> parts_;
  int peer_;
};

std::vector<at::Tensor> as_bytes(const void* data, size_t bytes) {
  return {at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte))};
}

}  // namespace

GlooTransport::GlooTransport(std::vector<c10::intrusive_ptr<c10d::Backend>> pool)
    : pool_(std::move(pool)), pool_size_(pool_.size()) {
  TORCH_CHECK(!pool_.empty() && pool_[0], "ringzip: the gloo transport needs at least one ProcessGroupGloo");
  rank_ = pool_[0]->getRank();
  size_ = pool_[0]->getSize();
  for (const auto& member : pool_)
    TORCH_CHECK(member && member->getRank() == rank_ && member->getSize() == size_,
                "ringzip: the gloo transport's pool holds groups of different ranks or sizes");
}

c10::intrusive_ptr<c10d::Backend> GlooTransport::live(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(!pool_.empty(), "ringzip: the gloo transport was closed (process group shut down)");
  return pool_[i];
}

// Drops our references to the ProcessGroupGloos: their threads and sockets go when the last
// request that still references their contexts (a user's unfinished P2P work) is gone.
void GlooTransport::close() {
  std::vector<c10::intrusive_ptr<c10d::Backend>> pool;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pool.swap(pool_);
  }
}

std::unique_ptr<Request> GlooTransport::post(Post how, const void* data, size_t bytes, int peer, uint32_t tag) {
  const size_t k = stripe_count(bytes, tag, pool_size_);
  if (k == 1) {
    auto tensors = as_bytes(data, bytes);
    return std::make_unique<GlooRequest>(((*live(0)).*how)(tensors, peer, static_cast<int>(tag)));
  }
  std::vector<std::unique_ptr<Request>> parts;
  parts.reserve(k);
  const char* p = static_cast<const char*>(data);
  for (size_t i = 0; i < k; ++i) {
    const Stripe s = stripe_of(bytes, k, i);
    auto tensors = as_bytes(p + s.begin, s.length);
    parts.push_back(std::make_unique<GlooRequest>(((*live(i)).*how)(tensors, peer, static_cast<int>(tag))));
  }
  return std::make_unique<StripedRequest>(std::move(parts), peer);
}

std::unique_ptr<Request> GlooTransport::isend(const void* data, size_t bytes, int peer, uint32_t tag) {
  if (bytes == 0) return std::make_unique<DoneRequest>();
  return post(&c10d::Backend::send, data, bytes, peer, tag);
}

std::unique_ptr<Request> GlooTransport::irecv(void* data, size_t bytes, int peer, uint32_t tag) {
  if (bytes == 0) return std::make_unique<DoneRequest>(peer);
  return post(&c10d::Backend::recv, data, bytes, peer, tag);
}

std::unique_ptr<Request> GlooTransport::irecv_any(void* data, size_t bytes, uint32_t tag) {
  auto tensors = as_bytes(data, bytes);
  return std::make_unique<GlooRequest>(live(0)->recvAnysource(tensors, static_cast<int>(tag)));
}

// Gloo has no "close" call for a group, but a receive that times out makes its context signal
// every pair, which closes all sockets (gloo/transport/tcp/unbound_buffer.cc): no transfer can
// land in memory afterwards and each peer sees "connection closed" at once. So abort posts a
// receive under a tag nobody sends (step 0xFFFF is never used by an algorithm) and waits 1 ms,
// on every member of the pool.
void GlooTransport::abort() {
  std::call_once(aborted_, [&] {
    for (size_t m = 0; m < pool_size_; ++m) poison(m);
  });
}

void GlooTransport::poison(size_t member) {
  constexpr int kPoisonTag = static_cast<int>((1u << 31) - 1);
  for (int i = 1; i < size_; ++i) {
    try {
      poison_.push_back(at::empty({1}, at::TensorOptions().dtype(at::kByte)));
      std::vector<at::Tensor> t{poison_.back()};
      poison_work_.push_back(live(member)->recv(t, (rank_ + i) % size_, kPoisonTag));
      poison_work_.back()->wait(std::chrono::milliseconds(1));
    } catch (...) {
      continue;  // timed out (all of the member's pairs now closed) or this pair was closed already
    }
  }
}

}  // namespace ringzip
