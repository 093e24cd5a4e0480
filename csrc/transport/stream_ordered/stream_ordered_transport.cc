#include "transport/stream_ordered/stream_ordered_transport.h"

namespace ringzip {
namespace {

constexpr uint32_t kTagBase = 1u << 29, kTagMask = kTagBase - 1;  // below the collectives' tags

}  // namespace

StreamOrderedTransport::StreamOrderedTransport(std::unique_ptr<Transport> inner, std::chrono::milliseconds timeout)
    : inner_(std::move(inner)), timeout_(timeout), sent_(inner_->size()), received_(inner_->size()) {}

// A group starts once the one before it has completed (they share one stream).
void StreamOrderedTransport::issue(const std::vector<Op>& group) {
  complete(timeout_);
  for (const auto& op : group) {
    const uint32_t tag = kTagBase | ((op.send ? sent_[op.peer]++ : received_[op.peer]++) & kTagMask);
    running_.push_back(op.send ? inner_->isend(op.data, op.bytes, op.peer, tag)
                               : inner_->irecv(op.data, op.bytes, op.peer, tag));
  }
}

void StreamOrderedTransport::complete(std::chrono::milliseconds timeout) {
  for (auto& q : running_) q->wait(timeout);
  running_.clear();
}

}  // namespace ringzip
