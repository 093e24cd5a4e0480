#include "backend/compression.h"

#include <algorithm>
#include <stdexcept>

namespace ringzip {

std::string Compression::key_of(const at::Tensor& t, int64_t numel) {
  return std::to_string(reinterpret_cast<uintptr_t>(t.storage().unsafeGetStorageImpl())) + ":" +
         std::to_string(t.storage_offset()) + ":" + std::to_string(numel);
}

Compression::Call Compression::begin_call(const at::Tensor& t, int64_t numel, bool feedback, at::Device device) {
  std::lock_guard<std::mutex> lock(mu_);
  Call call{calls_++, {}};
  if (!feedback) return call;
  const std::string key = key_of(t, numel);
  for (auto& e : entries_) {
    if (e.key == key && e.live()) {
      e.last_use = call.number;
      call.residual = e.residual;
      return call;
    }
  }
  // A tensor seen for the first time (compression.h): an awaiting residual of its size, else a
  // free one, the least recently used first; else a new one.
  Entry* pick = nullptr;
  for (Bind want : {Bind::Awaiting, Bind::Free}) {
    for (auto& e : entries_) {
      const bool ok = want == Bind::Awaiting ? e.bind == Bind::Awaiting : e.free();
      if (ok && e.residual.numel() == numel && (!pick || e.last_use < pick->last_use)) pick = &e;
    }
    if (pick) break;
  }
  if (!pick) {
    entries_.push_back(Entry{at::zeros({numel}, at::TensorOptions().dtype(at::kFloat).device(device))});
    pick = &entries_.back();
  } else if (pick->residual.device() != device) {
    pick->residual = pick->residual.to(device);  // restored on another device (checkpoint)
  }
  pick->bind = Bind::Live;
  pick->key = key;
  pick->owner = c10::weak_intrusive_ptr<c10::StorageImpl>(t.storage().getWeakStorageImpl());
  pick->last_use = call.number;
  call.residual = pick->residual;
  return call;
}

void Compression::release(const std::vector<at::Tensor>& tensors) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& t : tensors) {
    const std::string key = key_of(t, t.numel());
    for (auto& e : entries_) {
      if (e.key == key && e.live()) {
        e.bind = Bind::Awaiting;
        e.key.clear();
        e.owner = c10::weak_intrusive_ptr<c10::StorageImpl>(c10::intrusive_ptr<c10::StorageImpl>());
      }
    }
  }
}

void Compression::record(const std::string& codec, const CodecStats& d) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& s = stats_[codec];
  s.calls += d.calls;
  s.bytes_in += d.bytes_in;
  s.bytes_sent += d.bytes_sent;
  s.bytes_dense_equiv += d.bytes_dense_equiv;
  s.codec_seconds += d.codec_seconds;
  s.total_seconds += d.total_seconds;
  s.overflows += d.overflows;
  s.bytes_intra_node += d.bytes_intra_node;
}

std::map<std::string, CodecStats> Compression::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Compression::reset_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.clear();
}

Compression::State Compression::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  State out;
  out.calls = calls_;
  for (const auto& e : entries_) out.residuals.push_back({e.last_use, !e.free(), e.residual.clone()});
  std::sort(out.residuals.begin(), out.residuals.end(),
            [](const SavedResidual& a, const SavedResidual& b) { return a.last_use < b.last_use; });
  return out;
}

void Compression::load_state(const State& state) {
  std::vector<Entry> entries;
  for (const auto& r : state.residuals) {
    // A copy: the caller's tensors stay theirs (and a later step must not change a saved state).
    Entry e{r.values.to(at::kFloat).contiguous().view({-1}).clone(), r.last_use, r.bound ? Bind::Awaiting : Bind::Free};
    entries.push_back(std::move(e));
  }
  std::lock_guard<std::mutex> lock(mu_);
  entries_ = std::move(entries);
  calls_ = state.calls;
}

int64_t Compression::residual_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t b = 0;
  for (const auto& e : entries_) b += e.residual.nbytes();
  return b;
}

}  // namespace ringzip
