#include "transport/routed.h"

#include <algorithm>
#include <stdexcept>

namespace ringzip {

RoutedTransport::RoutedTransport(std::unique_ptr<Transport> wide, std::unique_ptr<Transport> local,
                                 std::vector<int> local_ranks)
    : wide_(std::move(wide)), local_(std::move(local)), index_(wide_->size(), -1) {
  if (static_cast<int>(local_ranks.size()) != local_->size() || local_ranks.at(local_->rank()) != wide_->rank())
    throw std::logic_error("RoutedTransport: the local transport does not connect the ranks named");
  for (int i = 0; i < static_cast<int>(local_ranks.size()); ++i) index_.at(local_ranks[i]) = i;
}

std::unique_ptr<Request> RoutedTransport::isend(const void* data, size_t bytes, int peer, uint32_t tag) {
  const int i = index_.at(peer);
  return i >= 0 ? local_->isend(data, bytes, i, tag) : wide_->isend(data, bytes, peer, tag);
}

std::unique_ptr<Request> RoutedTransport::irecv(void* data, size_t bytes, int peer, uint32_t tag) {
  const int i = index_.at(peer);
  return i >= 0 ? local_->irecv(data, bytes, i, tag) : wide_->irecv(data, bytes, peer, tag);
}

void RoutedTransport::group_start() {
  wide_->group_start();
  local_->group_start();
}

void RoutedTransport::group_end() {
  local_->group_end();
  wide_->group_end();
}

int RoutedTransport::lookahead() const { return std::min(wide_->lookahead(), local_->lookahead()); }

void RoutedTransport::abort() {
  local_->abort();
  wide_->abort();
}

void RoutedTransport::close() {
  local_->close();
  wide_->close();
}

}  // namespace ringzip
