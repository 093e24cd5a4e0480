#include "transport/subset.h"

#include <algorithm>
#include <stdexcept>

namespace ringzip {

SubsetTransport::SubsetTransport(Transport& parent, std::vector<int> ranks)
    : parent_(parent), ranks_(std::move(ranks)) {
  const auto it = std::find(ranks_.begin(), ranks_.end(), parent_.rank());
  if (it == ranks_.end()) throw std::logic_error("SubsetTransport: the ranks do not include this rank");
  rank_ = static_cast<int>(it - ranks_.begin());
}

std::unique_ptr<Request> SubsetTransport::irecv_any(void*, size_t, uint32_t) {
  throw std::logic_error("SubsetTransport: receives from any source are not supported");
}

}  // namespace ringzip
